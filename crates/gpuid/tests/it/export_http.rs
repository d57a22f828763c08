//! The http exporter against a real axum server on loopback.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use gpuid::config::{HttpExporterConfig, HttpHeader, Secret};
use gpuid::export::{ExportPipeline, Exporter, FailureClass, HttpExporter, SubmitError};
use parking_lot::Mutex;

use crate::export_support::{batch, eventually, fast_pipeline, h100_batch};

#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: serde_json::Value,
}

#[derive(Default)]
struct Receiver {
    received: Mutex<Vec<Received>>,
    /// Answers to give, in order; 200 once empty.
    script: Mutex<VecDeque<(u16, Option<&'static str>)>>,
}

async fn receive(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    receiver.received.lock().push(Received { headers, body });
    let (status, retry_after) = receiver.script.lock().pop_front().unwrap_or((200, None));
    let status = StatusCode::from_u16(status).unwrap();
    match retry_after {
        Some(value) => (status, [("retry-after", value)], "try later").into_response(),
        None => (status, "answer").into_response(),
    }
}

async fn start_receiver(script: Vec<(u16, Option<&'static str>)>) -> (String, Arc<Receiver>) {
    let receiver = Arc::new(Receiver {
        received: Mutex::new(Vec::new()),
        script: Mutex::new(script.into()),
    });
    let app = Router::new()
        .route("/ingest", post(receive))
        .with_state(Arc::clone(&receiver));
    let addr = crate::export_support::serve_on_loopback(app).await;
    (format!("http://{addr}/ingest"), receiver)
}

fn config(endpoint: &str) -> HttpExporterConfig {
    HttpExporterConfig {
        endpoint: endpoint.to_owned(),
        timeout: Duration::from_secs(5),
        auth_token: Some(Secret::new("s3cret-token")),
        headers: vec![HttpHeader {
            name: "X-Tenant".into(),
            value: Secret::new("blue"),
        }],
    }
}

#[tokio::test]
async fn a_batch_is_posted_as_json_with_auth_extra_headers_and_an_idempotency_key() {
    let (endpoint, receiver) = start_receiver(Vec::new()).await;
    let exporter = HttpExporter::new(&config(&endpoint)).unwrap();
    let (records, events) = h100_batch();
    let batch = batch(records.clone(), events.clone());
    exporter.export(&batch).await.unwrap();

    let received = receiver.received.lock().clone();
    assert_eq!(received.len(), 1);
    let headers = &received[0].headers;
    assert_eq!(headers["authorization"], "Bearer s3cret-token");
    assert_eq!(headers["x-tenant"], "blue");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["idempotency-key"], batch.id.to_string().as_str());
    assert_eq!(
        headers["x-records-count"],
        records.len().to_string().as_str()
    );
    assert_eq!(headers["x-events-count"], events.len().to_string().as_str());
    assert!(
        headers["user-agent"]
            .to_str()
            .unwrap()
            .starts_with("gpufleet-gpuid/")
    );
    let body = &received[0].body;
    assert_eq!(body["id"], batch.id.to_string());
    assert_eq!(body["records"].as_array().unwrap().len(), records.len());
    assert_eq!(body["events"].as_array().unwrap().len(), events.len());
    assert_eq!(
        body["records"][0]["uuid"],
        records[0].gpu.uuid.clone().unwrap()
    );
}

#[tokio::test]
async fn re_exporting_the_same_batch_sends_the_same_idempotency_key() {
    let (endpoint, receiver) = start_receiver(Vec::new()).await;
    let exporter = HttpExporter::new(&config(&endpoint)).unwrap();
    let (records, events) = h100_batch();
    exporter
        .export(&batch(records.clone(), events.clone()))
        .await
        .unwrap();
    // Rebuilt from the same content, as a re-submission after a restart would be.
    exporter
        .export(&batch(records.clone(), events))
        .await
        .unwrap();
    exporter
        .export(&batch(records[..1].to_vec(), Vec::new()))
        .await
        .unwrap();
    let keys: Vec<String> = receiver
        .received
        .lock()
        .iter()
        .map(|r| r.headers["idempotency-key"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys[0], keys[1]);
    assert_ne!(keys[0], keys[2], "different content, different key");
}

#[tokio::test]
async fn a_503_with_retry_after_is_retried_after_the_delay_with_the_same_key() {
    let (endpoint, receiver) =
        start_receiver(vec![(503, Some("1")), (503, Some("1")), (200, None)]).await;
    let pipeline = ExportPipeline::start(
        HttpExporter::new(&config(&endpoint)).unwrap(),
        fast_pipeline(),
    );
    let (records, events) = h100_batch();
    let started = Instant::now();
    pipeline
        .submit(records.clone(), events.clone())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the third attempt to succeed",
        || async { (pipeline.stats().batches_exported == 1).then_some(()) },
    )
    .await;
    let elapsed = started.elapsed();
    let received = receiver.received.lock().clone();
    assert_eq!(received.len(), 3);
    assert!(
        elapsed >= Duration::from_secs(2),
        "two Retry-After: 1 answers must delay the export by 2 s; took {elapsed:?}"
    );
    let keys: Vec<_> = received
        .iter()
        .map(|r| r.headers["idempotency-key"].clone())
        .collect();
    assert!(keys.iter().all(|key| *key == keys[0]));
    let stats = pipeline.stats();
    assert_eq!(stats.retries, 2);
    assert_eq!(stats.records_exported, records.len() as u64);
    assert_eq!(stats.events_exported, events.len() as u64);
    assert_eq!(stats.consecutive_failures, 0);
    assert_eq!(stats.permanent_failures, 0);
}

#[tokio::test]
async fn a_400_is_permanent_counted_once_and_never_retried() {
    let (endpoint, receiver) = start_receiver(vec![(400, None)]).await;
    let exporter = HttpExporter::new(&config(&endpoint)).unwrap();
    let (records, events) = h100_batch();
    let error = exporter
        .export(&batch(records.clone(), events.clone()))
        .await
        .unwrap_err();
    assert_eq!(error.class, FailureClass::Permanent);
    assert!(error.message.contains("status 400"), "{error}");

    receiver.script.lock().push_back((400, None));
    let pipeline = ExportPipeline::start(exporter, fast_pipeline());
    pipeline
        .submit(records.clone(), events.clone())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(5),
        "the batch to be dropped",
        || async { (pipeline.stats().permanent_failures == 1).then_some(()) },
    )
    .await;
    // A later batch still goes through: the rejected one did not block the queue.
    pipeline
        .submit(records[..1].to_vec(), Vec::new())
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the next batch", || async {
        (pipeline.stats().batches_exported == 1).then_some(())
    })
    .await;
    let stats = pipeline.stats();
    assert_eq!(stats.permanent_failures, 1);
    assert_eq!(stats.retries, 0);
    assert_eq!(stats.dropped_items, (records.len() + events.len()) as u64);
    assert_eq!(
        receiver.received.lock().len(),
        3,
        "one direct, one rejected, one accepted"
    );
}

#[tokio::test]
async fn an_outage_of_503s_then_recovery_delivers_every_batch_and_the_full_queue_pushes_back() {
    let script = vec![(503, None); 12];
    let (endpoint, receiver) = start_receiver(script).await;
    let mut config = fast_pipeline();
    config.max_batch_items = 8;
    config.max_queued_batches = 2;
    let pipeline =
        ExportPipeline::start(HttpExporter::new(&config_for(&endpoint)).unwrap(), config);
    let (records, _) = h100_batch(); // exactly one batch of 8
    pipeline.try_submit(records.clone(), Vec::new()).unwrap();
    pipeline.try_submit(records.clone(), Vec::new()).unwrap();
    match pipeline.try_submit(records.clone(), Vec::new()) {
        Err(SubmitError::QueueFull {
            records: back,
            queued,
            ..
        }) => {
            assert_eq!(back, records, "refused items are handed back");
            assert_eq!(queued, 2);
        }
        other => panic!("expected QueueFull, got {other:?}"),
    }
    eventually(Duration::from_secs(5), "readiness to drop", || async {
        (!pipeline.health().await.is_healthy()).then_some(())
    })
    .await;
    // submit waits for room instead of failing, and completes after recovery.
    pipeline.submit(records.clone(), Vec::new()).await.unwrap();
    eventually(Duration::from_secs(15), "all three batches", || async {
        (pipeline.stats().batches_exported == 3).then_some(())
    })
    .await;
    let stats = pipeline.stats();
    assert_eq!(stats.records_exported, 3 * records.len() as u64);
    assert_eq!(stats.dropped_items, 0);
    assert!(stats.retries >= 12);
    assert_eq!(stats.consecutive_failures, 0);
    assert!(
        pipeline.health().await.is_healthy(),
        "ready again after recovery"
    );
    let accepted: Vec<_> = receiver.received.lock().iter().skip(12).cloned().collect();
    assert_eq!(accepted.len(), 3);
}

fn config_for(endpoint: &str) -> HttpExporterConfig {
    HttpExporterConfig {
        auth_token: None,
        headers: Vec::new(),
        ..config(endpoint)
    }
}

#[tokio::test]
async fn a_receiver_that_is_not_listening_is_retryable_and_unhealthy() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}/ingest", listener.local_addr().unwrap());
    drop(listener);
    let exporter = HttpExporter::new(&config_for(&endpoint)).unwrap();
    let (records, events) = h100_batch();
    let error = exporter.export(&batch(records, events)).await.unwrap_err();
    assert!(
        matches!(error.class, FailureClass::Transient { .. }),
        "{error}"
    );
    assert!(!exporter.health().await.is_healthy());
}

#[tokio::test]
async fn with_max_attempts_set_a_batch_failing_every_attempt_is_dropped_and_counted_once() {
    let (endpoint, receiver) = start_receiver(vec![(502, None); 3]).await;
    let mut config = fast_pipeline();
    config.retry.max_attempts = Some(3);
    let pipeline =
        ExportPipeline::start(HttpExporter::new(&config_for(&endpoint)).unwrap(), config);
    let (records, events) = h100_batch();
    pipeline
        .submit(records.clone(), events.clone())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(5),
        "the batch to be given up",
        || async { (pipeline.stats().dropped_after_retries == 1).then_some(()) },
    )
    .await;
    let stats = pipeline.stats();
    assert_eq!(receiver.received.lock().len(), 3);
    assert_eq!(stats.retries, 2, "three attempts are two retries");
    assert_eq!(stats.dropped_items, (records.len() + events.len()) as u64);
    assert_eq!(stats.batches_exported, 0);
    assert!(stats.last_error.unwrap().contains("status 502"));
}
