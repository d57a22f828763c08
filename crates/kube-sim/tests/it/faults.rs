//! Fault injection: each fault kind hits real kube-rs clients and
//! kube-runtime reflectors, which recover and converge; the metrics count it.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube_sim::{Fault, KubeSim, Verb};
use serde_json::json;
use tokio::task::JoinHandle;

use crate::support::{configmap, create_configmap, raw, sim, status_of};

const CONVERGE: Duration = Duration::from_secs(60);

fn reflect(api: Api<ConfigMap>) -> (Store<ConfigMap>, JoinHandle<()>) {
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .applied_objects();
    let task = tokio::spawn(async move {
        stream.for_each(|_| async {}).await;
    });
    (reader, task)
}

/// Waits until the reflector holds exactly these names.
async fn converge(reader: &Store<ConfigMap>, expected: &[String]) {
    let mut expected = expected.to_vec();
    expected.sort();
    let deadline = Instant::now() + CONVERGE;
    loop {
        let mut names: Vec<String> = reader
            .state()
            .iter()
            .filter_map(|cm| cm.metadata.name.clone())
            .collect();
        names.sort();
        if names == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "reflector did not converge: have {names:?}, want {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `n` configmap watches have been opened on the server.
async fn watches_opened(sim: &KubeSim, n: u64) {
    let deadline = Instant::now() + CONVERGE;
    while sim.metrics().requests("watch", "configmaps", 200) < n {
        assert!(Instant::now() < deadline, "no watch opened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn create_all(api: &Api<ConfigMap>, names: &[String]) {
    for name in names {
        create_configmap(api, name).await;
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:02}")).collect()
}

async fn metrics_text(sim: &KubeSim) -> String {
    let client = sim.client();
    let request = http::Request::get("/metrics")
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(request).await.unwrap();
    let ct = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .unwrap()
        .to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out_by_the_retrying_client() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "one").await;
    sim.faults()
        .add(
            Fault::error(429)
                .on(Verb::List, "configmaps")
                .retry_after(1)
                .times(2),
        )
        .unwrap();

    // The in-process client does not retry: it sees the 429 and its header.
    let request = http::Request::get("/api/v1/namespaces/default/configmaps")
        .body(kube::client::Body::empty())
        .unwrap();
    let response = sim.client().send(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "1");

    // kube's HTTP client honours Retry-After and gets through.
    let http_api: Api<ConfigMap> = Api::default_namespaced(sim.http_client().unwrap());
    let started = Instant::now();
    let list = http_api.list(&ListParams::default()).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(900));
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        sim.metrics()
            .faults_injected("list", "configmaps", "error_429"),
        2
    );
    assert_eq!(sim.metrics().requests("list", "configmaps", 429), 2);
    assert_eq!(sim.metrics().requests("list", "configmaps", 200), 1);
    let text = metrics_text(&sim).await;
    assert!(
        text.contains(
            r#"kube_sim_faults_injected_total{verb="list",resource="configmaps",fault="error_429"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"kube_sim_requests_total{verb="list",resource="configmaps",code="200"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn a_reflector_survives_503s_on_its_list() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let wanted = names("cm", 5);
    create_all(&api, &wanted[..3]).await;
    sim.faults()
        .add(Fault::error(503).on(Verb::List, "configmaps").times(2))
        .unwrap();
    let (reader, task) = reflect(api.clone());
    converge(&reader, &wanted[..3]).await;
    create_all(&api, &wanted[3..]).await;
    converge(&reader, &wanted).await;
    assert_eq!(
        sim.metrics()
            .faults_injected("list", "configmaps", "error_503"),
        2
    );
    assert!(sim.faults().list().is_empty(), "the budget is used up");
    task.abort();
}

#[tokio::test]
async fn a_500_on_get_is_retried_by_the_caller() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "target").await;
    sim.faults()
        .add(Fault::error(500).on(Verb::Get, "configmaps").times(3))
        .unwrap();
    let mut failures = Vec::new();
    let found = loop {
        match api.get("target").await {
            Ok(cm) => break cm,
            Err(e) => {
                failures.push(status_of::<ConfigMap>(Err(e)));
                assert!(failures.len() < 10, "still failing");
            }
        }
    };
    assert_eq!(found.metadata.name.as_deref(), Some("target"));
    assert_eq!(failures.len(), 3);
    assert!(
        failures
            .iter()
            .all(|s| s.code == 500 && s.reason == "InternalError")
    );
    assert_eq!(
        sim.metrics()
            .faults_injected("get", "configmaps", "error_500"),
        3
    );
}

#[tokio::test]
async fn a_409_on_update_is_retried_with_a_fresh_read() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "counter").await;
    sim.faults()
        .add(Fault::error(409).on(Verb::Update, "configmaps").times(2))
        .unwrap();
    let mut conflicts = 0;
    loop {
        let mut cm = api.get("counter").await.unwrap();
        cm.data
            .get_or_insert_with(Default::default)
            .insert("n".into(), "1".into());
        match api.replace("counter", &PostParams::default(), &cm).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                assert_eq!(s.reason, "Conflict");
                conflicts += 1;
                assert!(conflicts < 10, "conflicts never stopped");
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert_eq!(conflicts, 2);
    let cm = api.get("counter").await.unwrap();
    assert_eq!(cm.data.unwrap()["n"], "1");
    assert_eq!(
        sim.metrics()
            .faults_injected("update", "configmaps", "error_409"),
        2
    );
}

#[tokio::test]
async fn watches_cut_after_n_events_are_resumed_without_losing_events() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    sim.faults()
        .add(Fault::close_watch_after(2).resource("configmaps"))
        .unwrap();
    let (reader, task) = reflect(api.clone());
    watches_opened(&sim, 1).await;
    let wanted = names("w", 9);
    for name in &wanted {
        create_configmap(&api, name).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    converge(&reader, &wanted).await;
    let cuts = sim
        .metrics()
        .faults_injected("watch", "configmaps", "close_watch");
    assert!(cuts >= 3, "only {cuts} watch cuts for 9 events");
    task.abort();
}

#[tokio::test]
async fn a_forced_410_makes_the_reflector_relist() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_all(&api, &names("old", 2)).await;
    sim.faults()
        .add(Fault::expire_next_watch().resource("configmaps"))
        .unwrap();
    let (reader, task) = reflect(api.clone());
    converge(&reader, &names("old", 2)).await;
    let mut wanted = names("old", 2);
    wanted.extend(names("new", 2));
    create_all(&api, &names("new", 2)).await;
    converge(&reader, &wanted).await;
    assert_eq!(
        sim.metrics()
            .faults_injected("watch", "configmaps", "expire_watch"),
        1
    );
    // One list at start, one after the in-stream 410.
    assert!(sim.metrics().requests("list", "configmaps", 200) >= 2);
    task.abort();
}

#[tokio::test]
async fn an_outage_fails_requests_drops_watches_and_ends() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_all(&api, &names("before", 2)).await;
    let (reader, task) = reflect(api.clone());
    converge(&reader, &names("before", 2)).await;
    // Let the reflector's watch open before the outage.
    watches_opened(&sim, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    sim.faults().outage(Duration::from_secs(2));
    let status = status_of(api.list(&ListParams::default()).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (503, "ServiceUnavailable")
    );
    let (code, _) = raw(&sim.client(), "GET", "/apis", "application/json", b"").await;
    assert_eq!(code, 503, "discovery is down too");
    let (code, listing) = raw(&sim.client(), "GET", "/sim/faults", "application/json", b"").await;
    assert_eq!(code, 200, "the admin endpoint stays up");
    assert!(listing["outageRemainingMillis"].as_u64().unwrap() > 0);

    // Writes succeed again once the window is over, and the reflector catches up.
    let deadline = Instant::now() + CONVERGE;
    while sim.faults().outage_remaining().is_some() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    create_all(&api, &names("after", 2)).await;
    let mut wanted = names("after", 2);
    wanted.extend(names("before", 2));
    converge(&reader, &wanted).await;
    assert!(
        sim.metrics()
            .faults_injected("watch", "configmaps", "outage")
            >= 1
    );
    assert!(
        sim.metrics()
            .faults_injected("list", "configmaps", "outage")
            >= 1
    );
    task.abort();
}

#[tokio::test]
async fn latency_delays_only_the_matching_requests() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "slow").await;
    sim.faults()
        .add(Fault::latency(Duration::from_millis(400)).on(Verb::Get, "configmaps"))
        .unwrap();
    let started = Instant::now();
    api.get("slow").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(
        sim.metrics()
            .faults_injected("get", "configmaps", "latency"),
        1
    );
    assert_eq!(
        sim.metrics()
            .faults_injected("list", "configmaps", "latency"),
        0
    );
}

#[tokio::test]
async fn the_admin_endpoint_adds_lists_and_clears_faults() {
    let sim = sim().await;
    let client = sim.client();
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(&PostParams::default(), &configmap("x", &[]))
        .await
        .unwrap();
    let spec = json!({
        "verbs": ["list"],
        "resource": "configmaps",
        "namespace": "default",
        "action": {"type": "error", "code": 503},
        "probability": 1.0
    });
    let (code, created) = raw(
        &client,
        "POST",
        "/sim/faults",
        "application/json",
        spec.to_string().as_bytes(),
    )
    .await;
    assert_eq!(code, 201);
    let id = created["id"].as_u64().unwrap();
    let (_, listing) = raw(&client, "GET", "/sim/faults", "application/json", b"").await;
    assert_eq!(listing["faults"][0]["id"], id);
    assert_eq!(listing["faults"][0]["fault"]["action"]["code"], 503);
    for _ in 0..2 {
        let status = status_of(api.list(&ListParams::default()).await);
        assert_eq!(status.code, 503);
    }
    let (code, _) = raw(
        &client,
        "POST",
        "/sim/faults",
        "application/json",
        b"{\"action\":{}}",
    )
    .await;
    assert_eq!(code, 400, "a malformed spec is refused");
    let (code, cleared) = raw(&client, "DELETE", "/sim/faults", "application/json", b"").await;
    assert_eq!((code, cleared["removed"].as_u64()), (200, Some(1)));
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    assert_eq!(
        sim.metrics()
            .faults_injected("list", "configmaps", "error_503"),
        2
    );
}
