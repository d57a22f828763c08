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

/// Nodes that arrive together make one reconcile of their group once the
/// burst settles (`--status-debounce`, 100 ms by
/// default), so one write per rack, where a reconcile per Node wrote a rack
/// per arrival.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_node_arrivals_makes_one_write_per_rack() {
    const NODES_PER_RACK: u32 = 4;
    const BURST_RACKS: u32 = 2;
    let cluster = Cluster::start().await;
    cluster
        .create_profile("burst-four", NODES_PER_RACK as i32, 1)
        .await;
    let inventory = cluster
        .create_inventory("burst", "burst-four", BURST_RACKS as i32, "burst")
        .await;
    let uid = inventory.uid().unwrap();
    // With the default 100 ms debounce (the other tests turn it off).
    let replica = cluster
        .start_leader_timed("replica-burst", mokka::plan::options::Options::default())
        .await;
    let racks = cluster.racks();
    let names: Vec<String> = (0..BURST_RACKS)
        .map(|index| rack_name("burst", &uid, "compute", index))
        .collect();
    eventually("both racks to exist, empty", || async {
        for name in &names {
            racks.get_opt(name).await.unwrap()?;
        }
        Some(())
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
    let visits_before = (
        metrics.racks_visited_in("group"),
        metrics.racks_visited_in("inventory"),
    );

    // Every slot's Node at once.
    let names_of_nodes: Vec<String> = (0..NODES_PER_RACK * BURST_RACKS)
        .map(|i| format!("burst-{i}"))
        .collect();
    futures::future::join_all(
        names_of_nodes
            .iter()
            .map(|name| cluster.create_node(name, "burst")),
    )
    .await;
    eventually("every Node of the burst to be bound", || async {
        let mut bound = 0;
        for name in &names {
            bound += bound_names(&racks.get(name).await.unwrap())
                .iter()
                .flatten()
                .count();
        }
        (bound == (NODES_PER_RACK * BURST_RACKS) as usize).then_some(())
    })
    .await;
    idle().await;
    assert_eq!(
        metrics.rack_write_count() - writes_before,
        u64::from(BURST_RACKS),
        "one write per rack for the whole burst (racks rendered by group and inventory reconciles: {} and {})",
        metrics.racks_visited_in("group") - visits_before.0,
        metrics.racks_visited_in("inventory") - visits_before.1,
    );
    replica.stop().await;
}
