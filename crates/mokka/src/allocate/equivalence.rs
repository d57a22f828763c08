//! The optimised allocator against the reference form: same result (plan
//! or error) for arbitrary input, including duplicate bindings, renamed
//! Nodes, gone groups and invalid shapes, and for the input that follows a
//! plan when one Node changes. And the incremental `Allocator` against
//! `allocate`: after every change of a random sequence, its plan is the one
//! `allocate` gives for the resulting input.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use proptest::prelude::*;

use super::incremental::{Allocator, Change};
use super::reference::allocate_reference;
use super::*;
use crate::api::LABEL_SGPU_NODE;

fn key(group: u8) -> GroupKey {
    GroupKey::new("inv", "inv-uid", &format!("g{group}"))
}

fn pool(choice: u8) -> String {
    if choice == 0 { "a" } else { "b" }.to_string()
}

fn node(index: usize, created: i64, pool_choice: Option<u8>, eligible: bool) -> NodeInput {
    terminating_node(index, created, pool_choice, eligible, false)
}

fn terminating_node(
    index: usize,
    created: i64,
    pool_choice: Option<u8>,
    eligible: bool,
    terminating: bool,
) -> NodeInput {
    let mut labels = BTreeMap::new();
    if eligible {
        labels.insert(LABEL_SGPU_NODE.to_string(), "true".to_string());
    }
    if let Some(choice) = pool_choice {
        labels.insert("pool".to_string(), pool(choice));
    }
    NodeInput {
        name: format!("n{index}"),
        uid: format!("n{index}-uid"),
        created: Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
        )),
        labels: Arc::new(labels),
        terminating,
    }
}

/// Groups g0..g3 (some absent, so their bindings are `GroupRemoved`), Nodes
/// with colliding creation times, and bindings that may name a Node twice,
/// name a UID under another name, or lie outside capacity.
fn arbitrary_input() -> impl Strategy<Value = AllocationInput> {
    let groups = prop::collection::vec((0..4u8, 0..4i32, 0..4i32, prop::option::of(0..2u8)), 0..4)
        .prop_map(|shapes| {
            let mut seen = std::collections::BTreeSet::new();
            shapes
                .into_iter()
                .filter(|(id, ..)| seen.insert(*id))
                .map(|(id, racks, nodes_per_rack, pool_choice)| GroupInput {
                    key: key(id),
                    selector: pool_choice.map(|choice| LabelSelector {
                        match_labels: Some(BTreeMap::from([("pool".to_string(), pool(choice))])),
                        ..Default::default()
                    }),
                    racks,
                    nodes_per_rack,
                })
                .collect::<Vec<_>>()
        });
    let nodes = prop::collection::vec(
        (
            0..4i64,
            prop::option::of(0..2u8),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.1),
        ),
        0..16,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (created, pool_choice, eligible, terminating))| {
                terminating_node(index, created, pool_choice, eligible, terminating)
            })
            .collect::<Vec<_>>()
    });
    let bindings = prop::collection::vec(
        (
            0..5u8,
            0..4i32,
            0..4i32,
            0..20usize,
            prop::bool::weighted(0.1),
            any::<bool>(),
        ),
        0..14,
    );
    (groups, nodes, bindings).prop_map(|(groups, nodes, raw)| {
        let shared: Vec<Arc<GroupKey>> = (0..5).map(|id| Arc::new(key(id))).collect();
        // A repeated coordinate is an input error (tested elsewhere); keep
        // the first so most cases reach a plan.
        let mut coordinates = std::collections::BTreeSet::new();
        let bindings = raw
            .into_iter()
            .filter(|(group, rack_index, node_index, ..)| {
                coordinates.insert((*group, *rack_index, *node_index))
            })
            .map(
                |(group, rack_index, node_index, target, renamed, share_key)| Binding {
                    // Shared and separate key allocations compare alike.
                    group: if share_key {
                        Arc::clone(&shared[group as usize])
                    } else {
                        Arc::new(key(group))
                    },
                    rack_index,
                    node_index,
                    node: Arc::new(NodeRef {
                        name: if renamed {
                            format!("old{target}")
                        } else {
                            format!("n{target}")
                        },
                        uid: format!("n{target}-uid"),
                    }),
                },
            )
            .collect();
        AllocationInput {
            groups,
            nodes,
            bindings,
        }
    })
}

/// One Node changes: removed, relabelled (eligibility or pool), or a new
/// one added.
fn change_one_node(input: &mut AllocationInput, change: u8, target: usize, created: i64) {
    let count = input.nodes.len();
    match change {
        0 if count > 0 => {
            input.nodes.remove(target % count);
        }
        1 if count > 0 && target % 4 == 3 => {
            let node = &mut input.nodes[target % count];
            node.terminating = !node.terminating;
        }
        1 if count > 0 => {
            let labels = Arc::make_mut(&mut input.nodes[target % count].labels);
            if labels.remove(LABEL_SGPU_NODE).is_none() {
                labels.insert(LABEL_SGPU_NODE.to_string(), "true".to_string());
            }
        }
        2 if count > 0 => {
            let labels = Arc::make_mut(&mut input.nodes[target % count].labels);
            let next = match labels.get("pool").map(String::as_str) {
                Some("a") => Some("b"),
                Some(_) => None,
                None => Some("a"),
            };
            match next {
                Some(value) => labels.insert("pool".to_string(), value.to_string()),
                None => labels.remove("pool"),
            };
        }
        _ => input
            .nodes
            .push(node(100 + target, created, Some((target % 2) as u8), true)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn optimised_allocation_equals_the_reference(input in arbitrary_input()) {
        prop_assert_eq!(allocate(&input), allocate_reference(&input));
    }

    #[test]
    fn optimised_allocation_equals_the_reference_after_one_node_changes(
        input in arbitrary_input(),
        change in 0..4u8,
        target in 0..32usize,
        created in 0..4i64,
    ) {
        let Ok(plan) = allocate_reference(&input) else {
            return Ok(());
        };
        let mut next = AllocationInput { bindings: plan.bindings.clone(), ..input };
        change_one_node(&mut next, change, target, created);
        prop_assert_eq!(allocate(&next), allocate_reference(&next));
    }

    #[test]
    fn binding_order_is_field_order(
        a in (0..3u8, 0..3i32, 0..3i32, 0..3usize),
        b in (0..3u8, 0..3i32, 0..3i32, 0..3usize),
        share in any::<bool>(),
    ) {
        let make = |(group, rack_index, node_index, target): (u8, i32, i32, usize), key_arc: Arc<GroupKey>| Binding {
            group: if *key_arc == key(group) { key_arc } else { Arc::new(key(group)) },
            rack_index,
            node_index,
            node: Arc::new(NodeRef { name: format!("n{target}"), uid: format!("u{target}") }),
        };
        let shared = Arc::new(key(a.0));
        let left = make(a, Arc::clone(&shared));
        let right = make(b, if share { shared } else { Arc::new(key(a.0)) });
        let fields = |x: &Binding| (x.group.as_ref().clone(), x.rack_index, x.node_index, x.node.as_ref().clone());
        prop_assert_eq!(left.cmp(&right), fields(&left).cmp(&fields(&right)));
        prop_assert_eq!(left.partial_cmp(&right), Some(fields(&left).cmp(&fields(&right))));
    }
}

/// A group too large for the occupancy bitmap keeps its slots in a hash
/// set; the plan is the same as the reference's.
#[test]
fn a_group_beyond_the_bitmap_bound_plans_like_the_reference() {
    let shared = Arc::new(key(0));
    let bound = |rack_index: i32, node_index: i32, target: usize| Binding {
        group: Arc::clone(&shared),
        rack_index,
        node_index,
        node: Arc::new(NodeRef {
            name: format!("n{target}"),
            uid: format!("n{target}-uid"),
        }),
    };
    let input = AllocationInput {
        groups: vec![GroupInput {
            key: key(0),
            selector: None,
            racks: i32::MAX,
            nodes_per_rack: 18,
        }],
        nodes: (0..6).map(|index| node(index, 1, None, true)).collect(),
        // Slot 0 is held by a gone Node, slot 1 by n0; n1, n3, n4, n5 fill
        // from slot 2.
        bindings: vec![bound(0, 0, 9), bound(0, 1, 0), bound(1_000_000, 3, 2)],
    };
    let plan = allocate(&input).unwrap();
    assert_eq!(plan, allocate_reference(&input).unwrap());
    assert_eq!(plan.released.len(), 1);
    assert_eq!(plan.retained.len(), 2);
    assert_eq!(
        plan.assigned
            .iter()
            .map(|binding| (binding.rack_index, binding.node_index))
            .collect::<Vec<_>>(),
        vec![(0, 2), (0, 3), (0, 4), (0, 5)]
    );
}

// ---- the incremental allocator against `allocate` ----

/// One change a controller can see, in terms of the generated inputs'
/// names (Nodes `n<i>`, groups `g<i>`).
#[derive(Clone, Debug)]
enum Step {
    /// Adds Node `n<100 + index>`, or (same index again) updates it.
    AddNode {
        index: usize,
        created: i64,
        pool: Option<u8>,
        eligible: bool,
    },
    RemoveNode(usize),
    ToggleEligible(usize),
    CyclePool(usize),
    /// The same Node (UID) with another creation time, so it reorders.
    Recreate(usize, i64),
    /// The same UID under another name.
    Rename(usize),
    /// Binds UID `n<target>-uid` (as `n<target>` or `old<target>`).
    Bind {
        group: u8,
        rack_index: i32,
        node_index: i32,
        target: usize,
        renamed: bool,
    },
    /// Unbinds the `pick`-th current binding.
    Unbind(usize),
    /// Unbinds a coordinate that may hold nothing.
    UnbindCoordinate(u8, i32, i32),
    /// The controller's step: clean up every release, write every new
    /// binding.
    WriteBack,
    /// Cleans up the `pick`-th release only.
    CleanUpOne(usize),
    /// Writes the `pick`-th new binding only.
    WriteOne(usize),
    /// Replaces the groups (possibly with an invalid list).
    SetGroups(Vec<GroupInput>),
    /// A Node without a UID: refused.
    NodeWithoutUid,
    /// A binding at a negative coordinate or without a Node name: refused.
    BadBinding(bool),
    /// The controller's step as one batch (`Allocator::apply`).
    WriteBackBatch,
    /// Several changes as one batch; a malformed one refuses the batch.
    Batch(Vec<Step>),
}

fn arbitrary_groups() -> impl Strategy<Value = Vec<GroupInput>> {
    (
        prop::collection::vec((0..4u8, 0..4i32, 0..4i32, prop::option::of(0..2u8)), 0..4),
        prop::option::of(0..2u8),
    )
        .prop_map(|(shapes, broken)| {
            let mut seen = std::collections::BTreeSet::new();
            let mut groups: Vec<GroupInput> = shapes
                .into_iter()
                .filter(|(id, ..)| seen.insert(*id))
                .map(|(id, racks, nodes_per_rack, pool_choice)| GroupInput {
                    key: key(id),
                    selector: pool_choice.map(|choice| LabelSelector {
                        match_labels: Some(BTreeMap::from([("pool".to_string(), pool(choice))])),
                        ..Default::default()
                    }),
                    racks,
                    nodes_per_rack,
                })
                .collect();
            // Now and then a group `allocate` rejects.
            if let (Some(broken), Some(first)) = (broken, groups.first_mut())
                && seen.len() == 3
            {
                if broken == 0 {
                    first.nodes_per_rack = -1;
                } else {
                    first.selector = Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            crate::api::LABEL_SGPU_ASSIGNED.to_string(),
                            "x".to_string(),
                        )])),
                        ..Default::default()
                    });
                }
            }
            groups
        })
}

fn arbitrary_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0..12usize, 0..5i64, prop::option::of(0..2u8), prop::bool::weighted(0.85)).prop_map(
            |(index, created, pool, eligible)| Step::AddNode { index, created, pool, eligible }
        ),
        2 => (0..32usize).prop_map(Step::RemoveNode),
        2 => (0..32usize).prop_map(Step::ToggleEligible),
        2 => (0..32usize).prop_map(Step::CyclePool),
        1 => (0..32usize, 0..5i64).prop_map(|(target, created)| Step::Recreate(target, created)),
        1 => (0..32usize).prop_map(Step::Rename),
        3 => (0..5u8, 0..4i32, 0..4i32, 0..24usize, prop::bool::weighted(0.1)).prop_map(
            |(group, rack_index, node_index, target, renamed)| Step::Bind {
                group, rack_index, node_index, target, renamed
            }
        ),
        2 => (0..32usize).prop_map(Step::Unbind),
        1 => (0..5u8, 0..4i32, 0..4i32).prop_map(|(g, r, n)| Step::UnbindCoordinate(g, r, n)),
        3 => Just(Step::WriteBack),
        2 => (0..32usize).prop_map(Step::CleanUpOne),
        2 => (0..32usize).prop_map(Step::WriteOne),
        1 => arbitrary_groups().prop_map(Step::SetGroups),
        1 => Just(Step::NodeWithoutUid),
        1 => any::<bool>().prop_map(Step::BadBinding),
    ]
}

fn arbitrary_steps() -> impl Strategy<Value = Vec<Step>> {
    let with_batches = arbitrary_step().prop_recursive(1, 8, 6, |inner| {
        prop_oneof![
            3 => inner.clone(),
            1 => Just(Step::WriteBackBatch),
            1 => prop::collection::vec(inner, 1..6).prop_map(Step::Batch),
        ]
    });
    prop::collection::vec(with_batches, 1..24)
}

/// The `Change` a step makes against the current model and plan, if it is
/// one change (`None` for steps that are no-ops here).
fn change_for(model: &AllocationInput, plan: &Allocation, step: &Step) -> Option<Change> {
    let existing = |target: usize| -> Option<NodeInput> {
        (!model.nodes.is_empty()).then(|| model.nodes[target % model.nodes.len()].clone())
    };
    let unbind = |binding: &Binding| Change::Unbind {
        group: binding.group.as_ref().clone(),
        rack_index: binding.rack_index,
        node_index: binding.node_index,
    };
    Some(match step {
        Step::AddNode {
            index,
            created,
            pool: pool_choice,
            eligible,
        } => Change::UpsertNode(node(100 + index, *created, *pool_choice, *eligible)),
        Step::RemoveNode(target) => Change::RemoveNode {
            uid: existing(*target)?.uid,
        },
        Step::ToggleEligible(target) | Step::CyclePool(target) => {
            let mut one = AllocationInput {
                nodes: vec![existing(*target)?],
                ..Default::default()
            };
            change_one_node(
                &mut one,
                if matches!(step, Step::ToggleEligible(_)) {
                    1
                } else {
                    2
                },
                0,
                0,
            );
            Change::UpsertNode(one.nodes.remove(0))
        }
        Step::Recreate(target, created) => {
            let mut changed = existing(*target)?;
            changed.created = Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(*created).unwrap(),
            ));
            Change::UpsertNode(changed)
        }
        Step::Rename(target) => {
            let mut changed = existing(*target)?;
            changed.name = format!("{}-renamed", changed.name);
            Change::UpsertNode(changed)
        }
        Step::Bind {
            group,
            rack_index,
            node_index,
            target,
            renamed,
        } => Change::Bind(Binding {
            group: Arc::new(key(*group)),
            rack_index: *rack_index,
            node_index: *node_index,
            node: Arc::new(NodeRef {
                name: if *renamed {
                    format!("old{target}")
                } else {
                    format!("n{target}")
                },
                uid: format!("n{target}-uid"),
            }),
        }),
        Step::Unbind(pick) => {
            let mut bindings = model.bindings.clone();
            bindings.sort();
            unbind(bindings.get(pick % bindings.len().max(1))?)
        }
        Step::UnbindCoordinate(group, rack_index, node_index) => Change::Unbind {
            group: key(*group),
            rack_index: *rack_index,
            node_index: *node_index,
        },
        Step::CleanUpOne(pick) => unbind(
            &plan
                .released
                .get(pick % plan.released.len().max(1))?
                .binding,
        ),
        Step::WriteOne(pick) => Change::Bind(
            plan.assigned
                .get(pick % plan.assigned.len().max(1))?
                .clone(),
        ),
        Step::SetGroups(groups) => Change::SetGroups(groups.clone()),
        Step::NodeWithoutUid => {
            let mut bad = node(7, 1, None, true);
            bad.uid.clear();
            Change::UpsertNode(bad)
        }
        Step::BadBinding(negative) => Change::Bind(Binding {
            group: Arc::new(key(0)),
            rack_index: if *negative { -1 } else { 0 },
            node_index: 0,
            node: Arc::new(NodeRef {
                name: if *negative {
                    "n1".to_string()
                } else {
                    String::new()
                },
                uid: "n1-uid".to_string(),
            }),
        }),
        Step::WriteBack | Step::WriteBackBatch | Step::Batch(_) => return None,
    })
}

/// What a change does to the model input (the allocator's keyed
/// semantics: Nodes by UID, bindings by coordinate).
fn apply_to_model(model: &mut AllocationInput, change: &Change) {
    match change {
        Change::UpsertNode(node) => upsert(model, node.clone()),
        Change::RemoveNode { uid } => model.nodes.retain(|n| n.uid != *uid),
        Change::Bind(binding) => bind_model(model, binding.clone()),
        Change::Unbind {
            group,
            rack_index,
            node_index,
        } => unbind_model(model, group, *rack_index, *node_index),
        Change::SetGroups(groups) => model.groups = groups.clone(),
    }
}

/// The error a change's own call would give, if any.
fn refusal(change: &Change) -> Option<AllocationError> {
    match change {
        Change::UpsertNode(node) => check_node(node).err(),
        Change::Bind(binding) => check_binding(binding).err(),
        Change::SetGroups(groups) => compile_groups(groups).err(),
        _ => None,
    }
}

fn upsert(model: &mut AllocationInput, node: NodeInput) {
    match model.nodes.iter().position(|n| n.uid == node.uid) {
        Some(position) => model.nodes[position] = node,
        None => model.nodes.push(node),
    }
}

fn same_coordinate(binding: &Binding, group: &GroupKey, rack_index: i32, node_index: i32) -> bool {
    *binding.group == *group && binding.rack_index == rack_index && binding.node_index == node_index
}

fn unbind_model(model: &mut AllocationInput, group: &GroupKey, rack_index: i32, node_index: i32) {
    model
        .bindings
        .retain(|binding| !same_coordinate(binding, group, rack_index, node_index));
}

fn bind_model(model: &mut AllocationInput, binding: Binding) {
    unbind_model(
        model,
        &binding.group.clone(),
        binding.rack_index,
        binding.node_index,
    );
    model.bindings.push(binding);
}

/// The input with its lists in the allocator's order, to compare with
/// `Allocator::input`.
fn normalised(input: &AllocationInput) -> AllocationInput {
    let mut input = input.clone();
    input.groups.sort_by(|a, b| a.key.cmp(&b.key));
    input.nodes.sort_by(|a, b| a.uid.cmp(&b.uid));
    input.bindings.sort();
    input
}

/// Applies `step` to the allocator and to the model input, and checks the
/// allocator against `allocate(model)`: the same plan, or for a refused
/// change `allocate`'s error for the changed input and an unchanged plan.
fn apply_step(
    allocator: &mut Allocator,
    model: &mut AllocationInput,
    step: &Step,
) -> Result<(), TestCaseError> {
    let existing = |model: &AllocationInput, target: usize| -> Option<NodeInput> {
        (!model.nodes.is_empty()).then(|| model.nodes[target % model.nodes.len()].clone())
    };
    let before = allocator.allocation().clone();
    let refused = |allocator: &Allocator,
                   result: AllocationError,
                   changed: &AllocationInput|
     -> Result<(), TestCaseError> {
        prop_assert_eq!(Err(result), allocate(changed));
        prop_assert_eq!(allocator.allocation(), &before);
        Ok(())
    };
    match step {
        Step::AddNode {
            index,
            created,
            pool: pool_choice,
            eligible,
        } => {
            let new = node(100 + index, *created, *pool_choice, *eligible);
            upsert(model, new.clone());
            allocator.upsert_node(new).unwrap();
        }
        Step::RemoveNode(target) => {
            if let Some(gone) = existing(model, *target) {
                model.nodes.retain(|n| n.uid != gone.uid);
                prop_assert_eq!(allocator.remove_node(&gone.uid), Some(gone));
            } else {
                prop_assert_eq!(allocator.remove_node("absent-uid"), None);
            }
        }
        Step::ToggleEligible(target) | Step::CyclePool(target) => {
            let Some(mut changed) = existing(model, *target) else {
                return Ok(());
            };
            let mut one = AllocationInput {
                nodes: vec![changed.clone()],
                ..Default::default()
            };
            change_one_node(
                &mut one,
                if matches!(step, Step::ToggleEligible(_)) {
                    1
                } else {
                    2
                },
                0,
                0,
            );
            changed = one.nodes.remove(0);
            upsert(model, changed.clone());
            allocator.upsert_node(changed).unwrap();
        }
        Step::Recreate(target, created) => {
            let Some(mut changed) = existing(model, *target) else {
                return Ok(());
            };
            changed.created = Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(*created).unwrap(),
            ));
            upsert(model, changed.clone());
            allocator.upsert_node(changed).unwrap();
        }
        Step::Rename(target) => {
            let Some(mut changed) = existing(model, *target) else {
                return Ok(());
            };
            changed.name = format!("{}-renamed", changed.name);
            upsert(model, changed.clone());
            allocator.upsert_node(changed).unwrap();
        }
        Step::Bind {
            group,
            rack_index,
            node_index,
            target,
            renamed,
        } => {
            let binding = Binding {
                group: Arc::new(key(*group)),
                rack_index: *rack_index,
                node_index: *node_index,
                node: Arc::new(NodeRef {
                    name: if *renamed {
                        format!("old{target}")
                    } else {
                        format!("n{target}")
                    },
                    uid: format!("n{target}-uid"),
                }),
            };
            let previous = model
                .bindings
                .iter()
                .find(|b| same_coordinate(b, &binding.group, *rack_index, *node_index))
                .cloned();
            bind_model(model, binding.clone());
            prop_assert_eq!(allocator.bind(binding).unwrap(), previous);
        }
        Step::Unbind(pick) | Step::CleanUpOne(pick) | Step::WriteOne(pick) => {
            let chosen = match step {
                Step::Unbind(_) => {
                    let mut bindings = model.bindings.clone();
                    bindings.sort();
                    (!bindings.is_empty()).then(|| bindings[pick % bindings.len()].clone())
                }
                Step::CleanUpOne(_) => {
                    let released = &before.released;
                    (!released.is_empty()).then(|| released[pick % released.len()].binding.clone())
                }
                _ => {
                    let assigned = &before.assigned;
                    if assigned.is_empty() {
                        return Ok(());
                    }
                    let binding = assigned[pick % assigned.len()].clone();
                    bind_model(model, binding.clone());
                    prop_assert_eq!(allocator.bind(binding).unwrap(), None);
                    return check(allocator, model);
                }
            };
            let Some(binding) = chosen else { return Ok(()) };
            unbind_model(
                model,
                &binding.group,
                binding.rack_index,
                binding.node_index,
            );
            prop_assert_eq!(
                allocator.unbind(&binding.group, binding.rack_index, binding.node_index),
                Some(binding)
            );
        }
        Step::UnbindCoordinate(group, rack_index, node_index) => {
            let group = key(*group);
            let previous = model
                .bindings
                .iter()
                .find(|b| same_coordinate(b, &group, *rack_index, *node_index))
                .cloned();
            unbind_model(model, &group, *rack_index, *node_index);
            prop_assert_eq!(allocator.unbind(&group, *rack_index, *node_index), previous);
        }
        Step::WriteBack => {
            for release in &before.released {
                let binding = &release.binding;
                unbind_model(
                    model,
                    &binding.group,
                    binding.rack_index,
                    binding.node_index,
                );
                allocator.unbind(&binding.group, binding.rack_index, binding.node_index);
            }
            for binding in &before.assigned {
                bind_model(model, binding.clone());
                allocator.bind(binding.clone()).unwrap();
            }
        }
        Step::SetGroups(groups) => {
            let changed = AllocationInput {
                groups: groups.clone(),
                ..model.clone()
            };
            match allocator.set_groups(groups.clone()) {
                Ok(()) => *model = changed,
                Err(error) => return refused(allocator, error, &changed),
            }
        }
        Step::NodeWithoutUid => {
            let mut bad = node(7, 1, None, true);
            bad.uid.clear();
            let mut changed = model.clone();
            changed.nodes.push(bad.clone());
            let error = allocator.upsert_node(bad).unwrap_err();
            return refused(allocator, error, &changed);
        }
        Step::WriteBackBatch => {
            let changes: Vec<Change> = before
                .released
                .iter()
                .map(|release| Change::Unbind {
                    group: release.binding.group.as_ref().clone(),
                    rack_index: release.binding.rack_index,
                    node_index: release.binding.node_index,
                })
                .chain(before.assigned.iter().cloned().map(Change::Bind))
                .collect();
            for change in &changes {
                apply_to_model(model, change);
            }
            allocator.apply(changes).unwrap();
        }
        Step::Batch(steps) => {
            // Each change is resolved against the model as changed so far.
            let mut changed = model.clone();
            let mut changes = Vec::new();
            let mut first_refusal = None;
            for step in steps {
                let Some(change) = change_for(&changed, &before, step) else {
                    continue;
                };
                match refusal(&change) {
                    Some(error) => {
                        first_refusal.get_or_insert((error, change.clone()));
                    }
                    None => apply_to_model(&mut changed, &change),
                }
                changes.push(change);
            }
            let result = allocator.apply(changes);
            match first_refusal {
                Some((error, change)) => {
                    // Refused whole, with the error that change alone gets.
                    prop_assert_eq!(result, Err(error.clone()));
                    let mut alone = model.clone();
                    apply_to_model(&mut alone, &change);
                    return refused(allocator, error, &alone);
                }
                None => {
                    prop_assert_eq!(result, Ok(()));
                    *model = changed;
                }
            }
        }
        Step::BadBinding(negative) => {
            let binding = Binding {
                group: Arc::new(key(0)),
                rack_index: if *negative { -1 } else { 0 },
                node_index: 0,
                node: Arc::new(NodeRef {
                    name: if *negative {
                        "n1".to_string()
                    } else {
                        String::new()
                    },
                    uid: "n1-uid".to_string(),
                }),
            };
            let mut changed = model.clone();
            bind_model(&mut changed, binding.clone());
            let error = allocator.bind(binding).unwrap_err();
            return refused(allocator, error, &changed);
        }
    }
    check(allocator, model)
}

fn check(allocator: &Allocator, model: &AllocationInput) -> Result<(), TestCaseError> {
    prop_assert_eq!(allocator.input(), normalised(model));
    prop_assert_eq!(Ok(allocator.allocation().clone()), allocate(model));
    Ok(())
}

/// Counts of the outcomes a sequence went through, to show the property
/// exercises every kind of result.
#[derive(Debug, Default)]
struct Seen {
    reasons: std::collections::BTreeSet<ReleaseReason>,
    conflicts: std::collections::BTreeSet<ConflictReason>,
    pending: usize,
    assigned: usize,
    refused: usize,
}

impl Seen {
    fn record(&mut self, plan: &Allocation) {
        self.reasons
            .extend(plan.released.iter().map(|release| release.reason));
        self.conflicts
            .extend(plan.conflicts.iter().map(|conflict| conflict.reason));
        self.pending += plan.pending.len();
        self.assigned += plan.assigned.len();
    }
}

fn run_sequence(
    input: &AllocationInput,
    steps: &[Step],
    seen: &mut Seen,
) -> Result<(), TestCaseError> {
    let mut model = input.clone();
    let mut allocator = match Allocator::new(&model) {
        Ok(allocator) => allocator,
        Err(error) => {
            prop_assert_eq!(Err(error), allocate(&model));
            return Ok(());
        }
    };
    check(&allocator, &model)?;
    for step in steps {
        let before = allocator.allocation().clone();
        apply_step(&mut allocator, &mut model, step)?;
        if *allocator.allocation() == before
            && matches!(step, Step::NodeWithoutUid | Step::BadBinding(_))
        {
            seen.refused += 1;
        }
        seen.record(allocator.allocation());
    }
    // Built from scratch over the final input, the same plan.
    let rebuilt = Allocator::new(&model).unwrap();
    prop_assert_eq!(rebuilt.allocation(), allocator.allocation());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(384))]

    #[test]
    fn incremental_allocation_equals_allocate_after_every_change(
        input in arbitrary_input(),
        steps in arbitrary_steps(),
    ) {
        run_sequence(&input, &steps, &mut Seen::default())?;
    }

    #[test]
    fn an_allocator_built_from_any_input_order_plans_like_allocate(
        input in arbitrary_input(),
        seed in any::<u64>(),
    ) {
        let mut permuted = input.clone();
        let rotate = |len: usize, by: u64| if len == 0 { 0 } else { (by as usize) % len };
        let (g, n, b) = (rotate(permuted.groups.len(), seed), rotate(permuted.nodes.len(), seed / 7), rotate(permuted.bindings.len(), seed / 13));
        permuted.groups.rotate_left(g);
        permuted.nodes.rotate_left(n);
        permuted.nodes.reverse();
        permuted.bindings.rotate_left(b);
        let expected = allocate(&input);
        prop_assert_eq!(Allocator::new(&input).map(Allocator::into_allocation), expected.clone());
        prop_assert_eq!(Allocator::new(&permuted).map(Allocator::into_allocation), expected);
    }
}

/// The property's generators reach every outcome: run a fixed set of
/// generated sequences (deterministic seed), check each against `allocate`,
/// and require that together they produced every release reason, both
/// conflict reasons, pending and new bindings, and refused changes.
#[test]
fn generated_change_sequences_reach_every_outcome() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    let mut runner = TestRunner::deterministic();
    let strategy = (arbitrary_input(), arbitrary_steps());
    let mut seen = Seen::default();
    for _ in 0..300 {
        let (input, steps) = strategy.new_tree(&mut runner).unwrap().current();
        run_sequence(&input, &steps, &mut seen).unwrap();
    }
    assert_eq!(
        seen.reasons,
        [
            ReleaseReason::GroupRemoved,
            ReleaseReason::CapacityShrink,
            ReleaseReason::NodeGone,
            ReleaseReason::NodeIneligible,
            ReleaseReason::SelectorMismatch,
        ]
        .into_iter()
        .collect(),
        "{seen:?}"
    );
    assert_eq!(seen.conflicts.len(), 2, "{seen:?}");
    assert!(
        seen.pending > 0 && seen.assigned > 0 && seen.refused > 0,
        "{seen:?}"
    );
}
