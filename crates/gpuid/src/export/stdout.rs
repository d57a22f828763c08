//! NDJSON on standard output (logs go to stderr, so stdout stays data).
//!
//! Upstream's "stdout" exporter wrote through its logger to stderr. Here
//! each record is one JSON object per line, followed by the batch's change
//! events, one per line. Every line carries `kind` and `schemaVersion`
//! ([`LINE_SCHEMA_VERSION`]): `kind` is [`RECORD_KIND`] (`gpu`) for a GPU
//! record, and the event's kind (`gpu_added`, `gpu_removed`, `gpu_moved`,
//! `gpu_changed`) for a change event, so a reader dispatches on one field.
//! The rest of the line is the record or the event, field for field.

use std::io::Write;

use parking_lot::Mutex;
use serde::Serialize;

use super::{Batch, ExportError, Exporter, Health};
use crate::inventory::ChangeEvent;
use crate::record::GpuRecord;

const NAME: &str = "stdout";

/// Version of the stdout line schema. Adding a field keeps it; removing
/// or renaming a field, or changing what one means, raises it.
pub const LINE_SCHEMA_VERSION: u32 = 1;

/// `kind` of a GPU record line.
pub const RECORD_KIND: &str = "gpu";

/// A record line: the envelope, then the record's own fields.
#[derive(Serialize)]
struct RecordLine<'a> {
    kind: &'static str,
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(flatten)]
    record: &'a GpuRecord,
}

/// An event line: the version, then the event, whose own `kind` is the
/// line's kind.
#[derive(Serialize)]
struct EventLine<'a> {
    #[serde(rename = "schemaVersion")]
    schema_version: u32,
    #[serde(flatten)]
    event: &'a ChangeEvent,
}

/// The lines [`StdoutExporter`] writes for `batch`: records, then events.
pub fn batch_lines(batch: &Batch) -> String {
    let records = batch.records.iter().map(|record| RecordLine {
        kind: RECORD_KIND,
        schema_version: LINE_SCHEMA_VERSION,
        record,
    });
    let events = batch.events.iter().map(|event| EventLine {
        schema_version: LINE_SCHEMA_VERSION,
        event,
    });
    let mut text = crate::ndjson::to_ndjson(&records.collect::<Vec<_>>());
    text.push_str(&crate::ndjson::to_ndjson(&events.collect::<Vec<_>>()));
    text
}

pub struct StdoutExporter {
    writer: Mutex<Box<dyn Write + Send>>,
    last_error: Mutex<Option<String>>,
}

impl StdoutExporter {
    /// Writes to the process's standard output.
    pub fn stdout() -> StdoutExporter {
        StdoutExporter::new(Box::new(std::io::stdout()))
    }

    /// Writes to any writer (a buffer in tests, a file, a pipe).
    pub fn new(writer: Box<dyn Write + Send>) -> StdoutExporter {
        StdoutExporter {
            writer: Mutex::new(writer),
            last_error: Mutex::new(None),
        }
    }

    fn write_batch(&self, batch: &Batch) -> std::io::Result<()> {
        let text = batch_lines(batch);
        // One write of the whole batch, so lines of concurrent batches can
        // never interleave.
        let mut writer = self.writer.lock();
        writer.write_all(text.as_bytes())?;
        writer.flush()
    }
}

impl Exporter for StdoutExporter {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn export(&self, batch: &Batch) -> Result<(), ExportError> {
        match self.write_batch(batch) {
            Ok(()) => {
                *self.last_error.lock() = None;
                Ok(())
            }
            Err(error) => {
                let message = format!("writing to standard output: {error}");
                *self.last_error.lock() = Some(message.clone());
                // A closed pipe does not reopen itself, but a full disk or a
                // slow reader can recover; retrying costs little either way.
                Err(ExportError::transient(NAME, message))
            }
        }
    }

    async fn health(&self) -> Health {
        match self.last_error.lock().clone() {
            Some(reason) => Health::unhealthy(reason),
            None => Health::Healthy,
        }
    }
}
