//! Issue 16 item 8: many TFJobs of 11 replicas (1 Chief, 2 PS, 8 Workers)
//! created at once on kube-sim with its simulated kubelet and scheduler.
//!
//! The bench runs kube-sim in a child process (this binary re-executed with
//! `serve-sim`), so this process holds only the operator (and two light
//! watch streams that time the jobs): its peak RSS is the operator's. The
//! operator talks to kube-sim over loopback TCP like a deployed operator,
//! through a layer that counts its requests by verb and resource.
//!
//! Measured per run: seconds from the first create until every pod has been
//! Running, until every job has had its Running condition, until every job
//! Succeeded (Chief and Workers exit 0 after `--run-seconds`, PS run until
//! the cleanPodPolicy Running deletes them); API writes per job by verb and
//! resource (Events apart); the operator's peak RSS.
//!
//! Run: `cargo bench -p tfjob --bench tfjob_scale -- [--jobs 1000] [--runs 3]
//! [--run-seconds 20] [--workers 1] [--qps 5 --burst 10]` (no `--qps`: no
//! client-side limit, the operator's default).

// The gpufleet benches' shared helpers; not all of them are used here.
#[allow(dead_code)]
#[path = "../../gpufleet/benches/bench_support/mod.rs"]
mod bench_support;

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};

use bench_support::{load_averages, median};
use parking_lot::Mutex;
use serde_json::json;
use tfjob::api::TFJobObject;
use tfjob::run::{Operator, OperatorConfig};
use tokio_util::sync::CancellationToken;

// The allocator `gpufleet` runs on (see its main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NAMESPACE: &str = "bench";
const NODES: usize = 50;
const PODS_PER_NODE: usize = 250;

struct Args {
    jobs: usize,
    runs: usize,
    run_seconds: u64,
    workers: usize,
    limit: Option<(f64, u32)>,
}

fn parse_args() -> Args {
    let mut args = Args {
        jobs: 1000,
        runs: 3,
        run_seconds: 20,
        workers: 1,
        limit: None,
    };
    let mut qps = None;
    let mut burst = 10;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_default();
        match arg.as_str() {
            "--jobs" => args.jobs = value().parse().unwrap_or(args.jobs),
            "--runs" => args.runs = value().parse().unwrap_or(args.runs),
            "--run-seconds" => args.run_seconds = value().parse().unwrap_or(args.run_seconds),
            "--workers" => args.workers = value().parse().unwrap_or(args.workers),
            "--qps" => qps = value().parse().ok(),
            "--burst" => burst = value().parse().unwrap_or(burst),
            // cargo bench passes --bench; anything else is ignored.
            _ => {}
        }
    }
    args.limit = qps.map(|qps| (qps, burst));
    args
}

// --- kube-sim in a child process -------------------------------------------

/// The child: kube-sim with its kubelet, until stdin closes.
async fn serve_sim() {
    // The TFJob operator needs no Deployment, ReplicaSet or Job
    // controller; kube-sim's group every pod by owner on each change,
    // which at 11,000 pods took more of the child's CPU than anything else
    // (docs/benchmarks.md), so they are off here.
    let kubelet = kube_sim::KubeletConfig {
        workloads: false,
        ..kube_sim::KubeletConfig::default()
    };
    let sim = kube_sim::KubeSim::builder()
        .port(0)
        .kubelet(kubelet)
        .watch_history(400_000)
        .start()
        .await
        .expect("kube-sim starts");
    println!("URL {}", sim.url());
    std::io::stdout().flush().ok();
    // The parent closes stdin (or dies) when it is done.
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        while std::io::stdin().read_line(&mut line).unwrap_or(0) > 0 {
            line.clear();
        }
    })
    .await
    .ok();
    sim.shutdown().await;
}

struct SimProcess {
    child: std::process::Child,
    url: String,
}

fn spawn_sim() -> SimProcess {
    let exe = std::env::current_exe().expect("own path");
    let mut child = std::process::Command::new(exe)
        .arg("serve-sim")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kube-sim child starts");
    let stdout = child.stdout.take().expect("child stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("kube-sim child prints its URL");
    let url = line
        .trim()
        .strip_prefix("URL ")
        .expect("URL line")
        .to_string();
    SimProcess { child, url }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

// --- counting the operator's requests ---------------------------------------

type Counts = Arc<Mutex<BTreeMap<(String, String), u64>>>;

/// `(verb, resource)` of a request: create/update/patch/delete/
/// deletecollection/get/list/watch, and the resource with its subresource (`pods`, `tfjobs/status`).
fn classify(method: &http::Method, uri: &http::Uri) -> (String, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        other => other,
    };
    let rest = match rest {
        ["namespaces", _ns, resource, tail @ ..] => [&[*resource][..], tail].concat(),
        other => other.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, sub, ..] => (format!("{resource}/{sub}"), true),
        [] => (String::new(), false),
    };
    let watching = uri.query().is_some_and(|q| q.contains("watch=true"));
    let verb = match *method {
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE if !named => "deletecollection",
        http::Method::DELETE => "delete",
        _ if watching => "watch",
        _ if named => "get",
        _ => "list",
    };
    (verb.to_string(), resource)
}

#[derive(Clone)]
struct CountLayer(Counts);

impl<S> tower::Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            counts: Arc::clone(&self.0),
        }
    }
}

#[derive(Clone)]
struct Counted<S> {
    inner: S,
    counts: Counts,
}

impl<S, B> tower::Service<http::Request<B>> for Counted<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }
    fn call(&mut self, request: http::Request<B>) -> S::Future {
        let key = classify(request.method(), request.uri());
        *self.counts.lock().entry(key).or_default() += 1;
        self.inner.call(request)
    }
}

fn operator_client(url: &str, counts: &Counts, limit: Option<(f64, u32)>) -> kube::Client {
    let config = kube::Config::new(url.parse().expect("kube-sim URL"));
    let builder = kube::client::ClientBuilder::try_from(config).expect("client");
    // The count sees each request as it is sent, after the rate limit
    // released it (the same bucket `gpufleet tfjob --qps --burst` uses).
    match limit {
        Some((qps, burst)) => builder
            .with_layer(&controller_kit::RateLimitLayer::new(qps, burst))
            .with_layer(&CountLayer(Arc::clone(counts)))
            .build(),
        None => builder.with_layer(&CountLayer(Arc::clone(counts))).build(),
    }
}

// --- the cluster and the jobs -----------------------------------------------

async fn prepare(client: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &tfjob::api::crd())
        .await
        .expect("CRD");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap(),
        )
        .await
        .expect("namespace");
    let nodes: Api<Node> = Api::all(client.clone());
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
    let jobs: Api<TFJobObject> = Api::namespaced(client.clone(), NAMESPACE);
    while jobs.list(&ListParams::default()).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// --- observing ----------------------------------------------------------------

#[derive(Default)]
struct Progress {
    pods_running: HashMap<String, Instant>,
    jobs_running: HashMap<String, Instant>,
    jobs_succeeded: HashMap<String, Instant>,
}

fn has_condition(job: &TFJobObject, type_: &str, only_true: bool) -> bool {
    job.status
        .get("conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == type_ && (!only_true || c["status"] == "True"))
        })
}

fn observe(client: &kube::Client, progress: &Arc<Mutex<Progress>>, stop: &CancellationToken) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let seen = Arc::clone(progress);
    let stop_pods = stop.clone();
    tokio::spawn(async move {
        let stream = watcher(pods, watcher::Config::default()).applied_objects();
        let mut stream = std::pin::pin!(stream.take_until(stop_pods.cancelled()));
        while let Ok(Some(pod)) = stream.try_next().await {
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if running && let Some(name) = pod.metadata.name {
                seen.lock()
                    .pods_running
                    .entry(name)
                    .or_insert_with(Instant::now);
            }
        }
    });
    let jobs: Api<TFJobObject> = Api::namespaced(client.clone(), NAMESPACE);
    let seen = Arc::clone(progress);
    let stop_jobs = stop.clone();
    tokio::spawn(async move {
        let stream = watcher(jobs, watcher::Config::default()).applied_objects();
        let mut stream = std::pin::pin!(stream.take_until(stop_jobs.cancelled()));
        while let Ok(Some(job)) = stream.try_next().await {
            let Some(name) = job.metadata.name.clone() else {
                continue;
            };
            let mut seen = seen.lock();
            if has_condition(&job, "Running", false) {
                seen.jobs_running
                    .entry(name.clone())
                    .or_insert_with(Instant::now);
            }
            if has_condition(&job, "Succeeded", true) {
                seen.jobs_succeeded.entry(name).or_insert_with(Instant::now);
            }
        }
    });
}

fn latest(map: &HashMap<String, Instant>, start: Instant) -> f64 {
    map.values()
        .map(|t| t.duration_since(start).as_secs_f64())
        .fold(0.0, f64::max)
}

fn rss_peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kib| kib / 1024.0)
}

struct RunResult {
    pods_running: f64,
    jobs_running: f64,
    jobs_succeeded: f64,
    writes: BTreeMap<(String, String), u64>,
    reads: BTreeMap<(String, String), u64>,
    rss_mib: f64,
}

async fn run_once(args: &Args) -> RunResult {
    let sim = spawn_sim();
    let config = kube::Config::new(sim.url.parse().expect("URL"));
    let client = kube::Client::try_from(config).expect("client");
    prepare(&client).await;
    let counts: Counts = Arc::default();
    let operator_client = operator_client(&sim.url, &counts, args.limit);
    let mut config = OperatorConfig::new(NAMESPACE);
    config.leader_election = false;
    config.workers = args.workers;
    // tf-operator's Running, the bench's workload since issue 16: the PS
    // deletes at the end are part of the writes per job it reports
    // (docs/benchmarks.md), so the numbers stay comparable.
    config.plan.default_clean_pod_policy = tfjob::api::CleanPodPolicy::Running;
    let operator = Operator::new(operator_client, config).expect("operator");
    let readiness = operator.readiness();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(operator.run(shutdown.clone()));
    while !readiness.is_ready() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let progress = Arc::new(Mutex::new(Progress::default()));
    observe(&client, &progress, &shutdown);
    tokio::time::sleep(Duration::from_millis(500)).await;
    counts.lock().clear();

    let start = Instant::now();
    let jobs: Api<TFJobObject> = Api::namespaced(client.clone(), NAMESPACE);
    stream::iter(0..args.jobs)
        .map(|i| {
            let jobs = jobs.clone();
            let run_seconds = args.run_seconds;
            async move {
                jobs.create(
                    &PostParams::default(),
                    &tfjob::fixtures::eleven_replica_job(
                        &format!("job-{i:04}"),
                        NAMESPACE,
                        run_seconds,
                    ),
                )
                .await
                .expect("job create")
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let created = start.elapsed().as_secs_f64();
    let pods = args.jobs * 11;
    let mut last_report = Instant::now();
    loop {
        let (running, jobs_running, succeeded) = {
            let p = progress.lock();
            (
                p.pods_running.len(),
                p.jobs_running.len(),
                p.jobs_succeeded.len(),
            )
        };
        if succeeded >= args.jobs {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  t={:.0}s pods ever Running {running}/{pods}, jobs Running {jobs_running}, Succeeded {succeeded}",
                start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let the clean-up of the last jobs (PS pods and Services) finish.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let rss_mib = rss_peak_mib();
    let (pods_running, jobs_running, jobs_succeeded) = {
        let p = progress.lock();
        (
            latest(&p.pods_running, start),
            latest(&p.jobs_running, start),
            latest(&p.jobs_succeeded, start),
        )
    };
    eprintln!("  creates of {} jobs took {created:.1}s", args.jobs);
    shutdown.cancel();
    let _ = task.await;
    drop(sim);
    let all = counts.lock().clone();
    let (writes, reads) = all.into_iter().partition(|((verb, _), _)| {
        matches!(
            verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    });
    RunResult {
        pods_running,
        jobs_running,
        jobs_succeeded,
        writes,
        reads,
        rss_mib,
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("serve-sim") {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(serve_sim());
        return;
    }
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let limit = args
        .limit
        .map_or("none".to_string(), |(q, b)| format!("QPS {q}, burst {b}"));
    println!(
        "tfjob_scale: {} jobs x 11 pods, run-seconds {}, workers {}, client limit {limit}, {} runs",
        args.jobs, args.run_seconds, args.workers, args.runs
    );
    let mut results = Vec::new();
    for run in 1..=args.runs {
        let before = load_averages();
        let result = runtime.block_on(run_once(&args));
        let per_job_writes: f64 = result
            .writes
            .iter()
            .filter(|((_, resource), _)| resource != "events")
            .map(|(_, n)| *n as f64)
            .sum::<f64>()
            / args.jobs as f64;
        println!(
            "run {run}: all pods Running {:.1}s, all jobs Running {:.1}s, all Succeeded {:.1}s, writes/job {per_job_writes:.2} (Events apart), operator peak RSS {:.0} MiB, load before {before} after {}",
            result.pods_running,
            result.jobs_running,
            result.jobs_succeeded,
            result.rss_mib,
            load_averages()
        );
        results.push((result, per_job_writes));
    }
    let pick = |f: fn(&RunResult) -> f64| median(results.iter().map(|(r, _)| f(r)).collect());
    println!(
        "median: all pods Running {:.1}s, all jobs Running {:.1}s, all Succeeded {:.1}s, writes/job {:.2}, peak RSS {:.0} MiB",
        pick(|r| r.pods_running),
        pick(|r| r.jobs_running),
        pick(|r| r.jobs_succeeded),
        median(results.iter().map(|(_, w)| *w).collect()),
        pick(|r| r.rss_mib),
    );
    if let Some((last, _)) = results.last() {
        println!("requests of the last run, per job (verb resource):");
        for ((verb, resource), n) in last.writes.iter().chain(last.reads.iter()) {
            println!(
                "  {verb:7} {resource:20} {:>9} total {:>8.2} per job",
                n,
                *n as f64 / args.jobs as f64
            );
        }
    }
}
