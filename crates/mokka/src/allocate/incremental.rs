//! Incremental allocation: an [`Allocator`] keeps the input and the plan,
//! and a change re-plans only what it touches.
//!
//! What one Node UID contributes to the plan (the classification of the
//! bindings that name it, its `DuplicateBinding` or `SelectorOverlap`
//! conflict, whether it waits for a release, and whether it is a candidate
//! for a new slot of one group) depends only on that Node, the bindings that
//! name its UID, and the groups. So a change marks the UIDs it touches as
//! dirty, and only those are re-classified; the difference between their old
//! and new contribution is applied to the sorted output lists as edits.
//!
//! New slots are the one place where Nodes interact: the candidates of a
//! group, oldest first, take its free coordinates rack-major, one each, so
//! the i-th candidate gets the i-th free coordinate, and candidates beyond
//! the free coordinates are pending (the overflow). Each group keeps its
//! candidates and its occupied coordinates as sorted vectors. A change
//! touches both lists between a lowest and a highest rank; below the lowest
//! nothing moves, and above the highest both lists are the old ones shifted
//! by a fixed offset each. When the offsets are equal (writing a new binding
//! back removes one candidate and one free coordinate at the same rank),
//! only the pairs in between are re-derived; otherwise every later pair
//! really moves, as it does in `allocate`. The overflow changes only
//! between its old and new first candidate.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{
    Allocation, AllocationError, AllocationInput, Binding, Conflict, ConflictReason, FastHash,
    GroupInput, GroupKey, NodeInput, PendingNode, Release, ReleaseReason, WorkCounters,
    check_binding, check_node, compile_groups,
};
use crate::api::NodeRef;
use crate::selector::PlacementSelector;

/// Interned group key (stable for the allocator's lifetime).
type KeyId = u32;
/// A bound coordinate: group, rack index, Node index.
type Coord = (KeyId, i32, i32);

/// Node order for placement and for `pending`: (creationTimestamp, name, uid).
#[derive(Clone, Debug)]
struct NodeOrder {
    created: Option<Time>,
    node: Arc<NodeRef>,
}

impl Ord for NodeOrder {
    fn cmp(&self, other: &Self) -> Ordering {
        self.created.cmp(&other.created).then_with(|| {
            (&self.node.name, &self.node.uid).cmp(&(&other.node.name, &other.node.uid))
        })
    }
}

impl PartialOrd for NodeOrder {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for NodeOrder {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for NodeOrder {}

#[derive(Clone, Debug)]
struct NodeEntry {
    input: NodeInput,
    order: NodeOrder,
    eligible: bool,
}

/// A Node that reached the group match with exactly one matching group.
#[derive(Clone, Debug, PartialEq)]
struct Candidate {
    order: NodeOrder,
    group: KeyId,
    /// The group state the Node was entered into (a replaced group starts
    /// over with a new generation).
    generation: u64,
    /// Bound once but not retained: pending until cleanup, takes no slot.
    release_pending: bool,
}

/// What one Node UID currently contributes to the plan.
#[derive(Clone, Debug, Default, PartialEq)]
struct UidState {
    /// The bindings naming this UID, sorted, with their release reason
    /// (`None`: retained).
    bindings: Vec<(Binding, Option<ReleaseReason>)>,
    /// Selector evaluations `allocate` spends on these bindings.
    selector_evaluations: usize,
    duplicate: Option<Box<Conflict>>,
    /// The Node reached the group match (eligible, not retained, bound at
    /// most once).
    evaluated: bool,
    overlap: Option<Box<Conflict>>,
    candidate: Option<Candidate>,
}

#[derive(Clone, Debug, Default)]
struct UidEntry {
    node: Option<NodeEntry>,
    /// Bindings naming this UID (any name, any group).
    coords: Vec<Coord>,
    /// As currently reflected in the plan.
    state: UidState,
}

#[derive(Clone, Debug)]
struct GroupState {
    id: KeyId,
    input: GroupInput,
    key: Arc<GroupKey>,
    selector: PlacementSelector,
    generation: u64,
    capacity: u64,
    /// Coordinates (rack * nodes_per_rack + node) held by bindings inside
    /// capacity, released or not. Sorted.
    occupied: Vec<u64>,
    /// Nodes waiting for a new slot of this group, oldest first.
    candidates: Vec<NodeOrder>,
    /// The new bindings: candidate i at free coordinate i.
    assigned: Vec<Binding>,
    /// The first candidate beyond the free coordinates: it and every later
    /// candidate are pending (the overflow).
    overflow_start: Option<NodeOrder>,
    /// Coordinates `allocate`'s cursor probes for this group.
    probes: usize,
}

impl GroupState {
    fn slot(&self, rack_index: i32, node_index: i32) -> Option<u64> {
        let inside = rack_index >= 0
            && node_index >= 0
            && rack_index < self.input.racks
            && node_index < self.input.nodes_per_rack;
        inside.then(|| rack_index as u64 * self.input.nodes_per_rack as u64 + node_index as u64)
    }

    fn free_count(&self) -> u64 {
        self.capacity - self.occupied.len() as u64
    }

    /// Free coordinates in rack-major order, from the `rank`-th one on.
    fn free_slots_from(&self, rank: u64) -> FreeSlots<'_> {
        // occupied[j] - j counts the free coordinates below occupied[j]; the
        // first j where that exceeds `rank` is the number of occupied
        // coordinates below the `rank`-th free one.
        let (mut low, mut high) = (0, self.occupied.len());
        while low < high {
            let middle = (low + high) / 2;
            if self.occupied[middle] - middle as u64 <= rank {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        FreeSlots {
            occupied: &self.occupied,
            next: rank + low as u64,
            index: low,
        }
    }

    fn binding_at(&self, slot: u64, node: &NodeOrder) -> Binding {
        let per_rack = self.input.nodes_per_rack as u64;
        // Slots are below racks * nodes_per_rack, so both parts fit in i32.
        Binding {
            group: Arc::clone(&self.key),
            rack_index: (slot / per_rack) as i32,
            node_index: (slot % per_rack) as i32,
            node: Arc::clone(&node.node),
        }
    }

    /// What `allocate`'s cursor probes: up to the last slot taken, or the
    /// whole group once a candidate finds it full.
    fn count_probes(&self) -> usize {
        let wanted = self.candidates.len() as u64;
        if wanted == 0 {
            0
        } else if wanted <= self.free_count() {
            // There is a free slot by the check above; should the count
            // ever disagree, probing the whole group is the safe answer.
            self.free_slots_from(wanted - 1)
                .next()
                .map_or(self.capacity as usize, |last| (last + 1) as usize)
        } else {
            self.capacity as usize
        }
    }
}

struct FreeSlots<'a> {
    occupied: &'a [u64],
    next: u64,
    index: usize,
}

impl Iterator for FreeSlots<'_> {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        while self.index < self.occupied.len() && self.occupied[self.index] == self.next {
            self.next += 1;
            self.index += 1;
        }
        let slot = self.next;
        self.next += 1;
        Some(slot)
    }
}

/// Removals and insertions for one sorted list, applied together.
#[derive(Debug)]
struct Edits<T> {
    remove: Vec<T>,
    insert: Vec<T>,
}

impl<T> Edits<T> {
    /// The removals or the insertions.
    fn side(&mut self, removing: bool) -> &mut Vec<T> {
        if removing {
            &mut self.remove
        } else {
            &mut self.insert
        }
    }
}

impl<T> Default for Edits<T> {
    fn default() -> Self {
        Self {
            remove: Vec::new(),
            insert: Vec::new(),
        }
    }
}

impl<T: Ord> Edits<T> {
    fn len(&self) -> usize {
        self.remove.len() + self.insert.len()
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sorts both lists and cancels an insertion against an equal removal
    /// (as multisets), so the edits are the net change of a sequence of
    /// inserts and removes (bind, then unbind, in one update).
    fn normalize(&mut self) {
        self.remove.sort_unstable();
        self.insert.sort_unstable();
        if self.remove.is_empty() || self.insert.is_empty() {
            return;
        }
        let mut remove = Vec::with_capacity(self.remove.len());
        let mut insert = Vec::with_capacity(self.insert.len());
        let mut removals = std::mem::take(&mut self.remove).into_iter().peekable();
        let mut insertions = std::mem::take(&mut self.insert).into_iter().peekable();
        while let (Some(removal), Some(insertion)) = (removals.peek(), insertions.peek()) {
            match removal.cmp(insertion) {
                Ordering::Less => remove.extend(removals.next()),
                Ordering::Greater => insert.extend(insertions.next()),
                Ordering::Equal => {
                    removals.next();
                    insertions.next();
                }
            }
        }
        remove.extend(removals);
        insert.extend(insertions);
        self.remove = remove;
        self.insert = insert;
    }

    /// Applies the net edits: removals (of items in `items`) first, then
    /// insertions. Each edit's position is found by binary search; then
    /// either every edit shifts the tail behind it (when those tails add up
    /// to less than the list), or the list is rebuilt in one pass that moves
    /// the unchanged runs between edit positions.
    fn apply(mut self, items: &mut Vec<T>) {
        self.normalize();
        if self.is_empty() {
            return;
        }
        let removals: Vec<usize> = self
            .remove
            .iter()
            .filter_map(|item| {
                let found = items.binary_search(item).ok();
                debug_assert!(found.is_some(), "removed item is not in the plan");
                found
            })
            .collect();
        let insertions: Vec<usize> = self
            .insert
            .iter()
            .map(|item| items.binary_search(item).unwrap_or_else(|index| index))
            .collect();
        let shifted: usize = removals
            .iter()
            .chain(&insertions)
            .map(|&index| items.len() - index)
            .sum();
        if shifted <= items.len() {
            for &index in removals.iter().rev() {
                items.remove(index);
            }
            for item in self.insert {
                let index = items.binary_search(&item).unwrap_or_else(|index| index);
                items.insert(index, item);
            }
            return;
        }
        let old = std::mem::take(items);
        let mut merged = Vec::with_capacity(old.len() + insertions.len() - removals.len());
        let mut source = old.into_iter();
        let mut consumed = 0;
        let mut removals = removals.into_iter().peekable();
        let mut insertions = insertions.into_iter().zip(self.insert).peekable();
        loop {
            // At one position, insertions go before the (removed) item there.
            let insert_next = match (insertions.peek(), removals.peek()) {
                (Some((insert_at, _)), Some(remove_at)) => insert_at <= remove_at,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if insert_next {
                let (index, item) = insertions.next().expect("peeked");
                merged.extend(source.by_ref().take(index - consumed));
                consumed = index;
                merged.push(item);
            } else {
                let index = removals.next().expect("peeked");
                merged.extend(source.by_ref().take(index - consumed));
                source.next();
                consumed = index + 1;
            }
        }
        merged.extend(source);
        *items = merged;
    }
}

/// Up to this many pending-list edits are applied one by one (binary search
/// and a memmove each); more are merged in one linear pass.
const FEW_EDITS: usize = 32;

/// Edits of `pending`, which is ordered by a key it does not hold (creation
/// time): `Allocator::pending_order` runs parallel to it.
#[derive(Debug, Default)]
struct PendingEdits {
    remove: Vec<NodeOrder>,
    insert: Vec<(NodeOrder, PendingNode)>,
}

impl PendingEdits {
    fn len(&self) -> usize {
        self.remove.len() + self.insert.len()
    }

    fn apply(self, order: &mut Vec<NodeOrder>, pending: &mut Vec<PendingNode>) {
        if self.len() <= FEW_EDITS {
            for key in self.remove {
                match order.binary_search(&key) {
                    Ok(index) => {
                        order.remove(index);
                        pending.remove(index);
                    }
                    Err(_) => debug_assert!(false, "removed pending Node is not in the plan"),
                }
            }
            for (key, node) in self.insert {
                let index = order.binary_search(&key).unwrap_or_else(|index| index);
                order.insert(index, key);
                pending.insert(index, node);
            }
            return;
        }
        let PendingEdits {
            mut remove,
            mut insert,
        } = self;
        remove.sort_unstable();
        insert.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let old_order = std::mem::take(order);
        let old_pending = std::mem::take(pending);
        let mut removals = remove.into_iter().peekable();
        let mut insertions = insert.into_iter().peekable();
        for (key, node) in old_order.into_iter().zip(old_pending) {
            while removals.next_if(|removal| *removal < key).is_some() {
                debug_assert!(false, "removed pending Node is not in the plan");
            }
            if removals.next_if(|removal| *removal == key).is_some() {
                continue;
            }
            while let Some((inserted, inserted_node)) =
                insertions.next_if(|(inserted, _)| *inserted < key)
            {
                order.push(inserted);
                pending.push(inserted_node);
            }
            order.push(key);
            pending.push(node);
        }
        debug_assert!(
            removals.peek().is_none(),
            "removed pending Node is not in the plan"
        );
        for (key, node) in insertions {
            order.push(key);
            pending.push(node);
        }
    }
}

/// Edits of every output list, collected over one update.
#[derive(Debug, Default)]
struct OutputEdits {
    retained: Edits<Binding>,
    released: Edits<Release>,
    assigned: Edits<Binding>,
    /// `bindings` (retained + assigned).
    desired: Edits<Binding>,
    conflicts: Edits<Conflict>,
    pending: PendingEdits,
}

impl OutputEdits {
    fn len(&self) -> usize {
        self.retained.len()
            + self.released.len()
            + self.assigned.len()
            + self.conflicts.len()
            + self.pending.len()
    }
}

/// Changes to one group's sorted vectors during one update.
#[derive(Debug, Default)]
struct GroupEdits {
    candidates: Edits<NodeOrder>,
    occupied: Edits<u64>,
    /// The group state is new: derive its new bindings from rank 0.
    fresh: bool,
}

/// One update: what changed in the input, and the edits it causes.
#[derive(Debug, Default)]
struct Batch {
    dirty: HashSet<String, FastHash>,
    groups: HashMap<KeyId, GroupEdits, FastHash>,
    out: OutputEdits,
}

/// One input change, for [`Allocator::apply`].
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// [`Allocator::upsert_node`].
    UpsertNode(NodeInput),
    /// [`Allocator::remove_node`].
    RemoveNode { uid: String },
    /// [`Allocator::bind`].
    Bind(Binding),
    /// [`Allocator::unbind`].
    Unbind {
        group: GroupKey,
        rack_index: i32,
        node_index: i32,
    },
    /// [`Allocator::set_groups`].
    SetGroups(Vec<GroupInput>),
}

/// How much one update did (the incremental path's own cost; the plan's
/// [`WorkCounters`] describe a full `allocate()` of the same input).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpdateWork {
    /// Node UIDs whose contribution to the plan was re-derived.
    pub nodes_reclassified: usize,
    /// Bindings classified again (those naming a re-derived UID).
    pub bindings_reclassified: usize,
    /// Groups whose new bindings and overflow were re-derived.
    pub groups_replanned: usize,
    /// Items removed from or inserted into the plan's lists (`bindings`
    /// not counted separately).
    pub plan_edits: usize,
}

/// Sums over the input that `allocate`'s work counters are made of.
#[derive(Clone, Debug, Default)]
struct Counters {
    nodes: usize,
    eligible: usize,
    /// Selector evaluations spent on bindings.
    binding_selector_evaluations: usize,
    /// Nodes matched against every group.
    evaluated: usize,
}

/// Marks a UID dirty, copying it only the first time.
fn mark(dirty: &mut HashSet<String, FastHash>, uid: &str) {
    if !dirty.contains(uid) {
        dirty.insert(uid.to_string());
    }
}

/// Incremental allocation: keeps the input (groups, Nodes by UID, bindings
/// by coordinate) and its [`Allocation`], and updates both per change.
///
/// After every call, [`allocation`](Self::allocation) is exactly what
/// [`allocate`](super::allocate) returns for [`input`](Self::input) (the
/// same lists in the same order and the same work counters). A change that
/// `allocate` would reject is refused with `allocate`'s error and leaves
/// the allocator unchanged, so its input is always valid. Nodes are keyed by
/// UID and bindings by coordinate, so `upsert_node` and `bind` replace
/// (`DuplicateNodeUid` and `DuplicateCoordinate` cannot arise after `new`).
///
/// Cost of one update: the touched UIDs are re-classified (hash lookups,
/// one selector match per binding, one per group for an unplaced Node), a
/// touched group re-derives the new bindings whose pairing really changed,
/// and each changed plan list is edited once: binary searches plus one
/// memmove (or one pass moving the unchanged runs), so the plan's size
/// costs only a memmove of its lists (about 0.1 ms at 100,000 bindings).
/// `set_groups` additionally scans every UID and binding once. Coalesced
/// events are cheapest as one [`apply`](Self::apply).
#[derive(Clone, Debug, Default)]
pub struct Allocator {
    key_ids: HashMap<GroupKey, KeyId, FastHash>,
    keys: Vec<Arc<GroupKey>>,
    /// Indexed by key ID; `None` for keys known only from bindings.
    groups: Vec<Option<GroupState>>,
    /// Key IDs of the groups, sorted by key.
    group_order: Vec<KeyId>,
    uids: HashMap<String, UidEntry, FastHash>,
    bindings: HashMap<Coord, Binding, FastHash>,
    counters: Counters,
    next_generation: u64,
    /// Parallel to `allocation.pending`.
    pending_order: Vec<NodeOrder>,
    allocation: Allocation,
    last_update: UpdateWork,
}

impl Allocator {
    /// Builds the allocator for `input`: the plan is `allocate(input)`, and
    /// so is the error for malformed input.
    pub fn new(input: &AllocationInput) -> Result<Self, AllocationError> {
        let groups = compile_groups(&input.groups)?;
        let mut uids: HashSet<&str, FastHash> = HashSet::default();
        for node in &input.nodes {
            check_node(node)?;
            if !uids.insert(node.uid.as_str()) {
                return Err(AllocationError::DuplicateNodeUid(node.uid.clone()));
            }
        }
        let mut bindings: Vec<&Binding> = input.bindings.iter().collect();
        bindings.sort();
        let mut previous: Option<&Binding> = None;
        for binding in &bindings {
            check_binding(binding)?;
            if let Some(previous) = previous
                && previous.rack_index == binding.rack_index
                && previous.node_index == binding.node_index
                && previous.group == binding.group
            {
                return Err(AllocationError::DuplicateCoordinate {
                    group: binding.group.group.clone(),
                    rack_index: binding.rack_index,
                    node_index: binding.node_index,
                });
            }
            previous = Some(binding);
        }

        let mut allocator = Allocator::default();
        let mut batch = Batch::default();
        allocator.uids.reserve(input.nodes.len());
        allocator.bindings.reserve(input.bindings.len());
        batch.dirty.reserve(input.nodes.len());
        for (group, selector) in groups {
            let id = allocator.intern(&group.key);
            allocator.install_group(id, group.clone(), selector, &mut batch);
        }
        allocator.sort_group_order();
        for node in &input.nodes {
            allocator.put_node(node.clone(), &mut batch);
        }
        let mut last_key: Option<(&Arc<GroupKey>, KeyId)> = None;
        for binding in bindings {
            let id = match last_key {
                Some((key, id)) if Arc::ptr_eq(key, &binding.group) => id,
                _ => {
                    let id = allocator.intern(&binding.group);
                    last_key = Some((&binding.group, id));
                    id
                }
            };
            let coord = (id, binding.rack_index, binding.node_index);
            allocator.bindings.insert(coord, binding.clone());
            allocator.attach(coord, binding, &mut batch);
        }
        allocator.finish(batch);
        Ok(allocator)
    }

    /// The plan for the current input; equal to `allocate(&self.input())`.
    pub fn allocation(&self) -> &Allocation {
        &self.allocation
    }

    /// Gives up the allocator and keeps its plan.
    pub fn into_allocation(self) -> Allocation {
        self.allocation
    }

    /// What the last update did.
    pub fn last_update(&self) -> UpdateWork {
        self.last_update
    }

    /// The current input: groups sorted by key, Nodes sorted by UID,
    /// bindings sorted.
    pub fn input(&self) -> AllocationInput {
        let mut nodes: Vec<NodeInput> = self
            .uids
            .values()
            .filter_map(|entry| entry.node.as_ref().map(|node| node.input.clone()))
            .collect();
        nodes.sort_by(|a, b| a.uid.cmp(&b.uid));
        let mut bindings: Vec<Binding> = self.bindings.values().cloned().collect();
        bindings.sort();
        AllocationInput {
            groups: self
                .group_order
                .iter()
                .filter_map(|&id| self.group(id).map(|group| group.input.clone()))
                .collect(),
            nodes,
            bindings,
        }
    }

    /// The Node with this UID, as last upserted.
    pub fn node(&self, uid: &str) -> Option<&NodeInput> {
        self.uids
            .get(uid)
            .and_then(|entry| entry.node.as_ref().map(|node| &node.input))
    }

    /// Adds a Node or replaces the one with the same UID (a Node add or
    /// update event). Refused with `NodeIdentityMissing` when the name or
    /// UID is empty.
    pub fn upsert_node(&mut self, node: NodeInput) -> Result<(), AllocationError> {
        check_node(&node)?;
        let mut batch = Batch::default();
        self.stage_upsert(node, &mut batch);
        self.finish(batch);
        Ok(())
    }

    /// Removes the Node with this UID (a Node delete event) and returns it.
    pub fn remove_node(&mut self, uid: &str) -> Option<NodeInput> {
        let mut batch = Batch::default();
        let removed = self.stage_remove(uid, &mut batch);
        self.finish(batch);
        removed
    }

    /// Records a bound slot (a rack slot gained or changed its Node) and
    /// returns the binding it replaces at that coordinate. Refused with
    /// `BindingIdentityMissing` or `NegativeCoordinate` like `allocate`.
    pub fn bind(&mut self, binding: Binding) -> Result<Option<Binding>, AllocationError> {
        check_binding(&binding)?;
        let mut batch = Batch::default();
        let previous = self.stage_bind(binding, &mut batch);
        self.finish(batch);
        Ok(previous)
    }

    /// Forgets the binding at a coordinate (cleanup cleared the slot, or its
    /// rack is gone) and returns it.
    pub fn unbind(
        &mut self,
        group: &GroupKey,
        rack_index: i32,
        node_index: i32,
    ) -> Option<Binding> {
        let mut batch = Batch::default();
        let removed = self.stage_unbind(group, rack_index, node_index, &mut batch);
        self.finish(batch);
        removed
    }

    /// Replaces the rack groups (an inventory, profile or admission change).
    /// Refused with `allocate`'s error for an invalid list. Unchanged groups
    /// keep their state; the bindings of added, removed or changed groups
    /// and the Nodes that are matched against groups (eligible, not
    /// retained, not bound twice) are re-classified.
    pub fn set_groups(&mut self, groups: Vec<GroupInput>) -> Result<(), AllocationError> {
        compile_groups(&groups)?;
        let mut batch = Batch::default();
        self.stage_groups(&groups, &mut batch);
        self.finish(batch);
        Ok(())
    }

    /// Applies several changes as one update, in order, as if each were
    /// made by its own call; the plan's lists are then edited once (one
    /// linear merge when there are many edits), which is cheaper than one
    /// call per change when a controller has coalesced many events. If any
    /// change would be refused by its own call, the whole batch is refused
    /// with the first such change's error and nothing is applied.
    pub fn apply(
        &mut self,
        changes: impl IntoIterator<Item = Change>,
    ) -> Result<(), AllocationError> {
        let changes: Vec<Change> = changes.into_iter().collect();
        for change in &changes {
            match change {
                Change::UpsertNode(node) => check_node(node)?,
                Change::Bind(binding) => check_binding(binding)?,
                Change::SetGroups(groups) => {
                    compile_groups(groups)?;
                }
                Change::RemoveNode { .. } | Change::Unbind { .. } => {}
            }
        }
        let mut batch = Batch::default();
        for change in changes {
            match change {
                Change::UpsertNode(node) => self.stage_upsert(node, &mut batch),
                Change::RemoveNode { uid } => {
                    self.stage_remove(&uid, &mut batch);
                }
                Change::Bind(binding) => {
                    self.stage_bind(binding, &mut batch);
                }
                Change::Unbind {
                    group,
                    rack_index,
                    node_index,
                } => {
                    self.stage_unbind(&group, rack_index, node_index, &mut batch);
                }
                Change::SetGroups(groups) => self.stage_groups(&groups, &mut batch),
            }
        }
        self.finish(batch);
        Ok(())
    }

    fn stage_upsert(&mut self, node: NodeInput, batch: &mut Batch) {
        if self.node(&node.uid) != Some(&node) {
            self.put_node(node, batch);
        }
    }

    fn stage_remove(&mut self, uid: &str, batch: &mut Batch) -> Option<NodeInput> {
        let removed = self.uids.get_mut(uid).and_then(|entry| entry.node.take());
        if let Some(node) = &removed {
            self.counters.nodes -= 1;
            if node.eligible {
                self.counters.eligible -= 1;
            }
            mark(&mut batch.dirty, uid);
        }
        removed.map(|node| node.input)
    }

    fn stage_bind(&mut self, binding: Binding, batch: &mut Batch) -> Option<Binding> {
        let id = self.intern(&binding.group);
        let coord = (id, binding.rack_index, binding.node_index);
        let previous = self.bindings.insert(coord, binding.clone());
        if let Some(previous) = &previous {
            self.detach(coord, previous, batch);
        }
        self.attach(coord, &binding, batch);
        previous
    }

    fn stage_unbind(
        &mut self,
        group: &GroupKey,
        rack_index: i32,
        node_index: i32,
        batch: &mut Batch,
    ) -> Option<Binding> {
        let coord = (*self.key_ids.get(group)?, rack_index, node_index);
        let removed = self.bindings.remove(&coord)?;
        self.detach(coord, &removed, batch);
        Some(removed)
    }

    /// `groups` must be valid (checked by the caller).
    fn stage_groups(&mut self, groups: &[GroupInput], batch: &mut Batch) {
        let compiled = compile_groups(groups).expect("checked by the caller");
        let mut wanted: HashMap<KeyId, (&GroupInput, PlacementSelector), FastHash> =
            HashMap::default();
        for (group, selector) in compiled {
            let id = self.intern(&group.key);
            wanted.insert(id, (group, selector));
        }
        let mut changed: HashSet<KeyId, FastHash> = HashSet::default();
        for id in self.group_order.clone() {
            let keep = wanted.get(&id).is_some_and(|(group, _)| {
                self.group(id).is_some_and(|state| state.input == **group)
            });
            if !keep {
                self.retract_group(id, batch);
                changed.insert(id);
            }
        }
        for (id, (group, selector)) in wanted {
            if self.group(id).is_none() {
                self.install_group(id, group.clone(), selector, batch);
                changed.insert(id);
            }
        }
        if changed.is_empty() {
            return;
        }
        self.sort_group_order();
        // Every Node that is matched against groups may match differently.
        for (uid, entry) in &self.uids {
            if entry.state.evaluated {
                mark(&mut batch.dirty, uid);
            }
        }
        // Bindings of changed groups are classified again, and occupy the
        // new group states.
        for (&(id, rack_index, node_index), binding) in &self.bindings {
            if !changed.contains(&id) {
                continue;
            }
            mark(&mut batch.dirty, &binding.node.uid);
            if let Some(group) = self.groups[id as usize].as_ref()
                && let Some(slot) = group.slot(rack_index, node_index)
            {
                batch
                    .groups
                    .entry(id)
                    .or_default()
                    .occupied
                    .insert
                    .push(slot);
            }
        }
    }

    fn group(&self, id: KeyId) -> Option<&GroupState> {
        self.groups.get(id as usize).and_then(Option::as_ref)
    }

    fn intern(&mut self, key: &GroupKey) -> KeyId {
        if let Some(&id) = self.key_ids.get(key) {
            return id;
        }
        let id = KeyId::try_from(self.keys.len()).expect("fewer than 2^32 group keys");
        self.keys.push(Arc::new(key.clone()));
        self.groups.push(None);
        self.key_ids.insert(key.clone(), id);
        id
    }

    fn sort_group_order(&mut self) {
        let mut order: Vec<KeyId> = (0..self.groups.len() as KeyId)
            .filter(|&id| self.group(id).is_some())
            .collect();
        order.sort_by(|&a, &b| self.keys[a as usize].cmp(&self.keys[b as usize]));
        self.group_order = order;
    }

    /// A new group state, empty; its bindings' coordinates are added by the
    /// caller as occupancy edits.
    fn install_group(
        &mut self,
        id: KeyId,
        input: GroupInput,
        selector: PlacementSelector,
        batch: &mut Batch,
    ) {
        self.next_generation += 1;
        let capacity = input.racks as u64 * input.nodes_per_rack as u64;
        self.groups[id as usize] = Some(GroupState {
            id,
            key: Arc::clone(&self.keys[id as usize]),
            input,
            selector,
            generation: self.next_generation,
            capacity,
            occupied: Vec::new(),
            candidates: Vec::new(),
            assigned: Vec::new(),
            overflow_start: None,
            probes: 0,
        });
        batch.groups.entry(id).or_default().fresh = true;
    }

    /// Takes a group state out of the plan: its new bindings and its
    /// overflow. (Its candidates are Nodes the caller marks dirty.)
    fn retract_group(&mut self, id: KeyId, batch: &mut Batch) {
        let Some(group) = self.groups[id as usize].take() else {
            return;
        };
        let overflow = group.candidates.get(group.assigned.len()..).unwrap_or(&[]);
        batch.out.pending.remove.extend(overflow.iter().cloned());
        for binding in group.assigned {
            batch.out.assigned.remove.push(binding.clone());
            batch.out.desired.remove.push(binding);
        }
        batch.groups.remove(&id);
    }

    fn put_node(&mut self, node: NodeInput, batch: &mut Batch) {
        let eligible = node.is_eligible();
        let order = NodeOrder {
            created: node.created.clone(),
            node: Arc::new(node.node_ref()),
        };
        mark(&mut batch.dirty, &node.uid);
        let entry = match self.uids.get_mut(node.uid.as_str()) {
            Some(entry) => entry,
            None => self.uids.entry(node.uid.clone()).or_default(),
        };
        let previous = entry.node.replace(NodeEntry {
            input: node,
            order,
            eligible,
        });
        match previous {
            Some(previous) if previous.eligible => self.counters.eligible -= 1,
            Some(_) => {}
            None => self.counters.nodes += 1,
        }
        if eligible {
            self.counters.eligible += 1;
        }
    }

    /// A binding now names its UID (it is already in `self.bindings`).
    fn attach(&mut self, coord: Coord, binding: &Binding, batch: &mut Batch) {
        let uid = &binding.node.uid;
        match self.uids.get_mut(uid.as_str()) {
            Some(entry) => entry.coords.push(coord),
            None => self.uids.entry(uid.clone()).or_default().coords.push(coord),
        }
        mark(&mut batch.dirty, uid);
        if let Some(group) = self.group(coord.0)
            && let Some(slot) = group.slot(coord.1, coord.2)
        {
            batch
                .groups
                .entry(coord.0)
                .or_default()
                .occupied
                .insert
                .push(slot);
        }
    }

    /// A binding no longer names its UID (it is already out of
    /// `self.bindings`, or replaced there).
    fn detach(&mut self, coord: Coord, binding: &Binding, batch: &mut Batch) {
        let uid = &binding.node.uid;
        if let Some(entry) = self.uids.get_mut(uid.as_str())
            && let Some(index) = entry.coords.iter().position(|c| *c == coord)
        {
            entry.coords.swap_remove(index);
        }
        mark(&mut batch.dirty, uid);
        if let Some(group) = self.group(coord.0)
            && let Some(slot) = group.slot(coord.1, coord.2)
        {
            batch
                .groups
                .entry(coord.0)
                .or_default()
                .occupied
                .remove
                .push(slot);
        }
    }

    /// The contribution of one UID, from its Node, its bindings and the
    /// groups (the rules of `allocate`, for one UID).
    fn derive(&self, entry: &UidEntry) -> UidState {
        let mut state = UidState::default();
        let node = entry.node.as_ref();
        let mut bindings: Vec<(Binding, Option<ReleaseReason>)> = entry
            .coords
            .iter()
            .map(|coord| {
                let binding = &self.bindings[coord];
                let reason = match self.group(coord.0) {
                    None => Some(ReleaseReason::GroupRemoved),
                    Some(group) => {
                        if group.slot(coord.1, coord.2).is_none() {
                            Some(ReleaseReason::CapacityShrink)
                        } else if let Some(node) = node {
                            if !node.eligible {
                                Some(ReleaseReason::NodeIneligible)
                            } else {
                                state.selector_evaluations += 1;
                                (!group.selector.matches(&node.input.labels))
                                    .then_some(ReleaseReason::SelectorMismatch)
                            }
                        } else {
                            Some(ReleaseReason::NodeGone)
                        }
                    }
                };
                (binding.clone(), reason)
            })
            .collect();
        bindings.sort();
        if bindings.len() > 1 {
            let groups: BTreeSet<GroupKey> = bindings
                .iter()
                .map(|(binding, _)| binding.group.as_ref().clone())
                .collect();
            state.duplicate = Some(Box::new(Conflict {
                reason: ConflictReason::DuplicateBinding,
                node: node.map_or_else(
                    || bindings[0].0.node.as_ref().clone(),
                    |node| node.input.node_ref(),
                ),
                created: node.and_then(|node| node.input.created.clone()),
                groups: groups.into_iter().collect(),
                bindings: bindings
                    .iter()
                    .map(|(binding, _)| binding.clone())
                    .collect(),
            }));
        }
        let retained = bindings.iter().any(|(_, reason)| reason.is_none());
        if let Some(node) = node
            && node.eligible
            && bindings.len() <= 1
            && !retained
        {
            state.evaluated = true;
            let matching: Vec<&GroupState> = self
                .group_order
                .iter()
                .filter_map(|&id| self.group(id))
                .filter(|group| group.selector.matches(&node.input.labels))
                .collect();
            match matching.as_slice() {
                [] => {}
                [group] => {
                    state.candidate = Some(Candidate {
                        order: node.order.clone(),
                        group: group.id,
                        generation: group.generation,
                        release_pending: bindings.len() == 1,
                    });
                }
                several => {
                    state.overlap = Some(Box::new(Conflict {
                        reason: ConflictReason::SelectorOverlap,
                        node: node.input.node_ref(),
                        created: node.input.created.clone(),
                        groups: several
                            .iter()
                            .map(|group| group.input.key.clone())
                            .collect(),
                        bindings: Vec::new(),
                    }));
                }
            }
        }
        state.bindings = bindings;
        state
    }

    /// Re-derives the dirty UIDs, then the groups whose candidates or
    /// occupancy changed, and applies the edits to the plan.
    fn finish(&mut self, batch: Batch) {
        let Batch {
            dirty,
            groups: mut group_edits,
            mut out,
        } = batch;
        let mut work = UpdateWork {
            nodes_reclassified: dirty.len(),
            ..Default::default()
        };
        for uid in dirty {
            let Some(entry) = self.uids.get(uid.as_str()) else {
                continue;
            };
            let new = self.derive(entry);
            work.bindings_reclassified += new.bindings.len();
            let entry = self.uids.get_mut(uid.as_str()).expect("looked up above");
            let old = std::mem::replace(&mut entry.state, new);
            if old != entry.state {
                emit_difference(
                    &self.groups,
                    &self.keys,
                    &mut self.counters,
                    &old,
                    &entry.state,
                    &mut group_edits,
                    &mut out,
                );
            }
            if entry.node.is_none() && entry.coords.is_empty() {
                self.uids.remove(uid.as_str());
            }
        }
        for (id, edits) in group_edits {
            let Some(group) = self.groups[id as usize].as_mut() else {
                continue;
            };
            work.groups_replanned += 1;
            replan_group(group, edits, &mut out);
        }
        work.plan_edits = out.len();
        let allocation = &mut self.allocation;
        out.retained.apply(&mut allocation.retained);
        out.released.apply(&mut allocation.released);
        out.assigned.apply(&mut allocation.assigned);
        out.desired.apply(&mut allocation.bindings);
        out.conflicts.apply(&mut allocation.conflicts);
        out.pending
            .apply(&mut self.pending_order, &mut allocation.pending);
        let work_counters = WorkCounters {
            groups: self.group_order.len(),
            nodes: self.counters.nodes,
            bindings_classified: self.bindings.len(),
            nodes_placed_or_skipped: self.counters.eligible,
            selector_evaluations: self.counters.binding_selector_evaluations
                + self.counters.evaluated * self.group_order.len(),
            coordinates_probed: self
                .group_order
                .iter()
                .filter_map(|&id| self.group(id))
                .map(|group| group.probes)
                .sum(),
        };
        self.allocation.work = work_counters;
        self.last_update = work;
    }
}

/// Takes `old` out of the plan and puts `new` in, as edits.
fn emit_difference(
    groups: &[Option<GroupState>],
    keys: &[Arc<GroupKey>],
    counters: &mut Counters,
    old: &UidState,
    new: &UidState,
    group_edits: &mut HashMap<KeyId, GroupEdits, FastHash>,
    out: &mut OutputEdits,
) {
    let absent = |list: &[(Binding, Option<ReleaseReason>)],
                  binding: &Binding,
                  reason: &Option<ReleaseReason>| {
        !list.iter().any(|(b, r)| b == binding && r == reason)
    };
    // Bindings only the old state has leave the plan; those only the new
    // state has enter it.
    for (from, to, removing) in [(old, new, true), (new, old, false)] {
        for (binding, reason) in &from.bindings {
            if !absent(&to.bindings, binding, reason) {
                continue;
            }
            match reason {
                None => {
                    out.retained.side(removing).push(binding.clone());
                    out.desired.side(removing).push(binding.clone());
                }
                Some(reason) => out.released.side(removing).push(Release {
                    binding: binding.clone(),
                    reason: *reason,
                }),
            }
        }
    }
    for (old, new) in [
        (&old.duplicate, &new.duplicate),
        (&old.overlap, &new.overlap),
    ] {
        if old != new {
            out.conflicts.remove.extend(old.as_deref().cloned());
            out.conflicts.insert.extend(new.as_deref().cloned());
        }
    }
    if old.candidate != new.candidate {
        if let Some(candidate) = &old.candidate {
            if candidate.release_pending {
                out.pending.remove.push(candidate.order.clone());
            } else if groups[candidate.group as usize]
                .as_ref()
                .is_some_and(|group| group.generation == candidate.generation)
            {
                group_edits
                    .entry(candidate.group)
                    .or_default()
                    .candidates
                    .remove
                    .push(candidate.order.clone());
            }
        }
        if let Some(candidate) = &new.candidate {
            if candidate.release_pending {
                out.pending.insert.push((
                    candidate.order.clone(),
                    PendingNode {
                        node: candidate.order.node.as_ref().clone(),
                        group: Arc::clone(&keys[candidate.group as usize]),
                    },
                ));
            } else {
                group_edits
                    .entry(candidate.group)
                    .or_default()
                    .candidates
                    .insert
                    .push(candidate.order.clone());
            }
        }
    }
    counters.binding_selector_evaluations =
        counters.binding_selector_evaluations + new.selector_evaluations - old.selector_evaluations;
    counters.evaluated =
        counters.evaluated + usize::from(new.evaluated) - usize::from(old.evaluated);
}

/// Applies one group's candidate and occupancy edits, then re-derives the
/// new bindings and the overflow where they can have changed (see the
/// module documentation).
fn replan_group(group: &mut GroupState, edits: GroupEdits, out: &mut OutputEdits) {
    let GroupEdits {
        mut candidates,
        mut occupied,
        fresh,
    } = edits;
    candidates.normalize();
    occupied.normalize();
    if !fresh && candidates.is_empty() && occupied.is_empty() {
        return;
    }
    // Both lists are sorted now: the lowest and highest changed items are
    // at their ends.
    let lowest_candidate = lowest(candidates.remove.first(), candidates.insert.first()).cloned();
    let highest_candidate = highest(candidates.remove.last(), candidates.insert.last()).cloned();
    let lowest_slot = lowest(occupied.remove.first(), occupied.insert.first()).copied();
    let highest_slot = highest(occupied.remove.last(), occupied.insert.last()).copied();
    // Above the highest change, old rank = new rank + offset.
    let candidate_offset = candidates.remove.len() as i64 - candidates.insert.len() as i64;
    let free_offset = occupied.insert.len() as i64 - occupied.remove.len() as i64;
    let removed = candidates.remove.clone();
    let inserted = candidates.insert.clone();
    let old_len = group.assigned.len();
    let old_start = group.overflow_start.take();
    candidates.apply(&mut group.candidates);
    occupied.apply(&mut group.occupied);

    let free_below = |group: &GroupState, slot: u64| -> usize {
        let occupied = group.occupied.partition_point(|&o| o < slot) as u64;
        usize::try_from(slot - occupied).unwrap_or(usize::MAX)
    };
    let mut from = if fresh { 0 } else { usize::MAX };
    let mut aligned = 0usize;
    if let Some(lowest) = &lowest_candidate {
        from = from.min(group.candidates.partition_point(|c| c < lowest));
    }
    if let Some(highest) = &highest_candidate {
        aligned = aligned.max(group.candidates.partition_point(|c| c <= highest));
    }
    if let Some(lowest) = lowest_slot {
        from = from.min(free_below(group, lowest));
    }
    if let Some(highest) = highest_slot {
        aligned = aligned.max(free_below(group, highest + 1));
    }
    let free = group.free_count();
    let new_len = usize::try_from(free)
        .unwrap_or(usize::MAX)
        .min(group.candidates.len());
    let (new_end, old_end) = if !fresh && candidate_offset == free_offset {
        let old_aligned = usize::try_from(aligned as i64 + candidate_offset).unwrap_or(0);
        (aligned.min(new_len), old_aligned.min(old_len))
    } else {
        (new_len, old_len)
    };
    let from_old = from.min(old_end);
    if from < new_end || from_old < old_end {
        let new_segment: Vec<Binding> = if from < new_end {
            group
                .free_slots_from(from as u64)
                .zip(&group.candidates[from..new_end])
                .map(|(slot, candidate)| group.binding_at(slot, candidate))
                .collect()
        } else {
            Vec::new()
        };
        let old_segment: Vec<Binding> = group
            .assigned
            .splice(from_old..old_end, new_segment.iter().cloned())
            .collect();
        // Both segments are sorted (one group, ascending coordinates).
        let mut old_items = old_segment.into_iter().peekable();
        let mut new_items = new_segment.into_iter().peekable();
        loop {
            let order = match (old_items.peek(), new_items.peek()) {
                (Some(old), Some(new)) => old.cmp(new),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => break,
            };
            match order {
                Ordering::Equal => {
                    old_items.next();
                    new_items.next();
                }
                Ordering::Less => {
                    let old = old_items.next().expect("peeked");
                    out.assigned.remove.push(old.clone());
                    out.desired.remove.push(old);
                }
                Ordering::Greater => {
                    let new = new_items.next().expect("peeked");
                    out.assigned.insert.push(new.clone());
                    out.desired.insert.push(new);
                }
            }
        }
    }

    // The overflow: every candidate from `overflow_start` on.
    let new_start = group.candidates.get(new_len).cloned();
    let pending = |node: &NodeOrder| {
        (
            node.clone(),
            PendingNode {
                node: node.node.as_ref().clone(),
                group: Arc::clone(&group.key),
            },
        )
    };
    let at_or_after = |node: &NodeOrder, start: &Option<NodeOrder>| {
        start.as_ref().is_some_and(|start| node >= start)
    };
    if fresh {
        for node in &group.candidates[new_len..] {
            out.pending.insert.push(pending(node));
        }
    } else {
        for node in &removed {
            if at_or_after(node, &old_start) {
                out.pending.remove.push(node.clone());
            }
        }
        for node in &inserted {
            if at_or_after(node, &new_start) {
                out.pending.insert.push(pending(node));
            }
        }
        // Candidates present before and after flip between the two starts
        // (a missing start lies beyond every candidate).
        let start_order = match (&old_start, &new_start) {
            (Some(old), Some(new)) => old.cmp(new),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        let (low, high, entering) = match start_order {
            Ordering::Equal => (None, None, false),
            Ordering::Greater => (new_start.as_ref(), old_start.as_ref(), true),
            Ordering::Less => (old_start.as_ref(), new_start.as_ref(), false),
        };
        if let Some(low) = low {
            let first = group.candidates.partition_point(|c| c < low);
            for node in &group.candidates[first..] {
                if high.is_some_and(|high| node >= high) {
                    break;
                }
                if inserted.binary_search(node).is_ok() {
                    continue;
                }
                if entering {
                    out.pending.insert.push(pending(node));
                } else {
                    out.pending.remove.push(node.clone());
                }
            }
        }
    }
    group.overflow_start = new_start;
    group.probes = group.count_probes();
}

/// The smaller of two optional items (`None` when both are).
fn lowest<'a, T: Ord>(a: Option<&'a T>, b: Option<&'a T>) -> Option<&'a T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The larger of two optional items (`None` when both are).
fn highest<'a, T: Ord>(a: Option<&'a T>, b: Option<&'a T>) -> Option<&'a T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests;
