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
