//! The TFJob operator end to end: the CRD installed from the types, the
//! operator on controller-kit, pods run by kube-sim's simulated kubelet.
//! One binary; the cluster comes from `support::test_cluster` alone.

mod e2e;
mod support;
