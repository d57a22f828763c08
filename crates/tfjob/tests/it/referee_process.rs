//! Starting the referee, Kubeflow training-operator v1.9.3, as a process
//! beside an API server. Shared by the referee test (`referee_e2e`) and
//! the process bench (`crates/gpufleet/benches/controller_process.rs`,
//! which includes this file by `#[path]`), so both start it the same way.
//!
//! The operator runs with `--enable-scheme=tfjob`, its cert rotation and
//! its validating webhook on, as its own Deployment runs it. This file
//! plays only the parts a cluster would play outside the API server:
//! - the kubelet's Secret volume: the serving certificate the rotator
//!   writes into its Secret is copied to the directory the operator reads
//!   ([`CERT_DIR`], fixed in the operator);
//! - the Service's endpoints: an EndpointSlice of Service
//!   `kubeflow/training-operator` names this machine's own address (API
//!   servers refuse loopback endpoints) and the webhook port, so the API
//!   server reaches the webhook (kube-sim through the slice, kube-apiserver
//!   with --enable-aggregator-routing).
//!
//! Test and bench code: failures panic with what went wrong.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

/// Fixed in training-operator v1.9.3: where its webhook server reads its
/// certificate, which a pod gets from its mounted Secret.
pub const CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
pub const OPERATOR_NAMESPACE: &str = "kubeflow";
pub const CERT_SECRET: &str = "training-operator-webhook-cert";
pub const WEBHOOK_CONFIGURATION: &str = "validator.training-operator.kubeflow.org";

/// The cache directory of scripts/training-operator.sh (bin/, manifests/):
/// `GPUFLEET_TRAINING_OPERATOR_DIR` (scripts/test.sh sets it), else what
/// `scripts/training-operator.sh dir` prints (it builds if needed).
pub fn referee_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("GPUFLEET_TRAINING_OPERATOR_DIR") {
        return PathBuf::from(dir);
    }
    // Both crates that include this file sit two levels below the root.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/training-operator.sh");
    let output = Command::new(&script)
        .arg("dir")
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        output.status.success(),
        "`{} dir` failed: build the referee with `scripts/training-operator.sh build` or set GPUFLEET_TRAINING_OPERATOR_DIR",
        script.display()
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// `KUBECTL`, else the one scripts/test.sh installs into .venv, else
/// `kubectl` on PATH.
pub fn kubectl() -> PathBuf {
    if let Some(path) = std::env::var_os("KUBECTL") {
        return PathBuf::from(path);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/kubectl");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("kubectl")
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// The last `lines` lines of a log file.
pub fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Copies the serving certificate from the rotator's Secret into
/// [`CERT_DIR`] once it is there, as the kubelet's Secret volume would.
async fn mount_certificates(client: kube::Client) {
    let secrets: Api<Secret> = Api::namespaced(client, OPERATOR_NAMESPACE);
    loop {
        if let Ok(secret) = secrets.get(CERT_SECRET).await {
            let data = secret.data.unwrap_or_default();
            if data.contains_key("tls.crt") && data.contains_key("tls.key") {
                std::fs::create_dir_all(CERT_DIR).unwrap_or_else(|e| panic!("{CERT_DIR}: {e}"));
                for (key, value) in &data {
                    std::fs::write(Path::new(CERT_DIR).join(key), &value.0)
                        .unwrap_or_else(|e| panic!("writing {key} into {CERT_DIR}: {e}"));
                }
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether the health probe's `/readyz` answers 200.
async fn answers_ok(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if stream
        .write_all(b"GET /readyz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    answer.starts_with(b"HTTP/1.0 200") || answer.starts_with(b"HTTP/1.1 200")
}

/// How to start the referee.
pub struct RefereeStart<'a> {
    /// A client with the rights to apply the manifests and play the
    /// cluster's parts (the EndpointSlice, the Secret volume).
    pub admin: kube::Client,
    /// What `kubectl apply -k` of the manifests uses.
    pub admin_kubeconfig: &'a Path,
    /// The operator's own kubeconfig (the bench gives it a ServiceAccount
    /// token, so its requests are counted apart).
    pub operator_kubeconfig: &'a Path,
    /// The operator's stderr goes here.
    pub log: &'a Path,
    /// Flags after the ones this file sets (`--kube-api-qps` and so on).
    pub extra_args: Vec<String>,
}

/// Starts the referee: its manifests applied, the webhook Service's
/// EndpointSlice and the Secret volume played, and returns once it is
/// ready (certificates rotated and mounted, CA injected, webhook
/// listening). The caller owns the process and must kill it.
pub async fn start_referee(start: RefereeStart<'_>) -> Child {
    let dir = referee_dir();
    let binary = dir.join("bin/training-operator");
    assert!(
        binary.exists(),
        "{} is missing: rebuild with scripts/training-operator.sh build",
        binary.display()
    );

    // The operator's manifests, less its Deployment: CRD, RBAC, Service,
    // webhook configuration, namespace and the empty certificate Secret.
    let applied = Command::new(kubectl())
        .args(["apply", "-k"])
        .arg(dir.join("manifests"))
        .arg("--kubeconfig")
        .arg(start.admin_kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl: {e}"));
    assert!(
        applied.status.success(),
        "kubectl apply -k of the referee's manifests failed:\n{}{}",
        String::from_utf8_lossy(&applied.stdout),
        String::from_utf8_lossy(&applied.stderr)
    );
    let webhook_port = free_port();
    let slices: Api<DynamicObject> = Api::namespaced_with(
        start.admin.clone(),
        OPERATOR_NAMESPACE,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("discovery.k8s.io", "v1", "EndpointSlice"),
            "endpointslices",
        ),
    );
    let _ = slices
        .delete("training-operator-local", &DeleteParams::default())
        .await;
    // The webhook server listens on every address; API servers refuse
    // loopback endpoints, so the slice names this machine's own address.
    let ip = kube_sim::lane::host_address().unwrap_or_else(|| {
        panic!("this machine has no address off loopback for the EndpointSlice to name")
    });
    let slice: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "training-operator-local", "labels": {"kubernetes.io/service-name": "training-operator"}},
        "addressType": if ip.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "webhook-server", "port": webhook_port, "protocol": "TCP"}],
    }))
    .unwrap_or_else(|e| panic!("the EndpointSlice is invalid: {e}"));
    slices
        .create(&PostParams::default(), &slice)
        .await
        .unwrap_or_else(|e| panic!("creating the webhook's EndpointSlice: {e}"));

    // A certificate left by an earlier run belongs to another CA.
    let _ = std::fs::remove_dir_all(CERT_DIR);
    let mount = tokio::spawn(mount_certificates(start.admin.clone()));
    let probe_port = free_port();
    let log_file =
        std::fs::File::create(start.log).unwrap_or_else(|e| panic!("{}: {e}", start.log.display()));
    let mut child = Command::new(&binary)
        .args([
            "--enable-scheme=tfjob".to_string(),
            format!("--webhook-server-port={webhook_port}"),
            format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
            format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
        ])
        .args(&start.extra_args)
        .env("KUBECONFIG", start.operator_kubeconfig)
        .env("MY_POD_NAMESPACE", OPERATOR_NAMESPACE)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));

    // Ready once the rotator has written the certificate, the kubelet's
    // part has mounted it, the CA is injected and the webhook listens.
    let started = Instant::now();
    let ready = loop {
        if answers_ok(probe_port).await {
            break true;
        }
        if started.elapsed() > Duration::from_secs(120) || matches!(child.try_wait(), Ok(Some(_))) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if !ready {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "training-operator was not ready within 120 s; its log ends:\n{}",
            tail(start.log, 30)
        );
    }
    mount
        .await
        .unwrap_or_else(|e| panic!("mounting the certificates: {e}"));
    child
}
