//! kube-sim's own metrics, served at `/metrics` in the OpenMetrics text
//! format: how many Kubernetes requests it answered and which faults it
//! injected, so a test can check that a fault really happened.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Content type of the `/metrics` answer.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub resource: String,
    pub code: String,
}

/// Who sent a request over the listener: the authenticated user (after
/// impersonation), `system:anonymous` without authentication. The
/// embedding process's own client and kube-sim's simulated kubelet,
/// scheduler and controllers do not pass the listener and are not counted
/// here.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UserRequestLabels {
    pub user: String,
    pub verb: String,
    pub resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FaultLabels {
    pub verb: String,
    pub resource: String,
    pub fault: String,
}

/// The counters of one kube-sim instance.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    user_requests: Family<UserRequestLabels, Counter>,
    faults: Family<FaultLabels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kube_sim");
        let requests = Family::<RequestLabels, Counter>::default();
        let user_requests = Family::<UserRequestLabels, Counter>::default();
        let faults = Family::<FaultLabels, Counter>::default();
        registry.register(
            "requests",
            "Kubernetes API requests answered, by verb, resource and HTTP code",
            requests.clone(),
        );
        // A second family rather than a `user` label on the first: tests
        // read the first by verb, resource and code alone. This one lets a
        // benchmark count what one client process sent (its own token) on a
        // server that others use too.
        registry.register(
            "user_requests",
            "Kubernetes API requests received over the listener, by user, verb and resource",
            user_requests.clone(),
        );
        registry.register(
            "faults_injected",
            "Faults injected into Kubernetes API requests, by verb, resource and fault kind",
            faults.clone(),
        );
        Self {
            registry,
            requests,
            user_requests,
            faults,
        }
    }

    pub fn request(&self, verb: &str, resource: &str, code: u16) {
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
                code: code.to_string(),
            })
            .inc();
    }

    pub fn user_request(&self, user: &str, verb: &str, resource: &str) {
        self.user_requests
            .get_or_create(&UserRequestLabels {
                user: user.to_string(),
                verb: verb.to_string(),
                resource: resource.to_string(),
            })
            .inc();
    }

    /// Current value of `kube_sim_user_requests_total` for one label set.
    pub fn user_requests(&self, user: &str, verb: &str, resource: &str) -> u64 {
        let labels = UserRequestLabels {
            user: user.to_string(),
            verb: verb.to_string(),
            resource: resource.to_string(),
        };
        self.user_requests.get(&labels).map_or(0, |c| c.get())
    }

    pub fn fault(&self, verb: &str, resource: &str, fault: &str) {
        self.faults
            .get_or_create(&FaultLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
                fault: fault.to_string(),
            })
            .inc();
    }

    /// Current value of `kube_sim_faults_injected_total` for one label set.
    pub fn faults_injected(&self, verb: &str, resource: &str, fault: &str) -> u64 {
        let labels = FaultLabels {
            verb: verb.to_string(),
            resource: resource.to_string(),
            fault: fault.to_string(),
        };
        self.faults.get(&labels).map_or(0, |c| c.get())
    }

    /// Current value of `kube_sim_requests_total` for one label set.
    pub fn requests(&self, verb: &str, resource: &str, code: u16) -> u64 {
        let labels = RequestLabels {
            verb: verb.to_string(),
            resource: resource.to_string(),
            code: code.to_string(),
        };
        self.requests.get(&labels).map_or(0, |c| c.get())
    }

    /// The OpenMetrics text exposition of every counter.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
