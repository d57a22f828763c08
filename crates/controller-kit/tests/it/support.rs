//! Shared fixtures: a client that records every mutating request, and a replica harness
//! running a Manager with one ConfigMap controller.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use controller_kit::caches::ObjectEvent;
use controller_kit::{
    Action, CachedStore, Controller, LeaderElectionConfig, Manager, ManagerConfig, ManagerError,
    MetricsRegistry, Readiness, ReconcileFailure, StoreOptions,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NAMESPACE: &str = "work";
pub const LEASE: &str = "test-lease";
pub const RECONCILED_BY: &str = "gpufleet.test/reconciled-by";
pub const LEASE_DURATION: Duration = Duration::from_secs(2);
pub const RETRY_PERIOD: Duration = Duration::from_millis(250);

/// Every non-GET request a client sent, as "METHOD /path".
#[derive(Clone, Default)]
pub struct MutationLog(Arc<Mutex<Vec<String>>>);

impl MutationLog {
    pub fn all(&self) -> Vec<String> {
        self.0.lock().clone()
    }

    pub fn matching(&self, fragment: &str) -> Vec<String> {
        self.all()
            .into_iter()
            .filter(|entry| entry.contains(fragment))
            .collect()
    }
}

/// Wraps `inner` so every mutating request is recorded before it is sent.
pub fn recording_client(inner: kube::Client) -> (kube::Client, MutationLog) {
    let log = MutationLog::default();
    let recorder = log.clone();
    let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let recorder = recorder.clone();
        async move {
            if request.method() != http::Method::GET {
                recorder
                    .0
                    .lock()
                    .push(format!("{} {}", request.method(), request.uri().path()));
            }
            inner.send(request).await
        }
    });
    (kube::Client::new(service, "default"), log)
}

pub async fn start_sim() -> kube_sim::KubeSim {
    let sim = kube_sim::KubeSim::builder()
        .start()
        .await
        .expect("kube-sim starts");
    let namespaces: Api<Namespace> = Api::all(sim.client());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(NAMESPACE.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace created");
    sim
}

pub async fn create_config_map(client: &kube::Client, name: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let config_map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    };
    api.create(&PostParams::default(), &config_map)
        .await
        .expect("configmap created");
}

pub async fn reconciled_by(client: &kube::Client, name: &str) -> Option<String> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let config_map = api.get(name).await.expect("configmap readable");
    config_map
        .metadata
        .annotations
        .and_then(|annotations| annotations.get(RECONCILED_BY).cloned())
}

pub fn election(identity: &str, release_on_cancel: bool) -> LeaderElectionConfig {
    LeaderElectionConfig {
        identity: identity.to_string(),
        lease_duration: LEASE_DURATION,
        renew_deadline: Duration::from_millis(1500),
        retry_period: RETRY_PERIOD,
        release_on_cancel,
        ..LeaderElectionConfig::new(NAMESPACE, LEASE)
    }
}

/// Reconciles that finished: the key and the lease holder read right after.
pub type FinishedLog = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// One replica: a Manager with a ConfigMap cache and a controller that annotates every
/// ConfigMap with the identity of the leader that reconciled it.
pub struct Replica {
    pub identity: String,
    pub readiness: Readiness,
    pub config_maps: CachedStore<ConfigMap>,
    pub mutations: MutationLog,
    pub metrics: MetricsRegistry,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), ManagerError>>,
    /// Keys whose reconcile finished, with the lease holder read right after.
    pub finished: FinishedLog,
}

pub struct ReplicaOptions {
    pub release_on_cancel: bool,
    /// Reconciling a ConfigMap with this name takes this long (ignoring cancellation).
    pub slow_key: Option<(String, Duration)>,
}

impl Default for ReplicaOptions {
    fn default() -> Self {
        Self {
            release_on_cancel: true,
            slow_key: None,
        }
    }
}

pub fn start_replica(sim: &kube_sim::KubeSim, identity: &str, options: ReplicaOptions) -> Replica {
    let (client, mutations) = recording_client(sim.client());
    let metrics = MetricsRegistry::new();
    let config = ManagerConfig {
        drain_timeout: Duration::from_secs(10),
        ..ManagerConfig::new(election(identity, options.release_on_cancel))
    };
    let mut manager = Manager::new(client.clone(), config, &metrics).expect("valid manager config");
    let config_maps = manager
        .caches()
        .add(
            "configmaps",
            Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE),
            watcher::Config::default(),
            StoreOptions::default(),
        )
        .expect("store added before run");
    let finished = Arc::new(Mutex::new(Vec::new()));
    let reconcile = {
        let client = client.clone();
        let identity = identity.to_string();
        let finished = Arc::clone(&finished);
        let slow_key = options.slow_key.clone();
        move |key: String, _cancel: CancellationToken| {
            let client = client.clone();
            let identity = identity.clone();
            let finished = Arc::clone(&finished);
            let slow_key = slow_key.clone();
            async move {
                if let Some((slow, delay)) = slow_key
                    && slow == key
                {
                    tokio::time::sleep(delay).await;
                }
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
                let patch =
                    serde_json::json!({"metadata": {"annotations": {RECONCILED_BY: identity}}});
                api.patch(&key, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(PatchFailed)?;
                let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                    Api::namespaced(client, NAMESPACE);
                let holder = leases
                    .get(LEASE)
                    .await
                    .ok()
                    .and_then(|lease| lease.spec.and_then(|spec| spec.holder_identity));
                finished.lock().push((key, holder));
                Ok::<_, PatchFailed>(Action::AwaitChange)
            }
        }
    };
    let controller = Controller::new("configmaps", reconcile).workers(2).watches(
        &config_maps,
        |event, enqueue| {
            if let ObjectEvent::Applied(config_map) = event {
                let done = config_map
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|annotations| annotations.contains_key(RECONCILED_BY));
                if !done && let Some(name) = config_map.metadata.name.clone() {
                    enqueue.add(name);
                }
            }
        },
    );
    manager.add(controller);
    let readiness = manager.readiness();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(manager.run(shutdown.clone()));
    Replica {
        identity: identity.to_string(),
        readiness,
        config_maps,
        mutations,
        metrics,
        shutdown,
        task,
        finished,
    }
}

impl Replica {
    pub async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(20), self.task).await;
        assert!(
            matches!(result, Ok(Ok(Ok(())))),
            "manager {} stopped cleanly",
            self.identity
        );
    }
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if condition().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The one failure of the test controllers: a ConfigMap patch the server refused.
#[derive(Debug, thiserror::Error)]
#[error("patching configmap: {0}")]
pub struct PatchFailed(#[source] pub kube::Error);

impl ReconcileFailure for PatchFailed {
    fn metric_label(&self) -> &'static str {
        "patch_configmap"
    }
}
