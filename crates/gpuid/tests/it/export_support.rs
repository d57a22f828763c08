//! Shared pieces of the exporter tests: real records from the captures,
//! the test services' addresses, a TCP proxy that can be cut, polling.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use gpuid::export::{Batch, PipelineConfig, RetryPolicy};
use gpuid::inventory::{ChangeEvent, diff};
use gpuid::record::{GpuRecord, NodeIdentity, Observation, records_from_report};
use gpuid::smi;
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::fixtures::capture;

/// The configuration these variables give, with secret files read from disk.
pub fn config_from_vars(vars: &[(&str, &str)]) -> gpuid::config::Config {
    gpuid::config::Config::from_lookup(
        |name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        },
        |path| std::fs::read_to_string(path),
    )
    .unwrap_or_else(|errors| panic!("test configuration rejected: {errors}"))
}

/// Serves `app` on a free loopback port until the test ends.
pub async fn serve_on_loopback(app: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// One record per GPU of a real capture, seen on `node` at `observed_at`.
pub fn records(relative: &str, node: &str, observed_at: &str) -> Vec<GpuRecord> {
    let report = smi::parse(&capture(relative)).unwrap();
    let identity = NodeIdentity {
        name: node.into(),
        uid: format!("uid-{node}"),
        provider_id: Some(format!("aws:///us-west-2a/i-{node}")),
        system_uuid: None,
    };
    let observation = Observation {
        cluster: "prod",
        node: &identity,
        source_pod: "gpu-operator/nvidia-device-plugin-abc",
        observed_at: observed_at.parse().unwrap(),
        collector_version: "test",
    };
    records_from_report(&observation, &report).unwrap()
}

/// The H100 node's eight GPUs and their `gpu_added` events.
pub fn h100_batch() -> (Vec<GpuRecord>, Vec<ChangeEvent>) {
    let now = "2026-08-21T08:00:00Z";
    let records = records("hardware/h100.xml", "h100-1", now);
    let events = diff(&[], &records, now.parse().unwrap());
    (records, events)
}

pub fn batch(records: Vec<GpuRecord>, events: Vec<ChangeEvent>) -> Batch {
    Batch::new(records, events, "2026-08-21T08:00:01Z".parse().unwrap())
}

/// Fast retries so outage tests finish quickly.
pub fn fast_pipeline() -> PipelineConfig {
    PipelineConfig {
        max_batch_items: 100,
        max_batch_age: Duration::from_millis(50),
        max_queued_batches: 16,
        retry: RetryPolicy {
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(200),
            max_attempts: None,
            max_retry_after: Duration::from_secs(5),
        },
        unhealthy_after_failures: 2,
    }
}

pub fn postgres_url() -> String {
    std::env::var("GPUFLEET_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

/// A connected client, or a failure naming what to start.
pub async fn postgres_client() -> tokio_postgres::Client {
    let url = postgres_url();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "PostgreSQL is required at {url} (set GPUFLEET_TEST_POSTGRES_URL, or run scripts/test.sh which checks and starts it): {error}"
            )
        });
    tokio::spawn(connection);
    client
}

/// A schema name no other test uses.
pub fn fresh_schema(test: &str) -> String {
    format!("gpuid_{test}_{}", uuid::Uuid::new_v4().simple())
}

/// The moto endpoint, or a failure saying how to get one.
pub fn s3_endpoint() -> String {
    let endpoint = std::env::var("GPUFLEET_TEST_S3_ENDPOINT").unwrap_or_default();
    assert!(
        !endpoint.trim().is_empty(),
        "GPUFLEET_TEST_S3_ENDPOINT is not set: run the tests through scripts/test.sh, which starts moto_server and sets it"
    );
    endpoint.trim().trim_end_matches('/').to_owned()
}

/// Polls `check` until it returns `Some` or `limit` passes.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A loopback TCP proxy to `upstream` that can be cut (listener closed,
/// live connections dropped) and restored on the same port.
pub struct CuttableProxy {
    pub addr: SocketAddr,
    upstream: SocketAddr,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl CuttableProxy {
    pub async fn start(upstream: SocketAddr) -> CuttableProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let proxy = CuttableProxy {
            addr,
            upstream,
            tasks: Arc::new(Mutex::new(Vec::new())),
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&self, listener: TcpListener) {
        let upstream = self.upstream;
        let tasks = Arc::clone(&self.tasks);
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let pipe = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tasks.lock().push(pipe);
            }
        });
        self.tasks.lock().push(accept);
    }

    /// Refuses new connections and breaks the open ones.
    pub fn cut(&self) {
        for task in self.tasks.lock().drain(..) {
            task.abort();
        }
    }

    pub async fn restore(&self) {
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        self.serve(listener);
    }
}

impl Drop for CuttableProxy {
    fn drop(&mut self) {
        self.cut();
    }
}
