//! Standby, caches and promotion; two replicas and a leader change
//! mid-reconcile.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};
use mokka::identity::rack_name;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_serves_from_caches_keeps_its_queues_empty_and_makes_no_mutating_call_until_promoted()
 {
    let cluster = Cluster::start().await;
    let held = hold_lease(&cluster, "another-replica", 3600).await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "standby").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 1, "standby")
        .await;
    let uid = inventory.uid().unwrap();
    let before = mutating_requests(&cluster);

    let replica = cluster.start_replica("standby-replica").await;
    let readiness = replica.controller.readiness();
    tokio::time::timeout(
        Duration::from_secs(10),
        readiness.wait_for(|s| s.role == controller_kit::ReplicaRole::Standby),
    )
    .await
    .expect("the replica becomes a standby");
    assert!(
        readiness.is_ready(),
        "a standby with synced caches is ready"
    );
    assert!(replica.controller.cache_ready());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!replica.controller.leader_ready());
    assert_eq!(
        replica.controller.queued_keys(),
        0,
        "a standby enqueues nothing"
    );
    let name = rack_name("inv", &uid, "compute", 0);
    assert!(
        cluster.racks().get_opt(&name).await.unwrap().is_none(),
        "pre-existing objects are not reconciled while standby"
    );
    if cluster.sim().is_some() {
        assert_eq!(
            mutating_requests(&cluster),
            before,
            "a standby makes no mutating request"
        );
    }

    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), LEASE_NAMESPACE);
    let lease = leases.get(LEASE_NAME).await.unwrap();
    assert_eq!(
        lease.metadata.resource_version, held.metadata.resource_version,
        "a standby never writes the Lease"
    );

    // Promotion: the holder goes away; the handlers replay the warm caches.
    leases
        .delete(LEASE_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let rack = eventually(
        "replay after promotion creates the rack and binds the Node",
        || async {
            cluster
                .racks()
                .get_opt(&name)
                .await
                .unwrap()
                .filter(|rack| bound_names(rack) == vec![Some("node-a".to_string())])
        },
    )
    .await;
    eventually("the Node to be projected", || async {
        projected_onto(&cluster.nodes().get("node-a").await.unwrap(), &rack).then_some(())
    })
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_converge_across_a_leader_change_mid_reconcile_with_no_duplicate_binding() {
    let cluster = Cluster::start().await;
    cluster.create_profile("two-node", 2, 1).await;
    let first = cluster.start_leader("replica-a").await;
    let second = cluster.start_replica("replica-b").await;
    let standby = second.controller.readiness();
    tokio::time::timeout(
        Duration::from_secs(10),
        standby.wait_for(|s| s.role == controller_kit::ReplicaRole::Standby),
    )
    .await
    .expect("the second replica is a standby");

    let inventory = cluster
        .create_inventory("inv", "two-node", 3, "failover")
        .await;
    let uid = inventory.uid().unwrap();
    for i in 0..6 {
        cluster.create_node(&format!("node-{i}"), "failover").await;
    }
    // Leadership changes while the first racks are being written.
    eventually("the first rack to exist", || async {
        cluster
            .racks()
            .get_opt(&rack_name("inv", &uid, "compute", 0))
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;
    assert_eq!(
        second.controller.queued_keys(),
        0,
        "the standby queues stay empty"
    );
    first.stop().await;

    eventually("the standby to take over", || async {
        second.controller.leader_ready().then_some(())
    })
    .await;
    let racks = eventually("every Node bound exactly once and projected", || async {
        let mut racks = Vec::new();
        let mut bound = Vec::new();
        for index in 0..3 {
            let rack = cluster
                .racks()
                .get_opt(&rack_name("inv", &uid, "compute", index))
                .await
                .unwrap()?;
            for slot in &rack.spec.nodes {
                bound.push(slot.node_ref.as_ref()?.name.clone());
            }
            racks.push(rack);
        }
        bound.sort();
        let expected: Vec<String> = (0..6).map(|i| format!("node-{i}")).collect();
        (bound == expected).then_some(racks)
    })
    .await;
    eventually("every Node projected for its one binding", || async {
        for rack in &racks {
            for slot in &rack.spec.nodes {
                let node = cluster
                    .nodes()
                    .get(&slot.node_ref.as_ref()?.name)
                    .await
                    .unwrap();
                if !projected_onto(&node, rack) {
                    return None;
                }
            }
        }
        Some(())
    })
    .await;
    second.stop().await;
}
