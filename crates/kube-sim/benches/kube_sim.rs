//! kube-sim benchmarks: write throughput (in-process and loopback HTTP, with
//! a watcher attached), watch fan-out latency, and memory per stored object.
//!
//! Run with `cargo bench -p kube-sim` (all) or `cargo bench -p kube-sim -- NAME`
//! where NAME selects `memory`, `writes-inproc`, `writes-http` (`writes` for
//! both), `writes-protobuf` (protobuf against JSON bodies), `fanout` or
//! `kubelet`. Rows print as Markdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_sim::{KubeSim, KubeletConfig};
use serde_json::json;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn configmap(name: &str, payload: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm.data = Some([("payload".to_string(), payload.to_string())].into());
    cm
}

fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// 100,000 ConfigMaps of about 1 KiB each, created through the in-process client.
async fn memory() {
    let before = rss_kib("VmRSS:");
    let sim = KubeSim::builder().start().await.expect("start");
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let payload = "x".repeat(1000);
    let count = 100_000;
    let started = Instant::now();
    let writers = 2;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(writers) {
                api.create(
                    &PostParams::default(),
                    &configmap(&format!("cm-{i:06}"), &payload),
                )
                .await
                .expect("create");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
    let elapsed = started.elapsed();
    let after = rss_kib("VmRSS:");
    let peak = rss_kib("VmHWM:");
    let held_mib = (after.saturating_sub(before)) as f64 / 1024.0;
    println!(
        "| memory: 100,000 ConfigMaps of ~1 KiB (default watch history 10,000 events) | RSS {:.0} MiB total, {:.0} MiB added, peak {:.0} MiB | target < 400 MB | loaded in {:.1} s |",
        after as f64 / 1024.0,
        held_mib,
        peak as f64 / 1024.0,
        elapsed.as_secs_f64()
    );
    sim.shutdown().await;
}

/// Where the writing loop runs.
#[derive(Clone, Copy, PartialEq)]
enum Writer {
    /// A task on the runtime's worker threads, as a controller's loop is.
    Task,
    /// The thread blocked in `block_on`, outside the worker pool: every
    /// response then has to wake that thread from a worker, which is what
    /// the first version of this benchmark measured.
    BlockOn,
}

impl Writer {
    fn label(self) -> &'static str {
        match self {
            Writer::Task => "writer task",
            Writer::BlockOn => "writer on the block_on thread",
        }
    }
}

async fn create_all(api: Api<ConfigMap>, label: String, count: usize) -> Duration {
    let started = Instant::now();
    for i in 0..count {
        api.create(
            &PostParams::default(),
            &configmap(&format!("{label}-{i:06}"), "v"),
        )
        .await
        .expect("create");
    }
    started.elapsed()
}

/// One writer creating ConfigMaps back to back while one watcher follows.
async fn writes(client: kube::Client, label: &str, count: usize, writer: Writer) -> f64 {
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let seen = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let api = api.clone();
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut stream = api
                .watch(&WatchParams::default().timeout(120), "0")
                .await
                .expect("watch")
                .boxed();
            while let Some(event) = stream.next().await {
                if let Ok(WatchEvent::Added(_)) = event
                    && seen.fetch_add(1, Ordering::Relaxed) + 1 == count
                {
                    break;
                }
            }
        })
    };
    let elapsed = match writer {
        Writer::Task => tokio::spawn(create_all(api, label.to_string(), count))
            .await
            .expect("writer"),
        Writer::BlockOn => create_all(api, label.to_string(), count).await,
    };
    let _ = tokio::time::timeout(Duration::from_secs(30), watcher).await;
    assert_eq!(
        seen.load(Ordering::Relaxed),
        count,
        "the watcher saw every write"
    );
    count as f64 / elapsed.as_secs_f64()
}

async fn write_throughput(in_process: bool, over_http: bool) {
    let sim = KubeSim::builder().start().await.expect("start");
    for writer in [Writer::Task, Writer::BlockOn] {
        let tag = if writer == Writer::Task { "t" } else { "b" };
        if in_process {
            let rate = writes(sim.client(), &format!("inproc-{tag}"), 40_000, writer).await;
            println!(
                "| writes in-process (one writer, one watcher, 40,000 creates; {}) | {rate:.0} writes/s | target >= 20,000/s |",
                writer.label()
            );
        }
        if over_http {
            let http = sim.http_client().expect("http client");
            let rate = writes(http, &format!("http-{tag}"), 20_000, writer).await;
            println!(
                "| writes over loopback HTTP (one writer, one watcher, 20,000 creates; {}) | {rate:.0} writes/s | target >= 5,000/s |",
                writer.label()
            );
        }
    }
    sim.shutdown().await;
}

/// The same in-process write loop on a store kept in a data directory
/// (SQLite, write-ahead log), against one in memory in the same run.
async fn durable_write_throughput() {
    let dir = tempfile::tempdir().expect("temp dir");
    let durable = KubeSim::builder()
        .data_dir(dir.path())
        .start()
        .await
        .expect("start on a data directory");
    let rate = writes(durable.client(), "durable", 40_000, Writer::Task).await;
    durable.shutdown().await;
    let database = std::fs::metadata(dir.path().join(kube_sim::DATABASE_FILE))
        .map(|m| m.len())
        .unwrap_or(0);
    let memory = KubeSim::builder().start().await.expect("start");
    let in_memory = writes(memory.client(), "memory", 40_000, Writer::Task).await;
    memory.shutdown().await;
    println!(
        "| writes in-process with --data-dir (one writer, one watcher, 40,000 creates; writer task) | {rate:.0} writes/s (in memory, same run: {in_memory:.0}/s) | - | database {:.1} MiB after the run |",
        database as f64 / 1_048_576.0
    );
}

/// 100 watchers follow a stream of 1,000 writes/s; delivery latency is the
/// time from the write's start to each watcher decoding the event.
async fn fanout() {
    let sim = KubeSim::builder().start().await.expect("start");
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let watchers = 100;
    let events = 5_000;
    let origin = Instant::now();
    let rv = sim.resource_version().to_string();
    let mut handles = Vec::new();
    for _ in 0..watchers {
        let api = api.clone();
        let rv = rv.clone();
        handles.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(events);
            let mut stream = api
                .watch(&WatchParams::default().timeout(300), &rv)
                .await
                .expect("watch")
                .boxed();
            while let Some(event) = stream.next().await {
                if let Ok(WatchEvent::Added(cm)) = event {
                    let sent: u64 = cm
                        .data
                        .as_ref()
                        .and_then(|d| d.get("sent-us"))
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0);
                    let now = origin.elapsed().as_micros() as u64;
                    latencies.push(now.saturating_sub(sent));
                    if latencies.len() == events {
                        break;
                    }
                }
            }
            latencies
        }));
    }
    // Let every watch connect before the stream starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for i in 0..events {
        tick.tick().await;
        let sent = origin.elapsed().as_micros().to_string();
        let mut cm = configmap(&format!("fan-{i:06}"), "v");
        cm.data
            .get_or_insert_default()
            .insert("sent-us".into(), sent);
        api.create(&PostParams::default(), &cm)
            .await
            .expect("create");
    }
    let write_rate = events as f64 / started.elapsed().as_secs_f64();
    let mut all = Vec::new();
    let mut complete = 0;
    for h in handles {
        let lat = h.await.expect("watcher");
        if lat.len() == events {
            complete += 1;
        }
        all.extend(lat);
    }
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() as f64 - 1.0) * p) as usize] as f64 / 1000.0;
    println!(
        "| watch fan-out: {watchers} watchers, {events} events at {write_rate:.0} writes/s | {complete}/{watchers} watchers got every event; delivery p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms | target p99 < 10 ms |",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    sim.shutdown().await;
}

/// User plus system CPU seconds of this process so far, from
/// `/proc/self/stat` (fields 14 and 15, in USER_HZ ticks, 100 on Linux).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name (field 2) may hold spaces; count fields after it.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // After ')' the first field is field 3 (state), so utime (14) is index 11.
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// The simulated kubelet under a controller that labels every Node: 2,000
/// Nodes with one running pod each, then 2,000 sequential Node label
/// patches. Reports the patch rate and the process's CPU time over the patch
/// phase plus one second for the kubelet loops to catch up.
async fn kubelet() {
    let count = 2_000;
    let sim = KubeSim::builder()
        .kubelet(KubeletConfig::default())
        .start()
        .await
        .expect("start");
    let nodes: Api<Node> = Api::all(sim.client());
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let started = Instant::now();
    for i in 0..count {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": format!("node-{i:05}")},
            "status": {"capacity": {"nvidia.com/gpu": "8"}},
        }))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("plugin-{i:05}")},
            "spec": {
                "nodeName": format!("node-{i:05}"),
                "containers": [{"name": "plugin", "image": "registry.example/plugin:1"}],
            },
        }))
        .expect("pod");
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
    }
    loop {
        let list = pods.list(&ListParams::default()).await.expect("list");
        let running = list
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == count {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "only {running} of {count} pods Running"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let setup = started.elapsed();
    let cpu_before = cpu_seconds();
    let patching = Instant::now();
    for i in 0..count {
        let patch = json!({"metadata": {"labels": {"gpufleet.dev/labelled": "yes"}}});
        nodes
            .patch(
                &format!("node-{i:05}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .expect("label node");
    }
    let elapsed = patching.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu = cpu_seconds() - cpu_before;
    println!(
        "| kubelet on: {count} Node label patches (sequential) over {count} Nodes + {count} Running pods | {:.0} patches/s; {cpu:.2} s CPU over the patches + 1 s | | setup (create all, wait Running) {:.1} s |",
        count as f64 / elapsed.as_secs_f64(),
        setup.as_secs_f64()
    );
    sim.shutdown().await;
}

/// CPU time of every thread of this process so far, in nanoseconds
/// (`/proc/self/task/*/schedstat`), finer than `/proc/self/stat`'s ticks.
fn thread_cpu_nanos() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// One encoding's run: creates per second and CPU microseconds per create.
#[derive(Clone, Copy)]
struct EncodingRun {
    rate: f64,
    cpu_us: f64,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// A create as kube-rs (JSON) or client-go (protobuf) sends it.
fn create_request(path: &str, protobuf: bool, body: Vec<u8>) -> http::Request<kube::client::Body> {
    let (content_type, accept) = if protobuf {
        (
            kube_sim::protobuf::CONTENT_TYPE,
            "application/vnd.kubernetes.protobuf, application/json",
        )
    } else {
        ("application/json", "application/json")
    };
    http::Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", content_type)
        .header("accept", accept)
        .body(kube::client::Body::from(body))
        .expect("request")
}

async fn start_sim(controllers: bool) -> KubeSim {
    let mut builder = KubeSim::builder();
    if !controllers {
        builder = builder.kubelet(KubeletConfig::disabled());
    }
    builder.start().await.expect("start")
}

async fn send_create(client: &kube::Client, request: http::Request<kube::client::Body>) {
    let response = client.send(request).await.expect("answered");
    assert_eq!(response.status().as_u16(), 201);
    let _ = http_body_util::BodyExt::collect(response.into_body()).await;
}

/// Creates `bodies` one after the other on a fresh kube-sim.
async fn run_creates(
    path: &str,
    protobuf: bool,
    controllers: bool,
    bodies: Vec<Vec<u8>>,
) -> EncodingRun {
    let count = bodies.len();
    let sim = start_sim(controllers).await;
    let client = sim.client();
    let cpu_before = thread_cpu_nanos();
    let started = Instant::now();
    for body in bodies {
        send_create(&client, create_request(path, protobuf, body)).await;
    }
    let elapsed = started.elapsed();
    let cpu = thread_cpu_nanos().saturating_sub(cpu_before);
    sim.shutdown().await;
    EncodingRun {
        rate: count as f64 / elapsed.as_secs_f64(),
        cpu_us: cpu as f64 / 1_000.0 / count as f64,
    }
}

/// Both encodings on one kube-sim, alternating create by create (which
/// goes first swaps every pair), each create timed alone: both see the
/// same store size, heap, background work and clock speed, so the load of
/// the machine moves them together. Returns protobuf's rate over JSON's.
async fn run_interleaved(path: &str, controllers: bool, pairs: Vec<(Vec<u8>, Vec<u8>)>) -> f64 {
    let sim = start_sim(controllers).await;
    let client = sim.client();
    let mut spent = [Duration::ZERO; 2];
    for (i, (json, protobuf)) in pairs.into_iter().enumerate() {
        let mut order = [(false, json), (true, protobuf)];
        if i % 2 == 1 {
            order.swap(0, 1);
        }
        for (is_protobuf, body) in order {
            let started = Instant::now();
            send_create(&client, create_request(path, is_protobuf, body)).await;
            spent[usize::from(is_protobuf)] += started.elapsed();
        }
    }
    sim.shutdown().await;
    spent[0].as_secs_f64() / spent[1].as_secs_f64()
}

/// The same creates with JSON and with protobuf bodies and answers, as
/// kube-rs and client-go send them, through the in-process router.
/// Rounds of a pair of runs, each on a fresh kube-sim, the order of the
/// two swapped every round (the second run of a pair inherits the first's
/// heap). The ratio is the median of the rounds' own ratios: the two runs
/// of a round are seconds apart, so a load that drifts over the whole
/// bench moves both. `BENCH_COUNT` (creates per run, 5,000),
/// `BENCH_ROUNDS` (10) and `BENCH_KIND=configmap|pod` size the run;
/// `BENCH_ONLY=json|protobuf` runs one encoding alone, for `perf record`
/// or callgrind.
async fn protobuf_writes() {
    let setting = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(default)
    };
    let count = setting("BENCH_COUNT", 5_000);
    let rounds = setting("BENCH_ROUNDS", 10);
    let only = std::env::var("BENCH_ONLY").ok();
    let only_kind = std::env::var("BENCH_KIND").ok();
    let controllers = std::env::var("BENCH_CONTROLLERS").as_deref() != Ok("off");
    let payload = "x".repeat(1000);
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "bench"}},
               "spec": {"schedulerName": "nobody", "containers": [
                   {"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 8080}],
                    "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}},
                    "env": [{"name": "A", "value": "1"}]},
                   {"name": "sidecar", "image": "busybox", "command": ["sleep", "3600"]}]}})
    };
    let configmap = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"payload": payload}});
    type MakeObject<'a> = &'a dyn Fn(&str) -> serde_json::Value;
    let kinds: [(&str, &str, &str, MakeObject); 2] = [
        (
            "configmap",
            "ConfigMap of ~1 KiB",
            "/api/v1/namespaces/default/configmaps",
            &configmap,
        ),
        (
            "pod",
            "Pod with 2 containers",
            "/api/v1/namespaces/default/pods",
            &pod,
        ),
    ];
    for (key, label, path, make) in kinds {
        if only_kind.as_deref().is_some_and(|k| k != key) {
            continue;
        }
        // Per round: [json, protobuf].
        let mut runs: Vec<[Option<EncodingRun>; 2]> = Vec::new();
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            let mut pair = [None, None];
            for protobuf in order {
                let name = if protobuf { "protobuf" } else { "json" };
                if only.as_deref().is_some_and(|o| o != name) {
                    continue;
                }
                let bodies: Vec<Vec<u8>> = (0..count)
                    .map(|i| {
                        let object = make(&format!("o-{round}-{i:06}"));
                        if protobuf {
                            kube_sim::protobuf::encode_object(&object).expect("encodes")
                        } else {
                            serde_json::to_vec(&object).expect("encodes")
                        }
                    })
                    .collect();
                pair[usize::from(protobuf)] =
                    Some(run_creates(path, protobuf, controllers, bodies).await);
            }
            runs.push(pair);
        }
        // One encoding alone: nothing to compare.
        let pairs: Vec<(EncodingRun, EncodingRun)> = runs
            .iter()
            .filter_map(|[json, pb]| Some(((*json)?, (*pb)?)))
            .collect();
        if pairs.is_empty() {
            continue;
        }
        let of = |pick: &dyn Fn(&(EncodingRun, EncodingRun)) -> f64| {
            median(pairs.iter().map(pick).collect())
        };
        let rate_ratios: Vec<f64> = pairs.iter().map(|(j, p)| p.rate / j.rate).collect();
        let faster = rate_ratios.iter().filter(|r| **r >= 1.0).count();
        println!(
            "| writes-protobuf: {count} creates of a {label} per run, in-process, one writer, bodies and answers in each encoding, {} rounds | JSON {:.0}/s, protobuf {:.0}/s; CPU per create JSON {:.1} µs, protobuf {:.1} µs (medians) | protobuf not slower than JSON | protobuf/JSON: rate {:.3} (median of the rounds' ratios; protobuf ahead in {faster} of {}), CPU {:.3} |",
            pairs.len(),
            of(&|(j, _)| j.rate),
            of(&|(_, p)| p.rate),
            of(&|(j, _)| j.cpu_us),
            of(&|(_, p)| p.cpu_us),
            median(rate_ratios.clone()),
            pairs.len(),
            of(&|(j, p)| p.cpu_us / j.cpu_us),
        );
        if only.is_some() {
            continue;
        }
        let mut ratios = Vec::new();
        for round in 0..rounds {
            let pairs = (0..count)
                .map(|i| {
                    let json = make(&format!("j-{round}-{i:06}"));
                    let protobuf = make(&format!("p-{round}-{i:06}"));
                    (
                        serde_json::to_vec(&json).expect("encodes"),
                        kube_sim::protobuf::encode_object(&protobuf).expect("encodes"),
                    )
                })
                .collect();
            ratios.push(run_interleaved(path, controllers, pairs).await);
        }
        let faster = ratios.iter().filter(|r| **r >= 1.0).count();
        let (low, high) = ratios
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(*r), h.max(*r)));
        println!(
            "| writes-protobuf, interleaved: {count} creates of a {label} in each encoding per round on one kube-sim, alternating, each timed alone, {rounds} rounds | protobuf/JSON rate {:.3} (median; range {low:.3}-{high:.3}; protobuf ahead in {faster} of {rounds}) | protobuf not slower than JSON | |",
            median(ratios.clone()),
        );
    }
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("| benchmark | result | target | notes |\n|---|---|---|---|");
    // Memory first, so the other runs' allocations do not inflate it.
    if wanted("memory") {
        runtime.block_on(memory());
    }
    let (in_process, over_http) = (wanted("writes-inproc"), wanted("writes-http"));
    if in_process || over_http {
        runtime.block_on(write_throughput(in_process, over_http));
    }
    if wanted("writes-durable") {
        runtime.block_on(durable_write_throughput());
    }
    if wanted("writes-protobuf") {
        runtime.block_on(protobuf_writes());
    }
    if wanted("fanout") {
        runtime.block_on(fanout());
    }
    if wanted("kubelet") {
        runtime.block_on(kubelet());
    }
}
