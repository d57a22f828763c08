//! CRUD, optimistic concurrency, generation, status subresource, patches and
//! every error kind, through `kube::Api`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, PodStatus, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{configmap, create_configmap, raw, sim, status_of};

#[tokio::test]
async fn objects_get_server_metadata_and_increasing_resource_versions() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let a = create_configmap(&api, "a").await;
    let b = create_configmap(&api, "b").await;
    let rv = |cm: &ConfigMap| {
        cm.metadata
            .resource_version
            .clone()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&b) > rv(&a));
    assert!(a.metadata.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(a.metadata.creation_timestamp.is_some());
    // As on kube-apiserver, kinds without a spec keep no generation.
    assert_eq!(a.metadata.generation, None);
    assert_eq!(a.metadata.namespace.as_deref(), Some("default"));

    let fetched = api.get("a").await.unwrap();
    assert_eq!(fetched.metadata.uid, a.metadata.uid);
    let list = api.list(&ListParams::default()).await.unwrap();
    let names: Vec<_> = list
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    assert_eq!(names, vec!["a", "b"]);
    let list_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_rv >= rv(&b));
    sim.shutdown().await;
}

#[tokio::test]
async fn generate_name_gets_a_random_suffix() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let mut cm = configmap("", &[]);
    cm.metadata.name = None;
    cm.metadata.generate_name = Some("job-".into());
    let first = api.create(&PostParams::default(), &cm).await.unwrap();
    let second = api.create(&PostParams::default(), &cm).await.unwrap();
    let (n1, n2) = (first.metadata.name.unwrap(), second.metadata.name.unwrap());
    assert!(n1.starts_with("job-") && n1.len() == 9, "{n1}");
    assert_ne!(n1, n2);
}

#[tokio::test]
async fn a_stale_resource_version_is_a_conflict() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let original = create_configmap(&api, "c").await;
    let mut first = original.clone();
    first.data = Some(BTreeMap::from([("k".to_string(), "first".to_string())]));
    api.replace("c", &PostParams::default(), &first)
        .await
        .unwrap();
    let mut stale = original.clone();
    stale.data = Some(BTreeMap::from([("k".to_string(), "stale".to_string())]));
    let status = status_of(api.replace("c", &PostParams::default(), &stale).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );
    // The winning write is intact.
    assert_eq!(api.get("c").await.unwrap().data.unwrap()["k"], "first");
}

/// Patches are decided outside the store's lock and committed only over
/// the object they were decided against: concurrent writers on several
/// threads lose no update, and of several writes made at one
/// resourceVersion exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_patches_of_one_object_lose_no_update_and_one_write_wins_per_resource_version() {
    const WRITERS: usize = 48;
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "shared").await;
    let writes: Vec<_> = (0..WRITERS)
        .map(|i| {
            let api = api.clone();
            tokio::spawn(async move {
                if i % 2 == 0 {
                    let labels = json!({"metadata": {"labels": {format!("merge-{i}"): "set"}}});
                    api.patch("shared", &PatchParams::default(), &Patch::Merge(&labels))
                        .await
                } else {
                    let applied = json!({
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "shared"},
                        "data": {format!("apply-{i}"): "set"},
                    });
                    let params = PatchParams::apply(&format!("writer-{i}"));
                    api.patch("shared", &params, &Patch::Apply(&applied)).await
                }
            })
        })
        .collect();
    let mut versions = std::collections::BTreeSet::new();
    for write in writes {
        let written = write.await.unwrap().expect("every patch succeeds");
        versions.insert(written.metadata.resource_version.unwrap());
    }
    assert_eq!(
        versions.len(),
        WRITERS,
        "each patch committed once, over its own version"
    );
    let shared = api.get("shared").await.unwrap();
    let labels = shared.metadata.labels.clone().unwrap_or_default();
    let data = shared.data.clone().unwrap_or_default();
    let managers: Vec<String> = shared
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.manager.clone())
        .collect();
    for i in 0..WRITERS {
        if i % 2 == 0 {
            assert_eq!(
                labels.get(&format!("merge-{i}")).map(String::as_str),
                Some("set")
            );
        } else {
            assert_eq!(
                data.get(&format!("apply-{i}")).map(String::as_str),
                Some("set")
            );
            assert!(managers.contains(&format!("writer-{i}")), "{managers:?}");
        }
    }

    let at = shared.metadata.resource_version.clone().unwrap();
    let races: Vec<_> = (0..16)
        .map(|i| {
            let (api, at) = (api.clone(), at.clone());
            tokio::spawn(async move {
                let body = json!({"metadata": {"resourceVersion": at}, "data": {"k": format!("racer-{i}")}});
                api.patch("shared", &PatchParams::default(), &Patch::Merge(&body))
                    .await
            })
        })
        .collect();
    let mut won = Vec::new();
    for race in races {
        match race.await.unwrap() {
            Ok(written) => won.push(written.data.unwrap()["k"].clone()),
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 409, "{status:?}"),
            Err(other) => panic!("unexpected error {other:?}"),
        }
    }
    assert_eq!(won.len(), 1, "one write wins at one resourceVersion");
    assert_eq!(api.get("shared").await.unwrap().data.unwrap()["k"], won[0]);
}

#[tokio::test]
async fn duplicate_missing_and_misplaced_objects_are_rejected() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "dup").await;
    let status = status_of(
        api.create(&PostParams::default(), &configmap("dup", &[]))
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
    assert_eq!(status.message, "configmaps \"dup\" already exists");

    let status = status_of(api.get("missing").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, "configmaps \"missing\" not found");

    let elsewhere: Api<ConfigMap> = Api::namespaced(sim.client(), "nope");
    let status = status_of(
        elsewhere
            .create(&PostParams::default(), &configmap("x", &[]))
            .await,
    );
    assert_eq!(status.code, 404);
    assert_eq!(status.message, "namespaces \"nope\" not found");
}

#[tokio::test]
async fn invalid_names_and_labels_are_422_with_field_causes() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let mut bad = configmap("Bad_Name", &[]);
    bad.metadata.labels = Some(BTreeMap::from([(
        "app".to_string(),
        "not valid!".to_string(),
    )]));
    let status = status_of(api.create(&PostParams::default(), &bad).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(status.message.starts_with("ConfigMap \"Bad_Name\" is invalid: [metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{}", status.message);
    let causes = status.details.unwrap().causes;
    let fields: Vec<_> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, vec!["metadata.name", "metadata.labels"]);

    // Services use the stricter RFC 1035 label rule.
    let services: Api<Service> = Api::default_namespaced(sim.client());
    let svc: Service =
        serde_json::from_value(json!({"metadata": {"name": "1svc"}, "spec": {}})).unwrap();
    let status = status_of(services.create(&PostParams::default(), &svc).await);
    assert_eq!(status.code, 422);
    assert!(status.message.contains("DNS-1035"), "{}", status.message);

    // Pods need containers.
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": []}}))
            .unwrap();
    let status = status_of(pods.create(&PostParams::default(), &pod).await);
    assert_eq!(
        status.message,
        "Pod \"p\" is invalid: spec.containers: Required value"
    );
}

#[tokio::test]
async fn malformed_bodies_unknown_resources_and_verbs_answer_with_status_documents() {
    let sim = sim().await;
    let client = sim.client();
    let (code, body) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        b"{not json",
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        (body["kind"].as_str(), body["reason"].as_str()),
        (Some("Status"), Some("BadRequest"))
    );
    assert_eq!(body["code"], 400);

    let (code, body) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/widgets",
        "application/json",
        b"",
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));

    let (code, body) = raw(
        &client,
        "GET",
        "/apis/example.com/v1/things",
        "application/json",
        b"",
    )
    .await;
    assert_eq!((code, body["kind"].as_str()), (404, Some("Status")));

    create_configmap(&Api::default_namespaced(client.clone()), "c").await;
    let (code, body) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps/c",
        "application/json",
        b"{}",
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (405, Some("MethodNotAllowed"))
    );

    let (code, body) = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/c",
        "text/plain",
        b"{}",
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );

    let wrong_kind = br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}"#;
    let (code, body) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        "application/json",
        wrong_kind,
    )
    .await;
    assert_eq!(code, 400, "{body}");
}

#[tokio::test]
async fn generation_counts_spec_changes_only() {
    // The API server's own rule, so no Deployment controller: its status
    // writes would move the resourceVersion between the test's patches.
    let sim = kube_sim::KubeSim::builder()
        .kubelet(kube_sim::KubeletConfig {
            workloads: false,
            ..Default::default()
        })
        .start()
        .await
        .unwrap();
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::default_namespaced(sim.client());
    let deployment = serde_json::from_value(json!({
        "metadata": {"name": "g"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "g"}},
                 "template": {"metadata": {"labels": {"app": "g"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap();
    let created = api
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let labeled = api
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labeled.metadata.generation, Some(1));
    let changed = api
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"spec": {"minReadySeconds": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(changed.metadata.generation, Some(2));
    // A write that changes nothing keeps the resourceVersion.
    let again = api
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"spec": {"minReadySeconds": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        changed.metadata.resource_version
    );
    // A ConfigMap, like on kube-apiserver, keeps none through changes.
    let cms: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&cms, "g").await;
    let data = cms
        .patch("g", &pp, &Patch::Merge(json!({"data": {"k": "changed"}})))
        .await
        .unwrap();
    assert_eq!(data.metadata.generation, None);
}

#[tokio::test]
async fn the_status_subresource_separates_spec_and_status_writes() {
    let sim = sim().await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running"}
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    // Status given on create is reset, as for real pods.
    assert_eq!(
        created.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );

    let mut via_main = created.clone();
    via_main.status = Some(PodStatus {
        phase: Some("Succeeded".into()),
        ..Default::default()
    });
    via_main.metadata.labels = Some(BTreeMap::from([("x".to_string(), "y".to_string())]));
    let after_main = pods
        .replace("p", &PostParams::default(), &via_main)
        .await
        .unwrap();
    assert_eq!(
        after_main.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(after_main.metadata.labels.as_ref().unwrap()["x"], "y");

    let after_status = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"x": "changed"}}, "status": {"phase": "Running"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        after_status
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    assert_eq!(after_status.metadata.labels.as_ref().unwrap()["x"], "y");
    assert_eq!(
        after_status.metadata.generation,
        after_main.metadata.generation
    );
}

#[tokio::test]
async fn json_patch_test_on_a_missing_path_compares_with_null() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "f").await;
    let add: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/cleanup"]}
    ]))
    .unwrap();
    let patched = api
        .patch(
            "f",
            &PatchParams::default(),
            &Patch::Json::<()>(add.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.metadata.finalizers,
        Some(vec!["example.com/cleanup".to_string()])
    );
    let status = status_of(
        api.patch("f", &PatchParams::default(), &Patch::Json::<()>(add))
            .await,
    );
    assert_eq!(status.code, 422);
}

#[tokio::test]
async fn finalizers_hold_deletion_until_they_are_removed() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let mut cm = configmap("held", &[]);
    cm.metadata.finalizers = Some(vec!["example.com/a".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();

    let deleted = api.delete("held", &DeleteParams::default()).await.unwrap();
    let pending = deleted.left().expect("object is still there");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert_eq!(pending.metadata.generation, None);
    assert!(api.get("held").await.is_ok());

    let status = status_of(
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/a", "example.com/b"]}})),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("no new finalizers can be added"),
        "{}",
        status.message
    );

    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(status_of(api.get("held").await).code, 404);
}

#[tokio::test]
async fn delete_preconditions_are_checked() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    create_configmap(&api, "p").await;
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let status = status_of(api.delete("p", &dp).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    // An immediate deletion of a built-in kind answers a Success Status,
    // as kube-apiserver does.
    assert!(
        api.delete("p", &DeleteParams::default())
            .await
            .unwrap()
            .is_right()
    );
    assert_eq!(status_of(api.get("p").await).code, 404);
}

#[tokio::test]
async fn namespaces_tear_down_their_contents() {
    let sim = sim().await;
    let namespaces: Api<Namespace> = Api::all(sim.client());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    let created = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "team-a");
    create_configmap(&api, "inside").await;
    namespaces
        .delete("team-a", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(status_of(api.get("inside").await).code, 404);
    assert_eq!(status_of(namespaces.get("team-a").await).code, 404);
    let status = status_of(namespaces.delete("default", &DeleteParams::default()).await);
    assert_eq!(status.code, 403);
}

#[tokio::test]
async fn secrets_fold_string_data_into_base64_data() {
    let sim = sim().await;
    let api: Api<k8s_openapi::api::core::v1::Secret> = Api::default_namespaced(sim.client());
    let secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"pw": "hunter2"}}))
            .unwrap();
    let created = api.create(&PostParams::default(), &secret).await.unwrap();
    assert!(created.string_data.is_none());
    assert_eq!(created.data.unwrap()["pw"].0, b"hunter2".to_vec());
}

#[tokio::test]
async fn the_loopback_url_serves_the_same_api() {
    let sim = sim().await;
    let over_http = sim.http_client().unwrap();
    let remote: Api<ConfigMap> = Api::default_namespaced(over_http);
    create_configmap(&remote, "via-http").await;
    let local: Api<ConfigMap> = Api::default_namespaced(sim.client());
    assert!(local.get("via-http").await.is_ok());
    let status = status_of(remote.get("missing").await);
    assert_eq!(status.code, 404);
    let version = sim
        .http_client()
        .unwrap()
        .apiserver_version()
        .await
        .unwrap();
    assert_eq!(version.major, "1");
}

#[tokio::test]
async fn the_root_discovery_documents_are_served_with_a_trailing_slash_too() {
    let sim = crate::support::sim().await;
    for (path, kind) in [
        ("/api", "APIVersions"),
        ("/api/", "APIVersions"),
        ("/apis", "APIGroupList"),
        ("/apis/", "APIGroupList"),
    ] {
        let (code, body) =
            crate::support::raw(&sim.client(), "GET", path, "application/json", b"").await;
        assert_eq!(
            (code, body["kind"].as_str()),
            (200, Some(kind)),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn a_review_asked_for_as_a_table_only_is_not_acceptable() {
    let sim = crate::support::sim().await;
    let review = br#"{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","spec":{"nonResourceAttributes":{"path":"/","verb":"get"}}}"#;
    let send = |accept: &'static str| {
        let request = http::Request::builder()
            .method("POST")
            .uri("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(kube::client::Body::from(review.to_vec()))
            .unwrap();
        let client = sim.client();
        async move { client.send(request).await.unwrap().status().as_u16() }
    };
    assert_eq!(
        send("application/json;as=Table;v=v1;g=meta.k8s.io").await,
        406
    );
    assert_eq!(
        send("application/json;as=Table;v=v1;g=meta.k8s.io, application/json").await,
        201
    );
}
