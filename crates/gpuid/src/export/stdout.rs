//! NDJSON on standard output (logs go to stderr, so stdout stays data).
//!
//! Upstream's "stdout" exporter wrote through its logger to stderr. Here
//! each record is one JSON object per line (the same shape as
//! `record::to_ndjson`), followed by the batch's change events, one per
//! line; an event line is told apart by its `kind` field
//! (`gpu_added`, …), which records do not have.

use std::io::Write;

use parking_lot::Mutex;

use super::{Batch, ExportError, Exporter, Health};

const NAME: &str = "stdout";

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
        let mut text = crate::ndjson::to_ndjson(&batch.records);
        text.push_str(&crate::ndjson::to_ndjson(&batch.events));
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
