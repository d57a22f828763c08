//! The Mokka controller: the I/O room of this crate.
//!
//! Process-lifetime caches (profiles, inventories, racks, and eligible
//! Nodes through a server-side selector and a compacting transform) run on
//! every replica ([`MokkaController::run_caches`]). Leader-lifetime work
//! ([`MokkaController::run_leader`]) attaches the write-side handlers to the
//! warm caches, which replays every cached object, and runs the rack,
//! projection and status workers. [`MokkaController::run`] wires both to
//! Lease leader election: caches first, then the campaign; leader work is
//! drained before the Lease is released; a demoted replica keeps its caches.
//!
//! Decisions are made by the pure `plan` module; this module reads caches,
//! asks the planner and writes.

mod allocation;
mod events;
mod metrics;
pub mod node_api;
pub mod nodes;
mod policies;
mod projection;
mod racks;
mod read;
mod routing;
mod state;
mod status;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use controller_kit::caches::{CacheError, DetachedStore};
use controller_kit::leader::{ElectionOutcome, LeaderElectionMetrics};
use controller_kit::{
    CachedStore, Caches, Coalescer, CoalescerConfig, EventSink, LeaderElectionConfig,
    LeaderElector, MetricsRegistry, RateLimiterConfig, Readiness, StoreOptions, WorkQueue,
    WorkQueueMetrics,
};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::watcher;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use metrics::Metrics;
pub use policies::EvaluationResult;
pub use read::{AssignmentSnapshot, GpuRuntime, ReadApi, ReadError};
pub use state::{Outcome, OutcomeState};

use crate::allocate::GroupKey;
use crate::api::{SGPUInventory, SGPURack, SGPURackProfile, SGPURuntimePolicy};
use crate::plan::options::{Options, OptionsError};
use events::Events;
use nodes::{LiveNodes, node_selector, transform_node};
use state::Context;

/// The error value of leader work started before the caches synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("controller caches are not ready")]
pub struct CacheNotReady;

/// The controller could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("invalid controller options: {0}")]
    Options(#[from] OptionsError),
    #[error(transparent)]
    Config(#[from] controller_kit::ConfigError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("cache sync failed: one or more informer stores did not synchronize")]
    CacheSyncFailed,
    #[error("controller caches stopped before synchronization")]
    CachesStoppedBeforeSync,
    #[error(transparent)]
    NotReady(#[from] CacheNotReady),
}

/// Rack store index: the inventory UID in `spec.inventoryRef`.
pub(crate) const INDEX_INVENTORY_UID: &str = "inventory-uid";
/// Rack store index: names of bound Nodes.
pub(crate) const INDEX_NODE_NAME: &str = "node-name";
/// Rack store index: UIDs of bound Nodes.
pub(crate) const INDEX_NODE_UID: &str = "node-uid";

/// Keys of the status queue.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum StatusKey {
    Inventory(String),
    Rack(String),
    /// The statuses of every policy targeting the inventory of this name.
    RuntimePolicies(String),
}

/// The queues of one leadership term.
pub(crate) struct Queues {
    pub inventories: WorkQueue<String>,
    /// Single-group reconciles, keyed (inventory name, inventory UID, group).
    pub groups: WorkQueue<GroupKey>,
    /// Changes of a group (Node arrivals above all) coalesced in front of
    /// `groups` with the status timing (`--status-debounce`,
    /// `--status-progress-interval`): Nodes arriving one after another make
    /// one reconcile, so one write per rack, per quiet period instead of one
    /// per Node.
    pub group_changes: Coalescer<GroupKey>,
    pub projections: WorkQueue<String>,
    pub status_queue: WorkQueue<StatusKey>,
    pub status: Coalescer<StatusKey>,
}

impl Queues {
    pub fn inventory(&self, name: &str) {
        self.inventories.add(name.to_string());
    }
    pub fn group(&self, key: GroupKey) {
        // After shutdown the change is dropped on purpose, as for status.
        let _ = self.group_changes.dirty(key);
    }
    pub fn project(&self, node: &str) {
        self.projections.add(node.to_string());
    }
    pub fn inventory_status(&self, name: &str) {
        // After shutdown the change is dropped on purpose: a demoted replica writes nothing.
        let _ = self.status.dirty(StatusKey::Inventory(name.to_string()));
    }
    pub fn rack_status(&self, name: &str) {
        let _ = self.status.dirty(StatusKey::Rack(name.to_string()));
    }
    pub fn policy_status(&self, inventory: &str) {
        let _ = self
            .status
            .dirty(StatusKey::RuntimePolicies(inventory.to_string()));
    }
    /// Keys waiting in the four queues (a standby's are always zero).
    pub fn depth(&self) -> usize {
        self.inventories.len()
            + self.groups.len()
            + self.projections.len()
            + self.status_queue.len()
    }
}

/// One Mokka control-plane replica.
pub struct MokkaController {
    client: kube::Client,
    caches: Caches,
    readiness: Readiness,
    context: Arc<Context>,
    leader_ready: Arc<AtomicBool>,
    leading: parking_lot::Mutex<bool>,
    queue_metrics: WorkQueueMetrics,
    election_metrics: LeaderElectionMetrics,
    registry: MetricsRegistry,
    queue_depth: Arc<parking_lot::Mutex<Option<Arc<Queues>>>>,
}

impl MokkaController {
    /// Builds the caches and reconcilers; nothing runs until `run_caches`.
    pub fn new(client: kube::Client, options: Options) -> Result<Self, ControllerError> {
        options.validate()?;
        let registry = MetricsRegistry::new();
        let metrics = Metrics::register(&registry);
        let (queue_metrics, election_metrics) = {
            let mut r = registry.write();
            (
                WorkQueueMetrics::register(&mut r),
                LeaderElectionMetrics::register(&mut r),
            )
        };
        let readiness = Readiness::new();
        let caches = Caches::with_readiness(readiness.clone());
        let profiles: CachedStore<SGPURackProfile> = caches.add(
            "sgpurackprofiles",
            Api::all(client.clone()),
            watcher::Config::default(),
            StoreOptions::default().transform(|profile: &mut SGPURackProfile| {
                profile.metadata.managed_fields = None;
            }),
        )?;
        let inventories: CachedStore<SGPUInventory> = caches.add(
            "sgpuinventories",
            Api::all(client.clone()),
            watcher::Config::default(),
            StoreOptions::default().transform(|inventory: &mut SGPUInventory| {
                inventory.metadata.managed_fields = None;
            }),
        )?;
        let racks: CachedStore<SGPURack> = caches.add(
            "sgpuracks",
            Api::all(client.clone()),
            watcher::Config::default(),
            // Racks keep managedFields: the spec-ownership check reads them.
            StoreOptions::default()
                .index(INDEX_INVENTORY_UID, |rack: &SGPURack| {
                    vec![rack.spec.inventory_ref.uid.clone()]
                })
                .index(INDEX_NODE_NAME, |rack: &SGPURack| {
                    bound(rack).map(|node| node.name.clone()).collect()
                })
                .index(INDEX_NODE_UID, |rack: &SGPURack| {
                    bound(rack).map(|node| node.uid.clone()).collect()
                }),
        )?;
        let nodes: CachedStore<Node> = caches.add(
            "nodes",
            Api::all(client.clone()),
            watcher::Config::default().labels(&node_selector()),
            StoreOptions::default().transform(transform_node),
        )?;
        let policy_store = StoreOptions::default()
            .transform(|policy: &mut SGPURuntimePolicy| {
                policy.metadata.managed_fields = None;
            })
            .index(
                policies::INDEX_POLICY_TARGET,
                |policy: &SGPURuntimePolicy| vec![policy.spec.target_ref.name.clone()],
            );
        let policies: CachedStore<SGPURuntimePolicy> = if options.features.runtime_policies {
            caches.add(
                "sgpuruntimepolicies",
                Api::all(client.clone()),
                watcher::Config::default(),
                policy_store,
            )?
        } else {
            // Never watched: a cluster without the SGPURuntimePolicy CRD (or
            // without RBAC on it) still syncs, and every runtime is the
            // profile's defaults.
            DetachedStore::new("sgpuruntimepolicies", policy_store).reader()
        };
        let events = Events::new(
            EventSink::new(
                client.clone(),
                "mokka-controller",
                std::env::var("POD_NAME").ok(),
            ),
            options.features.kubernetes_events,
        );
        metrics.set_features(&options.features);
        let live_nodes = LiveNodes::new(
            client.clone(),
            options.workers,
            options.effective_live_node_get_timeout(),
        );
        let context = Arc::new(Context::new(
            client.clone(),
            options,
            profiles,
            inventories,
            racks,
            nodes,
            policies,
            live_nodes,
            events,
            metrics,
        ));
        routing::attach_process_handlers(&context);
        Ok(Self {
            client,
            caches,
            readiness,
            context,
            leader_ready: Arc::new(AtomicBool::new(false)),
            leading: parking_lot::Mutex::new(false),
            queue_metrics,
            election_metrics,
            registry,
            queue_depth: Arc::default(),
        })
    }

    /// Starts every cache and waits for all to sync; then runs until
    /// `cancel`. Returns the sync error if the caches end before syncing
    /// while `cancel` is not cancelled.
    pub async fn run_caches(&self, cancel: CancellationToken) -> Result<(), ControllerError> {
        let caches = self.caches.clone();
        let stop = cancel.clone();
        let mut task = tokio::spawn(async move { caches.run(stop).await });
        tokio::select! {
            () = self.caches.caches_synced() => {}
            result = &mut task => {
                flatten(result)?;
                return if cancel.is_cancelled() { Ok(()) } else { Err(ControllerError::CacheSyncFailed) };
            }
        }
        tracing::info!("controller caches synced");
        flatten(task.await)
    }

    /// Resolves once every process-lifetime store has synced.
    pub async fn caches_synced(&self) {
        self.caches.caches_synced().await;
    }

    /// True while synchronized caches run.
    pub fn cache_ready(&self) -> bool {
        self.caches.cache_ready()
    }

    /// True while leader handlers are attached and workers run.
    pub fn leader_ready(&self) -> bool {
        self.leader_ready.load(Ordering::SeqCst)
    }

    /// The replica's readiness (for `/readyz`).
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// The metrics registry (for `/metrics`).
    pub fn registry(&self) -> MetricsRegistry {
        self.registry.clone()
    }

    /// The controller's own metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.context.metrics
    }

    /// Keys queued in the current leadership term's queues (0 on a standby).
    pub fn queued_keys(&self) -> usize {
        self.queue_depth
            .lock()
            .as_ref()
            .map_or(0, |queues| queues.depth())
    }

    /// The cached rack `name` (served from the cache on every replica).
    pub fn cached_rack(&self, name: &str) -> Option<Arc<SGPURack>> {
        self.context.racks.get(name)
    }

    /// The read API over this replica's caches (`assignments_for_node`,
    /// `effective_runtime`): answers on every replica, leader or standby,
    /// once the caches have synced.
    pub fn read_api(&self) -> ReadApi {
        ReadApi::new(Arc::clone(&self.context), self.caches.clone())
    }

    /// The node-agent HTTP API over this replica's caches, reviewing
    /// callers' tokens with the controller's own client.
    pub fn node_api(&self) -> node_api::NodeApi {
        node_api::NodeApi::new(self.read_api(), self.client.clone())
    }

    /// See [`ReadApi::assignments_for_node`].
    pub fn assignments_for_node(
        &self,
        name: &str,
        uid: &str,
    ) -> Result<Vec<AssignmentSnapshot>, ReadError> {
        self.read_api().assignments_for_node(name, uid)
    }

    /// See [`ReadApi::effective_runtime`].
    pub fn effective_runtime(
        &self,
        assignment: &AssignmentSnapshot,
    ) -> Result<Vec<GpuRuntime>, ReadError> {
        self.read_api().effective_runtime(assignment)
    }

    /// Policy evaluations computed so far (not served from the cache).
    pub fn policy_evaluations_computed(&self) -> u64 {
        self.context.evaluations.computed()
    }

    /// The latest projection outcome of a rack slot.
    pub fn outcome(&self, rack: &str, node_index: i32) -> Option<Outcome> {
        self.context.outcome(rack, node_index)
    }

    /// Leader work: refuses before the caches are ready; otherwise attaches
    /// the write-side handlers (replaying every cached object), starts the
    /// workers, sets `leader_ready`, and on `cancel` detaches the handlers
    /// in reverse order, shuts the queues down and waits for the workers.
    pub async fn run_leader(&self, cancel: CancellationToken) -> Result<(), CacheNotReady> {
        if !self.cache_ready() {
            return Err(CacheNotReady);
        }
        {
            let mut leading = self.leading.lock();
            if *leading {
                tracing::error!("leader work is already running in this process");
                return Ok(());
            }
            *leading = true;
        }
        let context = Arc::clone(&self.context);
        let options = context.options;
        let status_queue: WorkQueue<StatusKey> = build_queue("status", &self.queue_metrics);
        let timing = CoalescerConfig {
            debounce: options.status_debounce,
            progress_interval: options.effective_progress_interval(),
        };
        let groups: WorkQueue<GroupKey> = build_queue("groups", &self.queue_metrics);
        let coalescers = Coalescer::new(status_queue.clone(), &timing)
            .and_then(|status| Ok((status, Coalescer::new(groups.clone(), &timing)?)));
        let (coalescer, group_changes) = match coalescers {
            Ok(coalescers) => coalescers,
            Err(error) => {
                // Options were validated in `new`; this cannot happen.
                tracing::error!(%error, "a coalescer refused the validated options");
                *self.leading.lock() = false;
                return Ok(());
            }
        };
        let queues = Arc::new(Queues {
            inventories: build_queue("inventories", &self.queue_metrics),
            groups,
            group_changes,
            projections: build_queue("projections", &self.queue_metrics),
            status_queue,
            status: coalescer,
        });
        *self.queue_depth.lock() = Some(Arc::clone(&queues));
        let mut term = Term {
            controller: self,
            detach: routing::attach_leader_handlers(&context, &queues),
            queues: Arc::clone(&queues),
        };

        let mut workers = JoinSet::new();
        for _ in 0..options.workers {
            spawn_worker(
                &mut workers,
                "inventories",
                queues.inventories.clone(),
                None,
                &cancel,
                {
                    let (context, queues) = (Arc::clone(&context), Arc::clone(&queues));
                    move |key: String, cancel| -> BoxFuture<'static, Result<(), BoxError>> {
                        let (context, queues) = (Arc::clone(&context), Arc::clone(&queues));
                        Box::pin(async move {
                            racks::reconcile_inventory(&context, &queues, &key, &cancel).await
                        })
                    }
                },
                &context.metrics,
            );
            spawn_worker(
                &mut workers,
                "groups",
                queues.groups.clone(),
                Some(queues.group_changes.clone()),
                &cancel,
                {
                    let (context, queues) = (Arc::clone(&context), Arc::clone(&queues));
                    move |key: GroupKey, cancel| -> BoxFuture<'static, Result<(), BoxError>> {
                        let (context, queues) = (Arc::clone(&context), Arc::clone(&queues));
                        Box::pin(async move {
                            racks::reconcile_group(&context, &queues, &key, &cancel).await
                        })
                    }
                },
                &context.metrics,
            );
            spawn_worker(
                &mut workers,
                "projections",
                queues.projections.clone(),
                None,
                &cancel,
                {
                    let (context, queues) = (Arc::clone(&context), Arc::clone(&queues));
                    move |key: String, cancel| -> BoxFuture<'static, Result<(), BoxError>> {
                        let (context, queues) = (Arc::clone(&context), Arc::clone(&queues));
                        Box::pin(async move {
                            projection::reconcile_node(&context, &queues, &key, &cancel).await
                        })
                    }
                },
                &context.metrics,
            );
            spawn_worker(
                &mut workers,
                "status",
                queues.status_queue.clone(),
                Some(queues.status.clone()),
                &cancel,
                {
                    let (context, queues) = (Arc::clone(&context), Arc::clone(&queues));
                    move |key: StatusKey, _cancel| -> BoxFuture<'static, Result<(), BoxError>> {
                        let (context, queues) = (Arc::clone(&context), Arc::clone(&queues));
                        Box::pin(
                            async move { status::reconcile_status(&context, &queues, &key).await },
                        )
                    }
                },
                &context.metrics,
            );
        }
        self.leader_ready.store(true, Ordering::SeqCst);
        self.readiness.set_leader_ready(true);
        tracing::info!(workers = options.workers, "leader work running");

        cancel.cancelled().await;
        term.stop_intake();
        while let Some(result) = workers.join_next().await {
            if let Err(error) = result {
                tracing::error!(%error, "worker panicked");
            }
        }
        drop(term);
        tracing::info!("leader work drained");
        Ok(())
    }

    /// The manager: caches, then the Lease campaign; leader work runs while
    /// leading and is drained before the Lease is released. A replica that
    /// loses leadership keeps its caches and campaigns again.
    pub async fn run(
        self: Arc<Self>,
        election: LeaderElectionConfig,
        shutdown: CancellationToken,
    ) -> Result<(), ControllerError> {
        let elector = LeaderElector::new(self.client.clone(), election, &self.election_metrics)?;
        let caches_stop = CancellationToken::new();
        let mut cache_task = {
            let this = Arc::clone(&self);
            let stop = caches_stop.clone();
            tokio::spawn(async move { this.run_caches(stop).await })
        };
        let synced = tokio::select! {
            () = self.caches_synced() => true,
            result = &mut cache_task => {
                self.readiness.stopped();
                return match result {
                    Ok(Ok(())) if shutdown.is_cancelled() => Ok(()),
                    Ok(Err(error)) => Err(error),
                    _ => Err(ControllerError::CachesStoppedBeforeSync),
                };
            }
            () = shutdown.cancelled() => false,
        };
        if synced {
            let identity = elector.identity().to_string();
            let readiness = self.readiness.clone();
            let on_new_leader = move |holder: &str| readiness.observed_leader(holder, &identity);
            loop {
                self.readiness.campaigning();
                let this = Arc::clone(&self);
                let readiness = self.readiness.clone();
                let outcome = elector
                    .run(&shutdown, &on_new_leader, move |token| async move {
                        readiness.became_leader();
                        if let Err(error) = this.run_leader(token).await {
                            tracing::error!(%error, "not starting leader work");
                        }
                    })
                    .await;
                self.readiness.stopped_leading();
                if outcome == ElectionOutcome::Cancelled || shutdown.is_cancelled() {
                    break;
                }
                tracing::warn!(
                    ?outcome,
                    "leader election ended unexpectedly; campaigning again as a standby"
                );
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(elector.config().retry_period) => {}
                }
            }
        }
        self.readiness.stopped();
        caches_stop.cancel();
        match cache_task.await {
            Ok(result) => result,
            Err(_) => Err(ControllerError::CachesStoppedBeforeSync),
        }
    }
}

/// One leadership term's wiring. Dropping it undoes whatever is still in place, so a
/// term whose work is aborted (the elector aborts leader work that outlives a lost
/// lease) leaves no handler attached to the caches, no queue open and no flag saying
/// that this replica leads or that leader work is running.
struct Term<'a> {
    controller: &'a MokkaController,
    detach: Vec<routing::Detach>,
    queues: Arc<Queues>,
}

impl Term<'_> {
    /// No new work: leader readiness off, handlers detached in reverse order, queues
    /// shut down (workers finish the key they hold and then see the end). Idempotent.
    fn stop_intake(&mut self) {
        self.controller.leader_ready.store(false, Ordering::SeqCst);
        self.controller.readiness.set_leader_ready(false);
        while let Some(detach) = self.detach.pop() {
            detach();
        }
        self.queues.status.shutdown();
        self.queues.group_changes.shutdown();
        self.queues.inventories.shut_down();
        self.queues.groups.shut_down();
        self.queues.projections.shut_down();
        self.queues.status_queue.shut_down();
    }
}

impl Drop for Term<'_> {
    fn drop(&mut self) {
        self.stop_intake();
        *self.controller.queue_depth.lock() = None;
        *self.controller.leading.lock() = false;
    }
}

fn flatten(
    result: Result<Result<(), CacheError>, tokio::task::JoinError>,
) -> Result<(), ControllerError> {
    match result {
        Ok(result) => Ok(result?),
        Err(_) => Err(ControllerError::CacheSyncFailed),
    }
}

/// A queue with client-go's default controller rate limiter.
fn build_queue<K: controller_kit::queue::QueueKey>(
    name: &str,
    metrics: &WorkQueueMetrics,
) -> WorkQueue<K> {
    WorkQueue::builder(name.to_string())
        .rate_limiter(RateLimiterConfig::default().build())
        .metrics(metrics)
        .build()
}

fn bound(rack: &SGPURack) -> impl Iterator<Item = &crate::api::NodeRef> {
    rack.spec
        .nodes
        .iter()
        .filter_map(|node| node.node_ref.as_ref())
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The generic worker loop, as upstream Mokka runs each of its
/// controllers: get, reconcile, forget on success, retry rate-limited on
/// failure unless leadership or the queue is ending.
fn spawn_worker<K, F>(
    workers: &mut JoinSet<()>,
    name: &'static str,
    queue: WorkQueue<K>,
    coalescer: Option<Coalescer<K>>,
    cancel: &CancellationToken,
    reconcile: F,
    metrics: &Metrics,
) where
    K: controller_kit::queue::QueueKey,
    F: Fn(K, CancellationToken) -> BoxFuture<'static, Result<(), BoxError>> + Send + Sync + 'static,
{
    let cancel = cancel.clone();
    let metrics = metrics.clone();
    workers.spawn(async move {
        while let Some(key) = queue.get().await {
            if cancel.is_cancelled() {
                queue.forget(&key);
                queue.done(&key);
                break;
            }
            if let Some(coalescer) = &coalescer {
                coalescer.start(&key);
            }
            let started = Instant::now();
            let result = reconcile(key.clone(), cancel.clone()).await;
            metrics.observe(name, started.elapsed().as_secs_f64(), result.is_ok());
            match result {
                Ok(()) => {
                    if let Some(coalescer) = &coalescer {
                        coalescer.finish(&key, true);
                    }
                    queue.forget(&key);
                }
                Err(error) => {
                    if let Some(coalescer) = &coalescer {
                        coalescer.finish(&key, false);
                    }
                    if !cancel.is_cancelled() && !queue.is_shutting_down() {
                        queue.add_rate_limited(key.clone());
                    }
                    tracing::error!(controller = name, ?key, %error, "Controller reconciliation failed");
                }
            }
            queue.done(&key);
        }
    });
}
