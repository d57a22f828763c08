//! Operations of the collector on kube-sim: readiness and metrics while the
//! exporter is down and after it recovers, Kubernetes Events, and a GPU
//! that moved while no collector ran.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use gpuid::collect::{Election, PodResult};
use gpuid::config::HttpExporterConfig;
use gpuid::export::{ExportPipeline, HttpExporter, PipelineConfig, RetryPolicy};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use parking_lot::Mutex;
use serde_json::Value;

use super::collect_support::*;

/// An HTTP receiver that answers 503 to everything while `down`, and
/// otherwise keeps the records and events it was sent.
#[derive(Clone, Default)]
struct Receiver {
    down: Arc<AtomicBool>,
    records: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<Vec<String>>>,
    /// POSTs answered 503.
    refused: Arc<std::sync::atomic::AtomicUsize>,
}

impl Receiver {
    async fn start(down: bool) -> (Receiver, SocketAddr) {
        let receiver = Receiver::default();
        receiver.down.store(down, Ordering::SeqCst);
        let state = receiver.clone();
        let app = axum::Router::new().fallback(move |method: Method, body: Bytes| {
            let state = state.clone();
            async move {
                if state.down.load(Ordering::SeqCst) {
                    if method == Method::POST {
                        state.refused.fetch_add(1, Ordering::SeqCst);
                    }
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
                if method == Method::POST {
                    let Ok(batch) = serde_json::from_slice::<Value>(&body) else {
                        return StatusCode::BAD_REQUEST;
                    };
                    let ids = |field: &str, key: &str| -> Vec<String> {
                        batch[field]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|item| item[key].as_str().map(str::to_owned))
                            .collect()
                    };
                    state.records.lock().extend(ids("records", "uuid"));
                    state.events.lock().extend(ids("events", "kind"));
                }
                StatusCode::OK
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, addr)
    }
}

fn http_pipeline(addr: SocketAddr) -> ExportPipeline<HttpExporter> {
    let exporter = HttpExporter::new(&HttpExporterConfig {
        endpoint: format!("http://{addr}/inventory"),
        timeout: Duration::from_secs(5),
        auth_token: None,
        headers: Vec::new(),
    })
    .unwrap();
    ExportPipeline::start(
        exporter,
        PipelineConfig {
            max_batch_age: Duration::from_millis(50),
            retry: RetryPolicy {
                initial_backoff: Duration::from_millis(20),
                max_backoff: Duration::from_millis(200),
                max_attempts: None,
                max_retry_after: Duration::from_secs(1),
            },
            unhealthy_after_failures: 2,
            ..PipelineConfig::default()
        },
    )
}

/// The value of the sample `series` (name with its labels, as printed).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exporter_outage_shows_in_readyz_and_metrics_and_recovery_loses_and_re_executes_nothing()
{
    let fleet = Fleet::start().await;
    for (node, fixture) in [
        ("gpu-h100", "hardware/h100.xml"),
        ("gpu-a100", "hardware/a100.xml"),
    ] {
        fleet.add_node(node).await;
        fleet.answer(node, Answer::Xml(capture(fixture, node)));
        fleet.add_plugin_pod(&format!("plugin-{node}"), node).await;
    }
    // A node whose nvidia-smi fails (no answer registered: exit code 9).
    fleet.add_node("gpu-broken").await;
    fleet
        .add_plugin_pod("plugin-gpu-broken", "gpu-broken")
        .await;

    let started_at = jiff::Timestamp::now().as_second() as f64;
    let (receiver, addr) = Receiver::start(true).await;
    let replica = Replica::start_with_sink(
        &fleet,
        settings(4),
        Election::Disabled,
        Arc::new(http_pipeline(addr)),
        Buffer::default(),
    )
    .await;

    let reason = eventually("/readyz to report the exporter", || async {
        let (status, body) = replica.readyz().await;
        (status == 503 && body.contains("exporter unhealthy")).then_some(body)
    })
    .await;
    assert!(
        reason.contains("503"),
        "the reason names the answer: {reason}"
    );
    // Both inventories were collected once and wait in the pipeline.
    eventually("both good pods to be collected", || async {
        (replica.runtime_metrics.pods_with(PodResult::Exported) == 2).then_some(())
    })
    .await;
    // The pipeline keeps retrying the batch (counted as refused POSTs).
    eventually("export attempts to fail", || async {
        (receiver.refused.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    assert!(receiver.records.lock().is_empty());
    assert_eq!(fleet.annotation("gpu-h100", "inventory-hash").await, None);

    receiver.down.store(false, Ordering::SeqCst);
    let (status, body) = eventually("/readyz to recover", || async {
        let answer = replica.readyz().await;
        (answer.0 == 200).then_some(answer)
    })
    .await;
    assert_eq!(status, 200, "{body}");
    for node in ["gpu-h100", "gpu-a100"] {
        eventually(&format!("{node}'s export to be recorded"), || async {
            fleet.annotation(node, "inventory-hash").await
        })
        .await;
    }
    let records = receiver.records.lock().clone();
    assert_eq!(records.len(), 9, "every record once: {records:?}");
    let distinct: BTreeSet<&String> = records.iter().collect();
    assert_eq!(distinct.len(), 9);
    assert_eq!(receiver.events.lock().len(), 9, "one gpu_added per GPU");
    assert_eq!(fleet.execs_on("gpu-h100"), 1, "no exec repeated");
    assert_eq!(fleet.execs_on("gpu-a100"), 1, "no exec repeated");

    // Metrics, as scraped. The pipeline counters are copied every second.
    let text = eventually("the export counters on /metrics", || async {
        let (_, text) = replica.admin_get("/metrics").await;
        (sample(
            &text,
            "gpuid_exported_records_total{exporter=\"http\",result=\"success\"}",
        ) == Some(18.0))
        .then_some(text)
    })
    .await;
    assert_eq!(
        sample(&text, "gpuid_pods_processed_total{result=\"exported\"}"),
        Some(2.0),
        "{text}"
    );
    assert!(
        sample(&text, "gpuid_pods_processed_total{result=\"error\"}").unwrap_or(0.0) >= 1.0,
        "{text}"
    );
    assert!(
        sample(&text, "gpuid_exec_errors_total{reason=\"exit_code\"}").unwrap_or(0.0) >= 1.0,
        "{text}"
    );
    // Failed attempts are retries; no batch was given up.
    assert_eq!(
        sample(
            &text,
            "gpuid_exported_batches_total{exporter=\"http\",result=\"failure\"}"
        ),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "gpuid_exported_batches_total{exporter=\"http\",result=\"success\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{text}"
    );
    assert!(
        sample(&text, "gpuid_export_retries_total{exporter=\"http\"}").unwrap_or(0.0) >= 2.0,
        "{text}"
    );
    let last = sample(
        &text,
        "gpuid_last_successful_export_timestamp_seconds{exporter=\"http\"}",
    )
    .unwrap_or(0.0);
    assert!(last >= started_at, "last export {last} before {started_at}");
    assert_eq!(
        sample(&text, "gpuid_node_gpus{node=\"gpu-h100\"}"),
        Some(8.0)
    );
    assert_eq!(
        sample(&text, "gpuid_node_gpus{node=\"gpu-a100\"}"),
        Some(1.0)
    );
    assert!(
        !text.contains("pod=\""),
        "no metric carries a pod label:\n{text}"
    );
    let (status, _) = replica.admin_get("/healthz").await;
    assert_eq!(status, 200);
    replica.stop().await;
}

/// Events as (reason, type, regarding kind, regarding name, note).
async fn events_in(
    fleet: &Fleet,
    namespace: &str,
) -> Vec<(String, String, String, String, String)> {
    let api: Api<Event> = Api::namespaced(fleet.client.clone(), namespace);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| event.reporting_controller.as_deref() == Some("gpuid"))
        .map(|event| {
            let regarding = event.regarding.unwrap_or_default();
            (
                event.reason.unwrap_or_default(),
                event.type_.unwrap_or_default(),
                regarding.kind.unwrap_or_default(),
                regarding.name.unwrap_or_default(),
                event.note.unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_execs_bad_captures_and_inventory_changes_are_kubernetes_events() {
    let fleet = Fleet::start().await;
    let cases = [
        (
            "bad-xml",
            Some(Answer::Xml(
                b"<nvidia_smi_log><gpu id=\"0\"><uuid>".to_vec(),
            )),
        ),
        (
            "too-big",
            Some(Answer::Xml(vec![b' '; 4 * 1024 * 1024 + 1])),
        ),
        ("broken", None),
        (
            "good",
            Some(Answer::Xml(capture("hardware/h100.xml", "ev"))),
        ),
    ];
    for (node, answer) in cases {
        fleet.add_node(node).await;
        if let Some(answer) = answer {
            fleet.answer(node, answer);
        }
        fleet.add_plugin_pod(&format!("plugin-{node}"), node).await;
    }
    let replica = Replica::start(&fleet, settings(4), Election::Disabled).await;
    let pod_events = eventually("a warning for each failing pod", || async {
        let events = events_in(&fleet, NAMESPACE).await;
        let pods: BTreeSet<String> = events.iter().map(|e| e.3.clone()).collect();
        (pods.len() >= 3).then_some(events)
    })
    .await;
    let find = |pod: &str| {
        pod_events
            .iter()
            .find(|event| event.3 == pod)
            .cloned()
            .unwrap_or_else(|| panic!("no event for {pod}: {pod_events:?}"))
    };
    let malformed = find("plugin-bad-xml");
    assert_eq!(
        (
            malformed.0.as_str(),
            malformed.1.as_str(),
            malformed.2.as_str()
        ),
        ("NvidiaSmiOutputMalformed", "Warning", "Pod")
    );
    assert!(malformed.4.contains("not usable"), "{malformed:?}");
    let oversized = find("plugin-too-big");
    assert_eq!(
        (oversized.0.as_str(), oversized.1.as_str()),
        ("NvidiaSmiOutputTooLarge", "Warning")
    );
    assert!(oversized.4.contains("4194304"), "{oversized:?}");
    let failed = find("plugin-broken");
    assert_eq!(
        (failed.0.as_str(), failed.1.as_str()),
        ("NvidiaSmiFailed", "Warning")
    );
    assert!(failed.4.contains("NVIDIA-SMI has failed"), "{failed:?}");
    assert!(
        pod_events.iter().all(|event| event.3 != "plugin-good"),
        "{pod_events:?}"
    );

    // Node events of a cluster-scoped Node land in "default".
    let node_events = eventually("the good node's inventory event", || async {
        let events = events_in(&fleet, "default").await;
        (!events.is_empty()).then_some(events)
    })
    .await;
    assert_eq!(node_events.len(), 1, "{node_events:?}");
    let (reason, kind, regarding_kind, regarding, note) = &node_events[0];
    assert_eq!(
        (
            reason.as_str(),
            kind.as_str(),
            regarding_kind.as_str(),
            regarding.as_str()
        ),
        ("GpuInventoryChanged", "Normal", "Node", "good")
    );
    assert!(note.contains("8 added"), "{note}");
    assert!(note.contains("8 GPUs"), "{note}");

    // A change of the inventory is one more event on the node (once the
    // first export is recorded on the Node, so it is compared with that).
    eventually("the first export to be recorded", || async {
        fleet.annotation("good", "inventory-hash").await
    })
    .await;
    fleet.answer(
        "good",
        Answer::Xml(without_last_gpu(&capture("hardware/h100.xml", "ev"))),
    );
    fleet.delete_pod("plugin-good").await;
    fleet.add_plugin_pod("plugin-good-2", "good").await;
    let notes = eventually("the change event", || async {
        let notes: Vec<String> = events_in(&fleet, "default")
            .await
            .into_iter()
            .map(|event| event.4)
            .collect();
        (notes.len() >= 2).then_some(notes)
    })
    .await;
    assert_eq!(notes.len(), 2, "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|note| note.contains("1 removed") && note.contains("7 GPUs")),
        "{notes:?}"
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_that_moved_while_no_collector_ran_are_one_gpu_moved_event_each() {
    let fleet = Fleet::start().await;
    let one = capture("hardware/a100.xml", "one");
    let two = capture("hardware/l40s.xml", "two");
    fleet.add_node("node-1").await;
    fleet.add_node("node-2").await;
    fleet.answer("node-1", Answer::Xml(one.clone()));
    fleet.answer("node-2", Answer::Xml(two.clone()));
    fleet.add_plugin_pod("plugin-1", "node-1").await;
    fleet.add_plugin_pod("plugin-2", "node-2").await;
    // One worker: pods are collected one after the other, so one GPU's new
    // node is collected before its old one and the other's after it.
    let first = Replica::start(&fleet, settings(1), Election::Disabled).await;
    for node in ["node-1", "node-2"] {
        eventually("the first export", || async {
            fleet.annotation(node, "inventory-hash").await
        })
        .await;
    }
    first.stop().await;

    // While no collector runs, the two GPUs swap nodes.
    fleet.answer("node-1", Answer::Xml(two));
    fleet.answer("node-2", Answer::Xml(one));
    let second = Replica::start(&fleet, settings(1), Election::Disabled).await;
    let events = eventually("both moves", || async {
        let events = second.buffer.events();
        (events.len() >= 2 && second.runtime_metrics.pods_with(PodResult::Exported) == 2)
            .then_some(events)
    })
    .await;
    // Let anything held until the end of the first sweep come out.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let events = {
        let later = second.buffer.events();
        assert_eq!(later, events, "nothing after the moves");
        later
    };
    let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["gpu_moved", "gpu_moved"], "{events:?}");
    let lines = second.buffer.lines();
    for line in lines.iter().filter(|line| line["kind"] == "gpu_moved") {
        let from = line["before"]["node_name"].as_str();
        let to = line["after"]["node_name"].as_str();
        assert!(
            matches!(
                (from, to),
                (Some("node-1"), Some("node-2")) | (Some("node-2"), Some("node-1"))
            ),
            "{line}"
        );
    }
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_down_at_start_keeps_readyz_unready_until_it_answers_then_every_row_arrives() {
    use gpuid::config::{PostgresConnection, PostgresExporterConfig, PostgresTable, Secret};
    use gpuid::export::PostgresExporter;

    let db = crate::export_support::postgres_client().await;
    let url = crate::export_support::postgres_url();
    let config: tokio_postgres::Config = url.parse().unwrap();
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let upstream: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let proxy = crate::export_support::CuttableProxy::start(upstream).await;
    proxy.cut();
    // The same database, reached through the proxy (a closed port for now).
    let through_proxy = format!(
        "postgres://{}{}@{}/{}",
        config.get_user().unwrap_or("postgres"),
        config
            .get_password()
            .map(|password| format!(":{}", String::from_utf8_lossy(password)))
            .unwrap_or_default(),
        proxy.addr,
        config.get_dbname().unwrap_or("postgres"),
    );
    let schema = crate::export_support::fresh_schema("collect_down");
    let exporter = PostgresExporter::new(&PostgresExporterConfig {
        connection: PostgresConnection::Dsn(Secret::new(through_proxy)),
        table: PostgresTable {
            schema: Some(schema.clone()),
            name: "gpu".to_owned(),
        },
        auto_migrate: true,
    })
    .unwrap();
    let fleet = Fleet::start().await;
    for (node, fixture) in [
        ("pg-h100", "hardware/h100.xml"),
        ("pg-a100", "hardware/a100.xml"),
    ] {
        fleet.add_node(node).await;
        fleet.answer(node, Answer::Xml(capture(fixture, node)));
        fleet.add_plugin_pod(&format!("plugin-{node}"), node).await;
    }
    let pipeline = ExportPipeline::start(exporter, quick_batches());
    let replica = Replica::start_with_sink(
        &fleet,
        settings(2),
        Election::Disabled,
        Arc::new(pipeline),
        Buffer::default(),
    )
    .await;
    let reason = eventually("/readyz to report the database", || async {
        let (status, body) = replica.readyz().await;
        (status == 503 && body.contains("exporter unhealthy")).then_some(body)
    })
    .await;
    assert!(reason.contains("exporter unhealthy (postgres)"), "{reason}");
    assert!(reason.contains("connecting"), "{reason}");
    eventually(
        "both pods to be collected while the database is down",
        || async { (replica.runtime_metrics.pods_with(PodResult::Exported) == 2).then_some(()) },
    )
    .await;

    proxy.restore().await;
    eventually("/readyz to recover", || async {
        (replica.readyz().await.0 == 200).then_some(())
    })
    .await;
    let rows = eventually("every row", || async {
        let row = db
            .query_one(
                &format!(
                    "SELECT count(*), count(DISTINCT gpu_uuid) FROM \"{schema}\".gpu_inventory"
                ),
                &[],
            )
            .await
            .ok()?;
        let counts: (i64, i64) = (row.get(0), row.get(1));
        (counts.0 >= 9).then_some(counts)
    })
    .await;
    assert_eq!(rows, (9, 9));
    assert_eq!(fleet.execs_on("pg-h100"), 1, "no exec repeated");
    assert_eq!(fleet.execs_on("pg-a100"), 1, "no exec repeated");
    replica.stop().await;
    let _ = db
        .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await;
}
