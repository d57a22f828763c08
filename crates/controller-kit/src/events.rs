//! Kubernetes Events in one call, over kube-runtime's `events::Recorder`.
//!
//! The recorder writes `events.k8s.io/v1` Events and turns repeats of the same event
//! into a series (one PATCH instead of a new object).

use std::collections::HashMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// How long a written Event stays the head of its series (kube-runtime's
/// recorder uses the same).
const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);

/// What makes two Events one series when their note counts too:
/// type, action, reason, the regarding object, the note.
type NotedKey = (String, String, String, String, String);

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

impl EventError {
    fn new(regarding: &ObjectReference, reason: &str, source: kube::Error) -> Self {
        EventError {
            reason: reason.to_string(),
            kind: regarding.kind.clone().unwrap_or_default(),
            name: regarding.name.clone().unwrap_or_default(),
            source,
        }
    }
}

/// Emits Events on behalf of one controller. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
    client: kube::Client,
    reporter: Reporter,
    /// The series of [`EventSink::publish_or_log_by_note`], by note too.
    noted: Arc<parking_lot::Mutex<HashMap<NotedKey, KubeEvent>>>,
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
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
            noted: Arc::default(),
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
            .map_err(|source| EventError::new(regarding, reason, source))
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

    /// Like [`EventSink::publish_or_log`], but repeats fold into a series
    /// only when their note is the same too, as client-go's events library
    /// keys them. kube-runtime's recorder leaves the note out of its key, so
    /// a second Event with another note only raised the first one's count
    /// and kept the first note: use this where each note names what that
    /// Event is about (the Nodes a rack write bound).
    pub async fn publish_or_log_by_note(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        if let Err(source) = self
            .publish_by_note(regarding, event_type, reason, action, note)
            .await
        {
            let error = EventError::new(regarding, reason, source);
            tracing::warn!(%error, "event not recorded");
        }
    }

    async fn publish_by_note(
        &self,
        regarding: &ObjectReference,
        event_type: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let type_name = match event_type {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let key: NotedKey = (
            type_name.to_string(),
            action.to_string(),
            reason.to_string(),
            format!(
                "{}/{}/{}/{}",
                regarding.kind.as_deref().unwrap_or_default(),
                regarding.namespace.as_deref().unwrap_or_default(),
                regarding.name.as_deref().unwrap_or_default(),
                regarding.uid.as_deref().unwrap_or_default()
            ),
            note.clone(),
        );
        let now = Timestamp::now();
        let head = {
            let mut noted = self.noted.lock();
            noted.retain(|_, event| {
                let last = event
                    .series
                    .as_ref()
                    .map(|series| series.last_observed_time.0)
                    .or(event.event_time.as_ref().map(|time| time.0));
                last.is_none_or(|last| last + SERIES_TTL > now)
            });
            noted.get(&key).cloned()
        };
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<KubeEvent> = Api::namespaced(self.client.clone(), namespace);
        let written = match head {
            Some(mut event) => {
                let series = EventSeries {
                    count: event.series.as_ref().map_or(2, |series| series.count + 1),
                    last_observed_time: MicroTime(now),
                };
                let change = KubeEvent {
                    series: Some(series.clone()),
                    ..KubeEvent::default()
                };
                let name = event.metadata.name.clone().unwrap_or_default();
                events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&change))
                    .await?;
                event.series = Some(series);
                event
            }
            None => {
                let event = KubeEvent {
                    action: Some(action.to_string()),
                    reason: Some(reason.to_string()),
                    event_time: Some(MicroTime(now)),
                    regarding: Some(regarding.clone()),
                    note: Some(note),
                    metadata: ObjectMeta {
                        namespace: regarding.namespace.clone(),
                        name: Some(format!(
                            "{}.{:x}",
                            regarding
                                .name
                                .as_deref()
                                .unwrap_or(&self.reporter.controller),
                            now.as_nanosecond()
                        )),
                        ..ObjectMeta::default()
                    },
                    reporting_controller: Some(self.reporter.controller.clone()),
                    reporting_instance: Some(
                        self.reporter
                            .instance
                            .clone()
                            .unwrap_or_else(|| self.reporter.controller.clone()),
                    ),
                    type_: Some(type_name.to_string()),
                    ..KubeEvent::default()
                };
                events.create(&PostParams::default(), &event).await?
            }
        };
        self.noted.lock().insert(key, written);
        Ok(())
    }
}
