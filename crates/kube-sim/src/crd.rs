//! CustomResourceDefinitions: checks on the CRD itself, the kind it serves,
//! and the status conditions kube-apiserver's CRD controllers would set.

use serde_json::{Value, json};

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::apply::ListTypes;
use crate::error::Cause;
use crate::names::{self, NameRule};
use crate::resources::{ResourceType, StatusOnCreate, TypeSchemas, version_priority};
use crate::schema::{CompiledSchema, SchemaError};

/// Compiles every version's `openAPIV3Schema`; errors are causes under
/// `spec.versions[i].schema.`.
fn compile_schemas(crd: &Value) -> (BTreeMap<String, Arc<CompiledSchema>>, Vec<Cause>) {
    let mut compiled = BTreeMap::new();
    let mut causes = Vec::new();
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    for (i, v) in versions.into_iter().flatten().enumerate() {
        let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
        let Some(schema) = v.pointer("/schema/openAPIV3Schema") else {
            causes.push(Cause::required(
                format!("spec.versions[{i}].schema.openAPIV3Schema"),
                "schemas are required",
            ));
            continue;
        };
        match CompiledSchema::compile(schema) {
            Ok(c) => {
                compiled.insert(name.to_string(), Arc::new(c));
            }
            Err(SchemaError::Invalid(errors)) => {
                for e in errors {
                    causes.push(Cause {
                        reason: e.kind.cause_type().to_string(),
                        message: e.body(),
                        field: format!("spec.versions[{i}].schema.{}", e.field),
                    });
                }
            }
        }
    }
    (compiled, causes)
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn strings(value: &Value, pointer: &str) -> Vec<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks kube-apiserver applies to a CRD before accepting it.
pub fn validate(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let name = text(crd, "/metadata/name");
    if group.is_empty() {
        causes.push(Cause::required("spec.group", ""));
    } else if !group.contains('.') {
        causes.push(Cause::invalid(
            "spec.group",
            &Value::from(group),
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural", ""));
    } else {
        for problem in names::dns1123_label(plural) {
            causes.push(Cause::invalid(
                "spec.names.plural",
                &Value::from(plural),
                &problem,
            ));
        }
    }
    if text(crd, "/spec/names/kind").is_empty() {
        causes.push(Cause::required("spec.names.kind", ""));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &Value::from(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match text(crd, "/spec/scope") {
        "Namespaced" | "Cluster" => {}
        "" => causes.push(Cause::required("spec.scope", "")),
        other => causes.push(Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
            ),
            field: "spec.scope".into(),
        }),
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required(
            "spec.versions",
            "must have exactly one version marked as storage version",
        ));
    } else {
        let storage = versions
            .iter()
            .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            .count();
        if storage != 1 {
            causes.push(Cause::invalid(
                "spec.versions",
                &Value::from(versions.len()),
                "must have exactly one version marked as storage version",
            ));
        }
        for (i, v) in versions.iter().enumerate() {
            let vname = v.get("name").and_then(Value::as_str).unwrap_or_default();
            for problem in names::dns1035_label(vname) {
                causes.push(Cause::invalid(
                    format!("spec.versions[{i}].name"),
                    &Value::from(vname),
                    &problem,
                ));
            }
        }
        causes.extend(compile_schemas(crd).1);
    }
    causes
}

/// The served kind described by a (validated) CRD.
pub fn resource_type(crd: &Value) -> ResourceType {
    let group = text(crd, "/spec/group").to_string();
    let plural = text(crd, "/spec/names/plural").to_string();
    let kind = text(crd, "/spec/names/kind").to_string();
    let mut singular = text(crd, "/spec/names/singular").to_string();
    if singular.is_empty() {
        singular = kind.to_lowercase();
    }
    let mut served = Vec::new();
    let mut status_versions = Vec::new();
    let mut storage_version = String::new();
    for v in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
        if v.get("served").and_then(Value::as_bool) == Some(true) {
            served.push(name.to_string());
        }
        if v.get("storage").and_then(Value::as_bool) == Some(true) {
            storage_version = name.to_string();
        }
        if v.pointer("/subresources/status").is_some() {
            status_versions.push(name.to_string());
        }
    }
    served.sort_by(|a, b| version_priority(a, b));
    let storage_schema = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(storage_version.as_str()))
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
        .cloned()
        .unwrap_or(Value::Null);
    let schemas = TypeSchemas {
        list_types: Arc::new(ListTypes::from_crd_schema(&storage_schema)),
        by_version: compile_schemas(crd).0,
    };
    ResourceType {
        schemas,
        group,
        versions: served,
        storage_version,
        kind,
        plural,
        singular,
        namespaced: text(crd, "/spec/scope") == "Namespaced",
        short_names: strings(crd, "/spec/names/shortNames"),
        categories: strings(crd, "/spec/names/categories"),
        status_versions,
        name_rule: NameRule::Subdomain,
        status_on_create: StatusOnCreate::Drop,
        normalize: None,
        extra_fields: &[],
        custom: true,
        stored_as: None,
    }
}

/// The `status` a CRD gets once accepted: names accepted and established,
/// or names rejected because another CRD already serves them.
pub fn status(crd: &Value, names_conflict: Option<String>, now: &str) -> Value {
    let accepted = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let stored: Vec<String> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    let condition = |type_: &str, ok: bool, reason: &str, message: &str| {
        json!({
            "type": type_,
            "status": if ok { "True" } else { "False" },
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        })
    };
    let conditions = match &names_conflict {
        None => vec![
            condition("NamesAccepted", true, "NoConflicts", "no conflicts found"),
            condition(
                "Established",
                true,
                "InitialNamesAccepted",
                "the initial names have been accepted",
            ),
        ],
        Some(why) => vec![
            condition("NamesAccepted", false, "MultipleNamesConflict", why),
            condition(
                "Established",
                false,
                "NotAccepted",
                "not all names are accepted",
            ),
        ],
    };
    let mut status = json!({
        "conditions": conditions,
        "storedVersions": stored,
    });
    if names_conflict.is_none() {
        status["acceptedNames"] = accepted;
    } else {
        status["acceptedNames"] = json!({"plural": "", "kind": ""});
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}, "schema": {"openAPIV3Schema": {"type": "object"}}}
                ]
            }
        })
    }

    #[test]
    fn a_well_formed_crd_passes_and_serves_every_version() {
        let crd = sample();
        assert!(validate(&crd).is_empty());
        let rt = resource_type(&crd);
        assert_eq!(rt.versions, vec!["v1", "v1beta1"]);
        assert_eq!(rt.storage_version, "v1");
        assert!(rt.has_status("v1"));
        assert!(!rt.has_status("v1beta1"));
        assert!(rt.namespaced);
        assert_eq!(rt.short_names, vec!["wd"]);
    }

    #[test]
    fn the_name_must_be_plural_dot_group() {
        let mut crd = sample();
        crd["metadata"]["name"] = json!("gadgets.example.com");
        let causes = validate(&crd);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.name");
    }

    #[test]
    fn exactly_one_storage_version_is_required() {
        let mut crd = sample();
        crd["spec"]["versions"][0]["storage"] = json!(true);
        assert_eq!(validate(&crd)[0].field, "spec.versions");
    }

    #[test]
    fn accepted_crds_are_established() {
        let status = status(&sample(), None, "2026-01-01T00:00:00Z");
        let types: Vec<(&str, &str)> = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
            .collect();
        assert_eq!(
            types,
            vec![("NamesAccepted", "True"), ("Established", "True")]
        );
        assert_eq!(status["acceptedNames"]["kind"], "Widget");
    }
}
