//! State shared by the reconcilers of one process: the caches, the Node
//! catalog, the cluster plan per input revision, cleanup requests and
//! acknowledgements, projection outcomes, and the latest rack result per
//! inventory (read by status).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::node_meta::NodeMeta;
use controller_kit::CachedStore;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use parking_lot::Mutex;

use super::allocation::{LiveAllocation, SyncWork};
use super::events::Events;
use super::metrics::Metrics;
use super::nodes::LiveNodes;
use super::policies::PolicyEvaluations;
use crate::api::{SGPUInventory, SGPURack, SGPURackProfile, SGPURackStatus, SGPURuntimePolicy};
use crate::plan::catalog::NodeCatalog;
use crate::plan::inventory::{
    CleanupNeeded, CleanupReason, ClusterPlan, ExactBinding, OwnershipConflict, ProfileIssue,
    plan_admission,
};
use crate::plan::options::Options;
use crate::plan::projection::ObservedNode;

/// Where a slot's projection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutcomeState {
    Projected,
    Cleaned,
    Absent,
    Conflict,
    Error,
}

/// The latest projection outcome of one rack slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub state: OutcomeState,
    /// `Projected`, `Cleaned`, `ExactNodeAbsent`, `NodeMetadataConflict`,
    /// `DuplicateBinding` or `ProjectionError`.
    pub reason: &'static str,
    pub inventory_uid: String,
    pub node_uid: String,
}

/// What the last full reconcile of an inventory found, for its status.
#[derive(Clone, Debug, Default)]
pub struct RackResult {
    pub uid: String,
    pub issues: Vec<ProfileIssue>,
    pub conflicts: Vec<OwnershipConflict>,
    pub racks_missing: usize,
}

/// Projection cleanups requested by the rack reconciler and their
/// acknowledgements by the projection reconciler: a binding is cleared
/// only after its Node's projected keys are gone.
#[derive(Default)]
pub struct CleanupBook {
    /// Node name → bindings whose projection must be removed.
    pub requested: HashMap<String, BTreeMap<ExactBinding, CleanupReason>>,
    /// Cleanups that finished: the binding's metadata is gone.
    pub acknowledged: HashSet<ExactBinding>,
    /// Cleanups blocked by a foreign co-owner, with the Node state seen then.
    pub blocked: HashMap<ExactBinding, ObservedNode>,
}

impl CleanupBook {
    pub fn is_requested(&self, binding: &ExactBinding) -> bool {
        self.requested
            .get(&binding.node.name)
            .is_some_and(|requests| requests.contains_key(binding))
    }
}

/// (rack resourceVersion, Node resourceVersion) and whether the slot was projected then.
/// Whether each slot's Node carries its projection, for one version of one
/// rack: slot index → (the Node's resourceVersion, the answer).
#[derive(Debug, Default)]
pub(crate) struct RackProjections {
    pub rack_version: String,
    pub slots: HashMap<i32, (String, bool)>,
}

/// An inventory's requested-Node counts (total, per group) and what they
/// were computed from: the catalog generation and the groups' selectors.
pub(crate) type RequestedAt = (
    u64,
    Vec<(String, Option<LabelSelector>)>,
    (usize, BTreeMap<String, usize>),
);

/// The cluster plan and the allocation revision it was computed at.
type CachedPlan = ((u64, u64), Arc<ClusterPlan>);

pub(crate) struct Context {
    pub client: kube::Client,
    pub options: Options,
    pub profiles: CachedStore<SGPURackProfile>,
    pub inventories: CachedStore<SGPUInventory>,
    pub racks: CachedStore<SGPURack>,
    pub nodes: CachedStore<NodeMeta>,
    pub policies: CachedStore<SGPURuntimePolicy>,
    /// Policy evaluations per inventory, cached per input revision.
    pub evaluations: PolicyEvaluations,
    pub live_nodes: LiveNodes,
    pub events: Events,
    pub metrics: Metrics,
    pub catalog: Mutex<NodeCatalog>,
    /// Bumped by every inventory, profile and rack event.
    pub topology: AtomicU64,
    plan: Mutex<Option<CachedPlan>>,
    /// The incremental allocation behind `plan`.
    pub allocation: Mutex<LiveAllocation>,
    pub cleanup: Mutex<CleanupBook>,
    /// Rack name → slot index → the slot's last projection outcome.
    outcomes: Mutex<HashMap<String, HashMap<i32, Outcome>>>,
    pub results: Mutex<HashMap<String, RackResult>>,
    /// Desired rack name → the inventory that claims it.
    pub claims: Mutex<HashMap<String, String>>,
    inventory_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Whether a slot's Node carries its projection, per rack name, kept
    /// per (rack, Node) resourceVersion pair (status reads it for every
    /// binding; per rack, so a pass looks a rack up once, not per slot).
    pub projected_memo: Mutex<HashMap<String, RackProjections>>,
    /// Requested-Node counts per inventory: matching every Node against the
    /// placement selectors costs O(Nodes) and the inventory status needs
    /// them once per progress interval, while they change only with the
    /// catalog generation or the selectors.
    pub requested_memo: Mutex<HashMap<String, RequestedAt>>,
    /// Rack status writes not yet seen in the cache (name → written status).
    pub pending_rack_status: Mutex<HashMap<String, SGPURackStatus>>,
    /// Counts changes of the read API's inputs (racks, inventories,
    /// profiles, policies); long-polls wait on it.
    pub changes: tokio::sync::watch::Sender<u64>,
}

impl Context {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: kube::Client,
        options: Options,
        profiles: CachedStore<SGPURackProfile>,
        inventories: CachedStore<SGPUInventory>,
        racks: CachedStore<SGPURack>,
        nodes: CachedStore<NodeMeta>,
        policies: CachedStore<SGPURuntimePolicy>,
        live_nodes: LiveNodes,
        events: Events,
        metrics: Metrics,
    ) -> Self {
        Self {
            client,
            options,
            profiles,
            inventories,
            racks,
            nodes,
            policies,
            evaluations: PolicyEvaluations::default(),
            live_nodes,
            events,
            metrics,
            catalog: Mutex::new(NodeCatalog::default()),
            topology: AtomicU64::new(0),
            plan: Mutex::new(None),
            allocation: Mutex::new(LiveAllocation::default()),
            cleanup: Mutex::new(CleanupBook::default()),
            outcomes: Mutex::new(HashMap::new()),
            results: Mutex::new(HashMap::new()),
            claims: Mutex::new(HashMap::new()),
            inventory_locks: Mutex::new(HashMap::new()),
            projected_memo: Mutex::new(HashMap::new()),
            requested_memo: Mutex::new(HashMap::new()),
            pending_rack_status: Mutex::new(HashMap::new()),
            changes: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Wakes every long-poll: an input of the read API changed.
    pub fn inputs_changed(&self) {
        self.changes.send_modify(|counter| *counter += 1);
    }

    /// The allocation revision: (topology counter, Node catalog generation).
    pub fn revision(&self) -> (u64, u64) {
        (
            self.topology.load(Ordering::SeqCst),
            self.catalog.lock().generation(),
        )
    }

    /// The cluster plan for the current revision, computed once per revision.
    pub fn cluster_plan(&self) -> Arc<ClusterPlan> {
        let revision = self.revision();
        let mut cached = self.plan.lock();
        if let Some((at, plan)) = cached.as_ref()
            && *at == revision
        {
            return Arc::clone(plan);
        }
        let profiles: HashMap<String, Arc<SGPURackProfile>> = self
            .profiles
            .state()
            .into_iter()
            .filter_map(|profile| Some((profile.metadata.name.clone()?, profile)))
            .collect();
        let admitted = plan_admission(&self.inventories.state(), &profiles, &self.racks.state());
        let (allocation, work): (_, SyncWork) = {
            let mut live = self.allocation.lock();
            let allocation =
                live.allocation(admitted.groups, &mut self.catalog.lock(), &self.racks);
            (allocation, live.last_sync())
        };
        self.metrics.allocation_update(work.rebuilt);
        let plan = Arc::new(ClusterPlan {
            resolutions: admitted.resolutions,
            admission: admitted.admission,
            allocation,
        });
        *cached = Some((revision, Arc::clone(&plan)));
        plan
    }

    /// The lock serialising the work of one inventory.
    pub fn inventory_lock(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        Arc::clone(
            self.inventory_locks
                .lock()
                .entry(name.to_string())
                .or_default(),
        )
    }

    pub fn set_outcome(&self, binding: &ExactBinding, state: OutcomeState, reason: &'static str) {
        let mut outcomes = self.outcomes.lock();
        let rack = outcomes.entry(binding.rack_name.clone()).or_default();
        rack.insert(
            binding.node_index,
            Outcome {
                state,
                reason,
                inventory_uid: binding.inventory_uid.clone(),
                node_uid: binding.node.uid.clone(),
            },
        );
    }

    pub fn outcome(&self, rack: &str, node_index: i32) -> Option<Outcome> {
        self.outcomes
            .lock()
            .get(rack)
            .and_then(|slots| slots.get(&node_index))
            .cloned()
    }

    /// Whether any slot of `rack` has a metadata-conflict outcome.
    pub fn rack_has_conflict(&self, rack: &SGPURack) -> bool {
        let name = rack.metadata.name.as_deref().unwrap_or_default();
        let outcomes = self.outcomes.lock();
        let Some(slots) = outcomes.get(name) else {
            return false;
        };
        rack.spec.nodes.iter().any(|slot| {
            slots
                .get(&slot.index)
                .is_some_and(|o| o.reason == "NodeMetadataConflict")
        })
    }

    /// Drops outcomes of a rack that is gone.
    pub fn forget_rack(&self, rack_name: &str) {
        self.outcomes.lock().remove(rack_name);
        self.projected_memo.lock().remove(rack_name);
        self.pending_rack_status.lock().remove(rack_name);
    }

    /// Replaces an inventory's cleanup requests (those of one rack group
    /// when `group` is given) with `cleanups`; returns the Node names that
    /// need a projection pass (new requests, and bindings whose
    /// acknowledgement was revoked because the plan keeps them).
    pub fn update_cleanups(
        &self,
        inventory_uid: &str,
        group: Option<&str>,
        cleanups: &[CleanupNeeded],
        releasing: &HashSet<ExactBinding>,
    ) -> Vec<String> {
        let in_scope = |binding: &ExactBinding| {
            binding.inventory_uid == inventory_uid && group.is_none_or(|g| binding.group == g)
        };
        let mut book = self.cleanup.lock();
        let mut touched = Vec::new();
        let wanted: HashSet<&ExactBinding> = cleanups.iter().map(|c| &c.binding).collect();
        for (node, requests) in book.requested.iter_mut() {
            let before = requests.len();
            requests.retain(|binding, _| !in_scope(binding) || wanted.contains(binding));
            if requests.len() != before {
                touched.push(node.clone());
            }
        }
        book.requested.retain(|_, requests| !requests.is_empty());
        for cleanup in cleanups {
            if book.acknowledged.contains(&cleanup.binding) {
                continue;
            }
            let requests = book
                .requested
                .entry(cleanup.binding.node.name.clone())
                .or_default();
            if requests
                .insert(cleanup.binding.clone(), cleanup.reason)
                .is_none()
            {
                touched.push(cleanup.binding.node.name.clone());
            }
        }
        // An acknowledgement of a binding the plan keeps (neither cleaning nor
        // clearing it) is obsolete: revoke it and project again.
        let racks = &self.racks;
        let revoked: Vec<ExactBinding> = book
            .acknowledged
            .iter()
            .filter(|binding| in_scope(binding))
            .filter(|binding| !wanted.contains(binding) && !releasing.contains(binding))
            .filter(|binding| {
                racks
                    .get(&binding.rack_name)
                    .and_then(|rack| ExactBinding::of(&rack, binding.node_index))
                    .as_ref()
                    == Some(*binding)
            })
            .cloned()
            .collect();
        for binding in revoked {
            book.acknowledged.remove(&binding);
            touched.push(binding.node.name.clone());
        }
        touched.sort();
        touched.dedup();
        touched
    }

    /// A binding's slot was cleared or its rack deleted: its acknowledgement
    /// is no longer needed.
    pub fn released<'a>(&self, bindings: impl IntoIterator<Item = &'a ExactBinding>) {
        let mut book = self.cleanup.lock();
        for binding in bindings {
            book.acknowledged.remove(binding);
            book.blocked.remove(binding);
        }
    }

    pub fn acknowledged(&self, binding: &ExactBinding) -> bool {
        self.cleanup.lock().acknowledged.contains(binding)
    }
}
