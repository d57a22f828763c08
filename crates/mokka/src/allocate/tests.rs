use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use proptest::prelude::*;

use super::*;
use crate::api::LABEL_SGPU_NODE;

pub(super) fn time(seconds: i64) -> Option<Time> {
    Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap(),
    ))
}

pub(super) fn key(group: &str) -> GroupKey {
    GroupKey::new("inv", "inv-uid", group)
}

pub(super) fn group(name: &str, racks: i32, nodes_per_rack: i32, pool: Option<&str>) -> GroupInput {
    GroupInput {
        key: key(name),
        selector: pool.map(|pool| LabelSelector {
            match_labels: Some(BTreeMap::from([("pool".to_string(), pool.to_string())])),
            ..Default::default()
        }),
        racks,
        nodes_per_rack,
    }
}

pub(super) fn node(name: &str, created: i64, pool: Option<&str>) -> NodeInput {
    let mut labels = BTreeMap::from([(LABEL_SGPU_NODE.to_string(), "true".to_string())]);
    if let Some(pool) = pool {
        labels.insert("pool".into(), pool.into());
    }
    NodeInput {
        name: name.into(),
        uid: format!("{name}-uid"),
        created: time(created),
        labels: Arc::new(labels),
        terminating: false,
    }
}

pub(super) fn bind(group: &str, rack_index: i32, node_index: i32, node: &str) -> Binding {
    Binding {
        group: Arc::new(key(group)),
        rack_index,
        node_index,
        node: Arc::new(NodeRef {
            name: node.into(),
            uid: format!("{node}-uid"),
        }),
    }
}

pub(super) fn coordinates(bindings: &[Binding]) -> Vec<(String, i32, i32, String)> {
    bindings
        .iter()
        .map(|b| {
            (
                b.group.group.clone(),
                b.rack_index,
                b.node_index,
                b.node.name.clone(),
            )
        })
        .collect()
}

pub(super) fn c(group: &str, rack: i32, node: i32, name: &str) -> (String, i32, i32, String) {
    (group.into(), rack, node, name.into())
}

#[test]
fn new_nodes_fill_free_coordinates_rack_major_oldest_first() {
    let input = AllocationInput {
        groups: vec![group("compute", 2, 2, None)],
        nodes: vec![
            node("d", 4, None),
            node("b", 2, None),
            node("a", 1, None),
            node("c", 3, None),
            node("e", 5, None),
        ],
        bindings: vec![],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(
        coordinates(&allocation.assigned),
        vec![
            c("compute", 0, 0, "a"),
            c("compute", 0, 1, "b"),
            c("compute", 1, 0, "c"),
            c("compute", 1, 1, "d")
        ]
    );
    assert_eq!(
        allocation.pending,
        vec![PendingNode {
            node: node("e", 5, None).node_ref(),
            group: Arc::new(key("compute"))
        }]
    );
    assert_eq!(allocation.bindings, allocation.assigned);
}

#[test]
fn retains_bindings_and_fills_only_free_slots() {
    let input = AllocationInput {
        groups: vec![group("compute", 1, 3, None)],
        nodes: vec![
            node("old", 1, None),
            node("new", 2, None),
            node("bound", 9, None),
        ],
        bindings: vec![bind("compute", 0, 1, "bound")],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(
        coordinates(&allocation.retained),
        vec![c("compute", 0, 1, "bound")]
    );
    assert_eq!(
        coordinates(&allocation.assigned),
        vec![c("compute", 0, 0, "old"), c("compute", 0, 2, "new")]
    );
    assert!(allocation.released.is_empty());
}

#[test]
fn orders_pending_nodes_by_creation_time_name_and_uid() {
    let mut same_second_low_uid = node("x", 5, None);
    same_second_low_uid.uid = "x-uid-1".into();
    let mut same_second_high_uid = node("x", 5, None);
    same_second_high_uid.uid = "x-uid-2".into();
    let input = AllocationInput {
        groups: vec![group("compute", 0, 1, None)],
        nodes: vec![
            same_second_high_uid,
            node("b", 5, None),
            node("z", 1, None),
            same_second_low_uid,
            node("a", 5, None),
        ],
        bindings: vec![],
    };
    let allocation = allocate(&input).unwrap();
    let order: Vec<(String, String)> = allocation
        .pending
        .iter()
        .map(|p| (p.node.name.clone(), p.node.uid.clone()))
        .collect();
    assert_eq!(
        order,
        vec![
            ("z".into(), "z-uid".into()),
            ("a".into(), "a-uid".into()),
            ("b".into(), "b-uid".into()),
            ("x".into(), "x-uid-1".into()),
            ("x".into(), "x-uid-2".into()),
        ]
    );
}

#[test]
fn reports_selector_overlap_unless_a_valid_binding_exists() {
    let input = AllocationInput {
        groups: vec![group("one", 1, 2, None), group("two", 1, 2, Some("gpu"))],
        nodes: vec![
            node("bound", 1, Some("gpu")),
            node("fresh", 2, Some("gpu")),
            node("plain", 3, None),
        ],
        bindings: vec![bind("two", 0, 0, "bound")],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(
        coordinates(&allocation.retained),
        vec![c("two", 0, 0, "bound")]
    );
    assert_eq!(allocation.conflicts.len(), 1);
    let conflict = &allocation.conflicts[0];
    assert_eq!(conflict.reason, ConflictReason::SelectorOverlap);
    assert_eq!(conflict.node.name, "fresh");
    assert_eq!(conflict.groups, vec![key("one"), key("two")]);
    assert_eq!(
        coordinates(&allocation.assigned),
        vec![c("one", 0, 0, "plain")]
    );
    // The overlap is visible from both groups' views.
    assert_eq!(allocation.group_view(&key("one")).conflicts.len(), 1);
    assert_eq!(allocation.group_view(&key("two")).conflicts.len(), 1);
}

#[test]
fn keeps_duplicate_bindings_as_a_data_conflict() {
    let input = AllocationInput {
        groups: vec![group("compute", 2, 2, None)],
        nodes: vec![node("twice", 1, None), node("other", 2, None)],
        bindings: vec![
            bind("compute", 0, 0, "twice"),
            bind("compute", 1, 1, "twice"),
        ],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(allocation.conflicts.len(), 1);
    assert_eq!(
        allocation.conflicts[0].reason,
        ConflictReason::DuplicateBinding
    );
    assert_eq!(
        allocation.conflicts[0].bindings,
        vec![
            bind("compute", 0, 0, "twice"),
            bind("compute", 1, 1, "twice")
        ]
    );
    // Neither binding moves, and the other Node does not take their slots.
    assert_eq!(
        coordinates(&allocation.retained),
        vec![c("compute", 0, 0, "twice"), c("compute", 1, 1, "twice")]
    );
    assert_eq!(
        coordinates(&allocation.assigned),
        vec![c("compute", 0, 1, "other")]
    );
}

#[test]
fn plans_releases_with_all_five_reasons() {
    let mut ineligible = node("ineligible", 3, Some("gpu"));
    Arc::make_mut(&mut ineligible.labels).insert(LABEL_SGPU_NODE.into(), "false".into());
    let input = AllocationInput {
        groups: vec![group("compute", 1, 2, Some("gpu"))],
        nodes: vec![
            node("kept", 1, Some("gpu")),
            node("removed", 2, Some("gpu")),
            ineligible,
            node("moved", 4, Some("cpu")),
            node("shrunk", 5, Some("gpu")),
        ],
        bindings: vec![
            bind("compute", 0, 0, "kept"),
            bind("deleted-group", 0, 0, "removed"),
            bind("compute", 3, 0, "shrunk"),
            bind("compute", 0, 1, "gone"),
            Binding {
                group: Arc::new(key("compute")),
                rack_index: 5,
                node_index: 0,
                node: Arc::new(NodeRef {
                    name: "ineligible".into(),
                    uid: "ineligible-uid".into(),
                }),
            },
            bind("compute", 6, 1, "moved"),
        ],
    };
    let allocation = allocate(&input).unwrap();
    let reasons: BTreeMap<String, ReleaseReason> = allocation
        .released
        .iter()
        .map(|r| (r.binding.node.name.clone(), r.reason))
        .collect();
    assert_eq!(reasons["removed"], ReleaseReason::GroupRemoved);
    assert_eq!(reasons["shrunk"], ReleaseReason::CapacityShrink);
    assert_eq!(reasons["gone"], ReleaseReason::NodeGone);
    assert_eq!(reasons["ineligible"], ReleaseReason::CapacityShrink);
    assert_eq!(reasons["moved"], ReleaseReason::CapacityShrink);

    // Inside capacity, eligibility and selector checks decide.
    let mut ineligible = node("ineligible", 3, Some("gpu"));
    Arc::make_mut(&mut ineligible.labels).remove(LABEL_SGPU_NODE);
    let input = AllocationInput {
        groups: vec![group("compute", 2, 2, Some("gpu"))],
        nodes: vec![ineligible, node("moved", 4, Some("cpu"))],
        bindings: vec![
            bind("compute", 0, 0, "ineligible"),
            bind("compute", 0, 1, "moved"),
        ],
    };
    let allocation = allocate(&input).unwrap();
    let reasons: Vec<(String, ReleaseReason)> = allocation
        .released
        .iter()
        .map(|r| (r.binding.node.name.clone(), r.reason))
        .collect();
    assert_eq!(
        reasons,
        vec![
            ("ineligible".into(), ReleaseReason::NodeIneligible),
            ("moved".into(), ReleaseReason::SelectorMismatch)
        ]
    );
}

#[test]
fn released_coordinates_stay_occupied_until_cleanup() {
    let input = AllocationInput {
        groups: vec![group("compute", 1, 2, None)],
        nodes: vec![node("newcomer", 5, None)],
        bindings: vec![bind("compute", 0, 0, "gone")],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(allocation.released[0].reason, ReleaseReason::NodeGone);
    // The newcomer skips the released slot (0,0) and takes (0,1).
    assert_eq!(
        coordinates(&allocation.assigned),
        vec![c("compute", 0, 1, "newcomer")]
    );

    // With the rack full of released slots, the newcomer waits.
    let input = AllocationInput {
        groups: vec![group("compute", 1, 1, None)],
        nodes: vec![node("newcomer", 5, None)],
        bindings: vec![bind("compute", 0, 0, "gone")],
    };
    let allocation = allocate(&input).unwrap();
    assert!(allocation.assigned.is_empty());
    assert_eq!(allocation.pending.len(), 1);

    // Once cleanup has removed the binding, the slot is free again.
    let cleaned = AllocationInput {
        bindings: vec![],
        ..input
    };
    assert_eq!(
        coordinates(&allocate(&cleaned).unwrap().assigned),
        vec![c("compute", 0, 0, "newcomer")]
    );
}

#[test]
fn a_node_whose_release_is_pending_waits_for_cleanup() {
    let input = AllocationInput {
        groups: vec![group("compute", 2, 2, None)],
        nodes: vec![node("returning", 1, None)],
        // Bound beyond capacity: released, and not re-placed until cleanup.
        bindings: vec![bind("compute", 3, 0, "returning")],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(allocation.released[0].reason, ReleaseReason::CapacityShrink);
    assert!(allocation.assigned.is_empty());
    assert_eq!(
        allocation.pending,
        vec![PendingNode {
            node: node("returning", 1, None).node_ref(),
            group: Arc::new(key("compute"))
        }]
    );
}

#[test]
fn treats_same_name_new_uid_as_a_replacement() {
    let mut replacement = node("worker", 9, None);
    replacement.uid = "worker-uid-2".into();
    let input = AllocationInput {
        groups: vec![group("compute", 1, 2, None)],
        nodes: vec![replacement],
        bindings: vec![bind("compute", 0, 0, "worker")],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(allocation.released[0].reason, ReleaseReason::NodeGone);
    assert_eq!(allocation.assigned.len(), 1);
    assert_eq!(allocation.assigned[0].node.uid, "worker-uid-2");
    assert_eq!(
        (
            allocation.assigned[0].rack_index,
            allocation.assigned[0].node_index
        ),
        (0, 1)
    );
}

#[test]
fn does_not_compact_across_shrink_and_grow() {
    // Rack 1 keeps its Node while rack 0 has a hole; nothing moves into it
    // from rack 1, and growth fills rack 0's hole before rack 2.
    let input = AllocationInput {
        groups: vec![group("compute", 3, 1, None)],
        nodes: vec![node("second", 2, None), node("late", 9, None)],
        bindings: vec![bind("compute", 1, 0, "second")],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(
        coordinates(&allocation.retained),
        vec![c("compute", 1, 0, "second")]
    );
    assert_eq!(
        coordinates(&allocation.assigned),
        vec![c("compute", 0, 0, "late")]
    );
}

#[test]
fn only_eligible_nodes_are_classified() {
    let mut outsider = node("outsider", 1, None);
    Arc::make_mut(&mut outsider.labels).clear();
    let input = AllocationInput {
        groups: vec![group("compute", 1, 1, None)],
        nodes: vec![outsider],
        bindings: vec![],
    };
    let allocation = allocate(&input).unwrap();
    assert!(
        allocation.assigned.is_empty()
            && allocation.pending.is_empty()
            && allocation.conflicts.is_empty()
    );
}

#[test]
fn rejects_malformed_input() {
    let base = AllocationInput {
        groups: vec![group("compute", 1, 2, None)],
        nodes: vec![node("a", 1, None)],
        bindings: vec![],
    };
    let reject = |edit: &dyn Fn(&mut AllocationInput)| {
        let mut input = base.clone();
        edit(&mut input);
        allocate(&input).unwrap_err()
    };
    assert!(matches!(
        reject(&|i| i.nodes[0].uid.clear()),
        AllocationError::NodeIdentityMissing(_)
    ));
    assert!(matches!(
        reject(&|i| i.nodes.push(node("a", 2, None))),
        AllocationError::DuplicateNodeUid(_)
    ));
    assert!(matches!(
        reject(&|i| i.bindings.push(Binding {
            node: Arc::new(NodeRef::default()),
            ..bind("compute", 0, 0, "a")
        })),
        AllocationError::BindingIdentityMissing { .. }
    ));
    assert!(matches!(
        reject(&|i| i.bindings.push(bind("compute", -1, 0, "a"))),
        AllocationError::NegativeCoordinate { .. }
    ));
    assert!(matches!(
        reject(&|i| i
            .bindings
            .extend([bind("compute", 0, 0, "a"), bind("compute", 0, 0, "b")])),
        AllocationError::DuplicateCoordinate { .. }
    ));
    assert!(matches!(
        reject(&|i| i.groups.push(group("compute", 3, 3, None))),
        AllocationError::DuplicateGroup(_)
    ));
    let owned = reject(&|i| {
        i.groups[0].selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "nvidia.com/gpu.clique".to_string(),
                "x".to_string(),
            )])),
            ..Default::default()
        })
    });
    assert_eq!(
        owned.to_string(),
        "rack group \"compute\" selector: selector must not reference controller-owned label \"nvidia.com/gpu.clique\""
    );
}

#[test]
fn scale_one_hundred_thousand_nodes_fill_gb300_racks() {
    let racks = 5556;
    let nodes: Vec<NodeInput> = (0..100_000)
        .map(|i| node(&format!("node-{i:06}"), i64::from(i), None))
        .collect();
    let input = AllocationInput {
        groups: vec![group("compute", racks, 18, None)],
        nodes,
        bindings: vec![],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(allocation.assigned.len(), 100_000);
    assert_eq!(allocation.assigned[0].node.name, "node-000000");
    let last = allocation
        .assigned
        .iter()
        .max_by_key(|b| (b.rack_index, b.node_index))
        .unwrap();
    assert_eq!((last.rack_index, last.node_index), (5555, 9));
}

// ---- properties ----

fn arbitrary_input() -> impl Strategy<Value = AllocationInput> {
    let groups = prop::collection::vec((0..4i32, 1..4i32, prop::option::of(0..2u8)), 1..4)
        .prop_map(|shapes| {
            shapes
                .into_iter()
                .enumerate()
                .map(|(i, (racks, nodes_per_rack, pool))| {
                    group(
                        &format!("g{i}"),
                        racks,
                        nodes_per_rack,
                        pool.map(|p| if p == 0 { "a" } else { "b" }),
                    )
                })
                .collect::<Vec<_>>()
        });
    let nodes = prop::collection::vec((0..6i64, prop::option::of(0..2u8), any::<bool>()), 0..20)
        .prop_map(|specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (created, pool, eligible))| {
                    let mut n = node(
                        &format!("n{i}"),
                        created,
                        pool.map(|p| if p == 0 { "a" } else { "b" }),
                    );
                    if !eligible {
                        Arc::make_mut(&mut n.labels).remove(LABEL_SGPU_NODE);
                    }
                    n
                })
                .collect::<Vec<_>>()
        });
    (
        groups,
        nodes,
        prop::collection::vec((0..5usize, 0..4i32, 0..4i32, 0..24usize), 0..12),
    )
        .prop_map(|(groups, nodes, raw_bindings)| {
            // Valid bindings: each Node and each coordinate at most once.
            let mut used_nodes = HashSet::new();
            let mut used_coordinates = HashSet::new();
            let mut bindings = Vec::new();
            for (group_index, rack, slot, node_index) in raw_bindings {
                let group = format!("g{group_index}");
                let name = format!("n{node_index}");
                if used_nodes.insert(name.clone())
                    && used_coordinates.insert((group.clone(), rack, slot))
                {
                    bindings.push(bind(&group, rack, slot, &name));
                }
            }
            AllocationInput {
                groups,
                nodes,
                bindings,
            }
        })
}

fn shuffled(input: &AllocationInput, seed: u64) -> AllocationInput {
    fn rotate<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
        let mut out: Vec<T> = items.to_vec();
        if !out.is_empty() {
            let k = (seed as usize) % out.len();
            out.rotate_left(k);
            if seed % 2 == 1 {
                out.reverse();
            }
        }
        out
    }
    AllocationInput {
        groups: rotate(&input.groups, seed),
        nodes: rotate(&input.nodes, seed / 3),
        bindings: rotate(&input.bindings, seed / 7),
    }
}

proptest! {
    #[test]
    fn allocation_is_deterministic_under_input_permutation(input in arbitrary_input(), seed in any::<u64>()) {
        let expected = allocate(&input).unwrap();
        let permuted = allocate(&shuffled(&input, seed)).unwrap();
        prop_assert_eq!(expected.retained, permuted.retained);
        prop_assert_eq!(expected.released, permuted.released);
        prop_assert_eq!(expected.assigned, permuted.assigned);
        prop_assert_eq!(expected.pending, permuted.pending);
        prop_assert_eq!(expected.conflicts, permuted.conflicts);
    }

    #[test]
    fn allocation_never_moves_a_retained_binding(input in arbitrary_input()) {
        let allocation = allocate(&input).unwrap();
        for binding in &allocation.retained {
            prop_assert!(input.bindings.contains(binding));
            prop_assert!(allocation.bindings.contains(binding));
        }
        // Every input binding is either retained or released, exactly once.
        prop_assert_eq!(allocation.retained.len() + allocation.released.len(), input.bindings.len());
        // A second run over the resulting bindings retains them all.
        let next = AllocationInput { bindings: allocation.bindings.clone(), ..input.clone() };
        let again = allocate(&next).unwrap();
        prop_assert_eq!(&again.retained, &allocation.bindings);
    }

    #[test]
    fn allocation_never_assigns_a_node_or_a_coordinate_twice(input in arbitrary_input()) {
        let allocation = allocate(&input).unwrap();
        let mut nodes = HashSet::new();
        let mut coordinates = HashSet::new();
        for binding in &allocation.bindings {
            prop_assert!(nodes.insert(binding.node.uid.clone()), "node bound twice: {:?}", binding);
            prop_assert!(coordinates.insert((binding.group.clone(), binding.rack_index, binding.node_index)));
        }
        // New bindings never land on a coordinate that a released binding still holds.
        for release in &allocation.released {
            let b = &release.binding;
            prop_assert!(!allocation.assigned.iter().any(|a| a.group == b.group && a.rack_index == b.rack_index && a.node_index == b.node_index));
        }
        // Assigned coordinates are inside their group's capacity.
        for binding in &allocation.assigned {
            let group = input.groups.iter().find(|g| g.key == *binding.group).unwrap();
            prop_assert!(binding.rack_index < group.racks && binding.node_index < group.nodes_per_rack);
        }
    }
}

#[test]
fn conflicts_are_ordered_by_node_age_then_kind() {
    // Upstream sortConflicts: compareNodes (creation time, name, UID), then
    // kind. A young duplicate binding sorts after an old overlap.
    let input = AllocationInput {
        groups: vec![group("one", 2, 2, None), group("two", 2, 2, None)],
        nodes: vec![
            node("young", 9, None),
            node("old-b", 1, None),
            node("old-a", 1, None),
        ],
        bindings: vec![bind("one", 0, 0, "young"), bind("two", 0, 0, "young")],
    };
    let allocation = allocate(&input).unwrap();
    let order: Vec<(&str, ConflictReason)> = allocation
        .conflicts
        .iter()
        .map(|conflict| (conflict.node.name.as_str(), conflict.reason))
        .collect();
    assert_eq!(
        order,
        [
            ("old-a", ConflictReason::SelectorOverlap),
            ("old-b", ConflictReason::SelectorOverlap),
            ("young", ConflictReason::DuplicateBinding),
        ]
    );
    assert_eq!(allocation.conflicts[2].created, time(9));
    // A duplicate binding of a UID no Node has: the binding's reference and
    // no creation time, so it sorts first (Go's zero time).
    let mut gone = input.clone();
    gone.nodes.retain(|node| node.name != "young");
    let allocation = allocate(&gone).unwrap();
    assert_eq!(
        allocation.conflicts[0].reason,
        ConflictReason::DuplicateBinding
    );
    assert_eq!(allocation.conflicts[0].node.name, "young");
    assert_eq!(allocation.conflicts[0].created, None);
    assert_eq!(
        Allocator::new(&input).unwrap().allocation(),
        &allocate(&input).unwrap()
    );
}

#[test]
fn a_group_with_zero_nodes_per_rack_has_no_slots_instead_of_rejecting_the_input() {
    // Upstream validateGroup rejects only negative shapes; a zero-capacity
    // group releases its bindings (CapacityShrink) and leaves its Nodes
    // pending, while other groups allocate as usual.
    let input = AllocationInput {
        groups: vec![
            group("empty", 3, 0, Some("e")),
            group("compute", 1, 2, Some("c")),
        ],
        nodes: vec![
            node("bound", 1, Some("e")),
            node("waiting", 2, Some("e")),
            node("worker", 3, Some("c")),
        ],
        bindings: vec![bind("empty", 0, 0, "bound")],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(allocation.released.len(), 1);
    assert_eq!(allocation.released[0].reason, ReleaseReason::CapacityShrink);
    let pending: Vec<&str> = allocation
        .pending
        .iter()
        .map(|pending| pending.node.name.as_str())
        .collect();
    assert_eq!(pending, ["bound", "waiting"]);
    assert_eq!(
        coordinates(&allocation.assigned),
        vec![c("compute", 0, 0, "worker")]
    );
    assert_eq!(Allocator::new(&input).unwrap().allocation(), &allocation);
    // A negative shape is still malformed input.
    let mut negative = input;
    negative.groups[0].nodes_per_rack = -1;
    assert!(matches!(
        allocate(&negative),
        Err(AllocationError::InvalidGroupShape(_))
    ));
}

#[test]
fn a_binding_whose_uid_matches_is_the_same_node_whatever_its_name() {
    // Upstream looks bindings up by Node UID only (nodesByUID): a binding
    // naming the UID under another name is retained, not released as gone,
    // and the Node gets nothing new.
    let mut renamed = bind("compute", 0, 1, "worker");
    renamed.node = Arc::new(NodeRef {
        name: "old-name".into(),
        uid: "worker-uid".into(),
    });
    let input = AllocationInput {
        groups: vec![group("compute", 1, 2, None)],
        nodes: vec![node("worker", 1, None)],
        bindings: vec![renamed.clone()],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(allocation.retained, vec![renamed]);
    assert!(allocation.released.is_empty());
    assert!(allocation.assigned.is_empty());
    assert!(allocation.pending.is_empty());
    assert_eq!(Allocator::new(&input).unwrap().allocation(), &allocation);
}

#[test]
fn a_terminating_node_is_not_eligible() {
    // Upstream eligible(): `!node.Terminating && label == "true"`. Its
    // binding is released NodeIneligible and it is never placed.
    let mut leaving = node("leaving", 1, None);
    leaving.terminating = true;
    let mut arriving = node("arriving", 2, None);
    arriving.terminating = true;
    let input = AllocationInput {
        groups: vec![group("compute", 1, 2, None)],
        nodes: vec![leaving, arriving, node("staying", 3, None)],
        bindings: vec![bind("compute", 0, 0, "leaving")],
    };
    let allocation = allocate(&input).unwrap();
    assert_eq!(allocation.released.len(), 1);
    assert_eq!(allocation.released[0].reason, ReleaseReason::NodeIneligible);
    assert_eq!(
        coordinates(&allocation.assigned),
        vec![c("compute", 0, 1, "staying")]
    );
    assert!(allocation.pending.is_empty());
    assert_eq!(Allocator::new(&input).unwrap().allocation(), &allocation);
}
