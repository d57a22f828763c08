//! The thin adapter between the collector and the export pipeline: the
//! collector hands records and events over and never waits for the backend,
//! so an export failure can never re-run an exec (the pipeline retries the
//! batch itself).

use futures::future::BoxFuture;

use crate::export::{ExportPipeline, Exporter, Health, PipelineStats, SubmitError};
use crate::inventory::ChangeEvent;
use crate::record::GpuRecord;

/// Where collected inventories go.
pub trait RecordSink: Send + Sync + 'static {
    /// Short exporter name for metrics.
    fn exporter_name(&self) -> &'static str;
    /// Queues the items; waits only for queue room (backpressure).
    fn submit(
        &self,
        records: Vec<GpuRecord>,
        events: Vec<ChangeEvent>,
    ) -> BoxFuture<'_, Result<(), SubmitError>>;
    fn health(&self) -> BoxFuture<'_, Health>;
    fn stats(&self) -> PipelineStats;
}

impl<E: Exporter> RecordSink for ExportPipeline<E> {
    fn exporter_name(&self) -> &'static str {
        self.exporter().name()
    }

    fn submit(
        &self,
        records: Vec<GpuRecord>,
        events: Vec<ChangeEvent>,
    ) -> BoxFuture<'_, Result<(), SubmitError>> {
        Box::pin(ExportPipeline::submit(self, records, events))
    }

    fn health(&self) -> BoxFuture<'_, Health> {
        Box::pin(ExportPipeline::health(self))
    }

    fn stats(&self) -> PipelineStats {
        ExportPipeline::stats(self)
    }
}
