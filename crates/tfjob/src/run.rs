//! Wiring one operator replica on controller-kit: caches of TFJobs and of
//! the pods and Services carrying `group-name=kubeflow.org` (never an
//! unfiltered pod watch), indexed by owner UID; the controller; Lease
//! election; metrics and the admin server.
//!
//! [`Operator`] is the operator's one entry point: [`Operator::new`] builds
//! it from an [`OperatorConfig`] and a client, [`Operator::run`] runs it
//! until cancelled. `gpufleet tfjob` parses its flags into the
//! configuration and `gpufleet sandbox` writes one in code; both then make
//! the same two calls, so the sandbox runs what a cluster runs.

use std::net::SocketAddr;
use std::sync::Arc;

use controller_kit::{
    CachedStore, Controller, EventSink, LeaderElectionConfig, Manager, ManagerConfig, ManagerError,
    MetricsRegistry, ObjectEvent, Readiness, StoreOptions, serve::AdminServer,
};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use k8s_openapi::api::scheduling::v1::PriorityClass;

use crate::api::{PodGroupApi, PodGroupObject, TFJobObject};
use crate::events::{self, EventQueue};
use crate::metrics::Metrics;
use crate::plan::PlanConfig;
use crate::plan::gang::GangScheduler;
use crate::plan::names::WATCH_SELECTOR;
use crate::pod_groups::{self, PodGroupStore};
use crate::reconcile::{self, Context, INDEX_JOB_LABEL, INDEX_OWNER};

/// Settings of one operator replica.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Watch only this namespace (all when `None`).
    pub namespace: Option<String>,
    pub plan: PlanConfig,
    /// Reconcile workers.
    pub workers: usize,
    /// The Lease replicas elect a leader on.
    pub election: LeaderElectionConfig,
    /// Whether to elect at all (`--leader-elect`; default true).
    pub leader_election: bool,
    /// Where `/healthz`, `/readyz` and `/metrics` are served, one listener
    /// per address (the metrics and the probe address may differ); empty
    /// (the default): not served.
    pub admin: Vec<SocketAddr>,
}

impl OperatorConfig {
    /// Defaults: all namespaces, one worker, Lease `tf-operator` in
    /// `lease_namespace`.
    pub fn new(lease_namespace: impl Into<String>) -> Self {
        Self {
            namespace: None,
            plan: PlanConfig::default(),
            workers: 1,
            election: LeaderElectionConfig::new(lease_namespace, "tf-operator"),
            leader_election: true,
            admin: Vec::new(),
        }
    }
}

/// Setting the operator up, or running it, failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid operator setup: {0}")]
    Setup(String),
    #[error(transparent)]
    Manager(#[from] ManagerError),
    /// One of [`OperatorConfig::admin`]'s servers failed (e.g. its port
    /// was taken).
    #[error("serving /healthz, /readyz and /metrics: {0}")]
    Admin(controller_kit::serve::ServeError),
    /// An admin server's task panicked or was aborted.
    #[error("the admin server task: {0}")]
    AdminTask(tokio::task::JoinError),
}

/// One operator replica, built and ready to run.
pub struct Operator {
    manager: Manager,
    registry: MetricsRegistry,
    readiness: Readiness,
    context: Arc<Context>,
    admin: Vec<SocketAddr>,
}

fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

fn child_store_options<K>(meta: fn(&K) -> &kube::core::ObjectMeta) -> StoreOptions<K>
where
    K: kube::Resource + 'static,
{
    StoreOptions::default()
        .transform(|child: &mut K| {
            // Only metadata and status are read; managed fields are large.
            child.meta_mut().managed_fields = None;
        })
        .index(INDEX_OWNER, move |child: &K| {
            reconcile::owner_index(meta(child))
        })
        .index(INDEX_JOB_LABEL, move |child: &K| {
            reconcile::job_label_index(meta(child))
        })
}

/// The cache of one gang scheduler's PodGroups.
fn pod_group_cache<A: PodGroupApi>(
    manager: &Manager,
    client: &kube::Client,
    namespace: Option<&str>,
) -> Result<CachedStore<PodGroupObject<A>>, controller_kit::caches::CacheError> {
    manager.caches().add(
        "podgroups",
        api(client, namespace),
        watcher::Config::default(),
        StoreOptions::default().transform(|group: &mut PodGroupObject<A>| {
            group.metadata.managed_fields = None;
        }),
    )
}

/// Enqueues the job that controls a PodGroup (its admission wakes the job).
fn route_pod_group<A: PodGroupApi>(
    event: &ObjectEvent<PodGroupObject<A>>,
    queue: &controller_kit::Enqueue<String>,
) {
    if let Some(key) = reconcile::child_key(&event.object().metadata) {
        queue.add(key);
    }
}

impl Operator {
    /// Sets up caches and the controller; nothing runs until [`Operator::run`].
    pub fn new(client: kube::Client, config: OperatorConfig) -> Result<Operator, RunError> {
        let registry = MetricsRegistry::new();
        let metrics = Metrics::register(&registry);
        let mut manager_config = ManagerConfig::new(config.election.clone());
        manager_config.leader_election = config.leader_election;
        let mut manager = Manager::new(client.clone(), manager_config, &registry)
            .map_err(|error| RunError::Setup(error.to_string()))?;
        let readiness = manager.readiness();
        let namespace = config.namespace.as_deref();
        let setup = |error: controller_kit::caches::CacheError| RunError::Setup(error.to_string());
        let jobs: CachedStore<TFJobObject> = manager
            .caches()
            .add(
                "tfjobs",
                api(&client, namespace),
                watcher::Config::default(),
                StoreOptions::default().transform(|job: &mut TFJobObject| {
                    job.metadata.managed_fields = None;
                }),
            )
            .map_err(setup)?;
        let pods: CachedStore<Pod> = manager
            .caches()
            .add(
                "tfjob-pods",
                api(&client, namespace),
                watcher::Config::default().labels(WATCH_SELECTOR),
                child_store_options(|pod: &Pod| &pod.metadata),
            )
            .map_err(setup)?;
        let services: CachedStore<Service> = manager
            .caches()
            .add(
                "tfjob-services",
                api(&client, namespace),
                watcher::Config::default().labels(WATCH_SELECTOR),
                child_store_options(|service: &Service| &service.metadata),
            )
            .map_err(setup)?;
        let pod_groups = match config.plan.gang.as_ref().map(|gang| gang.scheduler()) {
            Some(GangScheduler::Volcano) => Some(PodGroupStore::Volcano(
                pod_group_cache(&manager, &client, namespace).map_err(setup)?,
            )),
            Some(GangScheduler::SchedulerPlugins) => Some(PodGroupStore::SchedulerPlugins(
                pod_group_cache(&manager, &client, namespace).map_err(setup)?,
            )),
            None => None,
        };
        // Cluster-scoped, few and small: their values order a gang's
        // minResources.
        let priority_classes: Option<CachedStore<PriorityClass>> = match config.plan.gang {
            Some(_) => Some(
                manager
                    .caches()
                    .add(
                        "priorityclasses",
                        Api::all(client.clone()),
                        watcher::Config::default(),
                        StoreOptions::default().transform(|class: &mut PriorityClass| {
                            class.metadata.managed_fields = None;
                        }),
                    )
                    .map_err(setup)?,
            ),
            None => None,
        };
        let events = EventQueue::new(EventSink::new(
            client.clone(),
            "tf-operator",
            std::env::var("POD_NAME").ok(),
        ));
        let context = Arc::new(Context::new(
            client,
            reconcile::Stores {
                jobs: jobs.clone(),
                pods: pods.clone(),
                services: services.clone(),
                pod_groups: pod_groups.clone(),
                priority_classes: priority_classes.clone(),
            },
            config.plan.clone(),
            events,
            metrics,
        ));
        let controller = {
            let reconcile_context = Arc::clone(&context);
            let forget_context = Arc::clone(&context);
            Controller::new("tfjobs", move |key: String, _cancel| {
                reconcile::reconcile(Arc::clone(&reconcile_context), key)
            })
            .workers(config.workers.max(1))
            .watches(&jobs, move |event, queue| {
                let job = event.object();
                if let ObjectEvent::Deleted(_) = event
                    && let Some(uid) = job.metadata.uid.as_deref()
                {
                    forget_context.forget(uid);
                }
                if let (Some(namespace), Some(name)) = (
                    job.metadata.namespace.as_deref(),
                    job.metadata.name.as_deref(),
                ) {
                    queue.add(format!("{namespace}/{name}"));
                }
            })
            .watches(&pods, |event, queue| {
                if let Some(key) = reconcile::child_key(&event.object().metadata) {
                    queue.add(key);
                }
            })
            .watches(&services, |event, queue| {
                if let Some(key) = reconcile::child_key(&event.object().metadata) {
                    queue.add(key);
                }
            })
        };
        let controller = match &pod_groups {
            // Admission (the group's phase) wakes its job.
            Some(PodGroupStore::Volcano(groups)) => controller.watches(groups, route_pod_group),
            Some(PodGroupStore::SchedulerPlugins(groups)) => {
                controller.watches(groups, route_pod_group)
            }
            None => controller,
        };
        let controller = match &priority_classes {
            // A class created, changed or deleted reorders the minResources
            // of the jobs naming it.
            Some(classes) => {
                let jobs = jobs.clone();
                controller.watches(classes, move |event, queue| {
                    let Some(class) = event.object().metadata.name.as_deref() else {
                        return;
                    };
                    for job in jobs.state() {
                        if pod_groups::names_priority_class(&job.spec, class)
                            && let (Some(namespace), Some(name)) = (
                                job.metadata.namespace.as_deref(),
                                job.metadata.name.as_deref(),
                            )
                        {
                            queue.add(format!("{namespace}/{name}"));
                        }
                    }
                })
            }
            None => controller,
        };
        manager.add(controller);
        Ok(Operator {
            manager,
            registry,
            readiness,
            context,
            admin: config.admin,
        })
    }

    /// `/healthz`, `/readyz` and `/metrics` of this replica.
    pub fn admin_server(&self) -> AdminServer {
        AdminServer::new(self.readiness.clone(), self.registry.clone())
    }

    /// The replica's readiness.
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// The metrics registry (for tests and extra routes).
    pub fn registry(&self) -> MetricsRegistry {
        self.registry.clone()
    }

    /// The reconciler's shared state.
    pub fn context(&self) -> Arc<Context> {
        Arc::clone(&self.context)
    }

    /// Serves [`OperatorConfig::admin`] and runs the controller until
    /// `shutdown` is cancelled, then writes the Events still queued
    /// ([`events::DRAIN_TIMEOUT`] at most) and stops the admin servers.
    ///
    /// The admin servers stop on a child of `shutdown`, never by cancelling
    /// the caller's token: a caller running other tasks on that token (the
    /// sandbox) must see this operator fail, not a shutdown. An admin
    /// server's failure is returned in preference to the controller's
    /// result, so a port that was taken is what gets reported.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), RunError> {
        let stop_admin = shutdown.child_token();
        let servers: Vec<_> = self
            .admin
            .iter()
            .map(|address| {
                let server = self.admin_server();
                tokio::spawn(server.bind_and_serve(*address, stop_admin.clone()))
            })
            .collect();
        let stop_events = CancellationToken::new();
        let mut event_writers = {
            let context = Arc::clone(&self.context);
            let stop = stop_events.clone();
            tokio::spawn(async move { context.events.run(stop).await })
        };
        let result = self.manager.run(shutdown).await.map_err(RunError::from);
        stop_events.cancel();
        if tokio::time::timeout(events::DRAIN_TIMEOUT, &mut event_writers)
            .await
            .is_err()
        {
            event_writers.abort();
            tracing::warn!(
                timeout = ?events::DRAIN_TIMEOUT,
                "queued events not all written before shutdown"
            );
        }
        stop_admin.cancel();
        for server in servers {
            match server.await {
                Ok(Err(error)) => return Err(RunError::Admin(error)),
                Err(error) => return Err(RunError::AdminTask(error)),
                Ok(Ok(())) => {}
            }
        }
        result
    }
}
