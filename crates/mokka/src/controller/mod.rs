//! The Mokka controller: the I/O room of this crate.
//!
//! Process-lifetime caches (profiles, inventories, racks, and eligible
//! Nodes through a server-side selector and a compacting transform) run on
//! every replica ([`MokkaController::run_caches`]). Leader-lifetime work
//! ([`MokkaController::run_leader`]) attaches the write-side handlers to the
//! warm caches, which replays every cached object, and runs the rack,
//! projection and status workers. [`MokkaController::run`] wires both to
//! Lease leader election: caches first, then the campaign; leader work is
//! drained (for at most the drain timeout) before the Lease is released; a
//! demoted replica keeps its caches.
//!
//! The election, the leadership terms, the worker loop and the drain are
//! controller-kit's ([`Replica`]): Mokka adds one [`LeaderWork`] whose term
//! runs its four queues, which feed each other.
//!
//! Decisions are made by the pure `plan` module; this module reads caches,
//! asks the planner and writes.

mod allocation;
mod error;
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

use std::future::Future;
use std::sync::Arc;

use crate::node_meta::NodeMeta;
use controller_kit::caches::{CacheError, DetachedStore};
use controller_kit::controller::{LeaderWork, ReconcileObserver};
use controller_kit::manager::DEFAULT_DRAIN_TIMEOUT;
use controller_kit::queue::QueueKey;
use controller_kit::{
    Action, CachedStore, Caches, Coalescer, CoalescerConfig, ConfigError, EventSink,
    LeaderElectionConfig, ManagerConfig, ManagerError, MetricsRegistry, RateLimiterConfig,
    Readiness, Replica, RunningWork, StoreOptions, WorkQueue, WorkQueueMetrics, WorkerPool,
};
use kube::Api;
use kube::runtime::watcher;
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
pub use controller_kit::manager::CacheNotReady;

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
    /// The caches, the readiness, the leader work and the election: controller-kit's.
    replica: Replica,
    caches: Caches,
    context: Arc<Context>,
    registry: MetricsRegistry,
    queue_depth: QueueDepth,
}

/// The queues of the running term, for [`MokkaController::queued_keys`].
type QueueDepth = Arc<parking_lot::Mutex<Option<Arc<Queues>>>>;

impl MokkaController {
    /// Builds the caches and reconcilers; nothing runs until `run_caches`.
    pub fn new(client: kube::Client, options: Options) -> Result<Self, ControllerError> {
        options.validate()?;
        let registry = MetricsRegistry::new();
        let metrics = Metrics::register(&registry);
        let mut replica = Replica::new(&registry);
        let caches = replica.caches().clone();
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
            // Racks keep a summary of managedFields: which managers own part
            // of the spec, all the spec-ownership check reads.
            StoreOptions::default()
                .transform(|rack: &mut SGPURack| {
                    rack.metadata.managed_fields = rack
                        .metadata
                        .managed_fields
                        .take()
                        .map(crate::plan::rack::compact_managed_fields);
                })
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
        let nodes: CachedStore<NodeMeta> = caches.add(
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
        let queue_depth = QueueDepth::default();
        replica.add(LeaderTerm {
            context: Arc::clone(&context),
            queue_depth: Arc::clone(&queue_depth),
        });
        Ok(Self {
            client,
            replica,
            caches,
            context,
            registry,
            queue_depth,
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
        self.replica.readiness().snapshot().leader_ready
    }

    /// The replica's readiness (for `/readyz`).
    pub fn readiness(&self) -> Readiness {
        self.replica.readiness()
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
    /// in reverse order, shuts the queues down and waits for the workers
    /// (at most controller-kit's default drain timeout; then they are aborted).
    pub async fn run_leader(&self, cancel: CancellationToken) -> Result<(), CacheNotReady> {
        self.replica.lead(cancel, DEFAULT_DRAIN_TIMEOUT).await
    }

    /// The manager: caches, then the Lease campaign; leader work runs while
    /// leading and is drained before the Lease is released. A replica that
    /// loses leadership keeps its caches and campaigns again.
    pub async fn run(
        self: Arc<Self>,
        election: LeaderElectionConfig,
        shutdown: CancellationToken,
    ) -> Result<(), ControllerError> {
        self.run_with(ManagerConfig::new(election), shutdown).await
    }

    /// [`MokkaController::run`] with every setting of controller-kit's manager
    /// (the drain timeout above all).
    pub async fn run_with(
        self: Arc<Self>,
        config: ManagerConfig,
        shutdown: CancellationToken,
    ) -> Result<(), ControllerError> {
        self.replica
            .run(self.client.clone(), &config, shutdown)
            .await
            .map_err(|error| match error {
                // Upstream's wording for caches that end before syncing.
                ManagerError::CachesStoppedBeforeSync => ControllerError::CacheSyncFailed,
                ManagerError::Cache(error) => ControllerError::Cache(error),
                ManagerError::Config(error) => ControllerError::Config(error),
            })
    }
}

/// Mokka's leader work: one term runs four queues (inventories, groups,
/// projections, status), with coalescers in front of groups and status,
/// and the handlers that route cache events to them. The reconcilers enqueue
/// into each other's queues, so they share one [`Queues`] per term.
struct LeaderTerm {
    context: Arc<Context>,
    queue_depth: QueueDepth,
}

impl LeaderWork for LeaderTerm {
    fn name(&self) -> &str {
        "mokka"
    }

    fn start(
        &self,
        cancel: CancellationToken,
        metrics: &WorkQueueMetrics,
    ) -> Result<RunningWork, ConfigError> {
        let options = self.context.options;
        let timing = CoalescerConfig {
            debounce: options.status_debounce,
            progress_interval: options.effective_progress_interval(),
        };
        let status_queue: WorkQueue<StatusKey> = build_queue("status", metrics);
        let groups: WorkQueue<GroupKey> = build_queue("groups", metrics);
        let queues = Arc::new(Queues {
            inventories: build_queue("inventories", metrics),
            group_changes: Coalescer::new(groups.clone(), &timing)?,
            groups,
            projections: build_queue("projections", metrics),
            status: Coalescer::new(status_queue.clone(), &timing)?,
            status_queue,
        });
        let mut running = RunningWork::new("mokka", cancel);
        *self.queue_depth.lock() = Some(Arc::clone(&queues));
        {
            let queue_depth = Arc::clone(&self.queue_depth);
            running.on_end(move || *queue_depth.lock() = None);
        }
        for detach in routing::attach_leader_handlers(&self.context, &queues) {
            running.on_detach(detach);
        }
        let observer: ReconcileObserver = {
            let metrics = self.context.metrics.clone();
            Arc::new(move |controller: &str, took, ok| {
                metrics.observe(controller, took.as_secs_f64(), ok)
            })
        };
        let mut pools = Pools {
            context: &self.context,
            queues: &queues,
            observer,
            running: &mut running,
            workers: options.workers,
        };
        // Each reconciler gets the term's context and queues, the key and the
        // leadership token (which status writes do not need).
        pools.spawn(
            "inventories",
            &queues.inventories,
            None,
            |context, queues, key: String, cancel| async move {
                racks::reconcile_inventory(&context, &queues, &key, &cancel).await
            },
        );
        pools.spawn(
            "groups",
            &queues.groups,
            Some(&queues.group_changes),
            |context, queues, key: GroupKey, cancel| async move {
                racks::reconcile_group(&context, &queues, &key, &cancel).await
            },
        );
        pools.spawn(
            "projections",
            &queues.projections,
            None,
            |context, queues, key: String, cancel| async move {
                projection::reconcile_node(&context, &queues, &key, &cancel).await
            },
        );
        pools.spawn(
            "status",
            &queues.status_queue,
            Some(&queues.status),
            |context, queues, key: StatusKey, _cancel| async move {
                status::reconcile_status(&context, &queues, &key).await
            },
        );
        Ok(running)
    }
}

/// What every Mokka worker pool of one term shares: the context, the term's
/// queues, the reconcile metrics and the worker count.
struct Pools<'a> {
    context: &'a Arc<Context>,
    queues: &'a Arc<Queues>,
    observer: ReconcileObserver,
    running: &'a mut RunningWork,
    workers: usize,
}

impl Pools<'_> {
    /// Starts the workers called `name` over `queue` (behind `coalescer`)
    /// running `reconcile`; a success awaits the next change.
    fn spawn<K, F, Fut>(
        &mut self,
        name: &str,
        queue: &WorkQueue<K>,
        coalescer: Option<&Coalescer<K>>,
        reconcile: F,
    ) where
        K: QueueKey,
        F: Fn(Arc<Context>, Arc<Queues>, K, CancellationToken) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), ReconcileError>> + Send + 'static,
    {
        let (context, queues) = (Arc::clone(self.context), Arc::clone(self.queues));
        let mut pool = WorkerPool::new(name, queue.clone(), move |key, cancel| {
            let reconciled = reconcile(Arc::clone(&context), Arc::clone(&queues), key, cancel);
            async move { reconciled.await.map(|()| Action::AwaitChange) }
        })
        .observe(Arc::clone(&self.observer));
        if let Some(coalescer) = coalescer {
            pool = pool.coalescer(coalescer.clone());
        }
        self.running.spawn(pool, self.workers);
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

pub(crate) use error::{ApiCall, ReconcileError};
