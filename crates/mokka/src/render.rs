//! Rack rendering: inventory x group x rack index x profile -> `SGPURack` spec.

use std::io;

use thiserror::Error;

use crate::api::{
    InventoryRef, ProfileRef, RackGpu, RackIdentity, RackNode, SGPURackProfile,
    SGPURackProfileSpec, SGPURackSpec,
};
use crate::identity::{fabric_uuid, gpu_serial, gpu_uuid};
use crate::profile::{
    MAX_GPUS_PER_NODE, MAX_NODES_PER_RACK, ProfileError, RevisionError, profile_revision,
    slots_in_index_order, validate_profile,
};

/// Largest rack spec, in bytes of compact JSON, that rendering produces.
/// It keeps every rack far below etcd's request limit.
pub const MAX_RACK_SPEC_BYTES: usize = 1024 * 1024;

/// Why a rack cannot be rendered. The messages are upstream's `RenderRack`
/// messages, in its check order.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("inventory name must not be empty")]
    EmptyInventoryName,
    #[error("inventory UID must not be empty")]
    EmptyInventoryUid,
    #[error("rack group ID must not be empty")]
    EmptyGroup,
    #[error("rack index {index} is outside group count {count}")]
    RackIndexOutOfRange { index: i32, count: i32 },
    #[error("profile must not be nil")]
    ProfileMissing,
    #[error("profile reference must include name, UID, and generation")]
    ProfileIdentityIncomplete,
    /// The profile fails `validate_profile`.
    #[error("validate profile: {0}")]
    InvalidProfile(#[from] ProfileError),
    #[error(transparent)]
    Revision(#[from] RevisionError),
    /// The rendered spec breaks the rack schema's bounds; the 1 MiB bound is
    /// reported without the prefix, as upstream does.
    #[error("{}", rendered_spec_message(.0))]
    InvalidRackSpec(#[from] RackSpecError),
}

fn rendered_spec_message(error: &RackSpecError) -> String {
    match error {
        RackSpecError::TooLarge(_) => error.to_string(),
        _ => format!("validate rendered rack spec: {error}"),
    }
}

/// Why a rack spec breaks the bounds of the SGPURack schema. The count and
/// index messages are upstream's `ValidateRackSpec` messages; duplicates and
/// negative GPU fields are checks of ours (the schema rejects them too).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RackSpecError {
    #[error("nodes must contain between 1 and 1024 entries")]
    NodeCount(usize),
    #[error("node index {0} is outside [0,1023]")]
    NodeIndexOutOfRange(i32),
    #[error("node index {0} is duplicated")]
    NodeIndexDuplicated(i32),
    #[error("node {node} GPUs must contain between 1 and 64 entries")]
    GpuCount { node: i32, gpus: usize },
    #[error("node {node} GPU index {gpu} is outside [0,63]")]
    GpuIndexOutOfRange { node: i32, gpu: i32 },
    #[error("node {node} GPU index {gpu} is duplicated")]
    GpuIndexDuplicated { node: i32, gpu: i32 },
    #[error("node {node} GPU {gpu} has a negative {field}")]
    NegativeGpuField {
        node: i32,
        gpu: i32,
        field: &'static str,
    },
    #[error("rendered rack spec is {0} bytes, exceeding the 1048576-byte limit")]
    TooLarge(usize),
}

/// A profile that passed validation, with its identity and revision computed
/// once so that rendering many racks does not re-hash it.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedProfile {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub revision: String,
    pub spec: SGPURackProfileSpec,
}

impl ResolvedProfile {
    /// Checks identity and validity and computes the revision.
    pub fn resolve(profile: &SGPURackProfile) -> Result<Self, RenderError> {
        let name = profile.metadata.name.clone().unwrap_or_default();
        let uid = profile.metadata.uid.clone().unwrap_or_default();
        let generation = profile.metadata.generation.unwrap_or(0);
        if name.is_empty() || uid.is_empty() || generation < 1 {
            return Err(RenderError::ProfileIdentityIncomplete);
        }
        validate_profile(&profile.spec)?;
        let revision = profile_revision(&profile.spec)?;
        Ok(Self {
            name,
            uid,
            generation,
            revision,
            spec: profile.spec.clone(),
        })
    }

    /// Logical Nodes per rack.
    pub fn nodes_per_rack(&self) -> i32 {
        self.spec.rack.nodes_per_rack
    }

    /// GPUs per logical Node.
    pub fn gpus_per_node(&self) -> i32 {
        self.spec.node.gpus.count
    }
}

/// Everything one rack render depends on.
#[derive(Clone, Copy, Debug)]
pub struct RackCoordinate<'a> {
    pub inventory_name: &'a str,
    pub inventory_uid: &'a str,
    pub group: &'a str,
    pub rack_index: i32,
    /// The group's rack count; the index must be below it.
    pub rack_count: i32,
}

/// Renders one rack from an unresolved profile (`None` when the referenced
/// profile does not exist).
pub fn render_rack(
    coordinate: RackCoordinate<'_>,
    profile: Option<&SGPURackProfile>,
) -> Result<SGPURackSpec, RenderError> {
    check_coordinate(&coordinate)?;
    let profile = profile.ok_or(RenderError::ProfileMissing)?;
    let resolved = ResolvedProfile::resolve(profile)?;
    render_resolved_rack(coordinate, &resolved)
}

/// Renders one rack: every logical Node gets one GPU per profile slot, in
/// slot-index order, with identities derived from the coordinate. No Node is
/// bound.
pub fn render_resolved_rack(
    coordinate: RackCoordinate<'_>,
    profile: &ResolvedProfile,
) -> Result<SGPURackSpec, RenderError> {
    check_coordinate(&coordinate)?;
    let spec = build_rack_spec(coordinate, profile);
    validate_rack_spec(&spec)?;
    Ok(spec)
}

/// The rendered spec before its bounds are checked.
fn build_rack_spec(coordinate: RackCoordinate<'_>, profile: &ResolvedProfile) -> SGPURackSpec {
    let RackCoordinate {
        inventory_name,
        inventory_uid,
        group,
        rack_index,
        ..
    } = coordinate;
    let slots = profile
        .spec
        .node
        .topology
        .as_ref()
        .map(|topology| slots_in_index_order(&topology.gpu_slots))
        .unwrap_or_default();
    let nodes = (0..profile.nodes_per_rack())
        .map(|node_index| RackNode {
            index: node_index,
            node_ref: None,
            gpus: slots
                .iter()
                .map(|slot| RackGpu {
                    index: slot.index,
                    uuid: gpu_uuid(inventory_uid, group, rack_index, node_index, slot.index),
                    serial: gpu_serial(inventory_uid, group, rack_index, node_index, slot.index),
                    minor_number: slot.index,
                    pci_address: slot.pci_address.clone(),
                    root_complex: slot.root_complex.clone(),
                    numa_node: slot.numa_node.unwrap_or(0),
                    host_processor_index: slot.host_processor_index.unwrap_or(0),
                })
                .collect(),
        })
        .collect();
    SGPURackSpec {
        inventory_ref: InventoryRef {
            name: inventory_name.to_string(),
            uid: inventory_uid.to_string(),
        },
        profile_ref: ProfileRef {
            name: profile.name.clone(),
            uid: profile.uid.clone(),
            generation: profile.generation,
            revision: profile.revision.clone(),
        },
        identity: RackIdentity {
            rack_group: group.to_string(),
            rack_index,
            fabric_uuid: fabric_uuid(inventory_uid, group, rack_index),
            clique_id: 0,
        },
        nodes,
    }
}

fn check_coordinate(coordinate: &RackCoordinate<'_>) -> Result<(), RenderError> {
    if coordinate.inventory_name.is_empty() {
        return Err(RenderError::EmptyInventoryName);
    }
    if coordinate.inventory_uid.is_empty() {
        return Err(RenderError::EmptyInventoryUid);
    }
    if coordinate.group.is_empty() {
        return Err(RenderError::EmptyGroup);
    }
    if coordinate.rack_index < 0 || coordinate.rack_index >= coordinate.rack_count {
        return Err(RenderError::RackIndexOutOfRange {
            index: coordinate.rack_index,
            count: coordinate.rack_count,
        });
    }
    Ok(())
}

/// Checks the list bounds the CRD enforces (1..1024 Nodes, 1..64 GPUs,
/// indexes in range and unique, non-negative GPU fields) and the 1 MiB size
/// bound. Used for rendered templates and for targets that carry bindings.
pub fn validate_rack_spec(spec: &SGPURackSpec) -> Result<(), RackSpecError> {
    if spec.nodes.is_empty() || spec.nodes.len() > MAX_NODES_PER_RACK as usize {
        return Err(RackSpecError::NodeCount(spec.nodes.len()));
    }
    let mut seen_nodes = vec![false; MAX_NODES_PER_RACK as usize];
    for node in &spec.nodes {
        let slot = usize::try_from(node.index)
            .ok()
            .filter(|index| *index < seen_nodes.len())
            .ok_or(RackSpecError::NodeIndexOutOfRange(node.index))?;
        if std::mem::replace(&mut seen_nodes[slot], true) {
            return Err(RackSpecError::NodeIndexDuplicated(node.index));
        }
        if node.gpus.is_empty() || node.gpus.len() > MAX_GPUS_PER_NODE as usize {
            return Err(RackSpecError::GpuCount {
                node: node.index,
                gpus: node.gpus.len(),
            });
        }
        let mut seen_gpus = [false; MAX_GPUS_PER_NODE as usize];
        for gpu in &node.gpus {
            let slot = usize::try_from(gpu.index)
                .ok()
                .filter(|index| *index < seen_gpus.len())
                .ok_or(RackSpecError::GpuIndexOutOfRange {
                    node: node.index,
                    gpu: gpu.index,
                })?;
            if std::mem::replace(&mut seen_gpus[slot], true) {
                return Err(RackSpecError::GpuIndexDuplicated {
                    node: node.index,
                    gpu: gpu.index,
                });
            }
            let negative = [
                ("minorNumber", gpu.minor_number),
                ("numaNode", gpu.numa_node),
                ("hostProcessorIndex", gpu.host_processor_index),
            ]
            .into_iter()
            .find(|(_, value)| *value < 0);
            if let Some((field, _)) = negative {
                return Err(RackSpecError::NegativeGpuField {
                    node: node.index,
                    gpu: gpu.index,
                    field,
                });
            }
        }
    }
    let size = encoded_size(spec);
    if size > MAX_RACK_SPEC_BYTES {
        return Err(RackSpecError::TooLarge(size));
    }
    Ok(())
}

/// Length of the compact JSON encoding, counted without building the string.
fn encoded_size(spec: &SGPURackSpec) -> usize {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Encoding plain structs of strings and integers into a sink cannot fail;
    // should it ever, the count so far is still a lower bound.
    let _ = serde_json::to_writer(&mut counter, spec);
    counter.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::example_profile;
    use crate::identity::rack_name;

    fn coordinate(rack_index: i32) -> RackCoordinate<'static> {
        RackCoordinate {
            inventory_name: "inventory-a",
            inventory_uid: "inventory-uid-a",
            group: "compute",
            rack_index,
            rack_count: 3,
        }
    }

    #[test]
    fn render_output_carries_references_identities_and_slot_ordered_gpus() {
        let mut profile = example_profile("a100", "profile-uid", 2, 4);
        // Slots listed out of order must still render in index order.
        profile
            .spec
            .node
            .topology
            .as_mut()
            .unwrap()
            .gpu_slots
            .reverse();
        let spec = render_rack(coordinate(2), Some(&profile)).unwrap();

        assert_eq!(
            spec.inventory_ref,
            InventoryRef {
                name: "inventory-a".into(),
                uid: "inventory-uid-a".into()
            }
        );
        assert_eq!(spec.profile_ref.name, "a100");
        assert_eq!(spec.profile_ref.uid, "profile-uid");
        assert_eq!(spec.profile_ref.generation, 1);
        assert_eq!(
            spec.profile_ref.revision,
            profile_revision(&profile.spec).unwrap()
        );
        assert_eq!(spec.identity.rack_group, "compute");
        assert_eq!(spec.identity.rack_index, 2);
        assert_eq!(spec.identity.clique_id, 0);
        assert_eq!(
            spec.identity.fabric_uuid,
            "2c79cf0a-9456-5f4d-aef6-c9dba304466a"
        );
        assert_eq!(
            spec.nodes.iter().map(|n| n.index).collect::<Vec<_>>(),
            vec![0, 1]
        );
        for node in &spec.nodes {
            assert!(node.node_ref.is_none());
            assert_eq!(
                node.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
                vec![0, 1, 2, 3]
            );
            for gpu in &node.gpus {
                assert_eq!(gpu.minor_number, gpu.index);
                assert_eq!(
                    gpu.uuid,
                    gpu_uuid("inventory-uid-a", "compute", 2, node.index, gpu.index)
                );
                assert_eq!(
                    gpu.serial,
                    gpu_serial("inventory-uid-a", "compute", 2, node.index, gpu.index)
                );
                assert_eq!(gpu.pci_address, format!("0000:{:02x}:00.0", gpu.index + 1));
            }
        }
        let first = &spec.nodes[0].gpus[0];
        assert_eq!(first.uuid, "GPU-e1fc2f7b-7e71-5cdd-addf-11103758e19f");
        assert_eq!(first.serial, "01184543437958700640");
        assert!(
            rack_name("inventory-a", "inventory-uid-a", "compute", 2).ends_with("-152f2cf61b78")
        );
    }

    #[test]
    fn render_matches_upstreams_render_rack_vector() {
        // Upstream TestRenderRack: profile-a (generation 7, slots listed in
        // reverse) at rack 2 of a 4-rack group.
        let mut spec = crate::profile::tests::upstream_test_profile_spec();
        spec.node.topology.as_mut().unwrap().gpu_slots.reverse();
        let profile = SGPURackProfile {
            metadata: kube::api::ObjectMeta {
                name: Some("profile-a".into()),
                uid: Some("profile-uid-a".into()),
                generation: Some(7),
                ..Default::default()
            },
            spec,
        };
        let rendered = render_rack(
            RackCoordinate {
                rack_count: 4,
                ..coordinate(2)
            },
            Some(&profile),
        )
        .unwrap();
        assert_eq!(
            rendered.profile_ref,
            ProfileRef {
                name: "profile-a".into(),
                uid: "profile-uid-a".into(),
                generation: 7,
                revision: crate::profile::tests::UPSTREAM_TEST_PROFILE_REVISION.into(),
            }
        );
        assert_eq!(rendered.nodes.len(), 2);
        assert_eq!(
            rendered.nodes[0].gpus[0],
            RackGpu {
                index: 0,
                uuid: "GPU-e1fc2f7b-7e71-5cdd-addf-11103758e19f".into(),
                serial: "01184543437958700640".into(),
                minor_number: 0,
                pci_address: "0000:01:00.0".into(),
                root_complex: "pci0000:00".into(),
                numa_node: 0,
                host_processor_index: 0,
            }
        );
        assert_eq!(rendered.nodes[0].gpus[1].index, 1);
        assert_eq!(
            crate::identity::rack_name("inventory-a", "inventory-uid-a", "compute", 2),
            "inventory-a-compute-2-152f2cf61b78"
        );
    }

    #[test]
    fn rendering_is_deterministic() {
        let profile = example_profile("a100", "profile-uid", 3, 2);
        assert_eq!(
            render_rack(coordinate(1), Some(&profile)),
            render_rack(coordinate(1), Some(&profile))
        );
    }

    #[test]
    fn render_rejects_empty_identity_out_of_range_index_and_bad_profiles() {
        let profile = example_profile("a100", "profile-uid", 2, 4);
        let reject = |coordinate: RackCoordinate<'_>, profile: Option<&SGPURackProfile>| {
            render_rack(coordinate, profile).unwrap_err().to_string()
        };
        assert_eq!(
            reject(
                RackCoordinate {
                    inventory_name: "",
                    ..coordinate(0)
                },
                Some(&profile)
            ),
            "inventory name must not be empty"
        );
        assert_eq!(
            reject(
                RackCoordinate {
                    inventory_uid: "",
                    ..coordinate(0)
                },
                Some(&profile)
            ),
            "inventory UID must not be empty"
        );
        assert_eq!(
            reject(
                RackCoordinate {
                    group: "",
                    ..coordinate(0)
                },
                Some(&profile)
            ),
            "rack group ID must not be empty"
        );
        assert_eq!(
            reject(coordinate(3), Some(&profile)),
            "rack index 3 is outside group count 3"
        );
        assert_eq!(
            reject(coordinate(-1), Some(&profile)),
            "rack index -1 is outside group count 3"
        );
        assert_eq!(reject(coordinate(0), None), "profile must not be nil");

        for strip in 0..3 {
            let mut anonymous = profile.clone();
            match strip {
                0 => anonymous.metadata.name = None,
                1 => anonymous.metadata.uid = Some(String::new()),
                _ => anonymous.metadata.generation = Some(0),
            }
            assert_eq!(
                reject(coordinate(0), Some(&anonymous)),
                "profile reference must include name, UID, and generation"
            );
        }

        let mut invalid = profile.clone();
        invalid.spec.node.gpus.count = 0;
        assert_eq!(
            reject(coordinate(0), Some(&invalid)),
            "validate profile: node.gpus.count must be positive"
        );
        let mut no_slots = profile.clone();
        no_slots
            .spec
            .node
            .topology
            .as_mut()
            .unwrap()
            .gpu_slots
            .clear();
        assert_eq!(
            reject(coordinate(0), Some(&no_slots)),
            "validate profile: gpuSlots length 0 must equal gpus.count 4"
        );
    }

    #[test]
    fn optional_topology_parts_render() {
        let mut profile = example_profile("bare", "profile-uid", 1, 1);
        let topology = profile.spec.node.topology.as_mut().unwrap();
        topology.gpu_fabric = None;
        topology.network = None;
        topology.gpu_slots[0].numa_node = None;
        topology.gpu_slots[0].host_processor_index = None;
        let spec = render_rack(coordinate(0), Some(&profile)).unwrap();
        assert_eq!(spec.nodes.len(), 1);
        assert_eq!(spec.nodes[0].gpus[0].numa_node, 0);
        assert_eq!(spec.nodes[0].gpus[0].host_processor_index, 0);
    }

    #[test]
    fn boundary_dimensions_render_and_oversized_specs_are_rejected() {
        // 1024 x 2 GPUs stays under 1 MiB; 1024 x 64 does not.
        let wide = example_profile("wide", "profile-uid", 1024, 2);
        let spec = render_rack(coordinate(0), Some(&wide)).unwrap();
        assert_eq!(spec.nodes.len(), 1024);
        let deep = example_profile("deep", "profile-uid", 1, 64);
        assert_eq!(
            render_rack(coordinate(0), Some(&deep)).unwrap().nodes[0]
                .gpus
                .len(),
            64
        );

        let huge = example_profile("huge", "profile-uid", 1024, 64);
        let message = render_rack(coordinate(0), Some(&huge))
            .unwrap_err()
            .to_string();
        let unchecked = build_rack_spec(coordinate(0), &ResolvedProfile::resolve(&huge).unwrap());
        let size = serde_json::to_vec(&unchecked).unwrap().len();
        assert!(size > MAX_RACK_SPEC_BYTES);
        assert_eq!(
            message,
            format!("rendered rack spec is {size} bytes, exceeding the 1048576-byte limit")
        );
    }

    #[test]
    fn rack_spec_validation_reports_upstream_count_and_index_messages() {
        // Upstream ValidateRackSpec: list bounds and index ranges.
        let profile = example_profile("a100", "profile-uid", 2, 2);
        let spec = render_rack(coordinate(0), Some(&profile)).unwrap();
        let message = |spec: &SGPURackSpec| validate_rack_spec(spec).unwrap_err().to_string();

        let mut no_nodes = spec.clone();
        no_nodes.nodes.clear();
        assert_eq!(
            message(&no_nodes),
            "nodes must contain between 1 and 1024 entries"
        );
        let mut too_many = spec.clone();
        too_many.nodes = (0..1025)
            .map(|index| RackNode {
                index,
                ..spec.nodes[0].clone()
            })
            .collect();
        assert_eq!(
            message(&too_many),
            "nodes must contain between 1 and 1024 entries"
        );
        let mut far_node = spec.clone();
        far_node.nodes[1].index = 1024;
        assert_eq!(message(&far_node), "node index 1024 is outside [0,1023]");
        let mut empty = spec.clone();
        empty.nodes[0].gpus.clear();
        assert_eq!(
            message(&empty),
            "node 0 GPUs must contain between 1 and 64 entries"
        );
        let mut wide = spec.clone();
        wide.nodes[0].gpus = (0..65)
            .map(|index| RackGpu {
                index,
                ..spec.nodes[0].gpus[0].clone()
            })
            .collect();
        assert_eq!(
            message(&wide),
            "node 0 GPUs must contain between 1 and 64 entries"
        );
        let mut far_gpu = spec.clone();
        far_gpu.nodes[0].gpus[1].index = 64;
        assert_eq!(message(&far_gpu), "node 0 GPU index 64 is outside [0,63]");

        // Checks of ours on top (the rack schema's list-map keys and minimums).
        let mut duplicate_node = spec.clone();
        duplicate_node.nodes[1].index = 0;
        assert_eq!(message(&duplicate_node), "node index 0 is duplicated");
        let mut duplicate_gpu = spec.clone();
        duplicate_gpu.nodes[1].gpus[1].index = 0;
        assert_eq!(message(&duplicate_gpu), "node 1 GPU index 0 is duplicated");
        let mut negative = spec;
        negative.nodes[0].gpus[0].numa_node = -1;
        assert_eq!(message(&negative), "node 0 GPU 0 has a negative numaNode");
    }

    #[test]
    fn rendering_prefixes_rack_spec_errors_like_upstream_except_the_size_bound() {
        let bounds = RenderError::from(RackSpecError::NodeIndexOutOfRange(1024));
        assert_eq!(
            bounds.to_string(),
            "validate rendered rack spec: node index 1024 is outside [0,1023]"
        );
        let size = RenderError::from(RackSpecError::TooLarge(2_000_000));
        assert_eq!(
            size.to_string(),
            "rendered rack spec is 2000000 bytes, exceeding the 1048576-byte limit"
        );
    }

    #[test]
    fn rendered_gpus_always_carry_numa_node_and_host_processor_index() {
        // Upstream SGPURackGPU: numaNode and hostProcessorIndex are plain
        // required int32s, so a slot without them renders 0 and the JSON
        // always carries both keys.
        let mut profile = example_profile("bare", "profile-uid", 1, 2);
        let slots = &mut profile.spec.node.topology.as_mut().unwrap().gpu_slots;
        slots[0].numa_node = None;
        slots[0].host_processor_index = None;
        slots[1].numa_node = Some(3);
        slots[1].host_processor_index = Some(5);
        let spec = render_rack(coordinate(0), Some(&profile)).unwrap();
        let json = serde_json::to_value(&spec).unwrap();
        let gpus = &json["nodes"][0]["gpus"];
        assert_eq!(gpus[0]["numaNode"], 0);
        assert_eq!(gpus[0]["hostProcessorIndex"], 0);
        assert_eq!(gpus[1]["numaNode"], 3);
        assert_eq!(gpus[1]["hostProcessorIndex"], 5);
        // A stored rack without them does not decode: the schema requires both.
        let mut stored = gpus[0].clone();
        stored.as_object_mut().unwrap().remove("numaNode");
        assert!(serde_json::from_value::<RackGpu>(stored).is_err());
    }
}
