//! Exporters: where records and change events go, and the pipeline that
//! batches, retries and buffers in front of them.
//!
//! This is the only part of the crate that does I/O. The shape:
//!
//! ```text
//! collector ──submit──▶ ExportPipeline (bounded queue, batching, retries) ──▶ Exporter
//! ```
//!
//! Every backend implements [`Exporter`]; [`ExportPipeline`] works in front
//! of any of them, so a failing backend never makes the collector run again
//! (upstream re-executed `nvidia-smi` on every node for every retry) and an
//! outage followed by a recovery loses nothing that was accepted.
//!
//! Backends: [`StdoutExporter`] (NDJSON on a writer), [`HttpExporter`]
//! (JSON POST with an `Idempotency-Key`), [`PostgresExporter`] (current
//! state plus append-only events, versioned migrations, upstream's table as
//! a view) and [`S3Exporter`] (one object per batch, keys that cannot
//! collide). [`AnyExporter`] picks one from the validated configuration.
//!
//! Dependency choices. HTTP and S3 share one hyper-util client on rustls
//! with the `ring` provider, the same stack kube uses, so the tree keeps a
//! single crypto provider (`cargo tree -p gpuid -i aws-lc-sys` finds
//! nothing). S3 requests are signed by `rusty-s3`, a sans-IO SigV4
//! presigner with no TLS or runtime of its own: it builds in seconds,
//! whereas `aws-sdk-s3` costs about a minute of build time on this machine
//! and its current release needs a newer Rust than the workspace's 1.89.
//! PostgreSQL goes through `tokio-postgres` with a `deadpool-postgres` pool;
//! TLS through `tokio-postgres-rustls` on the same rustls/ring stack, with
//! libpq's sslmode semantics built in `postgres::tls` (tokio-postgres alone
//! has no certificate checks and only three of the six modes).

mod any;
mod batch;
mod client;
mod error;
mod http;
mod pipeline;
mod postgres;
mod retry;
mod s3;
mod stdout;

use std::future::Future;

pub use any::{AnyExporter, BuildError, ExportContext};
pub use batch::Batch;
pub use error::{ExportError, FailureClass, classify_status, parse_retry_after};
pub use http::HttpExporter;
pub use pipeline::{ExportPipeline, PipelineConfig, PipelineStats, ShutdownReport, SubmitError};
pub use postgres::{MIGRATIONS, PostgresExporter, PostgresNames, SessionSecurity};
pub use retry::{RetryPolicy, backoff_delay};
pub use s3::{S3Credentials, S3Exporter, S3Format, S3Settings, object_key, render_partition};
pub use stdout::{LINE_SCHEMA_VERSION, RECORD_KIND, StdoutExporter, batch_lines};

/// Whether an exporter can currently deliver. Readiness uses it: a pod whose
/// backend is down reports not-ready instead of pretending (upstream's
/// `/readyz` was always 200).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Unhealthy { reason: String },
}

impl Health {
    pub fn is_healthy(&self) -> bool {
        matches!(self, Health::Healthy)
    }

    pub(crate) fn unhealthy(reason: impl Into<String>) -> Health {
        Health::Unhealthy {
            reason: reason.into(),
        }
    }
}

/// A backend that receives batches.
///
/// `export` must be idempotent for the same batch: the pipeline retries a
/// batch whose outcome it could not observe (a timeout after the server
/// committed), so every backend keys its writes by record key, event id or
/// batch id. Errors say whether a retry can help ([`FailureClass`]).
pub trait Exporter: Send + Sync + 'static {
    /// Short name for logs and metrics (`stdout`, `http`, `postgres`, `s3`).
    fn name(&self) -> &'static str;

    fn export(&self, batch: &Batch) -> impl Future<Output = Result<(), ExportError>> + Send;

    fn health(&self) -> impl Future<Output = Health> + Send;
}
