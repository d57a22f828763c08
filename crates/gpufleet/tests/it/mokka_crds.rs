//! The Mokka CRDs on kube-sim: the generated CRDs install, the example
//! manifests apply unchanged, and invalid variants are rejected by the
//! schema with messages naming the field.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

async fn mokka_sim() -> kube_sim::KubeSim {
    let sim = kube_sim::KubeSim::builder()
        .start()
        .await
        .expect("kube-sim starts");
    let crds: Api<CustomResourceDefinition> = Api::all(sim.client());
    for crd in mokka::crds() {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("Mokka CRD accepted");
    }
    sim
}

fn api(sim: &kube_sim::KubeSim, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("mokka.nvidia.com", "v1alpha1", kind);
    Api::all_with(sim.client(), &ApiResource::from_gvk(&gvk))
}

fn manifest(yaml: &str) -> Value {
    serde_saphyr::from_str(yaml).expect("example manifest is YAML")
}

async fn create(sim: &kube_sim::KubeSim, doc: Value) -> Result<DynamicObject, kube::Error> {
    let kind = doc["kind"].as_str().unwrap().to_string();
    let object: DynamicObject = serde_json::from_value(doc).unwrap();
    api(sim, &kind)
        .create(&PostParams::default(), &object)
        .await
}

fn rejection(result: Result<DynamicObject, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{}", status.message);
            status.message.clone()
        }
        other => panic!("expected a 422, got {other:?}"),
    }
}

#[tokio::test]
async fn the_example_manifests_apply_to_kube_sim_unchanged() {
    let sim = mokka_sim().await;
    for yaml in [
        mokka::fixtures::EXAMPLE_PROFILE_YAML,
        mokka::fixtures::EXAMPLE_INVENTORY_YAML,
        mokka::fixtures::EXAMPLE_RACK_YAML,
        mokka::fixtures::EXAMPLE_POLICY_YAML,
    ] {
        let doc = manifest(yaml);
        let name = doc["metadata"]["name"].clone();
        let created = create(&sim, doc)
            .await
            .unwrap_or_else(|e| panic!("{name} rejected: {e}"));
        assert_eq!(created.metadata.generation, Some(1));
    }
}

#[tokio::test]
async fn invalid_variants_are_rejected_naming_the_field() {
    let sim = mokka_sim().await;

    let mut bad_pci = manifest(mokka::fixtures::EXAMPLE_PROFILE_YAML);
    bad_pci["spec"]["node"]["topology"]["gpuSlots"][0]["pciAddress"] = json!("01:00.0");
    let message = rejection(create(&sim, bad_pci).await);
    assert!(
        message.contains("spec.node.topology.gpuSlots[0].pciAddress"),
        "{message}"
    );

    let mut too_many = manifest(mokka::fixtures::EXAMPLE_PROFILE_YAML);
    let slots: Vec<Value> = (0..65)
        .map(|i| json!({"index": i, "pciAddress": format!("0000:{:02x}:00.0", i), "rootComplex": "pci0000:00"}))
        .collect();
    too_many["spec"]["node"]["topology"]["gpuSlots"] = Value::Array(slots);
    let message = rejection(create(&sim, too_many).await);
    assert!(
        message.contains("spec.node.topology.gpuSlots: Too many: 65: must have at most 64 items"),
        "{message}"
    );

    let mut negative = manifest(mokka::fixtures::EXAMPLE_POLICY_YAML);
    negative["spec"]["targetRef"]["gpuIndexes"] = json!([-1]);
    let message = rejection(create(&sim, negative).await);
    assert!(
        message.contains("spec.targetRef.gpuIndexes[0]: Invalid value: -1"),
        "{message}"
    );

    let mut unknown_enum = manifest(mokka::fixtures::EXAMPLE_POLICY_YAML);
    unknown_enum["spec"]["runtime"]["deviceState"] = json!("Exploded");
    let message = rejection(create(&sim, unknown_enum).await);
    assert!(
        message.contains("spec.runtime.deviceState: Unsupported value: \"Exploded\""),
        "{message}"
    );
}

#[tokio::test]
async fn a_quantity_outside_upstreams_quantity_pattern_is_rejected() {
    // Upstream's CRD types resource.Quantity as int-or-string with the
    // quantity pattern, so "40 GB" never reaches the controller.
    let sim = mokka_sim().await;
    let mut spaced = manifest(mokka::fixtures::EXAMPLE_PROFILE_YAML);
    spaced["spec"]["node"]["gpus"]["memory"]["capacity"] = json!("40 GB");
    let message = rejection(create(&sim, spaced).await);
    assert!(
        message.contains("spec.node.gpus.memory.capacity"),
        "{message}"
    );
    let mut integer = manifest(mokka::fixtures::EXAMPLE_PROFILE_YAML);
    integer["spec"]["node"]["gpus"]["memory"]["capacity"] = json!(42949672960u64);
    integer["metadata"]["name"] = json!("integer-capacity");
    create(&sim, integer)
        .await
        .expect("an integer quantity is accepted");
}
