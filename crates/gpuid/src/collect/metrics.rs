//! Collector metrics. No metric carries a pod label (unbounded cardinality
//! upstream); GPUs per node is labelled by node, which is bounded by the
//! fleet.

use std::sync::atomic::AtomicU64;

use controller_kit::MetricsRegistry;
use parking_lot::Mutex;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::export::PipelineStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExporterResult {
    pub exporter: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExporterLabel {
    pub exporter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    pub node: String,
}

/// Outcome of processing one pod (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodResult {
    /// Collected and handed to the exporter (changed inventory or heartbeat).
    Exported,
    /// Collected; the inventory equals the exported one.
    Unchanged,
    /// Not collectable now (not ready, terminating, already collected).
    Skipped,
    Error,
}

impl PodResult {
    pub fn as_str(self) -> &'static str {
        match self {
            PodResult::Exported => "exported",
            PodResult::Unchanged => "unchanged",
            PodResult::Skipped => "skipped",
            PodResult::Error => "error",
        }
    }
}

/// Every collector metric, registered once per process.
#[derive(Clone)]
pub struct CollectorMetrics {
    pub pods_processed: Family<ResultLabel, Counter>,
    pub collection_duration: Histogram,
    pub exec_errors: Family<ReasonLabel, Counter>,
    pub records_exported: Family<ExporterResult, Counter>,
    pub batches_exported: Family<ExporterResult, Counter>,
    pub export_retries: Family<ExporterLabel, Counter>,
    pub last_export_success: Family<ExporterLabel, Gauge<f64, AtomicU64>>,
    pub export_queue_batches: Gauge,
    pub node_gpus: Family<NodeLabel, Gauge>,
    /// The pipeline counters already turned into metrics.
    seen: std::sync::Arc<Mutex<PipelineStats>>,
}

impl CollectorMetrics {
    pub fn register(registry: &MetricsRegistry) -> CollectorMetrics {
        let metrics = CollectorMetrics {
            pods_processed: Family::default(),
            collection_duration: Histogram::new([
                0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
            ]),
            exec_errors: Family::default(),
            records_exported: Family::default(),
            batches_exported: Family::default(),
            export_retries: Family::default(),
            last_export_success: Family::default(),
            export_queue_batches: Gauge::default(),
            node_gpus: Family::default(),
            seen: Default::default(),
        };
        let mut registry = registry.write();
        registry.register(
            "gpuid_pods_processed",
            "Device-plugin pods processed, by result",
            metrics.pods_processed.clone(),
        );
        registry.register(
            "gpuid_collection_duration_seconds",
            "Time to exec nvidia-smi and parse its output, per pod",
            metrics.collection_duration.clone(),
        );
        registry.register(
            "gpuid_exec_errors",
            "Failed collections, by reason",
            metrics.exec_errors.clone(),
        );
        registry.register(
            "gpuid_exported_records",
            "Records and change events handed to the backend, by exporter and result",
            metrics.records_exported.clone(),
        );
        registry.register(
            "gpuid_exported_batches",
            "Batches sent to the backend, by exporter and result",
            metrics.batches_exported.clone(),
        );
        registry.register(
            "gpuid_export_retries",
            "Failed export attempts that were retried",
            metrics.export_retries.clone(),
        );
        registry.register(
            "gpuid_last_successful_export_timestamp_seconds",
            "Unix time of the last successful export",
            metrics.last_export_success.clone(),
        );
        registry.register(
            "gpuid_export_queue_batches",
            "Sealed batches waiting for the backend",
            metrics.export_queue_batches.clone(),
        );
        registry.register(
            "gpuid_node_gpus",
            "GPUs in the last collected inventory of each node",
            metrics.node_gpus.clone(),
        );
        metrics
    }

    pub fn pod_processed(&self, result: PodResult) {
        self.pods_processed
            .get_or_create(&ResultLabel {
                result: result.as_str().to_owned(),
            })
            .inc();
    }

    pub fn exec_error(&self, reason: &str) {
        self.exec_errors
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// Count of `pods_processed` for `result` (tests and benchmarks).
    pub fn pods_with(&self, result: PodResult) -> u64 {
        self.pods_processed
            .get_or_create(&ResultLabel {
                result: result.as_str().to_owned(),
            })
            .get()
    }

    pub fn exec_errors_with(&self, reason: &str) -> u64 {
        self.exec_errors
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .get()
    }

    /// Turns the pipeline's counters since the last call into metric increments.
    pub fn observe_pipeline(&self, exporter: &str, stats: &PipelineStats) {
        let mut seen = self.seen.lock();
        let delta = |now: u64, before: u64| now.saturating_sub(before);
        let labels = |result: &str| ExporterResult {
            exporter: exporter.to_owned(),
            result: result.to_owned(),
        };
        let exported_items = stats.records_exported + stats.events_exported;
        let seen_items = seen.records_exported + seen.events_exported;
        self.records_exported
            .get_or_create(&labels("success"))
            .inc_by(delta(exported_items, seen_items));
        self.records_exported
            .get_or_create(&labels("dropped"))
            .inc_by(delta(stats.dropped_items, seen.dropped_items));
        self.batches_exported
            .get_or_create(&labels("success"))
            .inc_by(delta(stats.batches_exported, seen.batches_exported));
        let failed = stats.permanent_failures + stats.dropped_after_retries;
        let seen_failed = seen.permanent_failures + seen.dropped_after_retries;
        self.batches_exported
            .get_or_create(&labels("failure"))
            .inc_by(delta(failed, seen_failed));
        let exporter_label = ExporterLabel {
            exporter: exporter.to_owned(),
        };
        self.export_retries
            .get_or_create(&exporter_label)
            .inc_by(delta(stats.retries, seen.retries));
        if let Some(at) = stats.last_success {
            self.last_export_success
                .get_or_create(&exporter_label)
                .set(at.as_millisecond() as f64 / 1000.0);
        }
        self.export_queue_batches
            .set(i64::try_from(stats.queued_batches).unwrap_or(i64::MAX));
        *seen = stats.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_counters_become_increments_not_totals() {
        let registry = MetricsRegistry::new();
        let metrics = CollectorMetrics::register(&registry);
        let mut stats = PipelineStats {
            records_exported: 10,
            batches_exported: 2,
            retries: 1,
            ..PipelineStats::default()
        };
        metrics.observe_pipeline("stdout", &stats);
        stats.records_exported = 15;
        stats.batches_exported = 3;
        metrics.observe_pipeline("stdout", &stats);
        let text = registry.encode().unwrap();
        assert!(
            text.contains(
                "gpuid_exported_records_total{exporter=\"stdout\",result=\"success\"} 15"
            ),
            "{text}"
        );
        assert!(
            text.contains("gpuid_export_retries_total{exporter=\"stdout\"} 1"),
            "{text}"
        );
        assert!(!text.contains("pod="), "no per-pod label");
    }
}
