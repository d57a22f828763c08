//! `metadata.managedFields` entries: who owns which fields, and how.

use serde_json::{Map, Value};

use super::fields::{FieldSet, FieldsError};

/// How a manager came to own its fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    /// Server-side apply: the fields are the manager's declared intent.
    Apply,
    /// Any other write (create, update, patch): the fields it changed.
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Errors reading `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManagedFieldsError {
    #[error("metadata.managedFields must be a list of objects")]
    NotAList,
    #[error("metadata.managedFields[{index}].{field}: {problem}")]
    BadEntry {
        index: usize,
        field: &'static str,
        problem: String,
    },
    #[error("metadata.managedFields[{index}].fieldsV1: {source}")]
    BadFields { index: usize, source: FieldsError },
}

/// One entry of `metadata.managedFields`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedFieldsEntry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    /// RFC 3339 time of the manager's last change, as the caller wrote it.
    pub time: Option<String>,
    pub fields: FieldSet,
    /// `None` for the main resource, `Some("status")` for `/status`.
    pub subresource: Option<String>,
}

impl ManagedFieldsEntry {
    /// Whether this entry belongs to the given writer. Appliers keep one
    /// entry whatever apiVersion they use; updaters get one per apiVersion.
    pub fn belongs_to(
        &self,
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
            && (operation == Operation::Apply || self.api_version == api_version)
    }

    /// The manager identity the server sorts conflicts by: the entry as
    /// JSON without time and fields, and without apiVersion for appliers.
    pub fn identity(&self) -> String {
        let quote = |s: &str| Value::String(s.to_string()).to_string();
        let mut out = format!(
            "{{\"manager\":{},\"operation\":{}",
            quote(&self.manager),
            quote(self.operation.as_str())
        );
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            out.push_str(&format!(",\"apiVersion\":{}", quote(&self.api_version)));
        }
        if let Some(subresource) = &self.subresource {
            out.push_str(&format!(",\"subresource\":{}", quote(subresource)));
        }
        out.push('}');
        out
    }

    /// The manager as conflict messages print it: `"kubectl"`,
    /// `"m" with subresource "status"`, `"m" using v1`.
    pub fn describe(&self) -> String {
        let quote = |s: &str| Value::String(s.to_string()).to_string();
        let mut out = quote(&self.manager);
        if let Some(subresource) = &self.subresource {
            out.push_str(&format!(" with subresource {}", quote(subresource)));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("manager".into(), Value::String(self.manager.clone()));
        out.insert(
            "operation".into(),
            Value::String(self.operation.as_str().into()),
        );
        out.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(time) = &self.time {
            out.insert("time".into(), Value::String(time.clone()));
        }
        out.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        out.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(subresource) = &self.subresource {
            out.insert("subresource".into(), Value::String(subresource.clone()));
        }
        Value::Object(out)
    }

    pub fn from_json(index: usize, value: &Value) -> Result<Self, ManagedFieldsError> {
        let entry = value.as_object().ok_or(ManagedFieldsError::NotAList)?;
        let text = |field: &'static str| -> Result<Option<String>, ManagedFieldsError> {
            match entry.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(ManagedFieldsError::BadEntry {
                    index,
                    field,
                    problem: "must be a string".into(),
                }),
            }
        };
        let operation = match text("operation")?.as_deref() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            other => {
                return Err(ManagedFieldsError::BadEntry {
                    index,
                    field: "operation",
                    problem: format!("must be `Apply` or `Update`, not {other:?}"),
                });
            }
        };
        match text("fieldsType")?.as_deref() {
            None | Some("FieldsV1") => {}
            Some(other) => {
                return Err(ManagedFieldsError::BadEntry {
                    index,
                    field: "fieldsType",
                    problem: format!("must be `FieldsV1`, not {other:?}"),
                });
            }
        }
        let fields = match entry.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(fields) => FieldSet::from_fields_v1(fields)
                .map_err(|source| ManagedFieldsError::BadFields { index, source })?,
        };
        Ok(ManagedFieldsEntry {
            manager: text("manager")?.unwrap_or_default(),
            operation,
            api_version: text("apiVersion")?.unwrap_or_default(),
            time: text("time")?,
            fields,
            subresource: text("subresource")?.filter(|s| !s.is_empty()),
        })
    }
}

/// The entries of an object's `metadata.managedFields` (none when absent).
pub fn read_managed_fields(object: &Value) -> Result<Vec<ManagedFieldsEntry>, ManagedFieldsError> {
    match object.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(entries)) => entries
            .iter()
            .enumerate()
            .map(|(index, entry)| ManagedFieldsEntry::from_json(index, entry))
            .collect(),
        Some(_) => Err(ManagedFieldsError::NotAList),
    }
}

/// Writes `entries` to `metadata.managedFields` in the server's order
/// (operation, then time, manager, apiVersion, subresource), dropping
/// entries that own nothing and the whole field when none are left.
pub fn write_managed_fields(object: &mut Value, entries: &[ManagedFieldsEntry]) {
    let mut kept: Vec<&ManagedFieldsEntry> =
        entries.iter().filter(|e| !e.fields.is_empty()).collect();
    kept.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| a.time.cmp(&b.time))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let Some(root) = object.as_object_mut() else {
        return;
    };
    if kept.is_empty() {
        if let Some(Value::Object(metadata)) = root.get_mut("metadata") {
            metadata.remove("managedFields");
        }
        return;
    }
    let metadata = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    if let Value::Object(metadata) = metadata {
        metadata.insert(
            "managedFields".into(),
            Value::Array(kept.iter().map(|e| e.to_json()).collect()),
        );
    }
}

/// How many `Update` entries an object keeps before the oldest are merged.
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager name of merged old `Update` entries.
pub const ANCIENT_CHANGES_MANAGER: &str = "ancient-changes";

/// Keeps at most `max` `Update` entries, as the server does: going from the
/// oldest, each entry whose apiVersion was already seen is folded into an
/// `ancient-changes` entry of that apiVersion (which takes over the first
/// entry seen for it and the time of the latest folded one).
pub fn cap_update_managers(entries: &mut Vec<ManagedFieldsEntry>, max: usize) {
    let mut updaters: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].operation == Operation::Update)
        .collect();
    if updaters.len() <= max {
        return;
    }
    updaters.sort_by(|&a, &b| {
        entries[a]
            .time
            .cmp(&entries[b].time)
            .then_with(|| entries[a].identity().cmp(&entries[b].identity()))
    });
    let mut remaining = updaters.len();
    let mut first_by_version: Vec<(String, usize)> = Vec::new();
    let mut folded = vec![false; entries.len()];
    for &index in &updaters {
        if remaining <= max {
            break;
        }
        let version = entries[index].api_version.clone();
        let Some(&(_, first)) = first_by_version.iter().find(|(v, _)| *v == version) else {
            first_by_version.push((version, index));
            continue;
        };
        let bucket = match entries.iter().position(|e| {
            e.manager == ANCIENT_CHANGES_MANAGER
                && e.operation == Operation::Update
                && e.api_version == version
                && e.subresource.is_none()
        }) {
            Some(bucket) => bucket,
            None => {
                let bucket = &mut entries[first];
                bucket.manager = ANCIENT_CHANGES_MANAGER.to_string();
                bucket.subresource = None;
                first
            }
        };
        let fields = entries[index].fields.clone();
        entries[bucket].fields = entries[bucket].fields.union(&fields);
        entries[bucket].time = entries[index].time.clone();
        folded[index] = true;
        remaining -= 1;
    }
    let mut position = 0;
    entries.retain(|_| {
        let keep = !folded[position];
        position += 1;
        keep
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(manager: &str, operation: Operation, time: &str) -> ManagedFieldsEntry {
        let mut fields = FieldSet::new();
        fields.insert(&["f:spec".to_string(), "f:replicas".to_string()]);
        ManagedFieldsEntry {
            manager: manager.into(),
            operation,
            api_version: "apps/v1".into(),
            time: Some(time.into()),
            fields,
            subresource: None,
        }
    }

    #[test]
    fn managed_fields_round_trip_through_the_metadata_json() {
        let mut status = entry("kubelet", Operation::Update, "2026-01-01T00:00:00Z");
        status.subresource = Some("status".into());
        let original = vec![
            entry("kubectl", Operation::Apply, "2026-01-02T00:00:00Z"),
            status,
        ];
        let mut object = json!({"metadata": {"name": "x"}});
        write_managed_fields(&mut object, &original);
        let first = &object["metadata"]["managedFields"][0];
        assert_eq!(
            first,
            &json!({
                "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
                "time": "2026-01-02T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:replicas": {}}}
            })
        );
        assert_eq!(read_managed_fields(&object).unwrap(), original);
    }

    #[test]
    fn entries_sort_apply_first_then_by_time_and_empty_ones_are_dropped() {
        let mut empty = entry("idle", Operation::Update, "2026-01-01T00:00:00Z");
        empty.fields = FieldSet::new();
        let entries = vec![
            entry("b", Operation::Update, "2026-01-02T00:00:00Z"),
            entry("a", Operation::Update, "2026-01-03T00:00:00Z"),
            entry("z", Operation::Apply, "2026-01-09T00:00:00Z"),
            empty,
        ];
        let mut object = json!({});
        write_managed_fields(&mut object, &entries);
        let managers: Vec<&str> = object["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["z", "b", "a"]);
        write_managed_fields(&mut object, &[]);
        assert_eq!(object, json!({"metadata": {}}));
    }

    #[test]
    fn managers_are_described_as_conflict_messages_print_them() {
        let apply = entry("kubectl", Operation::Apply, "t");
        assert_eq!(apply.describe(), r#""kubectl""#);
        assert_eq!(
            apply.identity(),
            r#"{"manager":"kubectl","operation":"Apply"}"#
        );
        let mut update = entry("kubelet", Operation::Update, "t");
        update.subresource = Some("status".into());
        assert_eq!(
            update.describe(),
            r#""kubelet" with subresource "status" using apps/v1"#
        );
        assert_eq!(
            update.identity(),
            r#"{"manager":"kubelet","operation":"Update","apiVersion":"apps/v1","subresource":"status"}"#
        );
    }

    #[test]
    fn more_than_ten_update_managers_fold_the_oldest_into_ancient_changes() {
        let mut entries: Vec<ManagedFieldsEntry> = (0..12)
            .map(|i| {
                let mut e = entry(
                    &format!("m{i:02}"),
                    Operation::Update,
                    &format!("2026-01-01T00:00:{i:02}Z"),
                );
                e.fields = FieldSet::new();
                e.fields.insert(&["f:data".to_string(), format!("f:k{i}")]);
                e
            })
            .collect();
        entries.push(entry("applier", Operation::Apply, "2026-01-01T00:00:00Z"));
        cap_update_managers(&mut entries, MAX_UPDATE_MANAGERS);
        let updates: Vec<&ManagedFieldsEntry> = entries
            .iter()
            .filter(|e| e.operation == Operation::Update)
            .collect();
        assert_eq!(updates.len(), MAX_UPDATE_MANAGERS);
        let ancient = updates
            .iter()
            .find(|e| e.manager == ANCIENT_CHANGES_MANAGER)
            .unwrap();
        // m00 became the bucket; m01 and m02 were folded into it.
        assert_eq!(ancient.fields.paths().len(), 3);
        assert_eq!(ancient.time.as_deref(), Some("2026-01-01T00:00:02Z"));
        assert!(
            entries
                .iter()
                .all(|e| !["m00", "m01", "m02"].contains(&e.manager.as_str()))
        );
        assert!(entries.iter().any(|e| e.manager == "applier"));
    }

    #[test]
    fn bad_entries_are_reported_with_their_index() {
        let object = json!({"metadata": {"managedFields": [
            {"manager": "a", "operation": "Apply", "fieldsV1": {}},
            {"manager": "b", "operation": "Patch"}
        ]}});
        let error = read_managed_fields(&object).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("metadata.managedFields[1].operation"),
            "{error}"
        );
        assert!(read_managed_fields(&json!({"metadata": {"managedFields": 1}})).is_err());
    }
}
