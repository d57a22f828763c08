use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;

use super::*;
use crate::allocate::allocate;
// The fixtures of the full allocator's tests, so both suites build inputs alike.
use crate::allocate::tests::{bind, c, coordinates, group, key, node, time};
use crate::api::LABEL_SGPU_NODE;

fn reasons(plan: &Allocation) -> Vec<(String, ReleaseReason)> {
    plan.released
        .iter()
        .map(|release| (release.binding.node.name.clone(), release.reason))
        .collect()
}

/// The allocator's plan is `allocate`'s for its input.
#[track_caller]
fn assert_plans_like_allocate(allocator: &Allocator) {
    assert_eq!(
        Ok(allocator.allocation()),
        allocate(&allocator.input()).as_ref()
    );
}

/// Writes the plan back as the controller would: clears released slots,
/// binds the new ones.
fn write_back(allocator: &mut Allocator) {
    let plan = allocator.allocation().clone();
    for release in &plan.released {
        let binding = &release.binding;
        allocator.unbind(&binding.group, binding.rack_index, binding.node_index);
    }
    for binding in plan.assigned {
        allocator.bind(binding).unwrap();
    }
}

/// `count` Nodes in one group of racks of 4, every Node bound.
fn bound_fleet(count: usize) -> Allocator {
    let input = AllocationInput {
        groups: vec![group("compute", count.div_ceil(4) as i32 + 1, 4, None)],
        nodes: (0..count)
            .map(|i| node(&format!("node-{i:04}"), i as i64, None))
            .collect(),
        bindings: vec![],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    write_back(&mut allocator);
    allocator
}

#[test]
fn building_from_an_input_gives_the_plan_allocate_gives() {
    let input = AllocationInput {
        groups: vec![group("one", 1, 2, None), group("two", 2, 2, Some("gpu"))],
        nodes: vec![
            node("bound", 1, Some("gpu")),
            node("fresh", 2, Some("gpu")),
            node("plain", 3, None),
            node("late", 4, None),
            node("later", 5, None),
        ],
        bindings: vec![bind("two", 0, 0, "bound"), bind("gone-group", 0, 0, "x")],
    };
    let allocator = Allocator::new(&input).unwrap();
    assert_eq!(allocator.allocation(), &allocate(&input).unwrap());
    assert_plans_like_allocate(&allocator);
}

#[test]
fn the_plan_carries_the_work_counters_of_a_full_allocation() {
    let mut allocator = bound_fleet(40);
    allocator.upsert_node(node("extra", 100, None)).unwrap();
    let full = allocate(&allocator.input()).unwrap();
    assert_eq!(allocator.allocation().work, full.work);
    assert_eq!(full.work.bindings_classified, 40);
    // The update itself looked at one Node.
    assert_eq!(allocator.last_update().nodes_reclassified, 1);
}

#[test]
fn removing_one_bound_node_reclassifies_only_that_node() {
    let mut allocator = bound_fleet(1000);
    assert_eq!(allocator.allocation().retained.len(), 1000);
    let removed = allocator.remove_node("node-0500-uid").unwrap();
    assert_eq!(removed.name, "node-0500");
    assert_eq!(
        allocator.last_update(),
        UpdateWork {
            nodes_reclassified: 1,
            bindings_reclassified: 1,
            groups_replanned: 0,
            plan_edits: 2,
        }
    );
    assert_eq!(
        reasons(allocator.allocation()),
        vec![("node-0500".to_string(), ReleaseReason::NodeGone)]
    );
    assert_eq!(allocator.allocation().retained.len(), 999);
    assert_plans_like_allocate(&allocator);
}

#[test]
fn a_new_node_takes_the_next_free_coordinate_and_retained_bindings_stay() {
    let mut allocator = bound_fleet(10);
    let retained = allocator.allocation().retained.clone();
    allocator.upsert_node(node("newcomer", 50, None)).unwrap();
    let plan = allocator.allocation();
    assert_eq!(plan.retained, retained);
    assert_eq!(
        coordinates(&plan.assigned),
        vec![c("compute", 2, 2, "newcomer")]
    );
    assert_eq!(allocator.last_update().groups_replanned, 1);
    assert_plans_like_allocate(&allocator);
}

#[test]
fn a_removed_nodes_slot_stays_occupied_until_its_binding_is_cleaned_up() {
    let input = AllocationInput {
        groups: vec![group("compute", 1, 2, None)],
        nodes: vec![node("a", 1, None), node("b", 2, None)],
        bindings: vec![],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    write_back(&mut allocator);
    allocator.remove_node("a-uid");
    allocator.upsert_node(node("newcomer", 5, None)).unwrap();
    // The rack is full of bindings, one of them released: the newcomer waits.
    let plan = allocator.allocation();
    assert_eq!(
        reasons(plan),
        vec![("a".to_string(), ReleaseReason::NodeGone)]
    );
    assert!(plan.assigned.is_empty());
    assert_eq!(plan.pending.len(), 1);
    assert_plans_like_allocate(&allocator);

    // Cleanup clears the slot; the newcomer takes it.
    let cleared = allocator.unbind(&key("compute"), 0, 0).unwrap();
    assert_eq!(cleared.node.name, "a");
    let plan = allocator.allocation();
    assert!(plan.released.is_empty() && plan.pending.is_empty());
    assert_eq!(
        coordinates(&plan.assigned),
        vec![c("compute", 0, 0, "newcomer")]
    );
    assert_plans_like_allocate(&allocator);
}

#[test]
fn relabelling_a_bound_node_releases_it_as_ineligible_or_mismatched() {
    let input = AllocationInput {
        groups: vec![group("compute", 1, 3, Some("gpu"))],
        nodes: vec![
            node("a", 1, Some("gpu")),
            node("b", 2, Some("gpu")),
            node("c", 3, Some("gpu")),
        ],
        bindings: vec![],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    write_back(&mut allocator);
    let mut ineligible = node("a", 1, Some("gpu"));
    Arc::make_mut(&mut ineligible.labels).remove(LABEL_SGPU_NODE);
    allocator.upsert_node(ineligible).unwrap();
    allocator.upsert_node(node("b", 2, Some("cpu"))).unwrap();
    assert_eq!(
        reasons(allocator.allocation()),
        vec![
            ("a".to_string(), ReleaseReason::NodeIneligible),
            ("b".to_string(), ReleaseReason::SelectorMismatch)
        ]
    );
    assert_plans_like_allocate(&allocator);

    // Relabelled back, the binding is retained again.
    allocator.upsert_node(node("b", 2, Some("gpu"))).unwrap();
    assert_eq!(
        reasons(allocator.allocation()),
        vec![("a".to_string(), ReleaseReason::NodeIneligible)]
    );
    assert_plans_like_allocate(&allocator);
}

#[test]
fn shrinking_or_removing_a_group_releases_its_bindings() {
    let input = AllocationInput {
        groups: vec![
            group("big", 2, 2, Some("a")),
            group("small", 1, 1, Some("b")),
        ],
        nodes: vec![
            node("a0", 1, Some("a")),
            node("a1", 2, Some("a")),
            node("a2", 3, Some("a")),
            node("b0", 4, Some("b")),
        ],
        bindings: vec![],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    write_back(&mut allocator);
    allocator
        .set_groups(vec![group("big", 1, 2, Some("a"))])
        .unwrap();
    let plan = allocator.allocation();
    assert_eq!(
        reasons(plan),
        vec![
            ("a2".to_string(), ReleaseReason::CapacityShrink),
            ("b0".to_string(), ReleaseReason::GroupRemoved)
        ]
    );
    assert_eq!(
        coordinates(&plan.retained),
        vec![c("big", 0, 0, "a0"), c("big", 0, 1, "a1")]
    );
    // a2 and b0 wait for their releases; b0 has no group any more.
    assert_eq!(plan.pending.len(), 1);
    assert_eq!(plan.pending[0].node.name, "a2");
    assert_plans_like_allocate(&allocator);

    // Growing again re-classifies: a2's binding is inside capacity again.
    allocator
        .set_groups(vec![group("big", 2, 2, Some("a"))])
        .unwrap();
    assert_eq!(
        reasons(allocator.allocation()),
        vec![("b0".to_string(), ReleaseReason::GroupRemoved)]
    );
    assert_plans_like_allocate(&allocator);
}

#[test]
fn adding_a_group_leaves_the_bindings_of_unchanged_groups_unclassified() {
    let mut allocator = bound_fleet(100);
    allocator
        .upsert_node(node("spare", 500, Some("gpu")))
        .unwrap();
    let mut groups = allocator.input().groups;
    groups.push(group("gpu", 1, 1, Some("gpu")));
    allocator.set_groups(groups).unwrap();
    // Only the Node matched against groups (the unbound spare, which now
    // overlaps) is re-classified; the 100 bound Nodes are not.
    let work = allocator.last_update();
    assert_eq!(work.nodes_reclassified, 1);
    assert_eq!(work.bindings_reclassified, 0);
    let plan = allocator.allocation();
    assert_eq!(plan.conflicts.len(), 1);
    assert_eq!(plan.conflicts[0].reason, ConflictReason::SelectorOverlap);
    assert_eq!(plan.retained.len(), 100);
    assert_plans_like_allocate(&allocator);
}

#[test]
fn an_older_node_added_later_goes_first_and_unbound_younger_nodes_move_up() {
    let input = AllocationInput {
        groups: vec![group("compute", 1, 3, None)],
        nodes: vec![node("b", 2, None), node("c", 3, None), node("d", 4, None)],
        bindings: vec![],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    // Nothing is written back yet, so the plan is still free to change.
    allocator.upsert_node(node("a", 1, None)).unwrap();
    let plan = allocator.allocation();
    assert_eq!(
        coordinates(&plan.assigned),
        vec![
            c("compute", 0, 0, "a"),
            c("compute", 0, 1, "b"),
            c("compute", 0, 2, "c")
        ]
    );
    assert_eq!(plan.pending[0].node.name, "d");
    assert_plans_like_allocate(&allocator);
}

#[test]
fn binding_a_node_twice_is_a_duplicate_until_one_binding_is_removed() {
    let mut allocator = bound_fleet(3);
    let twice = bind("compute", 1, 3, "node-0000");
    assert_eq!(allocator.bind(twice).unwrap(), None);
    let plan = allocator.allocation();
    assert_eq!(plan.conflicts.len(), 1);
    assert_eq!(plan.conflicts[0].reason, ConflictReason::DuplicateBinding);
    assert_eq!(plan.conflicts[0].bindings.len(), 2);
    assert_plans_like_allocate(&allocator);

    allocator.unbind(&key("compute"), 1, 3).unwrap();
    assert!(allocator.allocation().conflicts.is_empty());
    assert_plans_like_allocate(&allocator);
}

#[test]
fn binding_an_occupied_coordinate_replaces_its_binding() {
    let mut allocator = bound_fleet(3);
    let previous = allocator.bind(bind("compute", 0, 0, "node-0002")).unwrap();
    assert_eq!(previous.unwrap().node.name, "node-0000");
    // node-0002 is now bound twice; node-0000 lost its binding and gets a
    // new slot.
    let plan = allocator.allocation();
    assert_eq!(plan.conflicts[0].reason, ConflictReason::DuplicateBinding);
    assert_eq!(
        coordinates(&plan.assigned),
        vec![c("compute", 0, 3, "node-0000")]
    );
    assert_plans_like_allocate(&allocator);
}

#[test]
fn a_node_matching_two_groups_is_an_overlap_until_a_selector_changes() {
    let input = AllocationInput {
        groups: vec![group("one", 1, 2, None), group("two", 1, 2, Some("gpu"))],
        nodes: vec![node("both", 1, Some("gpu"))],
        bindings: vec![],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    assert_eq!(
        allocator.allocation().conflicts[0].reason,
        ConflictReason::SelectorOverlap
    );
    allocator
        .set_groups(vec![
            group("one", 1, 2, Some("cpu")),
            group("two", 1, 2, Some("gpu")),
        ])
        .unwrap();
    let plan = allocator.allocation();
    assert!(plan.conflicts.is_empty());
    assert_eq!(coordinates(&plan.assigned), vec![c("two", 0, 0, "both")]);
    assert_plans_like_allocate(&allocator);
}

#[test]
fn a_node_whose_release_is_pending_takes_a_new_slot_after_cleanup() {
    let input = AllocationInput {
        groups: vec![group("compute", 2, 2, None)],
        nodes: vec![node("returning", 1, None)],
        bindings: vec![bind("compute", 3, 0, "returning")],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    let plan = allocator.allocation();
    assert_eq!(
        reasons(plan),
        vec![("returning".to_string(), ReleaseReason::CapacityShrink)]
    );
    assert_eq!(plan.pending[0].node.name, "returning");
    allocator.unbind(&key("compute"), 3, 0).unwrap();
    let plan = allocator.allocation();
    assert!(plan.pending.is_empty());
    assert_eq!(
        coordinates(&plan.assigned),
        vec![c("compute", 0, 0, "returning")]
    );
    assert_plans_like_allocate(&allocator);
}

#[test]
fn a_replacement_node_with_the_same_name_and_a_new_uid_is_new() {
    let mut allocator = bound_fleet(2);
    allocator.remove_node("node-0001-uid").unwrap();
    let mut replacement = node("node-0001", 9, None);
    replacement.uid = "node-0001-uid-2".into();
    allocator.upsert_node(replacement).unwrap();
    let plan = allocator.allocation();
    assert_eq!(
        reasons(plan),
        vec![("node-0001".to_string(), ReleaseReason::NodeGone)]
    );
    assert_eq!(plan.assigned[0].node.uid, "node-0001-uid-2");
    assert_plans_like_allocate(&allocator);
}

#[test]
fn writing_the_plan_back_retains_every_binding() {
    let input = AllocationInput {
        groups: vec![group("compute", 3, 2, None)],
        nodes: (0..5).map(|i| node(&format!("n{i}"), i, None)).collect(),
        bindings: vec![bind("compute", 5, 5, "n0")],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    // n0 waits for its out-of-capacity binding; write back twice (release,
    // then n0's new slot).
    write_back(&mut allocator);
    write_back(&mut allocator);
    let plan = allocator.allocation();
    assert!(plan.assigned.is_empty() && plan.released.is_empty() && plan.pending.is_empty());
    assert_eq!(plan.retained.len(), 5);
    assert_eq!(plan.bindings, plan.retained);
    assert_plans_like_allocate(&allocator);
}

#[test]
fn upserting_an_unchanged_node_does_nothing() {
    let mut allocator = bound_fleet(5);
    let before = allocator.allocation().clone();
    allocator.upsert_node(node("node-0003", 3, None)).unwrap();
    assert_eq!(allocator.last_update(), UpdateWork::default());
    assert_eq!(allocator.allocation(), &before);
}

#[test]
fn changes_allocate_rejects_are_refused_and_leave_the_plan_unchanged() {
    let mut allocator = bound_fleet(3);
    let before = allocator.allocation().clone();
    let input = allocator.input();

    let mut nameless = node("x", 1, None);
    nameless.name.clear();
    let error = allocator.upsert_node(nameless.clone()).unwrap_err();
    let mut changed = input.clone();
    changed.nodes.push(nameless);
    assert_eq!(Err(error), allocate(&changed));

    let negative = bind("compute", -1, 0, "node-0000");
    let error = allocator.bind(negative.clone()).unwrap_err();
    let mut changed = input.clone();
    changed.bindings.push(negative);
    assert_eq!(Err(error), allocate(&changed));
    assert!(matches!(
        allocator.bind(Binding {
            node: Arc::new(NodeRef::default()),
            ..bind("compute", 0, 0, "a")
        }),
        Err(AllocationError::BindingIdentityMissing { .. })
    ));

    let owned = LabelSelector {
        match_labels: Some(BTreeMap::from([(
            "nvidia.com/gpu.clique".to_string(),
            "x".to_string(),
        )])),
        ..Default::default()
    };
    let mut groups = input.groups.clone();
    groups[0].selector = Some(owned);
    let error = allocator.set_groups(groups.clone()).unwrap_err();
    assert_eq!(
        error.to_string(),
        "rack group \"compute\" selector: selector must not reference controller-owned label \"nvidia.com/gpu.clique\""
    );
    assert_eq!(
        Err(error),
        allocate(&AllocationInput {
            groups,
            ..input.clone()
        })
    );
    let mut doubled = input.groups.clone();
    doubled.push(input.groups[0].clone());
    assert!(matches!(
        allocator.set_groups(doubled),
        Err(AllocationError::DuplicateGroup(_))
    ));

    assert_eq!(allocator.allocation(), &before);
    assert_eq!(allocator.input(), input);
}

#[test]
fn building_from_malformed_input_fails_with_allocates_error() {
    let base = AllocationInput {
        groups: vec![group("compute", 1, 2, None)],
        nodes: vec![node("a", 1, None)],
        bindings: vec![],
    };
    type Edit = Box<dyn Fn(&mut AllocationInput)>;
    let cases: Vec<Edit> = vec![
        Box::new(|i| i.nodes[0].uid.clear()),
        Box::new(|i| i.nodes.push(node("a", 2, None))),
        Box::new(|i| {
            i.bindings
                .extend([bind("compute", 0, 0, "a"), bind("compute", 0, 0, "b")])
        }),
        Box::new(|i| i.bindings.push(bind("compute", 0, -1, "a"))),
        Box::new(|i| i.groups.push(group("compute", 3, 3, None))),
        Box::new(|i| i.groups[0].racks = -1),
        // Several errors at once: allocate's order decides.
        Box::new(|i| {
            i.groups[0].nodes_per_rack = -1;
            i.nodes.push(node("a", 2, None));
            i.bindings.push(bind("compute", -1, 0, "a"));
        }),
    ];
    for edit in cases {
        let mut input = base.clone();
        edit(&mut input);
        let expected = allocate(&input).unwrap_err();
        assert_eq!(Allocator::new(&input).unwrap_err(), expected);
    }
}

#[test]
fn an_empty_allocator_plans_nothing_until_it_is_given_input() {
    let mut allocator = Allocator::default();
    assert_eq!(
        allocator.allocation(),
        &allocate(&AllocationInput::default()).unwrap()
    );
    allocator
        .set_groups(vec![group("compute", 1, 1, None)])
        .unwrap();
    allocator.upsert_node(node("a", 1, None)).unwrap();
    assert_eq!(
        coordinates(&allocator.allocation().assigned),
        vec![c("compute", 0, 0, "a")]
    );
    assert_plans_like_allocate(&allocator);
}

#[test]
fn a_group_beyond_any_bitmap_finds_free_slots_among_sparse_bindings() {
    let input = AllocationInput {
        groups: vec![group("compute", i32::MAX, 18, None)],
        nodes: (0..6).map(|i| node(&format!("n{i}"), 1, None)).collect(),
        bindings: vec![
            bind("compute", 0, 0, "gone"),
            bind("compute", 0, 1, "n0"),
            bind("compute", 1_000_000, 3, "n2"),
        ],
    };
    let mut allocator = Allocator::new(&input).unwrap();
    assert_eq!(allocator.allocation(), &allocate(&input).unwrap());
    allocator.unbind(&key("compute"), 0, 0).unwrap();
    assert_eq!(
        coordinates(&allocator.allocation().assigned)[0],
        c("compute", 0, 0, "n1")
    );
    assert_plans_like_allocate(&allocator);
}

#[test]
fn many_nodes_added_in_one_build_and_removed_one_by_one_plan_like_allocate() {
    // Builds merge their edits in one pass; later single changes edit in
    // place. Both keep the lists sorted.
    let input = AllocationInput {
        groups: vec![group("a", 10, 4, Some("a")), group("b", 5, 4, None)],
        nodes: (0..120)
            .map(|i| {
                node(
                    &format!("n{i:03}"),
                    (i * 7 % 13) as i64,
                    (i % 3 == 0).then_some("a"),
                )
            })
            .collect(),
        bindings: (0..30)
            .map(|i| bind("a", i / 4, i % 4, &format!("n{:03}", i * 3)))
            .collect(),
    };
    let mut allocator = Allocator::new(&input).unwrap();
    assert_eq!(allocator.allocation(), &allocate(&input).unwrap());
    for i in (0..120).step_by(7) {
        allocator.remove_node(&format!("n{i:03}-uid"));
        assert_plans_like_allocate(&allocator);
    }
    allocator
        .set_groups(vec![group("a", 3, 4, Some("a")), group("c", 2, 2, None)])
        .unwrap();
    assert_plans_like_allocate(&allocator);
}

proptest! {
    #[test]
    fn edits_keep_a_sorted_list_equal_to_the_set_they_describe(
        items in prop::collection::btree_set(0..400u32, 0..200),
        remove_mask in prop::collection::vec(any::<bool>(), 200),
        insert in prop::collection::btree_set(400..800u32, 0..80),
    ) {
        let list: Vec<u32> = items.iter().copied().collect();
        let remove: Vec<u32> = list
            .iter()
            .zip(&remove_mask)
            .filter(|(_, removed)| **removed)
            .map(|(item, _)| *item)
            .collect();
        let mut expected: BTreeSet<u32> = items.clone();
        for item in &remove {
            expected.remove(item);
        }
        expected.extend(insert.iter().copied());
        let mut edited = list.clone();
        // Insertions in reverse order: the edits sort them.
        Edits { remove: remove.clone(), insert: insert.iter().rev().copied().collect() }.apply(&mut edited);
        prop_assert_eq!(edited, expected.iter().copied().collect::<Vec<_>>());

        // Pending edits keep the key and value lists parallel.
        let order = |n: u32| NodeOrder {
            created: time(i64::from(n % 7)),
            node: Arc::new(NodeRef { name: format!("n{n:03}"), uid: format!("u{n}") }),
        };
        let pending_node = |n: u32| PendingNode {
            node: order(n).node.as_ref().clone(),
            group: Arc::new(key("g")),
        };
        let mut keys: Vec<NodeOrder> = list.iter().map(|&n| order(n)).collect();
        keys.sort();
        let mut values: Vec<PendingNode> = keys.iter().map(|k| PendingNode { node: k.node.as_ref().clone(), group: Arc::new(key("g")) }).collect();
        PendingEdits {
            remove: remove.iter().map(|&n| order(n)).collect(),
            insert: insert.iter().map(|&n| (order(n), pending_node(n))).collect(),
        }
        .apply(&mut keys, &mut values);
        let mut expected_keys: Vec<NodeOrder> = expected.iter().map(|&n| order(n)).collect();
        expected_keys.sort();
        prop_assert_eq!(&keys, &expected_keys);
        prop_assert!(keys.iter().zip(&values).all(|(k, v)| *k.node == v.node));
    }
}

/// 1000 unbound Nodes planned into a group with room for `capacity`.
fn planned_fleet(capacity: i32) -> Allocator {
    let input = AllocationInput {
        groups: vec![group("compute", capacity / 4, 4, None)],
        nodes: (0..1000)
            .map(|i| node(&format!("node-{i:04}"), i as i64, None))
            .collect(),
        bindings: vec![],
    };
    Allocator::new(&input).unwrap()
}

#[test]
fn writing_back_one_new_binding_edits_only_that_binding() {
    for capacity in [1200, 600] {
        let mut allocator = planned_fleet(capacity);
        let pending = allocator.allocation().pending.clone();
        assert_eq!(pending.len(), 1000usize.saturating_sub(capacity as usize));
        // The oldest Node's new binding is written: it moves from assigned
        // to retained, and no other Node's slot or pending state changes.
        let first = allocator.allocation().assigned[0].clone();
        allocator.bind(first.clone()).unwrap();
        assert_eq!(
            allocator.last_update(),
            UpdateWork {
                nodes_reclassified: 1,
                bindings_reclassified: 1,
                groups_replanned: 1,
                plan_edits: 2,
            }
        );
        let plan = allocator.allocation();
        assert_eq!(plan.retained, vec![first]);
        assert_eq!(plan.pending, pending);
        assert_plans_like_allocate(&allocator);
    }
}

#[test]
fn an_older_node_in_a_full_group_pushes_only_the_last_placed_node_into_pending() {
    let mut allocator = planned_fleet(600);
    let mut oldest = node("oldest", -1, None);
    oldest.uid = "oldest-uid".into();
    allocator.upsert_node(oldest).unwrap();
    let plan = allocator.allocation();
    // Every new binding moves one slot along (as in allocate), one more
    // Node waits, and it is the youngest placed one.
    assert_eq!(plan.assigned[0].node.name, "oldest");
    assert_eq!(plan.pending.len(), 401);
    assert_eq!(plan.pending[0].node.name, "node-0599");
    assert_plans_like_allocate(&allocator);
}

#[test]
fn a_batch_of_changes_plans_like_the_same_changes_made_one_by_one() {
    let mut batched = bound_fleet(20);
    let mut single = batched.clone();
    let changes = vec![
        Change::RemoveNode {
            uid: "node-0003-uid".into(),
        },
        Change::UpsertNode(node("newcomer", 99, None)),
        Change::Unbind {
            group: key("compute"),
            rack_index: 0,
            node_index: 3,
        },
        Change::Bind(bind("compute", 5, 0, "node-0004")),
        Change::SetGroups(vec![group("compute", 4, 4, None)]),
    ];
    batched.apply(changes.clone()).unwrap();
    for change in changes {
        single.apply([change]).unwrap();
    }
    assert_eq!(batched.allocation(), single.allocation());
    assert_eq!(batched.input(), single.input());
    assert_plans_like_allocate(&batched);
}

#[test]
fn binding_and_unbinding_a_coordinate_in_one_batch_leaves_it_free() {
    let mut allocator = bound_fleet(2);
    allocator
        .apply([
            Change::Bind(bind("compute", 1, 0, "visitor")),
            Change::Unbind {
                group: key("compute"),
                rack_index: 1,
                node_index: 0,
            },
            Change::UpsertNode(node("newcomer", 9, None)),
        ])
        .unwrap();
    assert_eq!(
        coordinates(&allocator.allocation().assigned),
        vec![c("compute", 0, 2, "newcomer")]
    );
    assert_plans_like_allocate(&allocator);
}

#[test]
fn a_batch_with_a_malformed_change_is_refused_whole() {
    let mut allocator = bound_fleet(3);
    let before = allocator.allocation().clone();
    let input = allocator.input();
    let result = allocator.apply([
        Change::RemoveNode {
            uid: "node-0000-uid".into(),
        },
        Change::Bind(bind("compute", 0, -2, "node-0001")),
        Change::UpsertNode(NodeInput {
            uid: String::new(),
            ..node("x", 1, None)
        }),
    ]);
    assert!(matches!(
        result,
        Err(AllocationError::NegativeCoordinate { node_index: -2, .. })
    ));
    assert_eq!(allocator.allocation(), &before);
    assert_eq!(allocator.input(), input);
}

#[test]
fn an_allocator_can_be_shared_between_threads_behind_a_lock() {
    fn send_and_sync<T: Send + Sync>() {}
    send_and_sync::<Allocator>();
}
