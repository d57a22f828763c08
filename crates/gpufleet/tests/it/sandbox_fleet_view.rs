//! The sandbox's fleet view in headless Chromium (Debian's `chromium`,
//! installed by scripts/test.sh), driven over the DevTools protocol: the
//! page's counts of racks, Nodes and GPUs equal the API's; a policy that
//! fails a GPU turns that GPU's cell to "lost" through the live event
//! stream, without a reload; a GPU failing on a TFJob's Node flags the job;
//! search by a TFJob's name opens it; "only problems" leaves the lost
//! racks in the heatmap; arrow keys and Enter open a rack; every visible
//! text has 4.5:1 contrast; a 390 px wide window does not scroll sideways;
//! a screenshot is saved; once the sandbox stops the page marks its data
//! stale. At 2,000 Nodes: the
//! change a failed GPU causes stays small on the wire, search finds a GPU
//! by its serial, and a deep link opens a Node's detail.

use std::path::PathBuf;

use base64::Engine;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};
use mokka::api::{SGPURack, SGPURuntimePolicy};
use serde_json::json;

use crate::browser;
use crate::support::RunningSandbox;

/// Lists the visible elements whose own text has less than 4.5:1 contrast
/// with the nearest opaque background behind it (WCAG's relative
/// luminance), as `tag.class ratio text`.
const CONTRAST_BELOW_AA: &str = r#"(() => {
  const channels = c => (c.match(/[\d.]+/g) || []).map(Number);
  const luminance = c => {
    const [r, g, b] = channels(c).slice(0, 3).map(v => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const background = el => {
    for (let e = el; e; e = e.parentElement) {
      const c = getComputedStyle(e).backgroundColor, v = channels(c);
      if (v.length === 3 || (v.length === 4 && v[3] > 0)) return c;
    }
    return "rgb(255, 255, 255)";
  };
  const low = [];
  document.querySelectorAll("body *").forEach(el => {
    const ownText = Array.from(el.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!ownText || el.getClientRects().length === 0 || getComputedStyle(el).visibility === "hidden") return;
    if (el.closest(".visually-hidden, .skip, [hidden]")) return;
    const fg = luminance(getComputedStyle(el).color), bg = luminance(background(el));
    const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
    if (ratio < 4.5) low.push(el.tagName.toLowerCase() + "." + el.className + " " + ratio.toFixed(2) + " " + el.textContent.trim().slice(0, 24));
  });
  return low;
})()"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_view_shows_the_apis_counts_and_a_failed_gpu_turns_lost_live() {
    browser::chromium();
    let sandbox = RunningSandbox::start(&["--nodes", "36", "--ui-port", "0"]);
    let url = sandbox.ui_url.clone();
    let client = sandbox.client().await;
    let racks = Api::<SGPURack>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("racks listed")
        .items;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes listed")
        .items;
    let gpus: usize = racks
        .iter()
        .flat_map(|rack| &rack.spec.nodes)
        .map(|slot| slot.gpus.len())
        .sum();
    assert_eq!((racks.len(), nodes.len(), gpus), (2, 36, 144));

    let rack = racks
        .iter()
        .find(|rack| rack.spec.identity.rack_index == 1)
        .expect("rack 1");
    let rack_name = rack.metadata.name.clone().expect("rack 1's name");

    let (_browser, mut page) = browser::open(&sandbox.dir.path().join("chromium-profile")).await;
    page.call("Page.enable", json!({})).await;
    // A deep link: the page opens with rack 1's detail.
    page.call(
        "Page.navigate",
        json!({"url": format!("{url}#rack={rack_name}")}),
    )
    .await;
    page.evaluate_until("document.getElementById('live')?.dataset.live", |v| {
        v == "live"
    })
    .await;
    let count = |id: &str| format!("Number(document.getElementById('{id}')?.textContent)");
    page.evaluate_until(&count("count-gpus"), |v| *v == json!(gpus))
        .await;
    assert_eq!(
        page.evaluate(&count("count-racks")).await,
        json!(racks.len())
    );
    assert_eq!(
        page.evaluate(&count("count-nodes")).await,
        json!(nodes.len())
    );
    assert_eq!(
        page.evaluate("document.querySelectorAll('#heatmap .rack-cell').length")
            .await,
        json!(racks.len())
    );
    let rack_gpus: usize = rack.spec.nodes.iter().map(|slot| slot.gpus.len()).sum();
    assert_eq!(
        page.evaluate("document.querySelectorAll('#detail td.gpu').length")
            .await,
        json!(rack_gpus)
    );
    assert_eq!(
        page.evaluate("document.title").await,
        json!("gpufleet sandbox")
    );
    // Only a reload would clear it.
    page.evaluate("window.notReloaded = 'yes'").await;
    let updates_before = page.evaluate("window.fleetUpdates").await;

    let uuid = rack
        .spec
        .node_by_index(2)
        .and_then(|slot| slot.gpus.iter().find(|gpu| gpu.index == 3))
        .map(|gpu| gpu.uuid.clone())
        .expect("rack 1, slot 2, GPU 3");
    let cell =
        format!("document.querySelector('#detail td.gpu[data-uuid=\"{uuid}\"]')?.dataset.state");
    assert_eq!(page.evaluate(&cell).await, json!("healthy"));
    let policy = crate::browser::policy_failing_one_gpu(
        "browser-fails-one-gpu",
        "sandbox",
        "nvl72",
        (1, 2, 3),
    );
    Api::<SGPURuntimePolicy>::all(client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy created");
    page.evaluate_until(&cell, |v| v == "lost").await;
    assert_eq!(page.evaluate("window.notReloaded").await, json!("yes"));
    assert_ne!(page.evaluate("window.fleetUpdates").await, updates_before);
    assert_eq!(page.evaluate(&count("count-lost")).await, json!(1));
    assert_eq!(
        page.evaluate(&format!(
            "document.getElementById('rack-{rack_name}')?.dataset.status"
        ))
        .await,
        json!("lost")
    );
    // The title carries the problem count.
    assert_eq!(
        page.evaluate("document.title").await,
        json!("(1 problem) gpufleet sandbox")
    );

    // A running TFJob shows with its pods' placement.
    let job: tfjob::api::object::TFJobObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "browser-job", "namespace": "default"},
        "spec": {"tfReplicaSpecs": {
            "Chief": {"replicas": 1, "template": {"spec": {"containers": [{
                "name": "tensorflow", "image": "tensorflow/tensorflow:2.17.0-gpu",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
            "Worker": {"replicas": 2, "template": {"spec": {"containers": [{
                "name": "tensorflow", "image": "tensorflow/tensorflow:2.17.0-gpu",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
        }},
    }))
    .expect("a TFJob");
    Api::<tfjob::api::object::TFJobObject>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &job)
        .await
        .expect("TFJob created");
    page.evaluate_until(
        "document.getElementById('job-default-browser-job')?.dataset.phase",
        |v| v == "Running",
    )
    .await;
    let placed = page
        .evaluate_until(
            "Array.from(document.querySelectorAll('#job-default-browser-job li')).map(li => li.textContent).join('|')",
            |v| v.as_str().is_some_and(|t| t.matches("gpu-node-").count() == 3 && t.matches("Running").count() == 3),
        )
        .await;
    assert!(
        placed
            .as_str()
            .unwrap_or_default()
            .contains("browser-job-chief-0"),
        "{placed}"
    );
    assert_eq!(page.evaluate(&count("count-tfjobs")).await, json!(1));
    assert_eq!(page.evaluate("window.notReloaded").await, json!("yes"));

    // A GPU failing on the chief's Node flags the job.
    let chief = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default")
        .get("browser-job-chief-0")
        .await
        .expect("the chief pod");
    let chief_node = chief
        .spec
        .and_then(|spec| spec.node_name)
        .expect("the chief is scheduled");
    let (chief_rack, chief_slot) = Api::<SGPURack>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("racks listed")
        .items
        .iter()
        .find_map(|rack| {
            rack.spec
                .nodes
                .iter()
                .find(|slot| slot.node_ref.as_ref().is_some_and(|r| r.name == chief_node))
                .map(|slot| (rack.spec.identity.rack_index, slot.index))
        })
        .expect("the chief's Node has a rack slot");
    // Unless the scheduler put the chief on the Node whose GPU failed above.
    let first_lost_node = rack
        .spec
        .node_by_index(2)
        .and_then(|slot| slot.node_ref.as_ref())
        .map(|node| node.name.clone());
    if first_lost_node.as_deref() != Some(chief_node.as_str()) {
        assert_eq!(
            page.evaluate(
                "document.getElementById('job-default-browser-job').dataset.broken ?? 'no'"
            )
            .await,
            json!("no"),
            "{chief_node}"
        );
    }
    Api::<SGPURuntimePolicy>::all(client.clone())
        .create(
            &PostParams::default(),
            &crate::browser::policy_failing_one_gpu(
                "browser-fails-the-chiefs-gpu",
                "sandbox",
                "nvl72",
                (chief_rack, chief_slot, 0),
            ),
        )
        .await
        .expect("policy created");
    page.evaluate_until(
        "document.getElementById('job-default-browser-job')?.dataset.broken",
        |v| v == "true",
    )
    .await;

    // Search by the TFJob's name opens its detail, which lists its pods' Nodes.
    page.evaluate(
        "(() => { const s = document.getElementById('search'); s.value = 'browser-job'; \
         document.getElementById('search-form').requestSubmit(); })()",
    )
    .await;
    page.evaluate_until("document.querySelector('#detail h2')?.textContent", |v| {
        v.as_str()
            .is_some_and(|t| t.starts_with("TFJob default/browser-job"))
    })
    .await;
    let detail = page
        .evaluate("document.getElementById('detail').textContent")
        .await;
    assert!(
        detail.as_str().unwrap_or_default().contains(&chief_node),
        "{detail}"
    );

    // The keyboard: the heatmap is one tab stop, arrows move, Enter opens.
    page.evaluate("document.querySelector('#heatmap .rack-cell').focus()")
        .await;
    let key = |key: &str, code: i64, text: &str| json!({"type": "keyDown", "key": key, "code": key, "windowsVirtualKeyCode": code, "text": text});
    page.call("Input.dispatchKeyEvent", key("ArrowRight", 39, ""))
        .await;
    let focused = page.evaluate("document.activeElement.dataset.rack").await;
    assert_eq!(focused, json!(rack_name), "ArrowRight moves to rack 1");
    page.call("Input.dispatchKeyEvent", key("Enter", 13, "\r"))
        .await;
    page.evaluate_until("decodeURIComponent(location.hash)", |v| {
        *v == json!(format!("#rack={rack_name}"))
    })
    .await;

    // "Only problems" leaves the racks with a lost GPU in the heatmap.
    page.evaluate("document.getElementById('only-problems').click()")
        .await;
    let shown = page
        .evaluate("Array.from(document.querySelectorAll('#heatmap .rack-cell')).filter(c => c.offsetParent !== null).map(c => c.dataset.status)")
        .await;
    let shown: Vec<&str> = shown
        .as_array()
        .map(|cells| cells.iter().filter_map(|c| c.as_str()).collect())
        .unwrap_or_default();
    assert!(
        !shown.is_empty() && shown.iter().all(|s| *s == "lost"),
        "{shown:?}"
    );
    assert_eq!(
        page.evaluate("document.getElementById('live').getAttribute('aria-live')")
            .await,
        json!("polite")
    );
    page.evaluate("document.getElementById('only-problems').click()")
        .await;

    // Every visible text is at least 4.5:1 against its background (WCAG AA).
    let low_contrast = page.evaluate(CONTRAST_BELOW_AA).await;
    assert_eq!(low_contrast, json!([]), "text below 4.5:1");

    let shot = page
        .call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": false}),
        )
        .await;
    let png = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().expect("screenshot data"))
        .expect("base64 PNG");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let out = std::env::var("GPUFLEET_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("sandbox-fleet-view.png")
        });
    std::fs::write(&out, &png).expect("screenshot written");
    eprintln!("screenshot: {}", out.display());

    // A phone-sized window: the page reflows instead of scrolling sideways.
    page.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 390, "height": 800, "deviceScaleFactor": 1, "mobile": true}),
    )
    .await;
    page.evaluate_until(
        "document.documentElement.scrollWidth <= window.innerWidth",
        |v| v == true,
    )
    .await;
    page.call("Emulation.clearDeviceMetricsOverride", json!({}))
        .await;

    let mut sandbox = sandbox;
    let status = sandbox.process.terminate().await;
    assert!(
        status.success(),
        "the sandbox stops cleanly on SIGTERM: {status}"
    );
    // The page says its data is stale once the server is gone.
    page.evaluate_until("document.getElementById('live').dataset.live", |v| {
        v == "disconnected"
    })
    .await;
    assert_eq!(
        page.evaluate(
            "[document.body.classList.contains('stale'), document.getElementById('stale').hidden]"
        )
        .await,
        json!([true, false])
    );
    let stale_at = page
        .evaluate("document.getElementById('stale-at').textContent")
        .await;
    assert!(
        stale_at
            .as_str()
            .is_some_and(|t| t.ends_with('Z') && t.len() == 20),
        "the time the data is from, in the page's one format: {stale_at}"
    );
}

/// Sums what the page received on its event stream since the last call:
/// the messages' decoded size (an upper bound of the gzip-compressed wire
/// size give or take a few bytes of framing) and the bytes Chromium counted
/// on the wire for that response.
fn event_stream_bytes(page: &mut browser::Page, events_request: &str) -> (usize, u64) {
    let decoded = page
        .take_events("Network.eventSourceMessageReceived")
        .iter()
        .filter(|e| e["params"]["requestId"] == events_request)
        .map(|e| e["params"]["data"].as_str().map_or(0, str::len))
        .sum();
    let wire = page
        .take_events("Network.dataReceived")
        .iter()
        .filter(|e| e["params"]["requestId"] == events_request)
        .filter_map(|e| e["params"]["encodedDataLength"].as_u64())
        .sum();
    (decoded, wire)
}

// The 2,000-Node sandbox takes 80 to 140 s to start on a busy 2-core
// machine (gpuid inventories every Node through exec before the sandbox
// reports ready); .config/nextest.toml gives it both cores and 10 minutes.
#[tokio::test(flavor = "multi_thread")]
async fn at_two_thousand_nodes_a_failed_gpu_costs_one_small_change_and_search_and_deep_links_work()
{
    browser::chromium();
    let sandbox = RunningSandbox::start(&["--nodes", "2000", "--ui-port", "0"]);
    let url = sandbox.ui_url.clone();
    let client = sandbox.client().await;
    let racks = Api::<SGPURack>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("racks listed")
        .items;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes listed")
        .items;
    // GPUs in slots a Node is bound to: the empty slots of the last rack
    // hold no GPU anyone can use.
    let gpus: usize = racks
        .iter()
        .flat_map(|rack| &rack.spec.nodes)
        .filter(|slot| slot.node_ref.is_some())
        .map(|slot| slot.gpus.len())
        .sum();
    assert_eq!(nodes.len(), 2000);

    let (_browser, mut page) = browser::open(&sandbox.dir.path().join("chromium-profile")).await;
    page.call("Page.enable", json!({})).await;
    page.call("Network.enable", json!({})).await;
    page.call("Page.navigate", json!({"url": url})).await;
    let count = |id: &str| format!("Number(document.getElementById('{id}')?.textContent)");
    page.evaluate_until(&count("count-gpus"), |v| *v == json!(gpus))
        .await;
    assert_eq!(
        page.evaluate(&count("count-nodes")).await,
        json!(nodes.len())
    );
    assert_eq!(
        page.evaluate(&count("count-racks")).await,
        json!(racks.len())
    );
    assert_eq!(page.evaluate(&count("count-lost")).await, json!(0));
    assert_eq!(
        page.evaluate(&count("count-healthy")).await,
        json!(gpus),
        "every bound GPU starts healthy"
    );
    // Only the rows on screen are in the document.
    let rows = page
        .evaluate("document.querySelectorAll('#nodes .row').length")
        .await;
    assert!(
        rows.as_u64().is_some_and(|n| n > 0 && n < 200),
        "{rows} Node rows drawn"
    );
    let events_request = page
        .take_events("Network.requestWillBeSent")
        .iter()
        .find(|e| {
            e["params"]["request"]["url"]
                .as_str()
                .is_some_and(|u| u.ends_with("/events"))
        })
        .and_then(|e| e["params"]["requestId"].as_str().map(str::to_string))
        .expect("the page opened /events");
    page.evaluate("window.notReloaded = 'yes'").await;

    // Fail one GPU of rack 50, slot 7.
    let rack = racks
        .iter()
        .find(|rack| rack.spec.identity.rack_index == 50)
        .expect("rack 50");
    let slot = rack.spec.node_by_index(7).expect("slot 7");
    let gpu = slot.gpus.iter().find(|gpu| gpu.index == 3).expect("GPU 3");
    let node = slot
        .node_ref
        .as_ref()
        .expect("slot 7 is bound")
        .name
        .clone();
    let rack_name = rack.metadata.name.clone().expect("rack 50's name");
    let _ = event_stream_bytes(&mut page, &events_request);
    let updates_before = page.evaluate("window.fleetUpdates").await;
    Api::<SGPURuntimePolicy>::all(client.clone())
        .create(
            &PostParams::default(),
            &browser::policy_failing_one_gpu("fail-at-scale", "sandbox", "nvl72", (50, 7, 3)),
        )
        .await
        .expect("policy created");
    page.evaluate_until(&count("count-lost"), |v| *v == json!(1))
        .await;
    // Let the follow-up changes (Mokka's status, gpuid's re-inventory of
    // the Node) arrive too: they count against the change's cost.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let _ = page.evaluate("1").await;
    let (decoded, wire) = event_stream_bytes(&mut page, &events_request);
    eprintln!("one failed GPU at 2,000 Nodes: {decoded} bytes of events, {wire} bytes on the wire");
    assert!(decoded > 0, "the change arrived over the event stream");
    assert!(
        decoded < 10_000,
        "{decoded} bytes of events for one failed GPU"
    );
    assert!(wire < 10_000, "{wire} bytes on the wire for one failed GPU");
    assert_ne!(page.evaluate("window.fleetUpdates").await, updates_before);
    assert_eq!(page.evaluate("window.notReloaded").await, json!("yes"));
    assert_eq!(
        page.evaluate(&format!(
            "document.getElementById('rack-{rack_name}')?.dataset.status"
        ))
        .await,
        json!("lost")
    );
    assert_eq!(
        page.evaluate(&count("count-healthy")).await,
        json!(gpus - 1)
    );

    // Search by the full serial opens that GPU's detail.
    page.evaluate(&format!(
        "(() => {{ const s = document.getElementById('search'); s.value = '{}'; \
         document.getElementById('search-form').requestSubmit(); }})()",
        gpu.serial
    ))
    .await;
    page.evaluate_until("document.getElementById('gpu-detail')?.dataset.uuid", |v| {
        *v == json!(gpu.uuid)
    })
    .await;
    assert_eq!(
        page.evaluate("document.getElementById('gpu-detail').dataset.state")
            .await,
        json!("lost")
    );
    let detail = page
        .evaluate("document.getElementById('detail').textContent")
        .await;
    let detail = detail.as_str().unwrap_or_default();
    assert!(
        detail.contains(&node) && detail.contains("fail-at-scale"),
        "the GPU's detail names its Node and the policy: {detail}"
    );

    // A deep link to the Node opens its detail, in a fresh page load.
    page.call(
        "Page.navigate",
        json!({"url": format!("{url}#node={node}")}),
    )
    .await;
    page.evaluate_until("document.querySelector('#detail h2')?.textContent", |v| {
        *v == json!(format!("Node {node}"))
    })
    .await;
    let cells = page
        .evaluate("Array.from(document.querySelectorAll('#detail td[data-status]')).map(td => td.dataset.status).join(',')")
        .await;
    assert_eq!(cells, json!("healthy,healthy,healthy,lost"));

    let mut sandbox = sandbox;
    let status = sandbox.process.terminate().await;
    assert!(status.success(), "the sandbox stops cleanly: {status}");
}
