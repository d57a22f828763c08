//! CustomResourceDefinitions: create, discover, serve, use with a
//! `#[derive(CustomResource)]` type, and delete with everything they served.

use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::support::{raw, sim, status_of};

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.gpufleet.dev",
    version = "v1",
    kind = "Widget",
    namespaced
)]
#[kube(status = "WidgetStatus", shortname = "wd", category = "gpufleet")]
pub struct WidgetSpec {
    pub size: u32,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    pub ready: bool,
}

pub async fn install(client: &kube::Client) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Widget::crd())
        .await
        .expect("CRD created")
}

#[tokio::test]
async fn a_crd_is_established_and_its_kind_is_discoverable() {
    let sim = sim().await;
    let client = sim.client();
    let crd = install(&client).await;
    let conditions = crd.status.unwrap().conditions.unwrap();
    let established = conditions
        .iter()
        .find(|c| c.type_ == "Established")
        .unwrap();
    assert_eq!(established.status, "True");
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "NamesAccepted" && c.status == "True")
    );

    let (code, groups) = raw(&client, "GET", "/apis", "application/json", b"").await;
    assert_eq!(code, 200);
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.gpufleet.dev")
    );
    let (code, resources) = raw(
        &client,
        "GET",
        "/apis/example.gpufleet.dev/v1",
        "application/json",
        b"",
    )
    .await;
    assert_eq!(code, 200);
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["widgets", "widgets/status"]);
    assert_eq!(resources["resources"][0]["shortNames"], json!(["wd"]));
    assert_eq!(resources["resources"][0]["categories"], json!(["gpufleet"]));

    // kube's own discovery finds it too.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(
        discovery
            .groups()
            .any(|g| g.name() == "example.gpufleet.dev")
    );
}

#[tokio::test]
async fn custom_resources_get_generation_and_a_separate_status() {
    let sim = sim().await;
    let client = sim.client();
    install(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let mut w = Widget::new("w1", WidgetSpec { size: 1 });
    w.status = Some(WidgetStatus { ready: true });
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert!(
        created.status.is_none(),
        "status is dropped on create when the subresource is on"
    );
    assert_eq!(created.metadata.generation, Some(1));

    let statused = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert_eq!(statused.status.as_ref().map(|s| s.ready), Some(true));
    assert_eq!(statused.metadata.generation, Some(1));

    let respecced = widgets
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 3}, "status": {"ready": false}})),
        )
        .await
        .unwrap();
    assert_eq!(respecced.spec.size, 3);
    assert_eq!(respecced.metadata.generation, Some(2));
    assert_eq!(
        respecced.status.map(|s| s.ready),
        Some(true),
        "main-resource writes ignore status"
    );

    let status = status_of(
        widgets
            .patch(
                "w1",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"size": 4}})),
            )
            .await,
    );
    assert_eq!(
        status.code, 415,
        "strategic merge patch is refused for custom resources"
    );
}

#[tokio::test]
async fn deleting_a_crd_removes_its_kind_and_objects() {
    let sim = sim().await;
    let client = sim.client();
    install(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    widgets
        .create(
            &PostParams::default(),
            &Widget::new("doomed", WidgetSpec { size: 1 }),
        )
        .await
        .unwrap();
    let rv = sim.resource_version().to_string();
    let watch = widgets
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap();

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("widgets.example.gpufleet.dev", &DeleteParams::default())
        .await
        .unwrap();

    let events: Vec<_> =
        tokio::time::timeout(Duration::from_secs(5), watch.try_collect::<Vec<_>>())
            .await
            .expect("the watch ends when its kind goes away")
            .unwrap();
    assert!(
        matches!(events.as_slice(), [WatchEvent::Deleted(w)] if w.metadata.name.as_deref() == Some("doomed"))
    );
    let (code, _) = raw(
        &client,
        "GET",
        "/apis/example.gpufleet.dev/v1/namespaces/default/widgets",
        "application/json",
        b"",
    )
    .await;
    assert_eq!(code, 404);

    // Re-creating the CRD serves an empty kind again.
    install(&client).await;
    assert!(
        widgets
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn invalid_crds_are_rejected() {
    let sim = sim().await;
    let crds: Api<CustomResourceDefinition> = Api::all(sim.client());
    let mut crd = Widget::crd();
    crd.metadata.name = Some("wrong.example.gpufleet.dev".into());
    let status = status_of(crds.create(&PostParams::default(), &crd).await);
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("spec.names.plural+\".\"+spec.group"),
        "{}",
        status.message
    );
}
