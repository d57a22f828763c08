//! What a user switching from upstream's control plane sees on the API
//! objects themselves (issue 30's Mokka items): status lists, omitted
//! zeros, owner references, Events.

use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, GetParams, ListParams, PostParams};
use mokka::api::{SGPUInventory, SGPURack};
use mokka::identity::rack_name;
use serde_json::json;

use super::support::*;

/// The rack as the API server stores it (Null while it does not exist),
/// so a field left out is told apart from a field decoded to its default.
async fn raw_rack(cluster: &Cluster, name: &str) -> serde_json::Value {
    use kube::Resource;
    let request = kube::core::Request::new(SGPURack::url_path(&(), None))
        .get(name, &GetParams::default())
        .unwrap();
    match cluster.client.request(request).await {
        Ok(rack) => rack,
        Err(kube::Error::Api(status)) if status.code == 404 => serde_json::Value::Null,
        Err(error) => panic!("reading rack {name}: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventory_status_lists_rack_groups_sorted_by_id() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    let group = |id: &str| {
        json!({
            "id": id,
            "count": 1,
            "profileRef": {"name": "one-node"},
            "placement": {"nodeSelector": {"matchLabels": {"pool": "sorted"}}}
        })
    };
    let inventory: SGPUInventory = serde_json::from_value(json!({
        "apiVersion": "mokka.nvidia.com/v1alpha1",
        "kind": "SGPUInventory",
        "metadata": {"name": "inv"},
        "spec": {"rackGroups": [group("zeta"), group("alpha"), group("mid")]}
    }))
    .unwrap();
    cluster
        .inventories()
        .create(&PostParams::default(), &inventory)
        .await
        .unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let ids = eventually("the status to list every group", || async {
        let inventory = cluster.inventories().get("inv").await.unwrap();
        let groups = inventory.status?.rack_groups?;
        (groups.len() == 3).then(|| groups.into_iter().map(|g| g.id).collect::<Vec<_>>())
    })
    .await;
    assert_eq!(
        ids,
        ["alpha", "mid", "zeta"],
        "sorted by id, not as declared"
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rack_status_leaves_out_assigned_nodes_when_none_are_assigned() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "omitzero").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 2, "omitzero")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let bound = rack_name("inv", &uid, "compute", 0);
    let free = rack_name("inv", &uid, "compute", 1);
    eventually("the bound rack to count its Node", || async {
        let rack = raw_rack(&cluster, &bound).await;
        (rack["status"]["assignedNodes"] == json!(1)).then_some(())
    })
    .await;
    let status = eventually("the free rack to have a status", || async {
        let rack = raw_rack(&cluster, &free).await;
        rack["status"]["conditions"]
            .is_array()
            .then(|| rack["status"].clone())
    })
    .await;
    assert!(
        status.get("assignedNodes").is_none(),
        "a rack without bound Nodes leaves assignedNodes out: {status}"
    );

    // A count that drops to zero is removed, not written as 0.
    cluster.delete_node("node-a").await;
    eventually("the released rack to drop assignedNodes", || async {
        let rack = raw_rack(&cluster, &bound).await;
        let status = &rack["status"];
        (status["conditions"].is_array() && status.get("assignedNodes").is_none()).then_some(())
    })
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racks_carry_block_owner_deletion_on_their_inventory_owner_reference() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 1, "owners")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let name = rack_name("inv", &uid, "compute", 0);
    let rack = eventually("the rack to be created", || async {
        cluster.racks().get_opt(&name).await.unwrap()
    })
    .await;
    let owners = rack.owner_references();
    assert_eq!(owners.len(), 1, "{owners:?}");
    let owner = &owners[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("SGPUInventory", "inv", uid.as_str())
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(owner.block_owner_deletion, Some(true));
    replica.stop().await;
}

/// The notes of the `reason` Events about rack `rack`, oldest first.
async fn rack_event_notes(cluster: &Cluster, rack: &str, reason: &str) -> Vec<(String, i32)> {
    let events: Api<Event> = Api::all(cluster.client.clone());
    let mut found: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| {
            event.reason.as_deref() == Some(reason)
                && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(rack)
        })
        .collect();
    found.sort_by_key(|event| event.event_time.as_ref().map(|time| time.0));
    found
        .into_iter()
        .map(|event| {
            let count = event.series.as_ref().map_or(1, |series| series.count);
            (event.note.unwrap_or_default(), count)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_bound_and_node_released_event_names_the_nodes_it_is_about() {
    let cluster = Cluster::start().await;
    cluster.create_profile("three-node", 3, 1).await;
    cluster.create_node("node-a", "named-events").await;
    let inventory = cluster
        .create_inventory("inv", "three-node", 1, "named-events")
        .await;
    let rack = rack_name("inv", &inventory.uid().unwrap(), "compute", 0);
    let replica = cluster.start_leader("replica-a").await;
    let racks = cluster.racks();
    let bound = |names: Vec<Option<String>>| {
        let racks = racks.clone();
        let rack = rack.clone();
        async move {
            eventually("the rack to hold the expected bindings", || async {
                let current = racks.get_opt(&rack).await.unwrap()?;
                (bound_names(&current) == names).then_some(())
            })
            .await
        }
    };
    bound(vec![Some("node-a".into()), None, None]).await;
    // A second write to the same rack, about another Node.
    cluster.create_node("node-b", "named-events").await;
    bound(vec![Some("node-a".into()), Some("node-b".into()), None]).await;
    let notes = eventually("two NodeBound Events", || async {
        let notes = rack_event_notes(&cluster, &rack, "NodeBound").await;
        (notes.len() == 2).then_some(notes)
    })
    .await;
    assert_eq!(
        notes,
        [
            ("Bound Node node-a to logical Node 0".to_string(), 1),
            ("Bound Node node-b to logical Node 1".to_string(), 1)
        ]
    );

    cluster.delete_node("node-a").await;
    bound(vec![None, Some("node-b".into()), None]).await;
    cluster.delete_node("node-b").await;
    bound(vec![None, None, None]).await;
    let notes = eventually("two NodeReleased Events", || async {
        let notes = rack_event_notes(&cluster, &rack, "NodeReleased").await;
        (notes.len() == 2).then_some(notes)
    })
    .await;
    assert_eq!(
        notes,
        [
            (
                "Released Node node-a from logical Node 0 (NodeGone)".to_string(),
                1
            ),
            (
                "Released Node node-b from logical Node 1 (NodeGone)".to_string(),
                1
            )
        ]
    );
    replica.stop().await;
}
