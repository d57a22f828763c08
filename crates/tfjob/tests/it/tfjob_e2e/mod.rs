//! End to end on both lanes (kube-sim by default, the real control plane
//! with `GPUFLEET_TEST_CLUSTER=real`, one test at a time): `core` holds the
//! scenarios of issue 15, `policies` those of issue 16, `sdk` the Kubeflow
//! Python SDK reading our TFJobs.

mod core;
mod gang;
mod policies;
mod sdk;
