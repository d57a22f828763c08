//! Test-only reference allocator: the straightforward form of `allocate`,
//! kept to prove the optimised one computes the same plan.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use super::*;

/// The allocator as it was before the per-Node vectors, the key-lookup
/// cache and the linear merge: one hash set or map per fact, looked up by
/// UID. Kept only so a property test can show both give the same plan.
pub(super) fn allocate_reference(input: &AllocationInput) -> Result<Allocation, AllocationError> {
    let mut work = WorkCounters {
        groups: input.groups.len(),
        nodes: input.nodes.len(),
        ..Default::default()
    };

    // Groups, sorted by key so every later step visits them in one order.
    let mut group_inputs: Vec<&GroupInput> = input.groups.iter().collect();
    group_inputs.sort_by(|a, b| a.key.cmp(&b.key));
    let mut groups: Vec<CompiledGroup<'_>> = Vec::with_capacity(group_inputs.len());
    for group in group_inputs {
        let key = &group.key;
        if key.inventory_name.is_empty() || key.inventory_uid.is_empty() || key.group.is_empty() {
            return Err(AllocationError::GroupIdentityMissing(key.clone()));
        }
        if groups
            .last()
            .is_some_and(|previous| previous.input.key == *key)
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
        groups.push(CompiledGroup {
            input: group,
            key: Arc::new(group.key.clone()),
            selector,
            occupied: OccupiedSlots::Sparse(HashSet::default()),
            cursor: 0,
            capacity: group.racks as u64 * group.nodes_per_rack as u64,
        });
    }
    let group_index: HashMap<&GroupKey, usize, FastHash> = groups
        .iter()
        .enumerate()
        .map(|(index, group)| (&group.input.key, index))
        .collect();
    let lookup_group = |key: &Arc<GroupKey>| group_index.get(key.as_ref()).copied();

    // Nodes, indexed by UID.
    let mut nodes_by_uid: HashMap<&str, &NodeInput, FastHash> =
        HashMap::with_capacity_and_hasher(input.nodes.len(), FastHash::default());
    for node in &input.nodes {
        if node.name.is_empty() || node.uid.is_empty() {
            return Err(AllocationError::NodeIdentityMissing(node.name.clone()));
        }
        if nodes_by_uid.insert(node.uid.as_str(), node).is_some() {
            return Err(AllocationError::DuplicateNodeUid(node.uid.clone()));
        }
    }

    // Bindings, sorted, checked, and their in-capacity coordinates occupied.
    let mut bindings: Vec<&Binding> = input.bindings.iter().collect();
    bindings.sort();
    // Sorted bindings put a duplicate coordinate next to its twin.
    let mut previous: Option<&Binding> = None;
    for binding in &bindings {
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
        if let Some(index) = lookup_group(group) {
            let compiled = &mut groups[index];
            if let Some(slot) = compiled.slot(binding.rack_index, binding.node_index) {
                compiled.occupied.insert(slot);
            }
        }
    }

    // Classify every existing binding.
    let mut retained = Vec::new();
    let mut released = Vec::new();
    let mut bound_count: HashMap<&str, u32, FastHash> =
        HashMap::with_capacity_and_hasher(bindings.len(), FastHash::default());
    for binding in &bindings {
        work.bindings_classified += 1;
        *bound_count.entry(binding.node.uid.as_str()).or_default() += 1;
        let reason = match lookup_group(&binding.group) {
            None => Some(ReleaseReason::GroupRemoved),
            Some(index) => {
                let group = &groups[index];
                let node = nodes_by_uid.get(binding.node.uid.as_str());
                if group.slot(binding.rack_index, binding.node_index).is_none() {
                    Some(ReleaseReason::CapacityShrink)
                } else if let Some(node) = node {
                    if !node.is_eligible() {
                        Some(ReleaseReason::NodeIneligible)
                    } else {
                        work.selector_evaluations += 1;
                        (!group.selector.matches(&node.labels))
                            .then_some(ReleaseReason::SelectorMismatch)
                    }
                } else {
                    Some(ReleaseReason::NodeGone)
                }
            }
        };
        match reason {
            None => retained.push((*binding).clone()),
            Some(reason) => released.push(Release {
                binding: (*binding).clone(),
                reason,
            }),
        }
    }
    let retained_uids: HashSet<&str, FastHash> = retained
        .iter()
        .map(|binding| binding.node.uid.as_str())
        .collect();

    // A Node bound at two or more coordinates is a data conflict; it is kept
    // where it is and not considered for anything new.
    let mut conflicts = Vec::new();
    let mut duplicate_uids: HashSet<&str, FastHash> = HashSet::default();
    let mut duplicated: BTreeMap<&str, Vec<&Binding>> = BTreeMap::new();
    if bound_count.values().any(|count| *count > 1) {
        for binding in &bindings {
            let uid = binding.node.uid.as_str();
            if bound_count.get(uid).is_some_and(|count| *count > 1) {
                duplicated.entry(uid).or_default().push(binding);
            }
        }
    }
    for (uid, bound) in &duplicated {
        duplicate_uids.insert(uid);
        let groups: BTreeSet<GroupKey> = bound
            .iter()
            .map(|binding| binding.group.as_ref().clone())
            .collect();
        let listed = nodes_by_uid.get(uid);
        conflicts.push(Conflict {
            reason: ConflictReason::DuplicateBinding,
            node: listed.map_or_else(|| bound[0].node.as_ref().clone(), |node| node.node_ref()),
            created: listed.and_then(|node| node.created.clone()),
            groups: groups.into_iter().collect(),
            bindings: bound.iter().map(|binding| (*binding).clone()).collect(),
        });
    }

    // New placements, oldest Node first.
    let mut candidates: Vec<&NodeInput> = input
        .nodes
        .iter()
        .filter(|node| node.is_eligible())
        .collect();
    candidates.sort_by(|a, b| (&a.created, &a.name, &a.uid).cmp(&(&b.created, &b.name, &b.uid)));
    let mut assigned = Vec::new();
    let mut pending = Vec::new();
    let mut matching: Vec<usize> = Vec::with_capacity(groups.len());
    for node in candidates {
        work.nodes_placed_or_skipped += 1;
        let uid = node.uid.as_str();
        if duplicate_uids.contains(uid) || retained_uids.contains(uid) {
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
        let release_pending = bound_count.contains_key(uid);
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
    let mut desired = Vec::with_capacity(retained.len() + assigned.len());
    desired.extend(retained.iter().cloned());
    desired.extend(assigned.iter().cloned());
    desired.sort();
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
