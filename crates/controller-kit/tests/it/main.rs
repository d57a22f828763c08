//! Integration tests against kube-sim (an in-process Kubernetes API server).

mod caches;
mod events;
mod leader;
mod leader_outage;
mod support;
