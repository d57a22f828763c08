//! Watches and kube-runtime reflectors: convergence under concurrent
//! writers, 410 recovery, streaming lists, bookmarks and timeouts.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube_sim::KubeSim;
use serde_json::json;

use crate::support::configmap;

/// Creates `count` objects, then has `writers` tasks update and delete them.
async fn churn(api: &Api<ConfigMap>, count: usize, writers: usize) {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(writers) {
                let name = format!("obj-{i:04}");
                api.create(&PostParams::default(), &configmap(&name, &[("n", "0")]))
                    .await
                    .expect("create");
                if i % 3 == 0 {
                    api.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"data": {"n": "1"}})),
                    )
                    .await
                    .expect("update");
                }
                if i % 7 == 0 {
                    api.delete(&name, &DeleteParams::default())
                        .await
                        .expect("delete");
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer finished");
    }
}

fn snapshot<'a>(
    items: impl Iterator<Item = &'a ConfigMap>,
) -> BTreeMap<String, (String, Option<String>)> {
    items
        .map(|cm| {
            (
                cm.metadata.name.clone().unwrap_or_default(),
                (
                    cm.metadata.resource_version.clone().unwrap_or_default(),
                    cm.data.as_ref().and_then(|d| d.get("n").cloned()),
                ),
            )
        })
        .collect()
}

/// Waits until the reflector's store holds exactly what the server holds.
async fn assert_converges(api: &Api<ConfigMap>, reader: &Store<ConfigMap>) {
    let mut last = (BTreeMap::new(), BTreeMap::new());
    for _ in 0..300 {
        let server = snapshot(api.list(&ListParams::default()).await.unwrap().items.iter());
        let state = reader.state();
        let local = snapshot(state.iter().map(|a| a.as_ref()));
        if server == local {
            return;
        }
        last = (server, local);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "reflector did not converge: server has {} objects, reflector {}",
        last.0.len(),
        last.1.len()
    );
}

async fn run_reflector(
    api: Api<ConfigMap>,
    config: watcher::Config,
    per_event_delay: Duration,
) -> (Store<ConfigMap>, Arc<AtomicUsize>) {
    let (reader, writer) = reflector::store();
    let inits = Arc::new(AtomicUsize::new(0));
    let seen = inits.clone();
    let stream = reflector::reflector(writer, watcher::watcher(api, config).default_backoff());
    tokio::spawn(async move {
        stream
            .for_each(|event| {
                if matches!(event, Ok(Event::Init)) {
                    seen.fetch_add(1, Ordering::SeqCst);
                }
                async move {
                    if !per_event_delay.is_zero() {
                        tokio::time::sleep(per_event_delay).await;
                    }
                }
            })
            .await;
    });
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .expect("reflector ready in time")
        .expect("reflector ready");
    (reader, inits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reflector_converges_on_a_thousand_objects_under_concurrent_writers() {
    let sim = KubeSim::builder().start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let (reader, inits) =
        run_reflector(api.clone(), watcher::Config::default(), Duration::ZERO).await;
    churn(&api, 1000, 4).await;
    assert_converges(&api, &reader).await;
    assert_eq!(inits.load(Ordering::SeqCst), 1, "no relist was needed");
    assert_eq!(sim.stats().watch_expired.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_falls_behind_gets_410_relists_and_converges() {
    let sim = KubeSim::builder().watch_history(20).start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let (reader, inits) = run_reflector(
        api.clone(),
        watcher::Config::default(),
        Duration::from_millis(3),
    )
    .await;
    churn(&api, 1000, 4).await;
    assert_converges(&api, &reader).await;
    assert!(
        sim.stats().watch_expired.load(Ordering::SeqCst) >= 1,
        "the slow reader was sent a 410"
    );
    assert!(
        inits.load(Ordering::SeqCst) >= 2,
        "the reader relisted after the 410"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_lists_converge_and_recover_from_410_too() {
    let sim = KubeSim::builder().watch_history(20).start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    for i in 0..50 {
        api.create(&PostParams::default(), &configmap(&format!("pre-{i}"), &[]))
            .await
            .unwrap();
    }
    let config = watcher::Config::default().streaming_lists();
    let (reader, inits) = run_reflector(api.clone(), config, Duration::from_millis(3)).await;
    assert_eq!(
        reader.state().len(),
        50,
        "the initial events arrived before InitDone"
    );
    churn(&api, 1000, 4).await;
    assert_converges(&api, &reader).await;
    assert!(sim.stats().watch_expired.load(Ordering::SeqCst) >= 1);
    assert!(inits.load(Ordering::SeqCst) >= 2);
}

#[tokio::test]
async fn resuming_from_an_expired_version_yields_an_in_stream_410() {
    let sim = KubeSim::builder().watch_history(5).start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let first = api
        .create(&PostParams::default(), &configmap("first", &[]))
        .await
        .unwrap();
    for i in 0..10 {
        api.create(&PostParams::default(), &configmap(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    let old_rv = first.metadata.resource_version.unwrap();
    let events: Vec<_> = api
        .watch(&WatchParams::default().timeout(5), &old_rv)
        .await
        .expect("watch starts with 200")
        .try_collect()
        .await
        .unwrap();
    match events.as_slice() {
        [WatchEvent::Error(status)] => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
        }
        other => panic!("expected one 410 event, got {other:?}"),
    }
}

#[tokio::test]
async fn watch_events_arrive_in_order_with_selectors_applied() {
    let sim = KubeSim::builder().start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let start = sim.resource_version().to_string();
    let mut labeled = configmap("a", &[]);
    labeled.metadata.labels = Some(BTreeMap::from([("app".to_string(), "web".to_string())]));
    api.create(&PostParams::default(), &labeled).await.unwrap();
    api.create(&PostParams::default(), &configmap("b", &[]))
        .await
        .unwrap();
    // Leaving the selection shows up as a deletion for a selecting watcher.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    let params = WatchParams::default().labels("app=web").timeout(1);
    let events: Vec<_> = api
        .watch(&params, &start)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let kinds: Vec<String> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(cm) => format!("ADDED {}", cm.metadata.name.as_deref().unwrap_or("")),
            WatchEvent::Modified(cm) => {
                format!("MODIFIED {}", cm.metadata.name.as_deref().unwrap_or(""))
            }
            WatchEvent::Deleted(cm) => {
                format!("DELETED {}", cm.metadata.name.as_deref().unwrap_or(""))
            }
            WatchEvent::Bookmark(_) => "BOOKMARK".to_string(),
            WatchEvent::Error(e) => format!("ERROR {}", e.code),
        })
        .collect();
    assert_eq!(kinds, vec!["ADDED a", "DELETED a", "BOOKMARK"]);
}

#[tokio::test]
async fn bookmarks_come_on_idle_watches_and_before_a_timeout_closes_them() {
    let sim = KubeSim::builder()
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    api.create(&PostParams::default(), &configmap("x", &[]))
        .await
        .unwrap();
    let rv = sim.resource_version();
    let params = WatchParams::default().timeout(1);
    let events: Vec<_> = api
        .watch(&params, &rv.to_string())
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let bookmarks: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Bookmark(b) => b.metadata.resource_version.parse().ok(),
            _ => None,
        })
        .collect();
    assert!(
        bookmarks.len() >= 3,
        "periodic bookmarks plus the closing one: {bookmarks:?}"
    );
    assert!(bookmarks.iter().all(|b| *b >= rv));
}

#[tokio::test]
async fn send_initial_events_requires_not_older_than_and_bookmarks() {
    let sim = KubeSim::builder().start().await.unwrap();
    let (code, body) = crate::support::raw(
        &sim.client(),
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true",
        "application/json",
        b"",
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("resourceVersionMatch")
    );
}

/// A client that kept a resourceVersion from before a restart of an
/// in-memory server holds a version the new store never reached: the watch
/// ends with 410 at once (the client relists) and a list at it is a 504
/// ResourceVersionTooLarge, never an empty stream that waits forever.
#[tokio::test]
async fn a_resource_version_from_before_a_restart_makes_the_client_relist() {
    let sim = KubeSim::builder().start().await.unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let current = sim.resource_version();
    let too_new = (current + 1_000).to_string();
    let events: Vec<_> = tokio::time::timeout(
        Duration::from_secs(5),
        api.watch(&WatchParams::default().timeout(30), &too_new)
            .await
            .expect("watch starts with 200")
            .try_collect::<Vec<_>>(),
    )
    .await
    .expect("the watch ends at once")
    .unwrap();
    match events.as_slice() {
        [WatchEvent::Error(status)] => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status.message.contains("too large resource version"),
                "{}",
                status.message
            );
        }
        other => panic!("expected one 410 event, got {other:?}"),
    }
    let listed = api
        .list(&kube::api::ListParams::default().at(&too_new))
        .await;
    let status = crate::support::status_of(listed);
    assert_eq!((status.code, status.reason.as_str()), (504, "Timeout"));
    assert_eq!(
        status.message,
        format!("Timeout: Too large resource version: {too_new}, current: {current}")
    );
    let (_, body) = crate::support::raw(
        &sim.client(),
        "GET",
        &format!("/api/v1/namespaces/default/configmaps?resourceVersion={too_new}"),
        "application/json",
        b"",
    )
    .await;
    assert_eq!(
        body["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(body["details"]["retryAfterSeconds"], 1);
    // "0" and unset still answer at once with what is there.
    assert!(
        api.list(&kube::api::ListParams::default().at("0"))
            .await
            .is_ok()
    );
}
