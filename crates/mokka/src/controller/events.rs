//! Kubernetes Events of the controller, behind the `KubernetesEvents` gate:
//! with the gate off nothing is written, as upstream (which records none),
//! so an install without `events` RBAC sees no refused writes.

use controller_kit::EventSink;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

/// Publishes Events when the gate is on; otherwise does nothing.
pub(crate) struct Events {
    sink: Option<EventSink>,
}

impl Events {
    pub fn new(sink: EventSink, enabled: bool) -> Self {
        Self {
            sink: enabled.then_some(sink),
        }
    }

    /// See [`EventSink::publish_or_log`]: a failed write never fails the reconcile.
    pub async fn publish_or_log(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: Option<String>,
    ) {
        if let Some(sink) = &self.sink {
            sink.publish_or_log(regarding, event_type, reason, action, note)
                .await;
        }
    }

    /// See [`EventSink::publish_or_log_by_note`]: Events with different
    /// notes are separate objects, so each names what it is about.
    pub async fn publish_or_log_by_note(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if let Some(sink) = &self.sink {
            sink.publish_or_log_by_note(regarding, event_type, reason, action, note)
                .await;
        }
    }
}
