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
