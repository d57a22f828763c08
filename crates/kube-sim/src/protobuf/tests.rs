//! The table is checked against k8s-pb's own prost types: an object is
//! encoded by kube-sim, decoded and re-encoded by prost, and decoded by
//! kube-sim again; a wrong field number, wire type or nesting in the table
//! breaks the round trip.

use prost::Message as _;
use serde_json::{Value, json};

use super::*;

fn envelope_raw(body: &[u8]) -> (k8s_pb::apimachinery::pkg::runtime::Unknown, Vec<u8>) {
    assert_eq!(&body[..4], MAGIC);
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&body[4..]).unwrap();
    let raw = unknown.raw.clone().unwrap_or_default();
    (unknown, raw)
}

/// Encodes `object`, has prost decode it as `M` and encode it again, and
/// decodes that with kube-sim: the object must come back unchanged. The
/// one-pass encoder from JSON text must give the same object too.
fn round_trip<M: prost::Message + Default>(object: Value) -> M {
    let text = serde_json::to_vec(&object).unwrap();
    let streamed =
        encode_json_object(&text).unwrap_or_else(|e| panic!("encode from JSON text: {e}"));
    assert_eq!(
        encode_object_in_memory(&object, text.len()).unwrap(),
        streamed,
        "the encoding from memory must be the text's, byte for byte"
    );
    let (_, raw) = envelope_raw(&streamed);
    M::decode(raw.as_slice())
        .unwrap_or_else(|e| panic!("prost decode of the one-pass encoding: {e}"));
    assert_eq!(
        decode_object(&streamed).unwrap(),
        object,
        "the one-pass encoding"
    );
    let body = encode_object(&object).unwrap_or_else(|e| panic!("encode: {e}"));
    let (mut unknown, raw) = envelope_raw(&body);
    let typed = M::decode(raw.as_slice()).unwrap_or_else(|e| panic!("prost decode: {e}"));
    unknown.raw = Some(typed.encode_to_vec());
    let mut again = MAGIC.to_vec();
    again.extend(unknown.encode_to_vec());
    let back = decode_object(&again).unwrap_or_else(|e| panic!("decode: {e}"));
    assert_eq!(back, object);
    typed
}

fn meta(name: &str) -> Value {
    json!({
        "name": name, "namespace": "team-a", "uid": "0b1a7b5e-6a43-4bd6-a2c6-1f6f3e0c0d11",
        "resourceVersion": "42", "generation": 3,
        "creationTimestamp": "2026-12-03T06:00:00Z",
        "labels": {"app": "web", "empty": ""},
        "annotations": {"note": "a b"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                             "uid": "9c9f7c55-0000-4000-8000-000000000001",
                             "controller": true, "blockOwnerDeletion": false}],
        "finalizers": ["example.com/keep"],
        "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                           "time": "2026-12-03T06:00:01Z", "fieldsType": "FieldsV1",
                           "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}],
    })
}

#[test]
fn a_pod_with_inline_probes_volumes_quantities_and_zero_pointers_round_trips_through_k8s_pb() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": meta("web-0"),
        "spec": {
            "containers": [{
                "name": "app", "image": "nginx:1.27", "command": ["sleep"], "args": ["60"],
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k", "optional": false}}}],
                "resources": {"limits": {"cpu": "500m", "nvidia.com/gpu": "4"}, "requests": {"memory": "1Gi"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 1},
                "securityContext": {"runAsUser": 0, "privileged": false, "readOnlyRootFilesystem": true},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {"name": "cfg", "configMap": {"name": "cm", "defaultMode": 420}},
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}],
            "nodeSelector": {"gpu": "true"},
        },
        "status": {
            "phase": "Running", "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}],
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-03T06:00:02Z"}],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "nginx:1.27",
                                   "imageID": "", "state": {"running": {"startedAt": "2026-12-03T06:00:02Z"}}}],
        },
    });
    // imageID is not omitempty in Go, so its empty string stays.
    let typed: k8s_pb::api::core::v1::Pod = round_trip(pod);
    let spec = typed.spec.unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(0));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let probe = spec.containers[0].liveness_probe.clone().unwrap();
    assert_eq!(
        probe.handler.unwrap().http_get.unwrap().path.as_deref(),
        Some("/healthz")
    );
}

#[test]
fn workloads_services_rbac_and_leases_round_trip_through_k8s_pb() {
    round_trip::<k8s_pb::api::apps::v1::Deployment>(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web"),
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"},
                 "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
                 "revisionHistoryLimit": 10},
        "status": {"replicas": 1, "conditions": [{"type": "Available", "status": "True",
                   "lastUpdateTime": "2026-12-03T06:00:00Z", "lastTransitionTime": "2026-12-03T06:00:00Z"}]},
    }));
    round_trip::<k8s_pb::api::core::v1::Service>(json!({
        "apiVersion": "v1", "kind": "Service", "metadata": meta("svc"),
        "spec": {"ports": [{"name": "a", "port": 80, "targetPort": 8080, "protocol": "TCP"},
                           {"name": "b", "port": 81, "targetPort": "http", "nodePort": 30081}],
                 "selector": {"app": "web"}, "clusterIP": "None", "clusterIPs": ["None"],
                 "type": "ClusterIP", "publishNotReadyAddresses": true, "ipFamilies": ["IPv4"]},
    }));
    round_trip::<k8s_pb::api::rbac::v1::ClusterRole>(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]},
                  {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}],
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]},
    }));
    round_trip::<k8s_pb::api::coordination::v1::Lease>(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader", "namespace": "kube-system"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "leaseTransitions": 0,
                 "acquireTime": "2026-12-03T06:00:00.123456Z", "renewTime": "2026-12-03T06:00:05.000001Z"},
    }));
    round_trip::<k8s_pb::api::batch::v1::Job>(json!({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 0, "suspend": false,
                 "template": {"spec": {"containers": [{"name": "pi", "image": "perl"}], "restartPolicy": "Never"}}},
    }));
    round_trip::<k8s_pb::api::core::v1::Secret>(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
        "data": {"tls.crt": "AAEC", "empty": ""}, "stringData": {"x": "y"}, "type": "kubernetes.io/tls", "immutable": true,
    }));
    round_trip::<k8s_pb::api::core::v1::Node>(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule", "timeAdded": "2026-12-03T06:00:00Z"}], "unschedulable": true},
        "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64"}, "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                   "nodeInfo": {"machineID": "m", "systemUUID": "s", "bootID": "b", "kernelVersion": "k", "osImage": "o",
                                "containerRuntimeVersion": "c", "kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
                                "operatingSystem": "linux", "architecture": "amd64"}},
    }));
    round_trip::<k8s_pb::api::core::v1::Event>(json!({
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
        "reason": "Created", "message": "Created pods: a, b", "count": 2, "type": "Normal",
        "firstTimestamp": "2026-12-03T06:00:00Z", "eventTime": "2026-12-03T06:00:00.500000Z",
        "source": {"component": "tfjob"}, "reportingComponent": "tfjob", "reportingInstance": "",
    }));
}

#[test]
fn a_crd_schema_with_unions_defaults_and_extensions_round_trips_through_k8s_pb() {
    round_trip::<
        k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "tfjobs.kubeflow.org"},
        "spec": {
            "group": "kubeflow.org", "scope": "Namespaced",
            "names": {"plural": "tfjobs", "singular": "tfjob", "kind": "TFJob", "listKind": "TFJobList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "State", "type": "string", "jsonPath": ".status.conditions[-1:].type"}],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "spec": {"type": "object", "additionalProperties": false,
                                 "properties": {"replicas": {"type": "integer", "minimum": 0.0, "default": 1},
                                                "mode": {"type": "string", "enum": ["a", "b"]},
                                                "tags": {"type": "array", "items": {"type": "string"},
                                                         "x-kubernetes-list-type": "set"},
                                                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
                        "status": {"type": "object", "x-kubernetes-validations": [{"rule": "self.x > 0", "message": "m"}]},
                    },
                    "required": ["spec"],
                }},
            }],
        },
    }));
}

#[test]
fn reviews_and_delete_options_round_trip_through_k8s_pb() {
    round_trip::<k8s_pb::api::authentication::v1::TokenReview>(json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "metadata": {},
        "spec": {"token": "abc", "audiences": ["https://kubernetes.default.svc"]},
        "status": {"authenticated": true, "user": {"username": "admin", "groups": ["system:masters"],
                   "extra": {"scopes": ["a", "b"]}}},
    }));
    round_trip::<k8s_pb::api::authorization::v1::SubjectAccessReview>(json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
        "spec": {"user": "u", "groups": ["g"], "extra": {"k": ["v"]},
                 "resourceAttributes": {"namespace": "n", "verb": "get", "resource": "sgpuracks", "group": "mokka.nvidia.com"}},
        "status": {"allowed": false, "denied": true, "reason": "no"},
    }));
    round_trip::<k8s_pb::apimachinery::pkg::apis::meta::v1::DeleteOptions>(json!({
        "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
        "preconditions": {"uid": "u1", "resourceVersion": "7"}, "propagationPolicy": "Foreground",
        "dryRun": ["All"],
    }));
}

#[test]
fn the_one_pass_encoder_refuses_what_protobuf_cannot_hold_by_name() {
    let err = encode_json_object(
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"novel":1}"#,
    )
    .unwrap_err();
    assert_eq!(
        err,
        EncodeError::UnknownKey {
            message: "api.core.v1.ConfigMap".into(),
            key: "novel".into()
        }
    );
    assert!(matches!(
        encode_json_object(br#"{"apiVersion":"example.com/v1","kind":"Widget"}"#),
        Err(EncodeError::UnknownKind { .. })
    ));
    // A list's items carry no type meta of their own in protobuf.
    let list = encode_json_object(
        br#"{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"3"},"items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"}}]}"#,
    )
    .unwrap();
    assert_eq!(
        decode_object(&list).unwrap()["items"][0]["metadata"]["name"],
        "a"
    );
}

/// What a write answers from memory against what the stored text gives.
fn in_memory_and_from_text(object: &Value) -> (Result<Vec<u8>, EncodeError>, Vec<u8>) {
    let text = serde_json::to_vec(object).unwrap();
    let from_text = encode_json_object(&text);
    let from_memory = encode_object_in_memory(object, text.len());
    assert_eq!(from_memory, from_text, "{object}");
    (from_memory, text)
}

#[test]
fn a_written_object_encodes_from_memory_exactly_as_from_its_stored_text() {
    let objects = [
        json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("settings"),
            "data": {"b.conf": "x = 1\ny = \"two\"", "a.txt": "é ✓", "empty": ""},
            "binaryData": {"blob": "AAECAwQ=", "none": ""},
            "immutable": false,
        }),
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": meta("trainer-0"),
            "spec": {
                "containers": [
                    {"name": "main", "image": "pytorch:2", "command": ["python", "train.py"],
                     "ports": [{"name": "dist", "containerPort": 29500, "protocol": "TCP"},
                               {"containerPort": 8080, "hostPort": 0}],
                     "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "512Gi"},
                                   "requests": {"cpu": "7500m", "memory": "1.5e3Mi"}},
                     "livenessProbe": {"exec": {"command": ["true"]}, "failureThreshold": 3},
                     "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}},
                    {"name": "sidecar", "image": "busybox", "env": [{"name": "X", "value": ""}],
                     "resources": {}},
                ],
                "priority": -5,
                // A whole number written as a float is still an int32.
                "terminationGracePeriodSeconds": 30.0,
                "nodeSelector": {"gpu": "h100"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule",
                                 "tolerationSeconds": 300}],
            },
            "status": {"phase": "Running", "startTime": "2026-12-04T10:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                                       "lastTransitionTime": "2026-12-04T10:00:02Z"}]},
        }),
        json!({
            "apiVersion": "v1", "kind": "Event", "metadata": meta("trainer-0.1"),
            "involvedObject": {"kind": "Pod", "name": "trainer-0", "namespace": "team-a"},
            "reason": "Scheduled", "message": "assigned to node-1", "type": "Normal",
            "eventTime": "2026-12-04T10:00:00.123456Z", "firstTimestamp": null,
            "series": {"count": 2, "lastObservedTime": "2026-12-04T10:00:05.000001Z"},
            "reportingComponent": "default-scheduler", "reportingInstance": "kube-sim",
        }),
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2", "namespace": "team-a"},
            "eventTime": "2026-12-04T10:00:00.000000Z", "reportingController": "gpuid",
            "reportingInstance": "gpuid-1", "action": "Probe", "reason": "GpuInventoryChanged",
            "regarding": {"kind": "Node", "name": "node-1"}, "note": "8 GPUs",
            "deprecatedCount": 0,
        }),
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": meta("svc"),
            "spec": {"ports": [{"port": 80, "targetPort": "http"}, {"port": 81, "targetPort": 8081}],
                     "selector": {"app": "web"}},
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("web"),
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}},
        }),
    ];
    for object in &objects {
        let (encoded, _) = in_memory_and_from_text(object);
        let encoded = encoded.unwrap_or_else(|e| panic!("{e}: {object}"));
        // What a client decodes is the object the store holds, but for the
        // nulls JSON writes and protobuf leaves out.
        let back = decode_object(&encoded).unwrap();
        assert_eq!(back["metadata"], object["metadata"]);
    }
}

#[test]
fn odd_but_valid_shapes_encode_from_memory_exactly_as_from_text() {
    // Each object exercises one rule of the direct walk: whole floats in
    // int fields, numbers in Quantity and IntOrString, nulls in lists,
    // maps and map values, bytes, durations, embedded JSON and schema
    // unions.
    let objects = [
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": null,
                 "annotations": {"a": "", "b": "two"}, "finalizers": null},
               "spec": {"containers": [{"name": "c", "image": "i",
                   "resources": {"limits": {"cpu": 2, "memory": 1.5}},
                   "ports": [{"containerPort": 80.0}],
                   "livenessProbe": {"httpGet": {"port": "http"}, "periodSeconds": 10}}],
                 "activeDeadlineSeconds": 600, "tolerations": null}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
               "data": {"token": "c2VjcmV0", "empty": ""}, "type": "Opaque"}),
        json!({"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": {"name": "r"},
               "data": {"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}, "list": [1, "x", null]},
               "revision": 3}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
               "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15,
                        "renewTime": "2026-12-04T10:00:00.250000Z", "acquireTime": null}}),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
               "spec": {"backoffLimit": 0, "template": {"spec": {"containers": [{"name": "c", "image": "i"}],
                        "restartPolicy": "Never"}}}}),
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "widgets", "kind": "Widget"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                            "schema": {"openAPIV3Schema": {"type": "object",
                                "x-kubernetes-preserve-unknown-fields": true,
                                "additionalProperties": false,
                                "properties": {"spec": {"type": "object", "default": {"a": 1},
                                    "items": [{"type": "string"}]}}}}}]}}),
    ];
    for object in &objects {
        let (encoded, _) = in_memory_and_from_text(object);
        encoded.unwrap_or_else(|e| panic!("{e}: {object}"));
    }
    // Shapes neither form can hold fail from memory too (the answer goes
    // out as JSON).
    let refused = [
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": "one"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": ["a"]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "creationTimestamp": 5}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "generation": 1.5}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "name2": 1}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "%%"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 7}}),
    ];
    for object in &refused {
        let text = serde_json::to_vec(object).unwrap();
        assert!(encode_json_object(&text).is_err(), "text: {object}");
        assert!(
            encode_object_in_memory(object, text.len()).is_err(),
            "memory: {object}"
        );
    }
}

#[test]
fn an_object_protobuf_cannot_hold_fails_from_memory_as_from_text() {
    // A key newer than the schema: the answer goes out as JSON instead.
    let novel = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"},
                       "data": {"k": "v"}, "novel": {"x": 1}});
    let (encoded, _) = in_memory_and_from_text(&novel);
    assert_eq!(
        encoded.unwrap_err(),
        EncodeError::UnknownKey {
            message: "api.core.v1.ConfigMap".into(),
            key: "novel".into()
        }
    );
    let nested = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                        "spec": {"containers": [{"name": "c", "novelty": true}]}});
    assert!(matches!(
        in_memory_and_from_text(&nested).0,
        Err(EncodeError::UnknownKey { key, .. }) if key == "novelty"
    ));
    let bad_time = json!({"apiVersion": "v1", "kind": "Pod",
                          "metadata": {"name": "p", "creationTimestamp": "yesterday"}});
    assert!(in_memory_and_from_text(&bad_time).0.is_err());
    let custom =
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    assert!(matches!(
        in_memory_and_from_text(&custom).0,
        Err(EncodeError::UnknownKind { .. })
    ));
}

#[test]
fn a_list_encodes_its_items_without_type_meta() {
    let list = json!({
        "apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9", "continue": "c"},
        "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}},
        ],
    });
    let body = encode_object(&list).unwrap();
    let (unknown, raw) = envelope_raw(&body);
    let type_meta = unknown.type_meta.unwrap();
    assert_eq!(type_meta.kind.as_deref(), Some("PodList"));
    let typed = k8s_pb::api::core::v1::PodList::decode(raw.as_slice()).unwrap();
    let names: Vec<_> = typed
        .items
        .iter()
        .map(|p| p.metadata.clone().unwrap().name.unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(
        typed.metadata.unwrap().resource_version.as_deref(),
        Some("9")
    );
}

#[test]
fn a_watch_frame_is_a_length_prefixed_bare_watch_event_holding_an_enveloped_object() {
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "resourceVersion": "5"}});
    let frame = encode_watch_frame("ADDED", &pod).unwrap();
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(&frame[4..]).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    let raw = event.object.unwrap().raw.unwrap();
    assert_eq!(decode_object(&raw).unwrap(), pod);
    assert_eq!(
        decode_watch_frame(&frame[4..]).unwrap(),
        ("ADDED".to_string(), pod)
    );
}

#[test]
fn fields_newer_than_the_bindings_come_from_the_go_types() {
    let schema = schema::schema();
    assert_eq!(schema.bindings_kubernetes_version, "1.34");
    assert_eq!(schema.kubernetes_version, "1.37.2");
    // MutatingAdmissionPolicy is v1 only since Kubernetes 1.36.
    assert!(
        schema
            .kind("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy")
            .is_some()
    );
}

#[test]
fn a_field_the_server_does_not_know_is_refused_by_message_and_number() {
    // ConfigMap { metadata = 1 { name = "c" }, 99 = "x" }
    let mut raw = Vec::new();
    wire::put_nested(&mut raw, 1, |o| {
        wire::put_bytes(o, 1, b"c");
        Ok::<_, ProtoError>(())
    })
    .unwrap();
    wire::put_bytes(&mut raw, 99, b"x");
    let body = enveloped("v1", "ConfigMap", &raw);
    let err = decode_object(&body).unwrap_err();
    assert!(
        matches!(&err, ProtoError::UnknownField { message, number: 99, .. } if message == "api.core.v1.ConfigMap"),
        "{err}"
    );
    assert!(err.to_string().contains("field number 99"), "{err}");
}

fn enveloped(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut body = MAGIC.to_vec();
    wire::put_nested(&mut body, 1, |o| {
        wire::put_bytes(o, 1, api_version.as_bytes());
        wire::put_bytes(o, 2, kind.as_bytes());
        Ok::<_, ProtoError>(())
    })
    .unwrap();
    wire::put_bytes(&mut body, 2, raw);
    body
}

#[test]
fn bad_bodies_are_named_errors_never_panics() {
    let good = encode_object(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"a": "b"}}, "data": {"k": "v"}}))
    .unwrap();
    // Every truncation of a good body is an error (or, cut at a field
    // boundary, a smaller valid object): never a panic.
    for cut in 0..good.len() {
        let _ = decode_object(&good[..cut]);
    }
    assert_eq!(decode_object(b"{\"kind\":1}"), Err(ProtoError::NoMagic));
    assert!(matches!(
        decode_object(&good[..good.len() - 12]),
        Err(ProtoError::Truncated(_))
    ));
    assert!(matches!(
        decode_object(&enveloped("v1", "Nope", b"")),
        Err(ProtoError::UnknownKind { kind, .. }) if kind == "Nope"
    ));
    let mut long = MAGIC.to_vec();
    long.extend([0x08; 1]);
    long.extend([0xff; 11]);
    assert_eq!(decode_object(&long), Err(ProtoError::LongVarint));
    // A string field sent as a varint.
    let mut raw = Vec::new();
    wire::put_nested(&mut raw, 1, |o| {
        wire::put_key(o, 1, 0);
        wire::put_varint(o, 5);
        Ok::<_, ProtoError>(())
    })
    .unwrap();
    let err = decode_object(&enveloped("v1", "ConfigMap", &raw)).unwrap_err();
    assert!(err.to_string().contains("field name of"), "{err}");
}

#[test]
fn nesting_past_the_limit_is_refused() {
    // JSONSchemaProps.not (28) nested 100 deep.
    let mut props = Vec::new();
    for _ in 0..100 {
        let mut outer = Vec::new();
        wire::put_bytes(&mut outer, 28, &props);
        props = outer;
    }
    let schema = schema::schema();
    let index = schema
        .index("apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaProps")
        .unwrap();
    assert_eq!(
        decode::message(schema, index, &props, 0),
        Err(ProtoError::TooDeep(decode::MAX_DEPTH))
    );
}

#[test]
fn go_durations_format_and_parse_as_go_does() {
    for (nanos, text) in [
        (0, "0s"),
        (1_500_000_000, "1.5s"),
        (300_000_000, "300ms"),
        (3_723_000_000_000, "1h2m3s"),
        (60_000_000_000, "1m0s"),
        (-2_000_000_000, "-2s"),
    ] {
        assert_eq!(format_duration(nanos), text);
        assert_eq!(parse_duration(text), Some(nanos), "{text}");
    }
    assert_eq!(parse_duration("5x"), None);
}

proptest::proptest! {
    #[test]
    fn random_bytes_after_the_magic_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
        let mut body = MAGIC.to_vec();
        body.extend(bytes);
        let _ = decode_object(&body);
    }
}

#[test]
fn the_fast_timestamp_reader_agrees_with_jiff_or_leaves_the_text_to_it() {
    let jiff_reads = |text: &str| {
        text.parse::<jiff::Timestamp>()
            .ok()
            .map(|ts| special::floor_seconds(ts.as_second(), ts.subsec_nanosecond()))
    };
    // Every 10,000,019 seconds from year 1 to 9999 (all months, leap days,
    // century years), in each form kube-sim writes and a few it reads.
    let first = jiff::Timestamp::from_second(-62_135_596_800).unwrap();
    let last = jiff::Timestamp::from_second(253_402_200_000).unwrap();
    let mut ts = first;
    let mut checked: i64 = 0;
    while ts <= last {
        let nanos = i32::try_from((checked * 7_919) % 1_000_000_000).unwrap();
        let with_nanos = jiff::Timestamp::new(ts.as_second(), nanos).unwrap();
        for format in [
            "%Y-%m-%dT%H:%M:%SZ",
            "%Y-%m-%dT%H:%M:%S.%6fZ",
            "%Y-%m-%dT%H:%M:%S.%9fZ",
            "%Y-%m-%dT%H:%M:%S.%3fZ",
        ] {
            let text = with_nanos.strftime(format).to_string();
            assert_eq!(special::utc_timestamp(&text), jiff_reads(&text), "{text}");
        }
        let Ok(next) = ts.checked_add(jiff::SignedDuration::from_secs(10_000_019)) else {
            break;
        };
        ts = next;
        checked += 1;
    }
    assert!(checked > 25_000);
    for edge in [
        "2024-02-29T23:59:59Z",
        "2000-02-29T00:00:00Z",
        "1970-01-01T00:00:00Z",
        "1969-12-31T23:59:59.999999999Z",
    ] {
        assert_eq!(special::utc_timestamp(edge), jiff_reads(edge), "{edge}");
        assert!(special::utc_timestamp(edge).is_some(), "{edge}");
    }
    // Not the one form: no answer here, jiff decides.
    for other in [
        "2026-02-29T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-12-04T24:00:00Z",
        "2026-12-04T23:59:60Z",
        "2026-12-04t10:00:00Z",
        "2026-12-04T10:00:00+01:00",
        "2026-12-04T10:00:00.Z",
        "2026-12-04T10:00:00.1234567890Z",
        "2026-12-04T10:00:0xZ",
        "+2026-12-04T10:00:00Z",
        "2026-12-04 10:00:00Z",
        "yesterday",
        "",
    ] {
        assert_eq!(special::utc_timestamp(other), None, "{other}");
    }
}
