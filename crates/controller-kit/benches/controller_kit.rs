//! controller-kit benchmarks (plain `fn main`, run with `cargo bench -p controller-kit`).
//!
//! * Work-queue throughput: 100,000 distinct keys through 16 workers.
//! * Memory of a store holding 100,000 Nodes, with and without a stripping transform,
//!   measured as the VmRSS growth of a fresh child process per scenario (so freed
//!   memory from one scenario cannot flatter the next).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use controller_kit::WorkQueue;
use controller_kit::caches::{DetachedStore, StoreOptions};
use k8s_openapi::api::core::v1::{
    ContainerImage, Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, Time,
};
use kube::runtime::watcher::Event;

const KEYS: usize = 100_000;
const WORKERS: usize = 16;
const NODES: usize = 100_000;
const SCENARIO_ENV: &str = "CONTROLLER_KIT_BENCH_SCENARIO";

fn main() {
    if let Ok(scenario) = std::env::var(SCENARIO_ENV) {
        run_memory_scenario(&scenario);
        return;
    }
    println!("| benchmark | scenario | result |");
    println!("|---|---|---|");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    for round in 1..=3 {
        let (elapsed, ops) = runtime.block_on(queue_prefilled());
        print_queue_row(
            &format!("prefilled {KEYS} keys, then {WORKERS} workers drain (round {round})"),
            elapsed,
            ops,
        );
    }
    for round in 1..=3 {
        let (elapsed, ops) = runtime.block_on(queue_concurrent());
        print_queue_row(
            &format!("{KEYS} keys added while {WORKERS} workers drain (round {round})"),
            elapsed,
            ops,
        );
    }
    for scenario in ["plain", "transformed"] {
        let output = Command::new(std::env::current_exe().expect("own executable"))
            .env(SCENARIO_ENV, scenario)
            .output()
            .expect("memory scenario runs");
        print!("{}", String::from_utf8_lossy(&output.stdout));
        if !output.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        }
    }
}

fn print_queue_row(scenario: &str, elapsed: Duration, ops: usize) {
    let per_second = ops as f64 / elapsed.as_secs_f64();
    println!(
        "| work queue | {scenario} | {ops} adds+gets in {:.1} ms = {:.0} ops/s ({:.0} keys/s) |",
        elapsed.as_secs_f64() * 1000.0,
        per_second,
        KEYS as f64 / elapsed.as_secs_f64()
    );
}

fn spawn_workers(queue: &WorkQueue<u64>) -> Vec<tokio::task::JoinHandle<usize>> {
    (0..WORKERS)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut processed = 0;
                while let Some(key) = queue.get().await {
                    processed += 1;
                    queue.done(&key);
                }
                processed
            })
        })
        .collect()
}

async fn wait_drained(
    queue: &WorkQueue<u64>,
    workers: Vec<tokio::task::JoinHandle<usize>>,
) -> usize {
    while !queue.is_empty() || queue.in_flight() > 0 {
        tokio::task::yield_now().await;
    }
    queue.shut_down();
    let mut processed = 0;
    for worker in workers {
        processed += worker.await.expect("worker finished");
    }
    processed
}

/// Adds every key first, then measures the drain plus the adds.
async fn queue_prefilled() -> (Duration, usize) {
    let queue: WorkQueue<u64> = WorkQueue::new("bench");
    let start = Instant::now();
    for key in 0..KEYS as u64 {
        queue.add(key);
    }
    let workers = spawn_workers(&queue);
    let processed = wait_drained(&queue, workers).await;
    assert_eq!(processed, KEYS, "every key processed exactly once");
    (start.elapsed(), KEYS + processed)
}

/// Workers run while a producer adds the keys.
async fn queue_concurrent() -> (Duration, usize) {
    let queue: WorkQueue<u64> = WorkQueue::new("bench");
    let workers = spawn_workers(&queue);
    let start = Instant::now();
    let producer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            for key in 0..KEYS as u64 {
                queue.add(key);
                if key % 1024 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    producer.await.expect("producer finished");
    let processed = wait_drained(&queue, workers).await;
    assert_eq!(processed, KEYS, "every key processed exactly once");
    (start.elapsed(), KEYS + processed)
}

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn run_memory_scenario(scenario: &str) {
    let options = match scenario {
        "transformed" => StoreOptions::default().transform(strip_node),
        _ => StoreOptions::default(),
    };
    let mut store: DetachedStore<Node> = DetachedStore::new("nodes", options);
    let before = vm_rss_kib();
    let start = Instant::now();
    store.apply(Event::Init);
    for index in 0..NODES {
        store.apply(Event::InitApply(synthetic_node(index)));
    }
    store.apply(Event::InitDone);
    let elapsed = start.elapsed();
    let after = vm_rss_kib();
    let reader = store.reader();
    assert_eq!(reader.len(), NODES);
    let grown_mib = (after.saturating_sub(before)) as f64 / 1024.0;
    println!(
        "| store memory | {NODES} Nodes, {scenario} | VmRSS +{grown_mib:.0} MiB ({:.2} KiB/Node), filled in {:.2} s |",
        (after.saturating_sub(before)) as f64 / NODES as f64,
        elapsed.as_secs_f64()
    );
}

/// What a Mokka-style cache keeps: identity, labels, one annotation; no spec or status.
fn strip_node(node: &mut Node) {
    node.spec = None;
    node.status = None;
    node.metadata.managed_fields = None;
    if let Some(annotations) = node.metadata.annotations.as_mut() {
        annotations.retain(|key, _| key == "mokka.nvidia.com/sgpu-assignment");
    }
}

/// A Node shaped like one from a real GPU cluster (labels, annotations, conditions,
/// images, managed fields), with per-index values so nothing is shared.
fn synthetic_node(index: usize) -> Node {
    let name = format!("gpu-node-{index:06}");
    let labels: BTreeMap<String, String> = [
        ("kubernetes.io/hostname", name.clone()),
        ("kubernetes.io/os", "linux".into()),
        ("kubernetes.io/arch", "amd64".into()),
        ("node.kubernetes.io/instance-type", "p5.48xlarge".into()),
        ("topology.kubernetes.io/zone", format!("zone-{}", index % 3)),
        ("topology.kubernetes.io/region", "region-1".into()),
        ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3".into()),
        ("nvidia.com/gpu.count", "8".into()),
        ("nvidia.com/gpu.clique", format!("clique-{}", index / 18)),
        ("mokka.nvidia.com/sgpu-node", "true".into()),
        ("mokka.nvidia.com/sgpu-assigned", "true".into()),
        ("rack", format!("rack-{}", index / 18)),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect();
    let annotations: BTreeMap<String, String> = [
        (
            "mokka.nvidia.com/sgpu-assignment",
            format!(
                "{{\"rack\":\"rack-{}\",\"slot\":{}}}",
                index / 18,
                index % 18
            ),
        ),
        ("node.alpha.kubernetes.io/ttl", "0".into()),
        (
            "volumes.kubernetes.io/controller-managed-attach-detach",
            "true".into(),
        ),
        (
            "nfd.node.kubernetes.io/feature-labels",
            "cpu-cpuid.AVX512F,cpu-hardware_multithreading,pci-10de.present".into(),
        ),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect();
    let quantity = |value: &str| Quantity(value.to_string());
    let resources: BTreeMap<String, Quantity> = [
        ("cpu", quantity("192")),
        ("memory", quantity("2113424Mi")),
        ("nvidia.com/gpu", quantity("8")),
        ("pods", quantity("110")),
        ("ephemeral-storage", quantity("3750Gi")),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect();
    let condition = |kind: &str, status: &str| NodeCondition {
        type_: kind.to_string(),
        status: status.to_string(),
        reason: Some(format!("Kubelet{kind}")),
        message: Some(format!("kubelet reports {kind} is {status}")),
        last_heartbeat_time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
        last_transition_time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
    };
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            uid: Some(format!("{:08x}-0000-4000-8000-{:012x}", index, index)),
            resource_version: Some(format!("{}", 1000 + index)),
            creation_timestamp: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
            labels: Some(labels),
            annotations: Some(annotations),
            managed_fields: Some(
                ["kubelet", "node-feature-discovery", "gpufleet-mokka"]
                    .iter()
                    .map(|manager| ManagedFieldsEntry {
                        manager: Some(manager.to_string()),
                        operation: Some("Update".into()),
                        api_version: Some("v1".into()),
                        fields_type: Some("FieldsV1".into()),
                        fields_v1: Some(FieldsV1(serde_json::json!({
                            "f:metadata": {"f:labels": {"f:kubernetes.io/hostname": {}, "f:rack": {}}},
                            "f:status": {"f:conditions": {}, "f:capacity": {}, "f:allocatable": {}}
                        }))),
                        time: Some(Time(jiff::Timestamp::UNIX_EPOCH)),
                        subresource: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("aws:///zone-{}/i-{index:017x}", index % 3)),
            pod_cidr: Some(format!("10.{}.{}.0/24", index / 256 % 256, index % 256)),
            taints: Some(vec![Taint {
                key: "nvidia.com/gpu".into(),
                value: Some("present".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![
                condition("Ready", "True"),
                condition("MemoryPressure", "False"),
                condition("DiskPressure", "False"),
                condition("PIDPressure", "False"),
                condition("NetworkUnavailable", "False"),
            ]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: format!("10.0.{}.{}", index / 256 % 256, index % 256),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: name,
                },
            ]),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".into(),
                boot_id: format!("boot-{index:032x}"),
                container_runtime_version: "containerd://1.7.27".into(),
                kernel_version: "6.8.0-1021-aws".into(),
                kube_proxy_version: "".into(),
                kubelet_version: "v1.33.1".into(),
                machine_id: format!("{index:032x}"),
                operating_system: "linux".into(),
                os_image: "Ubuntu 24.04.2 LTS".into(),
                system_uuid: format!("ec2{index:029x}"),
                ..Default::default()
            }),
            images: Some(
                (0..8)
                    .map(|image| ContainerImage {
                        names: Some(vec![
                            format!("nvcr.io/nvidia/k8s/image-{image}@sha256:{:064x}", image * 7919 + index),
                            format!("nvcr.io/nvidia/k8s/image-{image}:v{image}.0.0"),
                        ]),
                        size_bytes: Some(100_000_000 + image as i64),
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
    }
}
