//! Issue #29 item 1: a controller measured as users run it, a process of
//! the release binary talking HTTPS to `gpufleet sim serve` in another
//! process.
//!
//! Per run: wall time to the end state, the controller process's CPU
//! seconds (`/proc/<pid>/stat` utime + stime, read before it is stopped),
//! its peak RSS (`VmHWM`), and the API requests it sent by verb and
//! resource, from kube-sim's `kube_sim_user_requests_total`: the
//! controller authenticates with a ServiceAccount token of its own, so its
//! requests are counted apart from this driver's (which creates the work
//! and watches for the end). Requests are divided by the unit of work.
//!
//! Workloads:
//! * `tfjob`: `--jobs` TFJobs (default 100) of 1 Chief + 2 PS + 8 Workers
//!   created at once, Chief and Workers exiting 0 after `--run-seconds`
//!   (default 20); the end is every job Succeeded. `--qps Q --burst B`
//!   set the operator's client limits (upstream's defaults are QPS 20,
//!   burst 30); without them it runs without client-side limits.
//! * `tfjob-referee`: the same workload through Kubeflow training-operator
//!   v1.9.3 (the referee, docs/tfjob-referee.md; started as the referee
//!   test starts it, from `crates/tfjob/tests/it/referee_process.rs`) and
//!   through ours, each leg on a fresh `sim serve`: the referee at its
//!   defaults (QPS 20, burst 30, the same as `--qps 20 --burst 30`), ours
//!   at the referee's limits, ours at its own default (no client limit).
//!   Reports the medians of each leg and ours / theirs.
//! * `mokka`: `--nodes` eligible Nodes (default 1,000) present before the
//!   inventory (one group of racks of 100 Nodes x 1 GPU, upstream's KWOK
//!   profile); the end is every Node carrying its assignment.
//! * `mokka-trickle`: the inventory first, the controller idle, then
//!   `--nodes` Nodes created one by one, `--gap-ms` (default 5) apart.
//! * `gpuid`: `--pods` device-plugin pods (default 500), each on its own
//!   Node and answering `nvidia-smi -q -x` with the 8-GPU H100 capture
//!   (serials and UUIDs made unique per pod) through `sim serve
//!   --exec-rules`; gpuid at its defaults (QPS 50, burst 100, stdout
//!   exporter). The end is every GPU on gpuid's stdout.
//!
//! Run: `cargo bench -p gpufleet --bench controller_process -- WORKLOAD
//! [--runs 3] [--jobs 100] [--run-seconds 20] [--qps 20 --burst 30]
//! [--nodes 1000] [--gap-ms 5] [--pods 500] [--release-binary|--full-binary]`.
//! Each run starts a fresh `sim serve`. The controller runs as its own
//! binary (`gpufleet-gpuid`, `gpufleet-mokka`, `gpufleet-tfjob`) built in
//! the `controller` profile, as the charts deploy it: the bench has cargo
//! build it first (a no-op when it is current), so it never measures a
//! stale one. `--release-binary` runs the same binary in the release
//! profile (the one `cargo bench` built), `--full-binary` `gpufleet
//! <controller>`.

mod bench_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Node, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::config::Kubeconfig;
use serde_json::json;

use bench_support::{client, load, median};
use tfjob::api::TFJobObject;

// Shared with the referee test, so the bench starts training-operator as
// that test does; the test's own constants are not all used here.
#[allow(dead_code)]
#[path = "../../tfjob/tests/it/referee_process.rs"]
mod referee_process;

const WORK_NAMESPACE: &str = "bench";
const CONTROLLER_NAMESPACE: &str = "bench-controller";
const CONTROLLER_ACCOUNT: &str = "controller";
/// Nodes for the pods, with room for all of them.
const NODES: usize = 20;
const PODS_PER_NODE: usize = 250;

#[derive(Clone)]
struct Args {
    workload: String,
    /// TFJob only: run training-operator instead of ours.
    referee: bool,
    jobs: usize,
    nodes: usize,
    gap_ms: u64,
    pods: usize,
    runs: usize,
    run_seconds: u64,
    limit: Option<(f64, u32)>,
    /// Run the controller as `gpufleet <controller>` instead of its own
    /// binary (`gpufleet-<controller>`), to compare the two.
    full_binary: bool,
    release_binary: bool,
    /// The controller's binary in the `controller` profile, built at start.
    shipped: Option<PathBuf>,
}

const WORKLOADS: [&str; 5] = ["tfjob", "tfjob-referee", "mokka", "mokka-trickle", "gpuid"];

fn parse_args() -> Args {
    let mut args = Args {
        workload: String::new(),
        referee: false,
        jobs: 100,
        nodes: 1000,
        gap_ms: 5,
        pods: 500,
        runs: 3,
        run_seconds: 20,
        limit: None,
        full_binary: false,
        release_binary: false,
        shipped: None,
    };
    let mut qps = None;
    let mut burst = 10;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match arg.as_str() {
            "--jobs" => args.jobs = value().parse().unwrap_or(args.jobs),
            "--nodes" => args.nodes = value().parse().unwrap_or(args.nodes),
            "--gap-ms" => args.gap_ms = value().parse().unwrap_or(args.gap_ms),
            "--pods" => args.pods = value().parse().unwrap_or(args.pods),
            "--runs" => args.runs = value().parse().unwrap_or(args.runs),
            "--run-seconds" => args.run_seconds = value().parse().unwrap_or(args.run_seconds),
            "--qps" => qps = value().parse().ok(),
            "--burst" => burst = value().parse().unwrap_or(burst),
            "--full-binary" => args.full_binary = true,
            "--release-binary" => args.release_binary = true,
            workload if WORKLOADS.contains(&workload) => args.workload = arg,
            // cargo bench passes --bench; anything else is ignored.
            _ => {}
        }
    }
    args.limit = qps.map(|qps| (qps, burst));
    args
}

// --- processes ------------------------------------------------------------------

/// The release binary cargo built for this bench.
fn gpufleet() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_gpufleet"))
}

/// The binary that runs `controller` and the arguments that select it: its
/// own binary, which links only that controller (the shipped build unless
/// `--release-binary`), or `gpufleet` with `--full-binary`.
fn controller_binary<'a>(controller: &'a str, args: &Args) -> (PathBuf, Vec<&'a str>) {
    if args.full_binary {
        return (gpufleet(), vec![controller]);
    }
    if let Some(shipped) = &args.shipped {
        return (shipped.clone(), Vec::new());
    }
    let own = match controller {
        "gpuid" => env!("CARGO_BIN_EXE_gpufleet-gpuid"),
        "tfjob" => env!("CARGO_BIN_EXE_gpufleet-tfjob"),
        _ => env!("CARGO_BIN_EXE_gpufleet-mokka"),
    };
    (PathBuf::from(own), Vec::new())
}

/// The controller binaries a workload runs.
fn workload_controller(workload: &str) -> &'static str {
    match workload {
        "gpuid" => "gpuid",
        "tfjob" | "tfjob-referee" => "tfjob",
        _ => "mokka",
    }
}

/// `gpufleet-<controller>` in the `controller` profile (Cargo.toml), built by
/// cargo now; its path from cargo's own report of the artifact.
fn shipped_binary(controller: &str) -> PathBuf {
    let name = format!("gpufleet-{controller}");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    eprintln!("building {name} in the controller profile (cargo build --profile controller)");
    let output = Command::new(cargo)
        .current_dir(workspace)
        .args([
            "build",
            "--profile",
            "controller",
            "-p",
            "gpufleet",
            "--bin",
        ])
        .arg(&name)
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo build --profile controller --bin {name} failed"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reported no executable for {name}"))
}

/// A port free on loopback now (gpuid takes no port 0).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port on loopback")
}

/// A child process killed when dropped.
struct Process {
    child: Child,
    name: &'static str,
    log: PathBuf,
}

impl Process {
    /// Starts `command` with its stderr in `log` and its stdout dropped.
    fn spawn(name: &'static str, command: &mut Command, log: &Path) -> Process {
        Process::spawn_with_stdout(name, command, log, Stdio::null())
    }

    fn spawn_with_stdout(
        name: &'static str,
        command: &mut Command,
        log: &Path,
        stdout: Stdio,
    ) -> Process {
        let log_file =
            std::fs::File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let child = command
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Process {
            child,
            name,
            log: log.to_path_buf(),
        }
    }

    /// User + system CPU seconds so far.
    fn cpu_seconds(&self) -> f64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // After the ")" closing the command name, utime and stime are the
        // 12th and 13th fields (fields 14 and 15 of proc(5)), in ticks of
        // USER_HZ (100 on Linux).
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
        match (ticks(11), ticks(12)) {
            (Some(user), Some(system)) => (user + system) / 100.0,
            _ => panic!(
                "{}: no CPU times in /proc/{}/stat",
                self.name,
                self.child.id()
            ),
        }
    }

    /// Peak resident set size in MiB.
    fn peak_rss_mib(&self) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|kib| kib / 1024.0)
            .unwrap_or_else(|| {
                panic!(
                    "{}: no VmHWM in /proc/{}/status",
                    self.name,
                    self.child.id()
                )
            })
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// The last lines of its stderr.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gpufleet sim serve` on a free port, with `extra` arguments; its
/// kubeconfig names the port.
fn start_sim(dir: &Path, extra: &[String]) -> (Process, PathBuf) {
    let kubeconfig = dir.join("admin.kubeconfig");
    let mut sim = Process::spawn(
        "sim serve",
        Command::new(gpufleet())
            .args(["sim", "serve", "--port", "0", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(extra),
        &dir.join("sim.log"),
    );
    let started = Instant::now();
    while !kubeconfig.exists() {
        assert!(!sim.exited(), "sim serve exited: {}", sim.log_tail());
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "sim serve wrote no kubeconfig within 30 s; see {}",
            dir.join("sim.log").display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (sim, kubeconfig)
}

/// A ServiceAccount bound to cluster-admin, and a kubeconfig with its
/// token: the controller's requests are then counted under its own user.
async fn controller_kubeconfig(admin: &kube::Client, admin_kubeconfig: &Path) -> PathBuf {
    let pp = PostParams::default();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for name in [CONTROLLER_NAMESPACE, WORK_NAMESPACE] {
        let namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        namespaces.create(&pp, &namespace).await.expect("namespace");
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), CONTROLLER_NAMESPACE);
    let account =
        serde_json::from_value(json!({"metadata": {"name": CONTROLLER_ACCOUNT}})).unwrap();
    accounts
        .create(&pp, &account)
        .await
        .expect("ServiceAccount");
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "bench-controller"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": CONTROLLER_ACCOUNT, "namespace": CONTROLLER_NAMESPACE}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&pp, &binding)
        .await
        .expect("ClusterRoleBinding");
    let token = accounts
        .create_token_request(CONTROLLER_ACCOUNT, &pp, &TokenRequest::default())
        .await
        .expect("TokenRequest")
        .status
        .expect("a token")
        .token;
    let mut config = Kubeconfig::read_from(admin_kubeconfig).expect("admin kubeconfig");
    for named in &mut config.auth_infos {
        if let Some(user) = named.auth_info.as_mut() {
            user.token = Some(token.clone().into());
        }
    }
    // JSON is YAML: kube and client-go read it as a kubeconfig.
    let path = admin_kubeconfig.with_file_name("controller.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&config).expect("kubeconfig JSON"))
        .expect("writing the controller's kubeconfig");
    path
}

fn controller_user() -> String {
    format!("system:serviceaccount:{CONTROLLER_NAMESPACE}:{CONTROLLER_ACCOUNT}")
}

/// `kube_sim_user_requests_total` of `user`, by (verb, resource).
async fn requests_of(admin: &kube::Client, user: &str) -> BTreeMap<(String, String), u64> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    let text = admin.request_text(request).await.expect("/metrics answers");
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("kube_sim_user_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split("\",")
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        if label("user").as_deref() != Some(user) {
            continue;
        }
        let (Some(verb), Some(resource), Ok(value)) = (
            label("verb"),
            label("resource"),
            value.trim().parse::<u64>(),
        ) else {
            continue;
        };
        counts.insert((verb, resource), value);
    }
    counts
}

const WRITE_VERBS: [&str; 6] = [
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "apply",
];

// --- the TFJob workload ------------------------------------------------------------

async fn prepare_nodes(admin: &kube::Client) {
    let nodes: Api<Node> = Api::all(admin.clone());
    for i in 0..NODES {
        let pods = PODS_PER_NODE.to_string();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("node-{i:03}")},
            "status": {
                "capacity": {"cpu": "1000", "memory": "4Ti", "pods": pods},
                "allocatable": {"cpu": "1000", "memory": "4Ti", "pods": pods},
            }
        }))
        .unwrap();
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
    }
}

fn succeeded(job: &TFJobObject) -> bool {
    job.status
        .get("conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Succeeded" && c["status"] == "True")
        })
}

struct RunResult {
    seconds: f64,
    /// TFJob: from the first create until every pod has been Running.
    running_seconds: Option<f64>,
    cpu_seconds: f64,
    peak_rss_mib: f64,
    /// (verb, resource) → requests per unit of work.
    per_unit: BTreeMap<(String, String), f64>,
}

impl RunResult {
    fn writes_per_unit(&self) -> f64 {
        self.per_unit
            .iter()
            .filter(|((verb, _), _)| WRITE_VERBS.contains(&verb.as_str()))
            .map(|(_, n)| n)
            .sum()
    }

    fn event_writes_per_unit(&self) -> f64 {
        self.per_unit
            .iter()
            .filter(|((verb, resource), _)| {
                WRITE_VERBS.contains(&verb.as_str()) && resource == "events"
            })
            .map(|(_, n)| n)
            .sum()
    }
}

async fn prepare_tfjob(admin: &kube::Client) {
    Api::<CustomResourceDefinition>::all(admin.clone())
        .create(&PostParams::default(), &tfjob::api::crd())
        .await
        .expect("TFJob CRD");
    prepare_nodes(admin).await;
    let jobs: Api<TFJobObject> = Api::namespaced(admin.clone(), WORK_NAMESPACE);
    while jobs.list(&ListParams::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates the jobs and waits until every one Succeeded; returns the
/// seconds from the first create until every pod had been Running.
async fn drive_tfjob(args: &Args, admin: &kube::Client, controller: &mut Process) -> f64 {
    let started = Instant::now();
    let jobs: Api<TFJobObject> = Api::namespaced(admin.clone(), WORK_NAMESPACE);
    for i in 0..args.jobs {
        jobs.create(
            &PostParams::default(),
            &tfjob::fixtures::eleven_replica_job(
                &format!("job-{i:04}"),
                WORK_NAMESPACE,
                args.run_seconds,
            ),
        )
        .await
        .expect("TFJob create");
    }
    let limit = Duration::from_secs(600 + 2 * args.run_seconds);
    // Chief and Workers exit after --run-seconds, possibly before the last
    // pod starts at a low QPS, so "all Running" is every pod having been
    // seen Running (or past it) once, remembered by UID.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), WORK_NAMESPACE);
    let all_pods = args.jobs * 11;
    let seen = parking_lot::Mutex::new(std::collections::HashSet::new());
    let running_at = parking_lot::Mutex::new(None::<f64>);
    wait_until("every job Succeeded", limit, controller, || async {
        if running_at.lock().is_none() {
            let list = pods.list(&ListParams::default()).await.expect("pod list");
            let mut seen = seen.lock();
            for pod in list.items {
                let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
                if matches!(phase.as_str(), "Running" | "Succeeded" | "Failed")
                    && let Some(uid) = pod.metadata.uid
                {
                    seen.insert(uid);
                }
            }
            if seen.len() >= all_pods {
                *running_at.lock() = Some(started.elapsed().as_secs_f64());
            }
        }
        let list = jobs.list(&ListParams::default()).await.expect("TFJob list");
        list.items.iter().filter(|job| succeeded(job)).count() == args.jobs
    })
    .await;
    // Succeeded needs every Chief pod to have run, so a poll that missed
    // the last start is bounded by the end.
    running_at
        .into_inner()
        .unwrap_or_else(|| started.elapsed().as_secs_f64())
}

// --- the Mokka workloads -------------------------------------------------------------

const NODES_PER_RACK: usize = 100;

/// Mokka's CRDs and namespace, and profile `bench` of racks of 100 Nodes x
/// 1 GPU.
async fn prepare_mokka(admin: &kube::Client) {
    let pp = PostParams::default();
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for crd in mokka::crds() {
        crds.create(&pp, &crd).await.expect("Mokka CRD");
    }
    let namespace = serde_json::from_value(json!({"metadata": {"name": "mokka-system"}})).unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &namespace)
        .await
        .expect("namespace");
    let racks: Api<mokka::api::SGPURack> = Api::all(admin.clone());
    while racks.list(&ListParams::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let profile = mokka::api::SGPURackProfile::new(
        "bench",
        mokka::fixtures::example_profile_spec(NODES_PER_RACK as i32, 1),
    );
    Api::<mokka::api::SGPURackProfile>::all(admin.clone())
        .create(&pp, &profile)
        .await
        .expect("profile");
}

fn mokka_node(i: usize) -> Node {
    serde_json::from_value(json!({"metadata": {"name": format!("node-{i:06}"),
        "labels": {"mokka.nvidia.com/sgpu-node": "true", "pool": "bench"}}}))
    .expect("a valid Node")
}

async fn create_inventory(admin: &kube::Client, nodes: usize) {
    let inventory: mokka::api::SGPUInventory = serde_json::from_value(json!({
        "apiVersion": "mokka.nvidia.com/v1alpha1", "kind": "SGPUInventory", "metadata": {"name": "bench"},
        "spec": {"rackGroups": [{"id": "compute", "count": nodes.div_ceil(NODES_PER_RACK), "profileRef": {"name": "bench"},
            "placement": {"nodeSelector": {"matchLabels": {"pool": "bench"}}}}]}
    }))
    .expect("a valid inventory");
    Api::<mokka::api::SGPUInventory>::all(admin.clone())
        .create(&PostParams::default(), &inventory)
        .await
        .expect("inventory");
}

async fn create_nodes_at_once(admin: &kube::Client, nodes: usize) {
    let api: Api<Node> = Api::all(admin.clone());
    futures::stream::iter(0..nodes)
        .for_each_concurrent(32, |i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &mokka_node(i))
                    .await
                    .expect("node");
            }
        })
        .await;
}

/// Waits until every Node carries Mokka's assignment annotation.
async fn wait_assigned(admin: &kube::Client, nodes: usize, controller: &mut Process) {
    let api: Api<Node> = Api::all(admin.clone());
    let limit = Duration::from_secs(900);
    wait_until("every Node assigned", limit, controller, || async {
        let list = api.list(&ListParams::default()).await.expect("Node list");
        let assigned = list
            .items
            .iter()
            .filter(|node| {
                node.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key("mokka.nvidia.com/sgpu-assignment"))
            })
            .count();
        assigned == nodes
    })
    .await;
}

// --- the gpuid workload ---------------------------------------------------------------

const DEVICE_PLUGIN_NAMESPACE: &str = "gpu-operator";
const GPUS_PER_POD: usize = 8;
const H100: &str = include_str!("../../gpuid/tests/fixtures/hardware/h100.xml");

/// The exec rules `sim serve` answers `nvidia-smi -q -x` with: pod `i`
/// gets the H100 capture with its own serials and UUIDs. Returns the
/// rules file.
fn write_exec_rules(dir: &Path, pods: usize) -> PathBuf {
    let mut rules = String::new();
    for i in 0..pods {
        let capture = H100
            .replace("<serial>1650", &format!("<serial>{i:04}"))
            .replace("-0000-0000-0000-", &format!("-{i:04x}-0000-0000-"));
        let file = format!("smi-{i:05}.xml");
        std::fs::write(dir.join(&file), capture).expect("writing a capture");
        rules.push_str(&format!(
            "- podSelector: app=nvidia-device-plugin-daemonset,gpu-set=set-{i}\n  command: [nvidia-smi, -q, -x]\n  stdoutFile: {file}\n"
        ));
    }
    let path = dir.join("exec-rules.yaml");
    std::fs::write(&path, rules).expect("writing the exec rules");
    path
}

/// A Node and a device-plugin pod bound to it for each of `pods`; kube-sim's
/// kubelet runs them.
async fn prepare_device_plugins(admin: &kube::Client, pods: usize) {
    let pp = PostParams::default();
    let namespace =
        serde_json::from_value(json!({"metadata": {"name": DEVICE_PLUGIN_NAMESPACE}})).unwrap();
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &namespace)
        .await
        .expect("namespace");
    let nodes: Api<Node> = Api::all(admin.clone());
    let pod_api: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(admin.clone(), DEVICE_PLUGIN_NAMESPACE);
    futures::stream::iter(0..pods)
        .for_each_concurrent(32, |i| {
            let (nodes, pod_api) = (nodes.clone(), pod_api.clone());
            async move {
                let node_name = format!("gpu-node-{i:05}");
                // gpuid names a machine by its providerID.
                let node: Node = serde_json::from_value(json!({"metadata": {"name": node_name},
                    "spec": {"providerID": format!("aws:///us-east-1a/i-{i:017x}")}}))
                .expect("a valid Node");
                nodes.create(&PostParams::default(), &node).await.expect("node");
                let pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("nvidia-device-plugin-{i:05}"),
                        "labels": {"app": "nvidia-device-plugin-daemonset", "gpu-set": format!("set-{i}")}},
                    "spec": {"nodeName": node_name,
                        "containers": [{"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]},
                }))
                .expect("a valid pod");
                pod_api.create(&PostParams::default(), &pod).await.expect("pod");
            }
        })
        .await;
    let limit = Duration::from_secs(300);
    let started = Instant::now();
    loop {
        let list = pod_api
            .list(&ListParams::default())
            .await
            .expect("pod list");
        let ready = list
            .items
            .iter()
            .filter(|pod| {
                pod.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready == pods {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "{ready} of {pods} device-plugin pods Ready"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Reads gpuid's stdout records until every GPU of every pod was exported.
async fn wait_exported(gpus: usize, controller: &mut Process) {
    let stdout = controller
        .child
        .stdout
        .take()
        .expect("gpuid's stdout is piped");
    let (seen_tx, seen_rx) = std::sync::mpsc::channel::<usize>();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut uuids = std::collections::HashSet::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let Ok(record) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if record["kind"] == "gpu"
                && let Some(uuid) = record["uuid"].as_str()
                && uuids.insert(uuid.to_string())
                && seen_tx.send(uuids.len()).is_err()
            {
                return;
            }
        }
    });
    let seen = std::sync::atomic::AtomicUsize::new(0);
    wait_until(
        "every GPU exported",
        Duration::from_secs(600),
        controller,
        || {
            while let Ok(count) = seen_rx.try_recv() {
                seen.store(count, std::sync::atomic::Ordering::Relaxed);
            }
            let done = seen.load(std::sync::atomic::Ordering::Relaxed) >= gpus;
            async move { done }
        },
    )
    .await;
}

// --- one run -------------------------------------------------------------------------

/// Polls `done` every 500 ms until it holds; fails the bench when the
/// controller exits or `limit` passes.
async fn wait_until<F, Fut>(what: &str, limit: Duration, controller: &mut Process, done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        assert!(
            !controller.exited(),
            "{} exited before {what}; its log ends:\n{}",
            controller.name,
            controller.log_tail()
        );
        assert!(started.elapsed() < limit, "not {what} within {limit:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The controller's request counts once they have stopped changing for
/// 2 s: the writes that follow the end state (a job's clean-up and Events,
/// a rack's last status) are part of the work. Lease renewals go on for as
/// long as a leader runs, so they do not count as change.
async fn settled_requests(admin: &kube::Client) -> BTreeMap<(String, String), u64> {
    let without_leases = |requests: &BTreeMap<(String, String), u64>| {
        requests
            .iter()
            .filter(|((_, resource), _)| resource != "leases")
            .map(|(key, n)| (key.clone(), *n))
            .collect::<BTreeMap<_, _>>()
    };
    let mut requests = requests_of(admin, &controller_user()).await;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = requests_of(admin, &controller_user()).await;
        if without_leases(&now) == without_leases(&requests) {
            return now;
        }
        requests = now;
    }
}

fn controller_command(args: &Args, kubeconfig: &Path) -> (&'static str, Command) {
    let controller = workload_controller(&args.workload);
    let (binary, selector) = controller_binary(controller, args);
    let mut command = wrapped(binary);
    command.args(selector);
    if args.workload == "gpuid" {
        // gpuid's configuration is its environment, as upstream's.
        command
            .arg("run")
            .env_clear()
            // Only for a profiler wrapping the binary, which is a script.
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            // mimalloc's own tuning (MIMALLOC_*), for memory experiments.
            .envs(std::env::vars().filter(|(name, _)| name.starts_with("MIMALLOC_")))
            .env("KUBECONFIG", kubeconfig)
            .env("CLUSTER_NAME", "bench")
            .env("SERVER_PORT", free_port().to_string())
            .env("LOG_LEVEL", "info");
        if let Some((qps, burst)) = args.limit {
            command
                .env("QPS", qps.to_string())
                .env("BURST", burst.to_string());
        }
        ("gpufleet gpuid", command)
    } else if args.workload == "tfjob" {
        command.arg("--kubeconfig").arg(kubeconfig).args([
            "--leader-elect=false",
            "--metrics-bind-address",
            "127.0.0.1:0",
        ]);
        if let Some((qps, burst)) = args.limit {
            command.args(["--qps", &qps.to_string(), "--burst", &burst.to_string()]);
        }
        ("gpufleet tfjob", command)
    } else {
        command.arg("--kubeconfig").arg(kubeconfig).args([
            "--listen-addr",
            "127.0.0.1:0",
            "--leader-election-namespace",
            "mokka-system",
        ]);
        if let Some((qps, burst)) = args.limit {
            command.args([
                "--kube-api-qps",
                &qps.to_string(),
                "--kube-api-burst",
                &burst.to_string(),
            ]);
        }
        ("gpufleet mokka", command)
    }
}

/// `binary`, or `binary` under the profiler named by
/// `GPUFLEET_BENCH_WRAP` (for example `heaptrack -o /tmp/gpuid`): a run for
/// a profile, whose CPU and RSS columns then describe the wrapper.
fn wrapped(binary: PathBuf) -> Command {
    let wrapper = std::env::var("GPUFLEET_BENCH_WRAP").unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(binary);
            command
        }
        None => Command::new(binary),
    }
}

async fn run(args: &Args, dir: &Path) -> RunResult {
    let sim_args = if args.workload == "gpuid" {
        let rules = write_exec_rules(dir, args.pods);
        vec!["--exec-rules".to_string(), rules.display().to_string()]
    } else {
        Vec::new()
    };
    let (_sim, admin_kubeconfig) = start_sim(dir, &sim_args);
    let admin = client(&admin_kubeconfig).await;
    let kubeconfig = controller_kubeconfig(&admin, &admin_kubeconfig).await;
    let log = dir.join("controller.log");
    let mut referee = None;
    let units = match args.workload.as_str() {
        "tfjob" if args.referee => {
            // Its own CRD (upstream's, from the manifests) and webhook;
            // its requests go under the controller's token.
            let mut extra_args = Vec::new();
            if let Some((qps, burst)) = args.limit {
                extra_args.push(format!("--kube-api-qps={qps}"));
                extra_args.push(format!("--kube-api-burst={burst}"));
            }
            let child = referee_process::start_referee(referee_process::RefereeStart {
                admin: admin.clone(),
                admin_kubeconfig: &admin_kubeconfig,
                operator_kubeconfig: &kubeconfig,
                log: &log,
                extra_args,
            })
            .await;
            referee = Some(Process {
                child,
                name: "training-operator",
                log: log.clone(),
            });
            prepare_nodes(&admin).await;
            let jobs: Api<TFJobObject> = Api::namespaced(admin.clone(), WORK_NAMESPACE);
            while jobs.list(&ListParams::default()).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            args.jobs
        }
        "tfjob" => {
            prepare_tfjob(&admin).await;
            args.jobs
        }
        "mokka" => {
            prepare_mokka(&admin).await;
            create_nodes_at_once(&admin, args.nodes).await;
            create_inventory(&admin, args.nodes).await;
            args.nodes
        }
        "gpuid" => {
            prepare_device_plugins(&admin, args.pods).await;
            args.pods
        }
        _ => {
            prepare_mokka(&admin).await;
            create_inventory(&admin, args.nodes).await;
            args.nodes
        }
    };
    let mut controller = match referee {
        Some(referee) => referee,
        None => {
            let (name, mut command) = controller_command(args, &kubeconfig);
            let stdout = if args.workload == "gpuid" {
                Stdio::piped()
            } else {
                Stdio::null()
            };
            Process::spawn_with_stdout(name, &mut command, &log, stdout)
        }
    };
    eprintln!("{} started; its log: {}", controller.name, log.display());

    let mut running_seconds = None;
    let started = match args.workload.as_str() {
        "tfjob" => {
            let started = Instant::now();
            running_seconds = Some(drive_tfjob(args, &admin, &mut controller).await);
            started
        }
        "mokka" => {
            let started = Instant::now();
            wait_assigned(&admin, args.nodes, &mut controller).await;
            started
        }
        "gpuid" => {
            let started = Instant::now();
            wait_exported(args.pods * GPUS_PER_POD, &mut controller).await;
            started
        }
        _ => {
            // The controller idle on the empty inventory first.
            settled_requests(&admin).await;
            let api: Api<Node> = Api::all(admin.clone());
            let started = Instant::now();
            for i in 0..args.nodes {
                api.create(&PostParams::default(), &mokka_node(i))
                    .await
                    .expect("node");
                tokio::time::sleep(Duration::from_millis(args.gap_ms)).await;
            }
            wait_assigned(&admin, args.nodes, &mut controller).await;
            started
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let requests = settled_requests(&admin).await;
    let cpu_seconds = controller.cpu_seconds();
    let peak_rss_mib = controller.peak_rss_mib();
    let per_unit = requests
        .into_iter()
        .map(|(key, n)| (key, n as f64 / units as f64))
        .collect();
    RunResult {
        seconds,
        running_seconds,
        cpu_seconds,
        peak_rss_mib,
        per_unit,
    }
}

// --- report ------------------------------------------------------------------------

/// One controller configuration of a run: a label and the arguments.
struct Leg {
    label: String,
    args: Args,
}

/// `tfjob-referee`: training-operator at its defaults, ours at the same
/// limits, ours at its own default; otherwise the one leg asked for.
fn legs(args: &Args) -> Vec<Leg> {
    if args.workload != "tfjob-referee" {
        let limit = args.limit.map_or(
            "the controller's default client limits".to_string(),
            |(q, b)| format!("QPS {q} / burst {b}"),
        );
        return vec![Leg {
            label: limit,
            args: args.clone(),
        }];
    }
    // training-operator v1.9.3's own defaults (`--help`): QPS 20, burst 30.
    let same = args.limit.unwrap_or((20.0, 30));
    let tfjob = |referee: bool, limit: Option<(f64, u32)>| Args {
        workload: "tfjob".to_string(),
        referee,
        limit,
        ..args.clone()
    };
    vec![
        Leg {
            label: match args.limit {
                None => "training-operator, its defaults (QPS 20 / burst 30)".to_string(),
                Some((q, b)) => format!("training-operator, QPS {q} / burst {b}"),
            },
            args: tfjob(true, args.limit),
        },
        Leg {
            label: format!("ours, QPS {} / burst {}", same.0, same.1),
            args: tfjob(false, Some(same)),
        },
        Leg {
            label: "ours, its default (no client limit)".to_string(),
            args: tfjob(false, None),
        },
    ]
}

fn median_row(results: &[RunResult]) -> [f64; 6] {
    let of = |f: &dyn Fn(&RunResult) -> f64| median(results.iter().map(f).collect());
    [
        of(&|r| r.running_seconds.unwrap_or(f64::NAN)),
        of(&|r| r.seconds),
        of(&|r| r.cpu_seconds),
        of(&|r| r.peak_rss_mib),
        of(&RunResult::writes_per_unit),
        of(&RunResult::event_writes_per_unit),
    ]
}

fn main() {
    let mut args = parse_args();
    if args.workload.is_empty() {
        eprintln!(
            "usage: cargo bench -p gpufleet --bench controller_process -- {} [--runs N] [--jobs N] [--run-seconds S] [--qps Q --burst B] [--nodes N] [--gap-ms MS] [--release-binary|--full-binary]",
            WORKLOADS.join("|")
        );
        return;
    }
    if !args.full_binary && !args.release_binary {
        args.shipped = Some(shipped_binary(workload_controller(&args.workload)));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let (what, unit) = match args.workload.as_str() {
        "tfjob" | "tfjob-referee" => (
            format!("{} TFJobs of 1 Chief + 2 PS + 8 Workers", args.jobs),
            "job",
        ),
        "mokka" => (
            format!("{} Nodes present before the inventory", args.nodes),
            "Node",
        ),
        "gpuid" => (
            format!(
                "{} device-plugin pods of {GPUS_PER_POD} GPUs, time to every GPU exported",
                args.pods
            ),
            "pod",
        ),
        _ => (
            format!(
                "{} Nodes arriving one by one, {} ms apart, after the inventory",
                args.nodes, args.gap_ms
            ),
            "Node",
        ),
    };
    // Without --qps each controller keeps its own default: none for the
    // TFJob operator, upstream's QPS 50 / burst 100 for Mokka and gpuid.
    let legs = legs(&args);
    println!("{}: {what}, {} runs", args.workload, args.runs);
    println!(
        "| controller | run | all pods Running | end state | controller CPU | controller peak RSS | API writes per {unit} (Events) | UTC start | load before / after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut results: Vec<Vec<RunResult>> = legs.iter().map(|_| Vec::new()).collect();
    // The legs take turns within a run number, so each sees the same load
    // from other work on the machine as nearly as can be.
    for run_number in 1..=args.runs {
        for (leg, results) in legs.iter().zip(&mut results) {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let before = load();
            let at = jiff::Timestamp::now().strftime("%H:%M:%S").to_string();
            let result = runtime.block_on(run(&leg.args, dir.path()));
            println!(
                "| {} | {run_number} | {} | {:.1} s | {:.2} s | {:.1} MiB | {:.3} ({:.3}) | {at} | {before} / {} |",
                leg.label,
                result
                    .running_seconds
                    .map_or("-".to_string(), |s| format!("{s:.1} s")),
                result.seconds,
                result.cpu_seconds,
                result.peak_rss_mib,
                result.writes_per_unit(),
                result.event_writes_per_unit(),
                load()
            );
            results.push(result);
        }
    }
    let medians: Vec<[f64; 6]> = results.iter().map(|r| median_row(r)).collect();
    println!(
        "\n| controller | all pods Running | end state | CPU | peak RSS | API writes per {unit} (Events) |"
    );
    println!("|---|---|---|---|---|---|");
    for (leg, m) in legs.iter().zip(&medians) {
        println!(
            "| **median** {} | {:.1} s | {:.1} s | {:.2} s | {:.1} MiB | {:.3} ({:.3}) |",
            leg.label, m[0], m[1], m[2], m[3], m[4], m[5]
        );
    }
    if args.workload == "tfjob-referee" {
        // Ours over theirs: below 1 is ours doing less.
        for (leg, m) in legs.iter().zip(&medians).skip(1) {
            let theirs = &medians[0];
            let ratio = |i: usize| m[i] / theirs[i];
            println!(
                "| ratio {} / training-operator | {:.2}x | {:.2}x | {:.2}x | {:.2}x | {:.2}x ({:.2}x) |",
                leg.label,
                ratio(0),
                ratio(1),
                ratio(2),
                ratio(3),
                ratio(4),
                ratio(5)
            );
        }
    }
    for (leg, results) in legs.iter().zip(&results) {
        if let Some(last) = results.last() {
            println!(
                "\n{}: requests per {unit} in the last run, by verb and resource:",
                leg.label
            );
            for ((verb, resource), n) in &last.per_unit {
                println!("  {verb:>16} {resource:<28} {n:.3}");
            }
        }
    }
}
