//! Stored objects: the serialized JSON (served as is for get, list and watch,
//! so reads never re-encode) plus the few fields selectors need.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::resources::ResourceType;

/// `(namespace, name)`; the namespace is empty for cluster-scoped kinds.
/// Ordering matches the real server's list order (by storage key).
pub type ObjectKey = (String, String);

#[derive(Debug)]
pub struct StoredObject {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub rv: u64,
    pub json: Bytes,
    pub labels: BTreeMap<String, String>,
    /// Values of the kind's selectable fields, in `ResourceType::extra_fields` order.
    pub fields: Vec<String>,
    pub deleting: bool,
    pub has_finalizers: bool,
    /// `(owner uid, blockOwnerDeletion)` for each ownerReference.
    pub owners: Vec<(String, bool)>,
}

impl StoredObject {
    /// Builds the stored form; `value` must already carry the final metadata.
    pub fn from_value(rt: &ResourceType, value: &Value) -> Result<Self, serde_json::Error> {
        let json = Bytes::from(serde_json::to_vec(value)?);
        let meta = value.get("metadata");
        let text = |key: &str| {
            meta.and_then(|m| m.get(key))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let labels = meta
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let fields = rt
            .extra_fields
            .iter()
            .map(|path| field_value(value, path))
            .collect();
        let rv = text("resourceVersion").parse().unwrap_or(0);
        let owners = meta
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| {
                        let uid = r.get("uid")?.as_str()?.to_string();
                        let block =
                            r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true);
                        Some((uid, block))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(Self {
            namespace: text("namespace"),
            name: text("name"),
            uid: text("uid"),
            rv,
            json,
            labels,
            fields,
            deleting: meta.is_some_and(|m| m.get("deletionTimestamp").is_some()),
            has_finalizers: meta
                .and_then(|m| m.get("finalizers"))
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty()),
            owners,
        })
    }

    pub fn key(&self) -> ObjectKey {
        (self.namespace.clone(), self.name.clone())
    }

    /// Parses the stored JSON; it was produced by us, so failure means a bug.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// Looks up a selectable field's value, "" when unset.
    pub fn field<'a>(&'a self, rt: &ResourceType, path: &str) -> &'a str {
        match path {
            "metadata.name" => &self.name,
            "metadata.namespace" => &self.namespace,
            other => {
                // A view's fields are the stored kind's, under other names.
                let (fields, path) = match &rt.stored_as {
                    Some(stored) => (stored.storage_fields, (stored.field_in_storage)(other)),
                    None => (rt.extra_fields, other.to_string()),
                };
                fields
                    .iter()
                    .position(|f| *f == path)
                    .and_then(|i| self.fields.get(i))
                    .map(String::as_str)
                    .unwrap_or_default()
            }
        }
    }
}

/// Selectable fields of Go type bool: kube-apiserver renders an absent one
/// as its zero value, so `spec.unschedulable=false` matches a Node that
/// never set it (the Kubernetes e2e suite lists Nodes so).
const BOOLEAN_FIELDS: &[&str] = &["spec.unschedulable"];

/// A dotted path's value rendered as a field-selector string ("" when
/// absent, "false" for an absent bool).
fn field_value(value: &Value, path: &str) -> String {
    let mut cur = value;
    for part in path.split('.') {
        match cur.get(part) {
            Some(next) => cur = next,
            None if BOOLEAN_FIELDS.contains(&path) => return "false".into(),
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        // `source` on core events is an object; select on its component.
        Value::Object(m) => m
            .get("component")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// Mutable access to `metadata`, creating it when absent.
pub fn metadata_mut(value: &mut Value) -> Option<&mut Map<String, Value>> {
    let obj = value.as_object_mut()?;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    meta.as_object_mut()
}

pub fn meta_str<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get("metadata")?.get(key)?.as_str()
}

pub fn finalizers(value: &Value) -> Vec<String> {
    value
        .get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The days of `month` (1-12) in the proleptic Gregorian `year`; `None`
/// for a month out of range. Shared by the date formats the schemas check
/// and the protobuf encoder's time reader.
pub fn days_in_month(year: i64, month: i64) -> Option<i64> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => Some(31),
        4 | 6 | 9 | 11 => Some(30),
        2 if leap => Some(29),
        2 => Some(28),
        _ => None,
    }
}

/// What kind of JSON value this is, for error messages.
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Current time the way metav1.Time serializes it (second precision, UTC).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absent_bool_field_selects_as_false() {
        let node = serde_json::json!({"metadata": {"name": "n"}});
        assert_eq!(field_value(&node, "spec.unschedulable"), "false");
        let cordoned = serde_json::json!({"spec": {"unschedulable": true}});
        assert_eq!(field_value(&cordoned, "spec.unschedulable"), "true");
        assert_eq!(field_value(&node, "status.phase"), "");
    }
}
