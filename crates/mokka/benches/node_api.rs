//! The node-agent API under load (issue 14 item 6): the real controller on
//! an in-process kube-sim with N Nodes bound (racks of 100 Nodes x 1 GPU)
//! and P accepted runtime policies, its node API served on a loopback port,
//! and C concurrent keep-alive HTTP/1.1 clients (hyper, lighter than
//! kube-rs) asking for random Nodes' assignments with a ServiceAccount
//! bearer token (reviewed by TokenReview and SubjectAccessReview against
//! kube-sim, cached 10 s). Prints p50/p99 latency and requests/s per run,
//! then the time from a policy change to every affected long-poll
//! answered (one rack's 100 agents; then 1,000 agents under an
//! inventory-wide change).
//!
//! Run: `cargo bench -p mokka --bench node_api -- [nodes] [policies] [clients] [seconds] [runs] [rate]`
//! (defaults 10000 1000 64 10 3 5000): closed-loop runs (the sustained
//! rate), then open-loop runs at `rate` requests/s (the latency there).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use controller_kit::LeaderElectionConfig;
use futures::{StreamExt, stream};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use mokka::api::{SGPUInventory, SGPURack, SGPURackProfile, SGPURuntimePolicy};
use mokka::controller::MokkaController;
use mokka::plan::options::Options;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NODES_PER_RACK: usize = 100;
const TOKEN: &str = "bench-agent-token";

type Http = Client<HttpConnector, Empty<Bytes>>;

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

async fn request(http: &Http, port: u16, path: &str, etag: Option<&str>) -> (u16, Option<String>) {
    let mut builder = axum::http::Request::get(format!("http://127.0.0.1:{port}{path}"))
        .header("authorization", format!("Bearer {TOKEN}"));
    if let Some(etag) = etag {
        builder = builder.header("if-none-match", etag);
    }
    let response = http
        .request(builder.body(Empty::new()).expect("request"))
        .await
        .expect("the node API answers");
    let status = response.status().as_u16();
    let etag = response
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let _ = response.into_body().collect().await;
    (status, etag)
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// `clients` keep-alive clients asking for random Nodes' assignments for
/// `seconds`. Closed loop without `rate`; with it, each client sends
/// `rate / clients` requests per second on a fixed schedule and a latency
/// runs from the scheduled send (no coordinated omission).
async fn load(
    http: &Http,
    port: u16,
    uids: &Arc<Vec<(String, String)>>,
    clients: usize,
    seconds: u64,
    rate: Option<usize>,
) -> Vec<Duration> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let interval = rate.map(|rate| Duration::from_secs_f64(clients as f64 / rate.max(1) as f64));
    let mut workers = Vec::new();
    for worker in 0..clients {
        let http = http.clone();
        let uids = Arc::clone(uids);
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut next = worker.wrapping_mul(7919);
            // Spread the clients' schedules over one interval.
            let mut scheduled =
                interval.map(|interval| started + interval.mul_f64(worker as f64 / clients as f64));
            loop {
                let sent = match (&mut scheduled, interval) {
                    (Some(at), Some(interval)) => {
                        let this = *at;
                        *at += interval;
                        tokio::time::sleep_until(this.into()).await;
                        this
                    }
                    _ => Instant::now(),
                };
                if sent >= deadline {
                    break;
                }
                next = (next.wrapping_mul(1_103_515_245).wrapping_add(12_345)) % uids.len();
                let (name, uid) = &uids[next];
                let (status, _) = request(
                    &http,
                    port,
                    &format!("/v1alpha1/nodes/{name}/assignment?uid={uid}"),
                    None,
                )
                .await;
                latencies.push(sent.elapsed());
                assert_eq!(status, 200, "{name}");
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for worker in workers {
        latencies.extend(worker.await.expect("client"));
    }
    latencies.sort();
    latencies
}

fn print_run(
    run: usize,
    nodes: usize,
    policies: usize,
    clients: usize,
    latencies: &[Duration],
    elapsed: Duration,
    load_before: &str,
) {
    println!(
        "| {run} | {nodes} | {policies} | {clients} | {} | {:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {load_before} → {} |",
        latencies.len(),
        latencies.len() as f64 / elapsed.as_secs_f64(),
        percentile(latencies, 0.50).as_secs_f64() * 1e3,
        percentile(latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        load_average(),
    );
}

#[allow(clippy::too_many_lines)]
async fn bench(
    nodes: usize,
    policies: usize,
    clients: usize,
    seconds: u64,
    runs: usize,
    rate: usize,
) {
    let racks = nodes / NODES_PER_RACK;
    let sim = kube_sim::KubeSim::builder()
        .kubelet(kube_sim::KubeletConfig::disabled())
        .watch_history(nodes * 8)
        .static_tokens([kube_sim::tokens::StaticToken::new(
            TOKEN,
            "system:serviceaccount:mokka-system:bench-agents",
            "bench-agents-uid",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:mokka-system",
            ],
        )])
        .start()
        .await
        .expect("kube-sim");
    let client = sim.client();
    for crd in mokka::crds() {
        Api::<CustomResourceDefinition>::all(client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .expect("crd");
    }
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "mokka-system"}})).unwrap(),
        )
        .await
        .expect("namespace");
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "bench-agents"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "bench-rack-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "bench-agents", "namespace": "mokka-system"}]
            }))
            .unwrap(),
        )
        .await
        .expect("binding");
    Api::<k8s_openapi::api::rbac::v1::ClusterRole>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "bench-rack-reader"},
                "rules": [{"apiGroups": ["mokka.nvidia.com"], "resources": ["sgpuracks"], "verbs": ["get"]}]
            }))
            .unwrap(),
        )
        .await
        .expect("role");
    let racks_api: Api<SGPURack> = Api::all(client.clone());
    while racks_api.list(&ListParams::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Api::<SGPURackProfile>::all(client.clone())
        .create(
            &PostParams::default(),
            &SGPURackProfile::new(
                "bench",
                mokka::fixtures::example_profile_spec(NODES_PER_RACK as i32, 1),
            ),
        )
        .await
        .expect("profile");
    let node_api: Api<Node> = Api::all(client.clone());
    let uids: Vec<(String, String)> = stream::iter(0..nodes)
        .map(|i| {
            let node_api = node_api.clone();
            async move {
                let name = format!("node-{i:06}");
                let node: Node = serde_json::from_value(json!({"metadata": {"name": name,
                    "labels": {"mokka.nvidia.com/sgpu-node": "true", "pool": "bench"}}}))
                .unwrap();
                let created = node_api
                    .create(&PostParams::default(), &node)
                    .await
                    .expect("node");
                (name, created.metadata.uid.unwrap_or_default())
            }
        })
        .buffered(32)
        .collect()
        .await;
    let inventories: Api<SGPUInventory> = Api::all(client.clone());
    inventories
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "mokka.nvidia.com/v1alpha1", "kind": "SGPUInventory", "metadata": {"name": "bench"},
                "spec": {"rackGroups": [{"id": "compute", "count": racks, "profileRef": {"name": "bench"},
                    "placement": {"nodeSelector": {"matchLabels": {"pool": "bench"}}}}]}
            }))
            .unwrap(),
        )
        .await
        .expect("inventory");
    // Policies at Node scope on distinct slots: none conflicts, all accepted.
    let policy_api: Api<SGPURuntimePolicy> = Api::all(client.clone());
    stream::iter(0..policies)
        .for_each_concurrent(32, |i| {
            let policy_api = policy_api.clone();
            async move {
                let policy: SGPURuntimePolicy = serde_json::from_value(json!({
                    "apiVersion": "mokka.nvidia.com/v1alpha1", "kind": "SGPURuntimePolicy",
                    "metadata": {"name": format!("policy-{i:05}")},
                    "spec": {"targetRef": {"group": "mokka.nvidia.com", "kind": "SGPUInventory", "name": "bench",
                        "rackIndexes": [i % racks.max(1)], "nodeIndexes": [(i / racks.max(1)) % NODES_PER_RACK]},
                        "runtime": {"telemetry": {"temperature": {"gpuCelsius": 40 + (i % 50)}}}}
                }))
                .unwrap();
                policy_api
                    .create(&PostParams::default(), &policy)
                    .await
                    .expect("policy");
            }
        })
        .await;

    let controller =
        Arc::new(MokkaController::new(client.clone(), Options::default()).expect("controller"));
    let mut election = LeaderElectionConfig::new("mokka-system", "bench");
    election.identity = "bench".into();
    let shutdown = CancellationToken::new();
    let task = {
        let (controller, shutdown) = (Arc::clone(&controller), shutdown.clone());
        tokio::spawn(async move {
            if let Err(error) = controller.run(election, shutdown).await {
                eprintln!("controller failed: {error}");
            }
        })
    };
    let converged = Instant::now();
    loop {
        let summary = inventories
            .get("bench")
            .await
            .ok()
            .and_then(|i| i.status)
            .and_then(|s| s.runtime_policies);
        let bound = controller
            .assignments_for_node(&uids[nodes - 1].0, &uids[nodes - 1].1)
            .map(|a| !a.is_empty())
            .unwrap_or(false);
        if bound && summary.is_some_and(|s| s.accepted as usize == policies) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "setup: {nodes} Nodes bound and {policies} policies accepted {:.1} s after the controller started",
        converged.elapsed().as_secs_f64()
    );

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("listener");
    let port = listener.local_addr().expect("address").port();
    let router = controller.node_api().router();
    let server_stop = CancellationToken::new();
    let server = {
        let stop = server_stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        })
    };
    let http: Http = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(clients * 16)
        .build_http();
    let uids = Arc::new(uids);
    let path = |i: usize| format!("/v1alpha1/nodes/{}/assignment?uid={}", uids[i].0, uids[i].1);
    // Warm-up: the reviews are cached and the connections open.
    assert_eq!(request(&http, port, &path(0), None).await.0, 200);

    println!(
        "Closed loop: each client sends its next request when the last is answered (the rate is what the server sustains)."
    );
    println!();
    println!(
        "| run | Nodes | policies | clients | requests | req/s | p50 | p99 | max | load before → after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for run in 1..=runs {
        let load_before = load_average();
        let started = Instant::now();
        let latencies = load(&http, port, &uids, clients, seconds, None).await;
        print_run(
            run,
            nodes,
            policies,
            clients,
            &latencies,
            started.elapsed(),
            &load_before,
        );
    }
    println!();
    println!(
        "Open loop at {rate} requests/s: every client sends on a fixed schedule; a latency is measured from the scheduled send, so a stalled server's queue counts."
    );
    println!();
    println!(
        "| run | Nodes | policies | clients | requests | req/s | p50 | p99 | max | load before → after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for run in 1..=runs {
        let load_before = load_average();
        let started = Instant::now();
        let latencies = load(&http, port, &uids, clients, seconds, Some(rate)).await;
        print_run(
            run,
            nodes,
            policies,
            clients,
            &latencies,
            started.elapsed(),
            &load_before,
        );
    }

    // The agents of rack 0 (a Rack-scope change affects exactly them).
    let index_of: std::collections::HashMap<&str, usize> = uids
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.as_str(), i))
        .collect();
    let rack_zero: Vec<usize> = racks_api
        .list(&ListParams::default())
        .await
        .expect("racks")
        .items
        .iter()
        .filter(|rack| rack.spec.identity.rack_index == 0)
        .flat_map(|rack| rack.spec.nodes.iter())
        .filter_map(|slot| slot.node_ref.as_ref())
        .filter_map(|node| index_of.get(node.name.as_str()).copied())
        .collect();

    // Policy change → every affected long-poll answered.
    println!();
    println!("| change | agents waiting | all answered (200) after | load |");
    println!("|---|---|---|---|");
    for (label, agents, target) in [
        (
            "Rack-scope policy on rack 0",
            NODES_PER_RACK.min(nodes),
            json!({"rackIndexes": [0]}),
        ),
        ("Inventory-scope policy", 1000.min(nodes), json!({})),
    ] {
        for round in 0..runs {
            let name = format!(
                "change-{}-{round}",
                if target.as_object().is_some_and(|o| o.is_empty()) {
                    "inventory"
                } else {
                    "rack"
                }
            );
            let watched: Vec<usize> = if target.as_object().is_some_and(|o| o.is_empty()) {
                (0..agents).collect()
            } else {
                rack_zero.clone()
            };
            let mut etags = Vec::new();
            for &i in &watched {
                let (status, etag) = request(&http, port, &path(i), None).await;
                assert_eq!(status, 200);
                etags.push(etag.expect("etag"));
            }
            let mut waits = Vec::new();
            for (&i, etag) in watched.iter().zip(&etags) {
                let http = http.clone();
                let path = format!("{}&watch=true&timeoutSeconds=30", path(i));
                let etag = etag.clone();
                waits.push(tokio::spawn(async move {
                    let (status, _) = request(&http, port, &path, Some(&etag)).await;
                    (status, Instant::now())
                }));
            }
            // Let every long-poll reach its wait.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let runtime =
                json!({"deviceState": if round % 2 == 0 { "Degraded" } else { "Failed" }});
            let mut target_ref =
                json!({"group": "mokka.nvidia.com", "kind": "SGPUInventory", "name": "bench"});
            if let (Some(t), Some(axes)) = (target_ref.as_object_mut(), target.as_object()) {
                t.extend(axes.clone());
            }
            let policy: SGPURuntimePolicy = serde_json::from_value(json!({
                "apiVersion": "mokka.nvidia.com/v1alpha1", "kind": "SGPURuntimePolicy",
                "metadata": {"name": name},
                "spec": {"targetRef": target_ref, "runtime": runtime}
            }))
            .unwrap();
            let changed = Instant::now();
            policy_api
                .create(&PostParams::default(), &policy)
                .await
                .expect("policy change");
            let mut slowest = Duration::ZERO;
            let mut answered = 0;
            for wait in waits {
                let (status, at) = wait.await.expect("long-poll");
                if status == 200 {
                    answered += 1;
                }
                slowest = slowest.max(at.saturating_duration_since(changed));
            }
            println!(
                "| {label} (round {}) | {} | {:.0} ms ({answered} answered 200) | {} |",
                round + 1,
                watched.len(),
                slowest.as_secs_f64() * 1e3,
                load_average()
            );
            // Remove it again so the next round changes the state once more.
            let _ = policy_api.delete(&name, &Default::default()).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    server_stop.cancel();
    let _ = server.await;
    shutdown.cancel();
    let _ = task.await;
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|arg| arg.parse().ok())
        .collect();
    let arg = |i: usize, default: usize| args.get(i).copied().unwrap_or(default);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(bench(
        arg(0, 10_000),
        arg(1, 1_000),
        arg(2, 64),
        arg(3, 10) as u64,
        arg(4, 3),
        arg(5, 5_000),
    ));
}
