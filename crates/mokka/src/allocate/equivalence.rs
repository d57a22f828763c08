//! The optimised allocator against the reference form: same result (plan
//! or error) for arbitrary input, including duplicate bindings, renamed
//! Nodes, gone groups and invalid shapes, and for the input that follows a
//! plan when one Node changes.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use proptest::prelude::*;

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
        labels,
    }
}

/// Groups g0..g3 (some absent, so their bindings are `GroupRemoved`), Nodes
/// with colliding creation times, and bindings that may name a Node twice,
/// name a UID under another name, or lie outside capacity.
fn arbitrary_input() -> impl Strategy<Value = AllocationInput> {
    let groups = prop::collection::vec((0..4u8, 0..4i32, 1..4i32, prop::option::of(0..2u8)), 0..4)
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
        (0..4i64, prop::option::of(0..2u8), prop::bool::weighted(0.8)),
        0..16,
    )
    .prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(index, (created, pool_choice, eligible))| {
                node(index, created, pool_choice, eligible)
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
        1 if count > 0 => {
            let labels = &mut input.nodes[target % count].labels;
            if labels.remove(LABEL_SGPU_NODE).is_none() {
                labels.insert(LABEL_SGPU_NODE.to_string(), "true".to_string());
            }
        }
        2 if count > 0 => {
            let labels = &mut input.nodes[target % count].labels;
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
