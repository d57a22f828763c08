//! Upstream Mokka's opt-in KWOK scale test (`tests/kwok`), here on kube-sim
//! in the same process: the controller against N eligible Nodes in racks of
//! 100 Nodes x 1 GPU. Measures the time from start to every Node projected
//! (the inventory Programmed), the time to converge after a controller
//! restart (with the rack writes and Node patches it made: expected zero),
//! after one Node replaced (same name, new UID), after the inventory
//! shrinks by 10 %, and the process RSS (kube-sim included).
//!
//! Run: `cargo bench -p mokka --bench controller_scale -- 1000 10000`
//! (tiers as arguments; default 1000 and 10000). `trickle1000` instead
//! measures the inventory applied first and 1,000 Nodes created one by one
//! after it: the rack and Event writes their arrival costs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_kit::LeaderElectionConfig;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use mokka::api::{SGPUInventory, SGPURack, SGPURackProfile};
use mokka::controller::MokkaController;
use mokka::plan::options::Options;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NODES_PER_RACK: usize = 100;

// The allocator `gpufleet` runs on (see its main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Replica {
    controller: Arc<MokkaController>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

async fn start(client: &kube::Client, identity: &str) -> Replica {
    // `MOKKA_BENCH_WORKERS` overrides the default workers per queue (for
    // comparisons; the table in docs/benchmarks.md says which was used).
    let mut options = Options::default();
    if let Some(workers) = std::env::var("MOKKA_BENCH_WORKERS")
        .ok()
        .and_then(|value| value.parse().ok())
    {
        options.workers = workers;
    }
    let controller = Arc::new(MokkaController::new(client.clone(), options).expect("controller"));
    let mut election = LeaderElectionConfig::new("mokka-system", "bench");
    election.identity = identity.to_string();
    election.lease_duration = Duration::from_secs(3);
    election.renew_deadline = Duration::from_secs(2);
    election.retry_period = Duration::from_millis(500);
    let shutdown = CancellationToken::new();
    let task = {
        let (controller, shutdown) = (Arc::clone(&controller), shutdown.clone());
        tokio::spawn(async move {
            if let Err(error) = controller.run(election, shutdown).await {
                eprintln!("controller failed: {error}");
            }
        })
    };
    Replica {
        controller,
        shutdown,
        task,
    }
}

impl Replica {
    async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.task.await;
    }

    /// Leading, nothing queued, and still nothing queued 1 s later.
    async fn idle(&self) {
        loop {
            if self.controller.leader_ready() && self.controller.queued_keys() == 0 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if self.controller.queued_keys() == 0 {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

async fn programmed(inventories: &Api<SGPUInventory>, generation_at_least: i64) {
    loop {
        if let Ok(inventory) = inventories.get("bench").await
            && let Some(status) = &inventory.status
            && let Some(conditions) = &status.conditions
            && conditions.iter().any(|c| {
                c.type_ == "Programmed"
                    && c.status == "True"
                    && c.observed_generation.unwrap_or(0) >= generation_at_least
            })
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// kube-sim with Mokka's CRDs, the controller's namespace and profile
/// `bench` of racks of [`NODES_PER_RACK`] Nodes.
async fn server(nodes: usize) -> kube_sim::KubeSim {
    let sim = kube_sim::KubeSim::builder()
        .kubelet(kube_sim::KubeletConfig::disabled())
        .watch_history(nodes * 8)
        .start()
        .await
        .expect("kube-sim");
    let client = sim.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in mokka::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("crd");
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "mokka-system"}})).unwrap(),
        )
        .await
        .expect("namespace");
    let profiles: Api<SGPURackProfile> = Api::all(client.clone());
    let racks_api: Api<SGPURack> = Api::all(client.clone());
    while racks_api.list(&ListParams::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    profiles
        .create(
            &PostParams::default(),
            &SGPURackProfile::new(
                "bench",
                mokka::fixtures::example_profile_spec(NODES_PER_RACK as i32, 1),
            ),
        )
        .await
        .expect("profile");
    sim
}

/// Node `node-<i>`, eligible for inventory `bench`.
fn bench_node(i: usize) -> Node {
    serde_json::from_value(json!({"metadata": {"name": format!("node-{i:06}"),
        "labels": {"mokka.nvidia.com/sgpu-node": "true", "pool": "bench"}}}))
    .expect("a valid Node")
}

/// Inventory `bench`: one group of `racks` racks of profile `bench`.
fn bench_inventory(racks: usize) -> SGPUInventory {
    serde_json::from_value(json!({
        "apiVersion": "mokka.nvidia.com/v1alpha1", "kind": "SGPUInventory", "metadata": {"name": "bench"},
        "spec": {"rackGroups": [{"id": "compute", "count": racks, "profileRef": {"name": "bench"},
            "placement": {"nodeSelector": {"matchLabels": {"pool": "bench"}}}}]}
    }))
    .expect("a valid inventory")
}

async fn tier(nodes: usize) {
    let racks = nodes / NODES_PER_RACK;
    let sim = server(nodes).await;
    let client = sim.client();
    let node_api: Api<Node> = Api::all(client.clone());
    let setup = Instant::now();
    stream::iter(0..nodes)
        .for_each_concurrent(32, |i| {
            let node_api = node_api.clone();
            async move {
                node_api
                    .create(&PostParams::default(), &bench_node(i))
                    .await
                    .expect("node");
            }
        })
        .await;
    let inventories: Api<SGPUInventory> = Api::all(client.clone());
    inventories
        .create(&PostParams::default(), &bench_inventory(racks))
        .await
        .expect("inventory");
    let setup = setup.elapsed();

    // 1. Start to every Node projected.
    let started = Instant::now();
    let first = start(&client, "bench-a").await;
    // Progress on stderr every 5 s: where the start-up spends its time.
    let progress = {
        let controller = Arc::clone(&first.controller);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                eprintln!(
                    "progress {nodes}: {:.0} s, {} rack writes, {} Node patches, {} keys queued",
                    started.elapsed().as_secs_f64(),
                    controller.metrics().rack_write_count(),
                    controller.metrics().node_patches.get(),
                    controller.queued_keys(),
                );
            }
        })
    };
    programmed(&inventories, 1).await;
    let projected = started.elapsed();
    progress.abort();
    first.idle().await;
    let first_patches = first.controller.metrics().node_patches.get();
    first.stop().await;
    // Where the start-up's API requests went (stderr, so the table on
    // stdout stays a table): kube-sim's own counters, reads apart.
    for line in sim.metrics().encode().lines() {
        let write = ["\"create\"", "\"update\"", "\"patch\"", "\"delete\""]
            .iter()
            .any(|verb| line.contains(&format!("verb={verb}")));
        if line.starts_with("kube_sim_requests_total") && write {
            eprintln!("start-up {nodes}: {line}");
        }
    }

    // 2. Restart with unchanged assignments.
    let started = Instant::now();
    let second = start(&client, "bench-b").await;
    second.idle().await;
    let restart = started.elapsed() - Duration::from_secs(1);
    let restart_rack_writes = second.controller.metrics().rack_write_count();
    let restart_patches = second.controller.metrics().node_patches.get();

    // 3. One Node replaced: same name, new UID.
    node_api
        .delete("node-000000", &DeleteParams::default())
        .await
        .expect("delete node");
    let started = Instant::now();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-000000",
        "labels": {"mokka.nvidia.com/sgpu-node": "true", "pool": "bench"}}}))
    .unwrap();
    let replacement = node_api
        .create(&PostParams::default(), &node)
        .await
        .expect("replacement");
    let uid = replacement.metadata.uid.clone().unwrap_or_default();
    loop {
        let node = node_api.get("node-000000").await.expect("get");
        let annotation = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("mokka.nvidia.com/sgpu-assignment"))
            .cloned()
            .unwrap_or_default();
        if annotation.contains(&uid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let replaced = started.elapsed();

    // 4. The inventory shrinks by 10 %.
    let shrunk = racks - racks / 10;
    let deletes_before = second.controller.metrics().rack_writes_with_verb("delete");
    let started = Instant::now();
    let patch = json!({"spec": {"rackGroups": [{"id": "compute", "count": shrunk, "profileRef": {"name": "bench"},
        "placement": {"nodeSelector": {"matchLabels": {"pool": "bench"}}}}]}});
    let patched = inventories
        .patch("bench", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("shrink");
    let generation = patched.metadata.generation.unwrap_or(2);
    while second.controller.metrics().rack_writes_with_verb("delete") - deletes_before
        < (racks / 10) as u64
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    programmed(&inventories, generation).await;
    let shrink = started.elapsed();
    let rss = rss_mib();
    second.stop().await;

    println!(
        "| {nodes} | {racks} | {:.1} s | {:.2} s ({first_patches} Node patches) | {:.2} s | {restart_rack_writes} | {restart_patches} | {:.2} s | {:.2} s | {rss:.0} MiB |",
        setup.as_secs_f64(),
        projected.as_secs_f64(),
        restart.as_secs_f64(),
        replaced.as_secs_f64(),
        shrink.as_secs_f64(),
    );
}

/// The inventory first, then `nodes` Nodes created one after another, each
/// as soon as the previous create was answered (upstream's trickle case):
/// the rack writes and Event writes the arrivals cost, and the time to all
/// projected.
async fn trickle(nodes: usize) {
    let racks = nodes / NODES_PER_RACK;
    let sim = server(nodes).await;
    let client = sim.client();
    let inventories: Api<SGPUInventory> = Api::all(client.clone());
    inventories
        .create(&PostParams::default(), &bench_inventory(racks))
        .await
        .expect("inventory");
    let replica = start(&client, "bench-trickle").await;
    replica.idle().await;
    let rack_writes_before = replica.controller.metrics().rack_write_count();
    let event_writes = |sim: &kube_sim::KubeSim| -> u64 {
        ["create", "patch"]
            .iter()
            .map(|verb| {
                sim.metrics().requests(verb, "events", 201)
                    + sim.metrics().requests(verb, "events", 200)
            })
            .sum()
    };
    let events_before = event_writes(&sim);
    // In process a create takes tens of microseconds; a client over HTTPS
    // (upstream's measurement) waits milliseconds. `MOKKA_BENCH_GAP_MS`
    // (default 5) paces the arrivals like one.
    let gap = Duration::from_millis(
        std::env::var("MOKKA_BENCH_GAP_MS")
            .ok()
            .and_then(|value| value.parse().ok())
            .unwrap_or(5),
    );
    let node_api: Api<Node> = Api::all(client.clone());
    let started = Instant::now();
    for i in 0..nodes {
        node_api
            .create(&PostParams::default(), &bench_node(i))
            .await
            .expect("node");
        tokio::time::sleep(gap).await;
    }
    let created = started.elapsed();
    loop {
        let projected = node_api
            .list(&ListParams::default())
            .await
            .expect("list Nodes")
            .items
            .iter()
            .filter(|node| {
                node.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("mokka.nvidia.com/sgpu-assignment"))
            })
            .count();
        if projected == nodes {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let projected = started.elapsed();
    replica.idle().await;
    let rack_writes = replica.controller.metrics().rack_write_count() - rack_writes_before;
    let events = event_writes(&sim) - events_before;
    replica.stop().await;
    println!(
        "| {nodes} one by one, {} ms apart | {racks} | {:.1} s | {:.2} s | {rack_writes} | {events} |",
        gap.as_millis(),
        created.as_secs_f64(),
        projected.as_secs_f64(),
    );
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    // `trickle1000`: the one-by-one arrival case with 1,000 Nodes.
    let trickles: Vec<usize> = arguments
        .iter()
        .filter_map(|arg| arg.strip_prefix("trickle")?.parse().ok())
        .collect();
    let tiers: Vec<usize> = arguments
        .iter()
        .filter_map(|arg| arg.parse().ok())
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if !trickles.is_empty() {
        println!(
            "| Nodes | racks | creating them | first create to all projected | rack writes | Event writes |"
        );
        println!("|---|---|---|---|---|---|");
        for nodes in &trickles {
            runtime.block_on(trickle(*nodes));
        }
        if tiers.is_empty() {
            return;
        }
    }
    let tiers = if tiers.is_empty() {
        vec![1_000, 10_000]
    } else {
        tiers
    };
    println!(
        "| Nodes | racks | setup (create Nodes) | start to all projected | restart converged | rack writes on restart | Node patches on restart | one Node replaced | shrink 10 % | RSS |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for nodes in tiers {
        runtime.block_on(tier(nodes));
    }
}
