//! Issue #33: the fleet view at fleet size, measured in a real headless
//! Chromium over the DevTools protocol against `gpufleet sandbox --nodes N`
//! (the binary of this build; run it with `cargo bench`, so release).
//!
//! Per run (a fresh sandbox each time):
//! * first useful render: milliseconds from navigation start until the
//!   page first drew the model (`window.fleetFirstRender`, set by the page
//!   from `performance.now()`);
//! * bytes of one change: a runtime policy fails one GPU; everything the
//!   event stream carried from then until 3 s after the page showed it,
//!   decoded as the page got it (`Network.eventSourceMessageReceived`) and
//!   on the wire of a gzip-accepting client the bench keeps on `/events`
//!   (DevTools' encoded lengths for a stream still open arrive late or not
//!   at all, so they are printed but not used);
//! * main-thread time of that change: the page's own count of time spent
//!   parsing, applying and drawing deltas (`window.fleetWork`), and
//!   DevTools' `Performance.getMetrics` TaskDuration over the same window
//!   (all main-thread tasks, keep-alives included);
//! * tab memory: the renderer processes' RSS and PSS (`/proc`, Chromium's
//!   `--type=renderer` children), before and after the page is opened;
//!   the tab's own renderer among them, found at the end of the run as the
//!   one process that exits when DevTools crashes the page (`Page.crash`);
//!   the page's JS heap (`JSHeapUsedSize`); the snapshot's size;
//! * idle sandbox CPU: the sandbox's utime + stime over 30 s with the page
//!   open and nothing changing, as a share of one core.
//!
//! Run: `cargo bench -p gpufleet --bench fleet_view -- [--nodes 10000]
//! [--runs 3]`. Prints each run and the medians, with the load average.
//! `-- --open URL` measures only the first render and memory of a fleet
//! view already running at URL (a sandbox too large to start per run).

#[allow(dead_code)]
#[path = "../tests/it/support.rs"]
mod support;

#[allow(dead_code)]
#[path = "../tests/it/browser.rs"]
mod browser;

// Not every helper is used by every bench.
#[allow(dead_code)]
mod bench_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};
use mokka::api::{SGPURack, SGPURuntimePolicy};
use serde_json::{Value, json};

use bench_support::{load_averages, median};

struct Run {
    first_render_ms: f64,
    change_decoded_bytes: usize,
    change_wire_bytes: u64,
    change_page_ms: f64,
    change_task_ms: f64,
    renderer_rss_mib: f64,
    renderer_pss_mib: f64,
    tab_rss_mib: f64,
    tab_pss_mib: f64,
    snapshot_wire_bytes: u64,
    snapshot_bytes: u64,
    js_heap_mib: f64,
    idle_cpu_percent: f64,
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100.0)
}

/// RSS and PSS (KiB) of one Chromium renderer process.
#[derive(Clone, Copy, Debug)]
struct RendererMemory {
    pid: u32,
    rss_kib: u64,
    pss_kib: u64,
}

/// Every Chromium renderer process below `browser` (the tab's, plus any
/// spare or helper renderer Chromium keeps), each printed. PSS shares
/// pages mapped by several processes among them.
fn renderers(browser: u32) -> Vec<RendererMemory> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("--type=renderer") {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let descends = ancestors(pid).contains(&browser);
        if !descends {
            continue;
        }
        let field = |text: &str, name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let rss_kib = field(&status, "VmRSS:");
        let rollup =
            std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        let pss_kib = field(&rollup, "Pss:");
        eprintln!("  renderer {pid}: RSS {rss_kib} KiB, PSS {pss_kib} KiB");
        found.push(RendererMemory {
            pid,
            rss_kib,
            pss_kib,
        });
    }
    found
}

/// RSS and PSS (KiB) summed over every renderer below `browser`.
fn renderer_memory_kib(browser: u32) -> (u64, u64) {
    renderers(browser)
        .iter()
        .fold((0, 0), |(rss, pss), r| (rss + r.rss_kib, pss + r.pss_kib))
}

/// Which of `measured` is the tab's own renderer. Chromium's process list
/// does not say which renderer hosts which page, so the bench asks
/// DevTools to crash the page's renderer (`Page.crash`) and takes the one
/// process that exits. Call it last: the page is gone afterwards.
async fn tab_renderer(
    page: &mut browser::Page,
    browser: u32,
    measured: &[RendererMemory],
) -> Option<RendererMemory> {
    page.send_without_answer("Page.crash", json!({})).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let alive: Vec<u32> = renderers(browser).iter().map(|r| r.pid).collect();
        let gone: Vec<&RendererMemory> = measured
            .iter()
            .filter(|r| !alive.contains(&r.pid))
            .collect();
        if let [one] = gone.as_slice() {
            eprintln!(
                "  the tab's renderer is {}: RSS {} KiB, PSS {} KiB",
                one.pid, one.rss_kib, one.pss_kib
            );
            return Some(**one);
        }
    }
    eprintln!("  Page.crash: no single renderer exited within 10 s; the tab's renderer is unknown");
    None
}

fn ancestors(mut pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for _ in 0..16 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let Some(parent) = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
        else {
            break;
        };
        if parent <= 1 {
            break;
        }
        out.push(parent);
        pid = parent;
    }
    out
}

async fn metric(page: &mut browser::Page, name: &str) -> f64 {
    let metrics = page.call("Performance.getMetrics", json!({})).await;
    metrics["metrics"]
        .as_array()
        .and_then(|list| list.iter().find(|m| m["name"] == name))
        .and_then(|m| m["value"].as_f64())
        .unwrap_or(f64::NAN)
}

fn event_bytes(page: &mut browser::Page, request: &str) -> (usize, u64) {
    let decoded = page
        .take_events("Network.eventSourceMessageReceived")
        .iter()
        .filter(|e| e["params"]["requestId"] == request)
        .map(|e| e["params"]["data"].as_str().map_or(0, str::len))
        .sum();
    let wire = page
        .take_events("Network.dataReceived")
        .iter()
        .filter(|e| e["params"]["requestId"] == request)
        .filter_map(|e| e["params"]["encodedDataLength"].as_u64())
        .sum();
    (decoded, wire)
}

/// Opens `/events` as a gzip-accepting client of its own and counts the
/// bytes that arrive (chunk framing included): the wire cost of the event
/// stream, read apart from the browser (whose DevTools counts for a stream
/// still open come late or not at all).
async fn count_event_stream_bytes(ui_url: &str) -> std::sync::Arc<std::sync::atomic::AtomicU64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = ui_url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let counter = std::sync::Arc::new(AtomicU64::new(0));
    let mut stream = tokio::net::TcpStream::connect(&address)
        .await
        .expect("the fleet view accepts a connection");
    stream
        .write_all(
            format!(
                "GET /events HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\nAccept-Encoding: gzip\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .expect("request sent");
    let count = counter.clone();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 64 * 1024];
        while let Ok(read) = stream.read(&mut buffer).await {
            if read == 0 {
                return;
            }
            count.fetch_add(read as u64, Ordering::Relaxed);
        }
    });
    counter
}

async fn one_run(nodes: usize, run: usize) -> Run {
    let nodes_arg = nodes.to_string();
    let started = std::time::Instant::now();
    // Start-up grows with the fleet (gpuid inventories every Node).
    let startup = Duration::from_secs(240 + u64::try_from(nodes / 20).unwrap_or(u64::MAX));
    let sandbox =
        support::RunningSandbox::start_within(&["--nodes", &nodes_arg, "--ui-port", "0"], startup);
    eprintln!(
        "run {run}: sandbox of {nodes} Nodes ready after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let sandbox_pid = sandbox.process.child.id();
    let client = sandbox.client().await;
    let racks = Api::<SGPURack>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("racks listed")
        .items;
    let listed = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("Nodes listed")
        .items
        .len();
    assert_eq!(listed, nodes);

    let (browser_process, mut page) =
        browser::open(&sandbox.dir.path().join(format!("chromium-{run}"))).await;
    page.call("Page.enable", json!({})).await;
    page.call("Network.enable", json!({})).await;
    page.call("Performance.enable", json!({})).await;
    let (blank_rss, blank_pss) = renderer_memory_kib(browser_process.child.id());
    eprintln!(
        "run {run}: renderers before the page: RSS {} MiB, PSS {} MiB",
        blank_rss / 1024,
        blank_pss / 1024
    );
    let stream_bytes = count_event_stream_bytes(&sandbox.ui_url).await;
    page.call("Page.navigate", json!({"url": sandbox.ui_url}))
        .await;
    let first_render = page
        .evaluate_until("window.fleetFirstRender", Value::is_number)
        .await
        .as_f64()
        .unwrap_or(f64::NAN);
    page.evaluate_until(
        "Number(document.getElementById('count-nodes')?.textContent)",
        |v| *v == json!(nodes),
    )
    .await;
    let sent = page.take_events("Network.requestWillBeSent");
    let request_for = |suffix: &str| {
        sent.iter()
            .find(|e| {
                e["params"]["request"]["url"]
                    .as_str()
                    .is_some_and(|u| u.ends_with(suffix))
            })
            .and_then(|e| e["params"]["requestId"].as_str().map(str::to_string))
    };
    let request = request_for("/events").expect("the page opened /events");
    let snapshot = request_for("/api/fleet").expect("the page fetched /api/fleet");
    let snapshot_wire_bytes = page
        .take_events("Network.loadingFinished")
        .iter()
        .filter(|e| e["params"]["requestId"] == snapshot.as_str())
        .filter_map(|e| e["params"]["encodedDataLength"].as_u64())
        .sum();
    let snapshot_bytes = page
        .call(
            "Runtime.evaluate",
            json!({
                "expression": "fetch('/api/fleet').then(r => r.text()).then(t => t.length)",
                "awaitPromise": true,
                "returnByValue": true,
            }),
        )
        .await;
    let snapshot_bytes = snapshot_bytes["result"]["value"].as_u64().unwrap_or(0);

    // Idle: nothing changes for 30 s (gpuid's resync aside).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ticks = clock_ticks_per_second();
    let before = cpu_ticks(sandbox_pid);
    let idle_window = Duration::from_secs(30);
    tokio::time::sleep(idle_window).await;
    let idle_cpu_percent =
        (cpu_ticks(sandbox_pid) - before) as f64 / ticks / idle_window.as_secs_f64() * 100.0;

    // One change: a GPU in the middle of the fleet fails.
    let rack = racks
        .iter()
        .find(|r| r.spec.identity.rack_index == i32::try_from(racks.len() / 2).unwrap_or(0))
        .expect("a rack in the middle");
    let rack_index = rack.spec.identity.rack_index;
    let _ = page.evaluate("1").await;
    let _ = event_bytes(&mut page, &request);
    let stream_before = stream_bytes.load(std::sync::atomic::Ordering::Relaxed);
    let work_before = page
        .evaluate("window.fleetWork.apply + window.fleetWork.draw")
        .await;
    let task_before = metric(&mut page, "TaskDuration").await;
    Api::<SGPURuntimePolicy>::all(client.clone())
        .create(
            &PostParams::default(),
            &browser::policy_failing_one_gpu(
                &format!("bench-{run}"),
                "sandbox",
                "nvl72",
                (rack_index, 3, 1),
            ),
        )
        .await
        .expect("policy created");
    page.evaluate_until(
        "Number(document.getElementById('count-lost')?.textContent)",
        |v| *v == json!(1),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _ = page.evaluate("1").await;
    let (change_decoded_bytes, devtools_wire) = event_bytes(&mut page, &request);
    let change_wire_bytes = stream_bytes.load(std::sync::atomic::Ordering::Relaxed) - stream_before;
    eprintln!(
        "run {run}: the change on a gzip client's wire: {change_wire_bytes} bytes (DevTools counted {devtools_wire} for the page's stream)"
    );
    let work_after = page
        .evaluate("window.fleetWork.apply + window.fleetWork.draw")
        .await;
    let task_after = metric(&mut page, "TaskDuration").await;
    let js_heap = metric(&mut page, "JSHeapUsedSize").await;
    let after_change = renderers(browser_process.child.id());
    let (renderer_rss, renderer_pss) = after_change
        .iter()
        .fold((0, 0), |(rss, pss), r| (rss + r.rss_kib, pss + r.pss_kib));
    let tab = tab_renderer(&mut page, browser_process.child.id(), &after_change).await;
    let mib = |kib: Option<u64>| kib.map_or(f64::NAN, |k| k as f64 / 1024.0);

    let result = Run {
        first_render_ms: first_render,
        change_decoded_bytes,
        change_wire_bytes,
        change_page_ms: work_after.as_f64().unwrap_or(f64::NAN)
            - work_before.as_f64().unwrap_or(f64::NAN),
        change_task_ms: (task_after - task_before) * 1000.0,
        renderer_rss_mib: renderer_rss as f64 / 1024.0,
        renderer_pss_mib: renderer_pss as f64 / 1024.0,
        tab_rss_mib: mib(tab.map(|t| t.rss_kib)),
        tab_pss_mib: mib(tab.map(|t| t.pss_kib)),
        snapshot_wire_bytes,
        snapshot_bytes,
        js_heap_mib: js_heap / 1024.0 / 1024.0,
        idle_cpu_percent,
    };
    eprintln!(
        "run {run}: snapshot {} bytes, {} on the wire; first render {:.0} ms; one change {} bytes decoded, {} on the wire, {:.1} ms page work, {:.1} ms main-thread tasks; renderer RSS {:.0} MiB (PSS {:.0} MiB), of which the tab's renderer {:.0} MiB RSS ({:.0} MiB PSS); JS heap {:.1} MiB; idle sandbox {:.1} % of a core",
        result.snapshot_bytes,
        result.snapshot_wire_bytes,
        result.first_render_ms,
        result.change_decoded_bytes,
        result.change_wire_bytes,
        result.change_page_ms,
        result.change_task_ms,
        result.renderer_rss_mib,
        result.renderer_pss_mib,
        result.tab_rss_mib,
        result.tab_pss_mib,
        result.js_heap_mib,
        result.idle_cpu_percent
    );
    drop(page);
    drop(browser_process);
    let mut sandbox = sandbox;
    let _ = sandbox.process.terminate().await;
    result
}

/// First useful render and renderer memory of a fleet view at `url`.
async fn open_only(url: &str) {
    let profile = tempfile::tempdir().expect("a profile directory");
    let (browser_process, mut page) = browser::open(profile.path()).await;
    page.call("Page.enable", json!({})).await;
    page.call("Performance.enable", json!({})).await;
    let (blank_rss, blank_pss) = renderer_memory_kib(browser_process.child.id());
    page.call("Page.navigate", json!({"url": url})).await;
    let first_render = page
        .evaluate_until("window.fleetFirstRender", Value::is_number)
        .await;
    let nodes = page
        .evaluate("document.getElementById('count-nodes').textContent")
        .await;
    let js_heap = metric(&mut page, "JSHeapUsedSize").await;
    let measured = renderers(browser_process.child.id());
    let (rss, pss) = measured
        .iter()
        .fold((0, 0), |(rss, pss), r| (rss + r.rss_kib, pss + r.pss_kib));
    let tab = tab_renderer(&mut page, browser_process.child.id(), &measured).await;
    println!(
        "{url}: {nodes} Nodes; first useful render {first_render} ms; renderers {} MiB RSS / {} MiB PSS ({} / {} before the page), the tab's renderer {} MiB RSS / {} MiB PSS; JS heap {:.1} MiB; load average {}",
        rss / 1024,
        pss / 1024,
        blank_rss / 1024,
        blank_pss / 1024,
        tab.map_or("unknown".to_string(), |t| (t.rss_kib / 1024).to_string()),
        tab.map_or("unknown".to_string(), |t| (t.pss_kib / 1024).to_string()),
        js_heap / 1024.0 / 1024.0,
        load_averages()
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(url) = args
        .iter()
        .position(|a| a == "--open")
        .and_then(|i| args.get(i + 1))
    {
        browser::chromium();
        open_only(url).await;
        return;
    }
    // `cargo bench` passes `--bench`; everything else is ours.
    let nodes = arg("--nodes", 10_000);
    let runs = arg("--runs", 3).max(1);
    browser::chromium();
    eprintln!(
        "fleet view at {nodes} Nodes, {runs} runs; load average before: {}",
        load_averages()
    );
    let mut all = Vec::new();
    for run in 1..=runs {
        all.push(one_run(nodes, run).await);
    }
    let m = |f: fn(&Run) -> f64| median(all.iter().map(f).collect());
    println!(
        "median of {runs} at {nodes} Nodes: snapshot {:.0} bytes, {:.0} on the wire; first useful render {:.0} ms; one change {:.0} bytes decoded, {:.0} bytes on the wire, {:.1} ms page work, {:.1} ms main-thread tasks; renderer RSS {:.0} MiB (PSS {:.0} MiB), the tab's renderer {:.0} MiB RSS ({:.0} MiB PSS); JS heap {:.1} MiB; idle sandbox {:.1} % of one core; load average after: {}",
        m(|r| r.snapshot_bytes as f64),
        m(|r| r.snapshot_wire_bytes as f64),
        m(|r| r.first_render_ms),
        m(|r| r.change_decoded_bytes as f64),
        m(|r| r.change_wire_bytes as f64),
        m(|r| r.change_page_ms),
        m(|r| r.change_task_ms),
        m(|r| r.renderer_rss_mib),
        m(|r| r.renderer_pss_mib),
        m(|r| r.tab_rss_mib),
        m(|r| r.tab_pss_mib),
        m(|r| r.js_heap_mib),
        m(|r| r.idle_cpu_percent),
        load_averages()
    );
}
