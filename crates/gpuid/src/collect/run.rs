//! Wiring one collector replica: pod caches per namespace, the controller,
//! leader election (or none), exporter metrics and the admin routes.

use std::sync::Arc;
use std::time::Duration;

use super::pod::DevicePluginPod;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use controller_kit::controller::LeaderWork;
use controller_kit::{
    CachedStore, Caches, Controller, LeaderElectionConfig, Manager, ManagerConfig, ManagerError,
    MetricsRegistry, Readiness, StoreOptions, WorkQueueMetrics,
};
use kube::Api;
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use super::ack::ExportAcks;
use super::collector::Collector;
use super::metrics::CollectorMetrics;
use super::settings::CollectorSettings;
use super::sink::RecordSink;
use crate::config;

/// Objects per page of every list the collector makes.
pub(crate) const LIST_PAGE_SIZE: u32 = 100;

/// How the replica takes part in leader election.
#[derive(Debug, Clone)]
pub enum Election {
    /// Single replica: collect as soon as the caches sync.
    Disabled,
    /// Collect only while holding the Lease; followers serve health and
    /// metrics and make no exec and no write.
    Lease(LeaderElectionConfig),
}

impl Election {
    /// From the validated configuration (identity `<POD_NAME>_<uuid4>`).
    pub fn from_config(config: &config::LeaderElectionConfig) -> Election {
        if !config.enabled {
            return Election::Disabled;
        }
        let mut election =
            LeaderElectionConfig::new(config.lease_namespace.clone(), config.lease_name.clone());
        election.lease_duration = config.lease_duration;
        election.renew_deadline = config.renew_deadline;
        election.retry_period = config.retry_period;
        if let Some(pod) = &config.pod_name {
            election.identity = format!("{pod}_{}", uuid::Uuid::new_v4());
        }
        Election::Lease(election)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("invalid collector setup: {0}")]
    Setup(String),
    #[error(transparent)]
    Manager(#[from] ManagerError),
}

/// A collector replica, built and ready to run.
pub struct CollectorRuntime {
    pub readiness: Readiness,
    pub metrics: CollectorMetrics,
    pub registry: MetricsRegistry,
    collector: Arc<Collector>,
    sink: Arc<dyn RecordSink>,
    mode: Mode,
    controller: Option<Controller<String>>,
    acks: ExportAcks,
    client: kube::Client,
}

enum Mode {
    Elected(Box<Manager>),
    Single {
        caches: Caches,
        queue_metrics: WorkQueueMetrics,
    },
}

impl CollectorRuntime {
    /// Sets up caches and the controller; nothing runs until [`CollectorRuntime::run`].
    pub fn new(
        client: kube::Client,
        settings: CollectorSettings,
        election: Election,
        sink: Arc<dyn RecordSink>,
        registry: MetricsRegistry,
    ) -> Result<CollectorRuntime, RunError> {
        let metrics = CollectorMetrics::register(&registry);
        let (mode, readiness) = match election {
            Election::Lease(election) => {
                let manager = Manager::new(client.clone(), ManagerConfig::new(election), &registry)
                    .map_err(|error| RunError::Setup(error.to_string()))?;
                let readiness = manager.readiness();
                (Mode::Elected(Box::new(manager)), readiness)
            }
            Election::Disabled => {
                let readiness = Readiness::new();
                let queue_metrics = WorkQueueMetrics::register(&mut registry.write());
                (
                    Mode::Single {
                        caches: Caches::with_readiness(readiness.clone()),
                        queue_metrics,
                    },
                    readiness,
                )
            }
        };
        let caches = match &mode {
            Mode::Elected(manager) => manager.caches().clone(),
            Mode::Single { caches, .. } => caches.clone(),
        };
        let mut stores: Vec<CachedStore<DevicePluginPod>> = Vec::new();
        for namespace in &settings.namespaces {
            let api: Api<DevicePluginPod> = Api::namespaced(client.clone(), namespace);
            // Pages of 100, not kube's 500: a page is held whole while it is
            // decoded, and at 500 device-plugin pods one page was the
            // process's peak memory (11.7 MiB of 12.7 at start, heaptrack).
            let watch = watcher::Config::default()
                .labels(&settings.label_selector)
                .page_size(LIST_PAGE_SIZE);
            // Only metadata, node, phase and readiness matter; dropping the
            // rest keeps a 10,000-pod cache small.
            let options = StoreOptions::default().transform(super::pod::slim);
            let store = caches
                .add(format!("gpuid-pods-{namespace}"), api, watch, options)
                .map_err(|error| RunError::Setup(error.to_string()))?;
            stores.push(store);
        }
        let workers = settings.workers;
        let acks = ExportAcks::default();
        let collector = Arc::new(Collector::new(
            settings,
            client.clone(),
            stores.clone(),
            Arc::clone(&sink),
            metrics.clone(),
            acks.clone(),
        ));
        let mut controller = {
            let collector = Arc::clone(&collector);
            Controller::new("gpuid", move |key: String, cancel| {
                let collector = Arc::clone(&collector);
                async move { collector.reconcile(key, cancel).await }
            })
            .workers(workers)
        };
        for store in &stores {
            controller = controller.watches(store, |event, enqueue| {
                enqueue.add(super::pod::pod_key(event.object()));
            });
        }
        Ok(CollectorRuntime {
            readiness,
            metrics,
            registry,
            collector,
            sink,
            mode,
            controller: Some(controller),
            acks,
            client,
        })
    }

    pub fn collector(&self) -> Arc<Collector> {
        Arc::clone(&self.collector)
    }

    /// `/healthz`, `/readyz` (caches synced, role known and the exporter
    /// healthy) and `/metrics`.
    pub fn admin_router(&self) -> Router {
        admin_router(
            self.readiness.clone(),
            self.registry.clone(),
            Arc::clone(&self.sink),
        )
    }

    /// Runs until `shutdown` is cancelled.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<(), RunError> {
        let sync = tokio::spawn(sync_export_metrics(
            Arc::clone(&self.sink),
            self.metrics.clone(),
            shutdown.clone(),
        ));
        let acks_stop = CancellationToken::new();
        let acks = tokio::spawn(self.acks.clone().run(
            self.client.clone(),
            Arc::clone(&self.sink),
            acks_stop.clone(),
        ));
        let controller = self
            .controller
            .take()
            .ok_or_else(|| RunError::Setup("collector started twice".into()))?;
        let result = match self.mode {
            Mode::Elected(mut manager) => {
                manager.add(controller);
                manager.run(shutdown.clone()).await.map_err(RunError::from)
            }
            Mode::Single {
                caches,
                queue_metrics,
            } => {
                run_single(
                    caches,
                    controller,
                    queue_metrics,
                    &self.readiness,
                    &shutdown,
                )
                .await
            }
        };
        sync.abort();
        // Let the last exports reach the Node before stopping (bounded).
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while !self.acks.is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        acks_stop.cancel();
        let _ = acks.await;
        self.metrics
            .observe_pipeline(self.sink.exporter_name(), &self.sink.stats());
        result
    }
}

async fn run_single(
    caches: Caches,
    controller: Controller<String>,
    queue_metrics: WorkQueueMetrics,
    readiness: &Readiness,
    shutdown: &CancellationToken,
) -> Result<(), RunError> {
    let stop_caches = CancellationToken::new();
    let cache_task = {
        let caches = caches.clone();
        let stop = stop_caches.clone();
        tokio::spawn(async move { caches.run(stop).await })
    };
    tokio::select! {
        () = caches.caches_synced() => {}
        () = shutdown.cancelled() => {
            stop_caches.cancel();
            let _ = cache_task.await;
            readiness.stopped();
            return Ok(());
        }
    }
    readiness.became_leader();
    let work_cancel = shutdown.child_token();
    let mut running = controller
        .start(work_cancel.clone(), &queue_metrics)
        .map_err(|error| RunError::Setup(error.to_string()))?;
    readiness.set_leader_ready(true);
    shutdown.cancelled().await;
    readiness.set_leader_ready(false);
    running.detach_handlers();
    running.drain(Duration::from_secs(20)).await;
    stop_caches.cancel();
    let _ = cache_task.await;
    readiness.stopped();
    Ok(())
}

async fn sync_export_metrics(
    sink: Arc<dyn RecordSink>,
    metrics: CollectorMetrics,
    shutdown: CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => metrics.observe_pipeline(sink.exporter_name(), &sink.stats()),
        }
    }
}

#[derive(Clone)]
struct AdminState {
    readiness: Readiness,
    registry: MetricsRegistry,
    sink: Arc<dyn RecordSink>,
}

/// The admin routes. controller-kit's `/readyz` knows caches and role;
/// gpuid's also requires a healthy exporter, so the three routes are
/// served here with the same readiness and registry.
pub fn admin_router(
    readiness: Readiness,
    registry: MetricsRegistry,
    sink: Arc<dyn RecordSink>,
) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(AdminState {
            readiness,
            registry,
            sink,
        })
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let snapshot = state.readiness.snapshot();
    if !snapshot.is_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", snapshot.reason()),
        )
            .into_response();
    }
    match state.sink.health().await {
        crate::export::Health::Healthy => {
            (StatusCode::OK, format!("ready: {}\n", snapshot.reason())).into_response()
        }
        crate::export::Health::Unhealthy { reason } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: exporter unhealthy ({}): {reason}\n",
                state.sink.exporter_name()
            ),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    match state.registry.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                controller_kit::metrics::OPENMETRICS_CONTENT_TYPE,
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}
