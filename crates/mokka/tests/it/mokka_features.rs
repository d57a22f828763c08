//! The feature gates (`--feature-gates`) that live in the controller, on
//! kube-sim through the real kube client: `RuntimePolicies` and
//! `KubernetesEvents` off and on. (`NodeAgentAPI` is the binary's wiring:
//! crates/gpufleet/tests/it/mokka_run.rs.)

use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use mokka::api::DeviceState;
use mokka::identity::rack_name;
use mokka::plan::features::{FeatureGate, FeatureGates};
use mokka::plan::options::Options;
use serde_json::json;

use crate::mokka_e2e::support::*;

fn with_gates(text: &str) -> Options {
    Options {
        features: FeatureGates::parse(text).expect("valid gates"),
        ..Options::default()
    }
}

/// A rack bound to `node` and the Node projected, once converged.
async fn bound_and_projected(cluster: &Cluster, rack: &str, node: &str) {
    let racks = cluster.racks();
    let bound = eventually("the Node to be bound", || async {
        racks
            .get_opt(rack)
            .await
            .unwrap()
            .filter(|rack| bound_names(rack) == vec![Some(node.to_string())])
    })
    .await;
    eventually("the Node to be projected", || async {
        let node = cluster.nodes().get(node).await.unwrap();
        projected_onto(&node, &bound).then_some(())
    })
    .await;
}

/// An upstream install that predates runtime policies has no
/// SGPURuntimePolicy CRD: with `RuntimePolicies=false` the controller never
/// watches that kind, so its caches sync and it programs racks as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_runtime_policies_off_the_controller_runs_on_a_cluster_without_the_policy_crd() {
    let cluster = Cluster::start_sim_with_kinds(|kind| kind != "SGPURuntimePolicy").await;
    cluster.create_profile("shape", 1, 2).await;
    cluster.create_node("node-a", "old-install").await;
    let inventory = cluster
        .create_inventory("inv", "shape", 1, "old-install")
        .await;
    let rack = rack_name("inv", &inventory.uid().unwrap(), "compute", 0);
    // start_leader waits (30 s at most) for every cache to sync.
    let leader = cluster
        .start_leader_with("no-policies", with_gates("RuntimePolicies=false"))
        .await;
    bound_and_projected(&cluster, &rack, "node-a").await;
    let inventory = eventually("the inventory to be Programmed", || async {
        let inventory = cluster.inventories().get("inv").await.unwrap();
        (condition(&inventory, "Programmed")?.0 == "True").then_some(inventory)
    })
    .await;
    // Not watched, so not counted: no summary that would claim zero policies.
    assert_eq!(inventory.status.unwrap().runtime_policies, None);
    let metrics = &leader.controller.metrics();
    assert_eq!(metrics.feature_enabled(FeatureGate::RuntimePolicies), 0);
    assert_eq!(metrics.feature_enabled(FeatureGate::KubernetesEvents), 1);
    assert_eq!(metrics.feature_enabled(FeatureGate::NodeAgentApi), 1);
    leader.stop().await;
}

/// With `RuntimePolicies=false` a policy that fails a GPU changes nothing:
/// the effective runtime is the profile's defaults and the policy's status
/// is never written. Switching the gate on (a restart) applies it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_runtime_policies_off_policies_are_neither_applied_nor_given_a_status() {
    let cluster = Cluster::start_sim().await;
    cluster.create_profile("shape", 1, 2).await;
    let node = cluster.create_node("node-a", "gated").await;
    let inventory = cluster.create_inventory("inv", "shape", 1, "gated").await;
    let rack = rack_name("inv", &inventory.uid().unwrap(), "compute", 0);
    cluster
        .create_policy(
            "fail-gpu-one",
            "inv",
            json!({"gpuIndexes": [1]}),
            json!({"deviceState": "Failed"}),
        )
        .await;
    let node_uid = node.uid().unwrap();
    let states = |controller: std::sync::Arc<mokka::controller::MokkaController>| {
        let node_uid = node_uid.clone();
        async move {
            let assignments = controller.assignments_for_node("node-a", &node_uid).ok()?;
            let runtime = controller.effective_runtime(assignments.first()?).ok()?;
            Some(
                runtime
                    .iter()
                    .map(|gpu| gpu.runtime.device_state)
                    .collect::<Vec<_>>(),
            )
        }
    };

    let off = cluster
        .start_leader_with("policies-off", with_gates("RuntimePolicies=false"))
        .await;
    bound_and_projected(&cluster, &rack, "node-a").await;
    eventually("the inventory to be Programmed", || async {
        let inventory = cluster.inventories().get("inv").await.unwrap();
        (condition(&inventory, "Programmed")?.0 == "True").then_some(())
    })
    .await;
    let runtime = eventually("the runtime to compile", || states(off.controller.clone())).await;
    assert_eq!(
        runtime,
        vec![Some(DeviceState::Healthy), Some(DeviceState::Healthy)]
    );
    // Status is written by the time the inventory is Programmed; a policy
    // status would have been written in the same passes.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let policy = cluster.policies().get("fail-gpu-one").await.unwrap();
    assert_eq!(policy_condition(&policy), None, "{:?}", policy.status);
    off.stop().await;

    let on = cluster.start_leader("policies-on").await;
    let runtime = eventually("the policy to fail GPU 1", || {
        let controller = on.controller.clone();
        async move {
            states(controller)
                .await
                .filter(|states| states[1] == Some(DeviceState::Failed))
        }
    })
    .await;
    assert_eq!(runtime[0], Some(DeviceState::Healthy));
    eventually("the policy to be Accepted", || async {
        let policy = cluster.policies().get("fail-gpu-one").await.ok()?;
        (policy_condition(&policy)?.1 == "Accepted").then_some(())
    })
    .await;
    on.stop().await;
}

/// Sets the rack count of `inv`'s one group.
async fn resize(cluster: &Cluster, count: i32) {
    cluster
        .inventories()
        .patch(
            "inv",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rackGroups": [{
                "id": "compute", "count": count, "profileRef": {"name": "shape"},
                "placement": {"nodeSelector": {"matchLabels": {"pool": "events"}}}
            }]}})),
        )
        .await
        .unwrap();
}

fn mokka_events(list: &[Event]) -> Vec<String> {
    list.iter()
        .filter(|event| event.reporting_controller.as_deref() == Some("mokka-controller"))
        .filter_map(|event| event.reason.clone())
        .collect()
}

/// With `KubernetesEvents=false` the controller creates racks, binds and
/// releases Nodes and writes no Event; with the gate on (the default) the
/// same kind of decision is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_kubernetes_events_off_decisions_are_made_but_no_event_is_written() {
    let cluster = Cluster::start_sim().await;
    cluster.create_profile("shape", 1, 1).await;
    cluster.create_node("node-a", "events").await;
    cluster.create_node("node-b", "events").await;
    let inventory = cluster.create_inventory("inv", "shape", 1, "events").await;
    let uid = inventory.uid().unwrap();
    let events: Api<Event> = Api::all(cluster.client.clone());

    let off = cluster
        .start_leader_with("events-off", with_gates("KubernetesEvents=false"))
        .await;
    assert_eq!(
        off.controller
            .metrics()
            .feature_enabled(FeatureGate::KubernetesEvents),
        0
    );
    bound_and_projected(&cluster, &rack_name("inv", &uid, "compute", 0), "node-a").await;
    // A second rack: another create, another bind.
    resize(&cluster, 2).await;
    bound_and_projected(&cluster, &rack_name("inv", &uid, "compute", 1), "node-b").await;
    assert!(off.controller.metrics().rack_writes_with_verb("create") >= 2);
    let list = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(mokka_events(&list), Vec::<String>::new());
    off.stop().await;

    let on = cluster.start_leader("events-on").await;
    resize(&cluster, 3).await;
    let reasons = eventually("a RackCreated event", || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        let reasons = mokka_events(&list);
        reasons
            .iter()
            .any(|reason| reason == "RackCreated")
            .then_some(reasons)
    })
    .await;
    assert!(!reasons.is_empty());
    on.stop().await;
}

/// A rack write that binds several Nodes records one `NodeBound` Event
/// naming all of them, not one Event per Node (a per-Node Event would be
/// folded into one series whose note keeps only the last Node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_rack_write_binding_three_nodes_records_one_node_bound_event_naming_all_three() {
    let cluster = Cluster::start_sim().await;
    cluster.create_profile("shape", 3, 1).await;
    for node in ["node-a", "node-b", "node-c"] {
        cluster.create_node(node, "bound-event").await;
    }
    let inventory = cluster
        .create_inventory("inv", "shape", 1, "bound-event")
        .await;
    let rack = rack_name("inv", &inventory.uid().unwrap(), "compute", 0);
    let leader = cluster.start_leader("bound-event").await;
    let events: Api<Event> = Api::all(cluster.client.clone());
    let bound = eventually("a NodeBound event", || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        let bound: Vec<Event> = list
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some("NodeBound"))
            .collect();
        (!bound.is_empty()).then_some(bound)
    })
    .await;
    assert_eq!(bound.len(), 1, "{bound:?}");
    let event = &bound[0];
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some(rack.as_str())
    );
    assert!(event.series.is_none(), "one write, one Event: {event:?}");
    let note = event.note.as_deref().unwrap_or_default();
    assert!(
        note.starts_with("Bound 3 Nodes to logical Nodes: "),
        "{note}"
    );
    for node in ["node-a", "node-b", "node-c"] {
        assert!(note.contains(node), "{note}");
    }
    leader.stop().await;
}
