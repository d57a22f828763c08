//! `gpufleet gpuid run` with nothing but deploy/gpuid's RBAC: on a kube-sim
//! that enforces RBAC (`.authorization(Rbac)`), gpuid runs with a
//! TokenRequest token of its ServiceAccount, so every request it makes
//! (list and watch pods, the WebSocket exec, which needs `get` and
//! `create` on pods/exec, Node get/list/patch, events) is authorized as on
//! a cluster; a verb the manifest does not grant would stop it here.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use kube_sim::{Authorization, KubeSim};
use serde_json::Value;

use crate::gpuid_run::{GpuidRun, NODE, gpu_fleet_with, h100_capture, uuids};
use crate::support::{free_port, kubectl_path, line_reader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpuid_runs_on_deploy_gpuids_rbac_alone_against_an_rbac_enforcing_kube_sim() {
    let xml = h100_capture();
    let mut want = uuids(&xml);
    want.sort();
    let sim = gpu_fleet_with(
        KubeSim::builder().tls().authorization(Authorization::Rbac),
        xml,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let admin_kubeconfig = dir.path().join("admin.kubeconfig");
    std::fs::write(&admin_kubeconfig, sim.kubeconfig()).unwrap();
    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/gpuid/01-rbac.yaml");
    let applied = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&admin_kubeconfig)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(["apply", "-f"])
        .arg(&rbac)
        .output()
        .expect("kubectl runs");
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );

    let issued = Api::<ServiceAccount>::namespaced(sim.client(), "gpuid")
        .create_token_request(
            "gpuid",
            &PostParams::default(),
            &k8s_openapi::api::authentication::v1::TokenRequest::default(),
        )
        .await
        .expect("TokenRequest answers");
    let token = issued.status.expect("a token").token;
    let kubeconfig = dir.path().join("gpuid.kubeconfig");
    std::fs::write(
        &kubeconfig,
        kube_sim::kubeconfig_for(&sim.url(), Some(&token), sim.ca_pem()),
    )
    .unwrap();

    let mut child = GpuidRun::spawn(&kubeconfig, free_port(), &[("EXPORTER_TYPE", "stdout")]);
    let stdout = line_reader(&mut child);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.len() < want.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = stdout
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("{} of 8 records within 60 s", got.len()));
        let value: Value = serde_json::from_str(&line).expect("stdout lines are JSON");
        if value["kind"] == "gpu" {
            got.push(value["uuid"].as_str().unwrap_or_default().to_string());
        }
    }
    got.sort();
    assert_eq!(
        got, want,
        "every GPU exported through the exec it was allowed"
    );

    // The Node patch went through too (nodes: patch).
    let nodes: Api<Node> = Api::all(sim.client());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let node = nodes.get(NODE).await.unwrap();
        let labels = node.metadata.labels.unwrap_or_default();
        if labels.keys().any(|k| k.starts_with("gpuid.gpufleet.dev/")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "gpuid never labelled the Node: {labels:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // And the same token is refused what the manifest does not grant.
    let as_gpuid = sim.http_client_with_token(Some(&token)).unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(as_gpuid, "gpuid");
    match secrets.list(&Default::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(
            status.message,
            r#"secrets is forbidden: User "system:serviceaccount:gpuid:gpuid" cannot list resource "secrets" in API group "" in the namespace "gpuid""#
        ),
        other => panic!("listing secrets must be forbidden: {other:?}"),
    }
}
