//! Profile validation (the controller's cross-field invariants) and the
//! profile revision (a content hash that racks record).

use std::io;

use serde::Serialize;
use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::api::{FabricScope, GpuSlot, SGPURackProfileSpec};
use crate::text::go_quote;

/// Most logical Nodes one rack may have.
pub const MAX_NODES_PER_RACK: i32 = 1024;
/// Most GPUs one logical Node may have.
pub const MAX_GPUS_PER_NODE: i32 = 64;

/// Why a profile cannot be rendered. The messages are upstream's, in its
/// check order; the first failing check wins.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ProfileError {
    #[error("rack.nodesPerRack must be positive")]
    NodesPerRackNotPositive,
    #[error("rack.nodesPerRack must be at most 1024")]
    NodesPerRackTooLarge,
    #[error("node.gpus.count must be positive")]
    GpuCountNotPositive,
    #[error("node.gpus.count must be at most 64")]
    GpuCountTooLarge,
    #[error("node.topology must be set")]
    TopologyMissing,
    #[error("gpuSlots must contain at most 64 entries")]
    TooManySlots,
    #[error("gpuSlots length {slots} must equal gpus.count {gpus}")]
    SlotCountMismatch { slots: usize, gpus: i32 },
    #[error("gpuSlots indexes must be unique and contiguous from zero")]
    SlotIndexesNotContiguous,
    #[error("gpuSlots PCI address {} is not canonical", go_quote(.0))]
    PciAddressNotCanonical(String),
    #[error("gpuSlots root complex {} is not canonical", go_quote(.0))]
    RootComplexNotCanonical(String),
    #[error("gpuSlots PCI addresses must be unique")]
    DuplicatePciAddress,
    #[error("gpuFabric must define a positive rack-scoped topology")]
    FabricNotRackScoped,
    #[error(
        "gpuFabric.domain.gpuCount {declared} must equal rack.nodesPerRack * node.gpus.count ({expected})"
    )]
    FabricGpuCountMismatch { declared: i32, expected: i64 },
    #[error("network must define positive adapter topology")]
    NetworkIncomplete,
}

/// Checks the invariants the CRD schema cannot express. Dimension bounds come
/// first, so an extreme profile is rejected before any per-slot work.
pub fn validate_profile(spec: &SGPURackProfileSpec) -> Result<(), ProfileError> {
    let nodes_per_rack = spec.rack.nodes_per_rack;
    if nodes_per_rack <= 0 {
        return Err(ProfileError::NodesPerRackNotPositive);
    }
    if nodes_per_rack > MAX_NODES_PER_RACK {
        return Err(ProfileError::NodesPerRackTooLarge);
    }
    let gpu_count = spec.node.gpus.count;
    if gpu_count <= 0 {
        return Err(ProfileError::GpuCountNotPositive);
    }
    if gpu_count > MAX_GPUS_PER_NODE {
        return Err(ProfileError::GpuCountTooLarge);
    }
    let topology = spec
        .node
        .topology
        .as_ref()
        .ok_or(ProfileError::TopologyMissing)?;
    let slots = &topology.gpu_slots;
    if slots.len() > MAX_GPUS_PER_NODE as usize {
        return Err(ProfileError::TooManySlots);
    }
    if slots.len() != gpu_count as usize {
        return Err(ProfileError::SlotCountMismatch {
            slots: slots.len(),
            gpus: gpu_count,
        });
    }
    let ordered = slots_in_index_order(slots);
    if ordered
        .iter()
        .enumerate()
        .any(|(position, slot)| slot.index != position as i32)
    {
        return Err(ProfileError::SlotIndexesNotContiguous);
    }
    for slot in &ordered {
        if !is_canonical_pci_address(&slot.pci_address) {
            return Err(ProfileError::PciAddressNotCanonical(
                slot.pci_address.clone(),
            ));
        }
        if !is_canonical_root_complex(&slot.root_complex) {
            return Err(ProfileError::RootComplexNotCanonical(
                slot.root_complex.clone(),
            ));
        }
    }
    let mut addresses: Vec<&str> = slots.iter().map(|slot| slot.pci_address.as_str()).collect();
    addresses.sort_unstable();
    if addresses.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(ProfileError::DuplicatePciAddress);
    }

    if let Some(fabric) = &topology.gpu_fabric {
        let positive = |value: Option<i32>| value.is_some_and(|v| v > 0);
        let rack_scoped = fabric
            .domain
            .as_ref()
            .is_some_and(|domain| domain.scope == Some(FabricScope::Rack));
        if fabric.fabric_type.as_deref().unwrap_or_default().is_empty()
            || !positive(fabric.generation)
            || !positive(fabric.links_per_gpu)
            || !positive(fabric.bandwidth_per_link_mbps)
            || !rack_scoped
        {
            return Err(ProfileError::FabricNotRackScoped);
        }
        let declared = fabric
            .domain
            .as_ref()
            .and_then(|domain| domain.gpu_count)
            .unwrap_or(0);
        let expected = i64::from(nodes_per_rack) * i64::from(gpu_count);
        if i64::from(declared) != expected {
            return Err(ProfileError::FabricGpuCountMismatch { declared, expected });
        }
    }

    if let Some(network) = &topology.network {
        let present = |value: &Option<String>| value.as_deref().is_some_and(|v| !v.is_empty());
        let positive = |value: Option<i32>| value.is_some_and(|v| v > 0);
        if !present(&network.network_type)
            || !present(&network.adapter_model)
            || !present(&network.firmware_version)
            || !positive(network.link_speed_gbps)
            || !positive(network.adapters_per_gpu)
        {
            return Err(ProfileError::NetworkIncomplete);
        }
    }
    Ok(())
}

/// Slots sorted by index (stable, so duplicates keep their listed order).
pub(crate) fn slots_in_index_order(slots: &[GpuSlot]) -> Vec<&GpuSlot> {
    let mut ordered: Vec<&GpuSlot> = slots.iter().collect();
    ordered.sort_by_key(|slot| slot.index);
    ordered
}

/// `dddd:bb:dd.f` in lowercase hex, function 0..7.
pub fn is_canonical_pci_address(address: &str) -> bool {
    let bytes = address.as_bytes();
    bytes.len() == 12
        && bytes[..4].iter().all(|b| is_lower_hex(*b))
        && bytes[4] == b':'
        && bytes[5..7].iter().all(|b| is_lower_hex(*b))
        && bytes[7] == b':'
        && bytes[8..10].iter().all(|b| is_lower_hex(*b))
        && bytes[10] == b'.'
        && (b'0'..=b'7').contains(&bytes[11])
}

/// `pcidddd:bb` in lowercase hex.
pub fn is_canonical_root_complex(root: &str) -> bool {
    let bytes = root.as_bytes();
    bytes.len() == 10
        && bytes.starts_with(b"pci")
        && bytes[3..7].iter().all(|b| is_lower_hex(*b))
        && bytes[7] == b':'
        && bytes[8..10].iter().all(|b| is_lower_hex(*b))
}

fn is_lower_hex(byte: u8) -> bool {
    byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)
}

/// The profile revision: lowercase hex SHA-256 of the spec's canonical JSON.
/// Slot order and the order of set-typed lists do not change it; any other
/// content change does.
pub fn profile_revision(spec: &SGPURackProfileSpec) -> Result<String, crate::MokkaError> {
    let canonical = canonical_profile_json(spec)?;
    let digest = Sha256::digest(&canonical);
    Ok(digest.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// The bytes the revision hashes: the spec with slots sorted by index and
/// every set sorted, encoded with Go's `encoding/json` string escaping.
pub fn canonical_profile_json(spec: &SGPURackProfileSpec) -> Result<Vec<u8>, crate::MokkaError> {
    let mut canonical = spec.clone();
    if let Some(topology) = canonical.node.topology.as_mut() {
        topology.gpu_slots.sort_by_key(|slot| slot.index);
    }
    if let Some(clocks) = canonical.node.gpus.clocks.as_mut()
        && let Some(supported) = clocks.supported.as_mut()
    {
        for entry in supported.iter_mut() {
            entry.graphics_mhz.sort_unstable();
        }
    }
    if let Some(capabilities) = canonical.node.gpus.capabilities.as_mut()
        && let Some(attributes) = capabilities.attributes.as_mut()
    {
        for attribute in attributes.values_mut() {
            if let Some(strings) = attribute.strings.as_mut() {
                strings.sort_unstable();
            }
        }
    }
    let mut out = Vec::with_capacity(1024);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, GoJsonFormatter);
    canonical
        .serialize(&mut serializer)
        .map_err(|source| crate::MokkaError::Json {
            what: "profile spec",
            source,
        })?;
    Ok(out)
}

/// A compact JSON formatter that escapes strings like Go's `encoding/json`
/// (`<`, `>`, `&`, U+2028 and U+2029 become `\u00XX` escapes), so canonical
/// bytes match Go's for the same logical document.
struct GoJsonFormatter;

impl serde_json::ser::Formatter for GoJsonFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (position, ch) in fragment.char_indices() {
            let escape = match ch {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            writer.write_all(&fragment.as_bytes()[start..position])?;
            writer.write_all(escape.as_bytes())?;
            start = position + ch.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures::example_profile_spec;

    fn with(mut edit: impl FnMut(&mut SGPURackProfileSpec)) -> SGPURackProfileSpec {
        let mut spec = example_profile_spec(2, 4);
        edit(&mut spec);
        spec
    }

    fn message(spec: &SGPURackProfileSpec) -> String {
        validate_profile(spec).unwrap_err().to_string()
    }

    #[test]
    fn the_example_profile_is_valid() {
        validate_profile(&example_profile_spec(2, 4)).unwrap();
        validate_profile(&example_profile_spec(18, 4)).unwrap();
    }

    #[test]
    fn dimension_boundaries_are_accepted_and_extremes_rejected_before_topology_work() {
        validate_profile(&example_profile_spec(1, 1)).unwrap();
        validate_profile(&example_profile_spec(1024, 64)).unwrap();
        // Topology is removed too: the dimension message must still win.
        let extreme = |nodes: i32, gpus: i32| {
            with(|spec| {
                spec.rack.nodes_per_rack = nodes;
                spec.node.gpus.count = gpus;
                spec.node.topology = None;
            })
        };
        assert_eq!(
            message(&extreme(0, 4)),
            "rack.nodesPerRack must be positive"
        );
        assert_eq!(
            message(&extreme(-3, 4)),
            "rack.nodesPerRack must be positive"
        );
        assert_eq!(
            message(&extreme(1025, 4)),
            "rack.nodesPerRack must be at most 1024"
        );
        assert_eq!(
            message(&extreme(i32::MAX, 4)),
            "rack.nodesPerRack must be at most 1024"
        );
        assert_eq!(message(&extreme(2, 0)), "node.gpus.count must be positive");
        assert_eq!(
            message(&extreme(2, 65)),
            "node.gpus.count must be at most 64"
        );
        assert_eq!(message(&extreme(2, 4)), "node.topology must be set");
    }

    #[test]
    fn slot_checks_report_upstream_messages_in_order() {
        let too_many = with(|spec| {
            let slots = &mut spec.node.topology.as_mut().unwrap().gpu_slots;
            let extra = example_profile_spec(1, 64).node.topology.unwrap().gpu_slots;
            slots.extend(extra);
        });
        assert_eq!(
            message(&too_many),
            "gpuSlots must contain at most 64 entries"
        );

        let short = with(|spec| {
            spec.node.topology.as_mut().unwrap().gpu_slots.pop();
        });
        assert_eq!(message(&short), "gpuSlots length 3 must equal gpus.count 4");

        let gap = with(|spec| spec.node.topology.as_mut().unwrap().gpu_slots[3].index = 7);
        assert_eq!(
            message(&gap),
            "gpuSlots indexes must be unique and contiguous from zero"
        );
        let duplicate = with(|spec| spec.node.topology.as_mut().unwrap().gpu_slots[3].index = 0);
        assert_eq!(
            message(&duplicate),
            "gpuSlots indexes must be unique and contiguous from zero"
        );

        let upper = with(|spec| {
            spec.node.topology.as_mut().unwrap().gpu_slots[1].pci_address = "0000:0A:00.0".into()
        });
        assert_eq!(
            message(&upper),
            "gpuSlots PCI address \"0000:0A:00.0\" is not canonical"
        );
        let function = with(|spec| {
            spec.node.topology.as_mut().unwrap().gpu_slots[1].pci_address = "0000:0a:00.8".into()
        });
        assert_eq!(
            message(&function),
            "gpuSlots PCI address \"0000:0a:00.8\" is not canonical"
        );

        let root = with(|spec| {
            spec.node.topology.as_mut().unwrap().gpu_slots[2].root_complex = "pci0000-00".into()
        });
        assert_eq!(
            message(&root),
            "gpuSlots root complex \"pci0000-00\" is not canonical"
        );

        let same = with(|spec| {
            let slots = &mut spec.node.topology.as_mut().unwrap().gpu_slots;
            slots[2].pci_address = slots[0].pci_address.clone();
        });
        assert_eq!(message(&same), "gpuSlots PCI addresses must be unique");
    }

    #[test]
    fn fabric_must_be_positive_rack_scoped_and_count_every_gpu_of_the_rack() {
        let node_scoped = with(|spec| {
            let fabric = spec
                .node
                .topology
                .as_mut()
                .unwrap()
                .gpu_fabric
                .as_mut()
                .unwrap();
            fabric.domain.as_mut().unwrap().scope = Some(FabricScope::Node);
        });
        assert_eq!(
            message(&node_scoped),
            "gpuFabric must define a positive rack-scoped topology"
        );
        let no_links = with(|spec| {
            spec.node
                .topology
                .as_mut()
                .unwrap()
                .gpu_fabric
                .as_mut()
                .unwrap()
                .links_per_gpu = Some(0);
        });
        assert_eq!(
            message(&no_links),
            "gpuFabric must define a positive rack-scoped topology"
        );
        let untyped = with(|spec| {
            spec.node
                .topology
                .as_mut()
                .unwrap()
                .gpu_fabric
                .as_mut()
                .unwrap()
                .fabric_type = Some(String::new());
        });
        assert_eq!(
            message(&untyped),
            "gpuFabric must define a positive rack-scoped topology"
        );
        let miscounted = with(|spec| {
            let fabric = spec
                .node
                .topology
                .as_mut()
                .unwrap()
                .gpu_fabric
                .as_mut()
                .unwrap();
            fabric.domain.as_mut().unwrap().gpu_count = Some(7);
        });
        assert_eq!(
            message(&miscounted),
            "gpuFabric.domain.gpuCount 7 must equal rack.nodesPerRack * node.gpus.count (8)"
        );
    }

    #[test]
    fn network_needs_every_adapter_field_and_topology_parts_are_optional() {
        let partial = with(|spec| {
            spec.node
                .topology
                .as_mut()
                .unwrap()
                .network
                .as_mut()
                .unwrap()
                .adapters_per_gpu = Some(0);
        });
        assert_eq!(
            message(&partial),
            "network must define positive adapter topology"
        );
        let bare = with(|spec| {
            let topology = spec.node.topology.as_mut().unwrap();
            topology.network = None;
            topology.gpu_fabric = None;
        });
        validate_profile(&bare).unwrap();
    }

    #[test]
    fn the_revision_ignores_slot_and_set_order_but_not_content() {
        let base = example_profile_spec(2, 4);
        let revision = profile_revision(&base).unwrap();
        assert_eq!(revision.len(), 64);
        assert!(
            revision
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );

        let reordered = with(|spec| {
            spec.node.topology.as_mut().unwrap().gpu_slots.reverse();
            let clocks = spec.node.gpus.clocks.as_mut().unwrap();
            clocks.supported.as_mut().unwrap()[0].graphics_mhz.reverse();
            let attributes = spec
                .node
                .gpus
                .capabilities
                .as_mut()
                .unwrap()
                .attributes
                .as_mut()
                .unwrap();
            for attribute in attributes.values_mut() {
                if let Some(strings) = attribute.strings.as_mut() {
                    strings.reverse();
                }
            }
        });
        assert_ne!(reordered, base);
        assert_eq!(profile_revision(&reordered).unwrap(), revision);

        let new_driver =
            with(|spec| spec.software.as_mut().unwrap().driver_version = Some("999.1".into()));
        assert_ne!(profile_revision(&new_driver).unwrap(), revision);
        let new_defaults = with(|spec| spec.defaults = None);
        assert_ne!(profile_revision(&new_defaults).unwrap(), revision);
    }

    #[test]
    fn canonical_json_escapes_html_characters_like_go() {
        let spec = with(|spec| spec.software.as_mut().unwrap().cuda_version = Some("<a&b>".into()));
        let bytes = canonical_profile_json(&spec).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.contains(r#""cudaVersion":"\u003ca\u0026b\u003e""#),
            "{text}"
        );
        let reparsed: SGPURackProfileSpec = serde_json::from_str(&text).unwrap();
        assert_eq!(reparsed.software, spec.software);
    }
}
