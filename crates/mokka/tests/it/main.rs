//! Integration tests of the public surface: generated CRDs and the example manifests.

mod crds;
mod examples;
mod mokka_e2e;
mod mokka_faults;
mod mokka_features;
mod mokka_leader_faults;
mod mokka_logs;
mod node_api_reviews;
