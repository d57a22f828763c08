//! Protobuf bodies and answers over the HTTP API, as client-go sends and
//! reads them.

use bytes::Bytes;
use http_body_util::BodyExt;
use kube_sim::protobuf::{self, CONTENT_TYPE};
use serde_json::{Value, json};

use super::support::sim;

const PROTOBUF_FIRST: &str = "application/vnd.kubernetes.protobuf, application/json";

async fn send(
    client: &kube::Client,
    method: &str,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, String, Bytes) {
    send_accepting(client, method, uri, content_type, PROTOBUF_FIRST, body).await
}

async fn send_accepting(
    client: &kube::Client,
    method: &str,
    uri: &str,
    content_type: &str,
    accept: &str,
    body: Vec<u8>,
) -> (u16, String, Bytes) {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .header("accept", accept)
        .body(body)
        .expect("request builds");
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("request is answered");
    let code = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body reads")
        .to_bytes();
    (code, content_type, bytes)
}

fn configmap(name: &str) -> Vec<u8> {
    protobuf::encode_object(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": "pb"}},
        "data": {"k": "v"},
    }))
    .expect("encodes")
}

#[tokio::test]
async fn a_protobuf_create_get_and_list_are_answered_in_protobuf() {
    let sim = sim().await;
    let client = sim.client();
    let base = "/api/v1/namespaces/default/configmaps";
    let (code, content_type, body) =
        send(&client, "POST", base, CONTENT_TYPE, configmap("a")).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    assert_eq!(content_type, CONTENT_TYPE);
    let created = protobuf::decode_object(&body).expect("a protobuf answer");
    assert_eq!(created["metadata"]["name"], "a");
    assert_eq!(created["data"], json!({"k": "v"}));
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert!(created["metadata"]["creationTimestamp"].is_string());

    let (code, _, body) = send(
        &client,
        "GET",
        &format!("{base}/a"),
        CONTENT_TYPE,
        Vec::new(),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        protobuf::decode_object(&body).unwrap()["metadata"]["uid"],
        created["metadata"]["uid"]
    );

    let (code, content_type, body) = send(&client, "GET", base, CONTENT_TYPE, Vec::new()).await;
    assert_eq!((code, content_type.as_str()), (200, CONTENT_TYPE));
    let list = protobuf::decode_object(&body).unwrap();
    assert_eq!(list["kind"], "ConfigMapList");
    assert_eq!(list["items"][0]["metadata"]["name"], "a");

    // A missing object's Status comes in protobuf too.
    let (code, content_type, body) = send(
        &client,
        "GET",
        &format!("{base}/nope"),
        CONTENT_TYPE,
        Vec::new(),
    )
    .await;
    assert_eq!((code, content_type.as_str()), (404, CONTENT_TYPE));
    let status = protobuf::decode_object(&body).unwrap();
    assert_eq!(
        (status["kind"].as_str(), status["reason"].as_str()),
        (Some("Status"), Some("NotFound"))
    );
}

/// A write's protobuf answer is encoded from the object in memory, a
/// read's from the stored JSON text: both must give the same bytes.
#[tokio::test]
async fn every_write_answers_the_protobuf_bytes_a_read_of_the_object_gives() {
    let sim = sim().await;
    let client = sim.client();
    let base = "/api/v1/namespaces/default/configmaps";
    let one = format!("{base}/same");
    let read_back = || async {
        let (code, content_type, body) = send(&client, "GET", &one, CONTENT_TYPE, Vec::new()).await;
        assert_eq!((code, content_type.as_str()), (200, CONTENT_TYPE));
        body
    };
    let mut versions = Vec::new();
    let mut check = |what: &str, code: u16, content_type: &str, answer: &Bytes, read: &Bytes| {
        assert!(
            (200..300).contains(&code),
            "{what}: {code} {}",
            String::from_utf8_lossy(answer)
        );
        assert_eq!(content_type, CONTENT_TYPE, "{what}");
        assert_eq!(answer, read, "{what}: the answer is not what a read gives");
        let object = protobuf::decode_object(answer).expect("a protobuf answer");
        versions.push(object["metadata"]["resourceVersion"].clone());
        object
    };

    let (code, content_type, created) =
        send(&client, "POST", base, CONTENT_TYPE, configmap("same")).await;
    let object = check("create", code, &content_type, &created, &read_back().await);
    assert_eq!(object["data"], json!({"k": "v"}));
    // The writer's managedFields entry (a timestamp, fieldsV1) is answered too.
    assert!(object["metadata"]["managedFields"][0]["fieldsV1"].is_object());

    let mut replaced = object.clone();
    replaced["data"] = json!({"k": "v2", "binary-free": "é"});
    let (code, content_type, answer) = send(
        &client,
        "PUT",
        &one,
        CONTENT_TYPE,
        protobuf::encode_object(&replaced).unwrap(),
    )
    .await;
    let object = check("update", code, &content_type, &answer, &read_back().await);
    assert_eq!(object["data"]["k"], "v2");

    let (code, content_type, answer) = send(
        &client,
        "PATCH",
        &one,
        "application/merge-patch+json",
        br#"{"binaryData":{"raw":"AAEC"}}"#.to_vec(),
    )
    .await;
    let object = check(
        "merge patch",
        code,
        &content_type,
        &answer,
        &read_back().await,
    );
    assert_eq!(object["binaryData"]["raw"], "AAEC");

    let (code, content_type, answer) = send(
        &client,
        "PATCH",
        &format!("{one}?fieldManager=applier"),
        "application/apply-patch+yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: same\ndata:\n  applied: \"yes\"\n"
            .to_vec(),
    )
    .await;
    let object = check("apply", code, &content_type, &answer, &read_back().await);
    assert_eq!(object["data"]["applied"], "yes");

    // An update that changes nothing stores nothing: answered from the text.
    let (code, content_type, answer) = send(&client, "PUT", &one, CONTENT_TYPE, {
        let mut same = object.clone();
        same["apiVersion"] = json!("v1");
        same["kind"] = json!("ConfigMap");
        protobuf::encode_object(&same).unwrap()
    })
    .await;
    check(
        "no-op update",
        code,
        &content_type,
        &answer,
        &read_back().await,
    );
    let distinct: std::collections::BTreeSet<String> =
        versions.iter().map(Value::to_string).collect();
    assert_eq!(
        distinct.len(),
        4,
        "four writes stored, one did not: {versions:?}"
    );

    // A client that reads JSON gets the stored text, untouched.
    let (code, content_type, answer) = send_accepting(
        &client,
        "PATCH",
        &one,
        "application/merge-patch+json",
        "application/json",
        br#"{"data":{"k":"v3"}}"#.to_vec(),
    )
    .await;
    assert_eq!((code, content_type.as_str()), (200, "application/json"));
    let (_, _, read) =
        send_accepting(&client, "GET", &one, "", "application/json", Vec::new()).await;
    assert_eq!(answer, read);
}

#[tokio::test]
async fn a_protobuf_watch_streams_length_prefixed_frames() {
    let sim = sim().await;
    let client = sim.client();
    let base = "/api/v1/namespaces/default/configmaps";
    send(&client, "POST", base, CONTENT_TYPE, configmap("w")).await;
    let request = http::Request::builder()
        .method("GET")
        .uri(format!("{base}?watch=true&resourceVersion=0"))
        .header("accept", PROTOBUF_FIRST)
        .body(Vec::new())
        .unwrap();
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .unwrap();
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some(protobuf::WATCH_CONTENT_TYPE)
    );
    let mut body = response.into_body();
    let mut buffer = Vec::new();
    let frame = loop {
        if buffer.len() >= 4 {
            let len = u32::from_be_bytes(buffer[..4].try_into().unwrap()) as usize;
            if buffer.len() >= 4 + len {
                break buffer[4..4 + len].to_vec();
            }
        }
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), body.frame())
            .await
            .expect("a watch event within 10 s")
            .expect("the stream goes on")
            .expect("a frame");
        if let Ok(data) = chunk.into_data() {
            buffer.extend_from_slice(&data);
        }
    };
    let (event_type, object) = protobuf::decode_watch_frame(&frame).expect("a WatchEvent");
    assert_eq!(event_type, "ADDED");
    assert_eq!(object["metadata"]["name"], "w");
}

fn delete_options(uid: &str) -> Vec<u8> {
    protobuf::encode_object(&json!({
        "apiVersion": "v1", "kind": "DeleteOptions",
        "preconditions": {"uid": uid}, "gracePeriodSeconds": 0,
    }))
    .unwrap()
}

#[tokio::test]
async fn a_protobuf_delete_options_body_carries_its_uid_precondition() {
    let sim = sim().await;
    let client = sim.client();
    let base = "/api/v1/namespaces/default/configmaps";
    let (_, _, body) = send(&client, "POST", base, CONTENT_TYPE, configmap("d")).await;
    let uid = protobuf::decode_object(&body).unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _, body) = send(
        &client,
        "DELETE",
        &format!("{base}/d"),
        CONTENT_TYPE,
        delete_options("wrong"),
    )
    .await;
    assert_eq!(code, 409, "{}", String::from_utf8_lossy(&body));
    let status = protobuf::decode_object(&body).unwrap();
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Precondition failed"),
        "{status}"
    );
    let (code, _, _) = send(
        &client,
        "DELETE",
        &format!("{base}/d"),
        CONTENT_TYPE,
        delete_options(&uid),
    )
    .await;
    assert_eq!(code, 200);
    let (code, _, _) = send(
        &client,
        "GET",
        &format!("{base}/d"),
        CONTENT_TYPE,
        Vec::new(),
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn bad_protobuf_bodies_get_a_status_naming_the_problem_and_write_nothing() {
    let sim = sim().await;
    let client = sim.client();
    let base = "/api/v1/namespaces/default/configmaps";
    let good = configmap("bad");
    // ConfigMap { metadata { name "bad" }, field 99 = "x" } in the envelope.
    let mut raw = vec![0x0a, 0x05, 0x0a, 0x03];
    raw.extend(b"bad");
    raw.extend([0x9a, 0x06, 0x01, b'x']);
    let mut unknown_field = b"k8s\0".to_vec();
    unknown_field.extend([0x0a, 0x0f, 0x0a, 0x02]);
    unknown_field.extend(b"v1");
    unknown_field.extend([0x12, 0x09]);
    unknown_field.extend(b"ConfigMap");
    unknown_field.push(0x12);
    unknown_field.push(raw.len() as u8);
    unknown_field.extend(&raw);
    let mut wrong_kind = b"k8s\0".to_vec();
    wrong_kind.extend([0x0a, 0x0a, 0x0a, 0x02]);
    wrong_kind.extend(b"v1");
    wrong_kind.extend([0x12, 0x04]);
    wrong_kind.extend(b"Nope");
    wrong_kind.extend([0x12, 0x00]);
    let mut long_varint = b"k8s\0".to_vec();
    long_varint.push(0x08);
    long_varint.extend([0xff; 11]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", good[..good.len() - 10].to_vec(), "ends inside"),
        ("unknown field", unknown_field, "field number 99"),
        ("wrong kind", wrong_kind, "Nope"),
        ("oversized varint", long_varint, "varint"),
        ("no magic", b"{}".to_vec(), "magic"),
    ];
    for (what, body, expected) in cases {
        let (code, content_type, answer) = send(&client, "POST", base, CONTENT_TYPE, body).await;
        assert!((400..500).contains(&code), "{what}: {code}");
        let status: Value = if content_type == CONTENT_TYPE {
            protobuf::decode_object(&answer).unwrap()
        } else {
            serde_json::from_slice(&answer).unwrap()
        };
        let message = status["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{what}: {message}");
    }
    let (_, _, body) = send(&client, "GET", base, CONTENT_TYPE, Vec::new()).await;
    assert_eq!(
        protobuf::decode_object(&body).unwrap()["items"],
        Value::Null,
        "nothing was written"
    );
}

#[tokio::test]
async fn a_go_service_port_with_target_port_zero_targets_the_port() {
    let sim = sim().await;
    let client = sim.client();
    // What `corev1.ServicePort{Port: 8080}` marshals to: targetPort 0.
    let service = protobuf::encode_object(&json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 8080, "targetPort": 0}], "selector": {"app": "s"}},
    }))
    .unwrap();
    let (code, _, body) = send(
        &client,
        "POST",
        "/api/v1/namespaces/default/services",
        CONTENT_TYPE,
        service,
    )
    .await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&body));
    let created = protobuf::decode_object(&body).unwrap();
    assert_eq!(created["spec"]["ports"][0]["targetPort"], 8080);
}

#[tokio::test]
async fn a_custom_resource_protobuf_body_is_refused_with_415() {
    let sim = sim().await;
    let client = sim.client();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    let (code, _, body) = send(
        &client,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        CONTENT_TYPE,
        protobuf::encode_object(&crd).unwrap(),
    )
    .await;
    assert_eq!(
        code,
        201,
        "a CRD itself is a built-in kind: {}",
        String::from_utf8_lossy(&body)
    );
    let mut body = b"k8s\0".to_vec();
    body.extend([0x0a, 0x16, 0x0a, 0x0e]);
    body.extend(b"example.com/v1");
    body.extend([0x12, 0x06]);
    body.extend(b"Widget");
    body.extend([0x12, 0x00]);
    // The CRD is served once established; a 404 before that is retried.
    let mut code = 0;
    let mut answer = Bytes::new();
    for _ in 0..50 {
        (code, _, answer) = send(
            &client,
            "POST",
            "/apis/example.com/v1/namespaces/default/widgets",
            CONTENT_TYPE,
            body.clone(),
        )
        .await;
        if code != 404 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(code, 415, "{}", String::from_utf8_lossy(&answer));
}

/// What the store keeps of `object`, but what differs between any two
/// writes: name and uid (and the labels a Job derives from them), versions,
/// times and a Service's address.
fn comparable(object: Value) -> Value {
    let mut text = object.to_string();
    for (key, placeholder) in [("uid", "<uid>"), ("name", "<name>")] {
        if let Some(own) = object["metadata"][key].as_str() {
            text = text.replace(&format!("\"{own}\""), &format!("\"{placeholder}\""));
        }
    }
    let mut object: Value = serde_json::from_str(&text).expect("JSON");
    if let Some(spec) = object["spec"].as_object_mut() {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    if let Some(meta) = object["metadata"].as_object_mut() {
        for key in ["resourceVersion", "creationTimestamp"] {
            meta.remove(key);
        }
        if let Some(entries) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
            for entry in entries {
                entry.as_object_mut().map(|e| e.remove("time"));
            }
        }
    }
    object
}

#[tokio::test]
async fn a_protobuf_body_is_stored_as_the_same_json_body_is() {
    // A protobuf body skips the typed round trip a JSON body takes on its
    // way in: what is stored must not tell the two apart, for creates,
    // replaces and status writes, in release builds as in debug ones.
    let sim = sim().await;
    let client = sim.client();
    let objects = [
        (
            "/api/v1/namespaces/default/pods",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"app": "web"}},
                   "spec": {"schedulerName": "nobody", "containers": [
                       {"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 8080}],
                        "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}},
                        "env": [{"name": "A", "value": "1"}],
                        "readinessProbe": {"httpGet": {"path": "/", "port": 8080}}},
                       {"name": "sidecar", "image": "busybox", "command": ["sleep", "3600"]}],
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}),
        ),
        (
            "/apis/apps/v1/namespaces/default/deployments",
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {},
                   "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
        ),
        (
            "/api/v1/namespaces/default/services",
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {},
                   "spec": {"ports": [{"port": 80, "targetPort": "http"}], "selector": {"app": "web"}}}),
        ),
        (
            "/api/v1/namespaces/default/secrets",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {},
                   "data": {"token": "c2VjcmV0"}, "type": "Opaque"}),
        ),
        (
            "/apis/batch/v1/namespaces/default/jobs",
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {},
                   "spec": {"backoffLimit": 2, "template": {"spec": {
                       "containers": [{"name": "c", "image": "i"}], "restartPolicy": "Never"}}}}),
        ),
        (
            "/apis/coordination.k8s.io/v1/namespaces/default/leases",
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {},
                   "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                            "renewTime": "2026-12-07T10:00:00.250000Z"}}),
        ),
        (
            "/api/v1/namespaces/default/events",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {},
                   "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
                   "reason": "Started", "message": "m", "type": "Normal",
                   "eventTime": "2026-12-07T10:00:00.123456Z", "reportingComponent": "c",
                   "reportingInstance": "i", "action": "Start"}),
        ),
    ];
    let read = |url: String| {
        let client = client.clone();
        async move {
            let (code, _, body) = send_accepting(
                &client,
                "GET",
                &url,
                CONTENT_TYPE,
                "application/json",
                Vec::new(),
            )
            .await;
            assert_eq!(code, 200, "{url}: {}", String::from_utf8_lossy(&body));
            serde_json::from_slice::<Value>(&body).expect("JSON")
        }
    };
    for (base, object) in objects {
        let mut stored = Vec::new();
        for (name, protobuf_body) in [("by-json", false), ("by-protobuf", true)] {
            let mut object = object.clone();
            object["metadata"]["name"] = json!(name);
            let (content_type, body) = if protobuf_body {
                (
                    CONTENT_TYPE,
                    protobuf::encode_object(&object).expect("encodes"),
                )
            } else {
                (
                    "application/json",
                    serde_json::to_vec(&object).expect("encodes"),
                )
            };
            let (code, _, answer) = send(&client, "POST", base, content_type, body).await;
            assert_eq!(
                code,
                201,
                "{base} {name}: {}",
                String::from_utf8_lossy(&answer)
            );
            let created = read(format!("{base}/{name}")).await;
            // A replace with a label added, in the same encoding.
            let mut replaced = created.clone();
            replaced["metadata"]["labels"]["replaced"] = json!("yes");
            let body = if protobuf_body {
                protobuf::encode_object(&replaced).expect("encodes")
            } else {
                serde_json::to_vec(&replaced).expect("encodes")
            };
            let (code, _, answer) = send(
                &client,
                "PUT",
                &format!("{base}/{name}"),
                content_type,
                body,
            )
            .await;
            assert_eq!(
                code,
                200,
                "{base} {name} replace: {}",
                String::from_utf8_lossy(&answer)
            );
            stored.push((created, read(format!("{base}/{name}")).await));
        }
        let ((json_created, json_replaced), (pb_created, pb_replaced)) =
            (stored[0].clone(), stored[1].clone());
        assert_eq!(
            comparable(pb_created),
            comparable(json_created),
            "{base}: create"
        );
        assert_eq!(
            comparable(pb_replaced),
            comparable(json_replaced),
            "{base}: replace"
        );
    }
}

#[tokio::test]
async fn a_protobuf_body_keeps_a_field_newer_than_the_typed_form() {
    // PodSpec.hostnameOverride (Kubernetes 1.34) is in the protobuf schema
    // (1.37) but not in kube-sim's typed form (k8s-openapi's 1.33): the
    // protobuf body keeps it, as kube-apiserver 1.37 does; a JSON body
    // still loses it, with the unknown-field warning.
    let sim = sim().await;
    let client = sim.client();
    let base = "/api/v1/namespaces/default/pods";
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"hostnameOverride": "trainer", "schedulerName": "nobody",
                        "containers": [{"name": "c", "image": "i"}]}})
    };
    let body = protobuf::encode_object(&pod("by-protobuf")).expect("encodes");
    let (code, _, answer) = send(&client, "POST", base, CONTENT_TYPE, body).await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&answer));
    let stored = protobuf::decode_object(&answer).expect("a protobuf answer");
    assert_eq!(stored["spec"]["hostnameOverride"], "trainer");

    let body = serde_json::to_vec(&pod("by-json")).expect("encodes");
    let (code, _, answer) = send_accepting(
        &client,
        "POST",
        base,
        "application/json",
        "application/json",
        body,
    )
    .await;
    assert_eq!(code, 201, "{}", String::from_utf8_lossy(&answer));
    let stored: Value = serde_json::from_slice(&answer).expect("JSON");
    assert!(stored["spec"].get("hostnameOverride").is_none(), "{stored}");
}
