//! `gpufleet mokka` as a process against a kube-sim over loopback: upstream
//! flags, a refused configuration, /healthz, /readyz and /metrics, a rack
//! created and a Node projected, a clean stop on SIGTERM and on Ctrl-C, and
//! the `--ui` fleet view in headless Chromium.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use crate::support::{KilledOnDrop, free_port, pipe_lines, poll_http};

#[test]
fn a_refused_configuration_names_the_flag_and_exits_before_contacting_a_cluster() {
    let output = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["mokka", "--workers", "0", "--kubeconfig", "/nonexistent"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--workers") && stderr.contains("workers and live Node GET timeout must be positive and status intervals non-negative"),
        "{stderr}"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["mokka"])
        .env("MOKKA_LOG_LEVEL", "verbose")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("MOKKA_LOG_LEVEL"));
}

#[test]
fn a_repeated_flag_takes_its_last_value_and_is_not_refused() {
    // The last --workers (0) is the one validated; clap's default would
    // refuse the repetition itself with "cannot be used multiple times".
    let output = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args([
            "mokka",
            "--workers",
            "5",
            "--workers",
            "0",
            "--kubeconfig",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        !stderr.contains("cannot be used multiple times")
            && stderr.contains("--workers")
            && stderr.contains("workers and live Node GET timeout must be positive"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_feature_gate_or_a_non_boolean_value_stops_the_process_naming_the_flag_the_variable_and_the_item()
 {
    let refused = |args: &[&str], env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gpufleet"));
        command
            .arg("mokka")
            .args(args)
            .args(["--kubeconfig", "/nonexistent"])
            .env_remove("MOKKA_CP_FEATURE_GATES");
        if let Some(gates) = env {
            command.env("MOKKA_CP_FEATURE_GATES", gates);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success(), "{args:?} {env:?} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            stderr.contains("--feature-gates (MOKKA_CP_FEATURE_GATES)"),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        stderr
    };
    let stderr = refused(&[], Some("NodeAgentAPI=true, Foo=true"));
    assert!(
        stderr.contains(
            "unrecognized feature gate \"Foo\" in item \"Foo=true\"; known gates: KubernetesEvents, NodeAgentAPI, RuntimePolicies"
        ),
        "{stderr}"
    );
    let stderr = refused(&["--feature-gates", "RuntimePolicies=maybe"], None);
    assert!(
        stderr.contains("item \"RuntimePolicies=maybe\": value \"maybe\" is not a boolean"),
        "{stderr}"
    );
    let stderr = refused(&["--feature-gates", "KubernetesEvents"], None);
    assert!(
        stderr.contains("item \"KubernetesEvents\" must be Name=true or Name=false"),
        "{stderr}"
    );
}

/// `--feature-gates` beats `MOKKA_CP_FEATURE_GATES` (which would be refused
/// here); with NodeAgentAPI and KubernetesEvents off the node-agent API is
/// not served and no Event is written, /metrics shows every gate, and the
/// JSON start line names them; upstream's decision messages follow in JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_gates_switch_off_the_node_agent_api_and_events_and_show_on_metrics_and_in_the_json_log()
 {
    let (sim, _dir, kubeconfig) = seeded_sim(1, &["node-a"]).await;
    let client = sim.client();
    let port = free_port();
    let mut controller = KilledOnDrop {
        name: "gpufleet mokka --feature-gates",
        child: mokka_command(&kubeconfig, port)
            .args([
                "--feature-gates",
                " NodeAgentAPI=false , KubernetesEvents=false",
            ])
            .env("MOKKA_CP_FEATURE_GATES", "NotAGate=true")
            .env_remove("MOKKA_LOG_FORMAT")
            .env_remove("MOKKA_LOG_LEVEL")
            .env_remove("MOKKA_CP_LOG_LEVEL")
            .env_remove("RUST_LOG")
            .spawn()
            .unwrap(),
    };
    let stderr = pipe_lines(controller.child.stderr.take().unwrap());
    let metrics = poll_http(port, "/metrics", |status, body| {
        status == 200 && body.contains(r#"mokka_rack_writes_total{verb="create"} 1"#)
    })
    .await;
    for (gate, value) in [
        ("KubernetesEvents", 0),
        ("NodeAgentAPI", 0),
        ("RuntimePolicies", 1),
    ] {
        assert!(
            metrics.contains(&format!(
                r#"mokka_feature_enabled{{name="{gate}"}} {value}"#
            )),
            "{gate}: {metrics}"
        );
    }
    let (code, _) = poll_http_status(port, "/v1alpha1/openapi.json").await;
    assert_eq!(code, 404, "the node-agent API is off");
    let (code, _) = poll_http_status(port, "/healthz").await;
    assert_eq!(code, 200);

    // JSON by default: the start line with the gates, then the decisions.
    let mut wanted: Vec<(&str, &str, &str)> = vec![
        (
            "starting Mokka control plane",
            "featureGates",
            "KubernetesEvents=false,NodeAgentAPI=false,RuntimePolicies=true",
        ),
        ("Created rack", "inventory", "inv"),
        ("Assigned Node to logical rack Node", "node", "node-a"),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while !wanted.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = stderr.recv_timeout(left) else {
            panic!("never logged {wanted:?}; lines:\n{}", seen.join("\n"));
        };
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) {
            wanted.retain(|(message, key, value)| {
                !(json["message"] == *message && json[*key] == *value)
            });
        } else {
            panic!("a log line that is not JSON: {line}");
        }
        seen.push(line);
    }
    // Gates off: the rack was created and the Node bound without an Event.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let written: Vec<_> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| event.reporting_controller.as_deref() == Some("mokka-controller"))
        .collect();
    assert!(written.is_empty(), "{written:?}");
    let status = controller.terminate().await;
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpufleet_mokka_projects_a_node_serves_health_readiness_metrics_and_the_fleet_view_and_stops_on_sigterm()
 {
    let (sim, _dir, kubeconfig) = seeded_sim(1, &["node-a"]).await;
    let client = sim.client();
    let port = free_port();
    let ui_port = free_port();
    let mut controller = start_controller(&kubeconfig, port, ui_port);
    assert_eq!(
        poll_http(port, "/healthz", |status, _| status == 200).await,
        "ok\n"
    );
    let ready = poll_http(port, "/readyz", |status, _| status == 200).await;
    assert!(ready.contains("leader"), "{ready}");
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let node = nodes.get("node-a").await.unwrap();
        if node
            .metadata
            .labels
            .unwrap_or_default()
            .get("mokka.nvidia.com/sgpu-assigned")
            .map(String::as_str)
            == Some("true")
        {
            break;
        }
        assert!(Instant::now() < deadline, "node-a was never projected");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // --ui: the fleet view of this cluster, from the replica's own client.
    let fleet = poll_http(ui_port, "/api/fleet", |status, body| {
        status == 200 && body.contains("\"node\":\"node-a\"") && body.contains("\"healthy\"")
    })
    .await;
    let fleet: serde_json::Value = serde_json::from_str(&fleet).unwrap();
    assert_eq!(fleet["racks"].as_array().map(Vec::len), Some(1), "{fleet}");
    assert_eq!(
        (
            fleet["summary"]["nodes"].as_u64(),
            fleet["summary"]["gpus"].as_u64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(fleet["tfjobs_watched"], false);
    assert_eq!(fleet["mode"], "cluster");
    // The page is a shell that loads the model; its title names the mode.
    let page = poll_http(ui_port, "/", |status, _| status == 200).await;
    assert!(page.contains("<title>gpufleet cluster</title>"), "{page}");
    // The leader gauge and the counters are set by different tasks (a
    // reconcile is counted when it ends, after its writes); wait until the
    // page shows all of them.
    let metrics = poll_http(port, "/metrics", |status, body| {
        status == 200
            && body.contains(r#"mokka_rack_writes_total{verb="create"} 1"#)
            && body.contains(
                r#"leader_election_master_status{name="control-plane.mokka.nvidia.com"} 1"#,
            )
            && body.contains(r#"mokka_reconcile_total{controller="inventories"}"#)
    })
    .await;
    assert!(
        metrics
            .contains(r#"leader_election_master_status{name="control-plane.mokka.nvidia.com"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"mokka_reconcile_total{controller="inventories"}"#),
        "{metrics}"
    );
    // At least the one apply; a Node event that arrives before the cache
    // holds our own write can cause a second, identical apply.
    assert!(!metrics.contains("mokka_node_patches_total 0"), "{metrics}");
    assert!(metrics.contains("mokka_node_patches_total"), "{metrics}");

    // The node-agent API shares the port; without a token it is refused.
    let (code, body) = poll_http_status(
        port,
        &format!(
            "/v1alpha1/nodes/node-a/assignment?uid={}",
            node_uid(&client).await
        ),
    )
    .await;
    assert_eq!(code, 401, "{body}");
    let (code, _) = poll_http_status(port, "/v1alpha1/openapi.json").await;
    assert_eq!(code, 200);

    // `mokka node-view` answers from its own synced caches, through the same code path.
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["mokka", "node-view", "node-a", "-o", "json", "--kubeconfig"])
        .arg(&kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let view: mokka::node_view::NodeAssignments =
        serde_json::from_slice(&output.stdout).expect("node-view -o json prints the API body");
    assert_eq!(view.node.name, "node-a");
    assert_eq!(view.assignments.len(), 1);
    assert_eq!(view.assignments[0].gpus.len(), 1);
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["mokka", "node-view", "node-a", "--kubeconfig"])
        .arg(&kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .await
        .unwrap();
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        table.contains(&format!(
            "Rack {} (inventory inv, group compute, rack 0, node 0)",
            view.assignments[0].rack.name
        )),
        "{table}"
    );
    assert!(table.contains("GPU  UUID"), "{table}");
    assert!(table.contains("Healthy"), "{table}");
    let missing = tokio::process::Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["mokka", "node-view", "Bad_Name", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .await
        .unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("is not a valid Kubernetes object name")
    );

    let status = controller.terminate().await;
    assert!(status.success(), "{status:?}");
}

/// kube-sim seeded by [`seed_one_rack`], a temporary directory and a
/// kubeconfig file for the kube-sim in it.
async fn seeded_sim(
    gpus: i32,
    nodes: &[&str],
) -> (kube_sim::KubeSim, tempfile::TempDir, std::path::PathBuf) {
    let sim = kube_sim::KubeSim::builder().start().await.unwrap();
    seed_one_rack(&sim.client(), gpus, nodes).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    (sim, dir, kubeconfig)
}

/// The Mokka CRDs, a profile of `nodes.len()` slots with `gpus` GPUs each,
/// those eligible Nodes, and an inventory `inv` of one rack in group
/// `compute`.
async fn seed_one_rack(client: &kube::Client, gpus: i32, nodes: &[&str]) {
    for crd in mokka::crds() {
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .unwrap();
    }
    let racks: Api<mokka::api::SGPURack> = Api::all(client.clone());
    while racks.list(&ListParams::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let slots = i32::try_from(nodes.len()).unwrap();
    let profile =
        mokka::api::SGPURackProfile::new("p", mokka::fixtures::example_profile_spec(slots, gpus));
    Api::<mokka::api::SGPURackProfile>::all(client.clone())
        .create(&PostParams::default(), &profile)
        .await
        .unwrap();
    for name in nodes {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"mokka.nvidia.com/sgpu-node": "true"}}}),
        )
        .unwrap();
        Api::<Node>::all(client.clone())
            .create(&PostParams::default(), &node)
            .await
            .unwrap();
    }
    let inventory: mokka::api::SGPUInventory = serde_json::from_value(json!({
        "apiVersion": "mokka.nvidia.com/v1alpha1", "kind": "SGPUInventory", "metadata": {"name": "inv"},
        "spec": {"rackGroups": [{"id": "compute", "count": 1, "profileRef": {"name": "p"}}]}
    }))
    .unwrap();
    Api::<mokka::api::SGPUInventory>::all(client.clone())
        .create(&PostParams::default(), &inventory)
        .await
        .unwrap();
}

/// `gpufleet mokka` on `kubeconfig`, admin server on `port`, fleet view
/// (`--ui`) on `ui_port`.
fn start_controller(kubeconfig: &std::path::Path, port: u16, ui_port: u16) -> KilledOnDrop {
    KilledOnDrop {
        name: "gpufleet mokka",
        child: mokka_command(kubeconfig, port)
            .env("MOKKA_CP_UI_ADDR", format!("127.0.0.1:{ui_port}"))
            .spawn()
            .unwrap(),
    }
}

/// `gpufleet mokka` on `kubeconfig` with its admin server on `port`, stderr piped.
fn mokka_command(kubeconfig: &std::path::Path, port: u16) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpufleet"));
    command
        .args([
            "mokka",
            "--leader-election-namespace",
            "default",
            "--status-debounce",
            "0s",
        ])
        .env("MOKKA_CP_KUBECONFIG", kubeconfig)
        .env("MOKKA_CP_LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env_remove("KUBECONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

async fn node_uid(client: &kube::Client) -> String {
    Api::<Node>::all(client.clone())
        .get("node-a")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

/// The status and body of a GET, retried while the port does not answer.
async fn poll_http_status(port: u16, path: &str) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(answer) = crate::support::http_get(port, path) {
            return answer;
        }
        assert!(Instant::now() < deadline, "{path} never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `gpufleet mokka --ui` in headless Chromium: the page's counts equal the
/// API's, and a runtime policy that fails one GPU turns that GPU's cell to
/// "lost" through the live event stream, without a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_view_of_gpufleet_mokka_ui_counts_the_clusters_gpus_and_shows_a_failed_one_live()
{
    use mokka::api::{SGPURack, SGPURuntimePolicy};
    crate::browser::chromium();
    let (sim, dir, kubeconfig) = seeded_sim(4, &["node-a", "node-b"]).await;
    let client = sim.client();
    let ui_port = free_port();
    let mut controller = start_controller(&kubeconfig, free_port(), ui_port);
    // Both Nodes bound and projected: the view has everything to show.
    let fleet = poll_http(ui_port, "/api/fleet", |status, body| {
        status == 200
            && body.contains("\"node\":\"node-a\"")
            && body.contains("\"node\":\"node-b\"")
    })
    .await;
    let fleet: serde_json::Value = serde_json::from_str(&fleet).unwrap();
    assert_eq!(
        (
            fleet["summary"]["nodes"].as_u64(),
            fleet["summary"]["gpus"].as_u64()
        ),
        (Some(2), Some(8)),
        "{fleet}"
    );
    let racks = Api::<SGPURack>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let gpus: usize = racks
        .iter()
        .flat_map(|rack| &rack.spec.nodes)
        .map(|slot| slot.gpus.len())
        .sum();
    assert_eq!((racks.len(), gpus), (1, 8));

    let (_browser, mut page) = crate::browser::open(&dir.path().join("chromium-profile")).await;
    page.call("Page.enable", json!({})).await;
    // A deep link to the rack opens its detail with every GPU of it.
    let rack_name = racks[0].metadata.name.clone().expect("the rack's name");
    page.call(
        "Page.navigate",
        json!({"url": format!("http://127.0.0.1:{ui_port}/#rack={rack_name}")}),
    )
    .await;
    page.evaluate_until("document.getElementById('live')?.dataset.live", |v| {
        v == "live"
    })
    .await;
    page.evaluate_until("window.fleetLoaded === true", |v| v == true)
        .await;
    let count = |id: &str| format!("Number(document.getElementById('{id}')?.textContent)");
    page.evaluate_until(&count("count-gpus"), |v| *v == json!(gpus))
        .await;
    assert_eq!(page.evaluate(&count("count-racks")).await, json!(1));
    assert_eq!(page.evaluate(&count("count-nodes")).await, json!(2));
    assert_eq!(
        page.evaluate("document.querySelectorAll('#detail td.gpu').length")
            .await,
        json!(gpus)
    );
    assert_eq!(page.evaluate(&count("count-lost")).await, json!(0));
    assert_eq!(
        page.evaluate("document.title").await,
        json!("gpufleet cluster")
    );
    page.evaluate("window.notReloaded = 'yes'").await;

    let uuid = racks[0]
        .spec
        .node_by_index(1)
        .and_then(|slot| slot.gpus.iter().find(|gpu| gpu.index == 2))
        .map(|gpu| gpu.uuid.clone())
        .expect("slot 1, GPU 2");
    let cell =
        format!("document.querySelector('#detail td.gpu[data-uuid=\"{uuid}\"]')?.dataset.state");
    assert_eq!(page.evaluate(&cell).await, json!("healthy"));
    let policy =
        crate::browser::policy_failing_one_gpu("fail-one-gpu", "inv", "compute", (0, 1, 2));
    Api::<SGPURuntimePolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    page.evaluate_until(&cell, |v| v == "lost").await;
    assert_eq!(page.evaluate(&count("count-lost")).await, json!(1));
    assert_eq!(page.evaluate("window.notReloaded").await, json!("yes"));
    // Deleting the policy heals the GPU on the page too.
    Api::<SGPURuntimePolicy>::all(client.clone())
        .delete("fail-one-gpu", &Default::default())
        .await
        .unwrap();
    page.evaluate_until(&cell, |v| v == "healthy").await;
    assert_eq!(page.evaluate("window.notReloaded").await, json!("yes"));

    let status = controller.interrupt().await;
    assert!(
        status.success(),
        "gpufleet mokka stops cleanly on Ctrl-C: {status:?}"
    );
}
