//! Server-side apply and strategic merge patch through `kube::Api`.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{raw, sim, status_of};

fn apply_params(manager: &str) -> PatchParams {
    PatchParams::apply(manager)
}

#[tokio::test]
async fn apply_creates_and_records_the_manager() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}});
    let created = api
        .patch("cfg", &apply_params("team-a"), &Patch::Apply(&cm))
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["a"], "1");
    let managed = created.metadata.managed_fields.unwrap();
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].manager.as_deref(), Some("team-a"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(&managed[0].fields_v1).unwrap();
    assert_eq!(fields, json!({"f:data": {"f:a": {}}}));
}

#[tokio::test]
async fn a_second_manager_conflicts_only_where_values_differ_and_force_takes_over() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let first = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1", "b": "2"}});
    api.patch("cfg", &apply_params("team-a"), &Patch::Apply(&first))
        .await
        .unwrap();

    // Same value: no conflict, shared ownership.
    let same = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}});
    api.patch("cfg", &apply_params("team-b"), &Patch::Apply(&same))
        .await
        .unwrap();

    let different = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "9", "b": "9"}});
    let status = status_of(
        api.patch("cfg", &apply_params("team-b"), &Patch::Apply(&different))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    let causes = status.details.unwrap().causes;
    let fields: Vec<_> = causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(fields, vec![".data.a", ".data.b"]);
    assert!(
        causes
            .iter()
            .all(|c| c.reason == "FieldManagerConflict" && c.message == "conflict with \"team-a\""),
        "{causes:?}"
    );
    assert_eq!(
        api.get("cfg").await.unwrap().data.unwrap()["a"],
        "1",
        "nothing changed"
    );

    let forced = api
        .patch(
            "cfg",
            &apply_params("team-b").force(),
            &Patch::Apply(&different),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "9");
    // team-a lost both fields; applying its old config now conflicts.
    let status = status_of(
        api.patch("cfg", &apply_params("team-a"), &Patch::Apply(&first))
            .await,
    );
    assert_eq!(status.code, 409);
}

#[tokio::test]
async fn fields_a_manager_stops_applying_are_removed_unless_someone_else_owns_them() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let full = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"keep": "1", "drop": "2", "shared": "3"}});
    api.patch("cfg", &apply_params("owner"), &Patch::Apply(&full))
        .await
        .unwrap();
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"shared": "3"}});
    api.patch("cfg", &apply_params("other"), &Patch::Apply(&other))
        .await
        .unwrap();
    let smaller = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"keep": "1"}});
    let after = api
        .patch("cfg", &apply_params("owner"), &Patch::Apply(&smaller))
        .await
        .unwrap();
    let data = after.data.unwrap();
    assert!(data.contains_key("keep"));
    assert!(!data.contains_key("drop"), "dropped by its only owner");
    assert!(data.contains_key("shared"), "kept: another manager owns it");
}

#[tokio::test]
async fn non_apply_writes_record_update_entries_that_an_apply_then_conflicts_with() {
    let sim = sim().await;
    let api: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}});
    api.patch("cfg", &apply_params("applier"), &Patch::Apply(&cm))
        .await
        .unwrap();
    let pp = PatchParams {
        field_manager: Some("editor".into()),
        ..Default::default()
    };
    let edited = api
        .patch("cfg", &pp, &Patch::Merge(json!({"data": {"a": "2"}})))
        .await
        .unwrap();
    let managers: Vec<(String, String)> = edited
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers.contains(&("editor".into(), "Update".into())),
        "{managers:?}"
    );
    let status = status_of(
        api.patch("cfg", &apply_params("applier"), &Patch::Apply(&cm))
            .await,
    );
    assert_eq!(status.code, 409);
    assert!(status.message.contains("\"editor\""), "{}", status.message);
}

#[tokio::test]
async fn apply_needs_a_field_manager_and_force_needs_apply() {
    let sim = sim().await;
    let client = sim.client();
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#;
    let (code, status) = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        "application/apply-patch+yaml",
        body,
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("fieldManager"),
        "{status}"
    );
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
    )
    .await
    .unwrap();
    let (code, status) = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x?force=true",
        "application/merge-patch+json",
        b"{}",
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert!(
        status["message"].as_str().unwrap().contains("force"),
        "{status}"
    );
    // YAML bodies are accepted.
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  from: yaml\n";
    let (code, object) = raw(
        &client,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x?fieldManager=yamler",
        "application/apply-patch+yaml",
        yaml,
    )
    .await;
    assert_eq!(code, 200, "{object}");
    assert_eq!(object["data"]["from"], "yaml");
}

fn pod_with(containers: serde_json::Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": containers}}))
        .unwrap()
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let sim = sim().await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    pods.create(
        &PostParams::default(),
        &pod_with(json!([
            {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "proxy:1"}
        ])),
    )
    .await
    .unwrap();
    let patched = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [
                {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}]}
            ]}})),
        )
        .await
        .unwrap();
    let containers = patched.spec.unwrap().containers;
    assert_eq!(containers.len(), 2, "the sidecar is kept");
    assert_eq!(containers[0].image.as_deref(), Some("app:2"));
    let env: Vec<_> = containers[0]
        .env
        .as_ref()
        .unwrap()
        .iter()
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(env, vec!["A", "B"], "env merged by name");

    let patched = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}),
            ),
        )
        .await
        .unwrap();
    let names: Vec<_> = patched
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, vec!["app"]);

    let tolerations = json!({"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}});
    pods.patch("p", &PatchParams::default(), &Patch::Strategic(tolerations))
        .await
        .unwrap();
    let replaced = pods
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(
                json!({"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}),
            ),
        )
        .await
        .unwrap();
    let keys: Vec<_> = replaced
        .spec
        .unwrap()
        .tolerations
        .unwrap()
        .into_iter()
        .filter_map(|t| t.key)
        .collect();
    assert_eq!(
        keys,
        vec!["b"],
        "lists without a merge key are replaced whole"
    );
}
