//! kube-sim driven by the real kube-rs client and runtime, in-process and
//! over loopback HTTP.

mod crd;
mod crud;
mod faults;
mod kubectl_parity;
mod lifecycle;
mod selectors;
mod support;
mod watch;
mod exec;
mod kubelet;
