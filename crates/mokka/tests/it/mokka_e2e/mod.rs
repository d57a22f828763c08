//! End-to-end tests of the Mokka controller through the real kube client,
//! on kube-sim by default and on the real control plane with
//! `GPUFLEET_TEST_CLUSTER=real`. Tests are named after the behaviour
//! upstream's test scenarios state (the lifecycle; standby, caches and
//! promotion), one sentence each.

mod caches;
mod dropin;
mod groups;
mod lifecycle;
mod node_api;
mod policies;
mod replicas;
mod restarts;
pub(crate) mod support;
