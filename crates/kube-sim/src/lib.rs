//! kube-sim: an embeddable Kubernetes API server.
//!
//! It speaks the Kubernetes REST API closely enough that the real kube-rs
//! client and runtime, and the real kubectl, drive it unchanged: one global
//! resourceVersion, optimistic concurrency, generation, the status
//! subresource, finalizers, merge and JSON patches, selectors, consistent
//! paging, watches with bookmarks and 410 expiry, CRDs and discovery.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let sim = kube_sim::KubeSim::builder().start().await?;
//! let client = sim.client();
//! let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
//! let _ = pods.list(&Default::default()).await?;
//! sim.shutdown().await;
//! # Ok(()) }
//! ```

mod admission;
pub mod apply;
mod crd;
pub mod credentials;
mod defaults;
pub mod differential;
mod error;
mod event_view;
pub mod field_validation;
mod go_shape;
// exec + kubelet: simulated pods/exec and KWOK-like kubelet/scheduler
pub mod exec;
mod http;
pub mod kubelet;
pub mod lane;
mod metrics;
mod names;
mod object;
mod patch;
pub mod protobuf;
mod rbac;
mod resources;
pub mod schema;
pub mod security;
mod selector;
mod server;
mod store;
mod timeouts;
pub mod tls;
pub mod tokens;
mod validate;
mod workloads;

pub use error::ApiError;
pub use http::auth::Authorization;
// faults: fault injection API (http/faults.rs)
pub use http::faults::{Fault, FaultAction, FaultError, FaultStatus, Faults, Verb};
pub use metrics::Metrics;
pub use server::{Error, KubeSim, KubeSimBuilder, kubeconfig_for, kubeconfig_yaml};
pub use store::{DATABASE_FILE, DataDirError, Stats};
pub use timeouts::{ConnectionTimeouts, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT};
// exec + kubelet
pub use exec::{ExecHandlers, ExecMatcher, ExecOutput, ExecRequest};
pub use kubelet::KubeletConfig;
