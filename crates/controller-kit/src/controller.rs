//! A queue-driven controller that exists only while its replica leads.
//!
//! On promotion it creates its queue (and coalescer), attaches its handlers to the warm
//! caches (which replays every cached object, so work observed while standby is done)
//! and starts its workers. On demotion it detaches the handlers in reverse order,
//! shuts the queue down and waits for the workers. The caches are not touched.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::caches::{CachedObject, CachedStore, ObjectEvent};
use crate::coalescer::{Coalescer, CoalescerConfig, CoalescerShutDown};
use crate::error::ConfigError;
use crate::queue::{QueueKey, RateLimiterConfig, WorkQueue, WorkQueueMetrics};

/// What a successful reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing until the next change.
    AwaitChange,
    /// Reconcile again after this delay.
    RequeueAfter(Duration),
}

/// What the worker loop does with a key whose reconcile failed, decided by the failure
/// ([`ReconcileFailure::retry`]), as kube-runtime's `error_policy` decides it per error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// client-go's `AddRateLimited`: the key's failure count grows the delay (5 ms
    /// doubling up to 1000 s with the default limiter). For transient failures: the API
    /// server unavailable or throttling, a timeout, an exporter that is down.
    Backoff,
    /// Again after this fixed delay, outside the backoff; the failure count is kept. For
    /// an optimistic-concurrency conflict: the cache is behind, the watch event that
    /// brings it up to date queues the key by itself, and this delay is only the safety
    /// net, so it does not need to grow.
    After(Duration),
    /// Not retried, and the failure count is forgotten: the next change of the object
    /// (a watch event) queues the key again. For input that no retry can fix, such as an
    /// invalid spec or a queue key that names no object.
    AwaitChange,
}

/// A typed reconcile failure: each controller has its own error enum whose variants say
/// what failed, and this trait tells the worker loop how to count and retry each one.
pub trait ReconcileFailure: std::error::Error + Send + Sync + 'static {
    /// The `error` label of `reconcile_errors_total`: a short snake_case name from a
    /// small fixed set, never built from the object or the message (label cardinality).
    fn metric_label(&self) -> &'static str;

    /// How the key is retried; transient by default.
    fn retry(&self) -> Retry {
        Retry::Backoff
    }
}

/// A failure as the worker loop holds it, whatever the controller's error type.
type BoxedFailure = Box<dyn ReconcileFailure>;

type ReconcileFn<K> = Arc<
    dyn Fn(K, CancellationToken) -> BoxFuture<'static, Result<Action, BoxedFailure>> + Send + Sync,
>;

/// Boxes a typed reconcile function into the form the worker loop calls.
fn boxed<K, R, F, E>(reconcile: R) -> ReconcileFn<K>
where
    K: QueueKey,
    R: Fn(K, CancellationToken) -> F + Send + Sync + 'static,
    F: Future<Output = Result<Action, E>> + Send + 'static,
    E: ReconcileFailure,
{
    Arc::new(move |key, cancel| {
        reconcile(key, cancel)
            .map(|result| result.map_err(|error| Box::new(error) as BoxedFailure))
            .boxed()
    })
}

/// Records the object's UID on the reconcile span the worker loop opened for its key,
/// once the reconcile has read the object: every later log line of the pass names it.
pub fn record_uid(uid: &str) {
    tracing::Span::current().record("uid", uid);
}

/// Undoes one attachment of a handler to a cache.
type Detach = Box<dyn FnOnce() + Send>;
type Attach<K> = Box<dyn Fn(&Enqueue<K>) -> Detach + Send + Sync>;

/// Adds keys to a controller's queue, through its coalescer if it has one.
pub struct Enqueue<K: QueueKey> {
    queue: WorkQueue<K>,
    coalescer: Option<Coalescer<K>>,
}

impl<K: QueueKey> Clone for Enqueue<K> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            coalescer: self.coalescer.clone(),
        }
    }
}

impl<K: QueueKey> Enqueue<K> {
    /// Queues `key` (coalesced when the controller has a coalescer).
    pub fn add(&self, key: K) {
        match &self.coalescer {
            Some(coalescer) => {
                // After shutdown the change is dropped on purpose: a demoted replica does no work.
                let _: Result<(), CoalescerShutDown> = coalescer.dirty(key);
            }
            None => self.queue.add(key),
        }
    }

    /// Queues `key` after `delay`, bypassing the coalescer.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.queue.add_after(key, delay);
    }

    /// The queue itself.
    pub fn queue(&self) -> &WorkQueue<K> {
        &self.queue
    }
}

/// A controller: a queue of `K`, handlers that fill it from caches, and a reconcile function.
pub struct Controller<K: QueueKey> {
    name: String,
    workers: usize,
    rate_limiter: RateLimiterConfig,
    coalescer: Option<CoalescerConfig>,
    attachers: Vec<Attach<K>>,
    reconcile: ReconcileFn<K>,
}

impl<K: QueueKey> Controller<K> {
    /// A controller whose queue is called `name`, reconciling each key with `reconcile`.
    ///
    /// `reconcile` receives a token that is cancelled when leadership ends; long work
    /// should stop when it fires. Its error type decides how failures are retried.
    pub fn new<R, F, E>(name: impl Into<String>, reconcile: R) -> Self
    where
        R: Fn(K, CancellationToken) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Action, E>> + Send + 'static,
        E: ReconcileFailure,
    {
        Self {
            name: name.into(),
            workers: 1,
            rate_limiter: RateLimiterConfig::default(),
            coalescer: None,
            attachers: Vec::new(),
            reconcile: boxed(reconcile),
        }
    }

    /// Worker count (default 1).
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// Retry limiter settings (default: client-go's controller limiter).
    pub fn rate_limiter(mut self, config: RateLimiterConfig) -> Self {
        self.rate_limiter = config;
        self
    }

    /// Puts a status coalescer in front of the queue.
    pub fn coalesce(mut self, config: CoalescerConfig) -> Self {
        self.coalescer = Some(config);
        self
    }

    /// Routes changes of `store` to keys with `route` while leading.
    pub fn watches<S: CachedObject>(
        mut self,
        store: &CachedStore<S>,
        route: impl Fn(&ObjectEvent<S>, &Enqueue<K>) + Send + Sync + 'static,
    ) -> Self {
        let store = store.clone();
        let route = Arc::new(route);
        self.attachers.push(Box::new(move |enqueue: &Enqueue<K>| {
            let enqueue = enqueue.clone();
            let route = Arc::clone(&route);
            let id = store.attach(Arc::new(move |event: &ObjectEvent<S>| {
                route(event, &enqueue)
            }));
            let store = store.clone();
            Box::new(move || store.detach(id))
        }));
        self
    }

    /// The queue name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks worker count, limiter and coalescer settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.workers == 0 {
            return Err(ConfigError::invalid(
                format!("{} workers", self.name),
                "must be at least 1",
            ));
        }
        self.rate_limiter.validate()?;
        if let Some(coalescer) = &self.coalescer {
            coalescer.validate()?;
        }
        Ok(())
    }
}

/// Work that runs only while this replica leads; the manager starts and stops it.
pub trait LeaderWork: Send + Sync {
    /// Name for logs.
    fn name(&self) -> &str;
    /// Attaches and starts; `cancel` fires when leadership ends.
    fn start(
        &self,
        cancel: CancellationToken,
        metrics: &WorkQueueMetrics,
    ) -> Result<RunningWork, ConfigError>;
}

/// Called after each reconcile with the pool's name, how long it took and whether it
/// succeeded: for a controller that keeps its own reconcile metrics.
pub type ReconcileObserver = Arc<dyn Fn(&str, Duration, bool) + Send + Sync>;

/// Workers over one queue (and its coalescer, if any) for a [`RunningWork`]. Several
/// pools in one `RunningWork` let one leader term run queues that feed each other.
pub struct WorkerPool<K: QueueKey> {
    name: String,
    queue: WorkQueue<K>,
    coalescer: Option<Coalescer<K>>,
    reconcile: ReconcileFn<K>,
    observer: Option<ReconcileObserver>,
}

impl<K: QueueKey> WorkerPool<K> {
    /// Workers named `name` (in logs, spans, observations and the `controller` label of
    /// `reconcile_errors_total`) reconciling the keys of `queue`.
    pub fn new<R, F, E>(name: impl Into<String>, queue: WorkQueue<K>, reconcile: R) -> Self
    where
        R: Fn(K, CancellationToken) -> F + Send + Sync + 'static,
        F: Future<Output = Result<Action, E>> + Send + 'static,
        E: ReconcileFailure,
    {
        Self::from_fn(name, queue, boxed(reconcile))
    }

    fn from_fn(name: impl Into<String>, queue: WorkQueue<K>, reconcile: ReconcileFn<K>) -> Self {
        Self {
            name: name.into(),
            queue,
            coalescer: None,
            reconcile,
            observer: None,
        }
    }

    /// The coalescer in front of the queue: told when a key starts and finishes, so
    /// changes made meanwhile are delivered after a success.
    pub fn coalescer(mut self, coalescer: Coalescer<K>) -> Self {
        self.coalescer = Some(coalescer);
        self
    }

    /// Reports every reconcile to `observer`.
    pub fn observe(mut self, observer: ReconcileObserver) -> Self {
        self.observer = Some(observer);
        self
    }
}

/// Started leader work. [`RunningWork::drain`] detaches, shuts down and drains it;
/// dropping it (a term aborted midway) detaches and shuts down at once and aborts the
/// workers, so no handler, queue or worker outlives its term.
pub struct RunningWork {
    name: String,
    cancel: CancellationToken,
    detach: Vec<Detach>,
    shutdown: Vec<Box<dyn FnOnce() + Send>>,
    on_end: Vec<Box<dyn FnOnce() + Send>>,
    workers: JoinSet<()>,
}

impl RunningWork {
    /// Nothing running yet, for work named `name` whose leadership ends with `cancel`.
    pub fn new(name: impl Into<String>, cancel: CancellationToken) -> Self {
        Self {
            name: name.into(),
            cancel,
            detach: Vec::new(),
            shutdown: Vec::new(),
            on_end: Vec::new(),
            workers: JoinSet::new(),
        }
    }

    /// Undoes one handler attachment when the work stops (in reverse order of adding).
    pub fn on_detach(&mut self, detach: impl FnOnce() + Send + 'static) {
        self.detach.push(Box::new(detach));
    }

    /// Runs `f` once the work is over: drained, aborted or dropped.
    pub fn on_end(&mut self, f: impl FnOnce() + Send + 'static) {
        self.on_end.push(Box::new(f));
    }

    /// Starts `count` workers of `pool`; its coalescer and queue shut down when the
    /// work stops.
    pub fn spawn<K: QueueKey>(&mut self, pool: WorkerPool<K>, count: usize) {
        for _ in 0..count {
            self.workers
                .spawn(run_worker(pool.clone_handles(), self.cancel.clone()));
        }
        let WorkerPool {
            queue, coalescer, ..
        } = pool;
        self.shutdown.push(Box::new(move || {
            if let Some(coalescer) = &coalescer {
                coalescer.shutdown();
            }
            queue.shut_down();
        }));
    }

    /// Detaches the handlers in reverse order of attachment (no new work arrives).
    pub fn detach_handlers(&mut self) {
        while let Some(detach) = self.detach.pop() {
            detach();
        }
    }

    fn stop_intake(&mut self) {
        self.detach_handlers();
        for shutdown in self.shutdown.drain(..) {
            shutdown();
        }
    }

    /// Shuts the queues down and waits for the workers, at most `timeout`; workers still
    /// running then are aborted. Returns false if any had to be aborted.
    pub async fn drain(mut self, timeout: Duration) -> bool {
        self.stop_intake();
        let name = self.name.clone();
        let workers = &mut self.workers;
        let drained = tokio::time::timeout(timeout, async {
            while let Some(result) = workers.join_next().await {
                if let Err(error) = result {
                    tracing::error!(controller = %name, %error, "worker panicked");
                }
            }
        })
        .await
        .is_ok();
        if !drained {
            tracing::warn!(controller = %self.name, ?timeout, "workers did not drain in time; aborting them");
            self.workers.shutdown().await;
        }
        drained
    }
}

impl Drop for RunningWork {
    fn drop(&mut self) {
        self.stop_intake();
        // A no-op after a drain; otherwise the term was aborted and its workers go too.
        self.workers.abort_all();
        for f in self.on_end.drain(..) {
            f();
        }
    }
}

impl<K: QueueKey> WorkerPool<K> {
    fn clone_handles(&self) -> Self {
        Self {
            name: self.name.clone(),
            queue: self.queue.clone(),
            coalescer: self.coalescer.clone(),
            reconcile: Arc::clone(&self.reconcile),
            observer: self.observer.clone(),
        }
    }
}

impl<K: QueueKey> LeaderWork for Controller<K> {
    fn name(&self) -> &str {
        &self.name
    }

    fn start(
        &self,
        cancel: CancellationToken,
        metrics: &WorkQueueMetrics,
    ) -> Result<RunningWork, ConfigError> {
        self.validate()?;
        let queue: WorkQueue<K> = WorkQueue::builder(self.name.clone())
            .rate_limiter(self.rate_limiter.build())
            .metrics(metrics)
            .build();
        let mut pool = WorkerPool::from_fn(&self.name, queue.clone(), Arc::clone(&self.reconcile));
        if let Some(config) = &self.coalescer {
            pool = pool.coalescer(Coalescer::new(queue.clone(), config)?);
        }
        let enqueue = Enqueue {
            queue,
            coalescer: pool.coalescer.clone(),
        };
        let mut running = RunningWork::new(self.name.clone(), cancel);
        for attach in &self.attachers {
            running.detach.push(attach(&enqueue));
        }
        running.spawn(pool, self.workers);
        Ok(running)
    }
}

/// A key as log lines show it: a `namespace/name` or `name` string as it is (its
/// debug form would quote it, and JSON logs would escape the quotes), any other key
/// (Mokka's group and status keys) in its debug form.
fn key_text<K: QueueKey>(key: &K) -> String {
    match (key as &dyn std::any::Any).downcast_ref::<String>() {
        Some(text) => text.clone(),
        None => format!("{key:?}"),
    }
}

/// The one worker loop of every controller, as upstream Mokka runs each of its
/// controllers: get, reconcile, forget on success; on failure count it by its label and
/// retry as the failure asks ([`Retry`]), unless leadership or the queue is ending.
///
/// Each reconcile runs inside one span, `reconcile{controller, key, uid}`, so every log
/// line of the pass, the worker's own included, names the object; the reconcile fills
/// `uid` in with [`record_uid`] when it knows it.
async fn run_worker<K: QueueKey>(pool: WorkerPool<K>, cancel: CancellationToken) {
    let WorkerPool {
        name,
        queue,
        coalescer,
        reconcile,
        observer,
    } = pool;
    while let Some(key) = queue.get().await {
        if cancel.is_cancelled() {
            queue.forget(&key);
            queue.done(&key);
            break;
        }
        // At ERROR level so that a filter set to `warn` or `error` keeps it: a span
        // that is filtered out leaves its events without the key.
        let span = tracing::error_span!(
            "reconcile",
            controller = %name,
            key = %key_text(&key),
            uid = tracing::field::Empty,
        );
        if let Some(coalescer) = &coalescer {
            coalescer.start(&key);
        }
        let started = tokio::time::Instant::now();
        let result = reconcile(key.clone(), cancel.clone())
            .instrument(span.clone())
            .await;
        if let Some(observer) = &observer {
            observer(&name, started.elapsed(), result.is_ok());
        }
        let retry = result.as_ref().err().map(|error| error.retry());
        if let Some(coalescer) = &coalescer {
            // A failure that is not retried leaves nothing to wait for: changes made
            // during the pass are delivered as after a success.
            let settled = matches!(retry, None | Some(Retry::AwaitChange));
            coalescer.finish(&key, settled);
        }
        match result {
            Ok(action) => {
                queue.forget(&key);
                if let Action::RequeueAfter(delay) = action {
                    queue.add_after(key.clone(), delay);
                }
            }
            Err(error) => {
                let label = error.metric_label();
                queue.reconcile_metrics().failed(&name, label);
                let retry = error.retry();
                let ending = cancel.is_cancelled() || queue.is_shutting_down();
                match retry {
                    Retry::Backoff if !ending => queue.add_rate_limited(key.clone()),
                    Retry::After(delay) if !ending => queue.add_after(key.clone(), delay),
                    Retry::AwaitChange => queue.forget(&key),
                    Retry::Backoff | Retry::After(_) => {}
                }
                span.in_scope(|| match retry {
                    Retry::Backoff => tracing::error!(
                        error = %error,
                        error_kind = label,
                        ?retry,
                        "Controller reconciliation failed"
                    ),
                    Retry::After(_) | Retry::AwaitChange => tracing::warn!(
                        error = %error,
                        error_kind = label,
                        ?retry,
                        "Controller reconciliation failed"
                    ),
                });
            }
        }
        queue.done(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caches::{DetachedStore, StoreOptions};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;
    use kube::runtime::watcher::Event;
    use parking_lot::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The failures of the test controllers, one per retry decision.
    #[derive(Debug, thiserror::Error)]
    enum Failure {
        #[error("apiserver said 500")]
        Unavailable,
        #[error("the object changed under us")]
        Conflict,
        #[error("spec.replicas must not be negative")]
        Invalid,
    }

    impl ReconcileFailure for Failure {
        fn metric_label(&self) -> &'static str {
            match self {
                Failure::Unavailable => "unavailable",
                Failure::Conflict => "conflict",
                Failure::Invalid => "invalid_spec",
            }
        }

        fn retry(&self) -> Retry {
            match self {
                Failure::Unavailable => Retry::Backoff,
                Failure::Conflict => Retry::After(Duration::from_secs(1)),
                Failure::Invalid => Retry::AwaitChange,
            }
        }
    }

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("ns".to_string()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn name_of(event: &ObjectEvent<ConfigMap>) -> String {
        event.object().metadata.name.clone().unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn promotion_replays_the_cache_and_demotion_detaches_and_drains() {
        let mut store = DetachedStore::new("configmaps", StoreOptions::default());
        store.apply(Event::Apply(config_map("before-promotion")));
        let reconciled = Arc::new(Mutex::new(Vec::new()));
        let controller = {
            let reconciled = Arc::clone(&reconciled);
            Controller::new("configmaps", move |key: String, _cancel| {
                let reconciled = Arc::clone(&reconciled);
                async move {
                    reconciled.lock().push(key);
                    Ok::<_, Failure>(Action::AwaitChange)
                }
            })
            .workers(2)
            .watches(&store.reader(), |event, enqueue| {
                enqueue.add(name_of(event))
            })
        };
        let cancel = CancellationToken::new();
        let running = controller
            .start(cancel.clone(), &WorkQueueMetrics::default())
            .unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(*reconciled.lock(), vec!["before-promotion".to_string()]);

        store.apply(Event::Apply(config_map("while-leading")));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(reconciled.lock().len(), 2);

        cancel.cancel();
        assert!(running.drain(Duration::from_secs(5)).await);
        assert_eq!(store.reader().attached_handlers(), 0);
        store.apply(Event::Apply(config_map("after-demotion")));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            reconciled.lock().len(),
            2,
            "a demoted controller does no work"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_key_is_retried_with_backoff_and_forgotten_on_success() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let controller = {
            let attempts = Arc::clone(&attempts);
            Controller::new("flaky", move |_key: String, _cancel| {
                let attempt = attempts.fetch_add(1, Ordering::SeqCst);
                async move {
                    if attempt < 3 {
                        Err(Failure::Unavailable)
                    } else {
                        Ok::<_, Failure>(Action::AwaitChange)
                    }
                }
            })
        };
        let store: DetachedStore<ConfigMap> = DetachedStore::new("cms", StoreOptions::default());
        let controller = controller.watches(&store.reader(), |event, enqueue| {
            enqueue.add(name_of(event))
        });
        let mut store = store;
        let cancel = CancellationToken::new();
        let running = controller
            .start(cancel.clone(), &WorkQueueMetrics::default())
            .unwrap();
        let start = tokio::time::Instant::now();
        store.apply(Event::Apply(config_map("k")));
        while attempts.load(Ordering::SeqCst) < 4 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // 5 + 10 + 20 ms of backoff between the four attempts.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(35) && elapsed < Duration::from_millis(40),
            "{elapsed:?}"
        );
        tokio::time::sleep(Duration::from_secs(2000)).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 4, "no retry after success");
        cancel.cancel();
        running.drain(Duration::from_secs(1)).await;
    }

    /// A controller over a detached ConfigMap store whose reconcile of attempt `n`
    /// (counted from 0) returns `outcome(n)`.
    fn counting_controller(
        name: &str,
        store: &DetachedStore<ConfigMap>,
        outcome: impl Fn(usize) -> Result<Action, Failure> + Send + Sync + 'static,
    ) -> (Controller<String>, Arc<AtomicUsize>) {
        let attempts = Arc::new(AtomicUsize::new(0));
        let controller = {
            let attempts = Arc::clone(&attempts);
            Controller::new(name, move |_key: String, _cancel| {
                let result = outcome(attempts.fetch_add(1, Ordering::SeqCst));
                async move { result }
            })
            .watches(&store.reader(), |event, enqueue| {
                enqueue.add(name_of(event))
            })
        };
        (controller, attempts)
    }

    #[tokio::test(start_paused = true)]
    async fn a_conflict_is_retried_after_its_fixed_delay_instead_of_the_backoff() {
        let mut store = DetachedStore::new("cms", StoreOptions::default());
        let (controller, attempts) = counting_controller("conflicted", &store, |attempt| {
            if attempt < 2 {
                Err(Failure::Conflict)
            } else {
                Ok(Action::AwaitChange)
            }
        });
        let cancel = CancellationToken::new();
        let metrics = WorkQueueMetrics::default();
        let running = controller.start(cancel.clone(), &metrics).unwrap();
        let start = tokio::time::Instant::now();
        store.apply(Event::Apply(config_map("k")));
        while attempts.load(Ordering::SeqCst) < 3 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // Two fixed delays of 1 s; the backoff would have taken 5 + 10 ms.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_secs(2) && elapsed < Duration::from_millis(2010),
            "{elapsed:?}"
        );
        assert_eq!(metrics.reconcile().errors_of("conflicted", "conflict"), 2);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(attempts.load(Ordering::SeqCst), 3, "no retry after success");
        cancel.cancel();
        running.drain(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_invalid_spec_is_not_retried_until_the_object_changes() {
        let mut store = DetachedStore::new("cms", StoreOptions::default());
        let (controller, attempts) =
            counting_controller("validating", &store, |_| Err(Failure::Invalid));
        let cancel = CancellationToken::new();
        let metrics = WorkQueueMetrics::default();
        let running = controller.start(cancel.clone(), &metrics).unwrap();
        store.apply(Event::Apply(config_map("k")));
        // Longer than the whole backoff ladder of the default limiter.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            1,
            "never retried by itself"
        );
        assert_eq!(
            metrics.reconcile().errors_of("validating", "invalid_spec"),
            1
        );

        let mut changed = config_map("k");
        changed.data = Some([("replicas".to_string(), "1".to_string())].into());
        store.apply(Event::Apply(changed));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            2,
            "the change queues it again"
        );
        cancel.cancel();
        running.drain(Duration::from_secs(1)).await;
    }

    /// A log sink the test can read back.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn lines(&self) -> Vec<String> {
            String::from_utf8_lossy(&self.0.lock())
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_reconcile_is_counted_by_label_and_every_log_line_names_its_object_at_warn_level()
     {
        let captured = Captured::default();
        let subscriber = {
            let captured = captured.clone();
            tracing_subscriber::fmt()
                .with_writer(move || captured.clone())
                .with_ansi(false)
                // Only warnings and errors: the key must not depend on info being on.
                .with_max_level(tracing::Level::WARN)
                .finish()
        };
        // The runtime of this test is single-threaded, so the workers log here too.
        let _logging = tracing::subscriber::set_default(subscriber);

        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = WorkQueueMetrics::register(&mut registry);
        let mut store = DetachedStore::new("cms", StoreOptions::default());
        let controller = Controller::new("configmaps", |key: String, _cancel| async move {
            record_uid(&format!("uid-of-{key}"));
            tracing::warn!("read the object");
            Err::<Action, _>(Failure::Unavailable)
        })
        .watches(&store.reader(), |event, enqueue| {
            enqueue.add(name_of(event))
        });
        let cancel = CancellationToken::new();
        let running = controller.start(cancel.clone(), &metrics).unwrap();
        store.apply(Event::Apply(config_map("first")));
        store.apply(Event::Apply(config_map("second")));
        tokio::time::sleep(Duration::from_millis(1)).await;
        cancel.cancel();
        running.drain(Duration::from_secs(1)).await;

        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                r#"reconcile_errors_total{controller="configmaps",error="unavailable"} 2"#
            ),
            "{text}"
        );
        let lines = captured.lines();
        for name in ["first", "second"] {
            let about: Vec<&String> = lines
                .iter()
                .filter(|line| {
                    line.contains(&format!(
                        r#"reconcile{{controller=configmaps key={name} uid="uid-of-{name}"}}"#
                    ))
                })
                .collect();
            assert!(
                about.iter().any(|line| line.contains("read the object")),
                "{lines:#?}"
            );
            assert!(
                about.iter().any(|line| line.contains("ERROR")
                    && line.contains("Controller reconciliation failed")
                    && line.contains("error=apiserver said 500")
                    && line.contains("error_kind=\"unavailable\"")),
                "{lines:#?}"
            );
        }
        assert_eq!(
            lines
                .iter()
                .filter(|line| line.contains("reconcile{"))
                .count(),
            lines.len(),
            "no line outside a reconcile span: {lines:#?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_coalesced_controller_reconciles_a_burst_once() {
        let mut store = DetachedStore::new("cms", StoreOptions::default());
        let count = Arc::new(AtomicUsize::new(0));
        let controller = {
            let count = Arc::clone(&count);
            Controller::new("status", move |_key: String, _cancel| {
                count.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, Failure>(Action::AwaitChange) }
            })
            .coalesce(CoalescerConfig::default())
            .watches(&store.reader(), |_event, enqueue| {
                enqueue.add("inventory".to_string())
            })
        };
        let cancel = CancellationToken::new();
        let running = controller
            .start(cancel.clone(), &WorkQueueMetrics::default())
            .unwrap();
        for i in 0..1000 {
            store.apply(Event::Apply(config_map(&format!("cm-{i}"))));
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(count.load(Ordering::SeqCst), 1);
        cancel.cancel();
        running.drain(Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn drain_aborts_workers_that_overrun_the_timeout() {
        let mut store = DetachedStore::new("cms", StoreOptions::default());
        let controller = Controller::new("stuck", |_key: String, _cancel| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, Failure>(Action::AwaitChange)
        })
        .watches(&store.reader(), |event, enqueue| {
            enqueue.add(name_of(event))
        });
        let running = controller
            .start(CancellationToken::new(), &WorkQueueMetrics::default())
            .unwrap();
        store.apply(Event::Apply(config_map("k")));
        tokio::time::sleep(Duration::from_millis(10)).await;
        let start = tokio::time::Instant::now();
        assert!(!running.drain(Duration::from_secs(2)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn pools_of_one_term_feed_each_other_observe_and_stop_together() {
        let metrics = WorkQueueMetrics::default();
        let first: WorkQueue<String> = WorkQueue::builder("first").metrics(&metrics).build();
        let second: WorkQueue<u32> = WorkQueue::builder("second").metrics(&metrics).build();
        let reached = Arc::new(Mutex::new(Vec::new()));
        let observed = Arc::new(Mutex::new(Vec::new()));
        let observer: ReconcileObserver = {
            let observed = Arc::clone(&observed);
            Arc::new(move |pool: &str, _took, ok| observed.lock().push((pool.to_string(), ok)))
        };
        let ended = Arc::new(AtomicUsize::new(0));
        let mut running = RunningWork::new("term", CancellationToken::new());
        {
            let ended = Arc::clone(&ended);
            running.on_end(move || {
                ended.fetch_add(1, Ordering::SeqCst);
            });
        }
        let forward = second.clone();
        running.spawn(
            WorkerPool::new("first", first.clone(), move |key: String, _cancel| {
                forward.add(u32::try_from(key.len()).unwrap_or(u32::MAX));
                async { Ok::<_, Failure>(Action::AwaitChange) }
            })
            .observe(Arc::clone(&observer)),
            2,
        );
        {
            let reached = Arc::clone(&reached);
            running.spawn(
                WorkerPool::new("second", second.clone(), move |key: u32, _cancel| {
                    reached.lock().push(key);
                    async { Ok::<_, Failure>(Action::AwaitChange) }
                })
                .observe(observer),
                1,
            );
        }
        first.add("abc".to_string());
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(*reached.lock(), vec![3]);
        assert_eq!(
            *observed.lock(),
            vec![("first".to_string(), true), ("second".to_string(), true)]
        );
        assert_eq!(ended.load(Ordering::SeqCst), 0);
        assert!(running.drain(Duration::from_secs(1)).await);
        assert!(first.is_shutting_down() && second.is_shutting_down());
        assert_eq!(ended.load(Ordering::SeqCst), 1, "the end hook runs once");
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_running_work_detaches_shuts_down_and_aborts_at_once() {
        let queue: WorkQueue<String> = WorkQueue::builder("stuck").build();
        let entered = Arc::new(AtomicUsize::new(0));
        let mut running = RunningWork::new("aborted", CancellationToken::new());
        let detached = Arc::new(AtomicUsize::new(0));
        {
            let detached = Arc::clone(&detached);
            running.on_detach(move || {
                detached.fetch_add(1, Ordering::SeqCst);
            });
        }
        let ended = Arc::new(AtomicUsize::new(0));
        {
            let ended = Arc::clone(&ended);
            running.on_end(move || {
                ended.fetch_add(1, Ordering::SeqCst);
            });
        }
        // Counts who still holds the reconcile: the abort must drop the call in flight.
        let guard = Arc::new(());
        {
            let (entered, guard) = (Arc::clone(&entered), Arc::clone(&guard));
            running.spawn(
                WorkerPool::new("stuck", queue.clone(), move |_key: String, _cancel| {
                    entered.fetch_add(1, Ordering::SeqCst);
                    let guard = Arc::clone(&guard);
                    async move {
                        let _held = guard;
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                        Ok::<_, Failure>(Action::AwaitChange)
                    }
                }),
                1,
            );
        }
        queue.add("k".to_string());
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(entered.load(Ordering::SeqCst), 1);
        assert_eq!(
            Arc::strong_count(&guard),
            3,
            "held by the pool and the call"
        );
        drop(running);
        assert_eq!(detached.load(Ordering::SeqCst), 1);
        assert_eq!(ended.load(Ordering::SeqCst), 1);
        assert!(queue.is_shutting_down());
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            Arc::strong_count(&guard),
            1,
            "the aborted worker is gone with its call and its pool"
        );
    }

    #[test]
    fn a_string_key_is_logged_as_it_is_and_any_other_key_in_its_debug_form() {
        assert_eq!(key_text(&"ns/job".to_string()), "ns/job");
        assert_eq!(key_text(&("inventory", 3)), r#"("inventory", 3)"#);
    }

    #[test]
    fn zero_workers_is_a_configuration_error() {
        let controller = Controller::new("q", |_key: String, _cancel| async {
            Ok::<_, Failure>(Action::AwaitChange)
        })
        .workers(0);
        assert_eq!(
            controller.validate().unwrap_err().to_string(),
            "invalid q workers: must be at least 1"
        );
    }
}
