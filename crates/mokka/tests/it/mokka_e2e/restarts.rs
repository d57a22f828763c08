//! Restarts: a restart with nothing changed writes nothing, a Node deleted
//! while the controller was down is cleaned up and replaced, and a fresh
//! controller handles racks and projections it did not make itself.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use mokka::identity::rack_name;
use serde_json::json;

use super::support::*;

/// Waits until the replica has nothing queued and its status is settled.
async fn settle(replica: &Replica) {
    let controller = replica.controller.clone();
    eventually("the replica to go idle", || async {
        (controller.queued_keys() == 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(700)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_unchanged_assignments_makes_no_rack_write_and_no_node_patch() {
    let cluster = Cluster::start().await;
    cluster.create_profile("two-node", 2, 1).await;
    for i in 0..4 {
        cluster.create_node(&format!("node-{i}"), "restart").await;
    }
    cluster
        .create_inventory("inv", "two-node", 2, "restart")
        .await;
    let first = cluster.start_leader("replica-a").await;
    eventually("the inventory to be Programmed", || async {
        condition(
            &cluster.inventories().get("inv").await.unwrap(),
            "Programmed",
        )
        .filter(|c| c.0 == "True")
    })
    .await;
    settle(&first).await;
    first.stop().await;

    let second = cluster.start_leader("replica-b").await;
    settle(&second).await;
    assert_eq!(
        second.controller.metrics().rack_write_count(),
        0,
        "no rack write after a restart"
    );
    assert_eq!(
        second.controller.metrics().node_patches.get(),
        0,
        "no Node patch after a restart"
    );
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_co_owner_of_the_annotation_gets_exactly_one_cleanup_apply_on_inventory_deletion()
{
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "coowner").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 1, "coowner")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let name = rack_name("inv", &uid, "compute", 0);
    let node = eventually("the Node to be projected", || async {
        let node = cluster.nodes().get("node-a").await.unwrap();
        (!unprojected(&node)).then_some(node)
    })
    .await;
    // Another manager applies the same annotation value: it now co-owns it.
    let annotation = node
        .annotations()
        .get("mokka.nvidia.com/sgpu-assignment")
        .cloned()
        .unwrap();
    let body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a",
        "annotations": {"mokka.nvidia.com/sgpu-assignment": annotation}}});
    cluster
        .nodes()
        .patch(
            "node-a",
            &PatchParams::apply("someone-else"),
            &Patch::Apply(&body),
        )
        .await
        .unwrap();
    settle(&replica).await;
    let patches_before = replica.controller.metrics().node_patches.get();

    cluster
        .inventories()
        .delete("inv", &DeleteParams::default())
        .await
        .unwrap();
    eventually("both labels to be removed", || async {
        let node = cluster.nodes().get("node-a").await.unwrap();
        let labels = node.labels();
        (!labels.contains_key("mokka.nvidia.com/sgpu-assigned")
            && !labels.contains_key("nvidia.com/gpu.clique"))
        .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        replica.controller.metrics().node_patches.get() - patches_before,
        1,
        "exactly one cleanup apply"
    );
    let node = cluster.nodes().get("node-a").await.unwrap();
    assert_eq!(
        node.annotations().get("mokka.nvidia.com/sgpu-assignment"),
        Some(&annotation),
        "the co-owned annotation stays"
    );
    let rack = cluster.racks().get(&name).await.unwrap();
    assert_eq!(
        bound_names(&rack),
        vec![Some("node-a".to_string())],
        "the rack keeps its binding"
    );
    assert!(
        rack.finalizers()
            .iter()
            .any(|f| f == "mokka.nvidia.com/rack-cleanup"),
        "and its finalizer"
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_while_the_controller_was_down_is_cleaned_up_then_released_and_replaced() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "gating").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 1, "gating")
        .await;
    let uid = inventory.uid().unwrap();
    let name = rack_name("inv", &uid, "compute", 0);
    let first = cluster.start_leader("replica-a").await;
    eventually("the Node to be projected", || async {
        (!unprojected(&cluster.nodes().get("node-a").await.unwrap())).then_some(())
    })
    .await;
    settle(&first).await;
    first.stop().await;

    // While no controller runs, the Node is replaced by a same-name Node
    // with a new UID: the old binding must be cleaned up (its exact Node is
    // absent) before the slot is released and the replacement bound.
    let old = cluster.nodes().get("node-a").await.unwrap();
    cluster.delete_node("node-a").await;
    cluster.create_node("node-a", "gating").await;
    let old_annotation = old
        .annotations()
        .get("mokka.nvidia.com/sgpu-assignment")
        .cloned()
        .unwrap();

    let second = cluster.start_leader("replica-b").await;
    let replacement = cluster.nodes().get("node-a").await.unwrap();
    let rack = eventually("the slot to be bound to the replacement UID", || async {
        let rack = cluster.racks().get(&name).await.unwrap();
        let bound = rack.spec.nodes[0].node_ref.clone()?;
        (bound.uid == replacement.uid().unwrap()).then_some(rack)
    })
    .await;
    eventually(
        "the replacement to be projected for its own binding",
        || async {
            let node = cluster.nodes().get("node-a").await.unwrap();
            let annotation = node
                .annotations()
                .get("mokka.nvidia.com/sgpu-assignment")
                .cloned()?;
            (projected_onto(&node, &rack) && annotation != old_annotation).then_some(())
        },
    )
    .await;
    second.stop().await;
}
