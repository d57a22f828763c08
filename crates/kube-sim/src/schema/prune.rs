//! Pruning unknown fields and applying defaults, the way the apiserver does
//! when it decodes a custom resource: unknown fields are dropped unless a
//! schema preserves them, `null`s of non-nullable fields without a default
//! are dropped, and defaults fill absent (or non-nullable `null`) fields.

use serde_json::{Map, Value};

use super::compile::{Additional, Node};
use super::errors::path;

/// Fields every resource (and embedded resource) keeps whatever its schema
/// says; the apiserver owns their validation.
const RESOURCE_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Drops the fields `node` does not know. `resource_root` keeps
/// `apiVersion`, `kind` and `metadata` (metadata is left untouched). The
/// path of every dropped field is appended to `pruned` (`field` is the path
/// of `value`, "" for the root).
pub(super) fn prune_value(
    node: &Node,
    value: &mut Value,
    resource_root: bool,
    field: &str,
    pruned: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => prune_object(
            node,
            map,
            resource_root || node.embedded_resource,
            field,
            pruned,
        ),
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for (i, item) in items.iter_mut().enumerate() {
                    let item_field = path::index(field, i);
                    prune_value(
                        item_node,
                        item,
                        item_node.embedded_resource,
                        &item_field,
                        pruned,
                    );
                }
            }
        }
        _ => {}
    }
}

fn prune_object(
    node: &Node,
    map: &mut Map<String, Value>,
    resource: bool,
    field: &str,
    pruned: &mut Vec<String>,
) {
    match &node.additional {
        Additional::Schema(value_node) => {
            for (key, value) in map.iter_mut() {
                let value_field = path::child(field, key);
                prune_value(
                    value_node,
                    value,
                    value_node.embedded_resource,
                    &value_field,
                    pruned,
                );
            }
            return;
        }
        Additional::Any => return,
        Additional::Unspecified => {}
    }
    map.retain(|key, _| {
        let known = node.preserve_unknown
            || node.properties.contains_key(key)
            || (resource && RESOURCE_FIELDS.contains(&key.as_str()));
        if !known {
            pruned.push(path::child(field, key));
        }
        known
    });
    for (key, value) in map.iter_mut() {
        // A resource's metadata is the apiserver's: its schema may only
        // constrain name and generateName, so it is never pruned here.
        if resource && key == "metadata" {
            continue;
        }
        if let Some(prop) = node.properties.get(key) {
            let prop_field = path::child(field, key);
            prune_value(prop, value, prop.embedded_resource, &prop_field, pruned);
        }
    }
}

/// Drops `null`s of non-nullable properties that have no default: the
/// apiserver treats them as absent.
pub(super) fn prune_non_nullable_nulls(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|key, v| match node.properties.get(key) {
                Some(prop) => !(v.is_null() && !prop.nullable && prop.default.is_none()),
                None => true,
            });
            for (key, v) in map.iter_mut() {
                if let Some(prop) = node.properties.get(key) {
                    prune_non_nullable_nulls(prop, v);
                } else if let Additional::Schema(value_node) = &node.additional {
                    prune_non_nullable_nulls(value_node, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for item in items {
                    prune_non_nullable_nulls(item_node, item);
                }
            }
        }
        _ => {}
    }
}

/// A `null` the schema does not allow, which a default replaces.
fn is_non_nullable_null(value: &Value, node: &Node) -> bool {
    value.is_null() && !node.nullable
}

/// Applies defaults where a field is absent (or a non-nullable `null`),
/// then descends, so defaults nested in a default apply too.
pub(super) fn apply_defaults(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, prop) in &node.properties {
                let Some(default) = &prop.default else {
                    continue;
                };
                let absent = match map.get(key) {
                    None => true,
                    Some(v) => is_non_nullable_null(v, prop),
                };
                if absent {
                    map.insert(key.clone(), default.clone());
                }
            }
            for (key, v) in map.iter_mut() {
                if let Some(prop) = node.properties.get(key) {
                    apply_defaults(prop, v);
                } else if let Additional::Schema(value_node) = &node.additional {
                    if is_non_nullable_null(v, value_node)
                        && let Some(default) = &value_node.default
                    {
                        *v = default.clone();
                    }
                    apply_defaults(value_node, v);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for item in items.iter_mut() {
                    if is_non_nullable_null(item, item_node)
                        && let Some(default) = &item_node.default
                    {
                        *item = default.clone();
                    }
                    apply_defaults(item_node, item);
                }
            }
        }
        _ => {}
    }
}
