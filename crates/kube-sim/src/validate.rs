//! Object validation shared by every kind (metadata) plus the few kind-specific
//! rules kube-sim enforces for built-ins. Pure: returns causes, empty when valid.

use serde_json::Value;

use crate::error::Cause;
use crate::names;
use crate::resources::ResourceType;

/// Validates `metadata` of an object about to be stored.
pub fn metadata(rt: &ResourceType, value: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(meta) = value.get("metadata").and_then(Value::as_object) else {
        causes.push(Cause::required("metadata", ""));
        return causes;
    };
    match meta.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => {
            for problem in names::check_name(rt.name_rule, name) {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &Value::from(name),
                    &problem,
                ));
            }
        }
        _ => causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        )),
    }
    for (field, validate_values) in [("labels", true), ("annotations", false)] {
        let Some(map) = meta.get(field) else { continue };
        let Some(map) = map.as_object() else {
            causes.push(Cause::invalid(
                format!("metadata.{field}"),
                map,
                "must be a map of strings",
            ));
            continue;
        };
        let mut total = 0usize;
        for (key, val) in map {
            for problem in names::qualified_name(key) {
                causes.push(Cause::invalid(
                    format!("metadata.{field}"),
                    &Value::from(key.as_str()),
                    &problem,
                ));
            }
            let Some(text) = val.as_str() else {
                causes.push(Cause::invalid(
                    format!("metadata.{field}.{key}"),
                    val,
                    "must be a string",
                ));
                continue;
            };
            total += key.len() + text.len();
            if validate_values {
                for problem in names::label_value(text) {
                    causes.push(Cause::invalid(
                        "metadata.labels".to_string(),
                        &Value::from(text),
                        &problem,
                    ));
                }
            }
        }
        if !validate_values && total > names::TOTAL_ANNOTATION_SIZE_LIMIT {
            causes.push(Cause::too_long(
                "metadata.annotations",
                names::TOTAL_ANNOTATION_SIZE_LIMIT,
            ));
        }
    }
    if let Some(finalizers) = meta.get("finalizers") {
        match finalizers.as_array() {
            Some(list) => {
                for (i, f) in list.iter().enumerate() {
                    let field = format!("metadata.finalizers[{i}]");
                    match f.as_str() {
                        Some(name) => {
                            for problem in names::qualified_name(name) {
                                causes.push(Cause::invalid(field.clone(), f, &problem));
                            }
                        }
                        None => causes.push(Cause::invalid(field, f, "must be a string")),
                    }
                }
            }
            None => causes.push(Cause::invalid(
                "metadata.finalizers",
                finalizers,
                "must be a list of strings",
            )),
        }
    }
    if let Some(owners) = meta.get("ownerReferences").and_then(Value::as_array) {
        for (i, owner) in owners.iter().enumerate() {
            for key in ["apiVersion", "kind", "name", "uid"] {
                let present = owner
                    .get(key)
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty());
                if !present {
                    causes.push(Cause::required(
                        format!("metadata.ownerReferences[{i}].{key}"),
                        "",
                    ));
                }
            }
        }
    }
    causes
}

/// Kind-specific checks for built-ins kube-sim knows well enough to check.
pub fn kind_specific(rt: &ResourceType, value: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if rt.custom || !rt.group.is_empty() {
        return causes;
    }
    if rt.kind == "Pod" {
        let containers = value
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .filter(|c| !c.is_empty());
        match containers {
            None => causes.push(Cause::required("spec.containers", "")),
            Some(containers) => {
                for (i, c) in containers.iter().enumerate() {
                    match c.get("name").and_then(Value::as_str) {
                        Some(name) if !name.is_empty() => {
                            for problem in names::dns1123_label(name) {
                                causes.push(Cause::invalid(
                                    format!("spec.containers[{i}].name"),
                                    &Value::from(name),
                                    &problem,
                                ));
                            }
                        }
                        _ => causes.push(Cause::required(format!("spec.containers[{i}].name"), "")),
                    }
                    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
                    if image.is_empty() {
                        causes.push(Cause::required(format!("spec.containers[{i}].image"), ""));
                    }
                }
            }
        }
    }
    if rt.kind == "ConfigMap" || rt.kind == "Secret" {
        for field in ["data", "binaryData"] {
            if let Some(map) = value.get(field).and_then(Value::as_object) {
                for key in map.keys() {
                    if !is_config_key(key) {
                        causes.push(Cause::invalid(
                            field.to_string(),
                            &Value::from(key.as_str()),
                            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                        ));
                    }
                }
            }
        }
    }
    causes
}

fn is_config_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;
    use serde_json::json;

    fn configmaps() -> std::sync::Arc<ResourceType> {
        Registry::with_builtins()
            .lookup("", "v1", "configmaps")
            .unwrap()
    }

    #[test]
    fn invalid_names_and_labels_name_their_fields() {
        let rt = configmaps();
        let causes = metadata(
            &rt,
            &json!({"metadata": {"name": "Bad_Name", "labels": {"ok": "has space"}}}),
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, vec!["metadata.name", "metadata.labels"]);
        assert!(
            causes[0]
                .message
                .starts_with("Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain")
        );
    }

    #[test]
    fn a_missing_name_is_required() {
        let causes = metadata(&configmaps(), &json!({"metadata": {}}));
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].line(),
            "metadata.name: Required value: name or generateName is required"
        );
    }

    #[test]
    fn pods_need_named_containers_with_images() {
        let rt = Registry::with_builtins().lookup("", "v1", "pods").unwrap();
        let causes = kind_specific(&rt, &json!({"spec": {"containers": [{"name": "c"}]}}));
        assert_eq!(causes[0].line(), "spec.containers[0].image: Required value");
        let causes = kind_specific(&rt, &json!({"spec": {}}));
        assert_eq!(causes[0].line(), "spec.containers: Required value");
    }

    #[test]
    fn configmap_keys_follow_the_config_key_rule() {
        let causes = kind_specific(
            &configmaps(),
            &json!({"data": {"ok.key": "v", "bad/key": "v"}}),
        );
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "data");
    }
}
