//! kube-runtime helpers that lean on specific server behaviour: the
//! finalizer helper's JSON-patch `test` ops, the events Recorder's
//! create-then-merge-patch, and Lease replace with resourceVersion.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use serde_json::json;

use crate::support::{create_configmap, sim, status_of};

#[tokio::test]
async fn the_kube_runtime_finalizer_helper_adds_and_removes_its_finalizer() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "guarded").await;
    let name = "example.com/cleanup";
    let run = |obj: ConfigMap| {
        let api = api.clone();
        async move {
            finalizer(&api, name, Arc::new(obj), |event| async move {
                match event {
                    FinalizerEvent::Apply(_) | FinalizerEvent::Cleanup(_) => {
                        Ok::<_, std::convert::Infallible>(
                            kube::runtime::controller::Action::await_change(),
                        )
                    }
                }
            })
            .await
        }
    };
    run(api.get("guarded").await.unwrap()).await.unwrap();
    let with = api.get("guarded").await.unwrap();
    assert_eq!(with.metadata.finalizers, Some(vec![name.to_string()]));
    // Applying again leaves exactly one finalizer.
    run(with).await.unwrap();
    assert_eq!(
        api.get("guarded")
            .await
            .unwrap()
            .metadata
            .finalizers
            .unwrap()
            .len(),
        1
    );

    api.delete("guarded", &DeleteParams::default())
        .await
        .unwrap();
    let deleting = api.get("guarded").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    run(deleting).await.unwrap();
    assert_eq!(status_of(api.get("guarded").await).code, 404);
}

#[tokio::test]
async fn the_events_recorder_creates_then_patches_a_series() {
    let sim = sim().await;
    let client = sim.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = create_configmap(&cms, "subject").await;
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gpufleet-test".into(),
            instance: None,
        },
    );
    let event = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("all good".into()),
        action: "Sync".into(),
        secondary: None,
    };
    let reference = cm.object_ref(&());
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events: Api<EventV1> = Api::default_namespaced(client);
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.items.len(),
        1,
        "the repeat is recorded as a series on the same Event"
    );
    let recorded = &list.items[0];
    assert_eq!(recorded.reason.as_deref(), Some("Synced"));
    assert_eq!(recorded.series.as_ref().map(|s| s.count), Some(2));
}

#[tokio::test]
async fn lease_replace_with_a_stale_version_loses() {
    let sim = sim().await;
    let leases: Api<Lease> = Api::namespaced(sim.client(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}
    }))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut by_b = created.clone();
    by_b.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases
        .replace("leader", &PostParams::default(), &by_b)
        .await
        .unwrap();
    let mut by_c = created;
    by_c.spec.as_mut().unwrap().holder_identity = Some("c".into());
    assert_eq!(
        status_of(
            leases
                .replace("leader", &PostParams::default(), &by_c)
                .await
        )
        .code,
        409
    );
    let now = leases.get("leader").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("b"));
    tokio::time::sleep(Duration::from_millis(1)).await;
}
