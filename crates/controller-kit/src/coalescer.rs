//! A per-key status coalescer in front of a work queue.
//!
//! Status writes are expensive and bursty (one rack change can dirty an inventory
//! thousands of times). The coalescer turns a burst of `dirty` notifications for one
//! key into one queue add, dispatched at
//! `min(last change + debounce, first change of the burst + progress interval)`:
//! quiet keys settle after the debounce, and a key that never goes quiet is still
//! dispatched once per progress interval.
//!
//! The worker reports `start` and `finish` so that a change arriving while the key is
//! processed is delivered after a successful finish, and a failed attempt keeps its
//! changes for the rate-limited retry, which the queue owns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::ConfigError;
use crate::queue::{QueueKey, WorkQueue};

/// Upstream's defaults: 100 ms quiet period, dispatch at least once a second.
pub const DEFAULT_STATUS_DEBOUNCE: Duration = Duration::from_millis(100);
/// See [`DEFAULT_STATUS_DEBOUNCE`].
pub const DEFAULT_STATUS_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);
/// The progress interval used when none is configured and the debounce is shorter.
const MIN_IMPLIED_PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// Timing of a [`Coalescer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoalescerConfig {
    /// Quiet period after the last change; zero makes every change a plain queue add.
    pub debounce: Duration,
    /// Longest a continuously changing key waits; zero means `max(1 s, debounce)`.
    pub progress_interval: Duration,
}

impl Default for CoalescerConfig {
    fn default() -> Self {
        Self {
            debounce: DEFAULT_STATUS_DEBOUNCE,
            progress_interval: DEFAULT_STATUS_PROGRESS_INTERVAL,
        }
    }
}

impl CoalescerConfig {
    /// The progress interval in force: the configured one, or `max(1 s, debounce)` for zero.
    pub fn effective_progress_interval(&self) -> Duration {
        if self.progress_interval.is_zero() {
            self.debounce.max(MIN_IMPLIED_PROGRESS_INTERVAL)
        } else {
            self.progress_interval
        }
    }

    /// Rejects a progress interval shorter than the debounce (it would never let a burst settle).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.debounce.is_zero() && self.effective_progress_interval() < self.debounce {
            return Err(ConfigError::invalid(
                "status progress interval",
                "must not be shorter than status debounce",
            ));
        }
        Ok(())
    }
}

/// The coalescer was shut down; the change was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("status coalescer is shut down; the change was dropped")]
pub struct CoalescerShutDown;

/// Coalesces changes per key in front of a [`WorkQueue`]. Cheap to clone.
pub struct Coalescer<K: QueueKey> {
    shared: Arc<Shared<K>>,
}

impl<K: QueueKey> Clone for Coalescer<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

struct Shared<K: QueueKey> {
    queue: WorkQueue<K>,
    debounce: Duration,
    progress_interval: Duration,
    state: Mutex<State<K>>,
}

struct State<K> {
    keys: HashMap<K, KeyState>,
    shut_down: bool,
    /// Timers started so far (observable so tests can show a burst uses one timer).
    timers_started: u64,
    next_timer_id: u64,
}

#[derive(Default)]
struct KeyState {
    dirty: bool,
    queued: bool,
    in_flight: bool,
    retry_pending: bool,
    burst_start: Option<Instant>,
    last_dirty: Option<Instant>,
    timer: Option<ArmedTimer>,
}

struct ArmedTimer {
    id: u64,
    abort: AbortHandle,
}

impl KeyState {
    fn idle(&self) -> bool {
        !self.queued && !self.in_flight && !self.retry_pending
    }

    fn deadline(&self, debounce: Duration, progress: Duration) -> Option<Instant> {
        let by_quiet = self.last_dirty? + debounce;
        let by_progress = self.burst_start? + progress;
        Some(by_quiet.min(by_progress))
    }
}

impl<K: QueueKey> Coalescer<K> {
    /// A coalescer adding to `queue`; fails on an invalid configuration.
    pub fn new(queue: WorkQueue<K>, config: &CoalescerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            shared: Arc::new(Shared {
                queue,
                debounce: config.debounce,
                progress_interval: config.effective_progress_interval(),
                state: Mutex::new(State {
                    keys: HashMap::new(),
                    shut_down: false,
                    timers_started: 0,
                    next_timer_id: 0,
                }),
            }),
        })
    }

    /// The queue this coalescer feeds.
    pub fn queue(&self) -> &WorkQueue<K> {
        &self.shared.queue
    }

    /// Records a change of `key`; it is dispatched once the burst settles or ages out.
    pub fn dirty(&self, key: K) -> Result<(), CoalescerShutDown> {
        let shared = &self.shared;
        let mut state = shared.state.lock();
        if state.shut_down {
            return Err(CoalescerShutDown);
        }
        if shared.debounce.is_zero() {
            drop(state);
            shared.queue.add(key);
            return Ok(());
        }
        let now = Instant::now();
        let entry = state.keys.entry(key.clone()).or_default();
        if !entry.dirty {
            entry.dirty = true;
            entry.burst_start = Some(now);
        }
        entry.last_dirty = Some(now);
        let needs_timer = entry.idle() && entry.timer.is_none();
        if needs_timer {
            Shared::arm_timer(shared, &mut state, key);
        }
        // An armed timer re-reads the deadline when it wakes, so moving `last_dirty`
        // reschedules it without starting another timer.
        Ok(())
    }

    /// The worker took `key` from the queue.
    pub fn start(&self, key: &K) {
        if self.shared.debounce.is_zero() {
            return;
        }
        let mut state = self.shared.state.lock();
        let entry = state.keys.entry(key.clone()).or_default();
        entry.in_flight = true;
        entry.queued = false;
        entry.retry_pending = false;
    }

    /// The worker finished `key`. After a failure the caller re-adds the key rate-limited;
    /// the changes stay pending until an attempt succeeds.
    pub fn finish(&self, key: &K, succeeded: bool) {
        if self.shared.debounce.is_zero() {
            return;
        }
        let shared = &self.shared;
        let mut state = shared.state.lock();
        let Some(entry) = state.keys.get_mut(key) else {
            return;
        };
        entry.in_flight = false;
        if !succeeded {
            entry.retry_pending = true;
            return;
        }
        if !entry.dirty {
            state.keys.remove(key);
            return;
        }
        if entry.timer.is_none() && !state.shut_down {
            Shared::arm_timer(shared, &mut state, key.clone());
        }
    }

    /// Cancels every timer and rejects later changes; nothing is queued after this returns.
    pub fn shutdown(&self) {
        let mut state = self.shared.state.lock();
        state.shut_down = true;
        for key_state in state.keys.values_mut() {
            if let Some(timer) = key_state.timer.take() {
                timer.abort.abort();
            }
        }
    }

    /// Timers started since creation; one burst of changes starts exactly one.
    pub fn timers_started(&self) -> u64 {
        self.shared.state.lock().timers_started
    }

    /// Keys with a pending change, a queued dispatch, or work in flight.
    pub fn tracked_keys(&self) -> usize {
        self.shared.state.lock().keys.len()
    }
}

impl<K: QueueKey> Shared<K> {
    fn arm_timer(shared: &Arc<Self>, state: &mut State<K>, key: K) {
        let id = state.next_timer_id;
        state.next_timer_id += 1;
        state.timers_started += 1;
        let weak = Arc::downgrade(shared);
        let timer_key = key.clone();
        let task = tokio::spawn(async move {
            loop {
                let Some(shared) = weak.upgrade() else { return };
                let Some(deadline) = shared.timer_deadline(&timer_key, id) else {
                    return;
                };
                drop(shared);
                tokio::time::sleep_until(deadline).await;
                let Some(shared) = weak.upgrade() else { return };
                if shared.fire(&timer_key, id) {
                    return;
                }
            }
        });
        if let Some(entry) = state.keys.get_mut(&key) {
            entry.timer = Some(ArmedTimer {
                id,
                abort: task.abort_handle(),
            });
        }
    }

    /// The deadline the timer `id` of `key` sleeps towards, or `None` if it is stale.
    fn timer_deadline(&self, key: &K, id: u64) -> Option<Instant> {
        let state = self.state.lock();
        let entry = state.keys.get(key)?;
        if entry.timer.as_ref().map(|timer| timer.id) != Some(id) {
            return None;
        }
        entry.deadline(self.debounce, self.progress_interval)
    }

    /// Dispatches `key` if its deadline has come; returns whether the timer is finished.
    fn fire(&self, key: &K, id: u64) -> bool {
        let mut state = self.state.lock();
        if state.shut_down {
            return true;
        }
        let Some(entry) = state.keys.get_mut(key) else {
            return true;
        };
        if entry.timer.as_ref().map(|timer| timer.id) != Some(id) {
            return true;
        }
        let due = entry
            .deadline(self.debounce, self.progress_interval)
            .is_none_or(|deadline| deadline <= Instant::now());
        if !due {
            // A change moved the quiet deadline; sleep again.
            return false;
        }
        entry.timer = None;
        if entry.dirty && entry.idle() {
            entry.dirty = false;
            entry.queued = true;
            entry.burst_start = None;
            entry.last_dirty = None;
            // Adding under the lock is the barrier `shutdown` relies on.
            self.queue.add(key.clone());
        } else if !entry.dirty && entry.idle() {
            state.keys.remove(key);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(debounce_ms: u64, progress_ms: u64) -> CoalescerConfig {
        CoalescerConfig {
            debounce: Duration::from_millis(debounce_ms),
            progress_interval: Duration::from_millis(progress_ms),
        }
    }

    fn coalescer(debounce_ms: u64, progress_ms: u64) -> Coalescer<String> {
        Coalescer::new(WorkQueue::new("status"), &config(debounce_ms, progress_ms)).unwrap()
    }

    /// Takes what is queued right now without waiting.
    async fn drain_ready(queue: &WorkQueue<String>) -> Vec<String> {
        let mut keys = Vec::new();
        while let Ok(Some(key)) = tokio::time::timeout(Duration::ZERO, queue.get()).await {
            keys.push(key);
        }
        keys
    }

    #[tokio::test(start_paused = true)]
    async fn a_hundred_thousand_changes_of_one_key_give_one_timer_and_one_dispatch() {
        let coalescer = coalescer(100, 1000);
        let start = Instant::now();
        for _ in 0..100_000 {
            coalescer.dirty("inventory-a".to_string()).unwrap();
        }
        assert_eq!(coalescer.timers_started(), 1);
        let queue = coalescer.queue().clone();
        assert_eq!(queue.get().await.as_deref(), Some("inventory-a"));
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(100),
            "dispatched after the debounce"
        );
        queue.done(&"inventory-a".to_string());
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(drain_ready(&queue).await.is_empty(), "exactly one dispatch");
    }

    #[tokio::test(start_paused = true)]
    async fn a_continuous_stream_is_dispatched_once_per_progress_interval() {
        // As upstream's test: a change every debounce/2, progress = 4 x debounce.
        let coalescer = coalescer(100, 400);
        let queue = coalescer.queue().clone();
        let start = Instant::now();
        let dispatch_times = Arc::new(Mutex::new(Vec::new()));
        let worker = {
            let (coalescer, queue, times) = (
                coalescer.clone(),
                queue.clone(),
                Arc::clone(&dispatch_times),
            );
            tokio::spawn(async move {
                while let Some(key) = queue.get().await {
                    times.lock().push(start.elapsed());
                    coalescer.start(&key);
                    coalescer.finish(&key, true);
                    queue.done(&key);
                }
            })
        };
        for _ in 0..40 {
            coalescer.dirty("k".to_string()).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let during_stream: Vec<Duration> = dispatch_times
            .lock()
            .iter()
            .copied()
            .filter(|at| *at < Duration::from_millis(2000))
            .collect();
        queue.shut_down();
        worker.await.unwrap();
        // Without the progress bound the key would never be quiet for 100 ms and never go out.
        assert_eq!(
            during_stream.first(),
            Some(&Duration::from_millis(400)),
            "{during_stream:?}"
        );
        assert!((4..=5).contains(&during_stream.len()), "{during_stream:?}");
        for pair in during_stream.windows(2) {
            let gap = pair[1] - pair[0];
            // A change landing at the dispatch instant may open the next burst 50 ms later.
            assert!(
                gap >= Duration::from_millis(400) && gap <= Duration::from_millis(450),
                "gap {gap:?} is not one progress interval: {during_stream:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_during_processing_is_delivered_after_a_successful_finish() {
        let coalescer = coalescer(100, 1000);
        let queue = coalescer.queue().clone();
        coalescer.dirty("k".to_string()).unwrap();
        let key = queue.get().await.unwrap();
        coalescer.start(&key);
        coalescer.dirty("k".to_string()).unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            drain_ready(&queue).await.is_empty(),
            "nothing is dispatched while in flight"
        );
        coalescer.finish(&key, true);
        queue.done(&key);
        let start = Instant::now();
        assert_eq!(queue.get().await.as_deref(), Some("k"));
        // The change is older than the progress interval by now, so it goes out at once.
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn changes_during_a_failed_attempt_arrive_after_the_retry_succeeds() {
        let coalescer = coalescer(100, 1000);
        let queue = coalescer.queue().clone();
        coalescer.dirty("k".to_string()).unwrap();
        let key = queue.get().await.unwrap();
        coalescer.start(&key);
        coalescer.dirty("k".to_string()).unwrap();
        coalescer.finish(&key, false);
        queue.add_rate_limited(key.clone());
        queue.done(&key);
        // Only the rate-limited retry runs: the coalescer starts no timer while it is pending.
        let retry = queue.get().await.unwrap();
        coalescer.start(&retry);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(drain_ready(&queue).await.is_empty());
        coalescer.finish(&retry, true);
        queue.forget(&retry);
        queue.done(&retry);
        assert_eq!(
            queue.get().await.as_deref(),
            Some("k"),
            "the change made during the failure"
        );
        coalescer.start(&retry);
        coalescer.finish(&retry, true);
        queue.done(&retry);
        assert_eq!(coalescer.tracked_keys(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_are_coalesced_independently() {
        let coalescer = coalescer(100, 1000);
        let queue = coalescer.queue().clone();
        let start = Instant::now();
        coalescer.dirty("a".to_string()).unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await;
        coalescer.dirty("b".to_string()).unwrap();
        assert_eq!(queue.get().await.as_deref(), Some("a"));
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert_eq!(queue.get().await.as_deref(), Some("b"));
        assert_eq!(start.elapsed(), Duration::from_millis(160));
        assert_eq!(coalescer.timers_started(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn zero_debounce_is_a_plain_queue_add() {
        let coalescer = coalescer(0, 0);
        let queue = coalescer.queue().clone();
        coalescer.dirty("k".to_string()).unwrap();
        coalescer.dirty("k".to_string()).unwrap();
        assert_eq!(queue.len(), 1, "the queue's own de-duplication applies");
        assert_eq!(coalescer.timers_started(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_cancels_timers_and_rejects_later_changes() {
        let coalescer = coalescer(100, 1000);
        let queue = coalescer.queue().clone();
        coalescer.dirty("k".to_string()).unwrap();
        coalescer.shutdown();
        assert_eq!(coalescer.dirty("j".to_string()), Err(CoalescerShutDown));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(drain_ready(&queue).await.is_empty());
    }

    #[test]
    fn zero_progress_means_the_longer_of_one_second_and_the_debounce() {
        assert_eq!(
            config(100, 0).effective_progress_interval(),
            Duration::from_secs(1)
        );
        assert_eq!(
            config(3000, 0).effective_progress_interval(),
            Duration::from_secs(3)
        );
        assert_eq!(
            config(100, 250).effective_progress_interval(),
            Duration::from_millis(250)
        );
    }

    #[test]
    fn a_progress_interval_shorter_than_the_debounce_is_rejected() {
        let error = config(500, 200).validate().unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid status progress interval: must not be shorter than status debounce"
        );
        assert!(config(500, 500).validate().is_ok());
        assert!(config(0, 0).validate().is_ok());
        assert!(config(2000, 0).validate().is_ok());
    }
}
