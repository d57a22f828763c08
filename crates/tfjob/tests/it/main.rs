//! The TFJob operator end to end: the CRD installed from the types, the
//! operator on controller-kit, pods run by kube-sim's simulated kubelet or by KWOK.
//! One binary; the cluster comes from `support::test_cluster` alone (the
//! lane switch `GPUFLEET_TEST_CLUSTER=sim|real`).

mod operator_admin;
mod referee_corpus;
mod referee_e2e;
mod referee_process;
mod support;
mod tfjob_e2e;
mod tfjob_faults;
mod tfjob_leader_faults;
