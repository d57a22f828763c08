//! The stdout exporter and the pipeline's batching, through a shared buffer.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use gpuid::export::{ExportPipeline, Exporter, PipelineConfig, StdoutExporter, SubmitError};
use gpuid::inventory::ChangeEvent;
use gpuid::record::GpuRecord;
use parking_lot::Mutex;

use crate::export_support::{batch, eventually, fast_pipeline, h100_batch};

/// A writer the test can read back; every `write_all` call is counted so
/// tests can see how many batches arrived.
#[derive(Clone, Default)]
struct SharedBuffer {
    bytes: Arc<Mutex<Vec<u8>>>,
    writes: Arc<Mutex<usize>>,
}

impl Write for SharedBuffer {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.bytes.lock().extend_from_slice(data);
        *self.writes.lock() += 1;
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl SharedBuffer {
    fn text(&self) -> String {
        String::from_utf8(self.bytes.lock().clone()).unwrap()
    }

    fn lines(&self) -> Vec<serde_json::Value> {
        String::from_utf8(self.bytes.lock().clone())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

#[tokio::test]
async fn a_batch_is_written_as_ndjson_records_then_events() {
    let buffer = SharedBuffer::default();
    let exporter = StdoutExporter::new(Box::new(buffer.clone()));
    let (records, events) = h100_batch();
    exporter
        .export(&batch(records.clone(), events.clone()))
        .await
        .unwrap();

    let lines = buffer.lines();
    assert_eq!(lines.len(), records.len() + events.len());
    let parsed_records: Vec<GpuRecord> = lines[..records.len()]
        .iter()
        .map(|line| serde_json::from_value(line.clone()).unwrap())
        .collect();
    assert_eq!(parsed_records, records);
    let parsed_events: Vec<ChangeEvent> = lines[records.len()..]
        .iter()
        .map(|line| serde_json::from_value(line.clone()).unwrap())
        .collect();
    assert_eq!(parsed_events, events);
    for line in &lines {
        assert_eq!(line["schemaVersion"], 1, "{line}");
    }
    assert!(lines[..records.len()].iter().all(|l| l["kind"] == "gpu"));
    assert!(
        lines[records.len()..]
            .iter()
            .all(|l| l["kind"] == "gpu_added")
    );
    // The envelope comes first on record lines, so `head -c` shows it.
    let text = buffer.text();
    assert!(
        text.lines()
            .take(records.len())
            .all(|l| l.starts_with(r#"{"kind":"gpu","schemaVersion":1,"#)),
        "{text}"
    );
    assert!(exporter.health().await.is_healthy());
}

#[tokio::test]
async fn the_pipeline_seals_batches_at_the_size_threshold_and_the_rest_after_the_age() {
    let buffer = SharedBuffer::default();
    let config = PipelineConfig {
        max_batch_items: 5,
        max_batch_age: Duration::from_secs(3),
        ..fast_pipeline()
    };
    let pipeline = ExportPipeline::start(StdoutExporter::new(Box::new(buffer.clone())), config);
    let (records, _) = h100_batch(); // 8 records: one full batch of 5, then 3 waiting
    pipeline.submit(records.clone(), Vec::new()).await.unwrap();

    eventually(Duration::from_secs(2), "the full batch", || async {
        (pipeline.stats().batches_exported == 1).then_some(())
    })
    .await;
    assert_eq!(buffer.lines().len(), 5);
    assert_eq!(
        pipeline.stats().open_items,
        3,
        "the rest waits for the age threshold"
    );

    eventually(Duration::from_secs(10), "the aged batch", || async {
        (pipeline.stats().batches_exported == 2).then_some(())
    })
    .await;
    assert_eq!(buffer.lines().len(), 8);
    assert_eq!(*buffer.writes.lock(), 2, "one write per batch");
    let stats = pipeline.stats();
    assert_eq!(stats.records_exported, 8);
    assert_eq!(stats.submitted_records, 8);
    let report = pipeline.shutdown(Duration::from_secs(1)).await;
    assert!(report.drained);
}

#[tokio::test]
async fn shutdown_exports_what_is_still_open_and_then_refuses_new_items() {
    let buffer = SharedBuffer::default();
    let config = PipelineConfig {
        max_batch_age: Duration::from_secs(3600),
        ..fast_pipeline()
    };
    let pipeline = ExportPipeline::start(StdoutExporter::new(Box::new(buffer.clone())), config);
    let (records, events) = h100_batch();
    pipeline
        .try_submit(records.clone(), events.clone())
        .unwrap();
    let report = pipeline.shutdown(Duration::from_secs(2)).await;
    assert!(report.drained, "{report:?}");
    assert_eq!(buffer.lines().len(), records.len() + events.len());
    match pipeline.try_submit(records.clone(), Vec::new()) {
        Err(SubmitError::Closed { records: back, .. }) => assert_eq!(back, records),
        other => panic!("expected Closed, got {other:?}"),
    }
}
