//! Through the controller: a Node event is the work of its rack group, and
//! the group reconcile renders and writes only the rack whose bindings
//! changed (the controller's `mokka_racks_visited` and `mokka_rack_writes`
//! metrics count them).

use std::time::Duration;

use kube::ResourceExt;
use mokka::identity::rack_name;

use super::support::*;

const RACKS: u32 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_reconcile_visits_only_the_changed_rack_and_writes_it_once() {
    let cluster = Cluster::start().await;
    cluster.create_profile("two-node", 2, 1).await;
    // Ten racks of two Nodes and nineteen Nodes: the last rack has a free slot.
    for i in 0..(2 * RACKS - 1) {
        cluster.create_node(&format!("node-{i:02}"), "groups").await;
    }
    let inventory = cluster
        .create_inventory("inv", "two-node", RACKS as i32, "groups")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let racks = cluster.racks();
    let last = rack_name("inv", &uid, "compute", RACKS - 1);
    eventually("every rack to exist with its Nodes", || async {
        let mut bound = 0;
        for index in 0..RACKS {
            let rack = racks
                .get_opt(&rack_name("inv", &uid, "compute", index))
                .await
                .unwrap()?;
            bound += bound_names(&rack).iter().flatten().count();
        }
        (bound == 2 * RACKS as usize - 1).then_some(())
    })
    .await;
    let controller = replica.controller.clone();
    let idle = || async {
        eventually("the replica to go idle", || async {
            (controller.queued_keys() == 0).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(700)).await;
    };
    idle().await;
    let metrics = controller.metrics();
    let writes_before = metrics.rack_write_count();
    let group_visits_before = metrics.racks_visited_in("group");
    let full_visits_before = metrics.racks_visited_in("inventory");

    cluster.create_node("node-new", "groups").await;
    eventually("the free slot to bind the new Node", || async {
        let rack = racks.get(&last).await.unwrap();
        bound_names(&rack)
            .contains(&Some("node-new".to_string()))
            .then_some(())
    })
    .await;
    eventually("the new Node to be projected", || async {
        let node = cluster.nodes().get("node-new").await.unwrap();
        let rack = racks.get(&last).await.unwrap();
        projected_onto(&node, &rack).then_some(())
    })
    .await;
    idle().await;

    assert_eq!(
        metrics.rack_write_count() - writes_before,
        1,
        "one rack write for the one changed rack"
    );
    assert_eq!(
        metrics.racks_visited_in("group") - group_visits_before,
        1,
        "the group reconcile renders only the changed rack among {RACKS}"
    );
    assert_eq!(
        metrics.racks_visited_in("inventory") - full_visits_before,
        0,
        "a Node event wakes no full inventory reconcile"
    );
    replica.stop().await;
}
