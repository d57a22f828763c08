//! Kubernetes Events in one call, over kube-runtime's `events::Recorder`.
//!
//! The recorder writes `events.k8s.io/v1` Events and turns repeats of the same event
//! into a series (one PATCH instead of a new object).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishing an event failed.
#[derive(Debug, thiserror::Error)]
#[error("publishing {reason} event for {kind}/{name} failed: {source}")]
pub struct EventError {
    /// The event's reason.
    pub reason: String,
    /// The regarding object's kind.
    pub kind: String,
    /// The regarding object's name.
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// Emits Events on behalf of one controller. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
}

impl EventSink {
    /// Events reported by `controller` (for example `gpufleet-mokka`), from `instance`
    /// (usually the pod name; `None` uses the controller name).
    pub fn new(
        client: kube::Client,
        controller: impl Into<String>,
        instance: Option<String>,
    ) -> Self {
        let reporter = Reporter {
            controller: controller.into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// A `Normal` event about `object`.
    pub async fn normal<K>(
        &self,
        object: &K,
        reason: &str,
        action: &str,
        note: Option<String>,
    ) -> Result<(), EventError>
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            &object.object_ref(&()),
            EventType::Normal,
            reason,
            action,
            note,
        )
        .await
    }

    /// A `Warning` event about `object`.
    pub async fn warning<K>(
        &self,
        object: &K,
        reason: &str,
        action: &str,
        note: Option<String>,
    ) -> Result<(), EventError>
    where
        K: Resource<DynamicType = ()>,
    {
        self.publish(
            &object.object_ref(&()),
            EventType::Warning,
            reason,
            action,
            note,
        )
        .await
    }

    /// An event about the object `regarding` points at.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: Option<String>,
    ) -> Result<(), EventError> {
        let event = Event {
            type_: event_type,
            reason: reason.to_string(),
            note,
            action: action.to_string(),
            secondary: None,
        };
        self.recorder
            .publish(&event, regarding)
            .await
            .map_err(|source| EventError {
                reason: reason.to_string(),
                kind: regarding.kind.clone().unwrap_or_default(),
                name: regarding.name.clone().unwrap_or_default(),
                source,
            })
    }

    /// Like [`EventSink::publish`], but logs a failure instead of returning it: an event
    /// that cannot be written must not fail the reconcile that caused it.
    pub async fn publish_or_log(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: Option<String>,
    ) {
        if let Err(error) = self
            .publish(regarding, event_type, reason, action, note)
            .await
        {
            tracing::warn!(%error, "event not recorded");
        }
    }
}
