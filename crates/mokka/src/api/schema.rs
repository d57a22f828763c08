//! Brings the schemas schemars generates in line with the ones upstream's
//! controller-gen writes for the same Go types, where the Rust derive cannot
//! say it: Quantities as int-or-string with the quantity pattern,
//! `metav1.Condition`'s constraints, `metav1.LabelSelector`'s atomic map and
//! lists, and no `nullable` or `default` anywhere (upstream has none, so an
//! explicit null is pruned as it is there).

use serde_json::{Map, Value, json};

/// controller-gen's pattern for `resource.Quantity`.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Rewrites one generated schema in place (recursively).
pub(crate) fn conform(schema: &mut Value) {
    let Value::Object(object) = schema else {
        if let Value::Array(items) = schema {
            items.iter_mut().for_each(conform);
        }
        return;
    };
    object.remove("nullable");
    object.remove("default");
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|value| !value.is_null());
    }
    if is_quantity(object) {
        *object = quantity_schema();
        return;
    }
    if is_condition(object) {
        constrain_condition(object);
    }
    if is_label_selector(object) {
        make_selector_atomic(object);
    }
    for (key, child) in object.iter_mut() {
        // Property maps hold schemas under arbitrary names; every other
        // nested value is a schema or a list of schemas.
        if key == "properties" {
            if let Value::Object(properties) = child {
                properties.values_mut().for_each(conform);
            }
        } else if matches!(
            key.as_str(),
            "items" | "anyOf" | "allOf" | "oneOf" | "not" | "additionalProperties"
        ) {
            conform(child);
        }
    }
}

fn is_quantity(object: &Map<String, Value>) -> bool {
    object.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        && object
            .get("description")
            .and_then(Value::as_str)
            .is_some_and(|text| text.starts_with("Quantity is a fixed-point"))
}

fn quantity_schema() -> Map<String, Value> {
    let mut object = Map::new();
    object.insert(
        "anyOf".into(),
        json!([{"type": "integer"}, {"type": "string"}]),
    );
    object.insert("pattern".into(), json!(QUANTITY_PATTERN));
    object.insert("x-kubernetes-int-or-string".into(), json!(true));
    object
}

fn property<'a>(
    object: &'a mut Map<String, Value>,
    name: &str,
) -> Option<&'a mut Map<String, Value>> {
    object
        .get_mut("properties")?
        .as_object_mut()?
        .get_mut(name)?
        .as_object_mut()
}

fn has_properties(object: &Map<String, Value>, names: &[&str]) -> bool {
    object
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|properties| names.iter().all(|name| properties.contains_key(*name)))
}

fn is_condition(object: &Map<String, Value>) -> bool {
    has_properties(
        object,
        &["lastTransitionTime", "message", "reason", "status", "type"],
    )
}

/// `metav1.Condition` as controller-gen renders it.
fn constrain_condition(object: &mut Map<String, Value>) {
    let extend = |object: &mut Map<String, Value>, name: &str, extra: Value| {
        if let (Some(field), Value::Object(extra)) = (property(object, name), extra) {
            field.extend(extra);
        }
    };
    extend(object, "message", json!({"maxLength": 32768}));
    extend(object, "observedGeneration", json!({"minimum": 0}));
    extend(
        object,
        "reason",
        json!({
            "maxLength": 1024,
            "minLength": 1,
            "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        }),
    );
    extend(
        object,
        "status",
        json!({"enum": ["True", "False", "Unknown"]}),
    );
    extend(
        object,
        "type",
        json!({
            "maxLength": 316,
            "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
        }),
    );
    object.insert(
        "required".into(),
        json!(["lastTransitionTime", "message", "reason", "status", "type"]),
    );
}

fn is_label_selector(object: &Map<String, Value>) -> bool {
    has_properties(object, &["matchExpressions", "matchLabels"])
}

/// `metav1.LabelSelector`: an atomic map whose requirement list and value
/// lists are atomic.
fn make_selector_atomic(object: &mut Map<String, Value>) {
    object.insert("x-kubernetes-map-type".into(), json!("atomic"));
    if let Some(expressions) = property(object, "matchExpressions") {
        expressions.insert("x-kubernetes-list-type".into(), json!("atomic"));
        if let Some(values) = expressions
            .get_mut("items")
            .and_then(Value::as_object_mut)
            .and_then(|item| property(item, "values"))
        {
            values.insert("x-kubernetes-list-type".into(), json!("atomic"));
        }
    }
}
