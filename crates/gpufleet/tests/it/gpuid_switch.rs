//! Switching exporters with the real binary, as a user does: one Node with
//! the H100 capture, `gpufleet gpuid run` with stdout, then PostgreSQL
//! (first unmigrated, then with auto-migrate), then S3 on moto_server, then
//! PostgreSQL again. Every new destination receives every GPU once; a
//! destination that already has them receives nothing again; `/readyz` is
//! not ready while the new destination cannot take the inventory.
//!
//! Needs PostgreSQL (GPUFLEET_TEST_POSTGRES_URL, default
//! postgres://postgres@127.0.0.1:5432/test) and moto_server
//! (GPUFLEET_TEST_S3_ENDPOINT); scripts/test.sh provides both.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use serde_json::Value;

use crate::gpuid_run::{
    GpuidRun, NODE, free_port, gpu_fleet, h100_capture, http_get, poll_http, poll_http_until,
    terminate, uuids,
};
use crate::support::{line_reader, postgres, postgres_url};

const PREFIX: &str = "gpuid.gpufleet.dev";
const WAIT: Duration = Duration::from_secs(60);

fn s3_endpoint() -> String {
    let endpoint = std::env::var("GPUFLEET_TEST_S3_ENDPOINT").unwrap_or_default();
    assert!(
        !endpoint.trim().is_empty(),
        "GPUFLEET_TEST_S3_ENDPOINT is not set: run the tests through scripts/test.sh, which starts moto_server and sets it"
    );
    endpoint.trim().trim_end_matches('/').to_owned()
}

/// One plain HTTP/1.1 request to moto (it accepts any well-formed
/// signature), answered with status and body.
fn moto(method: &str, url: &str) -> (u16, String) {
    let rest = url.trim_start_matches("http://");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = TcpStream::connect(authority)
        .unwrap_or_else(|error| panic!("moto_server at {authority} does not answer: {error}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nContent-Length: 0\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0\r\n\
         Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// Every GPU UUID in the bucket's NDJSON record objects.
fn s3_uuids(endpoint: &str, bucket: &str) -> BTreeSet<String> {
    let (status, listing) = moto("GET", &format!("{endpoint}/{bucket}?list-type=2"));
    assert_eq!(status, 200, "{listing}");
    let keys: Vec<&str> = listing
        .split("<Key>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</Key>").map(|(key, _)| key))
        .filter(|key| key.ends_with("-records.ndjson"))
        .collect();
    let mut found = BTreeSet::new();
    for key in keys {
        let (status, body) = moto("GET", &format!("{endpoint}/{bucket}/{key}"));
        assert_eq!(status, 200, "{key}: {body}");
        for line in body.lines().filter(|line| !line.trim().is_empty()) {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("{key}: not JSON ({error}): {line}"));
            if let Some(uuid) = value["uuid"].as_str() {
                found.insert(uuid.to_owned());
            }
        }
    }
    found
}

async fn count(db: &tokio_postgres::Client, sql: &str) -> i64 {
    db.query_one(sql, &[]).await.map_or(-1, |row| row.get(0))
}

/// The keys of the per-exporter `inventory-hash` annotations on the Node.
async fn exporter_states(nodes: &Api<Node>) -> BTreeSet<String> {
    let node = nodes.get(NODE).await.expect("the node");
    node.metadata
        .annotations
        .unwrap_or_default()
        .into_keys()
        .filter_map(|key| {
            key.strip_prefix(&format!("{PREFIX}/"))
                .and_then(|name| name.strip_suffix(".inventory-hash"))
                .map(str::to_owned)
        })
        .collect()
}

/// Polls until the Node holds `want` exporter states (the export record
/// is written once the backend has the batch).
async fn wait_for_states(nodes: &Api<Node>, want: usize) -> BTreeSet<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let states = exporter_states(nodes).await;
        if states.len() == want {
            return states;
        }
        assert!(
            Instant::now() < deadline,
            "the node holds {states:?}, not {want} exporter states"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn run(kubeconfig: &Path, port: u16, env: &[(&str, &str)]) -> GpuidRun {
    GpuidRun::spawn(kubeconfig, port, env)
}

fn stop(mut child: GpuidRun) {
    let status = terminate(&mut child);
    assert!(status.success(), "exit after SIGTERM: {status:?}");
}

fn metric_value(port: u16, series: &str) -> Option<String> {
    let (_, metrics) = http_get(port, "/metrics")?;
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series).map(|v| v.trim().to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switching_stdout_to_postgres_to_s3_exports_every_gpu_to_each_new_destination() {
    let xml = h100_capture();
    let want: BTreeSet<String> = uuids(&xml).into_iter().collect();
    assert_eq!(want.len(), 8);
    let sim = gpu_fleet(xml).await;
    let nodes: Api<Node> = Api::all(sim.client());
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    let db = postgres().await;
    let schema = format!("gpuid_switch_{}", std::process::id());
    db.batch_execute(&format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
    ))
    .await
    .unwrap();
    let endpoint = s3_endpoint();
    let bucket = format!("gpuid-switch-{}", std::process::id());
    let (status, body) = moto("PUT", &format!("{endpoint}/{bucket}"));
    assert_eq!(status, 200, "creating bucket {bucket}: {body}");

    // 1. stdout: every GPU on stdout, and the stdout state on the Node.
    let port = free_port();
    let mut stdout_run = run(&kubeconfig, port, &[("EXPORTER_TYPE", "stdout")]);
    let lines = line_reader(&mut stdout_run);
    let mut seen = BTreeSet::new();
    let deadline = Instant::now() + WAIT;
    while seen.len() < want.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("stdout gave {seen:?} within {WAIT:?}"));
        let value: Value = serde_json::from_str(&line).expect("an NDJSON line");
        if let Some(uuid) = value["uuid"].as_str() {
            seen.insert(uuid.to_owned());
        }
    }
    assert_eq!(seen, want);
    let after_stdout = wait_for_states(&nodes, 1).await;
    assert!(
        after_stdout.iter().all(|key| key.starts_with("stdout-")),
        "{after_stdout:?}"
    );
    stop(stdout_run);

    // 2. PostgreSQL without its tables: the inventory is due there (the
    // stdout state is not this destination's), the export fails, and
    // /readyz says so instead of "ready".
    let table = format!("{schema}.gpu");
    let postgres_env = |migrate: &'static str| {
        vec![
            ("EXPORTER_TYPE", "postgres".to_owned()),
            ("POSTGRES_DSN", postgres_url()),
            ("POSTGRES_TABLE", table.clone()),
            ("POSTGRES_AUTO_MIGRATE", migrate.to_owned()),
            ("EXPORT_BACKOFF_INITIAL", "50ms".to_owned()),
            ("EXPORT_UNHEALTHY_AFTER", "1".to_owned()),
        ]
    };
    let unmigrated = postgres_env("false");
    let borrowed: Vec<(&str, &str)> = unmigrated.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let port = free_port();
    let unready = run(&kubeconfig, port, &borrowed);
    let answer = poll_http_until(
        port,
        "/readyz",
        WAIT,
        "503 naming postgres",
        |status, body| status == 503 && body.contains("postgres"),
    );
    assert!(
        answer.starts_with("not ready: exporter unhealthy (postgres)"),
        "{answer}"
    );
    stop(unready);
    assert_eq!(
        wait_for_states(&nodes, 1).await,
        after_stdout,
        "nothing is recorded for a destination that did not take the inventory"
    );

    // 3. PostgreSQL with auto-migrate: every GPU lands, then /readyz is 200.
    let migrated = postgres_env("true");
    let borrowed: Vec<(&str, &str)> = migrated.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let port = free_port();
    let postgres_run = run(&kubeconfig, port, &borrowed);
    let inventory = format!("SELECT count(*) FROM {schema}.gpu_inventory");
    let deadline = Instant::now() + WAIT;
    while count(&db, &inventory).await != 8 {
        assert!(
            Instant::now() < deadline,
            "{inventory} = {} after {WAIT:?}",
            count(&db, &inventory).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rows: BTreeSet<String> = db
        .query(&format!("SELECT gpu_uuid FROM {schema}.gpu_inventory"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(rows, want);
    let added = format!("SELECT count(*) FROM {schema}.gpu_events WHERE kind = 'gpu_added'");
    assert_eq!(
        count(&db, &added).await,
        8,
        "one gpu_added per GPU for the new destination"
    );
    let ready = poll_http(port, "/readyz", 200, WAIT);
    assert!(ready.starts_with("ready"), "{ready}");
    let after_postgres = wait_for_states(&nodes, 2).await;
    assert!(
        after_postgres.is_superset(&after_stdout),
        "{after_postgres:?}"
    );
    stop(postgres_run);

    // 4. S3: every GPU in the bucket.
    let s3_env = [
        ("EXPORTER_TYPE", "s3"),
        ("S3_ENDPOINT", endpoint.as_str()),
        ("S3_BUCKET", bucket.as_str()),
        ("S3_FORCE_PATH_STYLE", "true"),
        ("S3_FORMAT", "ndjson"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
    ];
    let port = free_port();
    let s3_run = run(&kubeconfig, port, &s3_env);
    let deadline = Instant::now() + WAIT;
    loop {
        let found = s3_uuids(&endpoint, &bucket);
        if found == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the bucket holds {found:?} after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ready = poll_http(port, "/readyz", 200, WAIT);
    assert!(ready.starts_with("ready"), "{ready}");
    wait_for_states(&nodes, 3).await;
    stop(s3_run);

    // 5. Back to the same PostgreSQL table: its state is still on the Node,
    // so nothing is exported twice.
    let port = free_port();
    let again = run(&kubeconfig, port, &borrowed);
    let deadline = Instant::now() + WAIT;
    while metric_value(port, "gpuid_pods_processed_total{result=\"unchanged\"}").as_deref()
        != Some("1")
    {
        assert!(
            metric_value(port, "gpuid_pods_processed_total{result=\"exported\"}").as_deref()
                != Some("1"),
            "the inventory was exported again to a destination that has it"
        );
        assert!(
            Instant::now() < deadline,
            "the pod was not processed within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop(again);
    assert_eq!(count(&db, &inventory).await, 8);
    let events = format!("SELECT count(*) FROM {schema}.gpu_events");
    assert_eq!(count(&db, &events).await, 8);

    db.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    sim.shutdown().await;
}
