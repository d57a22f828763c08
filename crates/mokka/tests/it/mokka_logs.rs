//! Upstream's log messages (those of its newest release), in JSON as the
//! binary writes them by default: one lifecycle on kube-sim through the
//! real kube client, and every message checked with its key fields at the
//! decision that emits it. A converged controller logs none of them again.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use mokka::identity::rack_name;
use serde_json::{Value, json};

use crate::mokka_e2e::support::*;

/// Waits for a line with `message` whose fields include `fields`.
async fn wait_for(log: &CapturedLog, message: &str, fields: Value) -> Value {
    eventually(&format!("log {message:?} with {fields}"), || async {
        with_message(log, message)
            .into_iter()
            .find(|line| has_fields(line, &fields))
    })
    .await
}

/// The lines with this message.
fn with_message(log: &CapturedLog, message: &str) -> Vec<Value> {
    log.json_lines()
        .into_iter()
        .filter(|line| line["message"] == message)
        .collect()
}

fn has_fields(line: &Value, fields: &Value) -> bool {
    fields
        .as_object()
        .is_some_and(|fields| fields.iter().all(|(key, value)| &line[key] == value))
}

/// Upstream's info messages (the debug ones repeat with every query or evaluation).
const DECISION_MESSAGES: [&str; 8] = [
    "Created rack",
    "Updated rack",
    "Re-rendered rack",
    "Assigned Node to logical rack Node",
    "Released Node from logical rack Node",
    "Deleted rack",
    "Released inventory cleanup finalizer",
    "Runtime policy condition changed",
];

fn decision_lines(log: &CapturedLog) -> usize {
    log.json_lines()
        .iter()
        .filter(|line| DECISION_MESSAGES.iter().any(|m| line["message"] == *m))
        .count()
}

fn group(count: i32) -> Value {
    json!({"spec": {"rackGroups": [{
        "id": "compute", "count": count, "profileRef": {"name": "shape"},
        "placement": {"nodeSelector": {"matchLabels": {"pool": "logs"}}}
    }]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_log_message_is_emitted_at_its_decision_with_its_fields() {
    // The binary's format, with Mokka's debug messages.
    let log = CapturedLog::install_json("info,mokka=debug");
    let cluster = Cluster::start_sim().await;
    cluster.create_profile("shape", 1, 1).await;
    let node_a = cluster.create_node("node-a", "logs").await;
    let node_b = cluster.create_node("node-b", "logs").await;
    let inventory = cluster.create_inventory("inv", "shape", 2, "logs").await;
    let uid = inventory.uid().unwrap();
    let names = [
        rack_name("inv", &uid, "compute", 0),
        rack_name("inv", &uid, "compute", 1),
    ];
    let leader = cluster.start_leader("logs").await;

    // Two racks created, each Node assigned to one of them.
    for (index, name) in names.iter().enumerate() {
        let created = wait_for(
            &log,
            "Created rack",
            json!({"inventory": "inv", "rack": name, "rackGroup": "compute", "rackIndex": index}),
        )
        .await;
        assert_eq!(created["level"], "INFO");
        assert!(created["uid"].as_str().is_some_and(|uid| !uid.is_empty()));
        assert!(
            created["profileRevision"]
                .as_str()
                .is_some_and(|r| !r.is_empty())
        );
    }
    for node in [&node_a, &node_b] {
        let assigned = wait_for(
            &log,
            "Assigned Node to logical rack Node",
            json!({"inventory": "inv", "node": node.name_any(), "nodeUID": node.uid().unwrap(), "rackGroup": "compute", "nodeIndex": 0}),
        )
        .await;
        assert!(names.iter().any(|name| assigned["rack"] == name.as_str()));
    }
    eventually("the inventory to be Programmed", || async {
        let inventory = cluster.inventories().get("inv").await.unwrap();
        (condition(&inventory, "Programmed")?.0 == "True").then_some(())
    })
    .await;
    assert_eq!(with_message(&log, "Created rack").len(), 2);

    // Converged: status passes and resyncs log none of the decisions again.
    let settled = decision_lines(&log);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        decision_lines(&log),
        settled,
        "a converged controller kept logging decisions"
    );

    // A policy: decided (debug) and its condition written (info).
    cluster
        .create_policy(
            "warm",
            "inv",
            json!({"rackIndexes": [0]}),
            json!({"telemetry": {"temperature": {"gpuCelsius": 50}}}),
        )
        .await;
    let policy_uid = cluster.policies().get("warm").await.unwrap().uid().unwrap();
    let decided = wait_for(
        &log,
        "Runtime policy decided",
        json!({"inventory": "inv", "policy": "warm", "uid": policy_uid, "outcome": "Accepted", "scope": "Rack"}),
    )
    .await;
    assert_eq!(decided["level"], "DEBUG");
    assert_eq!(decided["detail"], "The policy applies at Rack scope.");
    let changed = wait_for(
        &log,
        "Runtime policy condition changed",
        json!({"policy": "warm", "uid": policy_uid, "inventory": "inv", "condition": "Accepted", "status": "True", "reason": "Accepted"}),
    )
    .await;
    assert_eq!(changed["level"], "INFO");
    assert!(
        changed.get("oldStatus").is_none_or(Value::is_null),
        "{changed}"
    );

    // A runtime query: compiled (debug), with the Node and its GPU count.
    let assignments = leader
        .controller
        .assignments_for_node("node-a", &node_a.uid().unwrap())
        .unwrap();
    let runtime = leader
        .controller
        .effective_runtime(&assignments[0])
        .unwrap();
    assert_eq!(runtime.len(), 1);
    let compiled = wait_for(
        &log,
        "Compiled GPU runtime",
        json!({"inventory": "inv", "node": "node-a", "nodeIndex": 0, "gpus": 1}),
    )
    .await;
    assert_eq!(compiled["level"], "DEBUG");
    // Policies are decided once per input revision, not per query.
    let decided = with_message(&log, "Runtime policy decided").len();
    for _ in 0..20 {
        leader
            .controller
            .effective_runtime(&assignments[0])
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(with_message(&log, "Runtime policy decided").len(), decided);
    assert_eq!(
        with_message(&log, "Runtime policy condition changed").len(),
        1
    );

    // A profile edit moves its revision: both racks re-render.
    let revision_before = cluster
        .racks()
        .get(&names[0])
        .await
        .unwrap()
        .spec
        .profile_ref
        .revision;
    cluster
        .profiles()
        .patch(
            "shape",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"defaults": {"runtime": {"deviceState": "Degraded"}}}})),
        )
        .await
        .unwrap();
    let revision_after = eventually("the racks to re-render", || async {
        let rack = cluster.racks().get(&names[0]).await.unwrap();
        (rack.spec.profile_ref.revision != revision_before)
            .then_some(rack.spec.profile_ref.revision)
    })
    .await;
    for name in &names {
        wait_for(
            &log,
            "Re-rendered rack",
            json!({"inventory": "inv", "rack": name, "profileRevision": revision_after}),
        )
        .await;
    }

    // node-b leaves the group's selector: cleaned up, then released from
    // its slot by a plain rack update.
    let b_rack = with_message(&log, "Assigned Node to logical rack Node")
        .into_iter()
        .find(|line| line["node"] == "node-b")
        .and_then(|line| line["rack"].as_str().map(str::to_string))
        .unwrap();
    cluster
        .nodes()
        .patch(
            "node-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"pool": "elsewhere"}}})),
        )
        .await
        .unwrap();
    wait_for(
        &log,
        "Released Node from logical rack Node",
        json!({"inventory": "inv", "rack": b_rack, "node": "node-b", "nodeUID": node_b.uid().unwrap(), "nodeIndex": 0, "reason": "SelectorMismatch"}),
    )
    .await;
    wait_for(
        &log,
        "Updated rack",
        json!({"inventory": "inv", "rack": b_rack}),
    )
    .await;

    // The inventory shrinks to one rack: rack 1 is retired.
    cluster
        .inventories()
        .patch("inv", &PatchParams::default(), &Patch::Merge(group(1)))
        .await
        .unwrap();
    let deleted = wait_for(
        &log,
        "Deleted rack",
        json!({"inventory": "inv", "rack": names[1], "reason": "CapacityShrink"}),
    )
    .await;
    assert!(deleted["uid"].as_str().is_some_and(|uid| !uid.is_empty()));

    // The inventory is deleted: its last rack goes, node-a with it, then the finalizer.
    eventually("node-a to be bound to rack 0", || async {
        let rack = cluster.racks().get_opt(&names[0]).await.unwrap()?;
        (bound_names(&rack) == vec![Some("node-a".to_string())]).then_some(())
    })
    .await;
    cluster
        .inventories()
        .delete("inv", &Default::default())
        .await
        .unwrap();
    wait_for(
        &log,
        "Released Node from logical rack Node",
        json!({"inventory": "inv", "rack": names[0], "node": "node-a", "reason": "InventoryDeleting"}),
    )
    .await;
    wait_for(
        &log,
        "Deleted rack",
        json!({"inventory": "inv", "rack": names[0], "reason": "InventoryDeleting"}),
    )
    .await;
    wait_for(
        &log,
        "Released inventory cleanup finalizer",
        json!({"inventory": "inv", "uid": uid}),
    )
    .await;
    leader.stop().await;
}
