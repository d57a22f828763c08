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
    let power = at(&runtime, &["telemetry", "power"]);
    assert!(
        power
            .required
            .as_ref()
            .is_none_or(|required| !required.contains(&"drawMilliWatts".to_string())),
        "drawMilliWatts is optional"
    );
    // Optional, yet not nullable: as upstream, an explicit null is pruned.
    assert_eq!(draw.nullable, None);
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

/// Every schema object under `schema`, with its path.
fn walk<'a>(
    path: String,
    schema: &'a JSONSchemaProps,
    out: &mut Vec<(String, &'a JSONSchemaProps)>,
) {
    out.push((path.clone(), schema));
    for (name, child) in schema.properties.iter().flatten() {
        walk(format!("{path}.{name}"), child, out);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(item)) = &schema.items {
        walk(format!("{path}[]"), item, out);
    }
}

#[test]
fn no_schema_is_nullable_or_defaulted_as_in_upstreams_crds() {
    // controller-gen writes neither `nullable` nor `default` for these
    // types, so an explicit null is pruned instead of stored.
    for crd in mokka::crds() {
        let root = root_schema(&crd);
        let mut all = Vec::new();
        walk(crd.spec.names.kind.clone(), &root, &mut all);
        for (path, schema) in all {
            assert_eq!(schema.nullable, None, "{path}");
            assert_eq!(schema.default, None, "{path}");
        }
    }
}

#[test]
fn quantities_are_int_or_string_with_upstreams_quantity_pattern() {
    // controller-gen's resource.Quantity: anyOf integer/string, pattern.
    let profile = root_schema(&crd("SGPURackProfile"));
    for path in [
        &["spec", "node", "gpus", "memory", "capacity"][..],
        &["spec", "node", "gpus", "memory", "reserved"],
        &["spec", "node", "gpus", "memory", "bar1Capacity"],
        &["spec", "node", "host", "memory", "capacity"],
    ] {
        let quantity = at(&profile, path);
        assert_eq!(
            quantity.pattern.as_deref(),
            Some(mokka::api::QUANTITY_PATTERN),
            "{path:?}"
        );
        assert_eq!(quantity.x_kubernetes_int_or_string, Some(true));
        let any_of: Vec<Option<String>> = quantity
            .any_of
            .unwrap()
            .into_iter()
            .map(|schema| schema.type_)
            .collect();
        assert_eq!(any_of, [Some("integer".into()), Some("string".into())]);
    }
    let pattern = regex::Regex::new(mokka::api::QUANTITY_PATTERN).unwrap();
    for accepted in ["40Gi", "1Mi", "0.5", "1e3", "100m", "+1k"] {
        assert!(pattern.is_match(accepted), "{accepted}");
    }
    for rejected in ["40 GB", "40GB", "Gi", "1.2.3"] {
        assert!(!pattern.is_match(rejected), "{rejected}");
    }
}

#[test]
fn status_conditions_carry_the_metav1_condition_constraints() {
    for kind in ["SGPUInventory", "SGPURack", "SGPURuntimePolicy"] {
        let root = root_schema(&crd(kind));
        let condition = at(&root, &["status", "conditions", "[]"]);
        assert_eq!(
            condition.required.clone().unwrap(),
            ["lastTransitionTime", "message", "reason", "status", "type"],
            "{kind}"
        );
        let status = at(&condition, &["status"]);
        let values: Vec<String> = status
            .enum_
            .unwrap()
            .into_iter()
            .filter_map(|value| value.0.as_str().map(String::from))
            .collect();
        assert_eq!(values, ["True", "False", "Unknown"]);
        let reason = at(&condition, &["reason"]);
        assert_eq!(reason.min_length, Some(1));
        assert_eq!(reason.max_length, Some(1024));
        assert_eq!(
            reason.pattern.as_deref(),
            Some("^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
        );
        let type_ = at(&condition, &["type"]);
        assert_eq!(type_.max_length, Some(316));
        assert!(type_.pattern.is_some());
        assert_eq!(at(&condition, &["message"]).max_length, Some(32768));
        assert_eq!(at(&condition, &["observedGeneration"]).minimum, Some(0.0));
    }
}

#[test]
fn node_selectors_are_atomic_maps_with_atomic_lists() {
    let inventory = root_schema(&crd("SGPUInventory"));
    let selector = at(
        &inventory,
        &["spec", "rackGroups", "[]", "placement", "nodeSelector"],
    );
    assert_eq!(selector.x_kubernetes_map_type.as_deref(), Some("atomic"));
    let expressions = at(&selector, &["matchExpressions"]);
    assert_eq!(
        expressions.x_kubernetes_list_type.as_deref(),
        Some("atomic")
    );
    let values = at(&expressions, &["[]", "values"]);
    assert_eq!(values.x_kubernetes_list_type.as_deref(), Some("atomic"));
}

#[test]
fn inventory_status_counts_are_required_as_upstream() {
    // Upstream InventoryCapacity, InventoryUsage and RackGroupStatus fields
    // have no omitempty, so controller-gen lists them all as required.
    let inventory = root_schema(&crd("SGPUInventory"));
    let required = |path: &[&str]| {
        let mut required = at(&inventory, path).required.unwrap_or_default();
        required.sort();
        required
    };
    assert_eq!(
        required(&["status", "capacity"]),
        ["gpus", "nodes", "racks"]
    );
    assert_eq!(
        required(&["status", "usage"]),
        [
            "allocatedNodes",
            "availableNodes",
            "pendingNodes",
            "requestedNodes"
        ]
    );
    assert_eq!(
        required(&["status", "rackGroups", "[]"]),
        ["capacity", "id", "profileName", "usage"]
    );
    assert_eq!(at(&inventory, &["status"]).required, None);
}
