//! Garbage collection through ownerReferences.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::json;

use crate::support::{sim, status_of};

fn owned_by(owner: &ConfigMap, name: &str, block: bool) -> ConfigMap {
    let mut reference = owner.controller_owner_ref(&()).unwrap();
    reference.block_owner_deletion = Some(block);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.owner_references = Some(vec![reference]);
    cm
}

async fn owner(api: &Api<ConfigMap>, name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    api.create(&PostParams::default(), &cm).await.unwrap()
}

#[tokio::test]
async fn background_deletion_collects_dependents_across_kinds() {
    let sim = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let secrets: Api<Secret> = Api::default_namespaced(sim.client());
    let root = owner(&cms, "root").await;
    let child = cms
        .create(&PostParams::default(), &owned_by(&root, "child", false))
        .await
        .unwrap();
    let mut grandchild = Secret::default();
    grandchild.metadata.name = Some("grandchild".into());
    grandchild.metadata.owner_references = Some(vec![child.controller_owner_ref(&()).unwrap()]);
    secrets
        .create(&PostParams::default(), &grandchild)
        .await
        .unwrap();

    cms.delete("root", &DeleteParams::default()).await.unwrap();
    assert_eq!(status_of(cms.get("child").await).code, 404);
    assert_eq!(status_of(secrets.get("grandchild").await).code, 404);
}

#[tokio::test]
async fn a_dependent_with_another_live_owner_only_loses_the_reference() {
    let sim = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let a = owner(&cms, "a").await;
    let b = owner(&cms, "b").await;
    let mut shared = owned_by(&a, "shared", false);
    let mut second = b.controller_owner_ref(&()).unwrap();
    second.controller = Some(false);
    shared
        .metadata
        .owner_references
        .as_mut()
        .unwrap()
        .push(second);
    cms.create(&PostParams::default(), &shared).await.unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let left = cms.get("shared").await.unwrap();
    let owners: Vec<_> = left
        .metadata
        .owner_references
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(owners, vec!["b"]);
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents_without_the_reference() {
    let sim = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let root = owner(&cms, "root").await;
    cms.create(&PostParams::default(), &owned_by(&root, "child", false))
        .await
        .unwrap();
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    cms.delete("root", &dp).await.unwrap();
    assert_eq!(status_of(cms.get("root").await).code, 404);
    let child = cms.get("child").await.unwrap();
    assert!(child.metadata.owner_references.is_none());
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let sim = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let root = owner(&cms, "root").await;
    let mut blocker = owned_by(&root, "blocker", true);
    blocker.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &blocker).await.unwrap();
    cms.create(&PostParams::default(), &owned_by(&root, "plain", false))
        .await
        .unwrap();

    cms.delete("root", &DeleteParams::foreground())
        .await
        .unwrap();
    let waiting = cms.get("root").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        waiting.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    assert_eq!(status_of(cms.get("plain").await).code, 404);
    assert!(
        cms.get("blocker")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );

    cms.patch(
        "blocker",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status_of(cms.get("blocker").await).code, 404);
    assert_eq!(
        status_of(cms.get("root").await).code,
        404,
        "the owner goes once nothing blocks it"
    );
}

/// A custom resource owns a pod that runs to completion on a simulated
/// node; deleting the owner collects the pod (through the kubelet, since
/// pods on nodes are deleted gracefully).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_pod_is_collected_when_its_custom_resource_owner_is_deleted() {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::{Node, Pod};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject};
    use kube::core::GroupVersionKind;

    let sim = sim().await;
    let client = sim.client();
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "trainjobs.example.gpufleet.dev"},
        "spec": {
            "group": "example.gpufleet.dev", "scope": "Namespaced",
            "names": {"plural": "trainjobs", "singular": "trainjob", "kind": "TrainJob"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-1"}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("example.gpufleet.dev", "v1", "TrainJob");
    let jobs: Api<DynamicObject> =
        Api::default_namespaced_with(client.clone(), &ApiResource::from_gvk(&gvk));
    let job: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.gpufleet.dev/v1", "kind": "TrainJob", "metadata": {"name": "job-1"}
    }))
    .unwrap();
    let job = jobs.create(&PostParams::default(), &job).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": "job-1-worker-0",
            "annotations": {"kube-sim.gpufleet.dev/run-seconds": "0.2"},
            "ownerReferences": [{"apiVersion": "example.gpufleet.dev/v1", "kind": "TrainJob", "name": "job-1",
                "uid": job.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "trainer", "image": "trainer:1"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let phase = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default()
    };
    let mut finished = false;
    for _ in 0..200 {
        if phase(&pods.get("job-1-worker-0").await.unwrap()) == "Succeeded" {
            finished = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(finished, "the pod ran to Succeeded on the simulated node");

    jobs.delete("job-1", &DeleteParams::default())
        .await
        .unwrap();
    for _ in 0..200 {
        match pods.get("job-1-worker-0").await {
            Err(kube::Error::Api(status)) if status.code == 404 => return,
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    panic!("the pod was not collected after its owner was deleted");
}

#[tokio::test]
async fn a_dependent_whose_owners_do_not_exist_is_collected_and_one_live_owner_keeps_it() {
    let sim = sim().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let live = owner(&cms, "live").await;
    let mut gone = live.controller_owner_ref(&()).unwrap();
    gone.name = "never-existed".into();
    gone.uid = "00000000-0000-0000-0000-00000000dead".into();
    gone.controller = None;

    let mut dangling = ConfigMap::default();
    dangling.metadata.name = Some("dangling".into());
    dangling.metadata.owner_references = Some(vec![gone.clone()]);
    cms.create(&PostParams::default(), &dangling).await.unwrap();
    assert!(cms.get_opt("dangling").await.unwrap().is_none());

    let mut kept = ConfigMap::default();
    kept.metadata.name = Some("kept".into());
    let mut live_ref = live.controller_owner_ref(&()).unwrap();
    live_ref.controller = None;
    kept.metadata.owner_references = Some(vec![gone, live_ref]);
    cms.create(&PostParams::default(), &kept).await.unwrap();
    assert!(cms.get_opt("kept").await.unwrap().is_some());

    // A dry run creates nothing and collects nothing.
    let mut dry = dangling.clone();
    dry.metadata.name = Some("dry".into());
    let created = cms
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &dry,
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("dry"));
}
