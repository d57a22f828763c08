//! Export throughput: the PostgreSQL batch statement against the real
//! server (GPUFLEET_TEST_POSTGRES_URL, default
//! postgres://postgres@127.0.0.1:5432/test) and the pipeline's own cost in
//! front of an exporter that writes to a sink.
//!
//! `cargo bench -p gpuid --bench export`

use std::time::{Duration, Instant};

use gpuid::config::{PostgresConnection, PostgresExporterConfig, PostgresTable, Secret};
use gpuid::export::{
    Batch, ExportPipeline, Exporter, PipelineConfig, PostgresExporter, StdoutExporter,
};
use gpuid::inventory::{ChangeEvent, diff};
use gpuid::record::{GpuRecord, NodeIdentity, Observation, records_from_report};
use jiff::Timestamp;

const BATCH: usize = 500;
const ROUNDS: usize = 15;

fn fleet(nodes: usize, at: &str) -> Vec<GpuRecord> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/hardware/h100.xml"
    );
    let xml = std::fs::read(path).expect("the H100 capture");
    let report = gpuid::smi::parse(&xml).expect("a valid capture");
    let mut all = Vec::new();
    for node in 0..nodes {
        let identity = NodeIdentity {
            name: format!("node-{node}"),
            uid: format!("uid-{node}"),
            provider_id: Some(format!("aws:///us-west-2a/i-{node:08}")),
            system_uuid: None,
        };
        let observation = Observation {
            cluster: "bench",
            node: &identity,
            source_pod: "gpu-operator/nvidia-device-plugin",
            observed_at: at.parse().expect("a timestamp"),
            collector_version: "bench",
        };
        let mut records = records_from_report(&observation, &report).expect("records");
        for record in &mut records {
            record.gpu.uuid = Some(format!("GPU-{node:08}-{:04}", record.gpu.index));
        }
        all.extend(records);
    }
    all
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn row(what: &str, per_batch: Duration, items: usize) {
    let per_second = items as f64 / per_batch.as_secs_f64();
    println!(
        "| {what} | {items} | {:.2} ms | {per_second:.0} |",
        per_batch.as_secs_f64() * 1000.0
    );
}

/// The batch statements over a session with `sslmode` (plain or TLS).
async fn postgres_rows(sslmode: &str) {
    let base = std::env::var("GPUFLEET_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}sslmode={sslmode}");
    let schema = format!("gpuid_bench_{}", uuid::Uuid::new_v4().simple());
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
        panic!("PostgreSQL is required at {url} (run scripts/test.sh to check it): {error}");
    }
    let sealed: Timestamp = "2026-08-21T08:00:00Z".parse().expect("a timestamp");
    let nodes = BATCH / 8;
    let mut inserts = Vec::new();
    let mut upserts = Vec::new();
    let mut with_events = Vec::new();
    for round in 0..ROUNDS {
        // New GPUs every round: inserts.
        let mut records = fleet(nodes, "2026-08-21T08:00:00Z");
        for record in &mut records {
            record.gpu.uuid = record.gpu.uuid.take().map(|u| format!("{u}-r{round}"));
        }
        let batch = Batch::new(records.clone(), Vec::new(), sealed);
        let started = Instant::now();
        exporter.export(&batch).await.expect("insert batch");
        inserts.push(started.elapsed());

        // The same GPUs seen again later: updates of every row.
        let later: Vec<GpuRecord> = records
            .iter()
            .cloned()
            .map(|mut record| {
                record.observed_at = "2026-08-21T09:00:00Z".parse().expect("a timestamp");
                record
            })
            .collect();
        let batch = Batch::new(later.clone(), Vec::new(), sealed);
        let started = Instant::now();
        exporter.export(&batch).await.expect("update batch");
        upserts.push(started.elapsed());

        // New GPUs with their gpu_added events.
        for record in &mut records {
            record.gpu.uuid = record.gpu.uuid.take().map(|u| format!("{u}-e"));
        }
        let events: Vec<ChangeEvent> = diff(&[], &records, sealed);
        let batch = Batch::new(records, events, sealed);
        let started = Instant::now();
        exporter.export(&batch).await.expect("events batch");
        with_events.push(started.elapsed());
    }
    row(
        &format!("postgres (sslmode={sslmode}): insert 500 new GPUs"),
        median(inserts),
        BATCH,
    );
    row(
        &format!("postgres (sslmode={sslmode}): upsert 500 seen-again GPUs"),
        median(upserts),
        BATCH,
    );
    row(
        &format!("postgres (sslmode={sslmode}): 500 new GPUs + 500 events"),
        median(with_events),
        2 * BATCH,
    );

    if let Ok((client, connection)) = tokio_postgres::connect(&base, tokio_postgres::NoTls).await {
        tokio::spawn(connection);
        let _ = client
            .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
            .await;
    }
}

async fn pipeline_overhead() {
    let records = fleet(BATCH / 8, "2026-08-21T08:00:00Z");
    let mut samples = Vec::new();
    for _ in 0..ROUNDS {
        let pipeline = ExportPipeline::start(
            StdoutExporter::new(Box::new(std::io::sink())),
            PipelineConfig {
                max_batch_items: BATCH,
                ..PipelineConfig::default()
            },
        );
        let started = Instant::now();
        for _ in 0..20 {
            pipeline
                .submit(records.clone(), Vec::new())
                .await
                .expect("submit");
        }
        let report = pipeline.shutdown(Duration::from_secs(30)).await;
        samples.push(started.elapsed() / 20);
        assert!(report.drained);
    }
    row(
        "pipeline + NDJSON encoding to a sink, per batch",
        median(samples),
        BATCH,
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    println!("| measurement | items per batch | median per batch | items/s |");
    println!("|---|---|---|---|");
    runtime.block_on(async {
        pipeline_overhead().await;
        postgres_rows("disable").await;
        postgres_rows("require").await;
    });
}
