//! The example manifests are typed (they decode into the API types) and
//! materializable (the profile validates and the rack is exactly what
//! rendering produces).

use mokka::api::*;
use mokka::fixtures::*;
use mokka::identity::rack_name;
use mokka::render::{RackCoordinate, render_rack};

fn decode<T: serde::de::DeserializeOwned>(yaml: &str) -> T {
    serde_saphyr::from_str(yaml).unwrap()
}

#[test]
fn example_manifests_decode_into_the_api_types() {
    let profile: SGPURackProfile = decode(EXAMPLE_PROFILE_YAML);
    assert_eq!(profile.spec.rack.nodes_per_rack, 2);
    assert_eq!(
        profile
            .spec
            .defaults
            .unwrap()
            .runtime
            .unwrap()
            .telemetry
            .unwrap()
            .power
            .unwrap()
            .draw_milli_watts,
        Some(175_000)
    );
    let inventory: SGPUInventory = decode(EXAMPLE_INVENTORY_YAML);
    assert_eq!(
        inventory
            .spec
            .rack_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect::<Vec<_>>(),
        ["training", "inference"]
    );
    let policy: SGPURuntimePolicy = decode(EXAMPLE_POLICY_YAML);
    assert_eq!(policy.spec.target_ref.gpu_indexes, Some(vec![2]));
    assert_eq!(
        policy.spec.runtime.unwrap().device_state,
        Some(DeviceState::Failed)
    );
}

#[test]
fn the_example_rack_is_what_rendering_the_example_profile_produces() {
    let mut profile: SGPURackProfile = decode(EXAMPLE_PROFILE_YAML);
    mokka::profile::validate_profile(&profile.spec).unwrap();
    profile.metadata.uid = Some("profile-uid-a".into());
    profile.metadata.generation = Some(1);
    let coordinate = RackCoordinate {
        inventory_name: "example",
        inventory_uid: "inventory-uid-a",
        group: "compute",
        rack_index: 0,
        rack_count: 1,
    };
    let mut rendered = render_rack(coordinate, Some(&profile)).unwrap();
    rendered.nodes[0].node_ref = Some(NodeRef {
        name: "worker-1".into(),
        uid: "node-uid-1".into(),
    });

    let rack: SGPURack = decode(EXAMPLE_RACK_YAML);
    assert_eq!(rack.spec, rendered);
    assert_eq!(
        rack.metadata.name.as_deref(),
        Some(rack_name("example", "inventory-uid-a", "compute", 0).as_str())
    );
}

#[test]
fn unknown_enum_values_do_not_decode() {
    let bad = EXAMPLE_POLICY_YAML.replace("deviceState: Failed", "deviceState: Melting");
    assert!(serde_saphyr::from_str::<SGPURuntimePolicy>(&bad).is_err());
}

#[test]
fn the_example_profile_hashes_the_same_with_or_without_its_written_zeros() {
    // Upstream rule (Go omitempty in the canonical JSON): the example writes
    // numaNode: 0, hostProcessorIndex: 0 and c2cSupported: false, which Go
    // never encodes, so the same profile without them has the same revision.
    let written: SGPURackProfile = decode(EXAMPLE_PROFILE_YAML);
    let without = EXAMPLE_PROFILE_YAML
        .replace(", numaNode: 0, hostProcessorIndex: 0", "")
        .replace("c2cSupported: false, ", "");
    assert_ne!(without, EXAMPLE_PROFILE_YAML);
    let omitted: SGPURackProfile = decode(&without);
    assert_ne!(written.spec, omitted.spec);
    assert_eq!(
        mokka::profile::profile_revision(&written.spec).unwrap(),
        mokka::profile::profile_revision(&omitted.spec).unwrap()
    );
    // Both render GPUs with numaNode and hostProcessorIndex 0.
    let rack: SGPURack = decode(EXAMPLE_RACK_YAML);
    assert_eq!(
        rack.spec.profile_ref.revision,
        mokka::profile::profile_revision(&omitted.spec).unwrap()
    );
}
