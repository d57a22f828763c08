//! What a user switching from upstream's control plane sees on the API
//! objects themselves (issue 30's Mokka items): status lists, omitted
//! zeros, owner references, Events.

use kube::api::PostParams;
use mokka::api::SGPUInventory;
use serde_json::json;

use super::support::*;

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
