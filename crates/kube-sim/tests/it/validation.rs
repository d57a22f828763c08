//! Custom resources validated against their CRD's structural schema:
//! types, bounds, enums, patterns, defaults, pruning and CEL rules.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use crate::support::{sim, status_of};

fn crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "trainers.example.gpufleet.dev"},
        "spec": {
            "group": "example.gpufleet.dev",
            "scope": "Namespaced",
            "names": {"plural": "trainers", "singular": "trainer", "kind": "Trainer"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["image"],
                            "properties": {
                                "image": {"type": "string", "pattern": "^[a-z0-9./:-]+$"},
                                "replicas": {"type": "integer", "minimum": 0, "maximum": 64, "default": 1},
                                "mode": {"type": "string", "enum": ["Train", "Eval"]},
                                "cluster": {"type": "string"}
                            },
                            "x-kubernetes-validations": [
                                {"rule": "!has(oldSelf.cluster) || self.cluster == oldSelf.cluster", "message": "cluster is immutable", "fieldPath": ".cluster"}
                            ]
                        },
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }}
            }]
        }
    }))
    .unwrap()
}

async fn trainers(client: &kube::Client) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd()).await.unwrap();
    let gvk = GroupVersionKind::gvk("example.gpufleet.dev", "v1", "Trainer");
    Api::default_namespaced_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

fn trainer(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.gpufleet.dev/v1", "kind": "Trainer",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

#[tokio::test]
async fn schema_violations_are_422_in_the_real_servers_words() {
    let sim = sim().await;
    let api = trainers(&sim.client()).await;
    let status = status_of(
        api.create(
            &PostParams::default(),
            &trainer("t", json!({"image": "img", "replicas": -1})),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "Trainer.example.gpufleet.dev \"t\" is invalid: spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
    );
    let status = status_of(
        api.create(
            &PostParams::default(),
            &trainer("t", json!({"image": "img", "mode": "Serve"})),
        )
        .await,
    );
    assert!(
        status.message.contains(
            "spec.mode: Unsupported value: \"Serve\": supported values: \"Train\", \"Eval\""
        ),
        "{}",
        status.message
    );
    let status = status_of(
        api.create(
            &PostParams::default(),
            &trainer("t", json!({"replicas": 2})),
        )
        .await,
    );
    assert!(
        status.message.contains("spec.image: Required value"),
        "{}",
        status.message
    );
    let status = status_of(
        api.create(
            &PostParams::default(),
            &trainer("t", json!({"image": "Bad Image"})),
        )
        .await,
    );
    assert!(
        status
            .message
            .contains("spec.image in body should match '^[a-z0-9./:-]+$'"),
        "{}",
        status.message
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(causes[0].field, "spec.image");
}

#[tokio::test]
async fn defaults_are_applied_and_unknown_fields_pruned() {
    let sim = sim().await;
    let api = trainers(&sim.client()).await;
    let created = api
        .create(
            &PostParams::default(),
            &trainer("t", json!({"image": "img", "surprise": true})),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["replicas"], 1);
    assert!(created.data["spec"].get("surprise").is_none());
}

#[tokio::test]
async fn a_cel_transition_rule_rejects_changing_an_immutable_field() {
    let sim = sim().await;
    let api = trainers(&sim.client()).await;
    api.create(
        &PostParams::default(),
        &trainer("t", json!({"image": "img", "cluster": "a"})),
    )
    .await
    .unwrap();
    let status = status_of(
        api.patch(
            "t",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cluster": "b"}})),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("spec.cluster: Invalid value: \"object\": cluster is immutable"),
        "{}",
        status.message
    );
    // Other fields may still change.
    api.patch(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn invalid_schemas_make_the_crd_invalid() {
    let sim = sim().await;
    let crds: Api<CustomResourceDefinition> = Api::all(sim.client());
    let mut bad = serde_json::to_value(crd()).unwrap();
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
        [0]["rule"] = json!("self.cluster ==");
    let bad: CustomResourceDefinition = serde_json::from_value(bad).unwrap();
    let status = status_of(crds.create(&PostParams::default(), &bad).await);
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .contains("spec.versions[0].schema.openAPIV3Schema"),
        "{}",
        status.message
    );
}
