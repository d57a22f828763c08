//! Fleet benchmark: 10,000 device-plugin pods on kube-sim, each exec
//! answering after a simulated 20 ms, 16 collector workers.
//!
//! Measures the time from the collector's start until every GPU's record has
//! been exported exactly once (a complete, duplicate-free set), and the
//! process's peak RSS (kube-sim runs in the same process, so the figure is
//! an upper bound for the collector). The lower bound set by latency and
//! workers is 10,000 × 20 ms / 16 = 12.5 s.
//!
//! Exporter: the stdout exporter writing into an in-memory sink that checks
//! uniqueness (PostgreSQL is not wired into this benchmark yet).
//!
//! `cargo bench -p gpuid --bench fleet` (`FLEET_PODS=1000` for a smaller run).

use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuid::collect::{CollectorRuntime, CollectorSettings, Election, RecordSink};
use gpuid::export::{ExportPipeline, PipelineConfig, StdoutExporter};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::PostParams;
use kube_sim::exec::ExecMatcher;
use kube_sim::{ExecOutput, ExecRequest, KubeSim, KubeletConfig};
use parking_lot::Mutex;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "gpu-operator";
const CONTAINER: &str = "nvidia-device-plugin";
const LATENCY: Duration = Duration::from_millis(20);
const WORKERS: usize = 16;

/// Counts exported record lines and the distinct GPU UUIDs among them.
#[derive(Clone, Default)]
struct UniqueSink {
    state: Arc<Mutex<(u64, HashSet<String>)>>,
    partial: Arc<Mutex<Vec<u8>>>,
}

impl Write for UniqueSink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut partial = self.partial.lock();
        partial.extend_from_slice(bytes);
        let mut state = self.state.lock();
        while let Some(end) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&line)
                && value.get("kind").is_none()
                && let Some(uuid) = value.get("uuid").and_then(|u| u.as_str())
            {
                state.0 += 1;
                state.1.insert(uuid.to_owned());
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmHWM:"))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() {
    let pods: usize = std::env::var("FLEET_PODS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run(pods));
}

async fn run(count: usize) {
    let template = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/hardware/a100.xml"
    ))
    .expect("a100 fixture");
    let handler = move |request: ExecRequest| {
        let node = request.node_name().unwrap_or_default().to_owned();
        let xml = template.replace("<uuid>GPU-", &format!("<uuid>GPU-{node}-"));
        async move {
            tokio::time::sleep(LATENCY).await;
            ExecOutput::stdout(xml)
        }
    };
    let sim = KubeSim::builder()
        .watch_history(4 * count + 1000)
        .kubelet(KubeletConfig {
            lease_renew_interval: Duration::from_secs(3600),
            ..KubeletConfig::default()
        })
        .exec_handler(ExecMatcher::any().container(CONTAINER), handler)
        .start()
        .await
        .expect("kube-sim");
    let setup = sim.client();
    Api::<Namespace>::all(setup.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("ns"),
        )
        .await
        .expect("namespace");
    let setup_started = Instant::now();
    let nodes: Api<Node> = Api::all(setup.clone());
    let pod_api: Api<Pod> = Api::namespaced(setup.clone(), NAMESPACE);
    for i in 0..count {
        let name = format!("gpu-{i:05}");
        let node = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"providerID": format!("kind://docker/bench/{name}")},
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        let pod = serde_json::from_value(json!({
            "metadata": {"name": format!("plugin-{i:05}"), "labels": {"app": "nvidia-device-plugin-daemonset"}},
            "spec": {"nodeName": name, "containers": [{"name": CONTAINER, "image": "plugin"}]}
        }))
        .expect("pod");
        pod_api
            .create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    // Wait for the simulated kubelet to make every pod Ready.
    loop {
        let list = pod_api.list(&Default::default()).await.expect("list pods");
        let ready = list
            .items
            .iter()
            .filter(|pod| {
                pod.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|c| c.iter().all(|c| c.ready))
            })
            .count();
        if ready == count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let setup_time = setup_started.elapsed();

    let sink = UniqueSink::default();
    let pipeline = ExportPipeline::start(
        StdoutExporter::new(Box::new(sink.clone())),
        PipelineConfig::default(),
    );
    let record_sink: Arc<dyn RecordSink> = Arc::new(pipeline.clone());
    let settings = CollectorSettings {
        cluster: "bench".into(),
        namespaces: vec![NAMESPACE.into()],
        label_selector: "app=nvidia-device-plugin-daemonset".into(),
        container: CONTAINER.into(),
        workers: WORKERS,
        timeout: Duration::from_secs(30),
        resync: Duration::ZERO,
        heartbeat: Duration::from_secs(86_400),
        label_prefix: "gpuid.gpufleet.dev".into(),
        output_limit: 4 * 1024 * 1024,
        collector_version: "bench".into(),
    };
    let collector = CollectorRuntime::new(
        sim.http_client().expect("http client"),
        settings,
        Election::Disabled,
        record_sink,
        controller_kit::MetricsRegistry::new(),
    )
    .expect("collector");
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let task = tokio::spawn(collector.run(shutdown.clone()));
    loop {
        if sink.state.lock().1.len() >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let elapsed = started.elapsed();
    shutdown.cancel();
    let _ = task.await;
    pipeline.shutdown(Duration::from_secs(10)).await;
    let (lines, unique) = {
        let state = sink.state.lock();
        (state.0, state.1.len())
    };
    let bound = LATENCY.as_secs_f64() * count as f64 / WORKERS as f64;
    println!(
        "| fleet collect | {count} pods, 20 ms exec, {WORKERS} workers, stdout exporter into a sink | {:.2} s to {unique} unique records ({lines} record lines, {} duplicates) | bound {bound:.1} s | peak RSS {:.0} MiB (with kube-sim in process) | setup {:.1} s |",
        elapsed.as_secs_f64(),
        lines.saturating_sub(unique as u64),
        peak_rss_mib(),
        setup_time.as_secs_f64(),
    );
    sim.shutdown().await;
}
