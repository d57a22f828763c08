//! Fleet benchmark: 10,000 device-plugin pods on kube-sim, each exec
//! answering after a simulated 20 ms, 16 collector workers, exporting to
//! PostgreSQL.
//!
//! Measures the time from the collector's start until the PostgreSQL
//! inventory table is complete and duplicate-free (checked by SQL: row count
//! = GPU count = distinct GPU UUIDs, and one `gpu_added` event per GPU), and
//! the process's RSS (kube-sim runs in the same process, so the peak is an
//! upper bound for the collector; the RSS before the collector starts is
//! printed next to it). The lower bound set by latency and workers is
//! 10,000 x 20 ms / 16 = 12.5 s.
//!
//! By default kube-sim's simulated kubelet is off and the benchmark writes
//! each pod's Running/Ready status itself, so the figure is the collector's.
//! `FLEET_KUBELET=1` turns the kubelet on (it runs the pods, renews node
//! Leases and sees every Node patch the collector makes, in the same
//! process); the collector starts once every pod is Ready. Before the
//! kubelet's loops became incremental they took most of the CPU here (a
//! 600-pod dev run spent 440 ms per 20 ms exec).
//!
//! `cargo bench -p gpuid --bench fleet`; `FLEET_PODS=1000` for a smaller
//! fleet; `GPUFLEET_TEST_POSTGRES_URL` (default
//! postgres://postgres@127.0.0.1:5432/test). Progress goes to stderr.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use gpuid::collect::{CollectorRuntime, CollectorSettings, Election, RecordSink};
use gpuid::config::{PostgresConnection, PostgresExporterConfig, PostgresTable, Secret};
use gpuid::export::{ExportPipeline, PipelineConfig, PostgresExporter};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_sim::exec::ExecMatcher;
use kube_sim::{ExecOutput, ExecRequest, KubeSim, KubeletConfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "gpu-operator";
const CONTAINER: &str = "nvidia-device-plugin";
/// The simulated exec latency (`FLEET_EXEC_MS` overrides it, to see the
/// collector's own cost per pod with 0).
const LATENCY: Duration = Duration::from_millis(20);
const WORKERS: usize = 16;
/// Concurrent requests while building the fleet.
const SETUP_CONCURRENCY: usize = 32;
/// The A100 capture holds one GPU.
const GPUS_PER_NODE: usize = 1;

fn status_kib(field: &str) -> Option<f64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find(|line| line.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn mib(kib: Option<f64>) -> f64 {
    kib.map_or(f64::NAN, |kib| kib / 1024.0)
}

fn main() {
    let pods: usize = match std::env::var("FLEET_PODS") {
        Ok(raw) => raw
            .parse()
            .unwrap_or_else(|_| panic!("FLEET_PODS={raw:?} is not a number")),
        Err(_) => 10_000,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run(pods));
}

fn kubelet_on() -> bool {
    match std::env::var("FLEET_KUBELET") {
        Ok(raw) => match raw.as_str() {
            "1" | "true" => true,
            "0" | "false" | "" => false,
            other => panic!("FLEET_KUBELET={other:?}: use 1 or 0"),
        },
        Err(_) => false,
    }
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Waits until the simulated kubelet reports every pod Ready.
async fn wait_until_ready(client: kube::Client, count: usize) {
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let started = Instant::now();
    loop {
        let ready = pods
            .list(&Default::default())
            .await
            .expect("list pods")
            .items
            .iter()
            .filter(|pod| is_ready(pod))
            .count();
        if ready >= count {
            return;
        }
        eprintln!(
            "setup: {ready} of {count} pods Ready after {:.1} s",
            started.elapsed().as_secs_f64()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn build_fleet(client: kube::Client, count: usize, kubelet: bool) {
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).expect("ns"),
        )
        .await
        .expect("namespace");
    let nodes: Api<Node> = Api::all(client.clone());
    let pod_api: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let progress = Instant::now();
    futures::stream::iter(0..count)
        .map(|i| {
            let nodes = nodes.clone();
            let pod_api = pod_api.clone();
            async move {
                let name = format!("gpu-{i:05}");
                let node = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"providerID": format!("kind://docker/bench/{name}")},
                }))
                .expect("node");
                nodes.create(&PostParams::default(), &node).await?;
                let pod_name = format!("plugin-{i:05}");
                let pod = serde_json::from_value(json!({
                    "metadata": {"name": pod_name, "labels": {"app": "nvidia-device-plugin-daemonset"}},
                    "spec": {"nodeName": name, "containers": [{"name": CONTAINER, "image": "plugin"}]}
                }))
                .expect("pod");
                pod_api.create(&PostParams::default(), &pod).await?;
                if kubelet {
                    return Ok(());
                }
                // What the kubelet would report for a started device plugin.
                let status = json!({"status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "containerStatuses": [{
                        "name": CONTAINER, "ready": true, "restartCount": 0,
                        "image": "plugin", "imageID": "", "started": true,
                        "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}
                    }]
                }});
                pod_api
                    .patch_status(&pod_name, &PatchParams::default(), &Patch::Merge(&status))
                    .await?;
                if i > 0 && i % 1000 == 0 {
                    eprintln!(
                        "setup: {i} nodes and pods after {:.1} s",
                        progress.elapsed().as_secs_f64()
                    );
                }
                Ok::<(), kube::Error>(())
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect::<()>()
        .await
        .expect("building the fleet");
}

fn exec_latency() -> Duration {
    match std::env::var("FLEET_EXEC_MS") {
        Ok(raw) => Duration::from_millis(
            raw.parse()
                .unwrap_or_else(|_| panic!("FLEET_EXEC_MS={raw:?} is not a number")),
        ),
        Err(_) => LATENCY,
    }
}

async fn run(count: usize) {
    let latency = exec_latency();
    let url = std::env::var("GPUFLEET_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let schema = format!("gpuid_fleet_{}", uuid::Uuid::new_v4().simple());
    let exporter = PostgresExporter::new(&PostgresExporterConfig {
        connection: PostgresConnection::Dsn(Secret::new(url.clone())),
        table: PostgresTable {
            schema: Some(schema.clone()),
            name: "gpu".to_owned(),
        },
        auto_migrate: true,
    })
    .expect("exporter");
    if let Err(error) = exporter.ensure_schema().await {
        panic!("PostgreSQL is required at {url} (see scripts/test.sh): {error}");
    }
    let (db, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| panic!("PostgreSQL is required at {url}: {error}"));
    tokio::spawn(connection);
    let inventory = format!("\"{schema}\".gpu_inventory");
    let events = format!("\"{schema}\".gpu_events");

    let template = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/hardware/a100.xml"
    ))
    .expect("a100 fixture");
    let handler = move |request: ExecRequest| {
        let node = request.node_name().unwrap_or_default().to_owned();
        let xml = template.replace("<uuid>GPU-", &format!("<uuid>GPU-{node}-"));
        async move {
            tokio::time::sleep(latency).await;
            ExecOutput::stdout(xml)
        }
    };
    let kubelet = kubelet_on();
    let sim = KubeSim::builder()
        .watch_history(4 * count + 1000)
        .kubelet(if kubelet {
            KubeletConfig::default()
        } else {
            KubeletConfig::disabled()
        })
        .exec_handler(ExecMatcher::any().container(CONTAINER), handler)
        .start()
        .await
        .expect("kube-sim");
    let setup_started = Instant::now();
    build_fleet(sim.client(), count, kubelet).await;
    if kubelet {
        wait_until_ready(sim.client(), count).await;
    }
    let setup_time = setup_started.elapsed();
    let rss_before = mib(status_kib("VmRSS:"));
    eprintln!(
        "setup done in {:.1} s, RSS {rss_before:.0} MiB",
        setup_time.as_secs_f64()
    );

    let pipeline = ExportPipeline::start(exporter, PipelineConfig::default());
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
        exporter: gpuid::config::ExporterIdentity::of(&gpuid::config::ExporterConfig::Stdout),
        upstream_labels: true,
    };
    let collector = CollectorRuntime::new(
        sim.http_client().expect("http client"),
        settings,
        Election::Disabled,
        record_sink,
        controller_kit::MetricsRegistry::new(),
    )
    .expect("collector");
    let registry = collector.registry.clone();
    let shutdown = CancellationToken::new();
    let gpus = (count * GPUS_PER_NODE) as i64;
    let count_sql = format!("SELECT count(*), count(DISTINCT gpu_uuid) FROM {inventory}");
    let started = Instant::now();
    let task = tokio::spawn(collector.run(shutdown.clone()));
    let mut reported = Instant::now();
    let (rows, distinct) = loop {
        let row = db.query_one(&count_sql, &[]).await.expect("count rows");
        let (rows, distinct): (i64, i64) = (row.get(0), row.get(1));
        if rows >= gpus {
            break (rows, distinct);
        }
        if reported.elapsed() >= Duration::from_secs(2) {
            reported = Instant::now();
            eprintln!(
                "{:.1} s: {rows} of {gpus} rows",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let elapsed = started.elapsed();
    let peak = mib(status_kib("VmHWM:"));
    // Where the time went: exec + parse per pod, from the collector's histogram.
    if let Ok(text) = registry.encode() {
        let value = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok())
        };
        if let (Some(sum), Some(n)) = (
            value("gpuid_collection_duration_seconds_sum"),
            value("gpuid_collection_duration_seconds_count"),
        ) {
            eprintln!(
                "exec + parse: {n} pods, mean {:.1} ms",
                1000.0 * sum / n.max(1.0)
            );
        }
    }
    shutdown.cancel();
    let _ = task.await;
    pipeline.shutdown(Duration::from_secs(10)).await;

    // Complete and duplicate-free, checked again after everything settled.
    let row = db
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {inventory}), (SELECT count(DISTINCT gpu_uuid) FROM {inventory}), \
                 (SELECT count(*) FROM {events}), (SELECT count(*) FROM {events} WHERE kind = 'gpu_added')"
            ),
            &[],
        )
        .await
        .expect("final counts");
    let (final_rows, final_distinct, event_rows, added): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        (rows, distinct),
        (gpus, gpus),
        "row count and distinct UUIDs when the table was first complete"
    );
    assert_eq!(
        (final_rows, final_distinct, event_rows, added),
        (gpus, gpus, gpus, gpus),
        "rows, distinct UUIDs, events and gpu_added events after shutdown"
    );
    let _ = db
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await;

    let bound = latency.as_secs_f64() * count as f64 / WORKERS as f64;
    println!(
        "| fleet collect to PostgreSQL{} | {count} pods, {} ms exec, {WORKERS} workers | {:.2} s to {gpus} rows = {gpus} distinct UUIDs | bound {bound:.1} s | peak RSS {peak:.0} MiB ({rss_before:.0} MiB before the collector started; kube-sim in process) | setup {:.1} s |",
        if kubelet { ", kubelet on" } else { "" },
        latency.as_millis(),
        elapsed.as_secs_f64(),
        setup_time.as_secs_f64(),
    );
    sim.shutdown().await;
}
