//! The process-wide Prometheus registry, shared by every component and served on `/metrics`.

use std::sync::Arc;

use parking_lot::{RwLock, RwLockWriteGuard};
use prometheus_client::registry::{Metric, Registry};

/// The OpenMetrics text content type `/metrics` answers with.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A cloneable handle to one registry; clones register into and encode the same metrics.
#[derive(Clone, Debug, Default)]
pub struct MetricsRegistry {
    registry: Arc<RwLock<Registry>>,
}

impl MetricsRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers one metric.
    pub fn register(&self, name: &str, help: &str, metric: impl Metric) {
        self.registry.write().register(name, help, metric);
    }

    /// Exclusive access, for registering several metrics (or metric sets) at once.
    pub fn write(&self) -> RwLockWriteGuard<'_, Registry> {
        self.registry.write()
    }

    /// Every metric in OpenMetrics text format.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry.read())?;
        Ok(text)
    }
}

/// The labels of `reconcile_errors_total`: which controller (worker pool) failed and
/// the failure's [`metric_label`](crate::controller::ReconcileFailure::metric_label).
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ReconcileErrorLabels {
    /// The controller, as its worker pool is named.
    pub controller: String,
    /// What failed, a small fixed set per controller.
    pub error: String,
}

/// Failed reconciles by controller and kind of failure, counted by the worker loop.
///
/// It travels with the work-queue metrics (every queue carries a handle), so whoever
/// registers [`WorkQueueMetrics`](crate::WorkQueueMetrics) exposes it too and the worker
/// loop needs no second handle.
#[derive(Clone, Debug, Default)]
pub struct ReconcileMetrics {
    errors: prometheus_client::metrics::family::Family<
        ReconcileErrorLabels,
        prometheus_client::metrics::counter::Counter,
    >,
}

impl ReconcileMetrics {
    /// Registers the family as `reconcile_errors_total` (the client appends `_total`).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "reconcile_errors",
            "Failed reconciles per controller and kind of error",
            self.errors.clone(),
        );
    }

    /// Counts one failure of `controller` labelled `error`.
    pub fn failed(&self, controller: &str, error: &str) {
        self.errors
            .get_or_create(&Self::labels(controller, error))
            .inc();
    }

    /// How many failures of `controller` were labelled `error`.
    pub fn errors_of(&self, controller: &str, error: &str) -> u64 {
        self.errors
            .get_or_create(&Self::labels(controller, error))
            .get()
    }

    fn labels(controller: &str, error: &str) -> ReconcileErrorLabels {
        ReconcileErrorLabels {
            controller: controller.to_string(),
            error: error.to_string(),
        }
    }
}
