//! core/v1 and events.k8s.io/v1 Events are one store seen through two APIs,
//! as on kube-apiserver: what kube-runtime's recorder writes through
//! events.k8s.io is listed, selected and watched through core/v1 (which
//! `kubectl get events` and `kubectl describe` read), and the other way
//! round.

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ObjectReference};
use k8s_openapi::api::events::v1::Event as EventsV1;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::json;

use crate::support::sim;

fn node_reference(node: &Node) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_recorded_through_events_v1_is_listed_and_selected_through_core_v1() {
    let sim = sim().await;
    let client = sim.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "gpu-node-1"}})).unwrap();
    let node = nodes.create(&PostParams::default(), &node).await.unwrap();

    let reporter = Reporter {
        controller: "gpuid".into(),
        instance: Some("collector-0".into()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "GpuInventoryChanged".into(),
                note: Some("2 GPUs added".into()),
                action: "Collect".into(),
                secondary: None,
            },
            &node_reference(&node),
        )
        .await
        .unwrap();

    // kubectl describe node asks core/v1 with an involvedObject selector.
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let selected = core
        .list(
            &ListParams::default()
                .fields("involvedObject.kind=Node,involvedObject.name=gpu-node-1"),
        )
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1, "{selected:?}");
    let event = &selected.items[0];
    assert_eq!(event.reason.as_deref(), Some("GpuInventoryChanged"));
    assert_eq!(event.message.as_deref(), Some("2 GPUs added"));
    assert_eq!(event.reporting_component.as_deref(), Some("gpuid"));
    assert_eq!(event.involved_object.name.as_deref(), Some("gpu-node-1"));
    assert_eq!(event.involved_object.uid, node.metadata.uid);

    let other = core
        .list(&ListParams::default().fields("involvedObject.name=another-node"))
        .await
        .unwrap();
    assert!(other.items.is_empty());

    // The same object through events.k8s.io, selected by its own names.
    let v1: Api<EventsV1> = Api::namespaced(client.clone(), "default");
    let same = v1
        .list(&ListParams::default().fields("regarding.name=gpu-node-1"))
        .await
        .unwrap();
    assert_eq!(same.items.len(), 1);
    assert_eq!(same.items[0].metadata.uid, event.metadata.uid);
    assert_eq!(same.items[0].note.as_deref(), Some("2 GPUs added"));
    assert_eq!(same.items[0].reporting_controller.as_deref(), Some("gpuid"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_event_is_watched_patched_and_deleted_through_events_v1() {
    let sim = sim().await;
    let client = sim.client();
    let v1: Api<EventsV1> = Api::namespaced(client.clone(), "default");
    let mut stream = v1
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();

    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let created: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "pod-a.1"},
        "involvedObject": {"kind": "Pod", "name": "pod-a", "namespace": "default"},
        "reason": "Scheduled", "message": "assigned to node-1", "type": "Normal",
        "source": {"component": "default-scheduler"}, "count": 1,
    }))
    .unwrap();
    let created = core.create(&PostParams::default(), &created).await.unwrap();

    let seen = loop {
        match stream.next().await {
            Some(Ok(WatchEvent::Added(event))) => break event,
            Some(Ok(WatchEvent::Bookmark(_))) => continue,
            other => panic!("expected the ADDED event, got {other:?}"),
        }
    };
    assert_eq!(seen.metadata.name.as_deref(), Some("pod-a.1"));
    assert_eq!(
        seen.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("pod-a")
    );
    assert_eq!(seen.note.as_deref(), Some("assigned to node-1"));
    assert_eq!(seen.deprecated_count, Some(1));
    assert_eq!(
        seen.metadata.resource_version,
        created.metadata.resource_version
    );

    // Through events.k8s.io an Event only moves its series on; what it
    // said is immutable there (the core API keeps the legacy leniency).
    let refused = v1
        .patch(
            "pod-a.1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"note": "assigned to node-2"})),
        )
        .await;
    let status = crate::support::status_of(refused);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status
            .message
            .contains("message: Invalid value: \"assigned to node-2\": field is immutable"),
        "{}",
        status.message
    );
    let patched = v1
        .patch(
            "pod-a.1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"series": {"count": 2, "lastObservedTime": "2026-12-01T10:06:00.000000Z"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(patched.series.as_ref().map(|s| s.count), Some(2));
    let read = core.get("pod-a.1").await.unwrap();
    assert_eq!(read.message.as_deref(), Some("assigned to node-1"));
    assert_eq!(read.series.as_ref().and_then(|s| s.count), Some(2));

    v1.delete("pod-a.1", &Default::default()).await.unwrap();
    assert!(core.get_opt("pod-a.1").await.unwrap().is_none());
}
