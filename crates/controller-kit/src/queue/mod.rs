//! A rate-limited, delaying work queue with client-go's semantics.
//!
//! * A key is queued at most once, however often it is added.
//! * A key handed to a worker (between `get` and `done`) is never handed to another
//!   worker; if it is added meanwhile it is queued again when `done` is called.
//! * `add_after` delays an add; `add_rate_limited` delays it by the rate limiter.
//! * After `shut_down`, adds are ignored and `get` returns the keys still queued, then `None`.

pub mod metrics;
pub mod rate_limiter;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use metrics::QueueMetrics;
pub use metrics::WorkQueueMetrics;
pub use rate_limiter::{
    ExponentialFailureRateLimiter, MaxOfRateLimiter, RateLimiter, RateLimiterConfig,
    TokenBucketRateLimiter, default_controller_rate_limiter,
};

/// What a queue key must be: cheap to clone, hashable, printable for logs.
pub trait QueueKey: Clone + Eq + Hash + Debug + Send + Sync + 'static {}
impl<T: Clone + Eq + Hash + Debug + Send + Sync + 'static> QueueKey for T {}

/// How often the in-progress gauges (unfinished work, longest running) are refreshed.
const IN_PROGRESS_METRICS_PERIOD: Duration = Duration::from_millis(500);

/// A cloneable handle to one work queue; all clones share the queue.
pub struct WorkQueue<K: QueueKey> {
    shared: Arc<Shared<K>>,
}

impl<K: QueueKey> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K: QueueKey> Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

struct Shared<K: QueueKey> {
    name: String,
    state: Mutex<State<K>>,
    /// Wakes one `get` per queued key, and every `get` on shutdown.
    key_available: Notify,
    /// Wakes the delay timer when an earlier deadline arrives or on shutdown.
    timer_wakeup: Arc<Notify>,
    /// Wakes `shut_down_with_drain` when the last in-flight key is done.
    drained: Notify,
    rate_limiter: Arc<dyn RateLimiter<K>>,
    metrics: QueueMetrics,
    /// Stops the delay timer task once the last handle is gone.
    _stop_timer: DropGuard,
}

struct State<K> {
    queue: VecDeque<K>,
    /// Keys that need processing: queued, or re-added while in flight.
    dirty: HashSet<K>,
    /// Keys handed to a worker, with the time they were handed out.
    processing: HashMap<K, Instant>,
    /// When each queued key was first added (for the queue-duration metric).
    added_at: HashMap<K, Instant>,
    shutting_down: bool,
    delayed: DelayedKeys<K>,
}

/// Keys waiting for `add_after`; one entry per key, the earliest deadline wins.
struct DelayedKeys<K> {
    deadlines: BinaryHeap<Reverse<(Instant, u64)>>,
    by_sequence: HashMap<u64, K>,
    by_key: HashMap<K, (Instant, u64)>,
    next_sequence: u64,
}

impl<K: QueueKey> DelayedKeys<K> {
    fn new() -> Self {
        Self {
            deadlines: BinaryHeap::new(),
            by_sequence: HashMap::new(),
            by_key: HashMap::new(),
            next_sequence: 0,
        }
    }

    /// Records `key` as due at `ready_at`; returns true when this is a new earliest deadline.
    fn insert(&mut self, key: K, ready_at: Instant) -> bool {
        if let Some((existing, sequence)) = self.by_key.get(&key) {
            if *existing <= ready_at {
                return false;
            }
            // The heap entry of the later deadline becomes stale and is skipped on pop.
            self.by_sequence.remove(sequence);
        }
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let earliest = self.next_deadline().is_none_or(|next| ready_at < next);
        self.deadlines.push(Reverse((ready_at, sequence)));
        self.by_sequence.insert(sequence, key.clone());
        self.by_key.insert(key, (ready_at, sequence));
        earliest
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.peek().map(|Reverse((at, _))| *at)
    }

    fn pop_due(&mut self, now: Instant) -> Vec<K> {
        let mut due = Vec::new();
        while let Some(Reverse((at, sequence))) = self.deadlines.peek().copied() {
            if at > now {
                break;
            }
            self.deadlines.pop();
            if let Some(key) = self.by_sequence.remove(&sequence) {
                self.by_key.remove(&key);
                due.push(key);
            }
        }
        due
    }

    fn len(&self) -> usize {
        self.by_key.len()
    }
}

/// Builds a [`WorkQueue`].
pub struct WorkQueueBuilder<K: QueueKey> {
    name: String,
    rate_limiter: Option<Arc<dyn RateLimiter<K>>>,
    metrics: WorkQueueMetrics,
}

impl<K: QueueKey> WorkQueueBuilder<K> {
    /// Uses `rate_limiter` for `add_rate_limited` instead of the default controller limiter.
    pub fn rate_limiter(mut self, rate_limiter: Arc<dyn RateLimiter<K>>) -> Self {
        self.rate_limiter = Some(rate_limiter);
        self
    }

    /// Reports into `metrics` under this queue's name.
    pub fn metrics(mut self, metrics: &WorkQueueMetrics) -> Self {
        self.metrics = metrics.clone();
        self
    }

    /// Creates the queue. Must be called inside a tokio runtime (it starts the delay timer).
    pub fn build(self) -> WorkQueue<K> {
        let stop_timer = CancellationToken::new();
        let timer_wakeup = Arc::new(Notify::new());
        let metrics = self.metrics.for_queue(&self.name);
        let shared = Arc::new(Shared {
            name: self.name,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashMap::new(),
                added_at: HashMap::new(),
                shutting_down: false,
                delayed: DelayedKeys::new(),
            }),
            key_available: Notify::new(),
            timer_wakeup: Arc::clone(&timer_wakeup),
            drained: Notify::new(),
            rate_limiter: self
                .rate_limiter
                .unwrap_or_else(default_controller_rate_limiter),
            metrics,
            _stop_timer: stop_timer.clone().drop_guard(),
        });
        tokio::spawn(run_delay_timer(
            Arc::downgrade(&shared),
            timer_wakeup,
            stop_timer,
        ));
        WorkQueue { shared }
    }
}

/// Moves delayed keys into the queue when they are due, and refreshes in-progress gauges.
async fn run_delay_timer<K: QueueKey>(
    shared: std::sync::Weak<Shared<K>>,
    wakeup: Arc<Notify>,
    stop: CancellationToken,
) {
    let mut next_metrics_update = Instant::now();
    loop {
        // Hold the queue only while working on it, so dropping every handle ends this task.
        let next_deadline = {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let now = Instant::now();
            let mut next = {
                let mut state = shared.state.lock();
                if state.shutting_down {
                    return;
                }
                // Pop and queue under one lock, so no observer sees a key in neither place.
                let mut queued_any = false;
                for key in state.delayed.pop_due(now) {
                    queued_any |= shared.add_locked(&mut state, key);
                }
                if queued_any {
                    shared.key_available.notify_one();
                }
                state.delayed.next_deadline()
            };
            if shared.metrics.exposed {
                if now >= next_metrics_update {
                    shared.update_in_progress_metrics(now);
                    next_metrics_update = now + IN_PROGRESS_METRICS_PERIOD;
                }
                next = Some(next.map_or(next_metrics_update, |at| at.min(next_metrics_update)));
            }
            next
        };
        let sleep = async {
            match next_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = wakeup.notified() => {}
            () = sleep => {}
        }
    }
}

impl<K: QueueKey> WorkQueue<K> {
    /// Starts building a queue called `name` (the metrics' `name` label).
    pub fn builder(name: impl Into<String>) -> WorkQueueBuilder<K> {
        WorkQueueBuilder {
            name: name.into(),
            rate_limiter: None,
            metrics: WorkQueueMetrics::default(),
        }
    }

    /// A queue with the default controller rate limiter and unexposed metrics.
    pub fn new(name: impl Into<String>) -> Self {
        Self::builder(name).build()
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Where the worker loop over this queue counts failed reconciles.
    pub(crate) fn reconcile_metrics(&self) -> &crate::metrics::ReconcileMetrics {
        &self.shared.metrics.reconcile
    }

    /// Queues `key` unless it is already queued; a key in flight is queued again after `done`.
    pub fn add(&self, key: K) {
        self.shared.add(key);
    }

    /// Queues `key` after `delay` (at once when `delay` is zero).
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let mut state = self.shared.state.lock();
        if state.shutting_down {
            return;
        }
        if state.delayed.insert(key, Instant::now() + delay) {
            self.shared.timer_wakeup.notify_one();
        }
    }

    /// Queues `key` after the delay the rate limiter chooses for it.
    pub fn add_rate_limited(&self, key: K) {
        let delay = self.shared.rate_limiter.when(&key);
        self.shared.metrics.retries.inc();
        self.add_after(key, delay);
    }

    /// Stops rate-limiting `key` (its failure history is cleared). Call after a success.
    pub fn forget(&self, key: &K) {
        self.shared.rate_limiter.forget(key);
    }

    /// How many times `key` has been rate-limited since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.shared.rate_limiter.num_requeues(key)
    }

    /// Waits for the next key. `None` means the queue is shut down and empty.
    ///
    /// The caller owns the key until it calls [`WorkQueue::done`] with it.
    pub async fn get(&self) -> Option<K> {
        loop {
            let notified = self.shared.key_available.notified();
            tokio::pin!(notified);
            // Register interest before looking, so a shutdown between look and wait is seen.
            notified.as_mut().enable();
            {
                let mut state = self.shared.state.lock();
                if let Some(key) = state.queue.pop_front() {
                    let now = Instant::now();
                    state.dirty.remove(&key);
                    state.processing.insert(key.clone(), now);
                    if let Some(added) = state.added_at.remove(&key) {
                        self.shared
                            .metrics
                            .queue_duration
                            .observe(now.saturating_duration_since(added).as_secs_f64());
                    }
                    self.shared.metrics.depth.set(state.queue.len() as i64);
                    let more = !state.queue.is_empty();
                    drop(state);
                    if more {
                        // Pass the wakeup on: one notification may have covered several adds.
                        self.shared.key_available.notify_one();
                    }
                    return Some(key);
                }
                if state.shutting_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks `key` as processed; if it was added while in flight it is queued again.
    pub fn done(&self, key: &K) {
        let mut state = self.shared.state.lock();
        let Some(started) = state.processing.remove(key) else {
            return;
        };
        let now = Instant::now();
        self.shared
            .metrics
            .work_duration
            .observe(now.saturating_duration_since(started).as_secs_f64());
        if state.dirty.contains(key) {
            state.queue.push_back(key.clone());
            state.added_at.insert(key.clone(), now);
            self.shared.metrics.depth.set(state.queue.len() as i64);
            drop(state);
            self.shared.key_available.notify_one();
        } else if state.processing.is_empty() {
            drop(state);
            self.shared.drained.notify_waiters();
        }
    }

    /// Ignores later adds; workers still receive the keys already queued, then `None`.
    pub fn shut_down(&self) {
        self.shared.state.lock().shutting_down = true;
        self.shared.key_available.notify_waiters();
        self.shared.timer_wakeup.notify_one();
    }

    /// Like [`WorkQueue::shut_down`], then waits until every key handed out is `done`.
    pub async fn shut_down_with_drain(&self) {
        self.shut_down();
        loop {
            let drained = self.shared.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.shared.state.lock().processing.is_empty() {
                return;
            }
            drained.await;
        }
    }

    /// Whether `shut_down` was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.state.lock().shutting_down
    }

    /// Keys queued and ready for a worker.
    pub fn len(&self) -> usize {
        self.shared.state.lock().queue.len()
    }

    /// Whether no key is ready for a worker.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for an `add_after` or rate-limited delay.
    pub fn delayed_len(&self) -> usize {
        self.shared.state.lock().delayed.len()
    }

    /// Keys handed to workers and not yet done.
    pub fn in_flight(&self) -> usize {
        self.shared.state.lock().processing.len()
    }
}

impl<K: QueueKey> Shared<K> {
    fn add(&self, key: K) {
        let queued = self.add_locked(&mut self.state.lock(), key);
        if queued {
            self.key_available.notify_one();
        }
    }

    /// Records an add; returns whether the key became ready for a worker.
    fn add_locked(&self, state: &mut State<K>, key: K) -> bool {
        if state.shutting_down || state.dirty.contains(&key) {
            return false;
        }
        self.metrics.adds.inc();
        state.dirty.insert(key.clone());
        if state.processing.contains_key(&key) {
            // Re-queued by `done`, so a second worker never sees it concurrently.
            return false;
        }
        state.added_at.insert(key.clone(), Instant::now());
        state.queue.push_back(key);
        self.metrics.depth.set(state.queue.len() as i64);
        true
    }

    fn update_in_progress_metrics(&self, now: Instant) {
        let state = self.state.lock();
        let mut total = 0.0;
        let mut longest = 0.0f64;
        for started in state.processing.values() {
            let running = now.saturating_duration_since(*started).as_secs_f64();
            total += running;
            longest = longest.max(running);
        }
        self.metrics.unfinished_work.set(total);
        self.metrics.longest_running.set(longest);
    }
}

#[cfg(test)]
mod tests;
