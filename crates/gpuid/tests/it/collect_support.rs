//! A simulated GPU fleet for the collector tests: GPU nodes, device-plugin
//! pods, and nvidia-smi answering with fixture captures.
//!
//! On the default lane the fleet is kube-sim with an exec handler. With
//! `GPUFLEET_TEST_CLUSTER=real` it is the real control plane of
//! `scripts/real-cluster.sh`: the Nodes are KWOK's fake Nodes, each
//! device-plugin pod gets a KWOK `Exec` that runs the lane's nvidia-smi shim
//! with the pod's Node name, the shim prints `<exec dir>/<node>.xml` (hangs
//! while `<node>.hang` exists) and appends a line to `<node>.log` per call,
//! and the collector runs with the restricted kubeconfig of deploy/gpuid's
//! ServiceAccount, so its RBAC is what a cluster enforces.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gpuid::collect::node_state::NodeKeys;
use gpuid::collect::{CollectorRuntime, CollectorSettings, Election, RecordSink};
use gpuid::config::{ExporterConfig, ExporterIdentity};
use gpuid::export::{ExportPipeline, PipelineConfig, StdoutExporter};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_sim::exec::ExecMatcher;
use kube_sim::{ExecOutput, ExecRequest, KubeSim, KubeletConfig};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NAMESPACE: &str = "gpu-operator";
pub const CONTAINER: &str = "nvidia-device-plugin";
pub const SELECTOR: &str = "app=nvidia-device-plugin-daemonset";
pub const PREFIX: &str = "gpuid.gpufleet.dev";
/// Where deploy/gpuid lets the collector hold its Lease.
pub const LEASE_NAMESPACE: &str = "gpuid";
/// Every test Node carries it; the real lane's clean-up selects by it.
const NODE_LABEL: &str = "nvidia.com/gpu.present";

/// What a node's nvidia-smi answers.
#[derive(Clone)]
pub enum Answer {
    Xml(Vec<u8>),
    Hang,
}

/// A fixture capture with its GPU UUIDs made unique to `tag`, so captures
/// shared by several nodes still describe different GPUs.
pub fn capture(path: &str, tag: &str) -> Vec<u8> {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let xml = std::fs::read_to_string(full).unwrap();
    xml.replace("<uuid>GPU-", &format!("<uuid>GPU-{tag}-"))
        .into_bytes()
}

/// Removes the last `<gpu …>…</gpu>` element of a capture.
pub fn without_last_gpu(xml: &[u8]) -> Vec<u8> {
    let text = String::from_utf8(xml.to_vec()).unwrap();
    let start = text.rfind("<gpu id=").unwrap();
    let end = start + text[start..].find("</gpu>").unwrap() + "</gpu>".len();
    format!("{}{}", &text[..start], &text[end..]).into_bytes()
}

pub struct Fleet {
    /// kube-sim on the default lane (held so the server lives as long as
    /// the fleet); None on the real lane.
    pub sim: Option<KubeSim>,
    /// The test's own client (cluster admin on the real lane).
    pub client: kube::Client,
    /// What the collector runs with: deploy/gpuid's ServiceAccount on the
    /// real lane, the same as `client` on kube-sim.
    pub collector_client: kube::Client,
    /// The real lane's exec directory (captures, hang markers, call logs).
    exec_dir: Option<std::path::PathBuf>,
    /// The real lane's cluster-admin kubeconfig, for kubectl.
    pub admin_kubeconfig: Option<std::path::PathBuf>,
    pub answers: Arc<Mutex<HashMap<String, Answer>>>,
    pub execs: Arc<AtomicUsize>,
    /// Execs per node name.
    pub execs_by_node: Arc<Mutex<HashMap<String, usize>>>,
}

impl Fleet {
    pub async fn start() -> Fleet {
        Fleet::start_with_latency(Duration::ZERO).await
    }

    pub async fn start_with_latency(latency: Duration) -> Fleet {
        match kube_sim::lane::Lane::from_env().unwrap() {
            kube_sim::lane::Lane::Sim => Fleet::start_sim(latency).await,
            kube_sim::lane::Lane::Real(cluster) => {
                assert!(latency.is_zero(), "exec latency is a kube-sim-only knob");
                Fleet::start_real(cluster).await
            }
        }
    }

    /// The kube-sim this fleet runs on (tests of kube-sim-only knobs).
    pub fn sim(&self) -> &KubeSim {
        self.sim
            .as_ref()
            .expect("a kube-sim-only test ran on the real lane")
    }

    async fn start_real(cluster: kube_sim::lane::RealCluster) -> Fleet {
        let client = kube_sim::lane::client_from_kubeconfig(&cluster.admin_kubeconfig)
            .await
            .unwrap();
        let collector_client =
            kube_sim::lane::client_from_kubeconfig(&cluster.service_account_kubeconfig("gpuid"))
                .await
                .unwrap();
        let exec_dir = cluster.dir.join("exec");
        let fleet = Fleet {
            sim: None,
            client,
            collector_client,
            exec_dir: Some(exec_dir),
            admin_kubeconfig: Some(cluster.admin_kubeconfig.clone()),
            answers: Arc::default(),
            execs: Arc::default(),
            execs_by_node: Arc::default(),
        };
        fleet.clean_real_cluster().await;
        fleet
    }

    /// The real lane is shared by the tests (run one at a time): each starts
    /// from no test Nodes, pods, Execs, Leases or exec files.
    async fn clean_real_cluster(&self) {
        let exec_dir = self.exec_dir.as_ref().unwrap();
        for entry in std::fs::read_dir(exec_dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                std::fs::remove_file(&path).unwrap();
            }
        }
        let by_label = kube::api::ListParams::default().labels(NODE_LABEL);
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .delete_collection(&DeleteParams::default(), &by_label)
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &Default::default(),
        )
        .await
        .unwrap();
        kube_sim::lane::kwok_execs(&self.client, NAMESPACE)
            .delete_collection(&DeleteParams::default(), &Default::default())
            .await
            .unwrap();
        for namespace in [NAMESPACE, LEASE_NAMESPACE] {
            let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                Api::namespaced(self.client.clone(), namespace);
            leases
                .delete_collection(&DeleteParams::default(), &Default::default())
                .await
                .unwrap();
        }
        eventually("the previous test's Nodes and pods to be gone", || async {
            let nodes_left = nodes.list(&by_label).await.unwrap().items.len();
            let pods_left = pods.list(&Default::default()).await.unwrap().items.len();
            (nodes_left == 0 && pods_left == 0).then_some(())
        })
        .await;
    }

    async fn start_sim(latency: Duration) -> Fleet {
        let answers: Arc<Mutex<HashMap<String, Answer>>> = Arc::default();
        let execs = Arc::new(AtomicUsize::new(0));
        let execs_by_node: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let handler = {
            let answers = Arc::clone(&answers);
            let execs = Arc::clone(&execs);
            let execs_by_node = Arc::clone(&execs_by_node);
            move |request: ExecRequest| {
                execs.fetch_add(1, Ordering::SeqCst);
                if let Some(node) = request.node_name() {
                    *execs_by_node.lock().entry(node.to_owned()).or_default() += 1;
                }
                let answer = request
                    .node_name()
                    .and_then(|node| answers.lock().get(node).cloned());
                async move {
                    if !latency.is_zero() {
                        tokio::time::sleep(latency).await;
                    }
                    match answer {
                        Some(Answer::Xml(xml)) => ExecOutput::stdout(xml),
                        Some(Answer::Hang) => std::future::pending().await,
                        None => ExecOutput::failure(9, "NVIDIA-SMI has failed"),
                    }
                }
            }
        };
        let sim = KubeSim::builder()
            .kubelet(KubeletConfig {
                lease_renew_interval: Duration::from_secs(3600),
                stop_delay: Duration::from_millis(20),
                ..KubeletConfig::default()
            })
            .exec_handler(
                ExecMatcher::any()
                    .container(CONTAINER)
                    .command(["nvidia-smi", "-q", "-x"]),
                handler,
            )
            .start()
            .await
            .unwrap();
        let client = sim.http_client().unwrap();
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for name in [NAMESPACE, LEASE_NAMESPACE] {
            let namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            let _ = namespaces.create(&PostParams::default(), &namespace).await;
        }
        Fleet {
            sim: Some(sim),
            collector_client: client.clone(),
            client,
            exec_dir: None,
            admin_kubeconfig: None,
            answers,
            execs,
            execs_by_node,
        }
    }

    /// nvidia-smi calls on `node`'s device-plugin pods so far.
    pub fn execs_on(&self, node: &str) -> usize {
        match &self.exec_dir {
            None => self.execs_by_node.lock().get(node).copied().unwrap_or(0),
            Some(dir) => std::fs::read_to_string(dir.join(format!("{node}.log")))
                .map(|log| log.lines().count())
                .unwrap_or(0),
        }
    }

    /// nvidia-smi calls on every node so far.
    pub fn exec_count(&self) -> usize {
        match &self.exec_dir {
            None => self.execs.load(Ordering::SeqCst),
            Some(dir) => std::fs::read_dir(dir)
                .unwrap()
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
                .map(|path| std::fs::read_to_string(path).unwrap().lines().count())
                .sum(),
        }
    }

    pub fn answer(&self, node: &str, answer: Answer) {
        match &self.exec_dir {
            None => {
                self.answers.lock().insert(node.to_owned(), answer);
            }
            Some(dir) => {
                let hang = dir.join(format!("{node}.hang"));
                match answer {
                    Answer::Xml(xml) => {
                        std::fs::write(dir.join(format!("{node}.xml")), xml).unwrap();
                        let _ = std::fs::remove_file(hang);
                    }
                    Answer::Hang => std::fs::write(hang, b"").unwrap(),
                }
            }
        }
    }

    pub async fn add_node(&self, name: &str) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {NODE_LABEL: "true"},
                         // KWOK manages the Node on the real lane.
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"providerID": format!("kind://docker/fleet/{name}")},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }

    /// A device-plugin pod bound to `node`; kube-sim's kubelet or KWOK runs
    /// it. On the real lane a KWOK Exec named like the pod first tells the
    /// nvidia-smi shim which Node's capture to print.
    pub async fn add_plugin_pod(&self, name: &str, node: &str) {
        if let Some(dir) = &self.exec_dir {
            let dir = dir.display().to_string();
            let exec: kube::api::DynamicObject = serde_json::from_value(json!({
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Exec",
                "metadata": {"name": name, "namespace": NAMESPACE},
                "spec": {"execs": [{"local": {"workDir": dir, "envs": [
                    {"name": "GPUFLEET_EXEC_NODE", "value": node},
                    {"name": "GPUFLEET_EXEC_POD", "value": name},
                    {"name": "GPUFLEET_REAL_EXEC_DIR", "value": dir}
                ]}}]}
            }))
            .unwrap();
            kube_sim::lane::kwok_execs(&self.client, NAMESPACE)
                .create(&PostParams::default(), &exec)
                .await
                .unwrap();
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        let pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "nvidia-device-plugin-daemonset"}},
            "spec": {"nodeName": node, "containers": [{"name": CONTAINER, "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }

    pub async fn delete_pod(&self, name: &str) {
        if self.exec_dir.is_some() {
            kube_sim::lane::kwok_execs(&self.client, NAMESPACE)
                .delete(name, &DeleteParams::default())
                .await
                .unwrap();
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), NAMESPACE);
        pods.delete(name, &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
        eventually("the pod to be gone", || async {
            pods.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }

    pub async fn node(&self, name: &str) -> Node {
        Api::<Node>::all(self.client.clone())
            .get(name)
            .await
            .unwrap()
    }

    pub async fn node_labels(&self, name: &str) -> std::collections::BTreeMap<String, String> {
        let mut labels = self.node(name).await.metadata.labels.unwrap_or_default();
        labels.retain(|key, _| key.starts_with(PREFIX));
        labels
    }

    pub async fn annotation(&self, node: &str, name: &str) -> Option<String> {
        self.node(node)
            .await
            .metadata
            .annotations
            .unwrap_or_default()
            .get(&state_keys().state_annotation(name))
            .cloned()
    }
}

pub fn settings(workers: usize) -> CollectorSettings {
    CollectorSettings {
        cluster: "test-cluster".into(),
        namespaces: vec![NAMESPACE.into()],
        label_selector: SELECTOR.into(),
        container: CONTAINER.into(),
        workers,
        timeout: Duration::from_secs(5),
        resync: Duration::ZERO,
        heartbeat: Duration::from_secs(24 * 3600),
        label_prefix: PREFIX.into(),
        output_limit: 4 * 1024 * 1024,
        collector_version: "test".into(),
        exporter: ExporterIdentity::of(&ExporterConfig::Stdout),
        upstream_labels: true,
    }
}

/// The names of the state [`settings`] keeps on Nodes (the stdout exporter's).
pub fn state_keys() -> NodeKeys {
    NodeKeys::new(PREFIX, &ExporterIdentity::of(&ExporterConfig::Stdout))
}

/// An in-memory writer the stdout exporter writes NDJSON into.
#[derive(Clone, Default)]
pub struct Buffer(pub Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    pub fn lines(&self) -> Vec<Value> {
        String::from_utf8(self.0.lock().clone())
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// Exported records (lines of `kind` `gpu`).
    pub fn records(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|line| line["kind"] == "gpu")
            .collect()
    }

    /// Change events, as (kind, gpu_key).
    pub fn events(&self) -> Vec<(String, String)> {
        let mut events: Vec<(String, String)> = self
            .lines()
            .into_iter()
            .filter(|line| line["kind"] != "gpu")
            .filter_map(|line| {
                Some((
                    line.get("kind")?.as_str()?.to_owned(),
                    line.get("gpu_key")?.as_str()?.to_owned(),
                ))
            })
            .collect();
        events.sort();
        events
    }
}

/// A running collector replica exporting to an in-memory stdout exporter.
pub struct Replica {
    pub buffer: Buffer,
    pub runtime_metrics: gpuid::collect::CollectorMetrics,
    pub readiness: controller_kit::Readiness,
    pub router: axum::Router,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Replica {
    pub async fn start(fleet: &Fleet, settings: CollectorSettings, election: Election) -> Replica {
        let buffer = Buffer::default();
        let exporter = StdoutExporter::new(Box::new(buffer.clone()));
        let pipeline = ExportPipeline::start(exporter, quick_batches());
        Replica::start_with_sink(fleet, settings, election, Arc::new(pipeline), buffer).await
    }

    /// A replica exporting into `sink` (`buffer` stays empty unless it is the sink's).
    pub async fn start_with_sink(
        fleet: &Fleet,
        settings: CollectorSettings,
        election: Election,
        sink: Arc<dyn RecordSink>,
        buffer: Buffer,
    ) -> Replica {
        let runtime = CollectorRuntime::new(
            fleet.collector_client.clone(),
            settings,
            election,
            sink,
            controller_kit::MetricsRegistry::new(),
        )
        .unwrap();
        let shutdown = CancellationToken::new();
        let runtime_metrics = runtime.metrics.clone();
        let readiness = runtime.readiness.clone();
        let router = runtime.admin_router();
        let task = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                runtime.run(shutdown).await.unwrap();
            })
        };
        Replica {
            buffer,
            runtime_metrics,
            readiness,
            router,
            shutdown,
            task,
        }
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }

    pub async fn readyz(&self) -> (u16, String) {
        self.admin_get("/readyz").await
    }

    /// GET on the admin router (`/healthz`, `/readyz`, `/metrics`).
    pub async fn admin_get(&self, path: &str) -> (u16, String) {
        use tower::ServiceExt;
        let response = self
            .router
            .clone()
            .oneshot(
                axum::http::Request::get(path)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

/// Batches sealed after 50 ms, so tests see exports quickly.
pub fn quick_batches() -> PipelineConfig {
    PipelineConfig {
        max_batch_age: Duration::from_millis(50),
        ..PipelineConfig::default()
    }
}

/// Polls `check` until it returns Some (30 s at most).
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
