//! The pipeline in front of every exporter: a bounded in-memory queue,
//! batching by size and age, and retries with backoff.
//!
//! Memory bound: at most `max_queued_batches` sealed batches of at most
//! `max_batch_items` records and events each, plus the one batch being
//! filled. When the queue is full, [`ExportPipeline::submit`] waits for a
//! slot (backpressure: collection pauses rather than data being dropped)
//! and [`ExportPipeline::try_submit`] hands the items back in
//! [`SubmitError::QueueFull`]. Nothing that was accepted is dropped except
//! by a permanent failure (the backend rejected the batch itself) or, when
//! `RetryPolicy::max_attempts` is set, by exhausting the retries; both are
//! counted and logged once.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use parking_lot::Mutex;
use rand::Rng;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::retry::{RetryPolicy, backoff_delay};
use super::{Batch, ExportError, Exporter, Health};
use crate::config::{Config, ExportPipelineSettings};
use crate::inventory::ChangeEvent;
use crate::record::GpuRecord;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineConfig {
    /// A batch is sealed once it holds this many records plus events.
    pub max_batch_items: usize,
    /// A non-empty batch is sealed this long after its first item arrived,
    /// however small it is.
    pub max_batch_age: Duration,
    /// Sealed batches held in memory, including the one being exported.
    pub max_queued_batches: usize,
    pub retry: RetryPolicy,
    /// Consecutive failed attempts after which [`ExportPipeline::health`]
    /// reports unhealthy even if the backend's own probe passes.
    pub unhealthy_after_failures: u32,
}

/// The defaults are those of the `EXPORT_*` knobs.
impl Default for PipelineConfig {
    fn default() -> PipelineConfig {
        PipelineConfig::from(&ExportPipelineSettings::default())
    }
}

impl From<&ExportPipelineSettings> for PipelineConfig {
    fn from(settings: &ExportPipelineSettings) -> PipelineConfig {
        PipelineConfig {
            max_batch_items: settings.batch_size,
            max_batch_age: settings.batch_interval,
            max_queued_batches: settings.queue_capacity,
            retry: RetryPolicy {
                initial_backoff: settings.backoff_initial,
                max_backoff: settings.backoff_max,
                max_attempts: settings.max_attempts,
                max_retry_after: settings.retry_after_max,
            },
            unhealthy_after_failures: settings.unhealthy_after,
        }
    }
}

impl PipelineConfig {
    /// The pipeline configured by `EXPORT_*` (and their flags).
    pub fn from_config(config: &Config) -> PipelineConfig {
        PipelineConfig::from(&config.export_pipeline)
    }
}

/// Counters since start, for metrics and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipelineStats {
    pub submitted_records: u64,
    pub submitted_events: u64,
    pub batches_exported: u64,
    pub records_exported: u64,
    pub events_exported: u64,
    /// Failed attempts that were retried.
    pub retries: u64,
    /// Batches the backend rejected permanently (dropped, logged once).
    pub permanent_failures: u64,
    /// Batches dropped after `max_attempts` transient failures.
    pub dropped_after_retries: u64,
    /// Records plus events in dropped batches.
    pub dropped_items: u64,
    pub consecutive_failures: u32,
    pub queued_batches: usize,
    /// Items in the batch being filled.
    pub open_items: usize,
    pub last_success: Option<Timestamp>,
    pub last_error: Option<String>,
}

/// Why items were not accepted; they are handed back untouched.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("export queue is full ({queued} batches); retry later")]
    QueueFull {
        queued: usize,
        records: Vec<GpuRecord>,
        events: Vec<ChangeEvent>,
    },
    #[error("export pipeline is shut down")]
    Closed {
        records: Vec<GpuRecord>,
        events: Vec<ChangeEvent>,
    },
}

/// What was left when the pipeline stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// True when every accepted item was exported (or dropped as counted).
    pub drained: bool,
    pub pending_batches: usize,
    pub pending_items: usize,
}

#[derive(Default)]
struct State {
    open_records: Vec<GpuRecord>,
    open_events: Vec<ChangeEvent>,
    open_since: Option<Instant>,
    queue: VecDeque<Arc<Batch>>,
    closing: bool,
    stats: PipelineStats,
}

impl State {
    fn open_len(&self) -> usize {
        self.open_records.len() + self.open_events.len()
    }

    fn seal(&mut self) {
        if self.open_len() == 0 {
            return;
        }
        let records = std::mem::take(&mut self.open_records);
        let events = std::mem::take(&mut self.open_events);
        self.open_since = None;
        self.queue
            .push_back(Arc::new(Batch::new(records, events, Timestamp::now())));
    }
}

struct Shared<E> {
    exporter: E,
    config: PipelineConfig,
    state: Mutex<State>,
    /// A batch was sealed or started, or the pipeline is closing.
    work: Notify,
    /// A queue slot was freed.
    space: Notify,
    abort: watch::Sender<bool>,
}

/// A cloneable handle to a running pipeline around exporter `E`.
pub struct ExportPipeline<E: Exporter> {
    shared: Arc<Shared<E>>,
    worker: Arc<Mutex<Option<JoinHandle<()>>>>,
}

impl<E: Exporter> Clone for ExportPipeline<E> {
    fn clone(&self) -> Self {
        ExportPipeline {
            shared: Arc::clone(&self.shared),
            worker: Arc::clone(&self.worker),
        }
    }
}

impl<E: Exporter> ExportPipeline<E> {
    /// Starts the export worker on the current tokio runtime.
    pub fn start(exporter: E, config: PipelineConfig) -> ExportPipeline<E> {
        let config = PipelineConfig {
            max_batch_items: config.max_batch_items.max(1),
            max_queued_batches: config.max_queued_batches.max(1),
            ..config
        };
        let (abort, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            exporter,
            config,
            state: Mutex::new(State::default()),
            work: Notify::new(),
            space: Notify::new(),
            abort,
        });
        let worker = tokio::spawn(run_worker(Arc::clone(&shared)));
        ExportPipeline {
            shared,
            worker: Arc::new(Mutex::new(Some(worker))),
        }
    }

    pub fn exporter(&self) -> &E {
        &self.shared.exporter
    }

    /// Accepts the items or returns them when the queue has no room.
    ///
    /// A submission that needs more slots than the queue has in total is
    /// still accepted when the queue is empty, so it cannot wait forever.
    pub fn try_submit(
        &self,
        records: Vec<GpuRecord>,
        events: Vec<ChangeEvent>,
    ) -> Result<(), SubmitError> {
        let config = &self.shared.config;
        let mut state = self.shared.state.lock();
        if state.closing {
            return Err(SubmitError::Closed { records, events });
        }
        let incoming = records.len() + events.len();
        if incoming == 0 {
            return Ok(());
        }
        let seals = (state.open_len() + incoming) / config.max_batch_items;
        if !state.queue.is_empty() && state.queue.len() + seals > config.max_queued_batches {
            return Err(SubmitError::QueueFull {
                queued: state.queue.len(),
                records,
                events,
            });
        }
        state.stats.submitted_records += records.len() as u64;
        state.stats.submitted_events += events.len() as u64;
        // Records first, then events, each split at the size threshold.
        for record in records {
            state.open_records.push(record);
            if state.open_len() >= config.max_batch_items {
                state.seal();
            }
        }
        for event in events {
            state.open_events.push(event);
            if state.open_len() >= config.max_batch_items {
                state.seal();
            }
        }
        if state.open_len() > 0 && state.open_since.is_none() {
            state.open_since = Some(Instant::now());
        }
        drop(state);
        self.shared.work.notify_one();
        Ok(())
    }

    /// Like [`try_submit`](Self::try_submit) but waits for room instead of
    /// failing when the queue is full.
    pub async fn submit(
        &self,
        mut records: Vec<GpuRecord>,
        mut events: Vec<ChangeEvent>,
    ) -> Result<(), SubmitError> {
        loop {
            let space = self.shared.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            match self.try_submit(records, events) {
                Err(SubmitError::QueueFull {
                    records: back_records,
                    events: back_events,
                    ..
                }) => {
                    records = back_records;
                    events = back_events;
                    space.await;
                }
                other => return other,
            }
        }
    }

    /// Seals the batch being filled now instead of waiting for its age.
    pub fn flush(&self) {
        self.shared.state.lock().seal();
        self.shared.work.notify_one();
    }

    pub fn stats(&self) -> PipelineStats {
        let state = self.shared.state.lock();
        let mut stats = state.stats.clone();
        stats.queued_batches = state.queue.len();
        stats.open_items = state.open_len();
        stats
    }

    /// For readiness: the backend's own probe, and unhealthy as well after
    /// `unhealthy_after_failures` failed attempts in a row.
    pub async fn health(&self) -> Health {
        let probe = self.shared.exporter.health().await;
        if !probe.is_healthy() {
            return probe;
        }
        let stats = self.stats();
        if stats.consecutive_failures >= self.shared.config.unhealthy_after_failures.max(1) {
            return Health::unhealthy(format!(
                "{} consecutive {} export attempts failed; last error: {}",
                stats.consecutive_failures,
                self.shared.exporter.name(),
                stats.last_error.as_deref().unwrap_or("unknown"),
            ));
        }
        Health::Healthy
    }

    /// Stops accepting items, exports what is queued for at most `grace`,
    /// then stops the worker (an export in flight is abandoned; the batch
    /// was not acknowledged, so nothing is recorded as done).
    pub async fn shutdown(&self, grace: Duration) -> ShutdownReport {
        {
            let mut state = self.shared.state.lock();
            state.closing = true;
            state.seal();
        }
        self.shared.work.notify_one();
        let worker = self.worker.lock().take();
        if let Some(mut worker) = worker
            && tokio::time::timeout(grace, &mut worker).await.is_err()
        {
            self.shared.abort.send_replace(true);
            let _ = worker.await;
        }
        let state = self.shared.state.lock();
        let pending_items: usize = state.queue.iter().map(|batch| batch.len()).sum();
        ShutdownReport {
            drained: state.queue.is_empty(),
            pending_batches: state.queue.len(),
            pending_items,
        }
    }
}

async fn run_worker<E: Exporter>(shared: Arc<Shared<E>>) {
    let mut abort = shared.abort.subscribe();
    while let Some(batch) = next_batch(&shared, &mut abort).await {
        if !export_with_retries(&shared, &batch, &mut abort).await {
            return;
        }
    }
}

/// The batch at the head of the queue, sealing the open batch when it is
/// old enough; `None` once closing with nothing left, or on abort.
async fn next_batch<E: Exporter>(
    shared: &Shared<E>,
    abort: &mut watch::Receiver<bool>,
) -> Option<Arc<Batch>> {
    loop {
        let work = shared.work.notified();
        tokio::pin!(work);
        work.as_mut().enable();
        let seal_at = {
            let mut state = shared.state.lock();
            if let Some(front) = state.queue.front() {
                return Some(Arc::clone(front));
            }
            let age_reached = state
                .open_since
                .is_some_and(|since| since.elapsed() >= shared.config.max_batch_age);
            if state.open_len() > 0 && (state.closing || age_reached) {
                state.seal();
                continue;
            }
            if state.closing {
                return None;
            }
            state
                .open_since
                .map(|since| since + shared.config.max_batch_age)
        };
        tokio::select! {
            _ = &mut work => {}
            _ = sleep_until_or_forever(seal_at) => {}
            _ = abort.wait_for(|aborted| *aborted) => return None,
        }
    }
}

async fn sleep_until_or_forever(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Exports `batch` until it succeeds, fails permanently or runs out of
/// attempts, then removes it from the queue. Returns false on abort (the
/// batch stays queued).
async fn export_with_retries<E: Exporter>(
    shared: &Shared<E>,
    batch: &Arc<Batch>,
    abort: &mut watch::Receiver<bool>,
) -> bool {
    let exporter = &shared.exporter;
    let policy = shared.config.retry;
    let mut failures: u32 = 0;
    loop {
        let result = tokio::select! {
            result = exporter.export(batch) => result,
            _ = abort.wait_for(|aborted| *aborted) => return false,
        };
        let error = match result {
            Ok(()) => {
                finish(shared, batch, |stats| {
                    stats.batches_exported += 1;
                    stats.records_exported += batch.records.len() as u64;
                    stats.events_exported += batch.events.len() as u64;
                    stats.consecutive_failures = 0;
                    stats.last_success = Some(Timestamp::now());
                });
                if failures > 0 {
                    tracing::info!(exporter = exporter.name(), batch = %batch.id, failures, "export recovered");
                }
                return true;
            }
            Err(error) => error,
        };
        failures = failures.saturating_add(1);
        if error.is_permanent() {
            tracing::error!(
                exporter = exporter.name(),
                batch = %batch.id,
                records = batch.records.len(),
                events = batch.events.len(),
                error = %error,
                "export rejected permanently; batch dropped"
            );
            finish(shared, batch, |stats| {
                stats.permanent_failures += 1;
                stats.dropped_items += batch.len() as u64;
                stats.last_error = Some(error.to_string());
            });
            return true;
        }
        let exhausted = policy.max_attempts.is_some_and(|max| failures >= max);
        if exhausted {
            tracing::error!(
                exporter = exporter.name(),
                batch = %batch.id,
                attempts = failures,
                error = %error,
                "export failed on every attempt; batch dropped"
            );
            finish(shared, batch, |stats| {
                stats.dropped_after_retries += 1;
                stats.dropped_items += batch.len() as u64;
                stats.consecutive_failures = stats.consecutive_failures.saturating_add(1);
                stats.last_error = Some(error.to_string());
            });
            return true;
        }
        record_retry(shared, &error);
        let jitter: f64 = rand::rng().random();
        let delay = backoff_delay(&policy, failures, error.retry_after(), jitter);
        // One warning per outage, not one per attempt.
        if failures == 1 {
            tracing::warn!(exporter = exporter.name(), batch = %batch.id, error = %error, retry_in = ?delay, "export failed; retrying");
        } else {
            tracing::debug!(exporter = exporter.name(), batch = %batch.id, failures, error = %error, retry_in = ?delay, "export still failing");
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = abort.wait_for(|aborted| *aborted) => return false,
        }
    }
}

fn record_retry<E: Exporter>(shared: &Shared<E>, error: &ExportError) {
    let mut state = shared.state.lock();
    state.stats.retries += 1;
    state.stats.consecutive_failures = state.stats.consecutive_failures.saturating_add(1);
    state.stats.last_error = Some(error.to_string());
}

fn finish<E: Exporter>(
    shared: &Shared<E>,
    batch: &Arc<Batch>,
    update: impl FnOnce(&mut PipelineStats),
) {
    {
        let mut state = shared.state.lock();
        if state
            .queue
            .front()
            .is_some_and(|front| Arc::ptr_eq(front, batch))
        {
            state.queue.pop_front();
        }
        update(&mut state.stats);
    }
    shared.space.notify_waiters();
}
