//! Allocation: which Kubernetes Node fills which logical rack slot.
//!
//! The rules, in the order they apply:
//! - a valid existing binding never moves;
//! - an invalid one is released with a reason, and its coordinate stays
//!   occupied until the caller's cleanup removes the binding, so a new Node
//!   never lands on a slot whose old metadata may still be projected;
//! - new Nodes, oldest first by (creationTimestamp, name, uid), take the next
//!   free coordinate of the one group whose selector they match, rack-major;
//! - a Node matching several groups, or bound twice, is a conflict.
//!
//! The output is sorted, so it is the same for any order of the input lists.
//!
//! [`allocate`] plans from scratch and is the reference semantics.
//! [`Allocator`] keeps the input and the plan and updates both per change
//! (a Node event, a bound slot, the group list), re-classifying only what the
//! change touches; its plan always equals `allocate` over its input.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use thiserror::Error;

use crate::api::NodeRef;
use crate::selector::{PlacementSelector, SelectorError, is_eligible};
use crate::text::go_quote;

/// Identifies one rack group of one exact inventory instance.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupKey {
    pub inventory_name: String,
    pub inventory_uid: String,
    pub group: String,
}

impl GroupKey {
    pub fn new(inventory_name: &str, inventory_uid: &str, group: &str) -> Self {
        Self {
            inventory_name: inventory_name.to_string(),
            inventory_uid: inventory_uid.to_string(),
            group: group.to_string(),
        }
    }
}

/// A rack group that may receive Nodes (valid, resolved, admitted).
#[derive(Clone, Debug, PartialEq)]
pub struct GroupInput {
    pub key: GroupKey,
    pub selector: Option<LabelSelector>,
    pub racks: i32,
    pub nodes_per_rack: i32,
}

/// A Node as the allocator sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInput {
    pub name: String,
    pub uid: String,
    pub created: Option<Time>,
    /// Shared: the catalog, its sorted snapshot and every allocation input
    /// cloned from it hold one Node's labels once (at 10,000 Nodes each
    /// copy of every Node's labels was tens of MiB; docs/benchmarks.md).
    pub labels: Arc<BTreeMap<String, String>>,
    /// `metadata.deletionTimestamp` is set. A terminating Node is not
    /// eligible, as upstream's allocator (`eligible`) decides.
    pub terminating: bool,
}

impl NodeInput {
    /// Eligible for placement: labelled `mokka.nvidia.com/sgpu-node=true`
    /// and not terminating.
    pub fn is_eligible(&self) -> bool {
        !self.terminating && is_eligible(&self.labels)
    }

    pub fn node_ref(&self) -> NodeRef {
        NodeRef {
            name: self.name.clone(),
            uid: self.uid.clone(),
        }
    }
}

/// A Node bound to a logical slot: group, rack index and Node index. Key
/// and Node are shared (`Arc`), so plans copy bindings without allocating.
///
/// Ordered by group, rack index, Node index, then Node (field order).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Binding {
    pub group: Arc<GroupKey>,
    pub rack_index: i32,
    pub node_index: i32,
    pub node: Arc<NodeRef>,
}

/// Compares two shared values, skipping the content when both point at the
/// same allocation (bindings of one group share their key).
fn cmp_shared<T: Ord>(a: &Arc<T>, b: &Arc<T>) -> Ordering {
    if Arc::ptr_eq(a, b) {
        Ordering::Equal
    } else {
        a.as_ref().cmp(b.as_ref())
    }
}

impl Ord for Binding {
    fn cmp(&self, other: &Self) -> Ordering {
        // The same order a derive would give; the pointer check only saves
        // three string comparisons per step when sorting one group's slots.
        cmp_shared(&self.group, &other.group)
            .then(self.rack_index.cmp(&other.rack_index))
            .then(self.node_index.cmp(&other.node_index))
            .then_with(|| cmp_shared(&self.node, &other.node))
    }
}

impl PartialOrd for Binding {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Everything allocation depends on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocationInput {
    pub groups: Vec<GroupInput>,
    pub nodes: Vec<NodeInput>,
    /// Every bound slot of every rack controlled by its own inventory.
    pub bindings: Vec<Binding>,
}

/// Why an existing binding is given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReleaseReason {
    /// The group (or its inventory instance) no longer exists.
    GroupRemoved,
    /// The coordinate lies beyond the group's current racks x Nodes.
    CapacityShrink,
    /// No Node with the bound UID exists (the name is not compared, as
    /// upstream).
    NodeGone,
    /// The Node lost `mokka.nvidia.com/sgpu-node=true`, or is terminating.
    NodeIneligible,
    /// The Node no longer matches the group's selector.
    SelectorMismatch,
}

impl ReleaseReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseReason::GroupRemoved => "GroupRemoved",
            ReleaseReason::CapacityShrink => "CapacityShrink",
            ReleaseReason::NodeGone => "NodeGone",
            ReleaseReason::NodeIneligible => "NodeIneligible",
            ReleaseReason::SelectorMismatch => "SelectorMismatch",
        }
    }
}

/// A binding to clear once its Node metadata is cleaned up.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub binding: Binding,
    pub reason: ReleaseReason,
}

/// Why a Node cannot be placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConflictReason {
    /// The Node UID is bound at two or more coordinates.
    DuplicateBinding,
    /// The Node matches the selectors of two or more groups.
    SelectorOverlap,
}

impl ConflictReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ConflictReason::DuplicateBinding => "DuplicateBinding",
            ConflictReason::SelectorOverlap => "SelectorOverlap",
        }
    }
}

/// A Node the allocator will not place, and the groups it touches.
///
/// Ordered as upstream sorts conflicts: by the Node's age (creation time,
/// name, UID), then kind; groups and bindings only make the order total.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub reason: ConflictReason,
    /// The Node: for `DuplicateBinding` the listed Node with that UID, or the
    /// first binding's Node reference when no Node has it.
    pub node: NodeRef,
    /// The Node's creation time (`None` for a UID no listed Node has, which
    /// sorts first like Go's zero time).
    pub created: Option<Time>,
    /// Sorted, distinct.
    pub groups: Vec<GroupKey>,
    /// For `DuplicateBinding`: every coordinate the Node is bound at, sorted.
    pub bindings: Vec<Binding>,
}

impl Ord for Conflict {
    fn cmp(&self, other: &Self) -> Ordering {
        (&self.created, &self.node.name, &self.node.uid, self.reason)
            .cmp(&(
                &other.created,
                &other.node.name,
                &other.node.uid,
                other.reason,
            ))
            .then_with(|| (&self.groups, &self.bindings).cmp(&(&other.groups, &other.bindings)))
    }
}

impl PartialOrd for Conflict {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A Node that matches exactly one group but has no slot yet: the group is
/// full, or the Node's old binding is still being released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingNode {
    pub node: NodeRef,
    pub group: Arc<GroupKey>,
}

/// How much work a full allocation of the input does (for metrics and scale
/// tests). An [`Allocator`]'s plan carries the same counters as `allocate`
/// would for its input; what an incremental update itself did is its
/// [`UpdateWork`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkCounters {
    pub groups: usize,
    pub nodes: usize,
    pub bindings_classified: usize,
    pub nodes_placed_or_skipped: usize,
    pub selector_evaluations: usize,
    pub coordinates_probed: usize,
}

/// The allocation plan. Every list is sorted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Allocation {
    /// Existing valid bindings, unchanged.
    pub retained: Vec<Binding>,
    /// Existing bindings to clear after cleanup.
    pub released: Vec<Release>,
    /// New bindings.
    pub assigned: Vec<Binding>,
    /// `retained` + `assigned`: the desired bindings.
    pub bindings: Vec<Binding>,
    /// In Node order: (creationTimestamp, name, uid).
    pub pending: Vec<PendingNode>,
    pub conflicts: Vec<Conflict>,
    pub work: WorkCounters,
}

/// Malformed allocation input.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum AllocationError {
    #[error("node {} has an empty name or UID", go_quote(.0))]
    NodeIdentityMissing(String),
    #[error("node UID {} is listed more than once", go_quote(.0))]
    DuplicateNodeUid(String),
    #[error("binding of rack group {} rack {rack_index} node {node_index} has an empty identity", go_quote(.group))]
    BindingIdentityMissing {
        group: String,
        rack_index: i32,
        node_index: i32,
    },
    #[error("binding of rack group {} has a negative coordinate (rack {rack_index}, node {node_index})", go_quote(.group))]
    NegativeCoordinate {
        group: String,
        rack_index: i32,
        node_index: i32,
    },
    #[error("rack group {} rack {rack_index} node {node_index} is bound more than once", go_quote(.group))]
    DuplicateCoordinate {
        group: String,
        rack_index: i32,
        node_index: i32,
    },
    #[error("rack group {} of inventory {} (UID {}) is listed more than once", go_quote(&.0.group), go_quote(&.0.inventory_name), go_quote(&.0.inventory_uid))]
    DuplicateGroup(GroupKey),
    #[error("rack group {} has an empty identity", go_quote(&.0.group))]
    GroupIdentityMissing(GroupKey),
    #[error("rack group {} has a negative rack count or Nodes per rack", go_quote(&.0.group))]
    InvalidGroupShape(GroupKey),
    #[error("rack group {} selector: {source}", go_quote(.group))]
    InvalidSelector {
        /// The rack group ID.
        group: String,
        #[source]
        source: SelectorError,
    },
}

/// Largest group (in slots) whose occupancy is kept as a bitmap: 4 Mi slots
/// is 512 KiB of bits; larger shapes fall back to a hash set so memory
/// follows the bindings, not the declared capacity.
const BITMAP_SLOTS: u64 = 1 << 22;

/// The slots of one group held by existing bindings.
enum OccupiedSlots {
    /// One bit per slot: a bound slot costs a shift, not a hash.
    Bits(Vec<u64>),
    Sparse(HashSet<u64, FastHash>),
}

impl OccupiedSlots {
    fn for_capacity(capacity: u64) -> Self {
        if capacity <= BITMAP_SLOTS {
            // At most 2^16 words, so the cast cannot truncate.
            OccupiedSlots::Bits(vec![0; capacity.div_ceil(64) as usize])
        } else {
            OccupiedSlots::Sparse(HashSet::default())
        }
    }

    /// `slot` is below the group's capacity (callers check with `slot()`).
    fn insert(&mut self, slot: u64) {
        match self {
            OccupiedSlots::Bits(words) => words[(slot / 64) as usize] |= 1 << (slot % 64),
            OccupiedSlots::Sparse(set) => {
                set.insert(slot);
            }
        }
    }

    fn contains(&self, slot: u64) -> bool {
        match self {
            OccupiedSlots::Bits(words) => words[(slot / 64) as usize] & (1 << (slot % 64)) != 0,
            OccupiedSlots::Sparse(set) => set.contains(&slot),
        }
    }
}

struct CompiledGroup<'a> {
    input: &'a GroupInput,
    key: Arc<GroupKey>,
    selector: PlacementSelector,
    /// Coordinates (rack * nodes_per_rack + node) held by existing bindings
    /// inside capacity, released or not.
    occupied: OccupiedSlots,
    /// Next coordinate to probe, rack-major. Only moves forward.
    cursor: u64,
    capacity: u64,
}

impl CompiledGroup<'_> {
    fn slot(&self, rack_index: i32, node_index: i32) -> Option<u64> {
        let inside = rack_index >= 0
            && node_index >= 0
            && rack_index < self.input.racks
            && node_index < self.input.nodes_per_rack;
        // Both factors are non-negative i32 here, so the product fits in u64.
        inside.then(|| rack_index as u64 * self.input.nodes_per_rack as u64 + node_index as u64)
    }

    fn take_free_slot(&mut self, work: &mut WorkCounters) -> Option<(i32, i32)> {
        while self.cursor < self.capacity {
            let slot = self.cursor;
            self.cursor += 1;
            work.coordinates_probed += 1;
            if !self.occupied.contains(slot) {
                let per_rack = self.input.nodes_per_rack as u64;
                // Both quotient and remainder are below i32 bounds by construction.
                return Some(((slot / per_rack) as i32, (slot % per_rack) as i32));
            }
        }
        None
    }
}

/// The groups sorted by key, each checked and its selector compiled, or the
/// first error in key order. `allocate` and `Allocator` both start here.
fn compile_groups(
    groups: &[GroupInput],
) -> Result<Vec<(&GroupInput, PlacementSelector)>, AllocationError> {
    let mut sorted: Vec<&GroupInput> = groups.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));
    let mut compiled: Vec<(&GroupInput, PlacementSelector)> = Vec::with_capacity(sorted.len());
    for group in sorted {
        let key = &group.key;
        if key.inventory_name.is_empty() || key.inventory_uid.is_empty() || key.group.is_empty() {
            return Err(AllocationError::GroupIdentityMissing(key.clone()));
        }
        if compiled
            .last()
            .is_some_and(|(previous, _)| previous.key == *key)
        {
            return Err(AllocationError::DuplicateGroup(key.clone()));
        }
        if group.racks < 0 || group.nodes_per_rack < 0 {
            return Err(AllocationError::InvalidGroupShape(key.clone()));
        }
        let selector = PlacementSelector::compile(group.selector.as_ref()).map_err(|source| {
            AllocationError::InvalidSelector {
                group: key.group.clone(),
                source,
            }
        })?;
        compiled.push((group, selector));
    }
    Ok(compiled)
}

/// A Node needs a name and a UID.
fn check_node(node: &NodeInput) -> Result<(), AllocationError> {
    if node.name.is_empty() || node.uid.is_empty() {
        return Err(AllocationError::NodeIdentityMissing(node.name.clone()));
    }
    Ok(())
}

/// A binding needs a full identity and a non-negative coordinate (checked
/// in that order).
fn check_binding(binding: &Binding) -> Result<(), AllocationError> {
    let group = &binding.group;
    if binding.node.name.is_empty()
        || binding.node.uid.is_empty()
        || group.inventory_name.is_empty()
        || group.inventory_uid.is_empty()
        || group.group.is_empty()
    {
        return Err(AllocationError::BindingIdentityMissing {
            group: group.group.clone(),
            rack_index: binding.rack_index,
            node_index: binding.node_index,
        });
    }
    if binding.rack_index < 0 || binding.node_index < 0 {
        return Err(AllocationError::NegativeCoordinate {
            group: group.group.clone(),
            rack_index: binding.rack_index,
            node_index: binding.node_index,
        });
    }
    Ok(())
}

/// Plans the allocation. See the module documentation for the rules.
pub fn allocate(input: &AllocationInput) -> Result<Allocation, AllocationError> {
    let mut work = WorkCounters {
        groups: input.groups.len(),
        nodes: input.nodes.len(),
        ..Default::default()
    };

    // Groups, sorted by key so every later step visits them in one order.
    let mut groups: Vec<CompiledGroup<'_>> = compile_groups(&input.groups)?
        .into_iter()
        .map(|(group, selector)| CompiledGroup {
            input: group,
            key: Arc::new(group.key.clone()),
            selector,
            occupied: OccupiedSlots::for_capacity(group.racks as u64 * group.nodes_per_rack as u64),
            cursor: 0,
            capacity: group.racks as u64 * group.nodes_per_rack as u64,
        })
        .collect();
    let group_index: HashMap<&GroupKey, usize, FastHash> = groups
        .iter()
        .enumerate()
        .map(|(index, group)| (&group.input.key, index))
        .collect();
    // Nodes, indexed by UID. Per-Node facts live in vectors indexed like
    // `input.nodes`, so later steps look a UID up once, not once per set.
    let mut nodes_by_uid: HashMap<&str, usize, FastHash> =
        HashMap::with_capacity_and_hasher(input.nodes.len(), FastHash::default());
    let mut eligible: Vec<bool> = Vec::with_capacity(input.nodes.len());
    for (index, node) in input.nodes.iter().enumerate() {
        check_node(node)?;
        if nodes_by_uid.insert(node.uid.as_str(), index).is_some() {
            return Err(AllocationError::DuplicateNodeUid(node.uid.clone()));
        }
        eligible.push(node.is_eligible());
    }

    // Bindings, sorted, checked, and their in-capacity coordinates occupied.
    // Plans hand bindings back sorted, and the sort is linear on sorted input.
    let mut bindings: Vec<&Binding> = input.bindings.iter().collect();
    bindings.sort();
    let mut binding_groups: Vec<Option<usize>> = Vec::with_capacity(bindings.len());
    let mut last_group: Option<(&Arc<GroupKey>, Option<usize>)> = None;
    // Sorted bindings put a duplicate coordinate next to its twin.
    let mut previous: Option<&Binding> = None;
    for binding in &bindings {
        let group = &binding.group;
        check_binding(binding)?;
        let duplicate = previous.is_some_and(|previous| {
            previous.rack_index == binding.rack_index
                && previous.node_index == binding.node_index
                && previous.group == binding.group
        });
        previous = Some(binding);
        if duplicate {
            return Err(AllocationError::DuplicateCoordinate {
                group: group.group.clone(),
                rack_index: binding.rack_index,
                node_index: binding.node_index,
            });
        }
        // Consecutive bindings usually share one key allocation, so reuse
        // the previous lookup instead of hashing three strings again.
        let group_index = match last_group {
            Some((last, index)) if Arc::ptr_eq(last, group) => index,
            _ => {
                let index = group_index.get(group.as_ref()).copied();
                last_group = Some((group, index));
                index
            }
        };
        binding_groups.push(group_index);
        if let Some(index) = group_index {
            let compiled = &mut groups[index];
            if let Some(slot) = compiled.slot(binding.rack_index, binding.node_index) {
                compiled.occupied.insert(slot);
            }
        }
    }

    // Classify every existing binding. Bindings are counted per Node UID:
    // for listed Nodes in `bound_count` (by Node position), for UIDs of
    // gone Nodes in `gone_bound_count`.
    let mut retained = Vec::with_capacity(bindings.len());
    let mut released = Vec::new();
    let mut bound_count: Vec<u32> = vec![0; input.nodes.len()];
    let mut is_retained: Vec<bool> = vec![false; input.nodes.len()];
    let mut gone_bound_count: HashMap<&str, u32, FastHash> = HashMap::default();
    let mut any_bound_twice = false;
    for (binding, group_index) in bindings.iter().zip(&binding_groups) {
        work.bindings_classified += 1;
        let uid = binding.node.uid.as_str();
        let node_position = nodes_by_uid.get(uid).copied();
        let count = match node_position {
            Some(position) => &mut bound_count[position],
            None => gone_bound_count.entry(uid).or_default(),
        };
        *count += 1;
        any_bound_twice |= *count > 1;
        // The Node this binding names is the one with its UID (upstream
        // looks bindings up by UID only; the name is not compared).
        let node = node_position;
        let reason = match *group_index {
            None => Some(ReleaseReason::GroupRemoved),
            Some(index) => {
                let group = &groups[index];
                if group.slot(binding.rack_index, binding.node_index).is_none() {
                    Some(ReleaseReason::CapacityShrink)
                } else if let Some(position) = node {
                    if !eligible[position] {
                        Some(ReleaseReason::NodeIneligible)
                    } else {
                        work.selector_evaluations += 1;
                        (!group.selector.matches(&input.nodes[position].labels))
                            .then_some(ReleaseReason::SelectorMismatch)
                    }
                } else {
                    Some(ReleaseReason::NodeGone)
                }
            }
        };
        match reason {
            None => {
                if let Some(position) = node {
                    is_retained[position] = true;
                }
                retained.push((*binding).clone());
            }
            Some(reason) => released.push(Release {
                binding: (*binding).clone(),
                reason,
            }),
        }
    }
    let times_bound = |uid: &str| -> u32 {
        match nodes_by_uid.get(uid) {
            Some(&position) => bound_count[position],
            None => gone_bound_count.get(uid).copied().unwrap_or(0),
        }
    };

    // A Node bound at two or more coordinates is a data conflict; it is kept
    // where it is and not considered for anything new.
    let mut conflicts = Vec::new();
    let mut duplicated: BTreeMap<&str, Vec<&Binding>> = BTreeMap::new();
    if any_bound_twice {
        for binding in &bindings {
            let uid = binding.node.uid.as_str();
            if times_bound(uid) > 1 {
                duplicated.entry(uid).or_default().push(binding);
            }
        }
    }
    for (uid, bound) in &duplicated {
        let groups: BTreeSet<GroupKey> = bound
            .iter()
            .map(|binding| binding.group.as_ref().clone())
            .collect();
        let listed = nodes_by_uid
            .get(uid)
            .map(|&position| &input.nodes[position]);
        conflicts.push(Conflict {
            reason: ConflictReason::DuplicateBinding,
            node: listed.map_or_else(|| bound[0].node.as_ref().clone(), NodeInput::node_ref),
            created: listed.and_then(|node| node.created.clone()),
            groups: groups.into_iter().collect(),
            bindings: bound.iter().map(|binding| (*binding).clone()).collect(),
        });
    }

    // New placements, oldest Node first. The sort key sits in a compact
    // vector (creation time, position); names and UIDs are read only to
    // break ties in creation time.
    let mut candidates: Vec<(Option<Time>, usize)> = input
        .nodes
        .iter()
        .enumerate()
        .filter(|&(position, _)| eligible[position])
        .map(|(position, node)| (node.created.clone(), position))
        .collect();
    candidates.sort_by(|(a_created, a), (b_created, b)| {
        a_created.cmp(b_created).then_with(|| {
            let (a, b) = (&input.nodes[*a], &input.nodes[*b]);
            (&a.name, &a.uid).cmp(&(&b.name, &b.uid))
        })
    });
    let mut assigned = Vec::new();
    let mut pending = Vec::new();
    let mut matching: Vec<usize> = Vec::with_capacity(groups.len());
    for (_, position) in candidates {
        work.nodes_placed_or_skipped += 1;
        let node = &input.nodes[position];
        if bound_count[position] > 1 || is_retained[position] {
            continue;
        }
        matching.clear();
        for (index, group) in groups.iter().enumerate() {
            work.selector_evaluations += 1;
            if group.selector.matches(&node.labels) {
                matching.push(index);
            }
        }
        if matching.len() > 1 {
            conflicts.push(Conflict {
                reason: ConflictReason::SelectorOverlap,
                node: node.node_ref(),
                created: node.created.clone(),
                groups: matching
                    .iter()
                    .map(|&index| groups[index].input.key.clone())
                    .collect(),
                bindings: Vec::new(),
            });
            continue;
        }
        let Some(&index) = matching.first() else {
            continue;
        };
        let release_pending = bound_count[position] > 0;
        let group = &mut groups[index];
        let slot = if release_pending {
            None
        } else {
            group.take_free_slot(&mut work)
        };
        match slot {
            Some((rack_index, node_index)) => assigned.push(Binding {
                group: Arc::clone(&group.key),
                rack_index,
                node_index,
                node: Arc::new(node.node_ref()),
            }),
            None => pending.push(PendingNode {
                node: node.node_ref(),
                group: Arc::clone(&group.key),
            }),
        }
    }

    // `retained` and `released` follow the sorted input already; the sorts
    // below only check that (they are linear on sorted input).
    retained.sort();
    released.sort();
    assigned.sort();
    conflicts.sort();
    let desired = merge_sorted(&retained, &assigned);
    Ok(Allocation {
        retained,
        released,
        assigned,
        bindings: desired,
        pending,
        conflicts,
        work,
    })
}

/// Merges two sorted lists into one sorted list in one linear pass (equal
/// items keep `first`'s before `second`'s, as a stable sort would).
fn merge_sorted(first: &[Binding], second: &[Binding]) -> Vec<Binding> {
    let mut merged = Vec::with_capacity(first.len() + second.len());
    let (mut i, mut j) = (0, 0);
    while i < first.len() && j < second.len() {
        if second[j] < first[i] {
            merged.push(second[j].clone());
            j += 1;
        } else {
            merged.push(first[i].clone());
            i += 1;
        }
    }
    merged.extend_from_slice(&first[i..]);
    merged.extend_from_slice(&second[j..]);
    merged
}

impl Allocation {
    /// The part of the plan that concerns one group: its desired bindings,
    /// releases, pending Nodes, and every conflict that touches it.
    pub fn group_view(&self, key: &GroupKey) -> Allocation {
        let in_group = |binding: &&Binding| *binding.group == *key;
        Allocation {
            retained: self.retained.iter().filter(in_group).cloned().collect(),
            released: self
                .released
                .iter()
                .filter(|release| *release.binding.group == *key)
                .cloned()
                .collect(),
            assigned: self.assigned.iter().filter(in_group).cloned().collect(),
            bindings: self.bindings.iter().filter(in_group).cloned().collect(),
            pending: self
                .pending
                .iter()
                .filter(|pending| *pending.group == *key)
                .cloned()
                .collect(),
            conflicts: self
                .conflicts
                .iter()
                .filter(|conflict| conflict.groups.contains(key))
                .cloned()
                .collect(),
            work: self.work,
        }
    }
}

/// FNV-1a: a fast, deterministic hasher for the allocator's internal maps
/// (keys are Node UIDs and coordinates, not attacker-chosen at this scale).
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        // FNV leaves the top bits poorly mixed for keys that differ in their
        // last bytes (UIDs, names); hashbrown tags buckets with the top 7
        // bits, so finish with MurmurHash3's 64-bit avalanche.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, value: u64) {
        // One multiply-xorshift round per word keeps integer keys cheap.
        let mixed = (self.0 ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = mixed ^ (mixed >> 29);
    }
}

type FastHash = BuildHasherDefault<Fnv>;

mod incremental;
pub use incremental::{Allocator, Change, UpdateWork};

#[cfg(test)]
mod equivalence;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;
