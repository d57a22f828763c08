//! The operator's Prometheus metrics, under both of upstream's names: the
//! tf-operator ones (`tf_operator_jobs_*_total{job_namespace}`, which old
//! dashboards query) and training-operator's
//! (`training_operator_jobs_*_total{job_namespace,framework="tensorflow"}`).
//! Job counters move once per transition, never per pass (upstream counted
//! success and failure on every pass and "failed" on restarts).

use std::time::Duration;

use controller_kit::MetricsRegistry;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

type Labels = Vec<(String, String)>;

/// One job counter under the legacy and the training-operator name.
#[derive(Clone, Default)]
pub struct JobCounter {
    legacy: Family<Labels, Counter>,
    training_operator: Family<Labels, Counter>,
}

impl JobCounter {
    fn register(
        &self,
        registry: &mut prometheus_client::registry::Registry,
        what: &str,
        help: &str,
    ) {
        registry.register(
            format!("tf_operator_jobs_{what}"),
            help,
            self.legacy.clone(),
        );
        registry.register(
            format!("training_operator_jobs_{what}"),
            help,
            self.training_operator.clone(),
        );
    }

    pub fn inc(&self, namespace: &str) {
        let namespace_label = ("job_namespace".to_string(), namespace.to_string());
        self.legacy
            .get_or_create(&vec![namespace_label.clone()])
            .inc();
        self.training_operator
            .get_or_create(&vec![
                namespace_label,
                ("framework".to_string(), "tensorflow".to_string()),
            ])
            .inc();
    }
}

/// Buckets in seconds for reconcile passes (milliseconds to seconds).
const RECONCILE_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];
/// Buckets in seconds from a job's creation to its first Running.
const TIME_TO_RUNNING_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

#[derive(Clone)]
pub struct Metrics {
    pub jobs_created: JobCounter,
    pub jobs_deleted: JobCounter,
    pub jobs_successful: JobCounter,
    pub jobs_failed: JobCounter,
    pub jobs_restarted: JobCounter,
    pub created_pods: Counter,
    pub deleted_pods: Counter,
    pub failed_pods: Counter,
    pub created_services: Counter,
    pub failed_services: Counter,
    pub created_pod_groups: Counter,
    pub deleted_pod_groups: Counter,
    /// Every reconcile pass (its `_count` is the number of passes).
    pub reconcile_duration: Histogram,
    /// Job creation to its first Running condition.
    pub time_to_running: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            jobs_created: JobCounter::default(),
            jobs_deleted: JobCounter::default(),
            jobs_successful: JobCounter::default(),
            jobs_failed: JobCounter::default(),
            jobs_restarted: JobCounter::default(),
            created_pods: Counter::default(),
            deleted_pods: Counter::default(),
            failed_pods: Counter::default(),
            created_services: Counter::default(),
            failed_services: Counter::default(),
            created_pod_groups: Counter::default(),
            deleted_pod_groups: Counter::default(),
            reconcile_duration: Histogram::new(RECONCILE_BUCKETS),
            time_to_running: Histogram::new(TIME_TO_RUNNING_BUCKETS),
        }
    }
}

impl Metrics {
    /// Registers every metric in `registry`.
    pub fn register(registry: &MetricsRegistry) -> Metrics {
        let metrics = Metrics::default();
        let mut r = registry.write();
        metrics
            .jobs_created
            .register(&mut r, "created", "TFJobs seen for the first time");
        metrics
            .jobs_deleted
            .register(&mut r, "deleted", "TFJobs deleted by their TTL");
        metrics
            .jobs_successful
            .register(&mut r, "successful", "TFJobs that succeeded");
        metrics
            .jobs_failed
            .register(&mut r, "failed", "TFJobs that failed");
        metrics.jobs_restarted.register(
            &mut r,
            "restarted",
            "TFJobs that went Restarting (a replica re-created)",
        );
        r.register("created_pods", "Pods created", metrics.created_pods.clone());
        r.register("deleted_pods", "Pods deleted", metrics.deleted_pods.clone());
        r.register(
            "failed_pods",
            "Pod creations that failed",
            metrics.failed_pods.clone(),
        );
        r.register(
            "succeeded_service_creation",
            "Services created",
            metrics.created_services.clone(),
        );
        r.register(
            "failed_service_creation",
            "Service creations that failed",
            metrics.failed_services.clone(),
        );
        r.register(
            "created_pod_groups",
            "PodGroups created (gang scheduling)",
            metrics.created_pod_groups.clone(),
        );
        r.register(
            "deleted_pod_groups",
            "PodGroups deleted (gang scheduling)",
            metrics.deleted_pod_groups.clone(),
        );
        r.register(
            "training_operator_reconcile_duration_seconds",
            "Duration of one TFJob reconcile pass",
            metrics.reconcile_duration.clone(),
        );
        r.register(
            "training_operator_job_time_to_running_seconds",
            "Time from a TFJob's creation to its first Running condition",
            metrics.time_to_running.clone(),
        );
        metrics
    }

    pub fn observe_reconcile(&self, took: Duration) {
        self.reconcile_duration.observe(took.as_secs_f64());
    }
}
