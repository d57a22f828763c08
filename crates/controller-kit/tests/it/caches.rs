//! Caches against kube-sim: sync signal, transforms, indexes, server-side selectors,
//! readiness cleared on stop, and reads with no API call.

use std::collections::BTreeMap;
use std::time::Duration;

use controller_kit::{Caches, Readiness, StoreOptions};
use k8s_openapi::api::core::v1::{Node, NodeSpec};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::support::*;

const ELIGIBLE: &str = "mokka.nvidia.com/sgpu-node";

fn node(name: &str, eligible: bool) -> Node {
    let mut labels = BTreeMap::from([("rack".to_string(), "rack-1".to_string())]);
    if eligible {
        labels.insert(ELIGIBLE.to_string(), "true".to_string());
    }
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!("sim://{name}")),
            ..Default::default()
        }),
        status: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caches_sync_serve_indexed_transformed_reads_and_clear_readiness_on_stop() {
    let sim = start_sim().await;
    let nodes: Api<Node> = Api::all(sim.client());
    for (name, eligible) in [("gpu-1", true), ("gpu-2", true), ("cpu-1", false)] {
        nodes
            .create(&PostParams::default(), &node(name, eligible))
            .await
            .unwrap();
    }

    let (client, mutations) = recording_client(sim.client());
    let readiness = Readiness::new();
    let caches = Caches::with_readiness(readiness.clone());
    let store = caches
        .add(
            "nodes",
            Api::<Node>::all(client),
            watcher::Config::default().labels(&format!("{ELIGIBLE}=true")),
            StoreOptions::default()
                .transform(|node: &mut Node| {
                    node.spec = None;
                    node.status = None;
                    node.metadata.managed_fields = None;
                })
                .index("uid", |node: &Node| {
                    node.metadata.uid.iter().cloned().collect()
                })
                .index("rack", |node: &Node| {
                    node.metadata
                        .labels
                        .as_ref()
                        .and_then(|labels| labels.get("rack").cloned())
                        .into_iter()
                        .collect()
                }),
        )
        .unwrap();
    assert!(!caches.cache_ready());
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let caches = caches.clone();
        let stop = stop.clone();
        async move { caches.run(stop).await }
    });
    tokio::time::timeout(Duration::from_secs(10), caches.caches_synced())
        .await
        .expect("caches sync");
    assert!(caches.cache_ready());
    assert!(readiness.snapshot().cache_ready);

    // Server-side selector: the ineligible Node is not cached.
    assert_eq!(store.len(), 2);
    assert!(store.get("cpu-1").is_none());
    let cached = store.get("gpu-1").expect("eligible node cached");
    assert!(cached.spec.is_none(), "the transform stripped the spec");
    let uid = cached.metadata.uid.clone().expect("kube-sim assigns a uid");
    assert_eq!(
        store.by_index("uid", &uid)[0].metadata.name.as_deref(),
        Some("gpu-1")
    );
    assert_eq!(store.by_index("rack", "rack-1").len(), 2);

    // A label change moves the Node between index values.
    let patch = serde_json::json!({"metadata": {"labels": {"rack": "rack-2"}}});
    nodes
        .patch("gpu-2", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the index follows the label change",
        || {
            let moved = store.by_index("rack", "rack-2").len() == 1
                && store.by_index("rack", "rack-1").len() == 1;
            async move { moved }
        },
    )
    .await;

    // Dropping the eligibility label removes the Node from the cache.
    let patch = serde_json::json!({"metadata": {"labels": {ELIGIBLE: null}}});
    nodes
        .patch("gpu-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "the ineligible Node leaves the cache",
        || {
            let gone = store.get("gpu-1").is_none() && store.by_index("uid", &uid).is_empty();
            async move { gone }
        },
    )
    .await;

    assert!(
        mutations.all().is_empty(),
        "caches never write: {:?}",
        mutations.all()
    );
    stop.cancel();
    running.await.unwrap().unwrap();
    assert!(
        !caches.cache_ready(),
        "readiness is cleared when the caches stop"
    );
    assert!(!readiness.snapshot().cache_ready);
    assert_eq!(store.len(), 1, "the last state stays readable");
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_cannot_be_added_after_the_caches_started() {
    let sim = start_sim().await;
    let caches = Caches::new();
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let caches = caches.clone();
        let stop = stop.clone();
        async move { caches.run(stop).await }
    });
    caches.caches_synced().await;
    let late = caches.add(
        "late",
        Api::<Node>::all(sim.client()),
        watcher::Config::default(),
        StoreOptions::default(),
    );
    assert!(late.is_err());
    assert!(
        caches.run(CancellationToken::new()).await.is_err(),
        "run twice is refused"
    );
    stop.cancel();
    running.await.unwrap().unwrap();
    sim.shutdown().await;
}
