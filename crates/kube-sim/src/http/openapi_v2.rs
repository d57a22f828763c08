//! OpenAPI v2 (Swagger 2.0) at `/openapi/v2`: one document for every kind
//! served, in JSON or as gnostic's protobuf `openapi.v2.Document`.
//!
//! kubectl needs it for kinds whose OpenAPI v3 document has no PATCH
//! operation announcing server-side field validation (the review kinds):
//! it then validates on the client, with models client-go builds from the
//! protobuf form. The conformance suite's CustomResourcePublishOpenAPI specs
//! read the JSON form to see CRD schemas come and go.
//!
//! The document is the v3 group-version documents of openapi.rs, merged and
//! rewritten in v2 terms: v3's `requestBody`/`content` become body
//! parameters and response schemas, `#/components/schemas/` references
//! become `#/definitions/`, and schemas lose what kube-openapi's v2 models
//! cannot read, as kube-apiserver prunes CRD schemas for v2.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::AppState;
use super::openapi::{CRD_GROUP, INFO_VERSION};
use crate::error::ApiError;
use crate::store::Store;

/// The protobuf type client-go asks for. Its `@` is no token character, so
/// Go's `mime.ParseMediaType` (which client-go runs on every answer)
/// refuses it: kube-apiserver accepts it but answers with [`PROTOBUF`].
pub const PROTOBUF_REQUESTED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The protobuf type answered (and also accepted).
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

const GVK: &str = "x-kubernetes-group-version-kind";
const V3_REF_PREFIX: &str = "#/components/schemas/";
const V2_REF_PREFIX: &str = "#/definitions/";

/// The document in both encodings, with their entity tags.
struct Rendered {
    json: Bytes,
    json_etag: String,
    protobuf: Bytes,
    protobuf_etag: String,
}

/// The last rendering and the store state it was made from, so that
/// kubectl (which fetches the document for every command) does not pay
/// for building it each time.
#[derive(Default)]
pub struct Cache(Mutex<Option<(String, Arc<Rendered>)>>);

/// `GET /openapi/v2`
pub async fn document(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(encoding) = negotiate(&headers) else {
        return ApiError::not_acceptable(
            "only application/json and application/com.github.proto-openapi.spec.v2.v1.0+protobuf are served at /openapi/v2",
        )
        .into_response();
    };
    let rendered = rendered(&state);
    let (body, etag, content_type) = match encoding {
        Encoding::Json => (&rendered.json, &rendered.json_etag, "application/json"),
        Encoding::Protobuf => (&rendered.protobuf, &rendered.protobuf_etag, PROTOBUF),
    };
    let mut response = if matches_etag(&headers, etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut response = (StatusCode::OK, body.clone()).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    };
    let headers = response.headers_mut();
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{etag}\"")) {
        headers.insert(header::ETAG, etag);
    }
    headers.insert(header::VARY, HeaderValue::from_static("Accept"));
    // The document changes with CRDs: caches must revalidate (ETag).
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    Json,
    Protobuf,
}

/// The encoding the `Accept` header prefers (highest `q`, then first
/// listed); JSON when it names none; `None` when it names only types this
/// endpoint cannot produce.
fn negotiate(headers: &HeaderMap) -> Option<Encoding> {
    let mut ranges: Vec<(&str, f32)> = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().filter(|m| !m.is_empty())?;
            let quality = parts
                .filter_map(|p| p.strip_prefix("q="))
                .find_map(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            Some((media, quality))
        })
        .collect();
    if ranges.is_empty() {
        return Some(Encoding::Json);
    }
    // Stable: equal weights keep the client's order.
    ranges.sort_by(|a, b| b.1.total_cmp(&a.1));
    ranges
        .into_iter()
        .filter(|(_, quality)| *quality > 0.0)
        .find_map(|(media, _)| match media {
            PROTOBUF_REQUESTED | PROTOBUF => Some(Encoding::Protobuf),
            "application/json" | "application/*" | "*/*" => Some(Encoding::Json),
            _ => None,
        })
}

/// Whether `If-None-Match` names `etag` (or is `*`).
fn matches_etag(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().trim_start_matches("W/").trim_matches('"'))
        .any(|t| t == etag || t == "*")
}

fn rendered(state: &AppState) -> Arc<Rendered> {
    let key = store_key(&state.store);
    if let Some((cached_key, rendered)) = &*state.openapi_v2.0.lock()
        && *cached_key == key
    {
        return rendered.clone();
    }
    let doc = from_v3(&super::openapi::documents(&state.store, None));
    let json = Bytes::from(doc.to_string());
    let protobuf = Bytes::from(crate::protobuf::gnostic::encode_document(&doc));
    let rendered = Arc::new(Rendered {
        json_etag: bytes_hash(&json),
        protobuf_etag: bytes_hash(&protobuf),
        json,
        protobuf,
    });
    *state.openapi_v2.0.lock() = Some((key, rendered.clone()));
    rendered
}

fn bytes_hash(bytes: &[u8]) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    bytes.hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// What the document depends on beyond the binary: the custom kinds, their
/// served versions and their CRDs' resourceVersions.
fn store_key(store: &Store) -> String {
    let registry = store.registry();
    let crd_type = store.resolve(CRD_GROUP, "v1", "customresourcedefinitions");
    let mut parts: Vec<String> = registry
        .all()
        .filter(|rt| rt.custom)
        .map(|rt| {
            let crd_rv = crd_type
                .as_ref()
                .and_then(|crd| {
                    store
                        .get(crd, None, &format!("{}.{}", rt.plural, rt.group))
                        .ok()
                })
                .map_or(0, |crd| crd.rv);
            format!(
                "{}.{}/{}@{crd_rv}",
                rt.plural,
                rt.group,
                rt.versions.join(",")
            )
        })
        .collect();
    parts.sort_unstable();
    parts.join(" ")
}

/// The v2 document for the v3 group-version documents (keyed as in the
/// `/openapi/v3` index).
fn from_v3(documents: &BTreeMap<String, Value>) -> Value {
    let mut paths = Map::new();
    let mut definitions = Map::new();
    for doc in documents.values() {
        for (path, item) in doc
            .get("paths")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            paths.insert(path.clone(), path_item(item));
        }
        let schemas = doc
            .pointer("/components/schemas")
            .and_then(Value::as_object);
        for (name, schema) in schemas.into_iter().flatten() {
            add_definition(&mut definitions, name, definition(schema));
        }
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": INFO_VERSION},
        "paths": paths,
        "definitions": definitions,
    })
}

/// Adds a definition met in one group-version document; one met before
/// (shared types such as ObjectMeta) is kept, unless only the new one
/// names kinds.
fn add_definition(definitions: &mut Map<String, Value>, name: &str, schema: Value) {
    match definitions.get_mut(name) {
        None => {
            definitions.insert(name.to_string(), schema);
        }
        Some(existing) => {
            let Some(new_kinds) = schema.get(GVK).and_then(Value::as_array).cloned() else {
                return;
            };
            match existing.get_mut(GVK).and_then(Value::as_array_mut) {
                Some(kinds) => {
                    for kind in new_kinds {
                        if !kinds.contains(&kind) {
                            kinds.push(kind);
                        }
                    }
                }
                None => *existing = schema,
            }
        }
    }
}

/// A top-level definition. A kind whose root keeps unknown fields is
/// published as a bare object, as kube-apiserver does: any listed
/// property would make kubectl reject every field not listed.
fn definition(schema: &Value) -> Value {
    let Some(kinds) = schema.get(GVK) else {
        return convert_schema(schema);
    };
    if schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
        return json!({"type": "object", GVK: kinds});
    }
    let mut converted = convert_schema(schema);
    // k8s-openapi lists a kind's `metadata` as required (its Rust field is
    // not optional); kube-apiserver does not, and kubectl would refuse a
    // manifest without one (a TokenReview has none).
    if let Some(object) = converted.as_object_mut()
        && let Some(Value::Array(required)) = object.get_mut("required")
    {
        required.retain(|field| field != "metadata");
        if required.is_empty() {
            object.remove("required");
        }
    }
    converted
}

/// Schema keywords Swagger 2.0 has (vendor extensions `x-…` pass too).
const V2_KEYWORDS: &[&str] = &[
    "$ref",
    "format",
    "title",
    "description",
    "default",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "required",
    "enum",
    "additionalProperties",
    "type",
    "items",
    "properties",
    "readOnly",
    "example",
];

/// Types kube-openapi's v2 models read; any other makes the whole
/// document unreadable to kubectl.
const V2_TYPES: &[&str] = &["object", "array", "string", "integer", "number", "boolean"];

/// One v3 schema (and everything inside it) in v2 form.
fn convert_schema(schema: &Value) -> Value {
    let Some(object) = schema.as_object() else {
        // `true`/`false` schemas: v2 has no such thing; allow anything.
        return json!({});
    };
    let mut out = Map::new();
    for (key, value) in object {
        match key.as_str() {
            "$ref" => {
                if let Some(reference) = value.as_str() {
                    out.insert(key.clone(), Value::String(v2_ref(reference)));
                }
            }
            // schemars puts a reference with a description beside it in a
            // one-element allOf; v2 (like kube-apiserver's) keeps both in
            // one schema. Other allOf lists are dropped, as for CRDs.
            "allOf" => {
                if let Some([only]) = value.as_array().map(Vec::as_slice)
                    && let Some(reference) = only.get("$ref").and_then(Value::as_str)
                {
                    out.insert("$ref".into(), Value::String(v2_ref(reference)));
                }
            }
            "type" => {
                let kind = match value {
                    Value::String(one) => Some(one.as_str()),
                    // A type list names one type besides "null" at most
                    // in what kube-sim serves; more cannot be said in v2.
                    Value::Array(many) => {
                        let named: Vec<&str> = many
                            .iter()
                            .filter_map(Value::as_str)
                            .filter(|t| *t != "null")
                            .collect();
                        match named.as_slice() {
                            [one] => Some(*one),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                if let Some(kind) = kind.filter(|k| V2_TYPES.contains(k)) {
                    out.insert(key.clone(), Value::String(kind.to_string()));
                }
            }
            "properties" => {
                let properties: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(name, sub)| (name.clone(), convert_schema(sub)))
                    .collect();
                out.insert(key.clone(), Value::Object(properties));
            }
            "items" => {
                let item = match value {
                    Value::Array(tuple) => tuple.first(),
                    single => Some(single),
                };
                if let Some(item) = item {
                    out.insert(key.clone(), convert_schema(item));
                }
            }
            "additionalProperties" => {
                let converted = match value {
                    Value::Bool(_) => value.clone(),
                    sub => convert_schema(sub),
                };
                out.insert(key.clone(), converted);
            }
            k if k.starts_with("x-") || V2_KEYWORDS.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            // nullable, oneOf, anyOf, not, writeOnly, deprecated, …
            _ => {}
        }
    }
    prune_for_kubectl(object, &mut out);
    Value::Object(out)
}

/// kube-apiserver's v2 pruning of CRD schemas (also harmless for
/// built-ins): values that may be null, keep unknown fields or embed an
/// object lose their type and structure, so kubectl accepts what the
/// server accepts; an int-or-string loses its type.
fn prune_for_kubectl(original: &Map<String, Value>, out: &mut Map<String, Value>) {
    let flag = |name: &str| original.get(name) == Some(&Value::Bool(true));
    if flag("nullable")
        || flag("x-kubernetes-preserve-unknown-fields")
        || flag("x-kubernetes-embedded-resource")
    {
        out.remove("type");
        out.remove("items");
        out.remove("properties");
    }
    if flag("x-kubernetes-int-or-string") {
        out.remove("type");
    }
    // An array needs its item schema in kube-openapi's models.
    if out.get("type").and_then(Value::as_str) == Some("array") && !out.contains_key("items") {
        out.remove("type");
    }
}

fn v2_ref(reference: &str) -> String {
    match reference.strip_prefix(V3_REF_PREFIX) {
        Some(name) => format!("{V2_REF_PREFIX}{name}"),
        None => reference.to_string(),
    }
}

fn path_item(item: &Value) -> Value {
    let mut out = Map::new();
    for (key, value) in item.as_object().into_iter().flatten() {
        match key.as_str() {
            "parameters" => {
                out.insert(key.clone(), parameters(value));
            }
            "get" | "put" | "post" | "delete" | "patch" | "head" | "options" => {
                out.insert(key.clone(), operation(value));
            }
            k if k.starts_with("x-") => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}

/// v3 parameters (type in a `schema`) as v2 non-body parameters.
fn parameters(list: &Value) -> Value {
    let converted = list.as_array().into_iter().flatten().map(|param| {
        let mut out = Map::new();
        for key in ["name", "in", "description", "required"] {
            if let Some(value) = param.get(key) {
                out.insert(key.into(), value.clone());
            }
        }
        let schema = param.get("schema");
        let kind = schema
            .and_then(|s| s.get("type"))
            .cloned()
            .unwrap_or_else(|| json!("string"));
        out.insert("type".into(), kind);
        if let Some(unique) = schema.and_then(|s| s.get("uniqueItems")) {
            out.insert("uniqueItems".into(), unique.clone());
        }
        Value::Object(out)
    });
    Value::Array(converted.collect())
}

fn operation(op: &Value) -> Value {
    let mut out = Map::new();
    for (key, value) in op.as_object().into_iter().flatten() {
        if key.starts_with("x-") || matches!(key.as_str(), "operationId" | "description" | "tags") {
            out.insert(key.clone(), value.clone());
        }
    }
    let mut params = op.get("parameters").map(parameters).unwrap_or(json!([]));
    if let Some(body) = op.get("requestBody") {
        let content = body.get("content").and_then(Value::as_object);
        out.insert(
            "consumes".into(),
            json!(
                content
                    .into_iter()
                    .flatten()
                    .map(|(m, _)| m)
                    .collect::<Vec<_>>()
            ),
        );
        if let Some(list) = params.as_array_mut() {
            list.push(json!({
                "name": "body",
                "in": "body",
                "required": body.get("required").cloned().unwrap_or(json!(true)),
                "schema": content_schema(content),
            }));
        }
    }
    out.insert("parameters".into(), params);
    let mut produces: Vec<String> = Vec::new();
    let mut responses = Map::new();
    for (code, response) in op
        .get("responses")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let content = response.get("content").and_then(Value::as_object);
        for media in content.into_iter().flatten().map(|(m, _)| m) {
            if !produces.contains(media) {
                produces.push(media.clone());
            }
        }
        let mut converted = json!({
            "description": response.get("description").cloned().unwrap_or(json!("")),
        });
        if content.is_some_and(|c| !c.is_empty()) {
            converted["schema"] = content_schema(content);
        }
        responses.insert(code.clone(), converted);
    }
    if !produces.is_empty() {
        out.insert("produces".into(), json!(produces));
    }
    out.insert("responses".into(), Value::Object(responses));
    Value::Object(out)
}

/// The schema of a v3 `content` map (every media type carries the same
/// one in what openapi.rs builds), in v2 form.
fn content_schema(content: Option<&Map<String, Value>>) -> Value {
    content
        .and_then(|c| c.values().find_map(|media| media.get("schema")))
        .map_or_else(|| json!({"type": "object"}), convert_schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn json_is_the_default_and_protobuf_is_served_when_asked_for() {
        assert_eq!(negotiate(&headers(&[])), Some(Encoding::Json));
        assert_eq!(
            negotiate(&headers(&[("accept", "application/json, */*")])),
            Some(Encoding::Json)
        );
        assert_eq!(
            negotiate(&headers(&[("accept", PROTOBUF_REQUESTED)])),
            Some(Encoding::Protobuf)
        );
        assert_eq!(
            negotiate(&headers(&[(
                "accept",
                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf, application/json"
            )])),
            Some(Encoding::Protobuf)
        );
        assert_eq!(negotiate(&headers(&[("accept", "text/html")])), None);
        // Weights outrank order; a zero weight refuses the type.
        assert_eq!(
            negotiate(&headers(&[(
                "accept",
                "application/json;q=0.5, application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
            )])),
            Some(Encoding::Protobuf)
        );
        assert_eq!(
            negotiate(&headers(&[("accept", "application/json;q=0, text/html")])),
            None
        );
    }

    #[test]
    fn if_none_match_compares_quoted_tags() {
        let h = headers(&[("if-none-match", "\"OTHER\", \"ABC\"")]);
        assert!(matches_etag(&h, "ABC"));
        assert!(!matches_etag(&h, "ABD"));
        assert!(!matches_etag(&headers(&[]), "ABC"));
    }

    #[test]
    fn single_ref_allof_becomes_a_ref_with_its_description() {
        let v3 = json!({
            "description": "Standard object's metadata.",
            "allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}],
        });
        assert_eq!(
            convert_schema(&v3),
            json!({
                "description": "Standard object's metadata.",
                "$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
            })
        );
    }

    #[test]
    fn v3_only_keywords_are_dropped_and_crd_pruning_applies() {
        let v3 = json!({
            "type": "object",
            "properties": {
                "choice": {"oneOf": [{"type": "string"}, {"type": "integer"}], "description": "c"},
                "maybe": {"type": "object", "nullable": true, "properties": {"a": {"type": "string"}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {}}},
                "port": {"x-kubernetes-int-or-string": true, "type": "string", "anyOf": [{"type": "integer"}]},
                "list": {"type": "array"},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "writeOnly": true},
            },
        });
        assert_eq!(
            convert_schema(&v3),
            json!({
                "type": "object",
                "properties": {
                    "choice": {"description": "c"},
                    "maybe": {},
                    "free": {"x-kubernetes-preserve-unknown-fields": true},
                    "port": {"x-kubernetes-int-or-string": true},
                    "list": {},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
                },
            })
        );
    }

    #[test]
    fn a_kind_keeping_unknown_fields_at_its_root_is_a_bare_object() {
        let gvk = json!([{"group": "g", "version": "v1", "kind": "K"}]);
        let v3 = json!({
            "type": "object",
            "description": "anything goes",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"spec": {"type": "object"}},
            GVK: gvk,
        });
        assert_eq!(definition(&v3), json!({"type": "object", GVK: gvk}));
    }

    #[test]
    fn a_kind_does_not_require_metadata() {
        let gvk = json!([{"group": "", "version": "v1", "kind": "K"}]);
        let only_metadata = json!({"type": "object", "required": ["metadata"], GVK: gvk});
        assert_eq!(
            definition(&only_metadata),
            json!({"type": "object", GVK: gvk})
        );
        let with_spec = json!({"type": "object", "required": ["metadata", "spec"], GVK: gvk});
        assert_eq!(definition(&with_spec)["required"], json!(["spec"]));
        // Types that are no kind keep their list.
        let part = json!({"type": "object", "required": ["metadata"]});
        assert_eq!(definition(&part)["required"], json!(["metadata"]));
    }

    #[test]
    fn operations_take_body_parameters_and_response_schemas() {
        let v3 = json!({
            "operationId": "createThing",
            "x-kubernetes-action": "post",
            "parameters": [{"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}}],
            "requestBody": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/T"}}}, "required": true},
            "responses": {"201": {"description": "Created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/T"}}}}},
        });
        assert_eq!(
            operation(&v3),
            json!({
                "operationId": "createThing",
                "x-kubernetes-action": "post",
                "consumes": ["application/json"],
                "produces": ["application/json"],
                "parameters": [
                    {"name": "dryRun", "in": "query", "type": "string", "uniqueItems": true},
                    {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/T"}},
                ],
                "responses": {"201": {"description": "Created", "schema": {"$ref": "#/definitions/T"}}},
            })
        );
    }

    #[test]
    fn a_shared_definition_keeps_every_kind_it_names() {
        let mut definitions = Map::new();
        add_definition(&mut definitions, "M", json!({"type": "object"}));
        add_definition(
            &mut definitions,
            "M",
            json!({"type": "object", GVK: [{"kind": "A"}]}),
        );
        add_definition(
            &mut definitions,
            "M",
            json!({"type": "object", GVK: [{"kind": "B"}]}),
        );
        add_definition(&mut definitions, "M", json!({"type": "object"}));
        assert_eq!(definitions["M"][GVK], json!([{"kind": "A"}, {"kind": "B"}]));
    }
}
