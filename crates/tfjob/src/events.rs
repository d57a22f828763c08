//! The operator's Kubernetes Events, written off the reconcile path.
//!
//! A pass used to wait for every Event it caused (a pod create, then its
//! `SuccessfulCreatePod`, then the next create): at 1,000 jobs that put
//! about 36 Event round trips in front of each job's 22 child creates. Now
//! a pass only queues its Events and background writers publish them.
//!
//! All Events about one job go to the same writer, in the order the pass
//! queued them: a reader still sees `TFJobSucceeded` before the clean-up's
//! `SuccessfulDeletePod`, and kube's recorder, which turns a repeated
//! reason into a series by reading and then patching its cached Event,
//! never runs that read-modify-write twice at once for one job (two
//! concurrent repeats would both write the same count and lose one).
//!
//! Like client-go's event broadcaster, a full queue drops the Event with a
//! warning rather than slowing the controller down.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use controller_kit::EventSink;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Writers, each publishing one Event at a time.
const WRITERS: usize = 8;
/// Events one writer holds before new ones are dropped (a burst of 1,000
/// jobs queues about 36,000).
const QUEUED_PER_WRITER: usize = 8192;
/// How long a stopping operator keeps writing the Events already queued.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// One Event waiting to be written.
struct Queued {
    regarding: ObjectReference,
    type_: EventType,
    reason: String,
    note: String,
}

/// Queues the operator's Events and writes them in the background.
pub struct EventQueue {
    sink: EventSink,
    writers: Vec<mpsc::Sender<Queued>>,
    /// Taken by [`EventQueue::run`].
    receivers: Mutex<Option<Vec<mpsc::Receiver<Queued>>>>,
    dropped: AtomicU64,
}

impl EventQueue {
    /// Events written through `sink` once [`EventQueue::run`] runs.
    pub fn new(sink: EventSink) -> Self {
        let (writers, receivers) = (0..WRITERS)
            .map(|_| mpsc::channel(QUEUED_PER_WRITER))
            .unzip();
        Self {
            sink,
            writers,
            receivers: Mutex::new(Some(receivers)),
            dropped: AtomicU64::new(0),
        }
    }

    /// Queues an Event about `regarding` (the `Reconcile` action).
    pub fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let writer = &self.writers[writer_of(regarding)];
        let queued = Queued {
            regarding: regarding.clone(),
            type_,
            reason: reason.to_string(),
            note,
        };
        if let Err(error) = writer.try_send(queued) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            let (mpsc::error::TrySendError::Full(queued)
            | mpsc::error::TrySendError::Closed(queued)) = error;
            tracing::warn!(
                reason = %queued.reason,
                name = queued.regarding.name.as_deref().unwrap_or_default(),
                "event queue full; event dropped"
            );
        }
    }

    /// Events dropped because their writer's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Writes queued Events until `stop` fires, then the ones still queued.
    /// Only the first call does anything.
    pub async fn run(&self, stop: CancellationToken) {
        let Some(receivers) = self.receivers.lock().take() else {
            return;
        };
        let writers = receivers
            .into_iter()
            .map(|receiver| self.write_all(receiver, stop.clone()));
        futures::future::join_all(writers).await;
    }

    async fn write_all(&self, mut receiver: mpsc::Receiver<Queued>, stop: CancellationToken) {
        loop {
            tokio::select! {
                // Queued Events first: stopping means writing what is queued.
                biased;
                queued = receiver.recv() => match queued {
                    Some(queued) => self.write(queued).await,
                    None => return,
                },
                _ = stop.cancelled() => break,
            }
        }
        while let Ok(queued) = receiver.try_recv() {
            self.write(queued).await;
        }
    }

    /// One Event per note, as training-operator's recorder (client-go's)
    /// keys them: "Created pod: job-worker-1" is its own Event, not a
    /// repeat of "Created pod: job-worker-0" (the referee corpus compares
    /// them).
    async fn write(&self, queued: Queued) {
        self.sink
            .publish_or_log_by_note(
                &queued.regarding,
                queued.type_,
                &queued.reason,
                "Reconcile",
                queued.note,
            )
            .await;
    }
}

/// The writer of every Event about one object.
fn writer_of(regarding: &ObjectReference) -> usize {
    let mut hasher = DefaultHasher::new();
    (&regarding.namespace, &regarding.name, &regarding.uid).hash(&mut hasher);
    (hasher.finish() % WRITERS as u64) as usize
}
