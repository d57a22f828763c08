//! `events.k8s.io/v1` Events are core/v1 Events seen through other field
//! names, as in kube-apiserver, where both APIs read and write one stored
//! object. Whatever a controller records through one API is listed,
//! watched and patched through the other, so `kubectl get events` and
//! `kubectl describe` show the events kube-runtime's recorder writes.
//!
//! The mapping is the apiserver's conversion: `regarding` is
//! `involvedObject`, `note` is `message`, `reportingController` is
//! `reportingComponent`, and the `deprecated*` fields are the core ones of
//! the same name without the prefix. Everything else (metadata, `reason`,
//! `type`, `eventTime`, `series`, `action`, `related`,
//! `reportingInstance`) is the same field.

use serde_json::{Map, Value};

use crate::error::Cause;

/// (events.k8s.io/v1 name, core/v1 name) of every renamed field.
const RENAMED: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// A stored core/v1 Event as events.k8s.io/v1 shows it.
pub fn to_events_v1(mut core: Value) -> Value {
    if let Some(map) = core.as_object_mut() {
        rename(map, false);
        map.insert("apiVersion".into(), Value::from("events.k8s.io/v1"));
    }
    core
}

/// An events.k8s.io/v1 Event (body, patch result or apply configuration)
/// in the stored core/v1 form.
pub fn from_events_v1(mut view: Value) -> Value {
    if let Some(map) = view.as_object_mut() {
        rename(map, true);
        map.insert("apiVersion".into(), Value::from("v1"));
    }
    view
}

/// Renames every mapped field, view names to stored ones when `to_stored`.
fn rename(map: &mut Map<String, Value>, to_stored: bool) {
    for (view, stored) in RENAMED {
        let (from, to) = if to_stored {
            (view, stored)
        } else {
            (stored, view)
        };
        // A field already named for the target form stays out of the way:
        // the renamed one is what the client sent for this API.
        map.remove(to);
        if let Some(value) = map.remove(from) {
            map.insert(to.to_string(), value);
        }
    }
}

/// Fields (core names) an Event written through events.k8s.io/v1 may not
/// change, in the order kube-apiserver checks them; only the series moves
/// on (the deprecated count and timestamps are the core API's to update).
const IMMUTABLE: [&str; 13] = [
    "involvedObject",
    "reason",
    "message",
    "source",
    "firstTimestamp",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
    "type",
    "eventTime",
    "count",
    "lastTimestamp",
];

/// The rules kube-apiserver applies to writes through events.k8s.io/v1
/// (core/v1 writes keep the legacy leniency): a new Event needs an
/// `eventTime`; an update keeps what the Event said. `new` and `old` are in
/// the stored form, so causes name the core fields, as the real server's do.
pub fn check_events_v1_write(new: &Value, old: Option<&Value>) -> Vec<Cause> {
    let Some(old) = old else {
        let has_time = new
            .get("eventTime")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty());
        return if has_time {
            Vec::new()
        } else {
            vec![Cause::required("eventTime", "")]
        };
    };
    IMMUTABLE
        .iter()
        .filter(|field| new.get(**field) != old.get(**field))
        .map(|field| {
            Cause::invalid(
                *field,
                new.get(*field).unwrap_or(&Value::Null),
                "field is immutable",
            )
        })
        .collect()
}

/// An events.k8s.io/v1 field selector path in the stored form
/// (`regarding.name` is `involvedObject.name`).
pub fn field_in_storage(path: &str) -> String {
    for (view, stored) in RENAMED {
        if path == view {
            return stored.to_string();
        }
        if let Some(rest) = path.strip_prefix(view).and_then(|r| r.strip_prefix('.')) {
            return format!("{stored}.{rest}");
        }
    }
    path.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn core_event() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "n.1", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "n"},
            "message": "GPU inventory changed", "reason": "GpuInventoryChanged",
            "type": "Normal", "reportingComponent": "gpuid", "reportingInstance": "pod-1",
            "source": {"component": "gpuid"}, "count": 2,
            "firstTimestamp": "2026-12-01T10:00:00Z", "lastTimestamp": "2026-12-01T10:05:00Z",
            "eventTime": "2026-12-01T10:00:00.000000Z", "action": "Collect",
        })
    }

    #[test]
    fn a_core_event_reads_with_the_events_v1_names() {
        let view = to_events_v1(core_event());
        assert_eq!(
            view,
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "n.1", "namespace": "default"},
                "regarding": {"kind": "Node", "name": "n"},
                "note": "GPU inventory changed", "reason": "GpuInventoryChanged",
                "type": "Normal", "reportingController": "gpuid", "reportingInstance": "pod-1",
                "deprecatedSource": {"component": "gpuid"}, "deprecatedCount": 2,
                "deprecatedFirstTimestamp": "2026-12-01T10:00:00Z",
                "deprecatedLastTimestamp": "2026-12-01T10:05:00Z",
                "eventTime": "2026-12-01T10:00:00.000000Z", "action": "Collect",
            })
        );
    }

    #[test]
    fn the_two_forms_convert_back_and_forth_without_loss() {
        assert_eq!(from_events_v1(to_events_v1(core_event())), core_event());
    }

    #[test]
    fn an_events_v1_event_needs_an_event_time_and_keeps_its_message() {
        let mut new = core_event();
        assert!(check_events_v1_write(&new, None).is_empty());
        new.as_object_mut().unwrap().remove("eventTime");
        assert_eq!(
            check_events_v1_write(&new, None)
                .iter()
                .map(Cause::line)
                .collect::<Vec<_>>(),
            ["eventTime: Required value"]
        );
        let old = core_event();
        let mut repeated = core_event();
        repeated["series"] = json!({"count": 3, "lastObservedTime": "2026-12-01T10:09:00.000000Z"});
        assert!(check_events_v1_write(&repeated, Some(&old)).is_empty());
        repeated["message"] = json!("changed");
        assert_eq!(
            check_events_v1_write(&repeated, Some(&old))
                .iter()
                .map(Cause::line)
                .collect::<Vec<_>>(),
            ["message: Invalid value: \"changed\": field is immutable"]
        );
    }

    #[test]
    fn field_selector_paths_are_translated_to_the_stored_names() {
        assert_eq!(field_in_storage("regarding.name"), "involvedObject.name");
        assert_eq!(field_in_storage("regarding"), "involvedObject");
        assert_eq!(
            field_in_storage("reportingController"),
            "reportingComponent"
        );
        assert_eq!(field_in_storage("reason"), "reason");
        assert_eq!(field_in_storage("metadata.name"), "metadata.name");
    }
}
