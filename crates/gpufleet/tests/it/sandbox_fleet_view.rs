//! The sandbox's fleet view in headless Chromium (Debian's `chromium`,
//! installed by scripts/test.sh), driven over the DevTools protocol: the
//! page's counts of racks, Nodes and GPUs equal the API's; a policy that
//! fails a GPU turns that GPU's cell to "lost" through the live event
//! stream, without a reload; a screenshot is saved.

use std::path::PathBuf;

use base64::Engine;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{ListParams, PostParams};
use mokka::api::{SGPURack, SGPURuntimePolicy};
use serde_json::json;

use crate::browser;
use crate::support::RunningSandbox;

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

    let (_browser, mut page) = browser::open(&sandbox.dir.path().join("chromium-profile")).await;
    page.call("Page.enable", json!({})).await;
    page.call("Page.navigate", json!({"url": url})).await;
    page.evaluate_until("document.getElementById('live')?.dataset.live", |v| {
        v == "live"
    })
    .await;
    let count = |id: &str| format!("Number(document.getElementById('{id}')?.textContent)");
    assert_eq!(
        page.evaluate(&count("count-racks")).await,
        json!(racks.len())
    );
    assert_eq!(
        page.evaluate(&count("count-nodes")).await,
        json!(nodes.len())
    );
    assert_eq!(page.evaluate(&count("count-gpus")).await, json!(gpus));
    assert_eq!(
        page.evaluate("document.querySelectorAll('td.gpu').length")
            .await,
        json!(gpus)
    );
    // Only a reload would clear it.
    page.evaluate("window.notReloaded = 'yes'").await;
    let updates_before = page.evaluate("window.fleetUpdates").await;

    let rack = racks
        .iter()
        .find(|rack| rack.spec.identity.rack_index == 1)
        .expect("rack 1");
    let uuid = rack
        .spec
        .node_by_index(2)
        .and_then(|slot| slot.gpus.iter().find(|gpu| gpu.index == 3))
        .map(|gpu| gpu.uuid.clone())
        .expect("rack 1, slot 2, GPU 3");
    let cell = format!("document.getElementById('gpu-{uuid}')?.dataset.state");
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

    let mut sandbox = sandbox;
    let status = sandbox.process.terminate().await;
    assert!(
        status.success(),
        "the sandbox stops cleanly on SIGTERM: {status}"
    );
}
