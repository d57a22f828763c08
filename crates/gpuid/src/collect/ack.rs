//! Recording an export on the Node only once the backend has it.
//!
//! The collector does not wait for the backend (batches fill for up to a
//! second; an outage can last hours). Instead it queues the Node's state
//! patch here with the pipeline position of its records; the patch is
//! applied once the pipeline reports everything up to that position
//! exported. A crash in between leaves the old hash on the Node, so the
//! inventory is exported again after the restart (at least once, with the
//! same event ids), never silently lost.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::sink::RecordSink;
use crate::export::PipelineStats;

/// Items the pipeline has finished with (exported or dropped as counted).
pub fn settled(stats: &PipelineStats) -> u64 {
    stats.records_exported + stats.events_exported + stats.dropped_items
}

/// Items the pipeline has accepted so far.
pub fn accepted(stats: &PipelineStats) -> u64 {
    stats.submitted_records + stats.submitted_events
}

struct Pending {
    position: u64,
    node: String,
    patch: Value,
}

/// A FIFO of Node patches waiting for their records to be exported.
#[derive(Clone, Default)]
pub struct ExportAcks {
    pending: Arc<Mutex<VecDeque<Pending>>>,
    added: Arc<Notify>,
}

impl ExportAcks {
    /// Queues `patch` for `node`, to apply once `position` items are settled.
    pub fn push(&self, position: u64, node: String, patch: Value) {
        self.pending.lock().push_back(Pending {
            position,
            node,
            patch,
        });
        self.added.notify_one();
    }

    pub fn len(&self) -> usize {
        self.pending.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies due patches until `shutdown`.
    pub async fn run(
        self,
        client: kube::Client,
        sink: Arc<dyn RecordSink>,
        shutdown: CancellationToken,
    ) {
        let nodes: Api<Node> = Api::all(client);
        loop {
            let done = settled(&sink.stats());
            let due: Vec<Pending> = {
                let mut pending = self.pending.lock();
                let mut due = Vec::new();
                while pending.front().is_some_and(|p| p.position <= done) {
                    if let Some(item) = pending.pop_front() {
                        due.push(item);
                    }
                }
                due
            };
            let nothing_due = due.is_empty();
            let patches = due.into_iter().map(|item| {
                let nodes = nodes.clone();
                async move {
                    let result = nodes
                        .patch(&item.node, &PatchParams::default(), &Patch::Merge(&item.patch))
                        .await;
                    if let Err(error) = result {
                        // The next collection sees the old hash and exports again.
                        tracing::warn!(node = %item.node, %error, "cannot record the export on the node");
                    }
                }
            });
            futures::future::join_all(patches).await;
            if nothing_due {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = self.added.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
        }
    }
}
