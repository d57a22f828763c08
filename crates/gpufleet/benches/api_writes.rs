//! Issue #29 item 4: kube-sim's write throughput against kube-apiserver +
//! etcd, the same workload against both in one run.
//!
//! kube-sim runs as users run it, `gpufleet sim serve --data-dir DIR` (the
//! release binary) in a process of its own, over HTTPS. kube-apiserver is
//! the real lane's (`scripts/real-cluster.sh up`, its admin kubeconfig in
//! `GPUFLEET_REAL_ADMIN_KUBECONFIG`, as `scripts/real-cluster.sh env`
//! exports it), with its etcd, kube-controller-manager, kube-scheduler and
//! KWOK running beside it as in the tests. Same durability: etcd there runs
//! with `--unsafe-no-fsync` and kube-sim's SQLite write-ahead log with
//! `synchronous=NORMAL`; both hand each acknowledged write to the operating
//! system without an fsync per write (a killed server loses nothing it
//! acknowledged, a power cut may).
//!
//! For each server, kind (ConfigMap, and a namespaced custom resource
//! with a structural schema) and number of writers (1 and 8), in a fresh
//! namespace: `--count` creates, then one JSON merge patch of each object,
//! then one server-side apply of each (field manager `bench`, forced),
//! while one watcher follows the namespace. A phase's rate is its writes
//! over the time from its first request to the last acknowledgement; the
//! watcher must have seen every write before the next phase starts. The
//! two servers take turns within each run, so both see the same load from
//! the rest of the machine as nearly as can be.
//!
//! Run: `cargo bench -p gpufleet --bench api_writes -- [--count 2000]
//! [--runs 3]` with the real lane up and its `env` exported.

mod bench_support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use bench_support::{client, load, median};

const GROUP: &str = "bench.gpufleet.dev";
const CRD_NAME: &str = "widgets.bench.gpufleet.dev";
/// About the size of a small controller-written ConfigMap.
const PAYLOAD_BYTES: usize = 256;

struct Args {
    count: usize,
    runs: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        count: 2000,
        runs: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match arg.as_str() {
            "--count" => args.count = value().parse().unwrap_or(args.count),
            "--runs" => args.runs = value().parse().unwrap_or(args.runs),
            // cargo bench passes --bench; anything else is ignored.
            _ => {}
        }
    }
    args
}

/// `gpufleet sim serve --data-dir`, killed when dropped.
struct SimServe {
    child: Child,
    kubeconfig: PathBuf,
    /// The data directory, the kubeconfig and the log live here.
    _dir: tempfile::TempDir,
}

impl SimServe {
    fn start() -> SimServe {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let kubeconfig = dir.path().join("admin.kubeconfig");
        let log = dir.path().join("sim.log");
        let child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["sim", "serve", "--port", "0", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the sim log"))
            .spawn()
            .expect("starting gpufleet sim serve");
        let mut sim = SimServe {
            child,
            kubeconfig,
            _dir: dir,
        };
        let started = Instant::now();
        while !sim.kubeconfig.exists() {
            let exited = matches!(sim.child.try_wait(), Ok(Some(_)));
            assert!(
                !exited && started.elapsed() < Duration::from_secs(30),
                "sim serve wrote no kubeconfig within 30 s; its log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sim
    }
}

impl Drop for SimServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn real_lane_kubeconfig() -> PathBuf {
    match std::env::var_os("GPUFLEET_REAL_ADMIN_KUBECONFIG") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => panic!(
            "GPUFLEET_REAL_ADMIN_KUBECONFIG is not set: this bench compares kube-sim with the real lane's kube-apiserver; run `scripts/real-cluster.sh up` and `eval \"$(scripts/real-cluster.sh env)\"` first"
        ),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    ConfigMap,
    Widget,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::ConfigMap => "ConfigMap",
            Kind::Widget => "custom resource",
        }
    }

    fn resource(self) -> ApiResource {
        match self {
            Kind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
            Kind::Widget => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(GROUP, "v1", "Widget"),
                "widgets",
            ),
        }
    }

    /// The object as created: `payload` of [`PAYLOAD_BYTES`] and a counter.
    fn object(self, name: &str) -> serde_json::Value {
        let payload = "x".repeat(PAYLOAD_BYTES);
        match self {
            Kind::ConfigMap => json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"payload": payload, "counter": "0"},
            }),
            Kind::Widget => json!({
                "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                "metadata": {"name": name},
                "spec": {"payload": payload, "counter": 0},
            }),
        }
    }

    fn merge_patch(self, i: usize) -> serde_json::Value {
        match self {
            Kind::ConfigMap => json!({"data": {"counter": (i + 1).to_string()}}),
            Kind::Widget => json!({"spec": {"counter": i + 1}}),
        }
    }

    /// What the `bench` field manager applies: a field of its own.
    fn applied(self, name: &str) -> serde_json::Value {
        match self {
            Kind::ConfigMap => json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name},
                "data": {"applied": "yes"},
            }),
            Kind::Widget => json!({
                "apiVersion": format!("{GROUP}/v1"), "kind": "Widget",
                "metadata": {"name": name},
                "spec": {"applied": "yes"},
            }),
        }
    }
}

/// The Widget CRD, established.
async fn install_crd(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "payload": {"type": "string"},
                    "counter": {"type": "integer"},
                    "applied": {"type": "string"},
                }}},
            }}}],
        },
    }))
    .expect("the CRD is valid");
    if crds.get_opt(CRD_NAME).await.expect("CRD get").is_none() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("CRD create");
    }
    let started = Instant::now();
    loop {
        let established = crds
            .get(CRD_NAME)
            .await
            .ok()
            .and_then(|crd| crd.status)
            .and_then(|status| status.conditions)
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        // Established is not yet served everywhere: list until it answers.
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &Kind::Widget.resource());
        if established && api.list(&ListParams::default().limit(1)).await.is_ok() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{CRD_NAME} was not established within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[derive(Clone, Copy)]
enum Phase {
    Create,
    MergePatch,
    Apply,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::Create, Phase::MergePatch, Phase::Apply];

    fn label(self) -> &'static str {
        match self {
            Phase::Create => "create",
            Phase::MergePatch => "merge patch",
            Phase::Apply => "server-side apply",
        }
    }
}

/// One request of `phase` on object `i`.
async fn write(api: &Api<DynamicObject>, kind: Kind, phase: Phase, i: usize) {
    let name = format!("w-{i:06}");
    let result = match phase {
        Phase::Create => {
            let object: DynamicObject =
                serde_json::from_value(kind.object(&name)).expect("the object is valid");
            api.create(&PostParams::default(), &object).await
        }
        Phase::MergePatch => {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(kind.merge_patch(i)),
            )
            .await
        }
        Phase::Apply => {
            api.patch(
                &name,
                &PatchParams::apply("bench").force(),
                &Patch::Apply(kind.applied(&name)),
            )
            .await
        }
    };
    if let Err(e) = result {
        panic!("{} of {name}: {e}", phase.label());
    }
}

/// Runs `phase` over `count` objects with `writers` concurrent writers
/// while a watcher follows; returns writes per second.
async fn phase(
    api: &Api<DynamicObject>,
    kind: Kind,
    phase: Phase,
    count: usize,
    writers: usize,
) -> f64 {
    let list = api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .expect("list for the watch's start");
    let from = list.metadata.resource_version.unwrap_or_default();
    let seen = Arc::new(AtomicUsize::new(0));
    let mut stream = api
        .watch(&WatchParams::default().timeout(290), &from)
        .await
        .expect("watch")
        .boxed();
    let watcher = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(event) = stream.next().await {
                match event {
                    Ok(kube::api::WatchEvent::Added(_) | kube::api::WatchEvent::Modified(_)) => {
                        if seen.fetch_add(1, Ordering::Relaxed) + 1 == count {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => panic!("the watch failed: {e}"),
                }
            }
        })
    };
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(writers) {
                write(&api, kind, phase, i).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("a writer");
    }
    let elapsed = started.elapsed();
    let _ = tokio::time::timeout(Duration::from_secs(60), watcher).await;
    assert_eq!(
        seen.load(Ordering::Relaxed),
        count,
        "the watcher saw every {}",
        phase.label()
    );
    count as f64 / elapsed.as_secs_f64()
}

/// The three phases in a fresh namespace; writes per second of each.
async fn one_set(
    client: &kube::Client,
    namespace: &str,
    kind: Kind,
    count: usize,
    writers: usize,
) -> [f64; 3] {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": namespace}})).expect("a namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("namespace {namespace}: {e}"));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &kind.resource());
    let mut rates = [0.0; 3];
    for (slot, p) in rates.iter_mut().zip(Phase::ALL) {
        *slot = phase(&api, kind, p, count, writers).await;
    }
    rates
}

fn main() {
    let args = parse_args();
    let real = real_lane_kubeconfig();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let sim = SimServe::start();
    let servers = runtime.block_on(async {
        let sim_client = client(&sim.kubeconfig).await;
        let real_client = client(&real).await;
        for c in [&sim_client, &real_client] {
            install_crd(c).await;
        }
        [("kube-sim", sim_client), ("kube-apiserver", real_client)]
    });
    let sets: Vec<(Kind, usize)> = [Kind::ConfigMap, Kind::Widget]
        .into_iter()
        .flat_map(|kind| [1, 8].map(|writers| (kind, writers)))
        .collect();
    // rates[set][server][phase] over the runs.
    let mut rates: Vec<[[Vec<f64>; 3]; 2]> = sets.iter().map(|_| Default::default()).collect();
    // A namespace of its own per run, so every bench run starts empty.
    let tag = jiff::Timestamp::now().as_second();
    println!(
        "api_writes: {} objects per phase, {} runs, {} byte payload",
        args.count, args.runs, PAYLOAD_BYTES
    );
    println!(
        "| run | kind | writers | server | create/s | merge patch/s | apply/s | UTC start | load before / after |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for run in 1..=args.runs {
        for ((kind, writers), set_rates) in sets.iter().zip(&mut rates) {
            for ((name, client), server_rates) in servers.iter().zip(set_rates.iter_mut()) {
                let before = load();
                let at = jiff::Timestamp::now().strftime("%H:%M:%S").to_string();
                let namespace = format!(
                    "bench-{tag}-r{run}-{}-w{writers}",
                    if *kind == Kind::ConfigMap { "cm" } else { "cr" }
                );
                let got =
                    runtime.block_on(one_set(client, &namespace, *kind, args.count, *writers));
                println!(
                    "| {run} | {} | {writers} | {name} | {:.0} | {:.0} | {:.0} | {at} | {before} / {} |",
                    kind.label(),
                    got[0],
                    got[1],
                    got[2],
                    load()
                );
                for (all, rate) in server_rates.iter_mut().zip(got) {
                    all.push(rate);
                }
            }
        }
    }
    println!(
        "\n| kind | writers | phase | kube-sim writes/s | kube-apiserver writes/s | kube-sim / kube-apiserver |"
    );
    println!("|---|---|---|---|---|---|");
    for ((kind, writers), set_rates) in sets.iter().zip(&rates) {
        for (i, p) in Phase::ALL.iter().enumerate() {
            let sim = median(set_rates[0][i].clone());
            let real = median(set_rates[1][i].clone());
            println!(
                "| {} | {writers} | {} | {sim:.0} | {real:.0} | **{:.1}x** |",
                kind.label(),
                p.label(),
                sim / real
            );
        }
    }
    drop(sim);
}
