//! The test cluster and helpers. `test_cluster` is the only place that
//! decides which API server the suite talks to: kube-sim by default, or
//! the cluster of the kubeconfig in `TFJOB_TEST_KUBECONFIG` (the
//! real-cluster lane; its Nodes must run pods, e.g. KWOK ones).

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use tfjob::api::{JobStatus, TFJobObject};
use tfjob::run::{Operator, OperatorConfig};
use tokio_util::sync::CancellationToken;

/// A cluster for one test, with its own namespace.
pub struct TestCluster {
    pub client: kube::Client,
    pub namespace: String,
    _sim: Option<kube_sim::KubeSim>,
}

/// The cluster and namespace a test runs in; the CRD from the Rust types
/// is installed. Switch here, nowhere else.
pub async fn test_cluster(namespace: &str) -> TestCluster {
    let (client, sim) = match std::env::var("TFJOB_TEST_KUBECONFIG") {
        Ok(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .unwrap();
            (kube::Client::try_from(config).unwrap(), None)
        }
        Err(_) => {
            let sim = kube_sim::KubeSim::builder().start().await.unwrap();
            let client = sim.client();
            create_node(&client, "tfjob-node-1").await;
            (client, Some(sim))
        }
    };
    install_crd(&client).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating namespace {namespace}: {error}"),
    }
    TestCluster {
        client,
        namespace: namespace.to_string(),
        _sim: sim,
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

async fn create_node(client: &kube::Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"capacity": {"cpu": "256", "memory": "1Ti", "pods": "500"}}
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
}

/// A running operator replica watching one namespace.
pub struct RunningOperator {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl RunningOperator {
    /// Stops the replica and waits until it has released its Lease.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

/// Starts an operator replica scoped to the test's namespace and waits until
/// it leads with synced caches.
pub async fn start_operator(cluster: &TestCluster) -> RunningOperator {
    let mut config = OperatorConfig::new(cluster.namespace.clone());
    config.namespace = Some(cluster.namespace.clone());
    let operator = Operator::new(cluster.client.clone(), config).unwrap();
    let readiness = operator.readiness();
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
    RunningOperator { shutdown, task }
}

/// Polls `check` until it holds (30 s at most).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting until {what}");
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
pub async fn wait_for_condition(cluster: &TestCluster, name: &str, type_: &str) -> JobStatus {
    eventually(&format!("{name} is {type_}"), || async {
        true_types(&status(cluster, name).await)
            .iter()
            .any(|t| t == type_)
    })
    .await;
    status(cluster, name).await
}

/// Pods of job `name`, by name with their UIDs, sorted.
pub async fn job_pods(cluster: &TestCluster, name: &str) -> Vec<(String, String)> {
    let list = pods(cluster)
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap(), p.metadata.uid.unwrap()))
        .collect();
    out.sort();
    out
}

/// Services of job `name`, by name with their UIDs, sorted.
pub async fn job_services(cluster: &TestCluster, name: &str) -> Vec<(String, String)> {
    let list = services(cluster)
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .unwrap();
    let mut out: Vec<(String, String)> = list
        .items
        .into_iter()
        .map(|s| (s.metadata.name.unwrap(), s.metadata.uid.unwrap()))
        .collect();
    out.sort();
    out
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

/// Whether pod `name` is in phase `phase`.
pub async fn pod_phase(cluster: &TestCluster, name: &str) -> Option<String> {
    pods(cluster)
        .get_opt(name)
        .await
        .unwrap()
        .and_then(|p| p.status)
        .and_then(|s| s.phase)
}
