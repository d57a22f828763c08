//! The end-to-end lifecycle: racks created, Nodes bound and projected,
//! shrinks, replacements, conflicts, capacity and deletion.

use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use mokka::identity::rack_name;
use serde_json::json;

use super::support::*;

async fn rack_names(cluster: &Cluster, inventory: &str, uid: &str, count: u32) -> Vec<String> {
    let _ = cluster;
    (0..count)
        .map(|i| rack_name(inventory, uid, "compute", i))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_creates_racks_binds_nodes_oldest_first_and_projects_them() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 2).await;
    cluster.create_node("node-a", "lifecycle").await;
    cluster.create_node("node-b", "lifecycle").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 2, "lifecycle")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;

    let names = rack_names(&cluster, "inv", &uid, 2).await;
    let racks = cluster.racks();
    for (name, node) in names.iter().zip(["node-a", "node-b"]) {
        let rack = eventually("the rack to bind its Node", || async {
            racks
                .get_opt(name)
                .await
                .unwrap()
                .filter(|rack| bound_names(rack) == vec![Some(node.to_string())])
        })
        .await;
        assert!(
            rack.finalizers()
                .iter()
                .any(|f| f == "mokka.nvidia.com/rack-cleanup")
        );
        eventually("the Node to be projected", || async {
            let node = cluster.nodes().get(node).await.unwrap();
            projected_onto(&node, &rack).then_some(())
        })
        .await;
        eventually("the rack to be Ready", || async {
            let rack = racks.get(name).await.unwrap();
            let status = rack.status?;
            let ready = status
                .conditions?
                .into_iter()
                .find(|c| c.type_ == "Ready")?;
            (status.assigned_nodes == Some(1) && ready.status == "True").then_some(())
        })
        .await;
    }
    let inventory = eventually("the inventory to be Programmed", || async {
        let inventory = cluster.inventories().get("inv").await.unwrap();
        let programmed = condition(&inventory, "Programmed")?;
        (programmed.0 == "True").then_some(inventory)
    })
    .await;
    assert!(
        inventory
            .finalizers()
            .iter()
            .any(|f| f == "mokka.nvidia.com/inventory-cleanup")
    );
    let status = inventory.status.clone().unwrap();
    assert_eq!(status.capacity.unwrap().nodes, 2);
    assert_eq!(status.usage.unwrap().allocated_nodes, 2);
    let programmed = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Programmed")
        .unwrap();
    assert_eq!(
        programmed.observed_generation,
        inventory.metadata.generation
    );
    assert_eq!(
        programmed.message,
        "All desired racks and Node projections are programmed."
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shrinking_removes_the_projection_first_then_deletes_the_rack() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "shrink").await;
    cluster.create_node("node-b", "shrink").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 2, "shrink")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let names = rack_names(&cluster, "inv", &uid, 2).await;
    eventually("both Nodes to be projected", || async {
        let a = cluster.nodes().get("node-a").await.unwrap();
        let b = cluster.nodes().get("node-b").await.unwrap();
        (!unprojected(&a) && !unprojected(&b)).then_some(())
    })
    .await;
    eventually("the inventory to be Programmed", || async {
        condition(
            &cluster.inventories().get("inv").await.unwrap(),
            "Programmed",
        )
        .filter(|c| c.0 == "True")
    })
    .await;

    let patch = json!({"spec": {"rackGroups": [{"id": "compute", "count": 1, "profileRef": {"name": "one-node"},
        "placement": {"nodeSelector": {"matchLabels": {"pool": "shrink"}}}}]}});
    cluster
        .inventories()
        .patch("inv", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();

    eventually("the second rack to be deleted", || async {
        cluster
            .racks()
            .get_opt(&names[1])
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        unprojected(&cluster.nodes().get("node-b").await.unwrap()),
        "node-b's projection is gone before its rack"
    );
    let rack0 = cluster.racks().get(&names[0]).await.unwrap();
    assert!(projected_onto(
        &cluster.nodes().get("node-a").await.unwrap(),
        &rack0
    ));
    eventually("capacity and allocation to become 1", || async {
        let status = cluster.inventories().get("inv").await.unwrap().status?;
        (status.capacity?.nodes == 1 && status.usage?.allocated_nodes == 1).then_some(())
    })
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_same_name_replacement_ends_with_one_projected_binding_to_the_new_uid() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    let old = cluster.create_node("node-a", "replace").await;
    cluster.create_node("node-b", "replace").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 2, "replace")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let names = rack_names(&cluster, "inv", &uid, 2).await;
    eventually("both racks bound", || async {
        let r0 = cluster.racks().get_opt(&names[0]).await.unwrap()?;
        let r1 = cluster.racks().get_opt(&names[1]).await.unwrap()?;
        (bound_names(&r0)[0].is_some() && bound_names(&r1)[0].is_some()).then_some(())
    })
    .await;
    cluster.delete_node("node-b").await;
    cluster.delete_node("node-a").await;
    let new = cluster.create_node("node-a", "replace").await;
    assert_ne!(old.uid(), new.uid());
    let new_uid = new.uid().unwrap();
    let rack = eventually("exactly one binding, to the new UID", || async {
        let mut bound = Vec::new();
        let mut bound_rack = None;
        for name in &names {
            let rack = cluster.racks().get_opt(name).await.unwrap()?;
            for slot in &rack.spec.nodes {
                if let Some(node) = &slot.node_ref {
                    bound.push(node.uid.clone());
                    bound_rack = Some(rack.clone());
                }
            }
        }
        (bound == vec![new_uid.clone()]).then_some(bound_rack?)
    })
    .await;
    eventually("the new Node to be projected", || async {
        projected_onto(&cluster.nodes().get("node-a").await.unwrap(), &rack).then_some(())
    })
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_inventory_cleans_node_metadata_and_racks_before_its_finalizer() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "delete").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 1, "delete")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let name = rack_name("inv", &uid, "compute", 0);
    eventually("the Node to be projected", || async {
        (!unprojected(&cluster.nodes().get("node-a").await.unwrap())).then_some(())
    })
    .await;
    cluster
        .inventories()
        .delete("inv", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the inventory to be gone", || async {
        cluster
            .inventories()
            .get_opt("inv")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        cluster.racks().get_opt(&name).await.unwrap().is_none(),
        "every rack is deleted before the finalizer goes"
    );
    assert!(unprojected(&cluster.nodes().get("node-a").await.unwrap()));
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_rack_on_a_desired_name_is_a_conflict_never_adopted_and_recreated_once_gone() {
    let cluster = Cluster::start().await;
    let profile = cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "squat").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 1, "squat")
        .await;
    let uid = inventory.uid().unwrap();
    let name = rack_name("inv", &uid, "compute", 0);
    // A squatter: the rendered spec under the desired name, with no owner.
    let resolved = mokka::render::ResolvedProfile::resolve(&profile).unwrap();
    let spec = mokka::render::render_resolved_rack(
        mokka::render::RackCoordinate {
            inventory_name: "inv",
            inventory_uid: &uid,
            group: "compute",
            rack_index: 0,
            rack_count: 1,
        },
        &resolved,
    )
    .unwrap();
    let squatter = cluster
        .racks()
        .create(
            &PostParams::default(),
            &mokka::api::SGPURack::new(&name, spec),
        )
        .await
        .unwrap();
    let replica = cluster.start_leader("replica-a").await;
    eventually("Programmed=False RackOwnershipConflict", || async {
        condition(
            &cluster.inventories().get("inv").await.unwrap(),
            "Programmed",
        )
        .filter(|c| c.1 == "RackOwnershipConflict")
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let still = cluster.racks().get(&name).await.unwrap();
    assert_eq!(
        still.metadata.resource_version, squatter.metadata.resource_version,
        "the blocker is never patched or adopted"
    );
    assert!(unprojected(&cluster.nodes().get("node-a").await.unwrap()));

    cluster
        .racks()
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let recreated = eventually("the rack recreated under inventory ownership", || async {
        let rack = cluster.racks().get_opt(&name).await.unwrap()?;
        (rack.uid() != squatter.uid() && mokka::plan::rack::is_owned_by(&rack, "inv", &uid))
            .then_some(rack)
    })
    .await;
    assert_ne!(recreated.uid(), squatter.uid());
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_on_a_controller_owned_label_is_not_accepted_and_keeps_the_last_good_binding() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "invalid").await;
    let inventory = cluster
        .create_inventory("inv", "one-node", 1, "invalid")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let name = rack_name("inv", &uid, "compute", 0);
    eventually("the inventory to be Programmed", || async {
        condition(
            &cluster.inventories().get("inv").await.unwrap(),
            "Programmed",
        )
        .filter(|c| c.0 == "True")
    })
    .await;
    let rack_before = cluster.racks().get(&name).await.unwrap();
    let node_before = cluster.nodes().get("node-a").await.unwrap();

    let patch = json!({"spec": {"rackGroups": [{"id": "compute", "count": 1, "profileRef": {"name": "one-node"},
        "placement": {"nodeSelector": {"matchLabels": {"mokka.nvidia.com/sgpu-assigned": "true"}}}}]}});
    cluster
        .inventories()
        .patch("inv", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let accepted = eventually("Accepted=False", || async {
        condition(&cluster.inventories().get("inv").await.unwrap(), "Accepted")
            .filter(|c| c.0 == "False")
    })
    .await;
    assert_eq!(
        accepted.2,
        r#"rack group "compute" selector: selector must not reference controller-owned label "mokka.nvidia.com/sgpu-assigned""#
    );
    let programmed = condition(
        &cluster.inventories().get("inv").await.unwrap(),
        "Programmed",
    )
    .unwrap();
    assert_eq!(programmed.0, "False");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let rack_after = cluster.racks().get(&name).await.unwrap();
    assert_eq!(rack_after.spec, rack_before.spec, "no rack write follows");
    // The projection (labels and annotation) is unchanged. Not the Node's
    // resourceVersion: on the real lane the node lifecycle writes Nodes too.
    let node_after = cluster.nodes().get("node-a").await.unwrap();
    assert_eq!(
        (
            &node_after.metadata.labels,
            &node_after.metadata.annotations
        ),
        (
            &node_before.metadata.labels,
            &node_before.metadata.annotations
        ),
        "no Node patch follows"
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_profile_is_reported_in_status_and_programming_follows_its_creation() {
    let cluster = Cluster::start().await;
    cluster.create_node("node-a", "missing").await;
    cluster.create_inventory("inv", "later", 1, "missing").await;
    let replica = cluster.start_leader("replica-a").await;
    let resolved = eventually("ResolvedRefs=False ProfileNotFound", || async {
        condition(
            &cluster.inventories().get("inv").await.unwrap(),
            "ResolvedRefs",
        )
        .filter(|c| c.1 == "ProfileNotFound")
    })
    .await;
    assert_eq!(resolved.2, "One or more referenced profiles are missing.");
    let programmed = condition(
        &cluster.inventories().get("inv").await.unwrap(),
        "Programmed",
    )
    .unwrap();
    assert_eq!(
        (programmed.1.as_str(), programmed.2.as_str()),
        (
            "ReferencesUnresolved",
            "Programming is blocked by unresolved profiles."
        )
    );
    assert!(
        cluster
            .racks()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    cluster.create_profile("later", 1, 1).await;
    eventually(
        "the inventory to be Programmed once the profile exists",
        || async {
            condition(
                &cluster.inventories().get("inv").await.unwrap(),
                "Programmed",
            )
            .filter(|c| c.0 == "True")
        },
    )
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_beyond_capacity_are_pending_and_reported_with_a_capacity_exhausted_event() {
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    for name in ["node-a", "node-b", "node-c"] {
        cluster.create_node(name, "full").await;
    }
    let inventory = cluster.create_inventory("inv", "one-node", 2, "full").await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let requests = eventually("RequestsSatisfied=False PendingNodes", || async {
        condition(
            &cluster.inventories().get("inv").await.unwrap(),
            "RequestsSatisfied",
        )
        .filter(|c| c.1 == "PendingNodes")
    })
    .await;
    assert_eq!(requests.2, "1 requested Nodes are pending capacity.");
    let usage = eventually("usage to count the pending Node", || async {
        let usage = cluster
            .inventories()
            .get("inv")
            .await
            .unwrap()
            .status?
            .usage?;
        (usage.allocated_nodes == 2).then_some(usage)
    })
    .await;
    assert_eq!(
        (
            usage.requested_nodes,
            usage.pending_nodes,
            usage.available_nodes
        ),
        (3, 1, 0)
    );
    let events: kube::Api<k8s_openapi::api::events::v1::Event> =
        kube::Api::namespaced(cluster.client.clone(), "default");
    eventually("a CapacityExhausted event about the inventory", || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items
            .iter()
            .any(|event| {
                event.reason.as_deref() == Some("CapacityExhausted")
                    && event.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid.as_str())
            })
            .then_some(())
    })
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rack_update_leaves_the_servers_managed_fields_whole() {
    // The rack cache keeps only a summary of each rack's managedFields; an
    // update that sent it back would replace the server's field ownership.
    let cluster = Cluster::start().await;
    cluster.create_profile("two-node", 2, 1).await;
    cluster.create_node("node-a", "managed").await;
    let inventory = cluster
        .create_inventory("inv", "two-node", 1, "managed")
        .await;
    let uid = inventory.uid().unwrap();
    let replica = cluster.start_leader("replica-a").await;
    let name = rack_name("inv", &uid, "compute", 0);
    let racks = cluster.racks();
    eventually("node-a bound", || async {
        racks
            .get_opt(&name)
            .await
            .unwrap()
            .filter(|rack| bound_names(rack).contains(&Some("node-a".to_string())))
    })
    .await;
    // A second Node arrives: the controller updates the rack.
    cluster.create_node("node-b", "managed").await;
    let rack = eventually("node-b bound by an update", || async {
        racks
            .get_opt(&name)
            .await
            .unwrap()
            .filter(|rack| bound_names(rack).contains(&Some("node-b".to_string())))
    })
    .await;
    let spec = rack
        .managed_fields()
        .iter()
        .filter(|entry| entry.manager.as_deref() == Some(mokka::plan::projection::FIELD_MANAGER))
        .filter(|entry| entry.subresource.as_deref().is_none_or(str::is_empty))
        .find_map(|entry| entry.fields_v1.as_ref()?.0.get("f:spec"))
        .unwrap_or_else(|| panic!("our entry owns the spec: {:?}", rack.managed_fields()));
    assert!(
        spec.get("f:nodes").is_some() && spec.get("f:identity").is_some(),
        "the server's managedFields were replaced by the cache's summary: {spec}"
    );
    replica.stop().await;
}
