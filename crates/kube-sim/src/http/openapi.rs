//! OpenAPI v3 for kubectl: the `/openapi/v3` index and one document per
//! group-version. kubectl reads them before `apply`, `create` and `edit`
//! (to learn that the server validates fields itself, from the PATCH
//! operation's `fieldValidation` parameter) and for `explain` (the
//! component schema carrying the kind's `x-kubernetes-group-version-kind`).
//!
//! Built-in kinds get their schemas from k8s-openapi's `schemars` support;
//! custom kinds get the `openAPIV3Schema` of their CRD version. Each index
//! entry carries a hash of its document, so clients refetch when a CRD changes.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::AppState;
use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::Store;

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub(super) const CRD_GROUP: &str = "apiextensions.k8s.io";
/// `info.version` of every OpenAPI document kube-sim serves.
pub(super) const INFO_VERSION: &str = "v1.33.0-kube-sim";

/// `GET /openapi/v3`
pub async fn index(State(state): State<AppState>) -> Response {
    let mut paths = Map::new();
    for (key, doc) in documents(&state.store, None) {
        paths.insert(
            key.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{key}?hash={}", hash(&doc)) }),
        );
    }
    json_response(&json!({ "paths": paths }))
}

/// `GET /openapi/v3/api/v1`, `GET /openapi/v3/apis/<group>/<version>`
pub async fn group_version(
    State(state): State<AppState>,
    Path(group_version): Path<String>,
) -> Response {
    let key = group_version.trim_matches('/').to_string();
    match documents(&state.store, Some(&key)).remove(&key) {
        Some(doc) => json_response(&doc),
        None => ApiError::no_such_resource().into_response(),
    }
}

fn json_response(value: &Value) -> Response {
    let mut response = (StatusCode::OK, value.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Documents change with CRDs; clients must not reuse them blindly.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    hash_header(&mut response, value);
    response
}

fn hash_header(response: &mut Response, value: &Value) {
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", hash(value))) {
        response.headers_mut().insert(header::ETAG, etag);
    }
}

/// A stable content hash (the same document always hashes the same).
pub(super) fn hash(doc: &Value) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    doc.to_string().hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// `api/v1` or `apis/<group>/<version>`.
fn document_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// Every group-version document (or only `only`), keyed like the index.
pub(super) fn documents(store: &Arc<Store>, only: Option<&str>) -> BTreeMap<String, Value> {
    let registry = store.registry();
    let mut by_gv: BTreeMap<(String, String), Vec<Arc<ResourceType>>> = BTreeMap::new();
    for rt in registry.all() {
        for version in &rt.versions {
            by_gv
                .entry((rt.group.clone(), version.clone()))
                .or_default()
                .push(rt.clone());
        }
    }
    let mut docs: BTreeMap<String, Value> = by_gv
        .into_iter()
        .filter(|((g, v), _)| only.is_none_or(|key| key == document_key(g, v)))
        .map(|((group, version), types)| {
            let doc = gv_document(store, &group, &version, &types);
            (document_key(&group, &version), doc)
        })
        .collect();
    for api in super::discovery::REVIEW_APIS {
        let key = document_key(api.group, api.version);
        if only.is_some_and(|k| k != key) || docs.contains_key(&key) {
            continue;
        }
        docs.insert(key, review_document(api.group, api.version));
    }
    docs
}

/// The document of a review group: each kind's schema and its one POST.
fn review_document(group: &str, version: &str) -> Value {
    use k8s_openapi::api::authentication::v1 as authn;
    use k8s_openapi::api::authorization::v1 as authz;
    let mut generator = generator();
    let mut paths = Map::new();
    let mut named = Vec::new();
    for api in super::discovery::REVIEW_APIS
        .iter()
        .filter(|a| a.group == group && a.version == version)
    {
        let gen_ref = Some(&mut generator);
        let name = match api.kind {
            "TokenReview" => register::<authn::TokenReview>(gen_ref),
            "SelfSubjectReview" => register::<authn::SelfSubjectReview>(gen_ref),
            "SubjectAccessReview" => register::<authz::SubjectAccessReview>(gen_ref),
            "SelfSubjectAccessReview" => register::<authz::SelfSubjectAccessReview>(gen_ref),
            "LocalSubjectAccessReview" => register::<authz::LocalSubjectAccessReview>(gen_ref),
            _ => continue,
        };
        let path = if api.namespaced {
            format!(
                "/apis/{group}/{version}/namespaces/{{namespace}}/{}",
                api.plural
            )
        } else {
            format!("/apis/{group}/{version}/{}", api.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": api.kind});
        paths.insert(
            path,
            json!({"post": {
                "operationId": format!("create{}{version}", api.kind),
                "x-kubernetes-action": "post",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": write_params(),
                "requestBody": {"content": object_content(&name), "required": true},
                "responses": {"201": {"description": "Created", "content": object_content(&name)}},
            }}),
        );
        named.push((name, api.kind));
    }
    let mut schemas = generator.take_definitions(true);
    for (name, kind) in named {
        let schema = schemas.remove(&name).unwrap_or_else(permissive_schema);
        schemas.insert(name, with_gvk(schema, group, version, kind));
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": INFO_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

fn gv_document(store: &Store, group: &str, version: &str, types: &[Arc<ResourceType>]) -> Value {
    let builtins: Vec<&Arc<ResourceType>> = types.iter().filter(|t| !t.custom).collect();
    let mut schemas = builtin_components(group, version, &builtins);
    let mut paths = Map::new();
    for rt in types {
        let schema_name = if rt.custom {
            let name = custom_schema_name(group, version, &rt.kind);
            let schema = custom_schema(store, rt, version);
            schemas.insert(name.clone(), with_gvk(schema, group, version, &rt.kind));
            if !schemas.contains_key(OBJECT_META) {
                schemas.extend(object_meta_components());
            }
            name
        } else {
            builtin_schema_name(group, version, &rt.kind)
        };
        add_paths(&mut paths, rt, version, &schema_name);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": INFO_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

fn with_gvk(mut schema: Value, group: &str, version: &str, kind: &str) -> Value {
    if let Some(obj) = schema.as_object_mut() {
        obj.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{ "group": group, "version": version, "kind": kind }]),
        );
    }
    schema
}

/// `<reversed group>.<version>.<Kind>`, as kube-apiserver names CRD schemas.
fn custom_schema_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The CRD version's structural schema, with `metadata` pointing at ObjectMeta.
fn custom_schema(store: &Store, rt: &ResourceType, version: &str) -> Value {
    let crd = store
        .resolve(CRD_GROUP, "v1", "customresourcedefinitions")
        .and_then(|crd_rt| {
            store
                .get(&crd_rt, None, &format!("{}.{}", rt.plural, rt.group))
                .ok()
        })
        .map(|obj| obj.value());
    let mut schema = crd
        .as_ref()
        .and_then(|crd| crd.pointer("/spec/versions"))
        .and_then(Value::as_array)
        .and_then(|versions| {
            versions
                .iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
        })
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
        .cloned()
        .unwrap_or_else(permissive_schema);
    if let Some(obj) = schema.as_object_mut() {
        obj.entry("type").or_insert_with(|| json!("object"));
        let properties = obj
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(props) = properties.as_object_mut() {
            props.insert(
                "apiVersion".into(),
                json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
            );
            props.insert(
                "kind".into(),
                json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
            );
            props.insert(
                "metadata".into(),
                json!({
                    "description": "Standard object's metadata.",
                    "allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
                }),
            );
        }
    }
    schema
}

fn permissive_schema() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

fn generator() -> SchemaGenerator {
    SchemaGenerator::new(SchemaSettings::openapi3())
}

fn object_meta_components() -> Map<String, Value> {
    static META: OnceLock<Map<String, Value>> = OnceLock::new();
    META.get_or_init(|| {
        let mut generator = generator();
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
        generator.take_definitions(true)
    })
    .clone()
}

/// Adds `T`'s schema (and everything it references) to the generator, if
/// one is given, and returns its component name.
fn register<T: JsonSchema>(generator: Option<&mut SchemaGenerator>) -> String {
    if let Some(generator) = generator {
        generator.subschema_for::<T>();
    }
    T::schema_name().into_owned()
}

/// The k8s-openapi type behind a built-in kind, registered in `generator`.
fn register_builtin(
    generator: Option<&mut SchemaGenerator>,
    group: &str,
    version: &str,
    kind: &str,
) -> Option<String> {
    use k8s_openapi::api::admissionregistration::v1 as admission;
    use k8s_openapi::api::apps::v1 as apps;
    use k8s_openapi::api::batch::v1 as batch;
    use k8s_openapi::api::coordination::v1 as coordination;
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::events::v1 as events;
    use k8s_openapi::api::policy::v1 as policy;
    use k8s_openapi::api::rbac::v1 as rbac;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    Some(match (group, version, kind) {
        ("apps", "v1", "Deployment") => register::<apps::Deployment>(generator),
        ("apps", "v1", "DaemonSet") => register::<apps::DaemonSet>(generator),
        ("apps", "v1", "StatefulSet") => register::<apps::StatefulSet>(generator),
        ("apps", "v1", "ReplicaSet") => register::<apps::ReplicaSet>(generator),
        ("batch", "v1", "Job") => register::<batch::Job>(generator),
        ("rbac.authorization.k8s.io", "v1", "Role") => register::<rbac::Role>(generator),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => {
            register::<rbac::RoleBinding>(generator)
        }
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => {
            register::<rbac::ClusterRole>(generator)
        }
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            register::<rbac::ClusterRoleBinding>(generator)
        }
        ("", "v1", "Namespace") => register::<core::Namespace>(generator),
        ("", "v1", "Node") => register::<core::Node>(generator),
        ("", "v1", "Pod") => register::<core::Pod>(generator),
        ("", "v1", "Service") => register::<core::Service>(generator),
        ("", "v1", "ConfigMap") => register::<core::ConfigMap>(generator),
        ("", "v1", "Secret") => register::<core::Secret>(generator),
        ("", "v1", "ServiceAccount") => register::<core::ServiceAccount>(generator),
        ("", "v1", "Event") => register::<core::Event>(generator),
        ("", "v1", "Endpoints") => register::<core::Endpoints>(generator),
        ("", "v1", "PersistentVolumeClaim") => register::<core::PersistentVolumeClaim>(generator),
        ("events.k8s.io", "v1", "Event") => register::<events::Event>(generator),
        ("coordination.k8s.io", "v1", "Lease") => register::<coordination::Lease>(generator),
        ("policy", "v1", "PodDisruptionBudget") => {
            register::<policy::PodDisruptionBudget>(generator)
        }
        ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration") => {
            register::<admission::MutatingWebhookConfiguration>(generator)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration") => {
            register::<admission::ValidatingWebhookConfiguration>(generator)
        }
        ("discovery.k8s.io", "v1", "EndpointSlice") => {
            register::<k8s_openapi::api::discovery::v1::EndpointSlice>(generator)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy") => {
            register::<admission::ValidatingAdmissionPolicy>(generator)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding") => {
            register::<admission::ValidatingAdmissionPolicyBinding>(generator)
        }
        (CRD_GROUP, "v1", "CustomResourceDefinition") => {
            register::<apiext::CustomResourceDefinition>(generator)
        }
        _ => return None,
    })
}

/// Component name of a built-in kind: k8s-openapi's name when we have the
/// type, else one in the same style.
fn builtin_schema_name(group: &str, version: &str, kind: &str) -> String {
    register_builtin(None, group, version, kind).unwrap_or_else(|| {
        let group_part = match group {
            "" => "core".to_string(),
            g => g.split('.').next().unwrap_or(g).to_string(),
        };
        format!("io.k8s.api.{group_part}.{version}.{kind}")
    })
}

/// Schemas of the built-in kinds of one group-version (cached: they only
/// depend on the binary).
fn builtin_components(
    group: &str,
    version: &str,
    types: &[&Arc<ResourceType>],
) -> Map<String, Value> {
    static CACHE: OnceLock<Mutex<HashMap<String, Map<String, Value>>>> = OnceLock::new();
    let mut kinds: Vec<&str> = types.iter().map(|t| t.kind.as_str()).collect();
    kinds.sort_unstable();
    let key = format!("{group}/{version}/{}", kinds.join(","));
    let cache = CACHE.get_or_init(Default::default);
    if let Some(found) = cache.lock().get(&key) {
        return found.clone();
    }
    let mut generator = generator();
    let mut named = Vec::new();
    for kind in &kinds {
        match register_builtin(Some(&mut generator), group, version, kind) {
            Some(name) => named.push((name, *kind)),
            None => named.push((builtin_schema_name(group, version, kind), *kind)),
        }
    }
    let mut schemas = generator.take_definitions(true);
    for (name, kind) in named {
        let schema = schemas.remove(&name).unwrap_or_else(permissive_schema);
        schemas.insert(name, with_gvk(schema, group, version, kind));
    }
    cache.lock().insert(key, schemas.clone());
    schemas
}

fn gvk(rt: &ResourceType, version: &str) -> Value {
    json!({ "group": rt.group, "version": version, "kind": rt.kind })
}

fn query_param(name: &str, description: &str) -> Value {
    json!({
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": "string", "uniqueItems": true},
    })
}

fn write_params() -> Vec<Value> {
    vec![
        query_param("dryRun", "When present, modifications are not persisted."),
        query_param("fieldManager", "Name of the actor making the change."),
        query_param(
            "fieldValidation",
            "How the server treats unknown or duplicate fields: Ignore, Warn or Strict.",
        ),
    ]
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

fn object_content(schema_name: &str) -> Value {
    json!({"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema_name}")}}})
}

fn operation(
    rt: &ResourceType,
    version: &str,
    action: &str,
    id: String,
    schema_name: &str,
) -> Value {
    let mut op = json!({
        "operationId": id,
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk(rt, version),
        "responses": {"200": {"description": "OK", "content": object_content(schema_name)}},
    });
    match action {
        "post" | "put" => {
            op["parameters"] = Value::Array(write_params());
            op["requestBody"] = json!({ "content": object_content(schema_name), "required": true });
        }
        "patch" => {
            let mut params = write_params();
            params.push(query_param(
                "force",
                "Force an apply request to take conflicting fields.",
            ));
            op["parameters"] = Value::Array(params);
            // Strategic merge patch is deliberately not offered: these
            // schemas lack its merge keys, so kubectl is better served by its
            // compiled-in type information for built-ins.
            let mut content = Map::new();
            for media in [
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ] {
                content.insert(media.into(), json!({"schema": {"type": "object"}}));
            }
            op["requestBody"] = json!({ "content": content, "required": true });
        }
        _ => {}
    }
    op
}

/// The REST paths of one kind, in kube-apiserver's layout.
fn add_paths(paths: &mut Map<String, Value>, rt: &ResourceType, version: &str, schema_name: &str) {
    let prefix = if rt.group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{}/{version}", rt.group)
    };
    let id_base = format!("{}{}", rt.kind, version);
    let (collection, mut params) = if rt.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{}", rt.plural),
            vec![path_param("namespace")],
        )
    } else {
        (format!("{prefix}/{}", rt.plural), Vec::new())
    };
    paths.insert(
        collection.clone(),
        json!({
            "parameters": params.clone(),
            "get": operation(rt, version, "list", format!("list{id_base}"), schema_name),
            "post": operation(rt, version, "post", format!("create{id_base}"), schema_name),
            "delete": operation(rt, version, "deletecollection", format!("deletecollection{id_base}"), schema_name),
        }),
    );
    if rt.namespaced {
        paths.insert(
            format!("{prefix}/{}", rt.plural),
            json!({"get": operation(rt, version, "list", format!("list{id_base}ForAllNamespaces"), schema_name)}),
        );
    }
    params.push(path_param("name"));
    let item =
        |suffix: &str, what: &str| {
            json!({
            "parameters": params.clone(),
            "get": operation(rt, version, "get", format!("read{id_base}{what}"), schema_name),
            "put": operation(rt, version, "put", format!("replace{id_base}{what}"), schema_name),
            "patch": operation(rt, version, "patch", format!("patch{id_base}{what}"), schema_name),
        })
        .as_object()
        .map(|o| (format!("{collection}/{{name}}{suffix}"), Value::Object(o.clone())))
        };
    if let Some((path, mut value)) = item("", "") {
        value["delete"] = operation(
            rt,
            version,
            "delete",
            format!("delete{id_base}"),
            schema_name,
        );
        paths.insert(path, value);
    }
    if rt.has_status(version)
        && let Some((path, value)) = item("/status", "Status")
    {
        paths.insert(path, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_schema_names_reverse_the_group() {
        assert_eq!(
            custom_schema_name("example.gpufleet.dev", "v1", "Widget"),
            "dev.gpufleet.example.v1.Widget"
        );
    }

    #[test]
    fn builtin_schemas_come_from_k8s_openapi_with_their_kind() {
        let rt = crate::resources::builtin_types()
            .into_iter()
            .find(|t| t.kind == "Pod")
            .map(Arc::new)
            .unwrap();
        let schemas = builtin_components("", "v1", &[&rt]);
        let pod = &schemas["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        // References resolve inside the same document.
        assert!(schemas.contains_key("io.k8s.api.core.v1.PodSpec"));
        assert!(schemas.contains_key(OBJECT_META));
        let spec_ref = pod.pointer("/properties/spec").unwrap().to_string();
        assert!(
            spec_ref.contains("#/components/schemas/io.k8s.api.core.v1.PodSpec"),
            "{spec_ref}"
        );
    }

    #[test]
    fn patch_operations_announce_server_side_field_validation() {
        let rt = crate::resources::builtin_types()
            .into_iter()
            .find(|t| t.kind == "ConfigMap")
            .unwrap();
        let mut paths = Map::new();
        add_paths(&mut paths, &rt, "v1", "io.k8s.api.core.v1.ConfigMap");
        let patch = &paths["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"fieldValidation"), "{names:?}");
    }
}
