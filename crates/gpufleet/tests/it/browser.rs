//! Headless Chromium (Debian's `chromium`, installed by scripts/test.sh)
//! driven over the DevTools protocol, and the policy both fleet-view tests
//! (the sandbox's and `gpufleet mokka --ui`'s) apply to fail one GPU.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::support::{KilledOnDrop, pipe_lines, wait_for_line};

/// An inventory-targeted runtime policy that fails one GPU: `rack`, `node`
/// and `gpu` are the rack index, Node slot and GPU index in `group`.
pub fn policy_failing_one_gpu(
    name: &str,
    inventory: &str,
    group: &str,
    (rack, node, gpu): (i32, i32, i32),
) -> mokka::api::SGPURuntimePolicy {
    use mokka::api::{
        DeviceState, PolicyTargetRef, RuntimeState, SGPURuntimePolicy, SGPURuntimePolicySpec,
        TargetGroup, TargetKind,
    };
    SGPURuntimePolicy::new(
        name,
        SGPURuntimePolicySpec {
            target_ref: PolicyTargetRef {
                group: TargetGroup::Mokka,
                kind: TargetKind::SgpuInventory,
                name: inventory.into(),
                rack_groups: Some(vec![group.into()]),
                rack_indexes: Some(vec![rack]),
                node_indexes: Some(vec![node]),
                gpu_indexes: Some(vec![gpu]),
            },
            runtime: Some(RuntimeState {
                device_state: Some(DeviceState::Failed),
                ..Default::default()
            }),
        },
    )
}

/// Starts a headless Chromium with its profile in `profile` and connects
/// to its blank page. The browser is killed when the first value drops.
pub async fn open(profile: &Path) -> (KilledOnDrop, Page) {
    let browser_binary = chromium();
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
    let page = Page {
        socket,
        next_id: 0,
        events: Vec::new(),
    };
    (browser, page)
}

pub fn chromium() -> PathBuf {
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
pub struct Page {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
    /// DevTools events (`Network.*` once enabled) received so far.
    events: Vec<Value>,
}

impl Page {
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
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
            if answer.get("method").is_some() {
                self.events.push(answer);
            }
        }
    }

    /// Sends `method` and does not wait for an answer: for a command such as
    /// `Page.crash`, after which the page's session has nobody to answer.
    /// Only the fleet-view bench (which includes this file) crashes a page.
    #[allow(dead_code)]
    pub async fn send_without_answer(&mut self, method: &str, params: Value) {
        self.next_id += 1;
        let request = json!({"id": self.next_id, "method": method, "params": params});
        self.socket
            .send(Message::text(request.to_string()))
            .await
            .expect("DevTools request sent");
    }

    /// The events named `method` received so far, removed from the buffer.
    pub fn take_events(&mut self, method: &str) -> Vec<Value> {
        let (taken, kept) = std::mem::take(&mut self.events)
            .into_iter()
            .partition(|event| event["method"] == method);
        self.events = kept;
        taken
    }

    pub async fn evaluate(&mut self, expression: &str) -> Value {
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
    pub async fn evaluate_until(
        &mut self,
        expression: &str,
        accept: impl Fn(&Value) -> bool,
    ) -> Value {
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
