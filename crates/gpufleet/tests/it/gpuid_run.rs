//! `gpufleet gpuid run`, the real binary, against kube-sim over loopback:
//! a simulated GPU node whose device-plugin pod's nvidia-smi serves the
//! H100 capture; records on stdout, health on SERVER_PORT, SIGTERM; and
//! the EXPORT_* knobs against an HTTP receiver that is down.

use std::io::Read;
use std::net::Ipv4Addr;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::PostParams;
use kube_sim::exec::ExecMatcher;
use kube_sim::{ExecOutput, KubeSim};
use serde_json::{Value, json};

use crate::support::line_reader;

pub(crate) const CONTAINER: &str = "nvidia-device-plugin";
pub(crate) const NODE: &str = "gpu-node-1";

pub(crate) fn h100_capture() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../gpuid/tests/fixtures/hardware/h100.xml"
    );
    std::fs::read_to_string(path).expect("the H100 capture")
}

/// The UUIDs the capture holds, in document order.
pub(crate) fn uuids(xml: &str) -> Vec<String> {
    xml.split("<uuid>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</uuid>").map(|(uuid, _)| uuid.to_owned()))
        .collect()
}

pub(crate) use crate::support::{free_port, http_get};

pub(crate) fn poll_http(port: u16, path: &str, want: u16, timeout: Duration) -> String {
    poll_http_until(
        port,
        path,
        timeout,
        &format!("status {want}"),
        |status, _| status == want,
    )
}

/// GETs `path` until `accept(status, body)` holds; returns the body.
pub(crate) fn poll_http_until(
    port: u16,
    path: &str,
    timeout: Duration,
    what: &str,
    accept: impl Fn(u16, &str) -> bool,
) -> String {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    while Instant::now() < deadline {
        if let Some((status, body)) = http_get(port, path) {
            if accept(status, &body) {
                return body;
            }
            last = Some((status, body));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{path} did not answer {what} within {timeout:?}; last answer {last:?}");
}

/// `gpufleet gpuid run` against `kubeconfig` with only the given
/// environment; killed on drop, and its stderr printed if the test failed.
pub(crate) struct GpuidRun(Child);

impl GpuidRun {
    pub(crate) fn spawn(kubeconfig: &Path, server_port: u16, env: &[(&str, &str)]) -> GpuidRun {
        let child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["gpuid", "run"])
            .env_clear()
            .env("KUBECONFIG", kubeconfig)
            .env("CLUSTER_NAME", "loopback")
            .env("SERVER_PORT", server_port.to_string())
            .env("LOG_LEVEL", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gpufleet starts");
        GpuidRun(child)
    }
}

impl Deref for GpuidRun {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for GpuidRun {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for GpuidRun {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if std::thread::panicking()
            && let Some(mut pipe) = self.0.stderr.take()
        {
            let mut stderr = String::new();
            let _ = pipe.read_to_string(&mut stderr);
            eprintln!("gpufleet gpuid run stderr:\n{stderr}");
        }
    }
}

pub(crate) fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "gpufleet gpuid run did not stop within 20 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) async fn gpu_fleet(xml: String) -> KubeSim {
    gpu_fleet_with(KubeSim::builder(), xml).await
}

/// [`gpu_fleet`] on a kube-sim configured by `builder` (TLS, RBAC, ...).
pub(crate) async fn gpu_fleet_with(builder: kube_sim::KubeSimBuilder, xml: String) -> KubeSim {
    let sim = builder
        .exec_handler(
            ExecMatcher::any()
                .container(CONTAINER)
                .command(["nvidia-smi", "-q", "-x"]),
            move |_request| {
                let xml = xml.clone();
                async move { ExecOutput::stdout(xml) }
            },
        )
        .start()
        .await
        .expect("kube-sim starts");
    let client = sim.client();
    let create = PostParams::default();
    Api::<Namespace>::all(client.clone())
        .create(
            &create,
            &serde_json::from_value(json!({"metadata": {"name": "gpu-operator"}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<Node>::all(client.clone())
        .create(
            &create,
            &serde_json::from_value(json!({
                "metadata": {"name": NODE},
                "spec": {"providerID": "aws:///us-west-2a/i-0123456789abcdef0"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<Pod>::namespaced(client, "gpu-operator")
        .create(
            &create,
            &serde_json::from_value(json!({
                "metadata": {"name": "nvidia-device-plugin-abcde",
                             "labels": {"app": "nvidia-device-plugin-daemonset"}},
                "spec": {"nodeName": NODE,
                         "containers": [{"name": CONTAINER, "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpuid_run_exports_ndjson_serves_health_and_stops_on_sigterm() {
    let xml = h100_capture();
    let expected = uuids(&xml);
    assert_eq!(expected.len(), 8, "the H100 capture has 8 GPUs");
    let sim = gpu_fleet(xml).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    let port = free_port();

    let mut child = GpuidRun::spawn(&kubeconfig, port, &[("EXPORTER_TYPE", "stdout")]);
    let stdout = line_reader(&mut child);

    // 8 records and 8 gpu_added events; nothing else is on stdout.
    let mut records = Vec::new();
    let mut events = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while records.len() < 8 || events.len() < 8 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = stdout.recv_timeout(left).unwrap_or_else(|_| {
            let _ = child.kill();
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            panic!(
                "stdout gave {} records and {} events within 60 s; stderr:\n{stderr}",
                records.len(),
                events.len()
            )
        });
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|error| panic!("stdout line is not JSON ({error}): {line}"));
        assert_eq!(value["schemaVersion"], 1, "{line}");
        match value["kind"].as_str() {
            Some("gpu") => records.push(value),
            Some(_) => events.push(value),
            None => panic!("a stdout line without kind: {line}"),
        }
    }
    let mut got: Vec<String> = records
        .iter()
        .map(|r| r["uuid"].as_str().unwrap().to_owned())
        .collect();
    got.sort();
    let mut want = expected.clone();
    want.sort();
    assert_eq!(got, want);
    for record in &records {
        assert_eq!(record["cluster"], "loopback");
        assert_eq!(record["node_name"], NODE);
        assert_eq!(record["machine_id"], "i-0123456789abcdef0");
        assert_eq!(
            record["source_pod"],
            "gpu-operator/nvidia-device-plugin-abcde"
        );
        assert_eq!(record["product_name"], "NVIDIA H100 80GB HBM3");
    }
    assert!(
        events.iter().all(|e| e["kind"] == "gpu_added"),
        "{events:?}"
    );

    assert_eq!(
        poll_http(port, "/healthz", 200, Duration::from_secs(10)).trim(),
        "ok"
    );
    let ready = poll_http(port, "/readyz", 200, Duration::from_secs(30));
    assert!(ready.starts_with("ready"), "{ready}");
    let metrics = poll_http(port, "/metrics", 200, Duration::from_secs(10));
    assert!(
        metrics.contains("gpuid_pods_processed_total{result=\"exported\"} 1"),
        "{metrics}"
    );

    let status = terminate(&mut child);
    assert!(status.success(), "exit after SIGTERM: {status:?}");
    // Nothing was exported twice: stdout ends with what we read.
    let rest: Vec<String> = stdout.try_iter().collect();
    assert!(rest.is_empty(), "more output after the export: {rest:?}");
    sim.shutdown().await;
}

/// One POST as the receiver saw it.
#[derive(Debug, Clone)]
struct Post {
    idempotency_key: Option<String>,
    records: usize,
    events: usize,
}

/// An HTTP receiver that is down: every POST gets 503 (HEAD gets axum's
/// 405 for a POST-only route, which the exporter's probe counts as up, so
/// only failed exports can make /readyz unhealthy). The answer to the
/// second POST waits for `release_second`, so the test can read /readyz
/// while exactly one attempt has failed.
#[derive(Default)]
struct DownReceiver {
    posts: Mutex<Vec<Post>>,
    release_second: tokio::sync::Notify,
}

impl DownReceiver {
    fn posts(&self) -> Vec<Post> {
        self.posts.lock().expect("posts lock").clone()
    }
}

async fn answer_503(
    State(receiver): State<Arc<DownReceiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, &'static str) {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let count = |field: &str| body[field].as_array().map_or(0, Vec::len);
    let post = Post {
        idempotency_key: headers
            .get("idempotency-key")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned),
        records: count("records"),
        events: count("events"),
    };
    let nth = {
        let mut posts = receiver.posts.lock().expect("posts lock");
        posts.push(post);
        posts.len()
    };
    if nth == 2 {
        receiver.release_second.notified().await;
    }
    (StatusCode::SERVICE_UNAVAILABLE, "receiver down")
}

async fn start_down_receiver() -> (String, Arc<DownReceiver>) {
    let receiver = Arc::new(DownReceiver::default());
    let app = Router::new()
        .route("/ingest", post(answer_503))
        .with_state(Arc::clone(&receiver));
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("receiver binds");
    let address = listener.local_addr().expect("receiver address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/ingest"), receiver)
}

/// Waits until `receiver` has seen at least `want` POSTs; fails at once if
/// it saw more.
async fn wait_for_posts(receiver: &DownReceiver, want: usize, timeout: Duration) -> Vec<Post> {
    let deadline = Instant::now() + timeout;
    loop {
        let posts = receiver.posts();
        assert!(
            posts.len() <= want,
            "expected {want} POSTs, got {}: {posts:?}",
            posts.len()
        );
        if posts.len() == want {
            return posts;
        }
        assert!(
            Instant::now() < deadline,
            "the receiver saw {} of {want} POSTs within {timeout:?}: {posts:?}",
            posts.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The defaults are EXPORT_MAX_ATTEMPTS=0 (retry until the backend
/// recovers), EXPORT_UNHEALTHY_AFTER=3 and a 200 ms first backoff: with
/// them there would be a third POST and /readyz would stay ready after
/// one failure, so every assertion below depends on the knobs reaching the
/// pipeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpuid_run_drops_a_batch_after_export_max_attempts_and_reports_it_on_readyz_and_metrics() {
    let wait = Duration::from_secs(20);
    let (endpoint, receiver) = start_down_receiver().await;
    let sim = gpu_fleet(h100_capture()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    let port = free_port();
    let mut child = GpuidRun::spawn(
        &kubeconfig,
        port,
        &[
            ("EXPORTER_TYPE", "http"),
            ("HTTP_ENDPOINT", &endpoint),
            ("EXPORT_MAX_ATTEMPTS", "2"),
            ("EXPORT_BACKOFF_INITIAL", "50ms"),
            ("EXPORT_BACKOFF_MAX", "100ms"),
            ("EXPORT_UNHEALTHY_AFTER", "1"),
        ],
    );

    // The second attempt is held open: exactly one attempt has failed, and
    // that is enough to make the collector unready, naming the exporter.
    let posts = wait_for_posts(&receiver, 2, Duration::from_secs(60)).await;
    let ready = poll_http_until(
        port,
        "/readyz",
        wait,
        "503 after one failed attempt",
        |status, body| status == 503 && body.contains("1 consecutive http export attempts failed"),
    );
    assert!(
        ready.starts_with("not ready: exporter unhealthy (http): "),
        "{ready}"
    );
    assert!(ready.contains("status 503"), "{ready}");

    // Both attempts carried the one batch: 8 records and 8 gpu_added events.
    let key = posts[0]
        .idempotency_key
        .clone()
        .expect("an Idempotency-Key");
    for post in &posts {
        assert_eq!(
            post.idempotency_key.as_deref(),
            Some(key.as_str()),
            "{posts:?}"
        );
        assert_eq!((post.records, post.events), (8, 8), "{posts:?}");
    }

    // The second failure exhausts EXPORT_MAX_ATTEMPTS: the batch is dropped
    // and counted, never tried again.
    receiver.release_second.notify_one();
    let deadline = Instant::now() + wait;
    let metrics = loop {
        assert!(
            receiver.posts().len() == 2,
            "a third POST: the batch was retried past EXPORT_MAX_ATTEMPTS=2: {:?}",
            receiver.posts()
        );
        let metrics = http_get(port, "/metrics").map(|(_, body)| body);
        if let Some(metrics) = metrics.filter(|m| {
            m.contains("gpuid_exported_batches_total{exporter=\"http\",result=\"failure\"} 1")
        }) {
            break metrics;
        }
        assert!(
            Instant::now() < deadline,
            "/metrics did not count the dropped batch within {wait:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for series in [
        "gpuid_exported_batches_total{exporter=\"http\",result=\"success\"} 0",
        "gpuid_exported_records_total{exporter=\"http\",result=\"dropped\"} 16",
        "gpuid_exported_records_total{exporter=\"http\",result=\"success\"} 0",
        "gpuid_export_retries_total{exporter=\"http\"} 1",
        "gpuid_export_queue_batches 0",
    ] {
        assert!(
            metrics.contains(series),
            "{series} missing from:\n{metrics}"
        );
    }
    assert!(
        !metrics.contains("gpuid_last_successful_export_timestamp_seconds{"),
        "{metrics}"
    );

    // Silence proves the drop: at the 100 ms EXPORT_BACKOFF_MAX (or the
    // default 200 ms first backoff) a retry would arrive well within this.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let posts = receiver.posts();
    assert_eq!(posts.len(), 2, "POSTs after the drop: {posts:?}");
    let (status, ready) = http_get(port, "/readyz").expect("/readyz answers");
    assert_eq!(status, 503, "{ready}");
    assert!(
        ready.starts_with(
            "not ready: exporter unhealthy (http): 2 consecutive http export attempts failed"
        ),
        "unhealthy until an export succeeds: {ready}"
    );

    let status = terminate(&mut child);
    assert!(status.success(), "exit after SIGTERM: {status:?}");
    assert_eq!(
        receiver.posts().len(),
        2,
        "the dropped batch came back at shutdown"
    );
    sim.shutdown().await;
}

#[test]
fn gpuid_run_rejects_a_bad_configuration_with_exit_2_naming_every_variable() {
    let output = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["gpuid", "run", "--timeout", "abc"])
        .env_clear()
        .env("WORKERS", "101")
        .env("POSTGRES_PORT", "five")
        .env("SERVER_PORT", "80")
        .env("HEARTBEAT_INTERVAL", "-5s")
        .output()
        .expect("gpufleet runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty(), "stdout is for records only");
    let stderr = String::from_utf8_lossy(&output.stderr);
    for name in [
        "CLUSTER_NAME",
        "WORKERS=\"101\"",
        "--timeout=\"abc\"",
        "POSTGRES_PORT=\"five\"",
        "SERVER_PORT=\"80\"",
        "HEARTBEAT_INTERVAL",
    ] {
        assert!(stderr.contains(name), "{name} missing from:\n{stderr}");
    }
}
