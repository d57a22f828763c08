//! Behaviour of policy evaluation, after upstream Mokka's runtime-policy
//! test scenarios.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::*;
use crate::api::*;
use crate::fixtures::{example_default_runtime, example_profile};

fn time(seconds: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
}

fn rack_group(id: &str, count: i32, profile: &str) -> RackGroup {
    RackGroup {
        id: id.into(),
        count,
        profile_ref: ProfileNameRef {
            name: profile.into(),
        },
        placement: None,
    }
}

/// training 4 racks x 8 Nodes x 4 GPUs, inference 2 x 2 x 8, pending 3 racks
/// whose profile is missing.
fn test_inventory() -> (SGPUInventory, BTreeMap<String, SGPURackProfile>) {
    let mut inventory = SGPUInventory::new(
        "fleet",
        SGPUInventorySpec {
            rack_groups: vec![
                rack_group("training", 4, "train-profile"),
                rack_group("inference", 2, "infer-profile"),
                rack_group("pending", 3, "missing-profile"),
            ],
        },
    );
    inventory.metadata.uid = Some("fleet-uid".into());
    let profiles = BTreeMap::from([
        (
            "train-profile".to_string(),
            example_profile("train-profile", "p1", 8, 4),
        ),
        (
            "infer-profile".to_string(),
            example_profile("infer-profile", "p2", 2, 8),
        ),
    ]);
    (inventory, profiles)
}

#[derive(Default, Clone)]
struct Target {
    groups: Option<Vec<&'static str>>,
    racks: Option<Vec<i32>>,
    nodes: Option<Vec<i32>>,
    gpus: Option<Vec<i32>>,
}

fn policy(
    name: &str,
    created: i64,
    target: Target,
    runtime: Option<RuntimeState>,
) -> SGPURuntimePolicy {
    let mut policy = SGPURuntimePolicy::new(
        name,
        SGPURuntimePolicySpec {
            target_ref: PolicyTargetRef {
                group: TargetGroup::Mokka,
                kind: TargetKind::SgpuInventory,
                name: "fleet".into(),
                rack_groups: target
                    .groups
                    .map(|groups| groups.into_iter().map(String::from).collect()),
                rack_indexes: target.racks,
                node_indexes: target.nodes,
                gpu_indexes: target.gpus,
            },
            runtime,
        },
    );
    policy.metadata.uid = Some(format!("{name}-uid"));
    policy.metadata.creation_timestamp = Some(time(created));
    policy.metadata.generation = Some(3);
    policy
}

fn celsius(value: i32) -> Option<RuntimeState> {
    Some(RuntimeState {
        telemetry: Some(RuntimeTelemetry {
            temperature: Some(TemperatureTelemetry {
                gpu_celsius: Some(value),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn device(state: DeviceState) -> Option<RuntimeState> {
    Some(RuntimeState {
        device_state: Some(state),
        ..Default::default()
    })
}

fn evaluate(policies: &[SGPURuntimePolicy]) -> Evaluation {
    let (inventory, profiles) = test_inventory();
    Evaluation::new(EvaluationInput {
        inventory_name: "fleet",
        inventory: Some(&inventory),
        profiles: &profiles,
        policies,
    })
    .unwrap()
}

fn outcome(evaluation: &Evaluation, name: &str) -> (Outcome, String) {
    let decision = evaluation.decision(name).unwrap();
    (decision.outcome, decision.message.clone())
}

fn gpu(group: &str, rack: i32, node: i32, gpu: i32) -> GpuCoordinate<'_> {
    GpuCoordinate {
        group,
        rack,
        node,
        gpu,
    }
}

fn scenario() -> Vec<SGPURuntimePolicy> {
    vec![
        policy(
            "ghost",
            1,
            Target {
                groups: Some(vec!["ghost"]),
                ..Default::default()
            },
            device(DeviceState::Failed),
        ),
        policy(
            "gpu-hot",
            2,
            Target {
                gpus: Some(vec![7]),
                ..Default::default()
            },
            celsius(95),
        ),
        policy(
            "gpu-cool",
            3,
            Target {
                groups: Some(vec!["inference"]),
                gpus: Some(vec![7]),
                ..Default::default()
            },
            celsius(30),
        ),
        policy("inventory-hot", 4, Target::default(), celsius(90)),
        policy("inventory-cool", 5, Target::default(), celsius(20)),
        policy(
            "training-failed",
            6,
            Target {
                groups: Some(vec!["training"]),
                ..Default::default()
            },
            device(DeviceState::Failed),
        ),
    ]
}

#[test]
fn evaluation_settles_the_upstream_scenario() {
    let evaluation = evaluate(&scenario());
    let names: Vec<&str> = evaluation
        .decisions()
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "ghost",
            "gpu-cool",
            "gpu-hot",
            "inventory-cool",
            "inventory-hot",
            "training-failed"
        ]
    );

    assert_eq!(
        outcome(&evaluation, "ghost"),
        (
            Outcome::InvalidTarget,
            "SGPUInventory \"fleet\" does not declare rack groups \"ghost\".".into()
        )
    );
    assert_eq!(
        outcome(&evaluation, "gpu-cool"),
        (Outcome::Conflicted, "Policy \"gpu-hot\" takes precedence at GPU scope and also sets telemetry.temperature.gpuCelsius for some of the same GPUs.".into())
    );
    assert_eq!(
        outcome(&evaluation, "gpu-hot"),
        (Outcome::Accepted, "The policy applies at GPU scope.".into())
    );
    assert_eq!(
        outcome(&evaluation, "inventory-cool"),
        (Outcome::Conflicted, "Policy \"inventory-hot\" takes precedence at Inventory scope and also sets telemetry.temperature.gpuCelsius for some of the same GPUs.".into())
    );
    assert_eq!(
        outcome(&evaluation, "training-failed"),
        (
            Outcome::Accepted,
            "The policy applies at Rack Group scope.".into()
        )
    );

    let defaults = example_default_runtime();
    let mut training_expected = defaults.clone();
    training_expected.device_state = Some(DeviceState::Failed);
    training_expected
        .telemetry
        .as_mut()
        .unwrap()
        .temperature
        .as_mut()
        .unwrap()
        .gpu_celsius = Some(90);
    assert_eq!(
        evaluation.runtime(Some(&defaults), gpu("training", 1, 2, 3)),
        training_expected
    );
    assert_eq!(
        evaluation.applied(gpu("training", 1, 2, 3)),
        ["inventory-hot", "training-failed"]
    );

    let mut inference_expected = defaults.clone();
    inference_expected
        .telemetry
        .as_mut()
        .unwrap()
        .temperature
        .as_mut()
        .unwrap()
        .gpu_celsius = Some(90);
    assert_eq!(
        evaluation.runtime(Some(&defaults), gpu("inference", 0, 1, 5)),
        inference_expected
    );
    // GPU 7 exists only in inference; the GPU-scope layer comes last.
    assert_eq!(
        evaluation.applied(gpu("inference", 1, 0, 7)),
        ["inventory-hot", "gpu-hot"]
    );
    assert_eq!(
        evaluation
            .runtime(Some(&defaults), gpu("inference", 1, 0, 7))
            .telemetry
            .unwrap()
            .temperature
            .unwrap()
            .gpu_celsius,
        Some(95)
    );
}

#[test]
fn a_missing_inventory_makes_every_policy_target_not_found_and_runtime_the_defaults() {
    let profiles = BTreeMap::new();
    let policies = scenario();
    let evaluation = Evaluation::new(EvaluationInput {
        inventory_name: "fleet",
        inventory: None,
        profiles: &profiles,
        policies: &policies,
    })
    .unwrap();
    for decision in evaluation.decisions() {
        assert_eq!(decision.outcome, Outcome::TargetNotFound);
        assert_eq!(decision.message, "SGPUInventory \"fleet\" does not exist.");
    }
    let defaults = example_default_runtime();
    assert_eq!(
        evaluation.runtime(Some(&defaults), gpu("training", 0, 0, 0)),
        defaults
    );
    assert_eq!(
        evaluation.runtime(None, gpu("training", 0, 0, 0)),
        RuntimeState::default()
    );
}

#[test]
fn the_older_policy_wins_within_a_scope_and_the_lower_uid_breaks_ties() {
    let older = policy("b-older", 1, Target::default(), celsius(1));
    let younger = policy("a-younger", 2, Target::default(), celsius(2));
    let evaluation = evaluate(&[younger, older]);
    assert_eq!(outcome(&evaluation, "b-older").0, Outcome::Accepted);
    assert_eq!(outcome(&evaluation, "a-younger").0, Outcome::Conflicted);

    let mut low = policy("z-low-uid", 5, Target::default(), celsius(1));
    low.metadata.uid = Some("0001".into());
    let mut high = policy("a-high-uid", 5, Target::default(), celsius(2));
    high.metadata.uid = Some("0002".into());
    let evaluation = evaluate(&[high, low]);
    assert_eq!(outcome(&evaluation, "z-low-uid").0, Outcome::Accepted);
    assert_eq!(
        outcome(&evaluation, "a-high-uid").1,
        "Policy \"z-low-uid\" takes precedence at Inventory scope and also sets telemetry.temperature.gpuCelsius for some of the same GPUs."
    );
}

#[test]
fn disjoint_racks_groups_fields_and_scopes_all_layer() {
    let evaluation = evaluate(&[
        policy(
            "rack-0",
            1,
            Target {
                racks: Some(vec![0]),
                ..Default::default()
            },
            celsius(50),
        ),
        policy(
            "rack-1",
            2,
            Target {
                racks: Some(vec![1]),
                ..Default::default()
            },
            celsius(60),
        ),
        policy(
            "training",
            3,
            Target {
                groups: Some(vec!["training"]),
                ..Default::default()
            },
            celsius(70),
        ),
        policy(
            "inference",
            4,
            Target {
                groups: Some(vec!["inference"]),
                ..Default::default()
            },
            celsius(80),
        ),
        policy(
            "other-field",
            5,
            Target::default(),
            device(DeviceState::Degraded),
        ),
        policy("inventory-temp", 6, Target::default(), celsius(40)),
    ]);
    for decision in evaluation.decisions() {
        assert_eq!(decision.outcome, Outcome::Accepted, "{}", decision.name);
    }
    // Broadest first: inventory, then rack group, then rack.
    assert_eq!(
        evaluation.applied(gpu("training", 1, 0, 0)),
        ["other-field", "inventory-temp", "training", "rack-1"]
    );
    let state = evaluation.runtime(None, gpu("training", 1, 0, 0));
    assert_eq!(
        state.telemetry.unwrap().temperature.unwrap().gpu_celsius,
        Some(60)
    );
    assert_eq!(state.device_state, Some(DeviceState::Degraded));
}

#[test]
fn invalid_and_rejected_policies_block_nothing_and_nil_runtime_is_accepted() {
    let evaluation = evaluate(&[
        policy(
            "invalid",
            1,
            Target {
                gpus: Some(vec![99]),
                ..Default::default()
            },
            celsius(1),
        ),
        policy("winner", 2, Target::default(), celsius(2)),
        policy(
            "rejected",
            3,
            Target {
                groups: Some(vec!["training"]),
                ..Default::default()
            },
            celsius(3),
        ),
        policy(
            "blocked-only-by-rejected",
            4,
            Target {
                groups: Some(vec!["training"]),
                ..Default::default()
            },
            celsius(4),
        ),
        policy("empty", 0, Target::default(), None),
    ]);
    assert_eq!(outcome(&evaluation, "invalid").0, Outcome::InvalidTarget);
    assert_eq!(outcome(&evaluation, "winner").0, Outcome::Accepted);
    assert_eq!(
        outcome(&evaluation, "rejected").0,
        Outcome::Accepted,
        "different scope from the winner"
    );
    // Same scope as "rejected"... which is accepted; make the chain explicit:
    assert_eq!(
        outcome(&evaluation, "blocked-only-by-rejected").0,
        Outcome::Conflicted
    );
    assert_eq!(
        outcome(&evaluation, "empty"),
        (
            Outcome::Accepted,
            "The policy applies at Inventory scope.".into()
        )
    );

    // A policy whose only challenger was itself rejected is Accepted.
    let evaluation = evaluate(&[
        policy(
            "first",
            1,
            Target {
                racks: Some(vec![0]),
                ..Default::default()
            },
            celsius(1),
        ),
        policy(
            "second",
            2,
            Target {
                racks: Some(vec![0, 1]),
                ..Default::default()
            },
            celsius(2),
        ),
        policy(
            "third",
            3,
            Target {
                racks: Some(vec![1]),
                ..Default::default()
            },
            celsius(3),
        ),
    ]);
    assert_eq!(outcome(&evaluation, "first").0, Outcome::Accepted);
    assert_eq!(outcome(&evaluation, "second").0, Outcome::Conflicted);
    assert_eq!(outcome(&evaluation, "third").0, Outcome::Accepted);
}

#[test]
fn indexes_that_coincide_only_outside_the_group_shapes_do_not_conflict() {
    // GPU 6 exists only in inference (8 GPUs); node 3 only in training (8 Nodes).
    let evaluation = evaluate(&[
        policy(
            "infer-gpu-6",
            1,
            Target {
                nodes: Some(vec![3]),
                gpus: Some(vec![6]),
                groups: Some(vec!["inference", "training"]),
                ..Default::default()
            },
            celsius(1),
        ),
        // Both list GPU 1, but node 3 exists only in training and node 1 is
        // listed only for inference: the shared index never meets.
        policy(
            "training-node-3",
            2,
            Target {
                groups: Some(vec!["training", "inference"]),
                nodes: Some(vec![3]),
                gpus: Some(vec![1]),
                ..Default::default()
            },
            celsius(2),
        ),
        policy(
            "inference-node-1",
            3,
            Target {
                groups: Some(vec!["inference"]),
                nodes: Some(vec![1]),
                gpus: Some(vec![1]),
                ..Default::default()
            },
            celsius(3),
        ),
    ]);
    // infer-gpu-6 selects nothing anywhere (node 3 absent in inference, GPU 6 absent in training).
    assert_eq!(
        outcome(&evaluation, "infer-gpu-6").0,
        Outcome::InvalidTarget
    );
    assert_eq!(outcome(&evaluation, "training-node-3").0, Outcome::Accepted);
    assert_eq!(
        outcome(&evaluation, "inference-node-1").0,
        Outcome::Accepted
    );

    let evaluation = evaluate(&[
        policy(
            "inference-only",
            1,
            Target {
                groups: Some(vec!["inference"]),
                gpus: Some(vec![6]),
                ..Default::default()
            },
            celsius(1),
        ),
        policy(
            "training-only",
            2,
            Target {
                groups: Some(vec!["training", "inference"]),
                nodes: Some(vec![5]),
                gpus: Some(vec![3]),
                ..Default::default()
            },
            celsius(2),
        ),
    ]);
    assert_eq!(outcome(&evaluation, "inference-only").0, Outcome::Accepted);
    assert_eq!(outcome(&evaluation, "training-only").0, Outcome::Accepted);
}

#[test]
fn when_the_winner_is_deleted_the_next_oldest_is_promoted() {
    let all = vec![
        policy("first", 1, Target::default(), celsius(1)),
        policy("second", 2, Target::default(), celsius(2)),
        policy("third", 3, Target::default(), celsius(3)),
    ];
    let evaluation = evaluate(&all);
    assert_eq!(
        outcome(&evaluation, "third").1,
        "Policy \"first\" takes precedence at Inventory scope and also sets telemetry.temperature.gpuCelsius for some of the same GPUs."
    );
    let evaluation = evaluate(&all[1..]);
    assert_eq!(outcome(&evaluation, "second").0, Outcome::Accepted);
    assert_eq!(
        outcome(&evaluation, "third").1,
        "Policy \"second\" takes precedence at Inventory scope and also sets telemetry.temperature.gpuCelsius for some of the same GPUs."
    );
}

#[test]
fn the_conflict_message_names_the_winner_and_the_sorted_shared_fields() {
    let both = || {
        let mut state = celsius(90).unwrap();
        state.device_state = Some(DeviceState::Failed);
        state.modes = Some(RuntimeModes {
            ecc: Some(Toggle::Disabled),
            ..Default::default()
        });
        Some(state)
    };
    let mut second = both().unwrap();
    second.modes = None;
    let evaluation = evaluate(&[
        policy("winner", 1, Target::default(), both()),
        policy("loser", 2, Target::default(), Some(second)),
    ]);
    assert_eq!(
        outcome(&evaluation, "loser").1,
        "Policy \"winner\" takes precedence at Inventory scope and also sets deviceState, telemetry.temperature.gpuCelsius for some of the same GPUs."
    );
}

#[test]
fn target_resolution_messages_are_exact() {
    let message = |target: Target| {
        let evaluation = evaluate(&[policy("p", 1, target, celsius(1))]);
        let decision = evaluation.decision("p").unwrap();
        assert_eq!(decision.outcome, Outcome::InvalidTarget);
        decision.message.clone()
    };
    assert_eq!(
        message(Target {
            groups: Some(vec!["b-missing", "training", "a-missing"]),
            ..Default::default()
        }),
        "SGPUInventory \"fleet\" does not declare rack groups \"b-missing\", \"a-missing\"."
    );
    assert_eq!(
        message(Target {
            groups: Some(vec!["training", "inference"]),
            racks: Some(vec![5, 2]),
            ..Default::default()
        }),
        "The target lists indexes that select no GPU in the selected rack groups: rackIndexes [5]."
    );
    assert_eq!(
        message(Target {
            groups: Some(vec!["training", "inference"]),
            racks: Some(vec![5, 2]),
            gpus: Some(vec![6]),
            ..Default::default()
        }),
        "The target lists indexes that select no GPU in the selected rack groups: rackIndexes [2 5], gpuIndexes [6]."
    );
    // Indexes that exist only in different groups: rack 3 only in training,
    // GPU 6 only in inference, so no group participates.
    assert_eq!(
        message(Target {
            groups: Some(vec!["training", "inference"]),
            racks: Some(vec![3]),
            gpus: Some(vec![6]),
            ..Default::default()
        }),
        "The target lists indexes that select no GPU in the selected rack groups: rackIndexes [3], gpuIndexes [6]."
    );
    assert_eq!(
        message(Target {
            racks: Some(vec![-1, 0]),
            ..Default::default()
        }),
        "The target lists indexes that select no GPU in the selected rack groups: rackIndexes [-1]."
    );
    // A node index needs a resolved profile.
    assert_eq!(
        message(Target {
            groups: Some(vec!["pending"]),
            nodes: Some(vec![0]),
            ..Default::default()
        }),
        "The target lists indexes that select no GPU in the selected rack groups: nodeIndexes [0]. The profiles of rack groups \"pending\" are not found, so those rack groups select no Node or GPU."
    );
    assert_eq!(
        message(Target {
            nodes: Some(vec![8]),
            gpus: Some(vec![9]),
            ..Default::default()
        }),
        "The target lists indexes that select no GPU in the selected rack groups: nodeIndexes [8], gpuIndexes [9]. The profiles of rack groups \"pending\" are not found, so those rack groups select no Node or GPU."
    );
}

#[test]
fn a_rack_index_needs_no_profile() {
    let evaluation = evaluate(&[policy(
        "pending-rack",
        1,
        Target {
            groups: Some(vec!["pending"]),
            racks: Some(vec![2]),
            ..Default::default()
        },
        celsius(1),
    )]);
    assert_eq!(
        outcome(&evaluation, "pending-rack"),
        (
            Outcome::Accepted,
            "The policy applies at Rack scope.".into()
        )
    );
    assert_eq!(
        evaluation.applied(gpu("pending", 2, 0, 0)),
        ["pending-rack"]
    );
    assert!(evaluation.applied(gpu("pending", 1, 0, 0)).is_empty());
}

#[test]
fn an_unlisted_rack_axis_covers_racks_still_retiring_beyond_a_shrunk_count() {
    let evaluation = evaluate(&[policy(
        "all-training",
        1,
        Target {
            groups: Some(vec!["training"]),
            ..Default::default()
        },
        celsius(1),
    )]);
    assert_eq!(
        evaluation.applied(gpu("training", 9, 0, 0)),
        ["all-training"]
    );
}

#[test]
fn status_reports_summaries_condition_and_keeps_the_transition_time() {
    let policies = vec![
        policy(
            "inventory-failed",
            1,
            Target::default(),
            device(DeviceState::Failed),
        ),
        policy(
            "inventory-degraded",
            2,
            Target::default(),
            device(DeviceState::Degraded),
        ),
        policy(
            "second-rack-hot",
            3,
            Target {
                groups: Some(vec!["training"]),
                racks: Some(vec![1]),
                ..Default::default()
            },
            celsius(99),
        ),
    ];
    let evaluation = evaluate(&policies);
    let status = |index: usize, previous: Option<&SGPURuntimePolicyStatus>, now: i64| {
        let decision = evaluation
            .decision(policies[index].metadata.name.as_deref().unwrap())
            .unwrap();
        policy_status(&policies[index], decision, previous, &time(now))
    };
    let hot = status(2, None, 100);
    assert_eq!(hot.rack_groups_summary.as_deref(), Some("training"));
    assert_eq!(hot.rack_indexes_summary.as_deref(), Some("1"));
    assert_eq!(hot.node_indexes_summary, None);
    let condition = &hot.conditions.as_ref().unwrap()[0];
    assert_eq!(
        (
            condition.type_.as_str(),
            condition.status.as_str(),
            condition.reason.as_str()
        ),
        ("Accepted", "True", "Accepted")
    );
    assert_eq!(condition.observed_generation, Some(3));
    assert_eq!(condition.last_transition_time, time(100));

    let degraded = status(1, None, 100);
    assert_eq!(degraded.conditions.as_ref().unwrap()[0].status, "False");
    assert_eq!(
        degraded.conditions.as_ref().unwrap()[0].reason,
        "Conflicted"
    );

    // Unchanged status and reason keep the time, even if the message changed.
    let mut previous = hot.clone();
    previous.conditions.as_mut().unwrap()[0].message = "old text".into();
    assert_eq!(
        status(2, Some(&previous), 200).conditions.unwrap()[0].last_transition_time,
        time(100)
    );
    // A new reason is a transition.
    assert_eq!(
        status(1, Some(&hot), 300).conditions.unwrap()[0].last_transition_time,
        time(300)
    );

    // Deleting the winner promotes inventory-degraded; shrinking training to
    // one rack turns second-rack-hot into InvalidTarget.
    let (mut inventory, profiles) = test_inventory();
    inventory.spec.rack_groups[0].count = 1;
    let remaining = &policies[1..];
    let evaluation = Evaluation::new(EvaluationInput {
        inventory_name: "fleet",
        inventory: Some(&inventory),
        profiles: &profiles,
        policies: remaining,
    })
    .unwrap();
    assert_eq!(
        outcome(&evaluation, "inventory-degraded").0,
        Outcome::Accepted
    );
    assert_eq!(
        outcome(&evaluation, "second-rack-hot"),
        (Outcome::InvalidTarget, "The target lists indexes that select no GPU in the selected rack groups: rackIndexes [1].".into())
    );
}

#[test]
fn effective_runtime_of_a_logical_node_layers_inventory_and_gpu_policies() {
    let evaluation = evaluate(&[
        policy("warm", 1, Target::default(), celsius(50)),
        policy(
            "gpu-1-failed",
            2,
            Target {
                groups: Some(vec!["training"]),
                racks: Some(vec![0]),
                nodes: Some(vec![0]),
                gpus: Some(vec![1]),
            },
            device(DeviceState::Failed),
        ),
    ]);
    let defaults = example_default_runtime();
    let node: Vec<RuntimeState> = (0..4)
        .map(|g| evaluation.runtime(Some(&defaults), gpu("training", 0, 0, g)))
        .collect();
    for (index, state) in node.iter().enumerate() {
        assert_eq!(
            state
                .telemetry
                .as_ref()
                .unwrap()
                .temperature
                .as_ref()
                .unwrap()
                .gpu_celsius,
            Some(50)
        );
        let expected = if index == 1 {
            DeviceState::Failed
        } else {
            DeviceState::Healthy
        };
        assert_eq!(state.device_state, Some(expected));
    }
    // Callers own the result: changing it does not change later answers.
    let mut owned = evaluation.runtime(Some(&defaults), gpu("training", 0, 0, 1));
    owned.device_state = None;
    assert_eq!(
        evaluation
            .runtime(Some(&defaults), gpu("training", 0, 0, 1))
            .device_state,
        Some(DeviceState::Failed)
    );
}

#[test]
fn scope_is_the_deepest_listed_axis() {
    let scope = |target: Target| Scope::of(&policy("p", 1, target, None).spec.target_ref);
    assert_eq!(scope(Target::default()), Scope::Inventory);
    assert_eq!(
        scope(Target {
            groups: Some(vec!["a"]),
            ..Default::default()
        }),
        Scope::RackGroup
    );
    assert_eq!(
        scope(Target {
            racks: Some(vec![0]),
            ..Default::default()
        }),
        Scope::Rack
    );
    assert_eq!(
        scope(Target {
            groups: Some(vec!["a"]),
            nodes: Some(vec![0]),
            ..Default::default()
        }),
        Scope::Node
    );
    assert_eq!(
        scope(Target {
            racks: Some(vec![0]),
            gpus: Some(vec![0]),
            ..Default::default()
        }),
        Scope::Gpu
    );
    assert!(
        Scope::Inventory < Scope::RackGroup
            && Scope::RackGroup < Scope::Rack
            && Scope::Rack < Scope::Node
            && Scope::Node < Scope::Gpu
    );
    assert_eq!(Scope::RackGroup.as_str(), "Rack Group");
    assert_eq!(Scope::Gpu.as_str(), "GPU");
}

fn arbitrary_policies() -> impl Strategy<Value = Vec<SGPURuntimePolicy>> {
    let axis = |max: i32| prop::option::of(prop::collection::vec(-1..max, 1..3));
    let groups = prop::option::of(prop::collection::vec(
        prop_oneof![
            Just("training"),
            Just("inference"),
            Just("pending"),
            Just("ghost")
        ],
        1..3,
    ));
    let field = prop_oneof![Just(0u8), Just(1u8), Just(2u8)];
    prop::collection::vec((0..4i64, groups, axis(5), axis(9), axis(9), field), 0..10).prop_map(
        |specs| {
            specs
                .into_iter()
                .enumerate()
                .map(|(i, (created, groups, racks, nodes, gpus, field))| {
                    let runtime = match field {
                        0 => None,
                        1 => celsius(i as i32),
                        _ => device(DeviceState::Degraded),
                    };
                    policy(
                        &format!("p{i:02}"),
                        created,
                        Target {
                            groups,
                            racks,
                            nodes,
                            gpus,
                        },
                        runtime,
                    )
                })
                .collect()
        },
    )
}

proptest! {
    #[test]
    fn policy_evaluation_does_not_depend_on_list_order(policies in arbitrary_policies(), rotation in 0usize..10, reverse in any::<bool>()) {
        let expected = evaluate(&policies);
        let mut permuted = policies.clone();
        if !permuted.is_empty() {
            let k = rotation % permuted.len();
            permuted.rotate_left(k);
        }
        if reverse {
            permuted.reverse();
        }
        let actual = evaluate(&permuted);
        prop_assert_eq!(expected.decisions(), actual.decisions());
        for group in ["training", "inference", "pending"] {
            for rack in 0..4 {
                for node in [0, 3, 7] {
                    for g in [0, 3, 7] {
                        let coordinate = gpu(group, rack, node, g);
                        prop_assert_eq!(expected.applied(coordinate), actual.applied(coordinate));
                        prop_assert_eq!(expected.runtime(None, coordinate), actual.runtime(None, coordinate));
                    }
                }
            }
        }
    }

    #[test]
    fn accepted_policies_of_one_scope_never_share_a_field_on_a_gpu(policies in arbitrary_policies()) {
        let evaluation = evaluate(&policies);
        for group in ["training", "inference"] {
            for rack in 0..4 {
                for node in 0..8 {
                    for g in 0..8 {
                        let applied = evaluation.applied(gpu(group, rack, node, g));
                        let mut seen: BTreeMap<(Scope, String), &str> = BTreeMap::new();
                        for name in applied {
                            let decision = evaluation.decision(name).unwrap();
                            for field in &decision.fields {
                                let previous = seen.insert((decision.scope, field.clone()), name);
                                prop_assert!(previous.is_none(), "{} and {} both set {} at one GPU", name, previous.unwrap_or_default(), field);
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn an_empty_index_or_group_list_means_not_listed() {
    // Upstream scopeOf / within / resolveTarget: `len(list) == 0` is the same
    // as an absent list, so an empty list neither narrows the scope nor
    // selects nothing.
    let empty = Target {
        groups: Some(vec![]),
        racks: Some(vec![]),
        nodes: Some(vec![]),
        gpus: Some(vec![2]),
    };
    let absent = Target {
        gpus: Some(vec![2]),
        ..Target::default()
    };
    let with_empty = policy("empty-lists", 1, empty, celsius(90));
    let with_absent = policy("empty-lists", 1, absent, celsius(90));
    let a = evaluate(std::slice::from_ref(&with_empty));
    let b = evaluate(std::slice::from_ref(&with_absent));
    assert_eq!(a.decisions(), b.decisions());
    assert_eq!(a.decisions()[0].outcome, Outcome::Accepted);
    assert_eq!(a.decisions()[0].message, "The policy applies at GPU scope.");
    for coordinate in [gpu("training", 3, 7, 2), gpu("inference", 1, 1, 2)] {
        assert_eq!(a.applied(coordinate), ["empty-lists"]);
    }
    assert!(a.applied(gpu("training", 0, 0, 1)).is_empty());

    // Only empty lists: the whole inventory, and no summary.
    let everything = policy(
        "everything",
        1,
        Target {
            groups: Some(vec![]),
            racks: Some(vec![]),
            nodes: Some(vec![]),
            gpus: Some(vec![]),
        },
        celsius(50),
    );
    let evaluation = evaluate(std::slice::from_ref(&everything));
    assert_eq!(
        evaluation.decisions()[0].message,
        "The policy applies at Inventory scope."
    );
    assert_eq!(evaluation.decisions()[0].scope, Scope::Inventory);
    assert_eq!(
        evaluation.applied(gpu("inference", 0, 0, 0)),
        ["everything"]
    );
    assert_eq!(
        summaries(&everything.spec.target_ref),
        [None, None, None, None]
    );
}

#[test]
fn accepted_policies_without_a_runtime_still_appear_in_applied() {
    // Upstream Applied lists every accepted policy selecting the GPU; a
    // policy without runtime is accepted and sets nothing.
    let policies = [
        policy("quiet", 1, Target::default(), None),
        policy(
            "hot",
            2,
            Target {
                racks: Some(vec![1]),
                ..Target::default()
            },
            celsius(90),
        ),
    ];
    let evaluation = evaluate(&policies);
    assert_eq!(outcome(&evaluation, "quiet").0, Outcome::Accepted);
    assert_eq!(
        evaluation.applied(gpu("training", 1, 0, 0)),
        ["quiet", "hot"]
    );
    assert_eq!(evaluation.applied(gpu("training", 0, 0, 0)), ["quiet"]);
    let defaults = example_default_runtime();
    assert_eq!(
        evaluation.runtime(Some(&defaults), gpu("training", 0, 0, 0)),
        defaults
    );
}

#[test]
fn a_field_path_encoding_error_fails_the_whole_evaluation() {
    // Upstream Evaluate returns `list the runtime fields of policy "x": …`
    // when a runtime cannot be encoded; it lists fields only for policies
    // whose target resolves.
    let (inventory, profiles) = test_inventory();
    let failing = |_: &RuntimeState| -> Result<Vec<String>, crate::MokkaError> {
        Err(crate::MokkaError::Json {
            what: "runtime state",
            source: serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
        })
    };
    let resolving = [policy("broken", 1, Target::default(), celsius(1))];
    let error = Evaluation::with_field_paths(
        EvaluationInput {
            inventory_name: "fleet",
            inventory: Some(&inventory),
            profiles: &profiles,
            policies: &resolving,
        },
        failing,
    )
    .unwrap_err();
    assert!(
        error.to_string().starts_with(
            "list the runtime fields of policy \"broken\": encode runtime state as JSON: "
        ),
        "{error}"
    );

    // An invalid target, or a missing inventory, never lists fields.
    let invalid = [policy(
        "ghost",
        1,
        Target {
            groups: Some(vec!["nowhere"]),
            ..Target::default()
        },
        celsius(1),
    )];
    let evaluation = Evaluation::with_field_paths(
        EvaluationInput {
            inventory_name: "fleet",
            inventory: Some(&inventory),
            profiles: &profiles,
            policies: &invalid,
        },
        failing,
    )
    .unwrap();
    assert_eq!(outcome(&evaluation, "ghost").0, Outcome::InvalidTarget);
    let evaluation = Evaluation::with_field_paths(
        EvaluationInput {
            inventory_name: "fleet",
            inventory: None,
            profiles: &profiles,
            policies: &resolving,
        },
        failing,
    )
    .unwrap();
    assert_eq!(outcome(&evaluation, "broken").0, Outcome::TargetNotFound);
}
