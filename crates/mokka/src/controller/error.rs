//! Why a Mokka reconcile failed, and how each failure is counted and retried.
//!
//! Every queue of a term (inventories, groups, projections, status) returns
//! [`ReconcileError`]; controller-kit's worker loop counts it in
//! `reconcile_errors_total{controller, error}` under
//! [`ReconcileFailure::metric_label`] and retries it as
//! [`ReconcileFailure::retry`] says:
//!
//! * transient failures (the API server unavailable or throttling, a live
//!   Node GET that timed out, a status write that failed) back off through
//!   the queue's rate limiter, as upstream Mokka retries every error;
//! * optimistic-concurrency conflicts and a cache that is behind (a rack
//!   we wrote that the cache does not show yet, an inventory replaced under
//!   the same name) run again after [`CONFLICT_RETRY`]: the watch event
//!   that brings the cache up to date queues the key by itself, so this is
//!   only the safety net and its delay does not grow;
//! * runtime policies that cannot be evaluated wait for a change: the
//!   evaluation is a pure function of the policies, inventory and profile,
//!   so it fails the same way until one of them changes, and each change
//!   queues the inventory's policies again.
//!
//! An invalid rack profile or a rack name owned by another object is not an
//! error: it is a condition on the inventory, written by the status queue.

use std::time::Duration;

use controller_kit::error::is_status;
use controller_kit::{ReconcileFailure, Retry};

use super::nodes::LiveNodeError;
use super::racks::RackError;

/// How long a key that met a conflict or a stale cache waits before it runs
/// again, unless a watch event queues it sooner.
pub(crate) const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// Why one reconcile of a Mokka queue failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReconcileError {
    /// A rack or inventory write of the rack reconciles.
    #[error(transparent)]
    Rack(#[from] RackError),
    /// A live GET of a Node the filtered cache does not hold.
    #[error(transparent)]
    LiveNode(#[from] LiveNodeError),
    /// Another API call, by verb and resource.
    #[error("{call} {name:?}: {source}")]
    Api {
        call: ApiCall,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The runtime policies of an inventory could not be evaluated.
    #[error("evaluate runtime policies of SGPUInventory {inventory}: {message}")]
    PolicyEvaluation { inventory: String, message: String },
    /// Some policy status writes failed (the others were written).
    #[error("{}", failures.join("; "))]
    PolicyStatus { failures: Vec<String> },
    /// The live inventory has another UID than the cached one.
    #[error("inventory {0:?} was replaced; retrying status")]
    InventoryReplaced(String),
}

/// The API calls of the projection and status reconciles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiCall {
    /// Server-side apply of Mokka's labels and annotation on a Node.
    ApplyNode,
    GetRack,
    PatchRackStatus,
    GetInventory,
    UpdateInventoryStatus,
}

impl ApiCall {
    fn label(self) -> &'static str {
        match self {
            ApiCall::ApplyNode => "apply_node",
            ApiCall::GetRack => "get_rack",
            ApiCall::PatchRackStatus => "patch_rack_status",
            ApiCall::GetInventory => "get_inventory",
            ApiCall::UpdateInventoryStatus => "update_inventory_status",
        }
    }
}

impl std::fmt::Display for ApiCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ApiCall::ApplyNode => "apply projection to Node",
            ApiCall::GetRack => "get SGPURack",
            ApiCall::PatchRackStatus => "patch status of SGPURack",
            ApiCall::GetInventory => "get SGPUInventory",
            ApiCall::UpdateInventoryStatus => "update status of SGPUInventory",
        })
    }
}

impl ReconcileError {
    /// The API server's answer behind the failure, when there is one.
    fn answer(&self) -> Option<&kube::Error> {
        match self {
            ReconcileError::Rack(RackError::Api { source, .. })
            | ReconcileError::Rack(RackError::Inventory { source, .. })
            | ReconcileError::LiveNode(LiveNodeError::Api { source, .. })
            | ReconcileError::Api { source, .. } => Some(source),
            _ => None,
        }
    }

    /// A conflict or a stale cache: the next watch event settles it.
    fn settles_with_the_cache(&self) -> bool {
        matches!(
            self,
            ReconcileError::Rack(
                RackError::RackCacheStale
                    | RackError::Contended(_)
                    | RackError::InventoryContended(_)
            ) | ReconcileError::InventoryReplaced(_)
        ) || self.answer().is_some_and(|answer| is_status(answer, 409))
    }
}

impl ReconcileFailure for ReconcileError {
    fn metric_label(&self) -> &'static str {
        match self {
            ReconcileError::Rack(RackError::RackCacheStale)
            | ReconcileError::InventoryReplaced(_) => "cache_stale",
            _ if self.settles_with_the_cache() => "conflict",
            ReconcileError::Rack(RackError::Ownership(_)) => "rack_ownership",
            ReconcileError::Rack(RackError::Api { .. }) => "rack_write",
            ReconcileError::Rack(RackError::Inventory { .. }) => "inventory_finalizer",
            ReconcileError::Rack(RackError::Contended(_) | RackError::InventoryContended(_)) => {
                "conflict"
            }
            ReconcileError::LiveNode(LiveNodeError::Timeout { .. }) => "get_node_timeout",
            ReconcileError::LiveNode(LiveNodeError::Cancelled { .. }) => "cancelled",
            ReconcileError::LiveNode(LiveNodeError::Api { .. }) => "get_node",
            ReconcileError::Api { call, .. } => call.label(),
            ReconcileError::PolicyEvaluation { .. } => "policy_evaluation",
            ReconcileError::PolicyStatus { .. } => "update_policy_status",
        }
    }

    fn retry(&self) -> Retry {
        if self.settles_with_the_cache() {
            Retry::After(CONFLICT_RETRY)
        } else if let ReconcileError::PolicyEvaluation { .. } = self {
            Retry::AwaitChange
        } else {
            Retry::Backoff
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "Refused")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn each_mokka_failure_has_its_label_and_retry() {
        let conflict = Retry::After(CONFLICT_RETRY);
        let cases = [
            (
                ReconcileError::Rack(RackError::RackCacheStale),
                "cache_stale",
                conflict,
            ),
            (
                ReconcileError::InventoryReplaced("a100".to_string()),
                "cache_stale",
                conflict,
            ),
            (
                ReconcileError::Rack(RackError::Contended("rack-0".to_string())),
                "conflict",
                conflict,
            ),
            (
                ReconcileError::Rack(RackError::InventoryContended("a100".to_string())),
                "conflict",
                conflict,
            ),
            (
                ReconcileError::Api {
                    call: ApiCall::PatchRackStatus,
                    name: "rack-0".to_string(),
                    source: answer(409),
                },
                "conflict",
                conflict,
            ),
            (
                ReconcileError::Rack(RackError::Api {
                    rack: "rack-0".to_string(),
                    source: answer(500),
                }),
                "rack_write",
                Retry::Backoff,
            ),
            (
                ReconcileError::Rack(RackError::Inventory {
                    inventory: "a100".to_string(),
                    source: answer(503),
                }),
                "inventory_finalizer",
                Retry::Backoff,
            ),
            (
                ReconcileError::Rack(RackError::Ownership("rack-0".to_string())),
                "rack_ownership",
                Retry::Backoff,
            ),
            (
                ReconcileError::LiveNode(LiveNodeError::Timeout {
                    name: "node-1".to_string(),
                    timeout: Duration::from_secs(5),
                }),
                "get_node_timeout",
                Retry::Backoff,
            ),
            (
                ReconcileError::LiveNode(LiveNodeError::Api {
                    name: "node-1".to_string(),
                    source: answer(429),
                }),
                "get_node",
                Retry::Backoff,
            ),
            (
                ReconcileError::Api {
                    call: ApiCall::ApplyNode,
                    name: "node-1".to_string(),
                    source: answer(500),
                },
                "apply_node",
                Retry::Backoff,
            ),
            (
                ReconcileError::Api {
                    call: ApiCall::UpdateInventoryStatus,
                    name: "a100".to_string(),
                    source: answer(503),
                },
                "update_inventory_status",
                Retry::Backoff,
            ),
            (
                ReconcileError::PolicyEvaluation {
                    inventory: "\"a100\"".to_string(),
                    message: "runtime cannot be encoded".to_string(),
                },
                "policy_evaluation",
                Retry::AwaitChange,
            ),
            (
                ReconcileError::PolicyStatus {
                    failures: vec!["update runtime policy \"p\" status: refused".to_string()],
                },
                "update_policy_status",
                Retry::Backoff,
            ),
        ];
        for (error, label, retry) in cases {
            assert_eq!(
                (error.metric_label(), error.retry()),
                (label, retry),
                "{error}"
            );
        }
    }

    #[test]
    fn a_failed_call_names_the_call_and_the_object() {
        let error = ReconcileError::Api {
            call: ApiCall::GetInventory,
            name: "a100".to_string(),
            source: answer(503),
        };
        assert!(
            error
                .to_string()
                .starts_with("get SGPUInventory \"a100\": "),
            "{error}"
        );
    }
}
