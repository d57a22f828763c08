//! `/openapi/v2`: the Swagger 2.0 document kubectl validates review kinds
//! with on the client (as gnostic protobuf) and the conformance suite reads
//! CRD schemas from (as JSON).

use std::collections::BTreeSet;

use kube_sim::KubeSim;
use serde_json::{Value, json};

use crate::support::sim;

const PROTOBUF_ASKED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
const PROTOBUF_ANSWERED: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

struct Answer {
    status: u16,
    content_type: String,
    etag: String,
    body: Vec<u8>,
}

async fn get(client: &kube::Client, uri: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = http::Request::builder().method("GET").uri(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Vec::new()).unwrap();
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (status, content_type, etag) = (
        response.status().as_u16(),
        header("content-type"),
        header("etag"),
    );
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Answer {
        status,
        content_type,
        etag,
        body,
    }
}

async fn document(client: &kube::Client) -> Value {
    let answer = get(client, "/openapi/v2", &[]).await;
    assert_eq!(answer.status, 200);
    serde_json::from_slice(&answer.body).unwrap()
}

#[tokio::test]
async fn json_by_default_protobuf_on_request_and_304_for_a_current_etag() {
    let sim = sim().await;
    let client = sim.client();
    let json_answer = get(&client, "/openapi/v2", &[]).await;
    assert_eq!(json_answer.status, 200);
    assert_eq!(json_answer.content_type, "application/json");
    let doc: Value = serde_json::from_slice(&json_answer.body).unwrap();
    assert_eq!(doc["swagger"], "2.0");
    assert!(json_answer.etag.starts_with('"') && json_answer.etag.len() > 2);

    let explicit = get(&client, "/openapi/v2", &[("accept", "application/json")]).await;
    assert_eq!(explicit.etag, json_answer.etag);

    let proto = get(&client, "/openapi/v2", &[("accept", PROTOBUF_ASKED)]).await;
    assert_eq!(proto.status, 200);
    // The type client-go asks for has an `@` Go's mime parser refuses; the
    // answer carries the dotted spelling kube-apiserver answers with.
    assert_eq!(proto.content_type, PROTOBUF_ANSWERED);
    assert_ne!(proto.etag, json_answer.etag);
    // Document.swagger (field 1) comes first: 0a 03 "2.0".
    assert_eq!(&proto.body[..5], b"\x0a\x032.0");

    let unchanged = get(
        &client,
        "/openapi/v2",
        &[("if-none-match", json_answer.etag.as_str())],
    )
    .await;
    assert_eq!(unchanged.status, 304);
    assert!(unchanged.body.is_empty());
    assert_eq!(unchanged.etag, json_answer.etag);
    // The JSON tag does not validate the protobuf representation.
    let other = get(
        &client,
        "/openapi/v2",
        &[
            ("accept", PROTOBUF_ASKED),
            ("if-none-match", json_answer.etag.as_str()),
        ],
    )
    .await;
    assert_eq!(other.status, 200);

    let refused = get(&client, "/openapi/v2", &[("accept", "text/html")]).await;
    assert_eq!(refused.status, 406);
}

/// Every kind discovery lists, by (group, version, kind).
async fn discovered_kinds(client: &kube::Client) -> BTreeSet<(String, String, String)> {
    let (_, core) = crate::support::raw(client, "GET", "/api/v1", "", b"").await;
    let mut lists = vec![("".to_string(), "v1".to_string(), core)];
    let (_, groups) = crate::support::raw(client, "GET", "/apis", "", b"").await;
    for group in groups["groups"].as_array().unwrap() {
        for version in group["versions"].as_array().unwrap() {
            let gv = version["groupVersion"].as_str().unwrap();
            let (_, list) =
                crate::support::raw(client, "GET", &format!("/apis/{gv}"), "", b"").await;
            lists.push((
                group["name"].as_str().unwrap().to_string(),
                version["version"].as_str().unwrap().to_string(),
                list,
            ));
        }
    }
    let mut kinds = BTreeSet::new();
    for (group, version, list) in lists {
        for resource in list["resources"].as_array().unwrap() {
            let name = resource["name"].as_str().unwrap();
            if !name.contains('/') {
                let kind = resource["kind"].as_str().unwrap().to_string();
                kinds.insert((group.clone(), version.clone(), kind));
            }
        }
    }
    kinds
}

/// The (group, version, kind) triples each definition names, by definition.
fn kinds_by_definition(doc: &Value) -> Vec<(String, (String, String, String))> {
    let mut named = Vec::new();
    for (name, schema) in doc["definitions"].as_object().unwrap() {
        for gvk in schema["x-kubernetes-group-version-kind"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let field = |k: &str| gvk[k].as_str().unwrap().to_string();
            named.push((
                name.clone(),
                (field("group"), field("version"), field("kind")),
            ));
        }
    }
    named
}

fn refs<'a>(value: &'a Value, found: &mut Vec<&'a str>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                found.push(target);
            }
            map.values().for_each(|v| refs(v, found));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
        _ => {}
    }
}

async fn install_widgets(sim: &KubeSim) {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.v2.gpufleet.dev"},
        "spec": {
            "group": "v2.gpufleet.dev",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {
                     "type": "object",
                     "description": "A widget.",
                     "properties": {"spec": {"type": "object", "properties": {
                         "size": {"type": "integer"},
                         "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                         "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                     }}},
                 }}},
                {"name": "v2", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            ],
        },
    });
    let (code, body) = crate::support::raw(
        &sim.client(),
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        crd.to_string().as_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

#[tokio::test]
async fn every_served_kind_has_one_definition_and_every_reference_resolves() {
    let sim = sim().await;
    install_widgets(&sim).await;
    let client = sim.client();
    let doc = document(&client).await;
    let definitions = doc["definitions"].as_object().unwrap();
    let named = kinds_by_definition(&doc);
    for kind in discovered_kinds(&client).await {
        let holders: Vec<&String> = named
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(name, _)| name)
            .collect();
        assert_eq!(holders.len(), 1, "{kind:?} is named by {holders:?}");
    }
    // The review kinds are among them (discovery lists them as create-only).
    assert!(named.iter().any(|(name, (g, _, k))| {
        name == "io.k8s.api.authentication.v1.TokenReview"
            && g == "authentication.k8s.io"
            && k == "TokenReview"
    }));
    let mut found = Vec::new();
    refs(&doc, &mut found);
    assert!(found.len() > 100, "only {} references", found.len());
    for target in found {
        let name = target.strip_prefix("#/definitions/").unwrap_or_else(|| {
            panic!("{target} is not a v2 definition reference");
        });
        assert!(definitions.contains_key(name), "{target} does not resolve");
    }
    // v3-only keywords are gone from every schema.
    let mut keywords = BTreeSet::new();
    for schema in definitions.values() {
        schema_keywords(schema, &mut keywords);
    }
    for keyword in ["nullable", "oneOf", "anyOf", "not", "allOf"] {
        assert!(
            !keywords.contains(keyword),
            "{keyword} is still used: {keywords:?}"
        );
    }
    assert!(keywords.contains("$ref") && keywords.contains("additionalProperties"));
}

/// The keywords a schema and its subschemas use (property names are not
/// keywords; extension and example values are not schemas).
fn schema_keywords<'a>(schema: &'a Value, found: &mut BTreeSet<&'a str>) {
    let Some(object) = schema.as_object() else {
        return;
    };
    for (key, value) in object {
        found.insert(key);
        match key.as_str() {
            "properties" => value
                .as_object()
                .into_iter()
                .flatten()
                .for_each(|(_, sub)| schema_keywords(sub, found)),
            "items" | "additionalProperties" => schema_keywords(value, found),
            "allOf" | "oneOf" | "anyOf" => value
                .as_array()
                .into_iter()
                .flatten()
                .for_each(|sub| schema_keywords(sub, found)),
            _ => {}
        }
    }
}

#[tokio::test]
async fn crd_schemas_are_pruned_for_v2_as_kube_apiserver_prunes_them() {
    let sim = sim().await;
    let client = sim.client();
    let before = get(&client, "/openapi/v2", &[]).await;
    install_widgets(&sim).await;
    let after = get(
        &client,
        "/openapi/v2",
        &[("if-none-match", before.etag.as_str())],
    )
    .await;
    assert_eq!(
        after.status, 200,
        "a new CRD changes the document and its tag"
    );
    assert_ne!(after.etag, before.etag);
    let doc: Value = serde_json::from_slice(&after.body).unwrap();
    let v1 = &doc["definitions"]["dev.gpufleet.v2.v1.Widget"];
    assert_eq!(v1["description"], "A widget.");
    assert_eq!(
        v1["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    let spec = &v1["properties"]["spec"]["properties"];
    assert_eq!(spec["size"], json!({"type": "integer"}));
    assert_eq!(spec["port"], json!({"x-kubernetes-int-or-string": true}));
    assert_eq!(
        spec["extra"],
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    // A root keeping unknown fields: a bare object, so kubectl allows any field.
    assert_eq!(
        doc["definitions"]["dev.gpufleet.v2.v2.Widget"],
        json!({"type": "object", "x-kubernetes-group-version-kind": [
            {"group": "v2.gpufleet.dev", "version": "v2", "kind": "Widget"}
        ]})
    );
    // Operations name their kind, and PATCH announces fieldValidation.
    let patch =
        &doc["paths"]["/apis/v2.gpufleet.dev/v1/namespaces/{namespace}/widgets/{name}"]["patch"];
    assert_eq!(patch["x-kubernetes-action"], "patch");
    assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Widget");
    assert!(
        patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query" && p["type"] == "string"),
        "{patch}"
    );

    // A version no longer served leaves the document.
    let (code, body) = crate::support::raw(
        &client,
        "PATCH",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.v2.gpufleet.dev",
        "application/json-patch+json",
        br#"[{"op":"replace","path":"/spec/versions/1/served","value":false}]"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let doc = document(&client).await;
    assert!(doc["definitions"]["dev.gpufleet.v2.v1.Widget"].is_object());
    assert!(
        doc["definitions"]
            .get("dev.gpufleet.v2.v2.Widget")
            .is_none()
    );
}
