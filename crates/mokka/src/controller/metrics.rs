//! The controller's Prometheus metrics (upstream has none): reconciles per
//! controller, allocation per inventory, projection conflicts.

use controller_kit::MetricsRegistry;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::plan::features::{FeatureGate, FeatureGates};

type Labels = Vec<(String, String)>;

/// Every metric the reconcilers update.
#[derive(Clone)]
pub struct Metrics {
    pub reconciles: Family<Labels, Counter>,
    pub reconcile_errors: Family<Labels, Counter>,
    pub reconcile_duration: Family<Labels, Histogram>,
    pub bound: Family<Labels, Gauge>,
    pub pending: Family<Labels, Gauge>,
    pub released: Family<Labels, Gauge>,
    pub capacity: Family<Labels, Gauge>,
    pub projection_conflicts: Counter,
    pub rack_writes: Family<Labels, Counter>,
    pub node_patches: Counter,
    /// Racks a reconcile rendered and compared, per scope (`inventory`,
    /// `group`).
    pub racks_visited: Family<Labels, Counter>,
    /// Cluster-plan allocations, per `kind`: `incremental` (the kept
    /// `Allocator` fed the changes) or `rebuild` (built from the whole input).
    pub allocation_updates: Family<Labels, Counter>,
    /// The feature gates in force: 1 on, 0 off, per gate `name`.
    pub features: Family<Labels, Gauge>,
}

fn duration_histogram() -> Histogram {
    Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])
}

impl Metrics {
    /// Registers every metric in `registry`.
    pub fn register(registry: &MetricsRegistry) -> Metrics {
        let metrics = Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(duration_histogram),
            bound: Family::default(),
            pending: Family::default(),
            released: Family::default(),
            capacity: Family::default(),
            projection_conflicts: Counter::default(),
            rack_writes: Family::default(),
            node_patches: Counter::default(),
            racks_visited: Family::default(),
            allocation_updates: Family::default(),
            features: Family::default(),
        };
        let mut r = registry.write();
        r.register(
            "mokka_reconcile",
            "Reconciles per controller",
            metrics.reconciles.clone(),
        );
        r.register(
            "mokka_reconcile_errors",
            "Failed reconciles per controller",
            metrics.reconcile_errors.clone(),
        );
        r.register(
            "mokka_reconcile_duration_seconds",
            "Reconcile duration per controller",
            metrics.reconcile_duration.clone(),
        );
        r.register(
            "mokka_allocation_bound_nodes",
            "Bound rack slots per inventory",
            metrics.bound.clone(),
        );
        r.register(
            "mokka_allocation_pending_nodes",
            "Nodes waiting for capacity per inventory",
            metrics.pending.clone(),
        );
        r.register(
            "mokka_allocation_released_nodes",
            "Bindings waiting for cleanup per inventory",
            metrics.released.clone(),
        );
        r.register(
            "mokka_allocation_capacity_nodes",
            "Logical Node capacity per inventory",
            metrics.capacity.clone(),
        );
        r.register(
            "mokka_projection_conflicts",
            "Node projections refused because another manager owns a key",
            metrics.projection_conflicts.clone(),
        );
        r.register(
            "mokka_rack_writes",
            "Rack creates, updates and deletes",
            metrics.rack_writes.clone(),
        );
        r.register(
            "mokka_node_patches",
            "Node projection applies",
            metrics.node_patches.clone(),
        );
        r.register(
            "mokka_racks_visited",
            "Racks rendered and compared by rack reconciles, per scope (inventory or group)",
            metrics.racks_visited.clone(),
        );
        r.register(
            "mokka_allocation_updates",
            "Cluster-plan allocations, incremental or rebuilt from the whole input",
            metrics.allocation_updates.clone(),
        );
        r.register(
            "mokka_feature_enabled",
            "Feature gates in force (--feature-gates): 1 on, 0 off, per gate name",
            metrics.features.clone(),
        );
        metrics
    }

    pub(crate) fn set_features(&self, gates: &FeatureGates) {
        for (gate, enabled) in gates.states() {
            self.features
                .get_or_create(&Self::label("name", gate.name()))
                .set(i64::from(enabled));
        }
    }

    /// The `mokka_feature_enabled` value of one gate (1 on, 0 off).
    pub fn feature_enabled(&self, gate: FeatureGate) -> i64 {
        self.features
            .get_or_create(&Self::label("name", gate.name()))
            .get()
    }

    pub(crate) fn label(key: &str, value: &str) -> Labels {
        vec![(key.to_string(), value.to_string())]
    }

    pub(crate) fn observe(&self, controller: &str, seconds: f64, ok: bool) {
        let labels = Self::label("controller", controller);
        self.reconciles.get_or_create(&labels).inc();
        if !ok {
            self.reconcile_errors.get_or_create(&labels).inc();
        }
        self.reconcile_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    pub(crate) fn rack_write(&self, verb: &str) {
        self.rack_writes
            .get_or_create(&Self::label("verb", verb))
            .inc();
    }

    pub(crate) fn allocation_update(&self, rebuilt: bool) {
        let kind = if rebuilt { "rebuild" } else { "incremental" };
        self.allocation_updates
            .get_or_create(&Self::label("kind", kind))
            .inc();
    }

    /// Cluster-plan allocations of one kind (`incremental`, `rebuild`).
    pub fn allocation_updates_of(&self, kind: &str) -> u64 {
        self.allocation_updates
            .get_or_create(&Self::label("kind", kind))
            .get()
    }

    pub(crate) fn racks_visited(&self, scope: &str, racks: usize) {
        self.racks_visited
            .get_or_create(&Self::label("scope", scope))
            .inc_by(racks as u64);
    }

    /// Racks rendered and compared by reconciles of one scope (`inventory`
    /// or `group`), for tests and benchmarks.
    pub fn racks_visited_in(&self, scope: &str) -> u64 {
        self.racks_visited
            .get_or_create(&Self::label("scope", scope))
            .get()
    }

    /// Rack writes of one verb (`create`, `update`, `delete`).
    pub fn rack_writes_with_verb(&self, verb: &str) -> u64 {
        self.rack_writes
            .get_or_create(&Self::label("verb", verb))
            .get()
    }

    /// Total rack writes (all verbs), for tests and benchmarks.
    pub fn rack_write_count(&self) -> u64 {
        ["create", "update", "delete"]
            .iter()
            .map(|verb| {
                self.rack_writes
                    .get_or_create(&Self::label("verb", verb))
                    .get()
            })
            .sum()
    }
}
