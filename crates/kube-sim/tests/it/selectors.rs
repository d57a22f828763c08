//! Label and field selectors and consistent paging.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{configmap, sim, status_of};

async fn labeled(api: &Api<ConfigMap>, name: &str, labels: &[(&str, &str)]) {
    let mut cm = configmap(name, &[]);
    cm.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    api.create(&PostParams::default(), &cm).await.unwrap();
}

async fn names(api: &Api<ConfigMap>, params: &ListParams) -> Vec<String> {
    api.list(params)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}

#[tokio::test]
async fn label_selectors_support_equality_and_set_expressions() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    labeled(&api, "web-prod", &[("app", "web"), ("env", "prod")]).await;
    labeled(&api, "web-dev", &[("app", "web"), ("env", "dev")]).await;
    labeled(&api, "db", &[("app", "db"), ("legacy", "yes")]).await;
    let lp = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        names(&api, &lp("app=web")).await,
        vec!["web-dev", "web-prod"]
    );
    assert_eq!(
        names(&api, &lp("app==web,env!=dev")).await,
        vec!["web-prod"]
    );
    assert_eq!(
        names(&api, &lp("env in (prod,staging)")).await,
        vec!["web-prod"]
    );
    assert_eq!(
        names(&api, &lp("env notin (prod)")).await,
        vec!["db", "web-dev"]
    );
    assert_eq!(names(&api, &lp("legacy")).await, vec!["db"]);
    assert_eq!(
        names(&api, &lp("!legacy")).await,
        vec!["web-dev", "web-prod"]
    );
    let status = status_of(api.list(&lp("env in (prod")).await);
    assert_eq!(status.code, 400);
}

#[tokio::test]
async fn field_selectors_cover_names_namespaces_and_pod_fields() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    labeled(&api, "one", &[]).await;
    labeled(&api, "two", &[]).await;
    assert_eq!(
        names(&api, &ListParams::default().fields("metadata.name=two")).await,
        vec!["two"]
    );
    let all: Api<ConfigMap> = Api::all(sim.client());
    assert_eq!(
        names(
            &all,
            &ListParams::default().fields("metadata.namespace=default,metadata.name!=two")
        )
        .await,
        vec!["one"]
    );
    let status = status_of(
        api.list(&ListParams::default().fields("spec.nodeName=x"))
            .await,
    );
    assert_eq!(status.code, 400);
    assert!(
        status.message.contains("field label not supported"),
        "{}",
        status.message
    );

    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    for (name, node) in [("a", "node-1"), ("b", "node-2")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    pods.patch_status(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .unwrap();
    let pod_names = |lp: ListParams| {
        let pods = pods.clone();
        async move {
            pods.list(&lp)
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        pod_names(ListParams::default().fields("spec.nodeName=node-1")).await,
        vec!["a"]
    );
    assert_eq!(
        pod_names(ListParams::default().fields("status.phase=Running")).await,
        vec!["b"]
    );
    assert_eq!(
        pod_names(ListParams::default().fields("status.phase=Pending")).await,
        vec!["a"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paged_list_taken_during_writes_is_one_consistent_snapshot() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    for i in 0..200 {
        api.create(
            &PostParams::default(),
            &configmap(&format!("cm-{i:03}"), &[("v", "0")]),
        )
        .await
        .unwrap();
    }
    let mut params = ListParams::default().limit(17);
    let first = api.list(&params).await.unwrap();
    let list_rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(first.metadata.remaining_item_count, Some(200 - 17));

    // Writers change, add and delete objects while the pages are read.
    let writer_api = api.clone();
    let writer = tokio::spawn(async move {
        for i in 0..200 {
            let name = format!("cm-{i:03}");
            writer_api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"v": "1"}})),
                )
                .await
                .unwrap();
            writer_api
                .create(
                    &PostParams::default(),
                    &configmap(&format!("new-{i:03}"), &[]),
                )
                .await
                .unwrap();
        }
    });
    let mut seen: Vec<ConfigMap> = first.items;
    let mut token = first.metadata.continue_;
    while let Some(next) = token {
        params = params.continue_token(&next);
        let page = api.list(&params).await.unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(list_rv.as_str())
        );
        seen.extend(page.items);
        token = page.metadata.continue_;
        tokio::task::yield_now().await;
    }
    writer.await.unwrap();
    let unique: BTreeSet<_> = seen
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(
        unique.len(),
        200,
        "every original object exactly once, nothing created later"
    );
    assert!(unique.iter().all(|n| n.starts_with("cm-")));
    let rv: u64 = list_rv.parse().unwrap();
    let values: BTreeMap<_, _> = seen
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap(),
                c.metadata
                    .resource_version
                    .clone()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap(),
            )
        })
        .collect();
    assert!(
        values.values().all(|v| *v <= rv),
        "no object newer than the snapshot"
    );
    assert!(seen.iter().all(|c| c.data.as_ref().unwrap()["v"] == "0"));
}

#[tokio::test]
async fn an_unknown_continue_token_is_rejected() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let status = status_of(
        api.list(&ListParams::default().continue_token("garbage!"))
            .await,
    );
    assert_eq!(status.code, 400);
    // A well-formed token for a snapshot the server no longer has is 410.
    let token = "eyJydiI6MSwiaWQiOjk5OTksIm9mZnNldCI6MX0";
    let status = status_of(api.list(&ListParams::default().continue_token(token)).await);
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
}
