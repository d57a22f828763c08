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
        causes.extend(one_controller(owners));
    }
    causes
}

/// At most one owner reference may be the controller: every further one is
/// a cause naming the first and itself, with the whole list shown in Go's
/// field order (`apiVersion, kind, name, uid, controller,
/// blockOwnerDeletion`), as kube-apiserver prints it.
fn one_controller(owners: &[Value]) -> Vec<Cause> {
    let is_controller =
        |owner: &Value| owner.get("controller").and_then(Value::as_bool) == Some(true);
    let describe = |owner: &Value| {
        format!(
            "{}/{}",
            owner
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            owner
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )
    };
    let mut controllers = owners.iter().filter(|owner| is_controller(owner));
    let Some(first) = controllers.next() else {
        return Vec::new();
    };
    let rest: Vec<&Value> = controllers.collect();
    if rest.is_empty() {
        return Vec::new();
    }
    let shown = format!(
        "[{}]",
        owners
            .iter()
            .map(go_owner_reference_json)
            .collect::<Vec<_>>()
            .join(",")
    );
    rest.into_iter()
        .map(|other| {
            Cause::invalid_shown(
                "metadata.ownerReferences",
                &shown,
                &format!(
                    "Only one reference can have Controller set to true. Found \"true\" in references for {} and {}",
                    describe(first),
                    describe(other)
                ),
            )
        })
        .collect()
}

fn go_owner_reference_json(owner: &Value) -> String {
    let fields = [
        "apiVersion",
        "kind",
        "name",
        "uid",
        "controller",
        "blockOwnerDeletion",
    ];
    let parts: Vec<String> = fields
        .iter()
        .filter_map(|key| {
            owner
                .get(*key)
                .filter(|value| !value.is_null())
                .map(|value| format!("{}:{value}", Value::from(*key)))
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// Kind-specific checks for built-ins kube-sim knows well enough to check.
pub fn kind_specific(rt: &ResourceType, value: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !rt.custom
        && rt.group == "admissionregistration.k8s.io"
        && rt.kind.ends_with("WebhookConfiguration")
    {
        return crate::admission::validation::configuration(&rt.kind, value);
    }
    if !rt.custom && rt.group == "discovery.k8s.io" && rt.kind == "EndpointSlice" {
        return endpoint_addresses(value, "endpoints", "addresses", None);
    }
    if rt.custom || !rt.group.is_empty() {
        return causes;
    }
    if rt.kind == "Endpoints" {
        causes.extend(endpoint_addresses(
            value,
            "subsets",
            "addresses",
            Some("ip"),
        ));
        causes.extend(endpoint_addresses(
            value,
            "subsets",
            "notReadyAddresses",
            Some("ip"),
        ));
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
                            format!("{field}[{key}]"),
                            &Value::from(key.as_str()),
                            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                        ));
                    }
                }
            }
        }
    }
    if rt.kind == "ConfigMap" {
        causes.extend(configmap_rules(value));
    }
    if rt.kind == "Service" {
        causes.extend(service_port_ranges(value));
    }
    if rt.kind == "Secret" {
        let size: usize = string_values(value, "data").map(base64_decoded_len).sum();
        if size > MAX_CONFIG_DATA_BYTES {
            causes.push(Cause::too_long("data", MAX_CONFIG_DATA_BYTES));
        }
    }
    causes
}

/// Endpoint addresses may not be loopback or link-local, as kube-apiserver
/// checks them (the API server would otherwise be steered at itself). A
/// webhook server on this machine is named by one of its other addresses.
fn endpoint_addresses(value: &Value, list: &str, key: &str, ip_field: Option<&str>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let groups = value
        .get(list)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, group) in groups.iter().enumerate() {
        let addresses = group
            .get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (j, address) in addresses.iter().enumerate() {
            let (text, field) = match ip_field {
                Some(ip) => (address.get(ip), format!("{list}[{i}].{key}[{j}].{ip}")),
                None => (Some(address), format!("{list}[{i}].{key}[{j}]")),
            };
            let Some(text) = text.and_then(Value::as_str) else {
                continue;
            };
            let Ok(ip) = text.parse::<std::net::IpAddr>() else {
                continue;
            };
            let problem = if ip.is_loopback() {
                Some("may not be in the loopback range (127.0.0.0/8, ::1/128)")
            } else if match ip {
                std::net::IpAddr::V4(v4) => v4.is_link_local(),
                std::net::IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
            } {
                Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)")
            } else {
                None
            };
            if let Some(problem) = problem {
                causes.push(Cause::invalid(field, &Value::from(text), problem));
            }
        }
    }
    causes
}

/// Service ports and numeric target ports are 1 to 65535.
fn service_port_ranges(value: &Value) -> Vec<Cause> {
    const RANGE: &str = "must be between 1 and 65535, inclusive";
    let mut causes = Vec::new();
    let ports = value.pointer("/spec/ports").and_then(Value::as_array);
    for (i, port) in ports.into_iter().flatten().enumerate() {
        for key in ["port", "targetPort"] {
            if let Some(number) = port.get(key).and_then(Value::as_i64)
                && !(1..=65535).contains(&number)
            {
                causes.push(Cause::invalid(
                    format!("spec.ports[{i}].{key}"),
                    &Value::from(number),
                    RANGE,
                ));
            }
        }
    }
    causes
}

/// ConfigMap and Secret data may hold at most 1 MiB (etcd's value limit,
/// less room for the rest of the object).
const MAX_CONFIG_DATA_BYTES: usize = 1024 * 1024;

fn configmap_rules(value: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let binary = value.get("binaryData").and_then(Value::as_object);
    if let (Some(data), Some(binary)) = (value.get("data").and_then(Value::as_object), binary) {
        for key in data.keys().filter(|key| binary.contains_key(*key)) {
            causes.push(Cause::invalid(
                format!("data[{key}]"),
                &Value::from(key.as_str()),
                "duplicate of key present in binaryData",
            ));
        }
    }
    let size: usize = string_values(value, "data").map(str::len).sum::<usize>()
        + string_values(value, "binaryData")
            .map(base64_decoded_len)
            .sum::<usize>();
    if size > MAX_CONFIG_DATA_BYTES {
        // kube-apiserver reports this on the root path, printed `[]`.
        causes.push(Cause::too_long("[]", MAX_CONFIG_DATA_BYTES));
    }
    causes
}

fn string_values<'a>(value: &'a Value, field: &str) -> impl Iterator<Item = &'a str> {
    value
        .get(field)
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|map| map.values().filter_map(Value::as_str))
}

/// The number of bytes a base64 text stands for (the typed decode has
/// already refused text that is not base64).
fn base64_decoded_len(text: &str) -> usize {
    let padding = text.bytes().rev().take_while(|b| *b == b'=').count();
    (text.len() / 4 * 3).saturating_sub(padding)
}

/// Rules of an update that compare the stored object with the new one:
/// immutable ConfigMaps and Secrets, and a Secret's type.
pub fn kind_specific_update(rt: &ResourceType, new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if rt.custom || !rt.group.is_empty() || !matches!(rt.kind.as_str(), "ConfigMap" | "Secret") {
        return causes;
    }
    const IMMUTABLE: &str = "field is immutable when `immutable` is set";
    if rt.kind == "Secret" && new.get("type") != old.get("type") {
        causes.push(Cause::invalid(
            "type",
            new.get("type").unwrap_or(&Value::Null),
            "field is immutable",
        ));
    }
    if old.get("immutable").and_then(Value::as_bool) == Some(true) {
        if new.get("immutable").and_then(Value::as_bool) != Some(true) {
            causes.push(Cause::forbidden("immutable", IMMUTABLE));
        }
        let fields: &[&str] = if rt.kind == "ConfigMap" {
            &["data", "binaryData"]
        } else {
            &["data"]
        };
        for field in fields {
            if new.get(*field) != old.get(*field) {
                causes.push(Cause::forbidden(*field, IMMUTABLE));
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
        assert_eq!(causes[0].field, "data[bad/key]");
    }

    fn builtin(plural: &str) -> std::sync::Arc<ResourceType> {
        Registry::with_builtins().lookup("", "v1", plural).unwrap()
    }

    fn fields(causes: &[Cause]) -> Vec<(&str, &str)> {
        causes
            .iter()
            .map(|c| (c.field.as_str(), c.reason.as_str()))
            .collect()
    }

    #[test]
    fn configmap_data_over_one_mebibyte_counts_data_and_decoded_binary_data() {
        let rt = configmaps();
        let just_fits =
            json!({"data": {"a": "x".repeat((1 << 20) - 1)}, "binaryData": {"b": "eA=="}});
        assert!(kind_specific(&rt, &just_fits).is_empty());
        let over = json!({"data": {"a": "x".repeat(1 << 20)}, "binaryData": {"b": "eA=="}});
        assert_eq!(
            fields(&kind_specific(&rt, &over)),
            [("[]", "FieldValueTooLong")]
        );
    }

    #[test]
    fn secret_data_over_one_mebibyte_is_too_long_on_data() {
        let rt = builtin("secrets");
        let over = json!({"data": {"k": "eHh4".repeat((1 << 20) / 3 + 1)}});
        assert_eq!(
            fields(&kind_specific(&rt, &over)),
            [("data", "FieldValueTooLong")]
        );
    }

    #[test]
    fn a_configmap_key_in_data_and_binary_data_is_named_with_its_key() {
        let rt = configmaps();
        let causes = kind_specific(
            &rt,
            &json!({"data": {"k": "v", "bad key": "v"}, "binaryData": {"k": "dg=="}}),
        );
        assert_eq!(
            fields(&causes),
            [
                ("data[bad key]", "FieldValueInvalid"),
                ("data[k]", "FieldValueInvalid")
            ]
        );
        assert_eq!(
            causes[1].message,
            "Invalid value: \"k\": duplicate of key present in binaryData"
        );
    }

    #[test]
    fn an_immutable_configmap_keeps_its_data_and_stays_immutable() {
        let rt = configmaps();
        let old = json!({"data": {"k": "1"}, "immutable": true});
        assert!(kind_specific_update(&rt, &old, &old).is_empty());
        let changed = json!({"data": {"k": "2"}, "binaryData": {"b": "eA=="}, "immutable": false});
        assert_eq!(
            fields(&kind_specific_update(&rt, &changed, &old)),
            [
                ("immutable", "FieldValueForbidden"),
                ("data", "FieldValueForbidden"),
                ("binaryData", "FieldValueForbidden")
            ]
        );
        let mutable_old = json!({"data": {"k": "1"}});
        assert!(kind_specific_update(&rt, &changed, &mutable_old).is_empty());
    }

    #[test]
    fn a_secret_type_cannot_change() {
        let rt = builtin("secrets");
        let causes = kind_specific_update(
            &rt,
            &json!({"type": "kubernetes.io/basic-auth"}),
            &json!({"type": "Opaque"}),
        );
        assert_eq!(fields(&causes), [("type", "FieldValueInvalid")]);
        assert_eq!(
            causes[0].message,
            "Invalid value: \"kubernetes.io/basic-auth\": field is immutable"
        );
    }

    #[test]
    fn only_one_owner_reference_may_be_the_controller() {
        let rt = configmaps();
        let owner = |kind: &str, name: &str| json!({"apiVersion": "v1", "kind": kind, "name": name, "uid": "u", "controller": true});
        let value = json!({"metadata": {"name": "a", "ownerReferences": [owner("ConfigMap", "o1"), owner("Pod", "o2")]}});
        let causes = metadata(&rt, &value);
        assert_eq!(
            fields(&causes),
            [("metadata.ownerReferences", "FieldValueInvalid")]
        );
        assert_eq!(
            causes[0].message,
            r#"Invalid value: [{"apiVersion":"v1","kind":"ConfigMap","name":"o1","uid":"u","controller":true},{"apiVersion":"v1","kind":"Pod","name":"o2","uid":"u","controller":true}]: Only one reference can have Controller set to true. Found "true" in references for ConfigMap/o1 and Pod/o2"#
        );
    }

    #[test]
    fn service_ports_out_of_range_are_invalid() {
        let rt = builtin("services");
        let value = json!({"spec": {"ports": [{"port": 80, "targetPort": "http"}, {"port": 70000, "targetPort": 0}]}});
        assert_eq!(
            fields(&kind_specific(&rt, &value)),
            [
                ("spec.ports[1].port", "FieldValueInvalid"),
                ("spec.ports[1].targetPort", "FieldValueInvalid")
            ]
        );
    }
}
