//! Admission webhooks, the same tests on both lanes (`GPUFLEET_TEST_CLUSTER`):
//! a small HTTPS webhook server in the test, on loopback, and webhook
//! configurations pointing at it by URL or through a Service and its
//! EndpointSlice. kube-apiserver is the referee: what it answers, kube-sim
//! answers, word for word where the words come from the webhook.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::KubeSim;
use kube_sim::lane::{Lane, client_from_kubeconfig};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::status_of;

// ---------------------------------------------------------------- server

/// What the webhook server was asked, by path.
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<Vec<(String, Value)>>>);

/// The ConfigMap kube-controller-manager publishes into every namespace:
/// on the real lane its create in a test's fresh namespace reaches that
/// test's webhooks too, at a time of its own.
const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

impl Calls {
    /// The calls to `path` about the test's own objects (the
    /// controller-manager's root CA ConfigMap left out).
    fn to(&self, path: &str) -> Vec<Value> {
        self.0
            .lock()
            .iter()
            .filter(|(p, request)| p == path && request["name"] != ROOT_CA_CONFIGMAP)
            .map(|(_, r)| r.clone())
            .collect()
    }
}

fn labels(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn verdict(request: &Value, allowed: bool) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": request["uid"], "allowed": allowed},
    })
}

/// The webhooks: one behaviour per path.
async fn review(
    State(calls): State<Calls>,
    Path(path): Path<String>,
    Json(review): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let request = review["request"].clone();
    calls.0.lock().push((path.clone(), request.clone()));
    let object = &request["object"];
    match path.as_str() {
        "deny-labelled" => {
            let denied = labels(object).contains_key("deny")
                || labels(&request["oldObject"]).contains_key("deny");
            let mut answer = verdict(&request, !denied);
            if denied {
                answer["response"]["status"] = json!({"code": 403, "reason": "Forbidden", "message": "objects labelled deny are refused"});
            }
            Json(answer).into_response()
        }
        "require-mutated" => {
            let ok = object.is_null() || labels(object).contains_key("mutated");
            let mut answer = verdict(&request, ok);
            if !ok {
                answer["response"]["status"] = json!({"code": 422, "message": "not mutated"});
            }
            Json(answer).into_response()
        }
        "add-label" => {
            let patch = if object.pointer("/metadata/labels").is_some() {
                json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}])
            } else {
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
            };
            let mut answer = verdict(&request, true);
            answer["response"]["patchType"] = json!("JSONPatch");
            answer["response"]["patch"] =
                json!(base64::engine::general_purpose::STANDARD.encode(patch.to_string()));
            Json(answer).into_response()
        }
        "allow-warn" => {
            let mut answer = verdict(&request, true);
            answer["response"]["warnings"] = json!(["checked by allow-warn"]);
            Json(answer).into_response()
        }
        "garbage" => "this is not an AdmissionReview".into_response(),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(4)).await;
            Json(verdict(&request, true)).into_response()
        }
        _ => Json(verdict(&request, true)).into_response(),
    }
}

/// A webhook server on 127.0.0.1 with a certificate for `names`, signed
/// by its own CA.
struct WebhookServer {
    addr: SocketAddr,
    ca_pem: String,
    calls: Calls,
    stop: tokio_util::sync::CancellationToken,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl WebhookServer {
    async fn start(names: &[&str]) -> Self {
        Self::start_on("127.0.0.1".parse().unwrap(), names).await
    }

    /// A server on `ip`, with `ip` in its certificate too.
    async fn start_on(ip: std::net::IpAddr, names: &[&str]) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut sans: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        sans.push("127.0.0.1".into());
        sans.push(ip.to_string());
        let cert = CertificateParams::new(sans)
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        let tls = kube_sim::tls::TlsListener::spawn(listener, config, stop.clone()).unwrap();
        let calls = Calls::default();
        let app = axum::Router::new()
            .route("/{path}", axum::routing::post(review))
            .with_state(calls.clone());
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(tls, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
        });
        WebhookServer {
            addr,
            ca_pem: ca.pem(),
            calls,
            stop,
        }
    }

    fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}/{path}", self.addr.port())
    }
}

// ---------------------------------------------------------------- cluster

/// The server under test and an admin client; kube-sim lives as long as
/// the test.
struct Cluster {
    client: kube::Client,
    _sim: Option<KubeSim>,
    real: bool,
}

impl Cluster {
    async fn start() -> Cluster {
        match Lane::from_env().expect("GPUFLEET_TEST_CLUSTER is valid") {
            Lane::Sim => {
                let sim = KubeSim::builder().start().await.expect("kube-sim starts");
                Cluster {
                    client: sim.client(),
                    _sim: Some(sim),
                    real: false,
                }
            }
            Lane::Real(real) => Cluster {
                client: client_from_kubeconfig(&real.admin_kubeconfig)
                    .await
                    .expect("the real lane's admin kubeconfig"),
                _sim: None,
                real: true,
            },
        }
    }

    /// A fresh namespace for one test (the real lane is shared).
    async fn namespace(&self, prefix: &str) -> String {
        let name = format!("{prefix}-{}", &uuid::Uuid::new_v4().to_string()[..8]);
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.clone());
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        name
    }

    fn configurations(&self, kind: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
        let lower = kind.to_lowercase();
        let plural = match lower.strip_suffix('y') {
            Some(stem) => format!("{stem}ies"),
            None => format!("{lower}s"),
        };
        Api::all_with(
            self.client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, &plural),
        )
    }

    /// Creates a webhook configuration limited to `namespace` (so other
    /// tests of a shared lane never reach it), and waits until the server
    /// calls it: kube-apiserver reads configurations through an informer.
    async fn configure(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
        webhooks: Vec<Value>,
    ) -> Configured {
        let webhooks: Vec<Value> = webhooks
            .into_iter()
            .map(|mut w| {
                w["namespaceSelector"] =
                    json!({"matchLabels": {"kubernetes.io/metadata.name": namespace}});
                w["admissionReviewVersions"] = json!(["v1"]);
                if w.get("sideEffects").is_none() {
                    w["sideEffects"] = json!("None");
                }
                w
            })
            .collect();
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {"name": name},
            "webhooks": webhooks,
        }))
        .unwrap();
        self.configurations(kind)
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        if self.real {
            // The informer of kube-apiserver's dispatcher catches up within
            // a second or so; kube-sim reads configurations on each write.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        Configured {
            api: self.configurations(kind),
            name: name.to_string(),
        }
    }
}

/// Deletes its configuration when the test ends, pass or fail.
struct Configured {
    api: Api<DynamicObject>,
    name: String,
}

impl Drop for Configured {
    fn drop(&mut self) {
        let api = self.api.clone();
        let name = self.name.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = api.delete(&name, &DeleteParams::default()).await;
            });
        }
    }
}

fn rule(resources: &str, operations: &[&str]) -> Value {
    json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": [resources], "operations": operations}])
}

fn url_hook(name: &str, server: &WebhookServer, path: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": server.url(path), "caBundle": server.ca_bundle()},
        "rules": rule("configmaps", &["CREATE", "UPDATE", "DELETE"]),
    })
}

fn labelled_configmap(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    cm.data = Some(BTreeMap::from([("k".to_string(), "v".to_string())]));
    cm
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn a_validating_webhook_denies_by_label_in_its_own_words() {
    let cluster = Cluster::start().await;
    let server = WebhookServer::start(&[]).await;
    let ns = cluster.namespace("adm-deny").await;
    let _config = cluster
        .configure(
            "ValidatingWebhookConfiguration",
            &format!("{ns}-deny"),
            &ns,
            vec![url_hook("deny.gpufleet.dev", &server, "deny-labelled")],
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let refused = status_of(
        cms.create(
            &PostParams::default(),
            &labelled_configmap("refused", &[("deny", "yes")]),
        )
        .await,
    );
    assert_eq!(refused.code, 403);
    assert_eq!(refused.reason, "Forbidden");
    assert_eq!(
        refused.message,
        "admission webhook \"deny.gpufleet.dev\" denied the request: objects labelled deny are refused"
    );
    assert!(
        cms.get_opt("refused").await.unwrap().is_none(),
        "nothing is stored"
    );
    cms.create(&PostParams::default(), &labelled_configmap("allowed", &[]))
        .await
        .expect("an unlabelled ConfigMap passes");

    let calls = server.calls.to("deny-labelled");
    assert_eq!(calls.len(), 2, "{calls:?}");
    let first = &calls[0];
    assert_eq!(first["operation"], "CREATE");
    assert_eq!(first["name"], "refused");
    assert_eq!(first["namespace"], ns);
    assert_eq!(
        first["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(
        first["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(first["dryRun"], false);
    assert_eq!(first["options"]["kind"], "CreateOptions");
    assert!(
        first["object"]["metadata"]["uid"].is_string(),
        "validating webhooks see the uid"
    );
    assert!(first["oldObject"].is_null());

    // An update sends the old object; labelling the stored one is refused.
    let denied_update = status_of(
        cms.patch(
            "allowed",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"deny": "later"}}})),
        )
        .await,
    );
    assert_eq!(denied_update.code, 403);
    let update = server.calls.to("deny-labelled").pop().unwrap();
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(update["options"]["kind"], "UpdateOptions");
    assert!(labels(&update["oldObject"]).is_empty());
    assert_eq!(labels(&update["object"])["deny"], "later");
    let stored = cms.get("allowed").await.unwrap();
    assert!(
        !stored
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("deny")
    );
}

#[tokio::test]
async fn mutating_webhooks_run_first_and_their_patch_is_stored_unowned() {
    let cluster = Cluster::start().await;
    let server = WebhookServer::start(&[]).await;
    let ns = cluster.namespace("adm-mutate").await;
    let _validating = cluster
        .configure(
            "ValidatingWebhookConfiguration",
            &format!("{ns}-require"),
            &ns,
            vec![url_hook("require.gpufleet.dev", &server, "require-mutated")],
        )
        .await;
    let _mutating = cluster
        .configure(
            "MutatingWebhookConfiguration",
            &format!("{ns}-mutate"),
            &ns,
            vec![url_hook("mutate.gpufleet.dev", &server, "add-label")],
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let created = cms
        .create(
            &PostParams::default(),
            &labelled_configmap("m", &[("app", "x")]),
        )
        .await
        .expect("the validating webhook sees the mutated object");
    let created_labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        created_labels.get("mutated").map(String::as_str),
        Some("yes")
    );
    let mutate_call = &server.calls.to("add-label")[0];
    assert!(
        mutate_call["object"]["metadata"]["uid"].is_null(),
        "mutating webhooks run before the uid is set"
    );
    // The creator owns what it sent, not what the webhook added.
    let owned: Vec<String> = created
        .metadata
        .managed_fields
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.fields_v1.as_ref().map(|f| f.0.to_string()))
        .collect();
    assert_eq!(owned.len(), 1, "{owned:?}");
    assert!(owned[0].contains("f:app"), "{owned:?}");
    assert!(!owned[0].contains("f:mutated"), "{owned:?}");

    // A generated name: mutating webhooks see none, validating ones the one stored.
    let mut generated = labelled_configmap("", &[]);
    generated.metadata.name = None;
    generated.metadata.generate_name = Some("gen-".into());
    let stored = cms
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let name = stored.metadata.name.unwrap_or_default();
    assert!(name.starts_with("gen-"));
    let mutate_call = server.calls.to("add-label").pop().unwrap();
    assert!(mutate_call.get("name").is_none(), "{mutate_call}");
    let validate_call = server.calls.to("require-mutated").pop().unwrap();
    assert_eq!(validate_call["name"], name);
}

#[tokio::test]
async fn a_dry_run_reaches_the_webhooks_as_one_and_stores_nothing() {
    let cluster = Cluster::start().await;
    let server = WebhookServer::start(&[]).await;
    let ns = cluster.namespace("adm-dry").await;
    let _config = cluster
        .configure(
            "MutatingWebhookConfiguration",
            &format!("{ns}-dry"),
            &ns,
            vec![{
                let mut hook = url_hook("dry.gpufleet.dev", &server, "add-label");
                hook["sideEffects"] = json!("NoneOnDryRun");
                hook
            }],
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let answer = cms
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &labelled_configmap("dry", &[]),
        )
        .await
        .unwrap();
    assert_eq!(
        answer
            .metadata
            .labels
            .unwrap_or_default()
            .get("mutated")
            .map(String::as_str),
        Some("yes"),
        "the dry run's answer shows the mutation"
    );
    assert!(cms.get_opt("dry").await.unwrap().is_none());
    // The call about this ConfigMap: on the real lane the controller-manager
    // may create the namespace's kube-root-ca.crt under the same webhook.
    let calls = server.calls.to("add-label");
    let call = calls
        .iter()
        .find(|call| call["name"] == "dry")
        .unwrap_or_else(|| panic!("no webhook call about ConfigMap dry among {calls:?}"));
    assert_eq!(call["dryRun"], true);
    assert_eq!(call["options"]["dryRun"], json!(["All"]));
}

#[tokio::test]
async fn the_failure_policy_decides_for_a_webhook_that_is_down_slow_or_answers_garbage() {
    let cluster = Cluster::start().await;
    let server = WebhookServer::start(&[]).await;
    let ns = cluster.namespace("adm-fail").await;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let down = |name: &str| {
        json!({
            "name": name,
            "clientConfig": {"url": format!("https://127.0.0.1:{closed}/down"), "caBundle": server.ca_bundle()},
            "rules": rule("configmaps", &["CREATE"]),
        })
    };
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    for (case, hook) in [
        ("down", down("down.gpufleet.dev")),
        (
            "garbage",
            url_hook("garbage.gpufleet.dev", &server, "garbage"),
        ),
        ("slow", {
            let mut hook = url_hook("slow.gpufleet.dev", &server, "slow");
            hook["timeoutSeconds"] = json!(1);
            hook
        }),
    ] {
        for policy in ["Fail", "Ignore"] {
            let mut hook = hook.clone();
            hook["failurePolicy"] = json!(policy);
            let config = cluster
                .configure(
                    "ValidatingWebhookConfiguration",
                    &format!("{ns}-{case}-{}", policy.to_lowercase()),
                    &ns,
                    vec![hook],
                )
                .await;
            let name = format!("{case}-{}", policy.to_lowercase());
            let result = cms
                .create(&PostParams::default(), &labelled_configmap(&name, &[]))
                .await;
            match policy {
                "Fail" => {
                    let status = status_of(result);
                    assert_eq!(status.code, 500, "{case}: {status:?}");
                    assert_eq!(status.reason, "InternalError", "{case}");
                    assert!(
                        status.message.starts_with(&format!(
                            "Internal error occurred: failed calling webhook \"{case}.gpufleet.dev\": "
                        )),
                        "{case}: {}",
                        status.message
                    );
                    assert!(
                        cms.get_opt(&name).await.unwrap().is_none(),
                        "{case}: nothing stored"
                    );
                }
                _ => {
                    result.unwrap_or_else(|e| panic!("{case} with Ignore: {e}"));
                }
            }
            let api = config.api.clone();
            let config_name = config.name.clone();
            drop(config);
            let _ = api.delete(&config_name, &DeleteParams::default()).await;
            if cluster.real {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

#[tokio::test]
async fn a_service_reference_reaches_the_webhook_through_its_endpoint_slice() {
    let cluster = Cluster::start().await;
    let ns = cluster.namespace("adm-svc").await;
    // Both servers refuse loopback endpoints: the webhook server listens
    // on this machine's own address and the slice names that.
    let ip = kube_sim::lane::host_address()
        .expect("this machine has an address off loopback for the EndpointSlice to name");
    let server = WebhookServer::start_on(ip, &[&format!("hooks.{ns}.svc")]).await;
    let services: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", "Service"), "services"),
    );
    let service: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "hooks"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": server.addr.port()}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let slices: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice"),
            "endpointslices",
        ),
    );
    let slice: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "hooks-local", "labels": {"kubernetes.io/service-name": "hooks"}},
        "addressType": if ip.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": server.addr.port(), "protocol": "TCP"}],
    }))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();
    let _config = cluster
        .configure(
            "ValidatingWebhookConfiguration",
            &format!("{ns}-svc"),
            &ns,
            vec![json!({
                "name": "svc.gpufleet.dev",
                "clientConfig": {
                    "service": {"namespace": ns, "name": "hooks", "path": "/deny-labelled"},
                    "caBundle": server.ca_bundle(),
                },
                "rules": rule("configmaps", &["CREATE"]),
            })],
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let refused = status_of(
        cms.create(
            &PostParams::default(),
            &labelled_configmap("refused", &[("deny", "1")]),
        )
        .await,
    );
    assert_eq!(refused.code, 403, "{refused:?}");
    assert_eq!(server.calls.to("deny-labelled").len(), 1);
}

#[tokio::test]
async fn a_ca_bundle_injected_later_takes_effect_on_the_next_request() {
    let cluster = Cluster::start().await;
    let server = WebhookServer::start(&[]).await;
    let ns = cluster.namespace("adm-ca").await;
    // As a chart ships it: no caBundle until a cainjector-style controller
    // fills it in from the serving Secret.
    let mut hook = url_hook("ca.gpufleet.dev", &server, "deny-labelled");
    hook["clientConfig"]["caBundle"] = json!("");
    let config = cluster
        .configure(
            "ValidatingWebhookConfiguration",
            &format!("{ns}-ca"),
            &ns,
            vec![hook],
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let untrusted = status_of(
        cms.create(&PostParams::default(), &labelled_configmap("before", &[]))
            .await,
    );
    assert_eq!(untrusted.code, 500, "{untrusted:?}");
    assert!(
        server.calls.to("deny-labelled").is_empty(),
        "no request passed the TLS handshake"
    );
    config
        .api
        .patch(
            &config.name,
            &PatchParams::default(),
            &Patch::<Value>::Json(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": server.ca_bundle()}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    if cluster.real {
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    cms.create(&PostParams::default(), &labelled_configmap("after", &[]))
        .await
        .expect("trusted once the CA is injected");
    assert_eq!(server.calls.to("deny-labelled").len(), 1);
}

#[tokio::test]
async fn selectors_match_conditions_and_reinvocation_decide_who_is_called() {
    let cluster = Cluster::start().await;
    let server = WebhookServer::start(&[]).await;
    let ns = cluster.namespace("adm-match").await;
    let mut conditioned = url_hook("cond.gpufleet.dev", &server, "deny-labelled");
    conditioned["matchConditions"] = json!([
        {"name": "not-skipped", "expression": "!has(object.metadata.labels) || !('skip' in object.metadata.labels)"}
    ]);
    let mut selected = url_hook("sel.gpufleet.dev", &server, "allow-warn");
    selected["objectSelector"] = json!({"matchLabels": {"watched": "yes"}});
    let _validating = cluster
        .configure(
            "ValidatingWebhookConfiguration",
            &format!("{ns}-match"),
            &ns,
            vec![conditioned, selected],
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &labelled_configmap("skipped", &[("deny", "1"), ("skip", "1")]),
    )
    .await
    .expect("a false match condition skips the webhook");
    assert!(server.calls.to("deny-labelled").is_empty());
    assert!(
        server.calls.to("allow-warn").is_empty(),
        "the object selector did not match"
    );
    cms.create(
        &PostParams::default(),
        &labelled_configmap("watched", &[("watched", "yes")]),
    )
    .await
    .unwrap();
    assert_eq!(server.calls.to("allow-warn").len(), 1);

    // An IfNeeded webhook is called again when a later one changed the object.
    let mut first = url_hook("a-first.gpufleet.dev", &server, "record");
    first["reinvocationPolicy"] = json!("IfNeeded");
    let second = url_hook("b-second.gpufleet.dev", &server, "add-label");
    let _mutating = cluster
        .configure(
            "MutatingWebhookConfiguration",
            &format!("{ns}-reinvoke"),
            &ns,
            vec![first, second],
        )
        .await;
    cms.create(
        &PostParams::default(),
        &labelled_configmap("reinvoked", &[]),
    )
    .await
    .unwrap();
    let recorded = server.calls.to("record");
    assert_eq!(
        recorded.len(),
        2,
        "called, then called again after the patch"
    );
    assert!(!labels(&recorded[0]["object"]).contains_key("mutated"));
    assert_eq!(labels(&recorded[1]["object"])["mutated"], "yes");
}

#[tokio::test]
async fn a_deletion_is_admitted_with_the_old_object() {
    let cluster = Cluster::start().await;
    let server = WebhookServer::start(&[]).await;
    let ns = cluster.namespace("adm-del").await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    cms.create(
        &PostParams::default(),
        &labelled_configmap("kept", &[("deny", "1")]),
    )
    .await
    .unwrap();
    let _config = cluster
        .configure(
            "ValidatingWebhookConfiguration",
            &format!("{ns}-del"),
            &ns,
            vec![url_hook("del.gpufleet.dev", &server, "deny-labelled")],
        )
        .await;
    let refused = status_of(cms.delete("kept", &DeleteParams::default()).await);
    assert_eq!(refused.code, 403);
    assert!(cms.get_opt("kept").await.unwrap().is_some());
    let call = server.calls.to("deny-labelled").pop().unwrap();
    assert_eq!(call["operation"], "DELETE");
    assert!(call["object"].is_null());
    assert_eq!(call["oldObject"]["metadata"]["name"], "kept");
    assert_eq!(call["options"]["kind"], "DeleteOptions");
}

#[tokio::test]
async fn webhook_configurations_are_validated_as_kube_apiserver_validates_them() {
    let cluster = Cluster::start().await;
    let api = cluster.configurations("ValidatingWebhookConfiguration");
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": format!("bad-{}", &uuid::Uuid::new_v4().to_string()[..8])},
        "webhooks": [{
            "name": "two.segments",
            "clientConfig": {"url": "http://127.0.0.1/x"},
            "rules": rule("configmaps", &["CREATE"]),
            "sideEffects": "Some",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 31,
        }],
    }))
    .unwrap();
    let status = status_of(api.create(&PostParams::default(), &bad).await);
    assert_eq!(status.code, 422);
    let fields: Vec<String> = status
        .details
        .map(|d| d.causes.into_iter().map(|c| c.field).collect())
        .unwrap_or_default();
    for field in [
        "webhooks[0].name",
        "webhooks[0].sideEffects",
        "webhooks[0].timeoutSeconds",
        "webhooks[0].clientConfig.url",
    ] {
        assert!(fields.iter().any(|f| f == field), "{field} in {fields:?}");
    }
}

#[tokio::test]
async fn a_validating_admission_policy_denies_before_validating_webhooks_are_called() {
    let cluster = Cluster::start().await;
    let server = WebhookServer::start(&[]).await;
    let ns = cluster.namespace("adm-vap").await;
    let name = format!("{ns}-policy");
    let policy: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "variables": [{"name": "keys", "expression": "has(object.data) ? object.data.size() : 0"}],
            "validations": [
                {"expression": "variables.keys <= 2", "messageExpression": "'at most 2 keys, got ' + string(variables.keys)", "reason": "Forbidden"},
                {"expression": "!has(object.data) || !('secret' in object.data)"},
            ],
        },
    }))
    .unwrap();
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": format!("{name}-binding")},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}},
        },
    }))
    .unwrap();
    let policies = cluster.configurations("ValidatingAdmissionPolicy");
    let bindings = cluster.configurations("ValidatingAdmissionPolicyBinding");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    bindings
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let _cleanup = (
        Configured {
            api: policies,
            name: name.clone(),
        },
        Configured {
            api: bindings,
            name: format!("{name}-binding"),
        },
    );
    let _webhook = cluster
        .configure(
            "ValidatingWebhookConfiguration",
            &format!("{ns}-after-policy"),
            &ns,
            vec![url_hook("after.gpufleet.dev", &server, "allow-warn")],
        )
        .await;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
    let mut big = labelled_configmap("big", &[]);
    big.data = Some((0..3).map(|i| (format!("k{i}"), "v".to_string())).collect());
    // The real server type-checks a new policy in the background: retry
    // until it is in force.
    let mut denied = None;
    for _ in 0..20 {
        match cms.create(&PostParams::default(), &big).await {
            Err(kube::Error::Api(status)) => {
                denied = Some(status);
                break;
            }
            Ok(_) => {
                cms.delete("big", &DeleteParams::default()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(other) => panic!("{other}"),
        }
    }
    let denied = denied.expect("the policy denies three keys");
    assert_eq!(denied.code, 403);
    assert_eq!(
        denied.message,
        format!(
            "configmaps \"big\" is forbidden: ValidatingAdmissionPolicy '{name}' with binding '{name}-binding' denied request: at most 2 keys, got 3"
        )
    );
    let mut secret = labelled_configmap("secret", &[]);
    secret.data = Some(BTreeMap::from([("secret".to_string(), "x".to_string())]));
    let invalid = status_of(cms.create(&PostParams::default(), &secret).await);
    assert_eq!(invalid.code, 422);
    assert_eq!(
        invalid.message,
        format!(
            "configmaps \"secret\" is forbidden: ValidatingAdmissionPolicy '{name}' with binding '{name}-binding' denied request: failed expression: !has(object.data) || !('secret' in object.data)"
        )
    );
    let calls_before = server.calls.to("allow-warn").len();
    cms.create(&PostParams::default(), &labelled_configmap("fine", &[]))
        .await
        .unwrap();
    assert_eq!(
        server.calls.to("allow-warn").len(),
        calls_before + 1,
        "only the write the policy allowed reached the webhook"
    );
}
