//! Server-side apply and the ownership bookkeeping of every other write.
//!
//! [`apply`] merges an apply configuration into the live object, removes
//! what the manager applied before and no longer applies (unless someone
//! else owns it), and refuses to change fields other managers own unless
//! forced. [`record_update`] gives the writer of a create, update or patch
//! the fields it changed, taking them from everyone else, so a later apply
//! by another manager conflicts on them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::fields::{FieldSet, FieldsError, compare, map_item_element, path_to_string, remove_at};
use super::list_types::{ListType, ListTypes, SchemaNode, child_node, item_node};
use super::managed::{
    MAX_UPDATE_MANAGERS, ManagedFieldsEntry, Operation, cap_update_managers, read_managed_fields,
    write_managed_fields,
};

/// Who writes, and when.
#[derive(Clone, Copy, Debug)]
pub struct WriteContext<'a> {
    /// The `fieldManager` (for non-apply writes without one, see
    /// [`manager_from_user_agent`]).
    pub manager: &'a str,
    /// The apiVersion of the request (`v1`, `apps/v1`).
    pub api_version: &'a str,
    /// RFC 3339 time recorded on the manager's entry.
    pub time: &'a str,
    /// `Some("status")` for writes to the status subresource.
    pub subresource: Option<&'a str>,
}

/// One field another manager owns and the apply would change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldConflict {
    /// The manager as the server prints it: `"kubectl"`, `"m" using v1`.
    pub manager: String,
    /// The field as the server prints it: `.spec.replicas`.
    pub field: String,
}

/// One `details.causes` entry of a validation failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionCause {
    pub reason: &'static str,
    pub field: &'static str,
    /// The message without the field: `Required value: is required for apply patch`.
    pub message: String,
}

/// Why a write was refused; each maps to the status the real server sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// 409 Conflict: other managers own fields the apply would change.
    #[error("{message}")]
    Conflicts {
        conflicts: Vec<FieldConflict>,
        message: String,
    },
    /// 400 BadRequest: the body cannot be an apply configuration.
    #[error("{message}")]
    BadRequest { message: String },
    /// 422 Invalid on `PatchOptions`: bad `fieldManager` or `force`.
    #[error("{message}")]
    InvalidOptions {
        causes: Vec<OptionCause>,
        message: String,
    },
    /// The apply configuration does not fit the kind's list types
    /// (duplicate or missing list keys). The real server reports this as
    /// an internal error (500), not as a validation failure.
    #[error("{message}")]
    TypedPatch { message: String },
}

impl ApplyError {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApplyError::Conflicts { .. } => 409,
            ApplyError::BadRequest { .. } => 400,
            ApplyError::InvalidOptions { .. } => 422,
            ApplyError::TypedPatch { .. } => 500,
        }
    }

    /// The `reason` of the status.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Conflicts { .. } => "Conflict",
            ApplyError::BadRequest { .. } => "BadRequest",
            ApplyError::InvalidOptions { .. } => "Invalid",
            ApplyError::TypedPatch { .. } => "InternalError",
        }
    }

    /// The full `meta/v1 Status` response body.
    pub fn to_status(&self) -> Value {
        let details = match self {
            ApplyError::Conflicts { conflicts, .. } => Some(json!({
                "causes": conflicts.iter().map(|c| json!({
                    "reason": "FieldManagerConflict",
                    "message": format!("conflict with {}", c.manager),
                    "field": c.field,
                })).collect::<Vec<_>>()
            })),
            ApplyError::InvalidOptions { causes, .. } => Some(json!({
                "group": "meta.k8s.io",
                "kind": "PatchOptions",
                "causes": causes.iter().map(|c| json!({
                    "reason": c.reason,
                    "message": c.message,
                    "field": c.field,
                })).collect::<Vec<_>>()
            })),
            ApplyError::BadRequest { .. } | ApplyError::TypedPatch { .. } => None,
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if let (Some(details), Some(object)) = (details, status.as_object_mut()) {
            object.insert("details".into(), details);
        }
        status
    }
}

const FIELD_MANAGER_MAX_BYTES: usize = 128;

/// Checks the `fieldManager` and `force` query parameters of a PATCH as
/// the server does before it looks at the object: apply needs a manager,
/// and `force` (even `force=false`) is only allowed on apply.
pub fn validate_patch_options(
    is_apply: bool,
    field_manager: Option<&str>,
    force_given: bool,
) -> Result<(), ApplyError> {
    let mut causes = Vec::new();
    if !is_apply && force_given {
        causes.push(OptionCause {
            reason: "FieldValueForbidden",
            field: "force",
            message: "Forbidden: may not be specified for non-apply patch".into(),
        });
    }
    let manager = field_manager.unwrap_or("");
    if is_apply && manager.is_empty() {
        causes.push(OptionCause {
            reason: "FieldValueRequired",
            field: "fieldManager",
            message: "Required value: is required for apply patch".into(),
        });
    }
    causes.extend(field_manager_causes(manager));
    invalid_options(causes)
}

/// Checks the `fieldManager` of a create or update.
pub fn validate_field_manager(field_manager: &str) -> Result<(), ApplyError> {
    invalid_options(field_manager_causes(field_manager))
}

fn field_manager_causes(manager: &str) -> Vec<OptionCause> {
    let mut causes = Vec::new();
    if manager.len() > FIELD_MANAGER_MAX_BYTES {
        causes.push(OptionCause {
            reason: "FieldValueTooLong",
            field: "fieldManager",
            message: format!("Too long: may not be more than {FIELD_MANAGER_MAX_BYTES} bytes"),
        });
    }
    for (position, character) in manager.char_indices() {
        if character.is_control() {
            causes.push(OptionCause {
                reason: "FieldValueInvalid",
                field: "fieldManager",
                message: format!(
                    "Invalid value: {}: invalid character U+{:04X} (at position {position})",
                    Value::String(manager.to_string()),
                    u32::from(character)
                ),
            });
        }
    }
    causes
}

fn invalid_options(causes: Vec<OptionCause>) -> Result<(), ApplyError> {
    if causes.is_empty() {
        return Ok(());
    }
    let errors: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let listed = if errors.len() == 1 {
        errors[0].clone()
    } else {
        format!("[{}]", errors.join(", "))
    };
    Err(ApplyError::InvalidOptions {
        causes,
        message: format!("PatchOptions.meta.k8s.io \"\" is invalid: {listed}"),
    })
}

/// The manager the server records for a write without `fieldManager`: the
/// user agent up to its first `/` (`kubectl/v1.37.1 (...)` -> `kubectl`).
pub fn manager_from_user_agent(user_agent: &str) -> String {
    // kube-apiserver records a client that sends no User-Agent as "unknown".
    match user_agent.split('/').next().unwrap_or_default() {
        "" => "unknown".to_string(),
        prefix => prefix.to_string(),
    }
}

/// The updater an apply finds owning an object that has no managedFields.
pub const BEFORE_FIRST_APPLY_MANAGER: &str = "before-first-apply";

/// Metadata the server sets; an apply configuration cannot change it.
const SERVER_SET_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "selfLink",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Paths no manager ever owns: identity and server-set metadata.
fn never_owned() -> &'static FieldSet {
    // Built once: every write subtracts it, some twice.
    static NEVER_OWNED: std::sync::LazyLock<FieldSet> = std::sync::LazyLock::new(|| {
        let mut set = FieldSet::new();
        for top in ["apiVersion", "kind", "metadata"] {
            set.insert(&[format!("f:{top}")]);
        }
        for field in [
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
        ]
        .into_iter()
        .chain(["generation", "managedFields", "resourceVersion"])
        {
            set.insert(&["f:metadata".to_string(), format!("f:{field}")]);
        }
        set
    });
    &NEVER_OWNED
}

/// Server-side apply of `applied` (already parsed from JSON or YAML) onto
/// `live` (`None` creates). Returns the new object with its
/// `metadata.managedFields`; server-set metadata (uid, resourceVersion,
/// creationTimestamp, ...) is kept from `live` and never taken from the
/// configuration. When nothing changes the result equals `live`, so the
/// caller can skip the write.
///
/// Callers strip `status` from `applied` for kinds whose status is a
/// subresource (the server resets it on main-resource writes), and check a
/// `metadata.resourceVersion` precondition themselves.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    force: bool,
    types: &ListTypes,
    ctx: &WriteContext<'_>,
) -> Result<Value, ApplyError> {
    if !applied.is_object() {
        return Err(ApplyError::BadRequest {
            message: "the apply configuration must be an object".into(),
        });
    }
    if applied
        .pointer("/metadata/managedFields")
        .is_some_and(|fields| !fields.is_null())
    {
        return Err(ApplyError::BadRequest {
            message: "metadata.managedFields must be nil".into(),
        });
    }
    let config = apply_configuration(applied);
    let applied_set = FieldSet::from_object(&config, types)
        .map_err(|error| typed_patch_error(applied, &error))?
        .difference(never_owned());

    let live_object = live.cloned().unwrap_or_else(|| Value::Object(Map::new()));
    // Unreadable ownership records are dropped, as the server resets them.
    let mut managers = read_managed_fields(&live_object).unwrap_or_default();
    if live.is_some() && live_object.pointer("/metadata/managedFields").is_none() {
        // An object nobody recorded ownership for: the server attributes
        // everything in it to one updater, so applies conflict with it.
        managers.push(ManagedFieldsEntry {
            manager: BEFORE_FIRST_APPLY_MANAGER.to_string(),
            operation: Operation::Update,
            api_version: ctx.api_version.to_string(),
            time: None,
            fields: FieldSet::from_stored_object(&live_object, types).difference(never_owned()),
            subresource: None,
        });
    }
    let previous = managers
        .iter()
        .position(|e| {
            e.belongs_to(
                ctx.manager,
                Operation::Apply,
                ctx.api_version,
                ctx.subresource,
            )
        })
        .map(|index| managers.remove(index));

    let mut merged = merge_configuration(&live_object, &config, Some(types.root()));
    if let Some(previous) = &previous {
        prune_dropped_fields(
            &mut merged,
            &previous.fields,
            &applied_set,
            &managers,
            types,
        );
    }

    let comparison = compare(&live_object, &merged, types).without(never_owned());
    let changed = comparison.changed();
    let mut conflicting: Vec<(&ManagedFieldsEntry, FieldSet)> = managers
        .iter()
        .map(|entry| (entry, entry.fields.intersection(&changed)))
        .filter(|(_, overlap)| !overlap.is_empty())
        .collect();
    if !force && !conflicting.is_empty() {
        conflicting.sort_by_key(|(entry, _)| entry.identity());
        return Err(conflict_error(&conflicting));
    }

    // Changed fields move to the applier (only possible here when forced);
    // removed fields are owned by nobody.
    for entry in &mut managers {
        entry.fields.subtract(&changed);
        entry.fields.subtract(&comparison.removed);
    }
    let unchanged = previous
        .as_ref()
        .filter(|p| comparison == Default::default() && p.fields == applied_set);
    let time = match unchanged {
        Some(previous) => previous.time.clone(),
        None => Some(ctx.time.to_string()),
    };
    managers.push(ManagedFieldsEntry {
        manager: ctx.manager.to_string(),
        operation: Operation::Apply,
        api_version: ctx.api_version.to_string(),
        time,
        fields: applied_set,
        subresource: ctx.subresource.map(str::to_string),
    });
    cap_update_managers(&mut managers, MAX_UPDATE_MANAGERS);
    write_managed_fields(&mut merged, &managers);
    Ok(merged)
}

/// Records a non-apply write (create when `old` is `None`, update, or any
/// patch but apply) in `new`'s `metadata.managedFields`: the writer's
/// `Update` entry gains every field it added or changed, those fields leave
/// every other entry, and removed fields leave all entries.
///
/// `new.metadata.managedFields` as the client sent it is honoured: absent
/// or `[]` keeps the live records, `[{}]` resets them before this write is
/// recorded, any other valid list replaces them.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    types: &ListTypes,
    ctx: &WriteContext<'_>,
) {
    let before_create;
    let old_object = match (old, types.create_baseline()) {
        (Some(old), _) => old,
        (None, Some(baseline)) => baseline,
        (None, None) => {
            before_create = empty_object_before(new, types);
            &before_create
        }
    };
    let mut managers = match new.pointer("/metadata/managedFields") {
        Some(Value::Array(list)) if list.len() == 1 && list[0] == json!({}) => Vec::new(),
        Some(Value::Array(list)) if !list.is_empty() => read_managed_fields(new)
            .or_else(|_| read_managed_fields(old_object))
            .unwrap_or_default(),
        _ => read_managed_fields(old_object).unwrap_or_default(),
    };
    let mut comparison = compare(old_object, new, types);
    for set in [
        &mut comparison.added,
        &mut comparison.modified,
        &mut comparison.removed,
    ] {
        set.subtract(never_owned());
    }
    let mut changed = std::mem::take(&mut comparison.added);
    changed.absorb(&comparison.modified);
    let own = managers
        .iter()
        .position(|e| {
            e.belongs_to(
                ctx.manager,
                Operation::Update,
                ctx.api_version,
                ctx.subresource,
            )
        })
        .map(|index| managers.remove(index));
    for entry in &mut managers {
        entry.fields.subtract(&changed);
        entry.fields.subtract(&comparison.removed);
    }
    let touched = !changed.is_empty() || !comparison.removed.is_empty();
    let mut own = own.unwrap_or_else(|| ManagedFieldsEntry {
        manager: ctx.manager.to_string(),
        operation: Operation::Update,
        api_version: ctx.api_version.to_string(),
        time: None,
        fields: FieldSet::new(),
        subresource: ctx.subresource.map(str::to_string),
    });
    own.fields.subtract(&comparison.removed);
    if own.fields.is_empty() {
        // A new entry (every create): take the change set, do not copy it.
        own.fields = changed;
    } else {
        own.fields.absorb(&changed);
    }
    own.fields.subtract(never_owned());
    if touched || own.time.is_none() {
        own.time = Some(ctx.time.to_string());
    }
    managers.push(own);
    cap_update_managers(&mut managers, MAX_UPDATE_MANAGERS);
    write_managed_fields(new, &managers);
}

/// What a create is compared against when the kind has no Go zero value
/// (see `ListTypes::create_baseline`). A built-in kind's `spec` and
/// `status` are structs that exist even when empty, so creating one adds
/// the fields inside them but not the maps themselves (no `"."` entry).
fn empty_object_before(new: &Value, types: &ListTypes) -> Value {
    let mut empty = Map::new();
    if types.is_builtin() {
        for section in ["spec", "status"] {
            if new.get(section).is_some_and(Value::is_object) {
                empty.insert(section.to_string(), Value::Object(Map::new()));
            }
        }
    }
    Value::Object(empty)
}

/// The configuration as the merge sees it: server-set metadata removed and
/// `null` values dropped (an apply configuration states values; a null
/// states none).
fn apply_configuration(applied: &Value) -> Value {
    let mut config = drop_nulls(applied);
    if let Some(Value::Object(metadata)) = config.get_mut("metadata") {
        for field in SERVER_SET_METADATA {
            metadata.remove(*field);
        }
    }
    config
}

fn drop_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), drop_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(drop_nulls).collect()),
        other => other.clone(),
    }
}

fn typed_patch_error(applied: &Value, error: &FieldsError) -> ApplyError {
    let text = |pointer: &str| {
        applied
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let api_version = text("/apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApplyError::TypedPatch {
        message: format!(
            "failed to create typed patch object ({}/{}; {group}/{version}, Kind={}): {error}",
            text("/metadata/namespace"),
            text("/metadata/name"),
            text("/kind"),
        ),
    }
}

/// Merges a configuration into the live object: maps field by field,
/// atomic lists and maps replaced, sets by value and map-lists by key.
fn merge_configuration(live: &Value, config: &Value, node: Option<&SchemaNode>) -> Value {
    match (live, config) {
        (Value::Object(live_map), Value::Object(config_map))
            if !node.is_some_and(SchemaNode::is_atomic_map) =>
        {
            let mut out = live_map.clone();
            for (name, config_value) in config_map {
                let merged = match live_map.get(name) {
                    Some(live_value) => {
                        merge_configuration(live_value, config_value, child_node(node, name))
                    }
                    None => config_value.clone(),
                };
                out.insert(name.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(live_items), Value::Array(config_items)) => {
            match node.map(SchemaNode::list_type) {
                Some(ListType::Set) => {
                    let identity = |item: &Value| Some(item.to_string());
                    Value::Array(merge_list_items(
                        live_items,
                        config_items,
                        identity,
                        |live, config| live.unwrap_or(config).clone(),
                    ))
                }
                Some(ListType::Map { keys }) => {
                    let identity = |item: &Value| map_item_element(item, keys, node, 0, &[]).ok();
                    Value::Array(merge_list_items(
                        live_items,
                        config_items,
                        identity,
                        |live, config| match live {
                            Some(live) => merge_configuration(live, config, item_node(node)),
                            None => config.clone(),
                        },
                    ))
                }
                _ => config.clone(),
            }
        }
        _ => config.clone(),
    }
}

/// Merges the items of a set or map-list in the order the server uses:
/// items both lists hold follow the configuration's order, items only the
/// configuration holds sit where it puts them, and items only the live
/// list holds keep their place among them.
fn merge_list_items(
    live: &[Value],
    config: &[Value],
    identity: impl Fn(&Value) -> Option<String>,
    merge: impl Fn(Option<&Value>, &Value) -> Value,
) -> Vec<Value> {
    // Live items without identity cannot match anything; they stay as they are.
    let live_ids: Vec<String> = live
        .iter()
        .enumerate()
        .map(|(index, item)| identity(item).unwrap_or_else(|| format!("#{index}")))
        .collect();
    let config_ids: Vec<String> = config
        .iter()
        .enumerate()
        .map(|(index, item)| identity(item).unwrap_or_else(|| format!("#config{index}")))
        .collect();
    let mut live_by_id: BTreeMap<&str, &Value> = BTreeMap::new();
    for (id, item) in live_ids.iter().zip(live) {
        live_by_id.entry(id).or_insert(item);
    }
    let in_config: BTreeSet<&str> = config_ids.iter().map(String::as_str).collect();
    // Shared items, in configuration order: the next one due decides
    // whether a shared live item is emitted now or later.
    let mut shared = config_ids
        .iter()
        .filter(|id| live_by_id.contains_key(id.as_str()))
        .map(String::as_str);
    let mut next_shared = shared.next();
    let mut merged: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut l, mut r) = (0, 0);
    while l < live.len() || r < config.len() {
        if l < live.len() && r < config.len() {
            let id = live_ids[l].as_str();
            if id == config_ids[r] {
                out.push(merge(live_by_id.get(id).copied(), &config[r]));
                merged.insert(id);
                l += 1;
                r += 1;
                next_shared = shared.next();
                continue;
            }
            if in_config.contains(id) && next_shared.is_some_and(|due| due != id) {
                l += 1;
                continue;
            }
        }
        if l < live.len() {
            let id = live_ids[l].as_str();
            if !in_config.contains(id) {
                out.push(live[l].clone());
                l += 1;
                continue;
            }
            if merged.contains(id) {
                l += 1;
                continue;
            }
        }
        if r < config.len() {
            let id = config_ids[r].as_str();
            out.push(merge(live_by_id.get(id).copied(), &config[r]));
            merged.insert(id);
            r += 1;
            if next_shared == Some(id) {
                next_shared = shared.next();
            }
        }
    }
    out
}

/// Removes what the manager applied last time and omits now, unless
/// another manager owns it. A node stays while anything below it is still
/// owned; what nobody ever owned below a removed node goes with it.
fn prune_dropped_fields(
    merged: &mut Value,
    previously_applied: &FieldSet,
    now_applied: &FieldSet,
    others: &[ManagedFieldsEntry],
    types: &ListTypes,
) {
    let owned_by_others = others
        .iter()
        .fold(FieldSet::new(), |all, entry| all.union(&entry.fields));
    let still_owned = owned_by_others.union(now_applied);
    for path in previously_applied.difference(now_applied).paths() {
        if owned_by_others.contains(&path) || still_owned.has_member_below(&path) {
            continue;
        }
        remove_at(merged, &path, types);
    }
}

fn conflict_error(conflicting: &[(&ManagedFieldsEntry, FieldSet)]) -> ApplyError {
    let conflicts: Vec<FieldConflict> = conflicting
        .iter()
        .flat_map(|(entry, fields)| {
            fields.paths().into_iter().map(|path| FieldConflict {
                manager: entry.describe(),
                field: path_to_string(&path),
            })
        })
        .collect();
    let message = if let [only] = conflicts.as_slice() {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.manager, only.field
        )
    } else {
        let mut lines = Vec::new();
        for (entry, fields) in conflicting {
            lines.push(format!("conflicts with {}:", entry.describe()));
            lines.extend(
                fields
                    .paths()
                    .iter()
                    .map(|path| format!("- {}", path_to_string(path))),
            );
        }
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    ApplyError::Conflicts { conflicts, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx<'a>(manager: &'a str, time: &'a str) -> WriteContext<'a> {
        WriteContext {
            manager,
            api_version: "apps/v1",
            time,
            subresource: None,
        }
    }

    fn deployment() -> ListTypes {
        ListTypes::builtin("apps/v1", "Deployment").unwrap()
    }

    fn config(spec: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "ns"}, "spec": spec})
    }

    fn entries(object: &Value) -> Vec<ManagedFieldsEntry> {
        read_managed_fields(object).unwrap()
    }

    fn owner_of<'a>(object: &'a Value, manager: &str) -> &'a Value {
        object["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == manager)
            .map(|e| &e["fieldsV1"])
            .unwrap_or(&Value::Null)
    }

    #[test]
    fn apply_creates_the_object_with_an_apply_entry_for_its_fields() {
        let applied = config(json!({"replicas": 2}));
        let created = apply(None, &applied, false, &deployment(), &ctx("kubectl", "T1")).unwrap();
        assert_eq!(created["spec"]["replicas"], 2);
        assert_eq!(created["metadata"]["name"], "web");
        assert_eq!(
            created["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1", "time": "T1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}
            }])
        );
    }

    #[test]
    fn a_second_manager_applying_a_different_value_conflicts_on_that_field() {
        let types = deployment();
        let live = apply(
            None,
            &config(json!({"replicas": 2})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let error = apply(
            Some(&live),
            &config(json!({"replicas": 3})),
            false,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap_err();
        assert_eq!(error.code(), 409);
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "a": .spec.replicas"#
        );
        assert_eq!(
            error.to_status()["details"],
            json!({"causes": [{"reason": "FieldManagerConflict", "message": "conflict with \"a\"", "field": ".spec.replicas"}]})
        );
        assert_eq!(error.to_status()["reason"], "Conflict");
    }

    #[test]
    fn conflicts_with_several_fields_and_managers_are_grouped_by_manager() {
        let types = deployment();
        let live = apply(
            None,
            &config(json!({"replicas": 2, "paused": false})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let mut edited = live.clone();
        edited["spec"]["minReadySeconds"] = json!(5);
        let edit_ctx = WriteContext {
            api_version: "apps/v1",
            ..ctx("kubectl-edit", "T2")
        };
        record_update(Some(&live), &mut edited, &types, &edit_ctx);
        let applied = config(json!({"replicas": 3, "paused": true, "minReadySeconds": 9}));
        let ApplyError::Conflicts { conflicts, message } =
            apply(Some(&edited), &applied, false, &types, &ctx("b", "T3")).unwrap_err()
        else {
            panic!("expected conflicts");
        };
        assert_eq!(conflicts.len(), 3);
        assert_eq!(
            message,
            "Apply failed with 3 conflicts: conflicts with \"a\":\n- .spec.paused\n- .spec.replicas\nconflicts with \"kubectl-edit\" using apps/v1:\n- .spec.minReadySeconds"
        );
    }

    #[test]
    fn applying_the_same_value_shares_ownership_without_conflict() {
        let types = deployment();
        let live = apply(
            None,
            &config(json!({"replicas": 2})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let shared = apply(
            Some(&live),
            &config(json!({"replicas": 2})),
            false,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap();
        assert_eq!(
            owner_of(&shared, "a"),
            &json!({"f:spec": {"f:replicas": {}}})
        );
        assert_eq!(
            owner_of(&shared, "b"),
            &json!({"f:spec": {"f:replicas": {}}})
        );
        // Now "a" stops applying it: "b" still owns it, so it stays.
        let dropped = apply(
            Some(&shared),
            &config(json!({})),
            false,
            &types,
            &ctx("a", "T3"),
        )
        .unwrap();
        assert_eq!(dropped["spec"]["replicas"], 2);
        assert_eq!(owner_of(&dropped, "a"), &Value::Null);
    }

    #[test]
    fn force_moves_ownership_to_the_applier() {
        let types = deployment();
        let live = apply(
            None,
            &config(json!({"replicas": 2, "paused": true})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let forced = apply(
            Some(&live),
            &config(json!({"replicas": 5})),
            true,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap();
        assert_eq!(forced["spec"]["replicas"], 5);
        assert_eq!(owner_of(&forced, "a"), &json!({"f:spec": {"f:paused": {}}}));
        assert_eq!(
            owner_of(&forced, "b"),
            &json!({"f:spec": {"f:replicas": {}}})
        );
        // "a" lost the field: applying its old value now conflicts with "b".
        let error = apply(
            Some(&forced),
            &config(json!({"replicas": 2, "paused": true})),
            false,
            &types,
            &ctx("a", "T3"),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "b": .spec.replicas"#
        );
    }

    #[test]
    fn a_field_the_manager_stops_applying_is_removed_unless_another_manager_owns_it() {
        let types = deployment();
        let first = config(json!({"replicas": 2, "paused": true}));
        let live = apply(None, &first, false, &types, &ctx("a", "T1")).unwrap();
        let live = apply(
            Some(&live),
            &config(json!({"paused": true})),
            false,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap();
        let after = apply(
            Some(&live),
            &config(json!({})),
            false,
            &types,
            &ctx("a", "T3"),
        )
        .unwrap();
        assert_eq!(after["spec"], json!({"paused": true}));
        let entries = entries(&after);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].manager, "b");
    }

    #[test]
    fn fields_set_by_plain_writes_are_not_pruned_by_an_applier() {
        let types = deployment();
        let live = apply(
            None,
            &config(json!({"replicas": 2})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let mut edited = live.clone();
        edited["metadata"]["labels"] = json!({"team": "x"});
        record_update(
            Some(&live),
            &mut edited,
            &types,
            &ctx("kubectl-label", "T2"),
        );
        let after = apply(
            Some(&edited),
            &config(json!({})),
            false,
            &types,
            &ctx("a", "T3"),
        )
        .unwrap();
        assert_eq!(after["metadata"]["labels"], json!({"team": "x"}));
        assert!(after.get("spec").is_none(), "{after}");
    }

    #[test]
    fn server_set_metadata_is_kept_from_live_and_never_owned() {
        let types = deployment();
        let live = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                          "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1}
        });
        let mut applied = config(json!({"replicas": 1}));
        applied["metadata"]["uid"] = json!("forged");
        applied["metadata"]["resourceVersion"] = json!("1");
        applied["metadata"]["labels"] = json!({"app": "web"});
        let out = apply(Some(&live), &applied, false, &types, &ctx("a", "T1")).unwrap();
        assert_eq!(out["metadata"]["uid"], "u1");
        assert_eq!(out["metadata"]["resourceVersion"], "7");
        assert_eq!(out["metadata"]["generation"], 1);
        assert_eq!(
            owner_of(&out, "a"),
            &json!({"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:replicas": {}}})
        );
    }

    #[test]
    fn apply_bodies_with_managed_fields_or_not_objects_are_bad_requests() {
        let types = deployment();
        let mut applied = config(json!({}));
        applied["metadata"]["managedFields"] = json!([]);
        let error = apply(None, &applied, false, &types, &ctx("a", "T")).unwrap_err();
        assert_eq!(
            (error.code(), error.to_string().as_str()),
            (400, "metadata.managedFields must be nil")
        );
        assert_eq!(
            apply(None, &json!([1]), false, &types, &ctx("a", "T"))
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn list_elements_without_keys_fail_as_the_typed_patch_error() {
        let applied = config(
            json!({"template": {"spec": {"containers": [{"name": "c", "ports": [{"protocol": "UDP"}]}]}}}),
        );
        let error = apply(None, &applied, false, &deployment(), &ctx("a", "T")).unwrap_err();
        assert_eq!(error.code(), 500);
        assert_eq!(
            error.to_string(),
            "failed to create typed patch object (ns/web; apps/v1, Kind=Deployment): .spec.template.spec.containers[name=\"c\"].ports: element 0: associative list with keys has an element that omits key field \"containerPort\""
        );
    }

    #[test]
    fn atomic_lists_are_replaced_whole_and_conflict_as_one_field() {
        let types = deployment();
        let tolerations =
            |key: &str| config(json!({"template": {"spec": {"tolerations": [{"key": key}]}}}));
        let live = apply(None, &tolerations("a"), false, &types, &ctx("a", "T1")).unwrap();
        let error = apply(
            Some(&live),
            &tolerations("b"),
            false,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "a": .spec.template.spec.tolerations"#
        );
        let replaced = apply(
            Some(&live),
            &tolerations("b"),
            true,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap();
        assert_eq!(
            replaced["spec"]["template"]["spec"]["tolerations"],
            json!([{"key": "b"}])
        );
    }

    #[test]
    fn set_lists_merge_by_value_and_each_manager_removes_only_its_own_elements() {
        let types = deployment();
        let finalizers = |values: Value| json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "finalizers": values}});
        let live = apply(
            None,
            &finalizers(json!(["x/a"])),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let live = apply(
            Some(&live),
            &finalizers(json!(["x/b", "x/a"])),
            false,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap();
        // Shared items follow the applier's order.
        assert_eq!(live["metadata"]["finalizers"], json!(["x/b", "x/a"]));
        let live = apply(
            Some(&live),
            &finalizers(json!([])),
            false,
            &types,
            &ctx("b", "T3"),
        )
        .unwrap();
        assert_eq!(live["metadata"]["finalizers"], json!(["x/a"]));
        assert_eq!(
            owner_of(&live, "a"),
            &json!({"f:metadata": {"f:finalizers": {"v:\"x/a\"": {}}}})
        );
    }

    #[test]
    fn map_lists_merge_by_key_and_conflict_per_element_field() {
        let types = deployment();
        let containers = |list: Value| config(json!({"template": {"spec": {"containers": list}}}));
        let live = apply(
            None,
            &containers(json!([{"name": "app", "image": "app:1"}])),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let live = apply(
            Some(&live),
            &containers(json!([{"name": "sidecar", "image": "proxy:1"}])),
            false,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap();
        let names: Vec<&Value> = live["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["name"])
            .collect();
        assert_eq!(names, [&json!("app"), &json!("sidecar")]);
        let error = apply(
            Some(&live),
            &containers(json!([{"name": "app", "image": "app:2"}])),
            false,
            &types,
            &ctx("b", "T3"),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "a": .spec.template.spec.containers[name="app"].image"#
        );
        // "a" drops its container: only "sidecar" remains.
        let live = apply(
            Some(&live),
            &containers(json!([])),
            false,
            &types,
            &ctx("a", "T4"),
        )
        .unwrap();
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"],
            json!([{"name": "sidecar", "image": "proxy:1"}])
        );
    }

    #[test]
    fn an_element_another_manager_still_owns_part_of_keeps_that_part() {
        let types = deployment();
        let containers = |list: Value| config(json!({"template": {"spec": {"containers": list}}}));
        let live = apply(
            None,
            &containers(json!([{"name": "app", "image": "app:1"}])),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let live = apply(
            Some(&live),
            &containers(json!([{"name": "app", "args": ["-v"]}])),
            false,
            &types,
            &ctx("b", "T2"),
        )
        .unwrap();
        let live = apply(
            Some(&live),
            &containers(json!([])),
            false,
            &types,
            &ctx("a", "T3"),
        )
        .unwrap();
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"],
            json!([{"name": "app", "args": ["-v"]}])
        );
    }

    #[test]
    fn merged_lists_follow_the_configuration_order_and_keep_live_only_items_in_place() {
        let live = [json!("a"), json!("x"), json!("b"), json!("c")];
        let config = [json!("c"), json!("new"), json!("a")];
        let identity = |v: &Value| v.as_str().map(str::to_string);
        let merged = merge_list_items(&live, &config, identity, |l, c| l.unwrap_or(c).clone());
        assert_eq!(
            merged,
            [json!("x"), json!("b"), json!("c"), json!("new"), json!("a")]
        );
        let untouched = merge_list_items(&live, &[], identity, |l, c| l.unwrap_or(c).clone());
        assert_eq!(untouched, live);
    }

    #[test]
    fn a_repeated_identical_apply_changes_nothing() {
        let types = deployment();
        let applied = config(json!({"replicas": 2}));
        let live = apply(None, &applied, false, &types, &ctx("a", "T1")).unwrap();
        let again = apply(Some(&live), &applied, false, &types, &ctx("a", "T2")).unwrap();
        assert_eq!(again, live);
    }

    #[test]
    fn update_records_an_update_entry_and_takes_ownership_from_the_applier() {
        let types = deployment();
        let live = apply(
            None,
            &config(json!({"replicas": 2})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let mut scaled = live.clone();
        scaled["spec"]["replicas"] = json!(4);
        record_update(Some(&live), &mut scaled, &types, &ctx("hpa", "T2"));
        assert_eq!(owner_of(&scaled, "a"), &Value::Null);
        assert_eq!(
            owner_of(&scaled, "hpa"),
            &json!({"f:spec": {"f:replicas": {}}})
        );
        let update = entries(&scaled)
            .into_iter()
            .find(|e| e.manager == "hpa")
            .unwrap();
        assert_eq!(
            (update.operation, update.time.as_deref()),
            (Operation::Update, Some("T2"))
        );
        let error = apply(
            Some(&scaled),
            &config(json!({"replicas": 2})),
            false,
            &types,
            &ctx("a", "T3"),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "hpa" using apps/v1: .spec.replicas"#
        );
    }

    #[test]
    fn create_records_every_field_with_dot_members_for_new_maps() {
        let types = ListTypes::builtin("v1", "ConfigMap").unwrap();
        let mut created = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": {"app": "x"}},
            "data": {"k": "v"}
        });
        let create_ctx = WriteContext {
            api_version: "v1",
            ..ctx("kubectl-create", "T1")
        };
        record_update(None, &mut created, &types, &create_ctx);
        assert_eq!(
            owner_of(&created, "kubectl-create"),
            &json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
        );
        // A write that removes a field takes it out of every entry.
        let mut trimmed = created.clone();
        trimmed["data"] = json!({});
        record_update(
            Some(&created),
            &mut trimmed,
            &types,
            &WriteContext {
                manager: "other",
                ..create_ctx
            },
        );
        assert_eq!(
            owner_of(&trimmed, "kubectl-create"),
            &json!({"f:data": {}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
        );
    }

    #[test]
    fn creating_a_built_in_kind_records_spec_fields_without_a_dot_for_spec() {
        let pod_types = ListTypes::builtin("v1", "Pod").unwrap();
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        });
        let create_ctx = WriteContext {
            api_version: "v1",
            ..ctx("kubectl-create", "T1")
        };
        record_update(None, &mut pod, &pod_types, &create_ctx);
        // Nor for `containers`: Go's zero Pod holds it as a nil list (no
        // omitempty), so only its items are new (kube-apiserver v1.37.2).
        assert_eq!(
            owner_of(&pod, "kubectl-create"),
            &json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        // A custom resource is a free-form object: its spec is new, with ".".
        let crd_types = ListTypes::from_crd_schema(&json!({"type": "object"}));
        let mut widget = json!({"apiVersion": "x.io/v1", "kind": "W", "metadata": {"name": "w"}, "spec": {"size": 1}});
        record_update(None, &mut widget, &crd_types, &create_ctx);
        assert_eq!(
            owner_of(&widget, "kubectl-create"),
            &json!({"f:spec": {".": {}, "f:size": {}}})
        );
    }

    #[test]
    fn update_honours_a_managed_fields_reset_and_keeps_records_on_an_empty_list() {
        let types = deployment();
        let live = apply(
            None,
            &config(json!({"replicas": 2})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        let mut kept = live.clone();
        kept["metadata"]["managedFields"] = json!([]);
        record_update(Some(&live), &mut kept, &types, &ctx("u", "T2"));
        assert_eq!(kept, live);
        let mut reset = live.clone();
        reset["metadata"]["managedFields"] = json!([{}]);
        record_update(Some(&live), &mut reset, &types, &ctx("u", "T2"));
        assert!(reset["metadata"].get("managedFields").is_none(), "{reset}");
    }

    #[test]
    fn status_writes_get_their_own_entry_printed_with_the_subresource() {
        let types = deployment();
        let live = config(json!({"replicas": 1}));
        let mut with_status = live.clone();
        with_status["status"] = json!({"replicas": 1});
        let status_ctx = WriteContext {
            subresource: Some("status"),
            ..ctx("controller", "T1")
        };
        record_update(Some(&live), &mut with_status, &types, &status_ctx);
        let mut applied = config(json!({}));
        applied["status"] = json!({"replicas": 3});
        let error =
            apply(Some(&with_status), &applied, false, &types, &ctx("x", "T2")).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "controller" with subresource "status" using apps/v1: .status.replicas"#
        );
    }

    #[test]
    fn an_object_without_managed_fields_is_owned_by_before_first_apply() {
        let types = deployment();
        let legacy = config(json!({"replicas": 1, "paused": false}));
        let error = apply(
            Some(&legacy),
            &config(json!({"replicas": 3, "paused": false})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"Apply failed with 1 conflict: conflict with "before-first-apply" using apps/v1: .spec.replicas"#
        );
        let out = apply(
            Some(&legacy),
            &config(json!({"paused": false})),
            false,
            &types,
            &ctx("a", "T1"),
        )
        .unwrap();
        assert_eq!(
            owner_of(&out, "before-first-apply"),
            &json!({"f:spec": {"f:paused": {}, "f:replicas": {}}})
        );
        assert_eq!(owner_of(&out, "a"), &json!({"f:spec": {"f:paused": {}}}));
    }

    #[test]
    fn patch_options_are_validated_as_the_server_does() {
        let error = validate_patch_options(true, None, false).unwrap_err();
        assert_eq!(
            error.to_status(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                "reason": "Invalid",
                "details": {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                    {"reason": "FieldValueRequired", "message": "Required value: is required for apply patch", "field": "fieldManager"}
                ]},
                "code": 422
            })
        );
        let error = validate_patch_options(false, Some("kubectl-patch"), true).unwrap_err();
        assert_eq!(
            error.to_string(),
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
        );
        assert!(validate_patch_options(true, Some("kubectl"), true).is_ok());
        assert!(validate_patch_options(false, None, false).is_ok());
        assert_eq!(
            validate_field_manager(&"m".repeat(129)).unwrap_err().code(),
            422
        );
        assert_eq!(
            manager_from_user_agent("kubectl/v1.37.1 (linux/amd64)"),
            "kubectl"
        );
    }

    mod properties {
        use super::super::super::fields::get_at;
        use super::*;
        use proptest::prelude::*;

        fn spec() -> impl Strategy<Value = Value> {
            let scalar = prop_oneof![
                any::<bool>().prop_map(Value::from),
                (-3i64..3).prop_map(Value::from),
                "[a-z]{0,2}".prop_map(Value::from),
            ];
            let value = scalar.prop_recursive(3, 12, 3, |inner| {
                prop::collection::btree_map("[a-d]", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect()))
            });
            prop::collection::btree_map("[a-d]", value, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        }

        proptest! {
            #[test]
            fn applying_the_same_configuration_twice_changes_nothing(spec in spec()) {
                let types = ListTypes::object_meta_only();
                let applied = config(spec);
                let once = apply(None, &applied, false, &types, &ctx("a", "T1")).unwrap();
                let twice = apply(Some(&once), &applied, false, &types, &ctx("a", "T2")).unwrap();
                prop_assert_eq!(twice, once);
            }

            #[test]
            fn a_sole_owner_applying_nothing_removes_everything_it_owned(spec in spec()) {
                let types = ListTypes::object_meta_only();
                let live = apply(None, &config(spec), false, &types, &ctx("a", "T1")).unwrap();
                let owned = FieldSet::from_object(&live, &types).unwrap().difference(never_owned());
                let emptied = apply(Some(&live), &config(json!({})), false, &types, &ctx("a", "T2")).unwrap();
                for path in owned.paths() {
                    prop_assert!(get_at(&emptied, &path, &types).is_none(), "{:?} survived in {}", path, emptied);
                }
                prop_assert!(emptied["metadata"].get("managedFields").is_none());
            }

            #[test]
            fn a_forced_apply_wins_every_field_it_sets_and_keeps_the_rest(first in spec(), second in spec()) {
                let types = ListTypes::object_meta_only();
                let live = apply(None, &config(first), false, &types, &ctx("a", "T1")).unwrap();
                let applied = config(second);
                let out = apply(Some(&live), &applied, true, &types, &ctx("b", "T2")).unwrap();
                for entry in read_managed_fields(&out).unwrap() {
                    let source = if entry.manager == "b" { &applied } else { &live };
                    for path in entry.fields.paths() {
                        prop_assert_eq!(get_at(&out, &path, &types), get_at(source, &path, &types));
                    }
                }
                // Ownership is exact: nothing owned is missing from the object.
                let mut stripped = out.clone();
                for entry in read_managed_fields(&out).unwrap() {
                    for path in entry.fields.paths() {
                        remove_at(&mut stripped, &path, &types);
                    }
                }
                prop_assert!(FieldSet::from_object(&stripped, &types).unwrap().difference(never_owned()).paths().iter()
                    .all(|path| get_at(&out, path, &types).is_some()));
            }
        }
    }
}
