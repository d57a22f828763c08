//! Work-queue metrics under client-go's names, one label set per queue name.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

use crate::metrics::ReconcileMetrics;

/// The `name` label client-go puts on every work-queue metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue's name.
    pub name: String,
}

type HistogramFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // client-go: 10 exponential buckets from 10 ns by a factor of 10 (up to 10 s).
    Histogram::new(exponential_buckets(1e-8, 10.0, 10))
}

/// The metric families shared by every queue registered in one registry.
///
/// Register once per process (`WorkQueueMetrics::register`) and hand a clone to every
/// queue; each queue then reports under its own `name` label.
#[derive(Clone, Debug)]
pub struct WorkQueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    unfinished_work: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    longest_running: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    reconcile: ReconcileMetrics,
    registered: bool,
}

impl Default for WorkQueueMetrics {
    /// Metrics that are recorded but exposed nowhere (for queues in tests and benchmarks).
    fn default() -> Self {
        Self {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(latency_histogram),
            work_duration: Family::new_with_constructor(latency_histogram),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
            reconcile: ReconcileMetrics::default(),
            registered: false,
        }
    }
}

impl WorkQueueMetrics {
    /// Creates the families and registers them in `registry` under client-go's names.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            registered: true,
            ..Self::default()
        };
        registry.register(
            "workqueue_depth",
            "Current depth of the work queue",
            metrics.depth.clone(),
        );
        // prometheus-client appends `_total` to counters.
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by the work queue",
            metrics.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by the work queue",
            metrics.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds a key stays in the work queue before being requested",
            metrics.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing a key from the work queue takes",
            metrics.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "Seconds of work in progress that has not been observed by work_duration; large values suggest stuck workers",
            metrics.unfinished_work.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest running processor of the work queue has been running",
            metrics.longest_running.clone(),
        );
        metrics.reconcile.register(registry);
        metrics
    }

    /// The failed-reconcile counters that travel with these queue metrics.
    pub fn reconcile(&self) -> &ReconcileMetrics {
        &self.reconcile
    }

    pub(crate) fn for_queue(&self, name: &str) -> QueueMetrics {
        let labels = QueueLabels {
            name: name.to_string(),
        };
        QueueMetrics {
            depth: self.depth.get_or_create(&labels).clone(),
            adds: self.adds.get_or_create(&labels).clone(),
            retries: self.retries.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            unfinished_work: self.unfinished_work.get_or_create(&labels).clone(),
            longest_running: self.longest_running.get_or_create(&labels).clone(),
            reconcile: self.reconcile.clone(),
            exposed: self.registered,
        }
    }
}

/// The metric handles of one queue.
#[derive(Clone, Debug)]
pub(crate) struct QueueMetrics {
    pub depth: Gauge,
    pub adds: Counter,
    pub retries: Counter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
    pub unfinished_work: Gauge<f64, AtomicU64>,
    pub longest_running: Gauge<f64, AtomicU64>,
    /// Where the worker loop over this queue counts failed reconciles.
    pub reconcile: ReconcileMetrics,
    /// Whether anyone can read these; the periodic in-progress update is skipped otherwise.
    pub exposed: bool,
}
