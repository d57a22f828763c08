//! kube-sim driven by the real kube-rs client and runtime, in-process and
//! over loopback HTTP, and by kubectl.

mod admission_e2e;
mod apply;
mod crd;
mod crud;
mod data_dir;
mod differential_e2e;
mod events;
mod eviction;
mod exec;
mod faults;
mod gc;
mod goclient_e2e;
mod kubectl_parity;
mod kubectl_workloads;
mod kubelet;
mod lifecycle;
mod openapi_v2;
mod protobuf;
mod python_client;
mod rbac_e2e;
mod security;
mod selectors;
mod support;
mod tokens;
mod validation;
mod watch;
mod workloads_e2e;
