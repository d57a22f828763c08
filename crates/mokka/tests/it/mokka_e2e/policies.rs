//! Runtime policies in the running controller: policy status (which
//! policy wins a conflict, and what a shrink invalidates), the
//! EffectiveRuntime read API, and the rules of the AssignmentsForNode read
//! API (synced caches, the exact Node identity), on both lanes.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use mokka::api::{DeviceState, SGPURack};
use mokka::controller::{AssignmentSnapshot, MokkaController, ReadError};
use mokka::identity::rack_name;
use mokka::plan::options::Options;
use serde_json::json;

use super::support::*;

async fn wait_for_policy(
    cluster: &Cluster,
    name: &str,
    reason: &str,
) -> (String, String, String, Option<i64>) {
    let policies = cluster.policies();
    eventually(&format!("policy {name} to be {reason}"), || async {
        let policy = policies.get(name).await.ok()?;
        policy_condition(&policy).filter(|c| c.1 == reason)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_accepts_the_oldest_policy_conflicts_the_younger_promotes_it_when_the_winner_goes_and_invalidates_a_rack_index_after_a_shrink()
 {
    let cluster = Cluster::start().await;
    cluster.create_profile("policy-shape", 2, 4).await;
    cluster
        .create_inventory("policy-inv", "policy-shape", 2, "policies")
        .await;
    let leader = cluster.start_leader("policy-leader").await;

    cluster
        .create_policy(
            "inventory-failed",
            "policy-inv",
            json!({}),
            json!({"deviceState": "Failed"}),
        )
        .await;
    // Creation timestamps have second resolution: make the age order certain.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let degraded = cluster
        .create_policy(
            "inventory-degraded",
            "policy-inv",
            json!({}),
            json!({"deviceState": "Degraded"}),
        )
        .await;
    cluster
        .create_policy(
            "second-rack-hot",
            "policy-inv",
            json!({"rackIndexes": [1]}),
            json!({"telemetry": {"temperature": {"mode": "Fixed", "gpuCelsius": 90}}}),
        )
        .await;
    cluster
        .create_policy(
            "ghost-target",
            "missing",
            json!({}),
            json!({"deviceState": "Failed"}),
        )
        .await;

    let failed = wait_for_policy(&cluster, "inventory-failed", "Accepted").await;
    assert_eq!(failed.0, "True");
    assert_eq!(failed.2, "The policy applies at Inventory scope.");
    let conflicted = wait_for_policy(&cluster, "inventory-degraded", "Conflicted").await;
    assert_eq!(conflicted.0, "False");
    assert_eq!(
        conflicted.2,
        "Policy \"inventory-failed\" takes precedence at Inventory scope and also sets deviceState for some of the same GPUs."
    );
    assert_eq!(
        conflicted.3, degraded.metadata.generation,
        "observedGeneration is the policy's generation"
    );
    let hot = wait_for_policy(&cluster, "second-rack-hot", "Accepted").await;
    assert_eq!(hot.2, "The policy applies at Rack scope.");
    let hot_policy = cluster.policies().get("second-rack-hot").await.unwrap();
    assert_eq!(
        hot_policy
            .status
            .as_ref()
            .and_then(|s| s.rack_indexes_summary.as_deref()),
        Some("1")
    );
    let ghost = wait_for_policy(&cluster, "ghost-target", "TargetNotFound").await;
    assert_eq!(ghost.2, "SGPUInventory \"missing\" does not exist.");

    let summary = eventually("the inventory's policy summary", || async {
        let inventory = cluster.inventories().get("policy-inv").await.ok()?;
        inventory
            .status?
            .runtime_policies
            .filter(|s| s.policies == 3 && s.accepted == 2)
    })
    .await;
    assert_eq!((summary.conflicted, summary.invalid_target), (1, 0));

    // Converged statuses are not rewritten.
    let versions = |list: Vec<mokka::api::SGPURuntimePolicy>| -> Vec<(String, Option<String>)> {
        list.into_iter()
            .map(|p| (p.name_any(), p.metadata.resource_version))
            .collect()
    };
    let before = versions(
        cluster
            .policies()
            .list(&Default::default())
            .await
            .unwrap()
            .items,
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = versions(
        cluster
            .policies()
            .list(&Default::default())
            .await
            .unwrap()
            .items,
    );
    assert_eq!(before, after, "a converged status is not written again");

    // The winner goes: the oldest remaining challenger takes over.
    cluster
        .policies()
        .delete("inventory-failed", &DeleteParams::default())
        .await
        .unwrap();
    let promoted = wait_for_policy(&cluster, "inventory-degraded", "Accepted").await;
    assert_eq!(promoted.0, "True");

    // Shrinking the inventory leaves rack index 1 outside every group.
    cluster
        .inventories()
        .patch(
            "policy-inv",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/rackGroups/0/count", "value": 1}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    let invalid = wait_for_policy(&cluster, "second-rack-hot", "InvalidTarget").await;
    assert_eq!(
        invalid.2,
        "The target lists indexes that select no GPU in the selected rack groups: rackIndexes [1]."
    );
    leader.stop().await;
}

fn gpu_state(runtime: &mokka::api::RuntimeState) -> (Option<DeviceState>, Option<i32>) {
    (
        runtime.device_state,
        runtime
            .telemetry
            .as_ref()
            .and_then(|t| t.temperature.as_ref())
            .and_then(|t| t.gpu_celsius),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn effective_runtime_compiles_every_gpu_on_a_standby_and_is_stale_from_a_profile_edit_until_the_rack_re_renders()
 {
    let cluster = Cluster::start().await;
    let profile = cluster.create_profile("runtime-shape", 1, 4).await;
    let node = cluster.create_node("runtime-node", "runtime").await;
    let inventory = cluster
        .create_inventory("runtime-inv", "runtime-shape", 1, "runtime")
        .await;
    let rack = rack_name("runtime-inv", &inventory.uid().unwrap(), "compute", 0);
    cluster
        .create_policy(
            "inventory-warm",
            "runtime-inv",
            json!({}),
            json!({"telemetry": {"temperature": {"gpuCelsius": 50}}}),
        )
        .await;
    cluster
        .create_policy(
            "gpu-one-failed",
            "runtime-inv",
            json!({"gpuIndexes": [1]}),
            json!({"deviceState": "Failed"}),
        )
        .await;
    let leader = cluster.start_leader("runtime-leader").await;
    let racks = cluster.racks();
    eventually("the Node to be bound", || async {
        racks
            .get_opt(&rack)
            .await
            .unwrap()
            .filter(|rack| bound_names(rack) == vec![Some("runtime-node".to_string())])
    })
    .await;
    let node_uid = node.uid().unwrap();
    let expected = vec![
        (Some(DeviceState::Healthy), Some(50)),
        (Some(DeviceState::Failed), Some(50)),
        (Some(DeviceState::Healthy), Some(50)),
        (Some(DeviceState::Healthy), Some(50)),
    ];
    let compiled = |controller: std::sync::Arc<MokkaController>| {
        let node_uid = node_uid.clone();
        async move {
            let assignments = controller
                .assignments_for_node("runtime-node", &node_uid)
                .ok()?;
            let assignment = assignments.first()?;
            let runtime = controller.effective_runtime(assignment).ok()?;
            let states: Vec<_> = runtime.iter().map(|gpu| gpu_state(&gpu.runtime)).collect();
            Some((assignment.clone(), runtime, states))
        }
    };
    let (_, runtime, states) = eventually("the leader compiles every GPU", || {
        let controller = leader.controller.clone();
        let expected = expected.clone();
        async move { compiled(controller).await.filter(|r| r.2 == expected) }
    })
    .await;
    assert_eq!(
        runtime.iter().map(|gpu| gpu.index).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(states, expected);

    // A standby compiles the same runtime from its caches, with no write work.
    leader.stop().await;
    hold_lease(&cluster, "another-replica", 3600).await;
    let standby = cluster.start_replica("runtime-standby").await;
    let (assignment, mut runtime, _) = eventually("the standby compiles every GPU", || {
        let controller = standby.controller.clone();
        let expected = expected.clone();
        async move { compiled(controller).await.filter(|r| r.2 == expected) }
    })
    .await;
    // Callers own the result.
    runtime[0].runtime.device_state = Some(DeviceState::Degraded);
    let again = standby.controller.effective_runtime(&assignment).unwrap();
    assert_eq!(gpu_state(&again[0].runtime), expected[0]);
    // Repeated queries at one revision evaluate nothing again.
    let computed = standby.controller.policy_evaluations_computed();
    for _ in 0..100 {
        standby.controller.effective_runtime(&assignment).unwrap();
    }
    assert_eq!(standby.controller.policy_evaluations_computed(), computed);
    assert_eq!(
        standby.controller.queued_keys(),
        0,
        "a standby enqueues nothing"
    );
    assert!(!standby.controller.leader_ready());

    // A profile edit: with no leader to re-render the rack, the inputs stay stale.
    let generation = profile.metadata.generation.unwrap();
    cluster
        .profiles()
        .patch(
            "runtime-shape",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"defaults": {"runtime": {"deviceState": "Degraded"}}}})),
        )
        .await
        .unwrap();
    let stale = eventually("the runtime inputs to turn stale", || async {
        standby.controller.effective_runtime(&assignment).err()
    })
    .await;
    assert_eq!(
        stale.to_string(),
        format!(
            "cached runtime inputs do not match the rendered rack: SGPURackProfile \"runtime-shape\" is no longer generation {generation} of UID \"{}\"",
            profile.uid().unwrap()
        )
    );
    assert!(stale.is_retryable());

    // Promotion re-renders the rack; the new defaults then apply.
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), LEASE_NAMESPACE);
    leases
        .delete(LEASE_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let degraded = vec![
        (Some(DeviceState::Degraded), Some(50)),
        (Some(DeviceState::Failed), Some(50)),
        (Some(DeviceState::Degraded), Some(50)),
        (Some(DeviceState::Degraded), Some(50)),
    ];
    eventually("the re-rendered rack to compile again", || {
        let controller = standby.controller.clone();
        let degraded = degraded.clone();
        async move { compiled(controller).await.filter(|r| r.2 == degraded) }
    })
    .await;
    standby.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assignments_need_synced_caches_and_the_exact_node_identity() {
    let cluster = Cluster::start().await;
    let controller =
        MokkaController::new(cluster.controller_client.clone(), Options::default()).unwrap();
    assert_eq!(
        controller.assignments_for_node("a", "b").unwrap_err(),
        ReadError::CacheNotReady
    );
    let mut rack: SGPURack = serde_json::from_value(json!({
        "apiVersion": "mokka.nvidia.com/v1alpha1", "kind": "SGPURack",
        "metadata": {"name": "r"},
        "spec": {"inventoryRef": {"name": "i", "uid": "u"},
                 "profileRef": {"name": "p", "uid": "u", "generation": 1, "revision": "x"},
                 "identity": {"rackGroup": "g", "rackIndex": 0, "fabricUUID": "f", "cliqueID": 0},
                 "nodes": [{"index": 0, "gpus": []}]}
    }))
    .unwrap();
    let snapshot = AssignmentSnapshot {
        rack: rack.clone(),
        node_index: 0,
    };
    assert_eq!(
        controller.effective_runtime(&snapshot).unwrap_err(),
        ReadError::CacheNotReady
    );
    rack.spec.nodes.clear();
    assert_eq!(
        controller
            .effective_runtime(&AssignmentSnapshot {
                rack,
                node_index: 0
            })
            .unwrap_err()
            .to_string(),
        "effective runtime requires a rack and one of its logical Nodes"
    );

    cluster.create_profile("identity-shape", 1, 1).await;
    let node = cluster.create_node("identity-node", "identity").await;
    cluster
        .create_inventory("identity-inv", "identity-shape", 1, "identity")
        .await;
    let replica = cluster.start_leader("identity-leader").await;
    let uid = node.uid().unwrap();
    assert_eq!(
        replica
            .controller
            .assignments_for_node("identity-node", "")
            .unwrap_err()
            .to_string(),
        "assignment lookup requires exact Node name and UID"
    );
    let found = eventually("the Node's assignment", || async {
        let found = replica
            .controller
            .assignments_for_node("identity-node", &uid)
            .unwrap();
        (!found.is_empty()).then_some(found)
    })
    .await;
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].node().unwrap().index, 0);
    assert!(
        replica
            .controller
            .assignments_for_node("identity-node", "another-uid")
            .unwrap()
            .is_empty(),
        "a same-name Node of another UID has no assignment"
    );
    assert!(
        replica
            .controller
            .assignments_for_node("no-such-node", &uid)
            .unwrap()
            .is_empty(),
        "a UID match alone is not enough"
    );

    // A rack being deleted (held by its finalizer while no leader cleans it
    // up) is still returned, marked as deleting.
    replica.stop().await;
    hold_lease(&cluster, "another-replica", 3600).await;
    let standby = cluster.start_replica("identity-standby").await;
    let rack = found[0].rack.name_any();
    cluster
        .racks()
        .delete(&rack, &DeleteParams::default())
        .await
        .unwrap();
    let deleting = eventually("the deleting rack's assignment", || async {
        let found = standby
            .controller
            .assignments_for_node("identity-node", &uid)
            .ok()?;
        found.into_iter().find(|a| a.deleting())
    })
    .await;
    assert_eq!(deleting.rack.name_any(), rack);
    standby.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_restores_an_overwritten_status_re_evaluates_a_retargeted_policy_and_follows_a_profile_shrink()
 {
    let cluster = Cluster::start().await;
    cluster.create_profile("routing-shape", 4, 2).await;
    cluster
        .create_inventory("routing-a", "routing-shape", 1, "routing")
        .await;
    cluster
        .create_inventory("routing-b", "routing-shape", 1, "routing")
        .await;
    let leader = cluster.start_leader("routing-leader").await;
    cluster
        .create_policy(
            "node-three",
            "routing-a",
            json!({"nodeIndexes": [3]}),
            json!({"deviceState": "Failed"}),
        )
        .await;
    wait_for_policy(&cluster, "node-three", "Accepted").await;

    // Someone else's status write is a status-only change: it is re-checked
    // and the controller's decision restored.
    let policies = cluster.policies();
    let mut overwritten = policies.get_status("node-three").await.unwrap();
    if let Some(condition) = overwritten
        .status
        .as_mut()
        .and_then(|s| s.conditions.as_mut())
        .and_then(|c| c.first_mut())
    {
        condition.reason = "Forged".into();
        condition.status = "False".into();
    }
    overwritten.metadata.managed_fields = None;
    policies
        .replace_status("node-three", &Default::default(), &overwritten)
        .await
        .unwrap();
    wait_for_policy(&cluster, "node-three", "Accepted").await;

    // A profile edit that leaves Node index 3 outside the shape invalidates it.
    cluster
        .profiles()
        .patch(
            "routing-shape",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rack": {"nodesPerRack": 2}}})),
        )
        .await
        .unwrap();
    let invalid = wait_for_policy(&cluster, "node-three", "InvalidTarget").await;
    assert_eq!(
        invalid.2,
        "The target lists indexes that select no GPU in the selected rack groups: nodeIndexes [3]."
    );

    // Retargeted to an inventory that does not exist: both targets re-evaluated.
    let retargeted = policies
        .patch(
            "node-three",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"targetRef": {"name": "routing-gone", "nodeIndexes": [1]}}}),
            ),
        )
        .await
        .unwrap();
    let gone = wait_for_policy(&cluster, "node-three", "TargetNotFound").await;
    assert_eq!(gone.2, "SGPUInventory \"routing-gone\" does not exist.");
    assert_eq!(gone.3, retargeted.metadata.generation);
    eventually("routing-a's summary to drop the policy", || async {
        let inventory = cluster.inventories().get("routing-a").await.ok()?;
        inventory
            .status?
            .runtime_policies
            .filter(|s| s.policies == 0)
    })
    .await;
    leader.stop().await;
}
