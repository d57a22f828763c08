//! The checked-in CRD YAML must equal what the Rust types generate.

use std::path::PathBuf;

fn checked_in_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds/mokka.nvidia.com.yaml")
}

#[test]
fn checked_in_crd_yaml_matches_the_types() {
    let generated = mokka::crds_yaml().unwrap();
    let path = checked_in_path();
    if std::env::var_os("UPDATE_CRDS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is out of date with the Rust types in crates/mokka/src/api.\n\
         Regenerate it with `cargo run -p gpufleet -- crds mokka > deploy/crds/mokka.nvidia.com.yaml`\n\
         or `UPDATE_CRDS=1 cargo test -p mokka --test it crds`.",
        path.display()
    );
}

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};

fn crd(kind: &str) -> CustomResourceDefinition {
    mokka::crds()
        .into_iter()
        .find(|crd| crd.spec.names.kind == kind)
        .unwrap()
}

fn root_schema(crd: &CustomResourceDefinition) -> JSONSchemaProps {
    crd.spec.versions[0]
        .schema
        .clone()
        .unwrap()
        .open_api_v3_schema
        .unwrap()
}

fn at(schema: &JSONSchemaProps, path: &[&str]) -> JSONSchemaProps {
    let mut current = schema.clone();
    for step in path {
        current = if *step == "[]" {
            match current.items.clone().unwrap() {
                JSONSchemaPropsOrArray::Schema(schema) => *schema,
                JSONSchemaPropsOrArray::Schemas(mut schemas) => schemas.remove(0),
            }
        } else {
            current
                .properties
                .as_ref()
                .unwrap()
                .get(*step)
                .unwrap_or_else(|| panic!("no property {step}"))
                .clone()
        };
    }
    current
}

#[test]
fn every_kind_is_cluster_scoped_in_category_mokka_with_its_short_name_and_status() {
    let expected = [
        ("SGPURackProfile", "sgpurackprofiles", "srprof", false),
        ("SGPUInventory", "sgpuinventories", "sinv", true),
        ("SGPURack", "sgpuracks", "sgpur", true),
        ("SGPURuntimePolicy", "sgpuruntimepolicies", "srpol", true),
    ];
    for (kind, plural, short, status) in expected {
        let crd = crd(kind);
        assert_eq!(crd.spec.group, "mokka.nvidia.com");
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.plural, plural);
        assert_eq!(crd.spec.names.short_names, Some(vec![short.to_string()]));
        assert_eq!(crd.spec.names.categories, Some(vec!["mokka".to_string()]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert_eq!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            status,
            "{kind}"
        );
        assert_eq!(
            crd.metadata.annotations.unwrap()["helm.sh/resource-policy"],
            "keep"
        );
    }
    let columns: Vec<String> = crd("SGPURuntimePolicy").spec.versions[0]
        .additional_printer_columns
        .clone()
        .unwrap()
        .into_iter()
        .map(|column| format!("{}={}", column.name, column.json_path))
        .collect();
    assert!(
        columns
            .contains(&"Accepted=.status.conditions[?(@.type==\"Accepted\")].status".to_string()),
        "{columns:?}"
    );
    assert_eq!(
        crd("SGPURack").spec.versions[0]
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .len(),
        6
    );
}

#[test]
fn schemas_carry_bounds_patterns_list_types_and_cel_rules() {
    let profile = root_schema(&crd("SGPURackProfile"));
    let node = at(&profile, &["spec", "node"]);
    let rule = &node.x_kubernetes_validations.as_ref().unwrap()[0];
    assert_eq!(
        rule.message.as_deref(),
        Some("topology.gpuSlots must contain one slot per GPU with indexes in range")
    );
    assert!(
        node.required
            .as_ref()
            .unwrap()
            .contains(&"topology".to_string())
    );
    let slots = at(&node, &["topology", "gpuSlots"]);
    assert_eq!(slots.x_kubernetes_list_type.as_deref(), Some("map"));
    assert_eq!(
        slots.x_kubernetes_list_map_keys,
        Some(vec!["index".to_string()])
    );
    assert_eq!((slots.min_items, slots.max_items), (Some(1), Some(64)));
    assert_eq!(
        at(&slots, &["[]", "pciAddress"]).pattern.as_deref(),
        Some(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
    );
    let nodes_per_rack = at(&profile, &["spec", "rack", "nodesPerRack"]);
    assert_eq!(
        (nodes_per_rack.minimum, nodes_per_rack.maximum),
        (Some(1.0), Some(1024.0))
    );

    let inventory = root_schema(&crd("SGPUInventory"));
    let groups = at(&inventory, &["spec", "rackGroups"]);
    assert_eq!(
        groups.x_kubernetes_list_map_keys,
        Some(vec!["id".to_string()])
    );
    let count = at(&groups, &["[]", "count"]);
    assert_eq!((count.minimum, count.maximum), (Some(1.0), Some(100_000.0)));

    let rack = root_schema(&crd("SGPURack"));
    let inventory_ref = at(&rack, &["spec", "inventoryRef"]);
    assert_eq!(
        inventory_ref.x_kubernetes_validations.unwrap()[0].rule,
        "size(self.uid) > 0"
    );
    let clique = at(&rack, &["spec", "identity", "cliqueID"]);
    assert_eq!((clique.minimum, clique.maximum), (Some(0.0), Some(0.0)));
    assert_eq!(
        at(&rack, &["spec", "profileRef", "revision"])
            .pattern
            .as_deref(),
        Some("^[0-9a-f]{64}$")
    );

    let policy = root_schema(&crd("SGPURuntimePolicy"));
    let target = at(&policy, &["spec", "targetRef"]);
    assert_eq!(
        at(&target, &["group"])
            .enum_
            .unwrap()
            .into_iter()
            .map(|v| v.0)
            .collect::<Vec<_>>(),
        vec![serde_json::json!("mokka.nvidia.com")]
    );
    let gpu_indexes = at(&target, &["gpuIndexes"]);
    assert_eq!(gpu_indexes.x_kubernetes_list_type.as_deref(), Some("set"));
    assert_eq!(at(&gpu_indexes, &["[]"]).minimum, Some(0.0));
    let device_state = at(&policy, &["spec", "runtime", "deviceState"]);
    let values: Vec<String> = device_state
        .enum_
        .unwrap()
        .into_iter()
        .filter_map(|v| v.0.as_str().map(String::from))
        .collect();
    assert_eq!(values, ["Healthy", "Degraded", "Failed"]);
}

/// Walks every object schema under `schema` and checks it is a group (no
/// required field) or a value (every field required).
fn assert_groups_or_values(path: &str, schema: &JSONSchemaProps) {
    let Some(properties) = schema.properties.as_ref() else {
        return;
    };
    let required = schema.required.clone().unwrap_or_default();
    assert!(
        required.is_empty() || required.len() == properties.len(),
        "{path} mixes required and optional fields: {required:?}"
    );
    for (name, child) in properties {
        assert!(
            required.is_empty() || child.nullable != Some(true),
            "{path}.{name}"
        );
        assert_groups_or_values(&format!("{path}.{name}"), child);
    }
}

#[test]
fn runtime_state_structs_are_groups_or_values_and_numbers_are_optional() {
    let policy = root_schema(&crd("SGPURuntimePolicy"));
    let runtime = at(&policy, &["spec", "runtime"]);
    assert_groups_or_values("runtime", &runtime);
    let range = at(
        &runtime,
        &["telemetry", "utilization", "pattern", "gpuPercent"],
    );
    assert_eq!(range.required.unwrap().len(), 2, "PercentRange is a value");
    let draw = at(&runtime, &["telemetry", "power", "drawMilliWatts"]);
    assert_eq!(draw.nullable, Some(true));
    assert_eq!(draw.format.as_deref(), Some("int64"));
    let profile = root_schema(&crd("SGPURackProfile"));
    let mut defaults = at(&profile, &["spec", "defaults", "runtime"]);
    let mut runtime = runtime;
    defaults.description = None;
    runtime.description = None;
    assert_eq!(
        defaults, runtime,
        "profile defaults and policies share one RuntimeState schema"
    );
}

#[test]
fn the_rack_gpu_schema_requires_numa_node_and_host_processor_index() {
    // Upstream SGPURackGPU: numaNode and hostProcessorIndex are required
    // int32s with minimum 0, and never nullable.
    let rack = root_schema(&crd("SGPURack"));
    let gpu = at(&rack, &["spec", "nodes", "[]", "gpus", "[]"]);
    let required = gpu.required.clone().unwrap();
    for field in ["numaNode", "hostProcessorIndex"] {
        assert!(required.contains(&field.to_string()), "{required:?}");
        let schema = at(&gpu, &[field]);
        assert_eq!(schema.minimum, Some(0.0), "{field}");
        assert_ne!(schema.nullable, Some(true), "{field}");
    }
}
