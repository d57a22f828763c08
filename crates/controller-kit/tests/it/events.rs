//! EventSink writes events.k8s.io/v1 Events through kube-runtime's recorder.

use controller_kit::EventSink;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_records_a_kubernetes_event_about_an_object() {
    let sim = start_sim().await;
    create_config_map(&sim.client(), "inventory-a").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(sim.client(), NAMESPACE);
    let object = config_maps.get("inventory-a").await.unwrap();

    let sink = EventSink::new(sim.client(), "gpufleet-test", Some("replica-a".to_string()));
    sink.warning(
        &object,
        "CapacityExceeded",
        "Reconcile",
        Some("3 racks requested, 2 fit".to_string()),
    )
    .await
    .unwrap();

    let events: Api<Event> = Api::namespaced(sim.client(), NAMESPACE);
    let listed = events.list(&ListParams::default()).await.unwrap();
    let event = listed
        .items
        .iter()
        .find(|event| event.reason.as_deref() == Some("CapacityExceeded"))
        .expect("the event was written");
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.note.as_deref(), Some("3 racks requested, 2 fit"));
    assert_eq!(event.reporting_controller.as_deref(), Some("gpufleet-test"));
    assert_eq!(event.reporting_instance.as_deref(), Some("replica-a"));
    let regarding = event.regarding.as_ref().unwrap();
    assert_eq!(regarding.name.as_deref(), Some("inventory-a"));
    assert_eq!(regarding.uid, object.metadata.uid);
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_note_a_different_note_is_a_new_event_and_the_same_note_a_series() {
    let sim = start_sim().await;
    create_config_map(&sim.client(), "rack-a").await;
    let config_maps: Api<ConfigMap> = Api::namespaced(sim.client(), NAMESPACE);
    let object = config_maps.get("rack-a").await.unwrap();
    let regarding = kube::Resource::object_ref(&object, &());
    let sink = EventSink::new(sim.client(), "gpufleet-test", None);
    for note in ["Bound Node a", "Bound Node b", "Bound Node b"] {
        sink.publish_or_log_by_note(
            &regarding,
            kube::runtime::events::EventType::Normal,
            "NodeBound",
            "Bind",
            note.to_string(),
        )
        .await;
    }
    let events: Api<Event> = Api::namespaced(sim.client(), NAMESPACE);
    let mut written: Vec<(String, i32)> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| event.reason.as_deref() == Some("NodeBound"))
        .map(|event| {
            (
                event.note.unwrap_or_default(),
                event.series.map_or(1, |series| series.count),
            )
        })
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            ("Bound Node a".to_string(), 1),
            ("Bound Node b".to_string(), 2)
        ]
    );
    sim.shutdown().await;
}
