//! Planning one inventory's racks (allocation, capacity admission and the
//! rack reconcile, as upstream Mokka does them), pure: resolution of
//! its groups, cluster-wide admission and allocation inputs, and the rack
//! creates, updates and retirements a full reconcile makes, with the
//! projection cleanups that must finish before a binding is cleared.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::allocate::{
    Allocation, AllocationError, AllocationInput, Binding, GroupInput, GroupKey, NodeInput,
    ReleaseReason, allocate,
};
use crate::api::{NodeRef, SGPUInventory, SGPURack, SGPURackProfile};
use crate::identity::rack_name;
use crate::inventory::{InventoryError, validate_inventory};
use crate::limits::{
    Admission, AdmissionCandidate, AdmissionOutcome, CAPACITY_EXCEEDED, Capacity, GroupShape,
    admit, aggregate_rejection_message, check_declared_racks, inventory_capacity,
};
use crate::plan::rack::{
    is_owned_by, merge_rack, owner_matches_inventory_ref, rack_differs, rack_object,
};
use crate::render::{RackCoordinate, RenderError, ResolvedProfile, render_resolved_rack};

/// Why a group's profile does not resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IssueKind {
    NotFound,
    Invalid,
}

/// A group whose profile is missing, invalid, or does not render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileIssue {
    pub group: String,
    pub profile: String,
    pub kind: IssueKind,
    pub message: String,
}

/// A group that renders: its shape and resolved profile.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedGroup {
    pub id: String,
    pub count: i32,
    pub selector: Option<LabelSelector>,
    pub profile: Arc<ResolvedProfile>,
}

/// Why an inventory is not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// One inventory's groups, resolved against the cached profiles.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    pub name: String,
    pub uid: String,
    pub deleting: bool,
    pub rejection: Option<Rejection>,
    pub groups: Vec<ResolvedGroup>,
    pub issues: Vec<ProfileIssue>,
    /// Capacity of the resolved groups (zero when rejected).
    pub capacity: Capacity,
}

impl Resolution {
    pub fn group(&self, id: &str) -> Option<&ResolvedGroup> {
        self.groups.iter().find(|group| group.id == id)
    }

    pub fn has_issue(&self, group: &str) -> bool {
        self.issues.iter().any(|issue| issue.group == group)
    }
}

/// Resolves an inventory in upstream's order: validation, declared racks,
/// profiles (missing, invalid, rack 0 does not render), capacity.
pub fn resolve<'a>(
    inventory: &SGPUInventory,
    profile: impl Fn(&str) -> Option<&'a SGPURackProfile>,
) -> Resolution {
    let name = inventory.metadata.name.clone().unwrap_or_default();
    let uid = inventory.metadata.uid.clone().unwrap_or_default();
    let mut resolution = Resolution {
        name: name.clone(),
        uid: uid.clone(),
        deleting: inventory.metadata.deletion_timestamp.is_some(),
        rejection: None,
        groups: Vec::new(),
        issues: Vec::new(),
        capacity: Capacity::default(),
    };
    if let Err(error) = validate_inventory(inventory) {
        resolution.rejection = Some(Rejection {
            reason: InventoryError::REASON.to_string(),
            message: error.to_string(),
        });
        return resolution;
    }
    if let Err(error) = check_declared_racks(inventory) {
        resolution.rejection = Some(Rejection {
            reason: CAPACITY_EXCEEDED.to_string(),
            message: error.to_string(),
        });
        return resolution;
    }
    let mut shapes = Vec::new();
    for group in &inventory.spec.rack_groups {
        let profile_name = group.profile_ref.name.clone();
        let issue = |kind: IssueKind, message: String| ProfileIssue {
            group: group.id.clone(),
            profile: profile_name.clone(),
            kind,
            message,
        };
        let Some(profile) = profile(&group.profile_ref.name) else {
            resolution.issues.push(issue(
                IssueKind::NotFound,
                format!("profile {:?} not found", group.profile_ref.name),
            ));
            continue;
        };
        let resolved = match ResolvedProfile::resolve(profile) {
            Ok(resolved) => resolved,
            Err(error) => {
                resolution
                    .issues
                    .push(issue(IssueKind::Invalid, error.to_string()));
                continue;
            }
        };
        let rack_zero = RackCoordinate {
            inventory_name: &name,
            inventory_uid: &uid,
            group: &group.id,
            rack_index: 0,
            rack_count: group.count,
        };
        if let Err(error) = render_resolved_rack(rack_zero, &resolved) {
            resolution
                .issues
                .push(issue(IssueKind::Invalid, error.to_string()));
            continue;
        }
        shapes.push(GroupShape {
            id: group.id.clone(),
            racks: i64::from(group.count),
            nodes_per_rack: i64::from(resolved.nodes_per_rack()),
            gpus_per_node: i64::from(resolved.gpus_per_node()),
        });
        resolution.groups.push(ResolvedGroup {
            id: group.id.clone(),
            count: group.count,
            selector: group
                .placement
                .as_ref()
                .and_then(|placement| placement.node_selector.clone()),
            profile: Arc::new(resolved),
        });
    }
    match inventory_capacity(&shapes) {
        Ok(capacity) => resolution.capacity = capacity,
        Err(error) => {
            resolution.rejection = Some(Rejection {
                reason: CAPACITY_EXCEEDED.to_string(),
                message: error.to_string(),
            });
            resolution.groups.clear();
        }
    }
    resolution
}

/// Capacity a set of racks holds now.
pub fn held_capacity<'a>(racks: impl IntoIterator<Item = &'a SGPURack>) -> Capacity {
    let mut held = Capacity::default();
    for rack in racks {
        held.racks += 1;
        held.nodes += rack.spec.nodes.len() as i64;
        held.gpus += rack
            .spec
            .nodes
            .iter()
            .map(|node| node.gpus.len() as i64)
            .sum::<i64>();
    }
    held
}

/// Everything the cluster-wide plan depends on.
pub struct ClusterInput<'a> {
    pub inventories: Vec<Arc<SGPUInventory>>,
    pub profiles: &'a HashMap<String, Arc<SGPURackProfile>>,
    pub racks: Vec<Arc<SGPURack>>,
    pub nodes: Arc<Vec<NodeInput>>,
}

/// The plan shared by every inventory for one input revision: resolutions,
/// admission and the allocation.
#[derive(Clone, Debug)]
pub struct ClusterPlan {
    pub resolutions: HashMap<(String, String), Resolution>,
    pub admission: Admission,
    pub allocation: Result<Allocation, AllocationError>,
}

impl ClusterPlan {
    pub fn resolution(&self, name: &str, uid: &str) -> Option<&Resolution> {
        self.resolutions.get(&(name.to_string(), uid.to_string()))
    }
}

/// The bindings a rack contributes to allocation: none unless its owner
/// matches its inventory reference.
pub fn rack_bindings(rack: &SGPURack) -> Vec<Binding> {
    if !owner_matches_inventory_ref(rack) {
        return Vec::new();
    }
    let key = Arc::new(GroupKey::new(
        &rack.spec.inventory_ref.name,
        &rack.spec.inventory_ref.uid,
        &rack.spec.identity.rack_group,
    ));
    rack.spec
        .nodes
        .iter()
        .filter_map(|node| {
            Some(Binding {
                group: Arc::clone(&key),
                rack_index: rack.spec.identity.rack_index,
                node_index: node.index,
                node: Arc::new(node.node_ref.clone()?),
            })
        })
        .collect()
}

/// The cluster plan without its allocation: resolutions, admission, and
/// the groups allocation runs for.
#[derive(Clone, Debug)]
pub struct AdmissionPlan {
    pub resolutions: HashMap<(String, String), Resolution>,
    pub admission: Admission,
    /// The groups of admitted inventories, the allocation's group input.
    pub groups: Vec<GroupInput>,
}

/// Resolves every inventory and admits them cluster-wide (no allocation):
/// linear in inventories and racks, never in Nodes.
pub fn plan_admission(
    inventories: &[Arc<SGPUInventory>],
    profiles: &HashMap<String, Arc<SGPURackProfile>>,
    racks: &[Arc<SGPURack>],
) -> AdmissionPlan {
    let mut resolutions = HashMap::new();
    let mut held_by: HashMap<String, Vec<&SGPURack>> = HashMap::new();
    for rack in racks {
        if !owner_matches_inventory_ref(rack) {
            continue;
        }
        held_by
            .entry(rack.spec.inventory_ref.uid.clone())
            .or_default()
            .push(rack);
    }
    let mut candidates = Vec::new();
    for inventory in inventories {
        let resolution = resolve(inventory, |name| {
            profiles.get(name).map(|profile| profile.as_ref())
        });
        let held_racks: Vec<&SGPURack> = held_by.get(&resolution.uid).cloned().unwrap_or_default();
        let held = held_capacity(held_racks.iter().copied());
        let target = (resolution.rejection.is_none() && !resolution.groups.is_empty()).then(|| {
            // Groups whose profile fails keep their last-good racks, which stay charged.
            let kept = held_capacity(
                held_racks
                    .iter()
                    .copied()
                    .filter(|rack| resolution.has_issue(&rack.spec.identity.rack_group)),
            );
            Capacity {
                racks: resolution.capacity.racks + kept.racks,
                nodes: resolution.capacity.nodes + kept.nodes,
                gpus: resolution.capacity.gpus + kept.gpus,
            }
        });
        candidates.push(AdmissionCandidate {
            name: resolution.name.clone(),
            uid: resolution.uid.clone(),
            created: inventory.metadata.creation_timestamp.clone(),
            deleting: resolution.deleting,
            declared_groups: inventory.spec.rack_groups.len(),
            target,
            held,
        });
        resolutions.insert(
            (resolution.name.clone(), resolution.uid.clone()),
            resolution,
        );
    }
    let admission = admit(&candidates);
    let mut groups = Vec::new();
    let mut ordered: Vec<&Resolution> = resolutions.values().collect();
    ordered.sort_by(|a, b| (&a.name, &a.uid).cmp(&(&b.name, &b.uid)));
    for resolution in ordered {
        if resolution.deleting || resolution.rejection.is_some() {
            continue;
        }
        let admitted = matches!(
            admission.outcome(&resolution.name, &resolution.uid),
            Some(AdmissionOutcome::Ready | AdmissionOutcome::Pending)
        );
        if !admitted {
            continue;
        }
        for group in &resolution.groups {
            groups.push(GroupInput {
                key: GroupKey::new(&resolution.name, &resolution.uid, &group.id),
                selector: group.selector.clone(),
                racks: group.count,
                nodes_per_rack: group.profile.nodes_per_rack(),
            });
        }
    }
    AdmissionPlan {
        resolutions,
        admission,
        groups,
    }
}

/// Resolves every inventory, admits them cluster-wide, and allocates Nodes
/// to the groups of admitted inventories (from scratch; the controller
/// keeps an incremental `Allocator` equal to this allocation instead).
pub fn plan_cluster(input: &ClusterInput<'_>) -> ClusterPlan {
    let admitted = plan_admission(&input.inventories, input.profiles, &input.racks);
    let bindings = input
        .racks
        .iter()
        .flat_map(|rack| rack_bindings(rack))
        .collect();
    let allocation = allocate(&AllocationInput {
        groups: admitted.groups,
        nodes: input.nodes.as_ref().clone(),
        bindings,
    });
    ClusterPlan {
        resolutions: admitted.resolutions,
        admission: admitted.admission,
        allocation,
    }
}

/// One bound slot of one exact rack, as cleanup acknowledgements key it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExactBinding {
    pub inventory_name: String,
    pub inventory_uid: String,
    pub group: String,
    pub rack_name: String,
    pub rack_uid: String,
    pub rack_index: i32,
    pub node_index: i32,
    pub node: NodeRef,
}

impl ExactBinding {
    /// The binding of `rack`'s slot `node_index`, if bound.
    pub fn of(rack: &SGPURack, node_index: i32) -> Option<ExactBinding> {
        // Slots are stored in index order, so the position usually is the index.
        let node = usize::try_from(node_index)
            .ok()
            .and_then(|position| rack.spec.nodes.get(position))
            .filter(|slot| slot.index == node_index)
            .or_else(|| rack.spec.node_by_index(node_index))?;
        let node_ref = node.node_ref.clone()?;
        Some(ExactBinding {
            inventory_name: rack.spec.inventory_ref.name.clone(),
            inventory_uid: rack.spec.inventory_ref.uid.clone(),
            group: rack.spec.identity.rack_group.clone(),
            rack_name: rack.metadata.name.clone().unwrap_or_default(),
            rack_uid: rack.metadata.uid.clone().unwrap_or_default(),
            rack_index: rack.spec.identity.rack_index,
            node_index,
            node: node_ref,
        })
    }

    /// Every bound slot of `rack`.
    pub fn all_of(rack: &SGPURack) -> Vec<ExactBinding> {
        rack.spec
            .nodes
            .iter()
            .filter_map(|node| ExactBinding::of(rack, node.index))
            .collect()
    }
}

/// Why a binding's projection must be cleaned up (upstream `release` reasons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CleanupReason {
    Released(ReleaseReason),
    CapacityRejected,
    RackDeleting,
    InventoryDeleting,
}

impl CleanupReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Released(reason) => reason.as_str(),
            Self::CapacityRejected => "CapacityRejected",
            Self::RackDeleting => "RackDeleting",
            Self::InventoryDeleting => "InventoryDeleting",
        }
    }
}

/// A projection cleanup the rack reconciler waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CleanupNeeded {
    pub binding: ExactBinding,
    pub reason: CleanupReason,
}

/// A desired rack name held by an object this inventory does not own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnershipConflict {
    pub rack_name: String,
    pub group: String,
    pub owner_uid: String,
}

/// One rack write.
#[derive(Clone, Debug, PartialEq)]
pub enum RackWrite {
    /// A rack missing from the cache.
    Create(Box<SGPURack>),
    /// An owned rack whose controller fields differ (the merged object keeps
    /// the cached resourceVersion as the precondition).
    Update {
        desired: Box<SGPURack>,
        /// The profile revision changed (a re-render), for logs and events.
        rerendered: bool,
        /// Bindings this write adds, for logs and events.
        bound: Vec<ExactBinding>,
        /// Bindings this write clears after their cleanup.
        released: Vec<Release>,
    },
    /// A retired rack with every cleanup done: drop our finalizer, then
    /// delete with UID and resourceVersion preconditions.
    Delete {
        rack: Arc<SGPURack>,
        /// Why the rack is retired.
        reason: CleanupReason,
        released: Vec<Release>,
    },
}

/// A binding a rack write clears (its cleanup is acknowledged), and why
/// its Node was released, for logs and events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    pub binding: ExactBinding,
    pub reason: CleanupReason,
}

/// What a full inventory reconcile decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RackPlan {
    pub rejection: Option<Rejection>,
    /// Admitted, but growth must wait for capacity elsewhere.
    pub admission_pending: bool,
    pub issues: Vec<ProfileIssue>,
    pub conflicts: Vec<OwnershipConflict>,
    pub writes: Vec<RackWrite>,
    pub cleanups: Vec<CleanupNeeded>,
    /// Desired racks that do not exist yet (or are being replaced).
    pub racks_missing: usize,
    pub needs_finalizer: bool,
    /// Deleting and nothing left to retire: the inventory finalizer can go.
    pub release_finalizer: bool,
    /// Desired racks rendered and compared with their cached copy. A group
    /// plan skips every rack whose cached bindings already equal the
    /// allocation's, so this counts the racks a change really touched.
    pub visited: usize,
    /// A group plan met a state only the full inventory reconcile handles
    /// (deletion, rejection, pending admission, a missing finalizer, a group
    /// that no longer resolves); it planned nothing.
    pub needs_full_reconcile: bool,
}

/// What one reconcile covers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PlanScope {
    /// Every group of the inventory: retirement, re-render, creation.
    #[default]
    Inventory,
    /// One rack group (upstream's group reconcile, woken by Node and
    /// binding changes): its retirements and the racks whose bindings
    /// differ from the allocation; unchanged racks are not rendered.
    Group(String),
}

impl PlanScope {
    /// Whether a rack of `group` is planned in this scope.
    pub fn covers(&self, group: &str) -> bool {
        match self {
            Self::Inventory => true,
            Self::Group(id) => id == group,
        }
    }
}

/// What one full reconcile of an inventory sees.
pub struct RackPlanInput<'a> {
    pub inventory: &'a SGPUInventory,
    pub cluster: &'a ClusterPlan,
    /// Cached racks by name (all owners).
    pub rack_named: &'a dyn Fn(&str) -> Option<Arc<SGPURack>>,
    /// Cached racks owned by this exact inventory instance.
    pub owned: Vec<Arc<SGPURack>>,
    /// Whether a binding's projection cleanup is acknowledged.
    pub acknowledged: &'a dyn Fn(&ExactBinding) -> bool,
    pub scope: PlanScope,
}

/// Plans one full inventory reconcile.
pub fn plan_inventory(input: &RackPlanInput<'_>) -> RackPlan {
    let inventory = input.inventory;
    let name = inventory.metadata.name.clone().unwrap_or_default();
    let uid = inventory.metadata.uid.clone().unwrap_or_default();
    let mut plan = RackPlan::default();
    let has_finalizer = inventory
        .metadata
        .finalizers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|f| f == crate::plan::rack::FINALIZER_INVENTORY_CLEANUP);

    let scope = &input.scope;
    if let PlanScope::Group(group) = scope {
        let resolves = input
            .cluster
            .resolution(&name, &uid)
            .is_some_and(|resolution| {
                resolution.rejection.is_none()
                    && resolution.group(group).is_some()
                    && !resolution.has_issue(group)
            });
        let admitted = !matches!(
            input.cluster.admission.outcome(&name, &uid),
            Some(AdmissionOutcome::Rejected { .. } | AdmissionOutcome::Pending)
        );
        if inventory.metadata.deletion_timestamp.is_some()
            || !has_finalizer
            || !resolves
            || !admitted
        {
            plan.needs_full_reconcile = true;
            return plan;
        }
    }
    if inventory.metadata.deletion_timestamp.is_some() {
        for rack in &input.owned {
            retire(rack, CleanupReason::InventoryDeleting, input, &mut plan);
        }
        plan.release_finalizer = has_finalizer && input.owned.is_empty();
        return plan;
    }
    let Some(resolution) = input.cluster.resolution(&name, &uid) else {
        plan.rejection = Some(Rejection {
            reason: InventoryError::REASON.to_string(),
            message: InventoryError::IdentityMissing.to_string(),
        });
        return plan;
    };
    plan.issues = resolution.issues.clone();
    if let Some(rejection) = &resolution.rejection {
        // Invalid or over its own limits: nothing is written, last-good racks stay.
        plan.rejection = Some(rejection.clone());
        return plan;
    }
    match input.cluster.admission.outcome(&name, &uid) {
        Some(AdmissionOutcome::Rejected { .. }) => {
            plan.rejection = Some(Rejection {
                reason: CAPACITY_EXCEEDED.to_string(),
                message: aggregate_rejection_message(&name),
            });
            for rack in &input.owned {
                retire(rack, CleanupReason::CapacityRejected, input, &mut plan);
            }
            return plan;
        }
        Some(AdmissionOutcome::Pending) => {
            plan.admission_pending = true;
            return plan;
        }
        _ => {}
    }
    plan.needs_finalizer = !has_finalizer;
    let Ok(allocation) = &input.cluster.allocation else {
        return plan;
    };

    // Retire owned racks that are no longer desired.
    for rack in &input.owned {
        let group = &rack.spec.identity.rack_group;
        if !scope.covers(group) {
            continue;
        }
        let index = rack.spec.identity.rack_index;
        let reason = if rack.metadata.deletion_timestamp.is_some() {
            Some(CleanupReason::RackDeleting)
        } else if resolution.has_issue(group) {
            None
        } else {
            match resolution.group(group) {
                None => Some(CleanupReason::Released(ReleaseReason::GroupRemoved)),
                Some(resolved) if index >= resolved.count => {
                    Some(CleanupReason::Released(ReleaseReason::CapacityShrink))
                }
                Some(_) => {
                    let canonical = rack_name(&name, &uid, group, index.max(0) as u32);
                    (rack.metadata.name.as_deref() != Some(canonical.as_str()))
                        .then_some(CleanupReason::Released(ReleaseReason::GroupRemoved))
                }
            }
        };
        if let Some(reason) = reason {
            retire(rack, reason, input, &mut plan);
        }
    }

    let mut desired_by_group: HashMap<(&str, i32), Vec<&Binding>> = HashMap::new();
    for binding in &allocation.bindings {
        if binding.group.inventory_name == name && binding.group.inventory_uid == uid {
            desired_by_group
                .entry((binding.group.group.as_str(), binding.rack_index))
                .or_default()
                .push(binding);
        }
    }
    let release_reason: HashMap<(&str, i32, i32, &str), ReleaseReason> = allocation
        .released
        .iter()
        .filter(|release| {
            release.binding.group.inventory_name == name
                && release.binding.group.inventory_uid == uid
        })
        .map(|release| {
            (
                (
                    release.binding.group.group.as_str(),
                    release.binding.rack_index,
                    release.binding.node_index,
                    release.binding.node.uid.as_str(),
                ),
                release.reason,
            )
        })
        .collect();

    for group in &resolution.groups {
        if !scope.covers(&group.id) {
            continue;
        }
        for index in 0..group.count {
            let rack_name = rack_name(&name, &uid, &group.id, index as u32);
            let desired_bindings = desired_by_group.get(&(group.id.as_str(), index));
            if matches!(scope, PlanScope::Group(_))
                && (input.rack_named)(&rack_name).is_some_and(|existing| {
                    is_owned_by(&existing, &name, &uid)
                        && existing.metadata.deletion_timestamp.is_none()
                        && bindings_match(&existing, desired_bindings.map(Vec::as_slice))
                })
            {
                continue;
            }
            plan.visited += 1;
            let coordinate = RackCoordinate {
                inventory_name: &name,
                inventory_uid: &uid,
                group: &group.id,
                rack_index: index,
                rack_count: group.count,
            };
            let spec = match render_resolved_rack(coordinate, &group.profile) {
                Ok(spec) => spec,
                Err(error) => {
                    plan.issues.push(render_issue(group, &error));
                    break;
                }
            };
            let mut desired = rack_object(&rack_name, &name, &uid, spec);
            let existing = (input.rack_named)(&rack_name);
            if let Some(existing) = &existing {
                if !is_owned_by(existing, &name, &uid) {
                    plan.conflicts.push(OwnershipConflict {
                        rack_name: rack_name.clone(),
                        group: group.id.clone(),
                        owner_uid: crate::plan::rack::controller_owner(existing)
                            .map(|owner| owner.uid.clone())
                            .unwrap_or_default(),
                    });
                    continue;
                }
                if existing.metadata.deletion_timestamp.is_some() {
                    // Retired above; recreated once it is gone.
                    plan.racks_missing += 1;
                    continue;
                }
            }
            for binding in desired_bindings.into_iter().flatten() {
                if let Some(slot) = desired
                    .spec
                    .nodes
                    .iter_mut()
                    .find(|slot| slot.index == binding.node_index)
                {
                    slot.node_ref = Some(binding.node.as_ref().clone());
                }
            }
            let Some(existing) = existing else {
                plan.racks_missing += 1;
                plan.writes.push(RackWrite::Create(Box::new(desired)));
                continue;
            };
            // Keep every released binding until its cleanup is acknowledged.
            let mut released = Vec::new();
            for slot in &existing.spec.nodes {
                let Some(old) = &slot.node_ref else { continue };
                let Some(target) = desired
                    .spec
                    .nodes
                    .iter_mut()
                    .find(|t| t.index == slot.index)
                else {
                    continue;
                };
                if target.node_ref.as_ref() == Some(old) {
                    continue;
                }
                let Some(binding) = ExactBinding::of(&existing, slot.index) else {
                    continue;
                };
                let reason = CleanupReason::Released(
                    release_reason
                        .get(&(group.id.as_str(), index, slot.index, old.uid.as_str()))
                        .copied()
                        .unwrap_or(ReleaseReason::CapacityShrink),
                );
                if (input.acknowledged)(&binding) && target.node_ref.is_none() {
                    released.push(Release { binding, reason });
                } else {
                    target.node_ref = Some(old.clone());
                    plan.cleanups.push(CleanupNeeded { binding, reason });
                }
            }
            if let Err(error) = crate::render::validate_rack_spec(&desired.spec) {
                plan.issues.push(ProfileIssue {
                    group: group.id.clone(),
                    profile: group.profile.name.clone(),
                    kind: IssueKind::Invalid,
                    message: error.to_string(),
                });
                break;
            }
            if rack_differs(&existing, &desired) {
                let rerendered = existing.spec.profile_ref.revision
                    != desired.spec.profile_ref.revision
                    || existing.spec.without_bindings() != desired.spec.without_bindings();
                let bound =
                    desired
                        .spec
                        .nodes
                        .iter()
                        .filter(|slot| {
                            slot.node_ref.is_some()
                                && existing
                                    .spec
                                    .node_by_index(slot.index)
                                    .is_none_or(|old| old.node_ref != slot.node_ref)
                        })
                        .filter_map(|slot| {
                            let mut binding = ExactBinding::of(&existing, slot.index)
                                .unwrap_or_else(|| ExactBinding {
                                    inventory_name: name.clone(),
                                    inventory_uid: uid.clone(),
                                    group: group.id.clone(),
                                    rack_name: rack_name.clone(),
                                    rack_uid: existing.metadata.uid.clone().unwrap_or_default(),
                                    rack_index: index,
                                    node_index: slot.index,
                                    node: NodeRef::default(),
                                });
                            binding.node = slot.node_ref.clone()?;
                            Some(binding)
                        })
                        .collect();
                plan.writes.push(RackWrite::Update {
                    desired: Box::new(merge_rack(&existing, &desired)),
                    rerendered,
                    bound,
                    released,
                });
            }
        }
    }
    plan
}

/// Whether a cached rack's slots hold exactly the allocation's bindings for
/// its coordinate (a slot the allocation leaves empty is empty).
fn bindings_match(rack: &SGPURack, desired: Option<&[&Binding]>) -> bool {
    let desired = desired.unwrap_or_default();
    let bound = rack
        .spec
        .nodes
        .iter()
        .filter(|slot| slot.node_ref.is_some())
        .count();
    bound == desired.len()
        && desired.iter().all(|binding| {
            // Slots are stored in index order, so the position usually is the index.
            let slot = usize::try_from(binding.node_index)
                .ok()
                .and_then(|position| rack.spec.nodes.get(position))
                .filter(|slot| slot.index == binding.node_index)
                .or_else(|| rack.spec.node_by_index(binding.node_index));
            slot.and_then(|slot| slot.node_ref.as_ref()) == Some(binding.node.as_ref())
        })
}

fn render_issue(group: &ResolvedGroup, error: &RenderError) -> ProfileIssue {
    ProfileIssue {
        group: group.id.clone(),
        profile: group.profile.name.clone(),
        kind: IssueKind::Invalid,
        message: error.to_string(),
    }
}

/// Retires one rack: acknowledged slots are cleared; the others wait for
/// their cleanup; an empty rack is deleted.
fn retire(
    rack: &Arc<SGPURack>,
    reason: CleanupReason,
    input: &RackPlanInput<'_>,
    plan: &mut RackPlan,
) {
    let mut remaining = false;
    let mut cleared = (**rack).clone();
    let mut released = Vec::new();
    for binding in ExactBinding::all_of(rack) {
        if (input.acknowledged)(&binding) {
            if let Some(slot) = cleared
                .spec
                .nodes
                .iter_mut()
                .find(|slot| slot.index == binding.node_index)
            {
                slot.node_ref = None;
            }
            released.push(Release { binding, reason });
        } else {
            remaining = true;
            plan.cleanups.push(CleanupNeeded { binding, reason });
        }
    }
    if !remaining {
        plan.writes.push(RackWrite::Delete {
            rack: Arc::clone(rack),
            reason,
            released,
        });
    } else if !released.is_empty() {
        cleared.status = None;
        cleared.metadata.managed_fields = None;
        plan.writes.push(RackWrite::Update {
            desired: Box::new(cleared),
            rerendered: false,
            bound: Vec::new(),
            released,
        });
    }
}

/// Group IDs sorted and joined by `,` (status `rackGroupsSummary`).
pub fn rack_groups_summary(inventory: &SGPUInventory) -> String {
    let mut ids: Vec<&str> = inventory
        .spec
        .rack_groups
        .iter()
        .map(|group| group.id.as_str())
        .collect();
    ids.sort_unstable();
    ids.join(",")
}

/// Selector matches per group, for `requestedNodes` (distinct across groups).
pub fn requested_nodes(
    resolution: &Resolution,
    nodes: &[NodeInput],
) -> (usize, BTreeMap<String, usize>) {
    let compiled: Vec<(String, Option<crate::selector::PlacementSelector>)> = resolution
        .groups
        .iter()
        .map(|group| {
            (
                group.id.clone(),
                crate::selector::PlacementSelector::compile(group.selector.as_ref()).ok(),
            )
        })
        .collect();
    let mut per_group: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0;
    for node in nodes.iter().filter(|node| node.is_eligible()) {
        let mut any = false;
        for (id, selector) in &compiled {
            if selector.as_ref().is_some_and(|s| s.matches(&node.labels)) {
                *per_group.entry(id.clone()).or_default() += 1;
                any = true;
            }
        }
        if any {
            total += 1;
        }
    }
    (total, per_group)
}
