//! `gpufleet gpuid run`, the real binary, against kube-sim over loopback:
//! a simulated GPU node whose device-plugin pod's nvidia-smi serves the
//! H100 capture; records on stdout, health on SERVER_PORT, SIGTERM.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::PostParams;
use kube_sim::exec::ExecMatcher;
use kube_sim::{ExecOutput, KubeSim};
use serde_json::{Value, json};

use crate::support::line_reader;

const CONTAINER: &str = "nvidia-device-plugin";
const NODE: &str = "gpu-node-1";

fn h100_capture() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../gpuid/tests/fixtures/hardware/h100.xml"
    );
    std::fs::read_to_string(path).expect("the H100 capture")
}

/// The UUIDs the capture holds, in document order.
fn uuids(xml: &str) -> Vec<String> {
    xml.split("<uuid>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</uuid>").map(|(uuid, _)| uuid.to_owned()))
        .collect()
}

fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
    listener.local_addr().expect("local address").port()
}

/// A plain HTTP/1.1 GET; `None` while nothing listens.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())?;
    Some((status, body))
}

fn poll_http(port: u16, path: &str, want: u16, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    let mut last = None;
    while Instant::now() < deadline {
        if let Some((status, body)) = http_get(port, path) {
            if status == want {
                return body;
            }
            last = Some((status, body));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{path} did not answer {want} within {timeout:?}; last answer {last:?}");
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
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

async fn gpu_fleet(xml: String) -> KubeSim {
    let sim = KubeSim::builder()
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

    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["gpuid", "run"])
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .env("CLUSTER_NAME", "loopback")
        .env("EXPORTER_TYPE", "stdout")
        .env("SERVER_PORT", port.to_string())
        .env("LOG_LEVEL", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpufleet starts");
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
        if value.get("kind").is_some() {
            events.push(value);
        } else {
            records.push(value);
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
