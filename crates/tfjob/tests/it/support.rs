//! The test cluster and helpers. `test_cluster` is the only place that
//! decides which API server the suite talks to, from the one lane switch
//! `GPUFLEET_TEST_CLUSTER` (`kube_sim::lane::Lane::from_env`): kube-sim in
//! the test's process by default, or the real control plane of
//! `scripts/real-cluster.sh` (`real`), whose KWOK stages end containers by
//! the same pod annotations as kube-sim's kubelet.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_sim::lane::Lane;
use serde_json::{Value, json};
use tfjob::api::{JobStatus, PodGroupApi, PodGroupObject, TFJobObject};
use tfjob::run::{Operator, OperatorConfig};
use tokio_util::sync::CancellationToken;

/// Every namespace a test makes carries it, so the real lane's clean-up
/// finds what earlier runs left.
const TEST_NAMESPACE_LABEL: &str = "tfjob.gpufleet.dev/e2e";
/// The namespace of deploy/tfjob (its ServiceAccount and Lease Role).
const OPERATOR_NAMESPACE: &str = "kubeflow";
/// The Node every test's pods land on (a KWOK fake Node on the real lane).
const NODE_NAME: &str = "tfjob-node-1";

/// A cluster for one test, with its own namespace.
pub struct TestCluster {
    /// The test's own client (cluster admin on the real lane).
    pub client: kube::Client,
    pub namespace: String,
    /// What the operator runs with: on the real lane deploy/tfjob's
    /// ServiceAccount, so its RBAC is what the API server enforces; on
    /// kube-sim the same as `client`.
    operator_client: kube::Client,
    /// Where the operator's Lease lives (deploy/tfjob grants leases in
    /// `kubeflow` only); its name is the test's namespace, unique per test.
    lease_namespace: String,
    sim: Option<kube_sim::KubeSim>,
    /// The kubeconfig (YAML) of `client`, for outside clients.
    pub kubeconfig: String,
}

impl TestCluster {
    /// kube-sim, for the tests of kube-sim-only knobs (fault injection);
    /// such tests live outside the `*_e2e` modules.
    pub fn sim(&self) -> &kube_sim::KubeSim {
        self.sim
            .as_ref()
            .expect("a kube-sim-only test ran on the real lane")
    }

    /// Runs the operators started from now on over kube-sim's loopback socket,
    /// the client stack of a deployed operator (kube's retry layer included),
    /// instead of in-process. kube-sim only.
    pub fn operator_on_loopback(&mut self) {
        self.operator_client = self
            .sim()
            .http_client()
            .expect("kube-sim's loopback client");
    }

    /// The namespace of the operator's Lease (named after [`Self::namespace`]).
    pub fn lease_namespace(&self) -> &str {
        &self.lease_namespace
    }

    /// kube-sim on its lane, `None` on the real lane: for an extra check
    /// of an end-to-end test that only kube-sim can show (its request
    /// counters).
    pub fn kube_sim(&self) -> Option<&kube_sim::KubeSim> {
        self.sim.as_ref()
    }
}

/// `prefix` plus a random suffix: reruns against a cluster that lives on
/// (the real lane) never meet an earlier run's objects.
fn unique_name(prefix: &str) -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{prefix}-{:08x}", hasher.finish() as u32)
}

/// The cluster and a fresh namespace `<prefix>-<random>` a test runs in;
/// the CRD from the Rust types is installed. Switch here, nowhere else.
pub async fn test_cluster(prefix: &str) -> TestCluster {
    let lane = Lane::from_env().unwrap_or_else(|error| panic!("{error}"));
    let (client, operator_client, sim, kubeconfig) = match &lane {
        Lane::Real(cluster) => {
            let kubeconfig =
                std::fs::read_to_string(&cluster.admin_kubeconfig).unwrap_or_else(|error| {
                    panic!("reading the real lane's admin kubeconfig: {error}")
                });
            let client = kube_sim::lane::client_from_kubeconfig(&cluster.admin_kubeconfig)
                .await
                .unwrap_or_else(|error| panic!("{error}"));
            let operator_client = kube_sim::lane::client_from_kubeconfig(
                &cluster.service_account_kubeconfig("tfjob"),
            )
            .await
            .unwrap_or_else(|error| {
                panic!("{error} (deploy/tfjob's ServiceAccount; `scripts/real-cluster.sh up` writes it)")
            });
            remove_earlier_test_namespaces(&client).await;
            (client, operator_client, None, kubeconfig)
        }
        Lane::Sim => {
            let sim = kube_sim::KubeSim::builder().start().await.unwrap();
            let kubeconfig = sim.kubeconfig();
            (sim.client(), sim.client(), Some(sim), kubeconfig)
        }
    };
    ensure_node(&client).await;
    install_crd(&client).await;
    let namespace = unique_name(prefix);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {
        "name": namespace,
        "labels": {TEST_NAMESPACE_LABEL: "true"},
    }}))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|error| panic!("creating namespace {namespace}: {error}"));
    if lane.is_real() {
        // The ServiceAccount admission plugin refuses pods until the
        // controller-manager has made the namespace's `default` account.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
        eventually("the namespace's default ServiceAccount exists", || async {
            accounts.get_opt("default").await.ok().flatten().is_some()
        })
        .await;
    }
    TestCluster {
        client,
        lease_namespace: if lane.is_real() {
            OPERATOR_NAMESPACE.to_string()
        } else {
            namespace.clone()
        },
        namespace,
        operator_client,
        sim,
        kubeconfig,
    }
}

/// The real lane is shared by every test and every run: the namespaces of
/// earlier tests (and their pods, on the one KWOK Node) go first.
async fn remove_earlier_test_namespaces(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let earlier = ListParams::default().labels(TEST_NAMESPACE_LABEL);
    for namespace in namespaces.list(&earlier).await.unwrap().items {
        let name = namespace.metadata.name.unwrap_or_default();
        if namespace.metadata.deletion_timestamp.is_none() {
            match namespaces.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => panic!("deleting the earlier test namespace {name}: {error}"),
            }
        }
    }
}

async fn install_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds
        .create(&PostParams::default(), &tfjob::api::crd())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("the generated CRD is refused: {error}"),
    }
    // Served once the CRD is established.
    let jobs: Api<TFJobObject> = Api::all(client.clone());
    eventually("the tfjobs resource is served", || async {
        jobs.list(&ListParams::default()).await.is_ok()
    })
    .await;
}

/// One Node with room for every test's pods, untainted so the job
/// manifests need no toleration; KWOK manages it by its annotation, kube-sim
/// simulates it as it does every Node.
async fn ensure_node(client: &kube::Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    if nodes.get_opt(NODE_NAME).await.unwrap().is_some() {
        return;
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {
            "name": NODE_NAME,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"kubernetes.io/hostname": NODE_NAME, "type": "kwok"},
        },
        "status": {
            "capacity": {"cpu": "256", "memory": "1Ti", "pods": "500"},
            "allocatable": {"cpu": "256", "memory": "1Ti", "pods": "500"},
        }
    }))
    .unwrap();
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating Node {NODE_NAME}: {error}"),
    }
}

/// A running operator replica.
pub struct RunningOperator {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    registry: controller_kit::MetricsRegistry,
    /// The replica's role and whether its workers run.
    pub readiness: controller_kit::Readiness,
}

impl RunningOperator {
    /// Stops the replica and waits until it has released its Lease.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }

    /// Reconcile passes so far (the reconcile histogram's count).
    pub fn reconciles(&self) -> u64 {
        metric_value(
            &self.registry.encode().unwrap(),
            "training_operator_reconcile_duration_seconds_count",
        )
        .map_or(0, |v| v as u64)
    }

    /// The value of the first sample whose name and labels start with
    /// `series` in the replica's `/metrics` text.
    pub fn metric(&self, series: &str) -> Option<f64> {
        metric_value(&self.registry.encode().unwrap(), series)
    }
}

fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(series))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
}

/// The end-to-end tests' pacing of pod re-creation: 1 s doubling to 4 s
/// (the operator's default is 10 s to 360 s; unit tests pin that), so a
/// test of three failures takes seconds, not a minute.
pub fn fast_backoff() -> tfjob::plan::failures::Backoff {
    tfjob::plan::failures::Backoff {
        base: Duration::from_secs(1),
        max: Duration::from_secs(4),
    }
}

/// Starts an operator replica scoped to the test's namespace and waits until
/// it leads with synced caches.
pub async fn start_operator(cluster: &TestCluster) -> RunningOperator {
    start_operator_with(cluster, |_| {}).await
}

/// [`start_operator`] with the settings changed by `configure` (after the
/// test defaults: the namespace scope and [`fast_backoff`]).
pub async fn start_operator_with(
    cluster: &TestCluster,
    configure: impl FnOnce(&mut OperatorConfig),
) -> RunningOperator {
    let mut config = OperatorConfig::new(cluster.lease_namespace.clone());
    config.election.name = cluster.namespace.clone();
    config.namespace = Some(cluster.namespace.clone());
    config.plan.backoff = fast_backoff();
    configure(&mut config);
    let operator = Operator::new(cluster.operator_client.clone(), config).unwrap();
    let readiness = operator.readiness();
    let registry = operator.registry();
    let shutdown = CancellationToken::new();
    let task = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { operator.run(shutdown).await.unwrap() })
    };
    tokio::time::timeout(
        Duration::from_secs(30),
        readiness.wait_for(|s| s.is_ready()),
    )
    .await
    .expect("the operator becomes ready");
    RunningOperator {
        shutdown,
        task,
        registry,
        readiness,
    }
}

/// Polls `check` until it holds (30 s at most).
pub async fn eventually<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually_within(Duration::from_secs(30), what, check).await;
}

/// Polls `check` until it holds, `limit` at most.
pub async fn eventually_within<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting until {what}");
}

/// Merge-patches TFJob `name`'s spec with `spec` (a partial spec).
pub async fn patch_spec(cluster: &TestCluster, name: &str, spec: Value) {
    jobs(cluster)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

/// A replica spec of one `tensorflow` container under `restart_policy`;
/// `run_seconds` makes the simulated kubelet (kube-sim's, or KWOK's stages
/// on the real lane) end the container with `exit_code`, `None` keeps it
/// running like a parameter server.
pub fn replica_with(
    replicas: i32,
    run_seconds: Option<&str>,
    exit_code: i32,
    restart_policy: &str,
) -> Value {
    let mut spec = replica(replicas, run_seconds, exit_code);
    spec["restartPolicy"] = json!(restart_policy);
    spec
}

/// A replica spec of one `tensorflow` container; `run_seconds` makes
/// kube-sim's kubelet end the container (exit code `exit_code`), `None`
/// keeps it running like a parameter server.
pub fn replica(replicas: i32, run_seconds: Option<&str>, exit_code: i32) -> Value {
    let mut annotations = json!({"kube-sim.gpufleet.dev/exit-code": exit_code.to_string()});
    if let Some(seconds) = run_seconds {
        annotations["kube-sim.gpufleet.dev/run-seconds"] = json!(seconds);
    }
    json!({
        "replicas": replicas,
        "restartPolicy": "Never",
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]}
        }
    })
}

pub fn jobs(cluster: &TestCluster) -> Api<TFJobObject> {
    Api::namespaced(cluster.client.clone(), &cluster.namespace)
}

pub fn pods(cluster: &TestCluster) -> Api<Pod> {
    Api::namespaced(cluster.client.clone(), &cluster.namespace)
}

pub fn services(cluster: &TestCluster) -> Api<Service> {
    Api::namespaced(cluster.client.clone(), &cluster.namespace)
}

/// Creates TFJob `name` with `tfReplicaSpecs`.
pub async fn create_job(cluster: &TestCluster, name: &str, spec: Value) {
    let job: TFJobObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": cluster.namespace},
        "spec": spec,
    }))
    .unwrap();
    jobs(cluster)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
}

pub async fn status(cluster: &TestCluster, name: &str) -> JobStatus {
    jobs(cluster).get(name).await.unwrap().status()
}

/// The types of conditions with status True.
pub fn true_types(status: &JobStatus) -> Vec<String> {
    status
        .conditions
        .iter()
        .filter(|c| c.status == "True")
        .map(|c| c.type_.clone())
        .collect()
}

/// Waits until the job has a True condition of `type_`.
/// The first status read in which condition `type_` is true: that status
/// itself, not a later read (a passing condition such as Restarting may be
/// gone again by then).
pub async fn wait_for_condition(cluster: &TestCluster, name: &str, type_: &str) -> JobStatus {
    let seen = std::sync::Mutex::new(None);
    eventually(&format!("{name} is {type_}"), || async {
        let current = status(cluster, name).await;
        let matched = true_types(&current).iter().any(|t| t == type_);
        if matched {
            *seen.lock().unwrap() = Some(current);
        }
        matched
    })
    .await;
    let matched = seen.lock().unwrap().take();
    matched.expect("eventually returned after a matching status")
}

/// Children of job `name` in `api` (by its `job-name` label), by name with
/// their UIDs, sorted.
async fn children<K>(api: Api<K>, name: &str) -> Vec<(String, String)>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = api
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .iter()
        .map(|child| {
            let meta = child.meta();
            (
                meta.name.clone().unwrap_or_default(),
                meta.uid.clone().unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Pods of job `name`, by name with their UIDs, sorted.
pub async fn job_pods(cluster: &TestCluster, name: &str) -> Vec<(String, String)> {
    children(pods(cluster), name).await
}

/// Services of job `name`, by name with their UIDs, sorted.
pub async fn job_services(cluster: &TestCluster, name: &str) -> Vec<(String, String)> {
    children(services(cluster), name).await
}

/// A job's conditions as (type, status, reason), in list order.
pub fn condition_triples(status: &JobStatus) -> Vec<(String, String, String)> {
    status
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// How many Events about the job have `reason` (series count included).
pub async fn event_count(cluster: &TestCluster, reason: &str) -> i32 {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(cluster.client.clone(), &cluster.namespace);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count.max(1)))
        .sum()
}

/// The notes of the Events about the job with `reason`, each as often as
/// its series counts.
pub async fn event_notes(cluster: &TestCluster, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let mut notes = Vec::new();
    for event in events.list(&ListParams::default()).await.unwrap().items {
        if event.reason.as_deref() != Some(reason) {
            continue;
        }
        let count = event.series.as_ref().map_or(1, |s| s.count.max(1));
        for _ in 0..count {
            notes.push(event.note.clone().unwrap_or_default());
        }
    }
    notes
}

/// The children the Events with `reason` report, one entry per report:
/// the operator lists all the children of one pass in one Event ("Created
/// pods: a-ps-0, a-worker-0"), so its notes are split into names.
pub async fn reported_children(cluster: &TestCluster, reason: &str) -> Vec<String> {
    event_notes(cluster, reason)
        .await
        .iter()
        .flat_map(|note| {
            let names = note.split_once(": ").map_or("", |(_, names)| names);
            names.split(", ").map(str::to_string).collect::<Vec<_>>()
        })
        .collect()
}

/// Whether pod `name` is in phase `phase`.
pub async fn pod_phase(cluster: &TestCluster, name: &str) -> Option<String> {
    pods(cluster)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|p| p.status)
        .and_then(|s| s.phase)
}

/// The PodGroup CRD of API `A`, as far as the operator and the tests use it.
pub async fn install_pod_group_crd<A: PodGroupApi>(cluster: &TestCluster) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("podgroups.{}", A::GROUP)},
        "spec": {
            "group": A::GROUP,
            "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup", "listKind": "PodGroupList"},
            "scope": "Namespaced",
            "versions": [{
                "name": A::VERSION, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("the PodGroup CRD is refused: {error}"),
    }
    let groups: Api<PodGroupObject<A>> = Api::all(cluster.client.clone());
    eventually("podgroups are served", || async {
        groups.list(&Default::default()).await.is_ok()
    })
    .await;
}

/// Binds pod `name` to the test Node, as a gang scheduler would.
pub async fn bind(cluster: &TestCluster, name: &str) {
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": NODE_NAME},
    });
    pods(cluster)
        .create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
        .unwrap_or_else(|error| panic!("binding {name}: {error}"));
}
