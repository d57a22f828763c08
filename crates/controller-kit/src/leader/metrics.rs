//! Leader-election metrics: client-go's `leader_election_master_status` and a
//! transitions counter.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The `name` label: the Lease name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ElectionLabels {
    /// The Lease name.
    pub name: String,
}

/// Metric families for every election in one registry.
#[derive(Clone, Debug, Default)]
pub struct LeaderElectionMetrics {
    master_status: Family<ElectionLabels, Gauge>,
    transitions: Family<ElectionLabels, Counter>,
}

impl LeaderElectionMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "leader_election_master_status",
            "1 while this replica leads the named lease, 0 otherwise",
            metrics.master_status.clone(),
        );
        // prometheus-client appends `_total`.
        registry.register(
            "leader_election_transitions",
            "Leadership changes of the named lease observed by this replica",
            metrics.transitions.clone(),
        );
        metrics
    }

    /// Creates the series of `name` at 0 so they are exposed before anything happens.
    pub(crate) fn init(&self, name: &str) {
        let labels = ElectionLabels {
            name: name.to_string(),
        };
        self.master_status.get_or_create(&labels).set(0);
        self.transitions.get_or_create(&labels).inc_by(0);
    }

    pub(crate) fn set_leading(&self, name: &str, leading: bool) {
        self.master_status
            .get_or_create(&ElectionLabels {
                name: name.to_string(),
            })
            .set(i64::from(leading));
    }

    pub(crate) fn transition(&self, name: &str) {
        self.transitions
            .get_or_create(&ElectionLabels {
                name: name.to_string(),
            })
            .inc();
    }

    /// Whether this replica currently reports itself as leader of `name`.
    pub fn is_leading(&self, name: &str) -> bool {
        self.master_status
            .get_or_create(&ElectionLabels {
                name: name.to_string(),
            })
            .get()
            == 1
    }
}
