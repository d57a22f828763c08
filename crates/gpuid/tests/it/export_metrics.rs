//! The exporter metrics, as /metrics shows them, after driving the http
//! exporter through an outage and a rejection against a real axum
//! receiver: records and batches by exporter and result, retries, and the
//! time of the last successful export.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use controller_kit::MetricsRegistry;
use gpuid::collect::CollectorMetrics;
use gpuid::config::HttpExporterConfig;
use gpuid::export::{ExportPipeline, HttpExporter, PipelineConfig};
use parking_lot::Mutex;

use crate::export_support::{eventually, fast_pipeline, h100_batch};

/// A receiver that answers from a script (then 200) and records when each
/// request arrived and with which idempotency key.
#[derive(Default)]
struct Receiver {
    script: Mutex<VecDeque<(u16, Option<&'static str>)>>,
    arrivals: Mutex<Vec<(Instant, String)>>,
}

async fn receive(State(receiver): State<Arc<Receiver>>, headers: HeaderMap) -> Response {
    let key = headers
        .get("idempotency-key")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    receiver.arrivals.lock().push((Instant::now(), key));
    let (status, retry_after) = receiver.script.lock().pop_front().unwrap_or((200, None));
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    match retry_after {
        Some(value) => (status, [("retry-after", value)], "later").into_response(),
        None => (status, "answer").into_response(),
    }
}

async fn start(script: Vec<(u16, Option<&'static str>)>) -> (String, Arc<Receiver>) {
    let receiver = Arc::new(Receiver {
        script: Mutex::new(script.into()),
        arrivals: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/ingest", post(receive))
        .with_state(Arc::clone(&receiver));
    let addr = crate::export_support::serve_on_loopback(app).await;
    (format!("http://{addr}/ingest"), receiver)
}

fn pipeline(endpoint: &str, config: PipelineConfig) -> ExportPipeline<HttpExporter> {
    let exporter = HttpExporter::new(&HttpExporterConfig {
        endpoint: endpoint.to_owned(),
        timeout: Duration::from_secs(5),
        auth_token: None,
        headers: Vec::new(),
    })
    .unwrap();
    ExportPipeline::start(exporter, config)
}

/// The value of one sample line of the OpenMetrics text, if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

fn observed(pipeline: &ExportPipeline<HttpExporter>) -> String {
    let registry = MetricsRegistry::new();
    let metrics = CollectorMetrics::register(&registry);
    metrics.observe_pipeline("http", &pipeline.stats());
    registry.encode().unwrap()
}

#[tokio::test]
async fn an_outage_of_503_and_429_then_recovery_shows_as_retries_then_success() {
    let (endpoint, receiver) = start(vec![(503, None), (429, Some("1")), (200, None)]).await;
    let pipeline = pipeline(&endpoint, fast_pipeline());
    let started_unix = jiff::Timestamp::now().as_second() as f64;
    let (records, events) = h100_batch();
    let items = (records.len() + events.len()) as f64;
    pipeline.submit(records, events).await.unwrap();
    eventually(
        Duration::from_secs(10),
        "the batch to get through",
        || async { (pipeline.stats().batches_exported == 1).then_some(()) },
    )
    .await;

    let arrivals = receiver.arrivals.lock().clone();
    assert_eq!(arrivals.len(), 3, "503, 429, then 200");
    assert!(
        arrivals.iter().all(|(_, key)| *key == arrivals[0].1),
        "every attempt carries the batch's idempotency key"
    );
    let after_429 = arrivals[2].0 - arrivals[1].0;
    assert!(
        after_429 >= Duration::from_secs(1),
        "Retry-After: 1 is waited for, though the backoff is 20-200 ms: {after_429:?}"
    );
    let after_503 = arrivals[1].0 - arrivals[0].0;
    assert!(
        after_503 < Duration::from_secs(1),
        "without Retry-After the configured backoff applies: {after_503:?}"
    );

    let text = observed(&pipeline);
    let series = |name: &str, result: &str| {
        sample(
            &text,
            &format!("{name}{{exporter=\"http\",result=\"{result}\"}}"),
        )
    };
    assert_eq!(
        series("gpuid_exported_records_total", "success"),
        Some(items)
    );
    assert_eq!(series("gpuid_exported_records_total", "dropped"), Some(0.0));
    assert_eq!(series("gpuid_exported_batches_total", "success"), Some(1.0));
    assert_eq!(series("gpuid_exported_batches_total", "failure"), Some(0.0));
    assert_eq!(
        sample(&text, "gpuid_export_retries_total{exporter=\"http\"}"),
        Some(2.0),
        "{text}"
    );
    let last = sample(
        &text,
        "gpuid_last_successful_export_timestamp_seconds{exporter=\"http\"}",
    )
    .unwrap_or_else(|| panic!("no last-success gauge in {text}"));
    let now_unix = jiff::Timestamp::now().as_second() as f64;
    assert!(
        (started_unix - 1.0..=now_unix + 1.0).contains(&last),
        "last success {last} must be during the test ({started_unix}..{now_unix})"
    );
}

#[tokio::test]
async fn a_400_is_counted_once_as_a_failed_batch_and_never_retried() {
    let (endpoint, receiver) = start(vec![(400, None)]).await;
    let pipeline = pipeline(&endpoint, fast_pipeline());
    let (records, events) = h100_batch();
    let items = (records.len() + events.len()) as f64;
    pipeline.submit(records, events).await.unwrap();
    eventually(
        Duration::from_secs(5),
        "the batch to be rejected",
        || async { (pipeline.stats().permanent_failures == 1).then_some(()) },
    )
    .await;
    // Time for a retry to happen if the pipeline (wrongly) made one.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(receiver.arrivals.lock().len(), 1, "one request, no retry");

    let text = observed(&pipeline);
    let series = |name: &str, result: &str| {
        sample(
            &text,
            &format!("{name}{{exporter=\"http\",result=\"{result}\"}}"),
        )
    };
    assert_eq!(series("gpuid_exported_batches_total", "failure"), Some(1.0));
    assert_eq!(series("gpuid_exported_batches_total", "success"), Some(0.0));
    assert_eq!(
        series("gpuid_exported_records_total", "dropped"),
        Some(items)
    );
    assert_eq!(series("gpuid_exported_records_total", "success"), Some(0.0));
    assert_eq!(
        sample(&text, "gpuid_export_retries_total{exporter=\"http\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "gpuid_last_successful_export_timestamp_seconds{exporter=\"http\"}"
        ),
        None,
        "nothing succeeded yet"
    );
}

#[tokio::test]
async fn the_pipeline_built_from_export_knobs_gives_up_after_export_max_attempts() {
    let (endpoint, receiver) = start(vec![(502, None); 10]).await;
    let vars = [
        ("CLUSTER_NAME", "prod"),
        ("EXPORT_MAX_ATTEMPTS", "2"),
        ("EXPORT_BACKOFF_INITIAL", "10ms"),
        ("EXPORT_BACKOFF_MAX", "20ms"),
        ("EXPORT_BATCH_INTERVAL", "20ms"),
        ("EXPORT_BATCH_SIZE", "4"),
    ];
    let config = crate::export_support::config_from_vars(&vars);
    let pipeline = pipeline(&endpoint, PipelineConfig::from_config(&config));
    let (records, _) = h100_batch();
    pipeline.submit(records.clone(), Vec::new()).await.unwrap();
    eventually(Duration::from_secs(5), "both batches given up", || async {
        (pipeline.stats().dropped_after_retries == 2).then_some(())
    })
    .await;
    assert_eq!(
        receiver.arrivals.lock().len(),
        4,
        "8 records in batches of EXPORT_BATCH_SIZE=4, EXPORT_MAX_ATTEMPTS=2 each"
    );
    let text = observed(&pipeline);
    assert_eq!(
        sample(
            &text,
            "gpuid_exported_batches_total{exporter=\"http\",result=\"failure\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "gpuid_export_retries_total{exporter=\"http\"}"),
        Some(2.0),
        "two attempts per batch are one retry each"
    );
    assert_eq!(
        sample(
            &text,
            "gpuid_exported_records_total{exporter=\"http\",result=\"dropped\"}"
        ),
        Some(records.len() as f64)
    );
}
