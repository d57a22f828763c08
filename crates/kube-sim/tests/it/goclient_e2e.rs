//! The Go client program (`tools/goclient`: client-go and
//! controller-runtime at the versions of Kubernetes v1.37.2, unmodified)
//! against the lane's API server: typed CRUD over protobuf, the OpenAPI v2
//! models kubectl validates with (from gnostic protobuf), informers with
//! resync, a watch-list's end bookmark, a leaderelection Lease handover,
//! DeleteOptions preconditions, an Eviction, exec over SPDY and WebSocket
//! and a controller-runtime manager. It must print exactly
//! `tools/goclient/expected.txt` on kube-sim and on kube-apiserver
//! (`scripts/test.sh --real`).
//!
//! The exec target is a pod this test starts: on kube-sim an exec handler
//! plays `sh -c`; on the real lane the pod runs on a KWOK Node whose `Exec`
//! runs the command in a local shell, so both lanes answer the same bytes.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube_sim::exec::{ExecMatcher, ExecOutput, ExecRequest};
use kube_sim::lane::Lane;
use serde_json::json;

const EXPECTED: &str = include_str!("../../../../tools/goclient/expected.txt");

fn binary() -> std::path::PathBuf {
    let path = std::env::var_os("GPUFLEET_GOCLIENT").unwrap_or_else(|| {
        panic!("GPUFLEET_GOCLIENT is not set: scripts/test.sh builds tools/goclient into ~/.cache/gpufleet/goclient and sets it (or run `go build -o goclient ./tools/goclient` and point the variable at it)")
    });
    let path = std::path::PathBuf::from(path);
    assert!(
        path.exists(),
        "GPUFLEET_GOCLIENT={} does not exist",
        path.display()
    );
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_go_and_controller_runtime_run_unmodified_with_the_transcript_kube_apiserver_gives()
{
    let binary = binary();
    let dir = tempfile::tempdir().unwrap();
    // kube-sim as `gpufleet sim serve` runs it: TLS and the admin token.
    let (_sim, kubeconfig) = match Lane::from_env().expect("the lane switch") {
        Lane::Sim => {
            let sim = kube_sim::KubeSim::builder()
                .tls()
                .require_token()
                .exec_handler(
                    ExecMatcher::any().command(["/bin/sh", "-c"]),
                    sh_reading_a_line,
                )
                .start()
                .await
                .expect("kube-sim starts");
            let path = dir.path().join("kubeconfig");
            std::fs::write(&path, sim.kubeconfig()).unwrap();
            (Some(sim), path)
        }
        Lane::Real(real) => (None, real.admin_kubeconfig),
    };
    let client = kube_sim::lane::client_from_kubeconfig(&kubeconfig)
        .await
        .expect("a client of the lane");
    let target = ExecTarget::start(&client).await;
    let run = tokio::process::Command::new(&binary)
        .arg(&kubeconfig)
        .arg(format!("{}/{EXEC_POD}", target.namespace))
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("goclient finishes within 180 s")
        .expect("goclient starts");
    target.stop().await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "goclient failed ({}):\nstdout:\n{stdout}\nstderr (last 4000 bytes):\n{}",
        output.status,
        &stderr[stderr.len().saturating_sub(4000)..]
    );
    assert_eq!(
        stdout, EXPECTED,
        "the transcript differs from kube-apiserver's"
    );
}

const EXEC_POD: &str = "shell";

/// What `/bin/sh -c 'read line; echo "out:$line"; echo "err:$line" >&2'`
/// does, for kube-sim's exec handler (the real lane runs the shell).
async fn sh_reading_a_line(mut request: ExecRequest) -> ExecOutput {
    let script = request.command.get(2).cloned().unwrap_or_default();
    let input = request.stdin.read_to_end().await;
    let text = String::from_utf8_lossy(&input);
    let line = text.lines().next().unwrap_or_default();
    if script != r#"read line; echo "out:$line"; echo "err:$line" >&2"# {
        return ExecOutput::failure(
            2,
            format!("kube-sim's sh stand-in does not run {script:?}\n"),
        );
    }
    ExecOutput::stdout(format!("out:{line}\n")).with_stderr(format!("err:{line}\n"))
}

/// A running pod to exec into: a KWOK-managed Node (kube-sim's kubelet runs
/// it too), the pod bound to it and, on the real lane, the KWOK `Exec`
/// that lets its commands run in a local shell.
struct ExecTarget {
    client: kube::Client,
    /// Namespace and Node are named per run: a retry must not meet the
    /// last run's namespace still terminating.
    namespace: String,
    node: String,
}

impl ExecTarget {
    async fn start(client: &kube::Client) -> Self {
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
            % 1_000_000;
        let target = Self {
            client: client.clone(),
            namespace: format!("goclient-exec-{run}"),
            node: format!("goclient-exec-{run}"),
        };
        let (ns, node_name) = (target.namespace.as_str(), target.node.as_str());
        let pp = PostParams::default();
        let namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&pp, &namespace)
            .await
            .expect("exec namespace");
        let node = serde_json::from_value(json!({
            "metadata": {"name": node_name, "annotations": {"kwok.x-k8s.io/node": "fake"}}
        }))
        .unwrap();
        Api::<Node>::all(client.clone())
            .create(&pp, &node)
            .await
            .expect("exec node");
        if Lane::from_env().expect("the lane switch").is_real() {
            let exec: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Exec",
                "metadata": {"name": EXEC_POD, "namespace": ns},
                "spec": {"execs": [{"local": {"workDir": "/tmp"}}]}
            }))
            .unwrap();
            kube_sim::lane::kwok_execs(client, ns)
                .create(&pp, &exec)
                .await
                .expect("KWOK Exec");
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let pod = serde_json::from_value(json!({
            "metadata": {"name": EXEC_POD},
            "spec": {"nodeName": node_name, "containers": [{"name": "sh", "image": "busybox:1.37"}]}
        }))
        .unwrap();
        pods.create(&pp, &pod).await.expect("exec pod");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let phase = pods.get(EXEC_POD).await.ok().and_then(|p| p.status?.phase);
            if phase.as_deref() == Some("Running") {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the exec pod is not Running within 60 s (phase {phase:?})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        target
    }

    /// Removes what [`ExecTarget::start`] made, so the real lane is left as
    /// it was.
    async fn stop(self) {
        let dp = DeleteParams::default().grace_period(0);
        let _ = Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .delete(EXEC_POD, &dp)
            .await;
        let _ = kube_sim::lane::kwok_execs(&self.client, &self.namespace)
            .delete(EXEC_POD, &dp)
            .await;
        let _ = Api::<Node>::all(self.client.clone())
            .delete(&self.node, &dp)
            .await;
        let _ = Api::<Namespace>::all(self.client.clone())
            .delete(&self.namespace, &dp)
            .await;
    }
}
