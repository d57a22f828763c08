//! The sandbox's fleet view in headless Chromium (Debian's `chromium`,
//! installed by scripts/test.sh), driven over the DevTools protocol: the
//! page's counts of racks, Nodes and GPUs equal the API's; a policy that
//! fails a GPU turns that GPU's cell to "lost" through the live event
//! stream, without a reload; a screenshot is saved.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};
use mokka::api::{
    DeviceState, PolicyTargetRef, RuntimeState, SGPURack, SGPURuntimePolicy, SGPURuntimePolicySpec,
    TargetGroup, TargetKind,
};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{KilledOnDrop, RunningSandbox, pipe_lines, wait_for_line};

fn chromium() -> PathBuf {
    if let Ok(path) = std::env::var("CHROMIUM") {
        return PathBuf::from(path);
    }
    let installed = PathBuf::from("/usr/bin/chromium");
    assert!(
        installed.exists(),
        "chromium not found: run scripts/test.sh (it installs Debian's chromium package) or set CHROMIUM"
    );
    installed
}

/// DevTools' `/json/list`. Chromium keeps the connection open whatever the
/// request says, so the body is read to its Content-Length.
fn devtools_targets(port: u16) -> Value {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let answer = (|| -> std::io::Result<Value> {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            // DevTools builds the socket URLs from the Host header.
            write!(
                stream,
                "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
            )?;
            let mut reader = BufReader::new(stream);
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line)?;
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body)?;
            serde_json::from_slice(&body).map_err(std::io::Error::other)
        })();
        match answer {
            Ok(targets)
                if targets
                    .as_array()
                    .is_some_and(|t| t.iter().any(|t| t["type"] == "page")) =>
            {
                return targets;
            }
            other => assert!(
                Instant::now() < deadline,
                "DevTools on port {port} lists no page: {other:?}"
            ),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// One DevTools page session.
struct Page {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
}

impl Page {
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({"id": id, "method": method, "params": params});
        self.socket
            .send(Message::text(request.to_string()))
            .await
            .expect("DevTools request sent");
        loop {
            let message = tokio::time::timeout(Duration::from_secs(30), self.socket.next())
                .await
                .unwrap_or_else(|_| panic!("DevTools did not answer {method} in 30 s"))
                .expect("DevTools socket open")
                .expect("DevTools message");
            let Message::Text(text) = message else {
                continue;
            };
            let answer: Value = serde_json::from_str(&text).expect("DevTools JSON");
            if answer["id"] == id {
                assert!(answer.get("error").is_none(), "{method} failed: {answer}");
                return answer["result"].clone();
            }
        }
    }

    async fn evaluate(&mut self, expression: &str) -> Value {
        let result = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        result["result"]["value"].clone()
    }

    /// Evaluates until `accept` takes the value (90 s at most: a busy CI
    /// machine runs this beside every other test).
    async fn evaluate_until(&mut self, expression: &str, accept: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let value = self.evaluate(expression).await;
            if accept(&value) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "{expression} stayed {value} for 90 s"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_view_shows_the_apis_counts_and_a_failed_gpu_turns_lost_live() {
    let browser_binary = chromium();
    let sandbox = RunningSandbox::start(&["--nodes", "36", "--ui-port", "0"]);
    let url = sandbox.ui_url.clone();
    let client = sandbox.client().await;
    let racks = Api::<SGPURack>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("racks listed")
        .items;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes listed")
        .items;
    let gpus: usize = racks
        .iter()
        .flat_map(|rack| &rack.spec.nodes)
        .map(|slot| slot.gpus.len())
        .sum();
    assert_eq!((racks.len(), nodes.len(), gpus), (2, 36, 144));

    let profile = sandbox.dir.path().join("chromium-profile");
    let browser = Command::new(&browser_binary)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--remote-debugging-port=0",
            "--window-size=1600,1300",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", browser_binary.display()));
    let mut browser = KilledOnDrop {
        child: browser,
        name: "chromium",
    };
    let browser_lines = pipe_lines(browser.child.stderr.take().expect("stderr is piped"));
    let devtools = wait_for_line(
        &browser_lines,
        "DevTools listening on",
        Duration::from_secs(30),
    )
    .pop()
    .unwrap_or_default();
    let port: u16 = devtools
        .rsplit("127.0.0.1:")
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no DevTools port in {devtools:?}"));
    let targets = tokio::task::spawn_blocking(move || devtools_targets(port))
        .await
        .expect("the target list task");
    let page_socket = targets
        .as_array()
        .and_then(|list| list.iter().find(|t| t["type"] == "page"))
        .and_then(|t| t["webSocketDebuggerUrl"].as_str())
        .expect("a page target")
        .to_string();
    let (socket, _) = tokio_tungstenite::connect_async(page_socket.as_str())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "DevTools page socket {page_socket}: {e}; chromium exited: {:?}",
                browser.child.try_wait()
            )
        });
    let mut page = Page { socket, next_id: 0 };
    page.call("Page.enable", json!({})).await;
    page.call("Page.navigate", json!({"url": url})).await;
    page.evaluate_until("document.getElementById('live')?.dataset.live", |v| {
        v == "live"
    })
    .await;
    let count = |id: &str| format!("Number(document.getElementById('{id}')?.textContent)");
    assert_eq!(
        page.evaluate(&count("count-racks")).await,
        json!(racks.len())
    );
    assert_eq!(
        page.evaluate(&count("count-nodes")).await,
        json!(nodes.len())
    );
    assert_eq!(page.evaluate(&count("count-gpus")).await, json!(gpus));
    assert_eq!(
        page.evaluate("document.querySelectorAll('td.gpu').length")
            .await,
        json!(gpus)
    );
    // Only a reload would clear it.
    page.evaluate("window.notReloaded = 'yes'").await;
    let updates_before = page.evaluate("window.fleetUpdates").await;

    let rack = racks
        .iter()
        .find(|rack| rack.spec.identity.rack_index == 1)
        .expect("rack 1");
    let uuid = rack
        .spec
        .node_by_index(2)
        .and_then(|slot| slot.gpus.iter().find(|gpu| gpu.index == 3))
        .map(|gpu| gpu.uuid.clone())
        .expect("rack 1, slot 2, GPU 3");
    let cell = format!("document.getElementById('gpu-{uuid}')?.dataset.state");
    assert_eq!(page.evaluate(&cell).await, json!("healthy"));
    let policy = SGPURuntimePolicy::new(
        "browser-fails-one-gpu",
        SGPURuntimePolicySpec {
            target_ref: PolicyTargetRef {
                group: TargetGroup::Mokka,
                kind: TargetKind::SgpuInventory,
                name: "sandbox".into(),
                rack_groups: Some(vec!["nvl72".into()]),
                rack_indexes: Some(vec![1]),
                node_indexes: Some(vec![2]),
                gpu_indexes: Some(vec![3]),
            },
            runtime: Some(RuntimeState {
                device_state: Some(DeviceState::Failed),
                ..Default::default()
            }),
        },
    );
    Api::<SGPURuntimePolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy created");
    page.evaluate_until(&cell, |v| v == "lost").await;
    assert_eq!(page.evaluate("window.notReloaded").await, json!("yes"));
    assert_ne!(page.evaluate("window.fleetUpdates").await, updates_before);
    assert_eq!(page.evaluate(&count("count-lost")).await, json!(1));

    // A running TFJob shows with its pods' placement.
    let job: tfjob::api::object::TFJobObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "browser-job", "namespace": "default"},
        "spec": {"tfReplicaSpecs": {
            "Chief": {"replicas": 1, "template": {"spec": {"containers": [{
                "name": "tensorflow", "image": "tensorflow/tensorflow:2.17.0-gpu",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
            "Worker": {"replicas": 2, "template": {"spec": {"containers": [{
                "name": "tensorflow", "image": "tensorflow/tensorflow:2.17.0-gpu",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
        }},
    }))
    .expect("a TFJob");
    Api::<tfjob::api::object::TFJobObject>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &job)
        .await
        .expect("TFJob created");
    page.evaluate_until(
        "document.getElementById('job-default-browser-job')?.dataset.phase",
        |v| v == "Running",
    )
    .await;
    let placed = page
        .evaluate_until(
            "Array.from(document.querySelectorAll('#job-default-browser-job li')).map(li => li.textContent).join('|')",
            |v| v.as_str().is_some_and(|t| t.matches("gpu-node-").count() == 3 && t.matches("Running").count() == 3),
        )
        .await;
    assert!(
        placed
            .as_str()
            .unwrap_or_default()
            .contains("browser-job-chief-0"),
        "{placed}"
    );
    assert_eq!(page.evaluate(&count("count-tfjobs")).await, json!(1));
    assert_eq!(page.evaluate("window.notReloaded").await, json!("yes"));

    let shot = page
        .call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": false}),
        )
        .await;
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().expect("screenshot data"))
        .expect("base64 PNG");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let out = std::env::var("GPUFLEET_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sandbox-fleet-view.png")
        });
    std::fs::write(&out, &png).expect("screenshot written");
    eprintln!("screenshot: {}", out.display());

    let mut sandbox = sandbox;
    let status = sandbox.process.terminate().await;
    assert!(
        status.success(),
        "the sandbox stops cleanly on SIGTERM: {status}"
    );
}
