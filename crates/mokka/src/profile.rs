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
    // Upstream checks each slot in listed order: its index, its PCI address,
    // its root complex, then whether its address repeats an earlier one.
    // With as many slots as GPUs, unique indexes below the count are exactly
    // the contiguous range from zero.
    let mut seen_indexes = [false; MAX_GPUS_PER_NODE as usize];
    let mut seen_addresses: Vec<&str> = Vec::with_capacity(slots.len());
    for slot in slots {
        let index = usize::try_from(slot.index)
            .ok()
            .filter(|index| *index < gpu_count as usize);
        match index {
            Some(index) if !seen_indexes[index] => seen_indexes[index] = true,
            _ => return Err(ProfileError::SlotIndexesNotContiguous),
        }
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
        if seen_addresses.contains(&slot.pci_address.as_str()) {
            return Err(ProfileError::DuplicatePciAddress);
        }
        seen_addresses.push(&slot.pci_address);
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

/// Why a profile spec has no canonical JSON. Messages are upstream's.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CanonicalProfileError {
    /// Upstream refuses to hash a profile without topology (its slots are
    /// part of the rendered content).
    #[error("node.topology must be set")]
    TopologyMissing,
    #[error("encode profile spec as JSON: {0}")]
    Encode(String),
}

/// Why a profile has no revision: upstream's `marshal canonical profile: `
/// prefix over the canonical-JSON error.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
#[error("marshal canonical profile: {0}")]
pub struct RevisionError(#[from] pub CanonicalProfileError);

/// The profile revision: lowercase hex SHA-256 of the spec's canonical JSON.
/// Slot order, the order of set-typed lists and zero values written out
/// where Go's `omitempty` drops them do not change it; any other content
/// change does.
pub fn profile_revision(spec: &SGPURackProfileSpec) -> Result<String, RevisionError> {
    let canonical = canonical_profile_json(spec)?;
    let digest = Sha256::digest(&canonical);
    Ok(digest.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// The bytes the revision hashes, as upstream's Go encoder writes them for
/// the same spec: slots sorted by index, every set sorted, Go's zero values
/// left out wherever upstream's field is a non-pointer `omitempty` one
/// ([`omit_go_zero_values`]), and Go's string escaping.
pub fn canonical_profile_json(
    spec: &SGPURackProfileSpec,
) -> Result<Vec<u8>, CanonicalProfileError> {
    if spec.node.topology.is_none() {
        return Err(CanonicalProfileError::TopologyMissing);
    }
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
    omit_go_zero_values(&mut canonical);
    canonicalize_quantities(&mut canonical);
    let mut out = Vec::with_capacity(1024);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, GoJsonFormatter);
    canonical
        .serialize(&mut serializer)
        .map_err(|error| CanonicalProfileError::Encode(error.to_string()))?;
    Ok(out)
}

/// Clears every optional field that holds its Go zero value (`0`, `false`,
/// `""`, an empty list or map) where upstream's Go field is a plain value
/// with `omitempty`: Go cannot tell such a zero from an absent field, so it
/// never encodes one. Fields that are pointers upstream (nested objects,
/// `reserved`, `bar1Capacity`, the capability `bool` and `int`, every
/// numeric field of the runtime defaults) keep an explicit zero, as Go does.
/// Required fields (`nodesPerRack`, `count`, slot `index`, `memoryMHz`,
/// `graphicsMHz`, compute capability `major`/`minor`, `capacity`) are always
/// encoded.
pub fn omit_go_zero_values(spec: &mut SGPURackProfileSpec) {
    let gpus = &mut spec.node.gpus;
    let model = &mut gpus.model;
    for text in [
        &mut model.vendor,
        &mut model.product,
        &mut model.product_name,
        &mut model.architecture,
    ] {
        clear_empty_string(text);
    }
    if let Some(cores) = model.cores.as_mut() {
        clear_zero(&mut cores.cuda);
    }
    if let Some(board) = model.board.as_mut() {
        clear_empty_string(&mut board.part_number);
    }
    if let Some(firmware) = model.firmware.as_mut() {
        clear_empty_string(&mut firmware.vbios_version);
        clear_empty_string(&mut firmware.gsp_version);
        if let Some(info_rom) = firmware.info_rom.as_mut() {
            for text in [
                &mut info_rom.image_version,
                &mut info_rom.oem_object_version,
                &mut info_rom.ecc_object_version,
                &mut info_rom.power_object_version,
            ] {
                clear_empty_string(text);
            }
        }
    }
    clear_zero(&mut gpus.memory.bus_width_bits);
    let pci = &mut gpus.pci;
    for text in [
        &mut pci.vendor_id,
        &mut pci.device_id,
        &mut pci.subsystem_vendor_id,
        &mut pci.subsystem_device_id,
    ] {
        clear_empty_string(text);
    }
    if let Some(link) = pci.max_link.as_mut() {
        clear_zero(&mut link.generation);
        clear_zero(&mut link.width);
    }
    if let Some(power) = gpus.power.as_mut() {
        clear_false(&mut power.management_supported);
        if let Some(limits) = power.limits_milli_watts.as_mut() {
            clear_zero(&mut limits.minimum);
            clear_zero(&mut limits.default);
            clear_zero(&mut limits.maximum);
        }
    }
    if let Some(thermal) = gpus.thermal.as_mut() {
        for value in [
            &mut thermal.target_celsius,
            &mut thermal.max_operating_celsius,
            &mut thermal.slowdown_threshold_celsius,
            &mut thermal.shutdown_threshold_celsius,
        ] {
            clear_zero(value);
        }
    }
    if let Some(clocks) = gpus.clocks.as_mut() {
        if let Some(maximum) = clocks.maximum_mhz.as_mut() {
            for value in [
                &mut maximum.graphics,
                &mut maximum.sm,
                &mut maximum.memory,
                &mut maximum.video,
            ] {
                clear_zero(value);
            }
        }
        clear_empty_list(&mut clocks.supported);
    }
    if let Some(capabilities) = gpus.capabilities.as_mut() {
        if let Some(mig) = capabilities.mig.as_mut() {
            clear_false(&mut mig.supported);
            clear_zero(&mut mig.max_gpu_instances);
        }
        if let Some(attributes) = capabilities.attributes.as_mut() {
            for attribute in attributes.values_mut() {
                clear_empty_string(&mut attribute.string);
                clear_empty_list(&mut attribute.strings);
            }
        }
        if capabilities
            .attributes
            .as_ref()
            .is_some_and(|map| map.is_empty())
        {
            capabilities.attributes = None;
        }
    }
    if let Some(host) = spec.node.host.as_mut() {
        if let Some(cpu) = host.cpu.as_mut() {
            clear_empty_string(&mut cpu.vendor);
            clear_empty_string(&mut cpu.product);
            clear_empty_string(&mut cpu.architecture);
            clear_zero(&mut cpu.cores);
        }
        if let Some(memory) = host.memory.as_mut() {
            clear_false(&mut memory.coherent_with_gpu);
        }
    }
    if let Some(topology) = spec.node.topology.as_mut() {
        for slot in &mut topology.gpu_slots {
            clear_zero(&mut slot.numa_node);
            clear_zero(&mut slot.host_processor_index);
        }
        if let Some(fabric) = topology.gpu_fabric.as_mut() {
            clear_empty_string(&mut fabric.fabric_type);
            clear_zero(&mut fabric.generation);
            clear_zero(&mut fabric.links_per_gpu);
            clear_zero(&mut fabric.bandwidth_per_link_mbps);
            clear_false(&mut fabric.c2c_supported);
            if let Some(domain) = fabric.domain.as_mut() {
                clear_zero(&mut domain.gpu_count);
            }
            if let Some(switches) = fabric.switches.as_mut() {
                clear_zero(&mut switches.visible_per_node);
            }
        }
        if let Some(network) = topology.network.as_mut() {
            clear_empty_string(&mut network.network_type);
            clear_empty_string(&mut network.adapter_model);
            clear_empty_string(&mut network.firmware_version);
            clear_zero(&mut network.link_speed_gbps);
            clear_zero(&mut network.adapters_per_gpu);
        }
    }
    if let Some(software) = spec.software.as_mut() {
        clear_empty_string(&mut software.driver_version);
        clear_empty_string(&mut software.nvml_version);
        clear_empty_string(&mut software.cuda_version);
    }
    if let Some(runtime) = spec
        .defaults
        .as_mut()
        .and_then(|defaults| defaults.runtime.as_mut())
        && let Some(telemetry) = runtime.telemetry.as_mut()
    {
        clear_empty_string(&mut telemetry.performance_state);
    }
}

/// Writes every Quantity of the spec in apimachinery's canonical form, as Go
/// encodes a parsed `resource.Quantity` (a text that is not a quantity,
/// which the CRD pattern rejects, is kept as written).
fn canonicalize_quantities(spec: &mut SGPURackProfileSpec) {
    let memory = &mut spec.node.gpus.memory;
    let host = spec
        .node
        .host
        .as_mut()
        .and_then(|host| host.memory.as_mut())
        .map(|memory| &mut memory.capacity);
    let quantities = [
        Some(&mut memory.capacity),
        memory.reserved.as_mut(),
        memory.bar1_capacity.as_mut(),
        host,
    ];
    for quantity in quantities.into_iter().flatten() {
        if let Some(canonical) = crate::quantity::canonical(&quantity.0) {
            quantity.0 = canonical;
        }
    }
}

fn clear_empty_string(value: &mut Option<String>) {
    if value.as_deref() == Some("") {
        *value = None;
    }
}

fn clear_zero<T: Default + PartialEq>(value: &mut Option<T>) {
    if value.as_ref() == Some(&T::default()) {
        *value = None;
    }
}

fn clear_false(value: &mut Option<bool>) {
    if *value == Some(false) {
        *value = None;
    }
}

fn clear_empty_list<T>(value: &mut Option<Vec<T>>) {
    if value.as_ref().is_some_and(Vec::is_empty) {
        *value = None;
    }
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
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::api::*;
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

    /// The profile of upstream's rack-render tests (`validProfile`), with
    /// its two slots' NUMA node and host processor written as upstream's
    /// literal writes them (0 and 1).
    pub(crate) fn upstream_test_profile_spec() -> SGPURackProfileSpec {
        let slot = |index: i32, bus: &str| GpuSlot {
            index,
            pci_address: format!("0000:{bus}:00.0"),
            root_complex: "pci0000:00".into(),
            numa_node: Some(index),
            host_processor_index: Some(index),
        };
        SGPURackProfileSpec {
            rack: RackShape { nodes_per_rack: 2 },
            node: NodeShape {
                gpus: GpuSpec {
                    count: 2,
                    model: GpuModel::default(),
                    // Go's zero Quantity encodes as "0".
                    memory: GpuMemory {
                        capacity: Quantity("0".into()),
                        reserved: None,
                        bar1_capacity: None,
                        bus_width_bits: None,
                    },
                    pci: GpuPci::default(),
                    power: None,
                    thermal: None,
                    clocks: None,
                    capabilities: Some(GpuCapabilities::default()),
                },
                host: None,
                topology: Some(NodeTopology {
                    gpu_slots: vec![slot(0, "01"), slot(1, "02")],
                    gpu_fabric: Some(GpuFabric {
                        fabric_type: Some("NVLink".into()),
                        generation: Some(5),
                        links_per_gpu: Some(18),
                        bandwidth_per_link_mbps: Some(50000),
                        c2c_supported: None,
                        domain: Some(FabricDomain {
                            scope: Some(FabricScope::Rack),
                            gpu_count: Some(4),
                        }),
                        switches: None,
                    }),
                    network: Some(NetworkTopology {
                        network_type: Some("InfiniBand".into()),
                        adapter_model: Some("ConnectX".into()),
                        firmware_version: Some("1.0".into()),
                        link_speed_gbps: Some(400),
                        adapters_per_gpu: Some(1),
                    }),
                }),
            },
            software: Some(SoftwareSpec {
                driver_version: Some("580.1".into()),
                nvml_version: Some("13".into()),
                cuda_version: Some("13.1".into()),
            }),
            defaults: None,
        }
    }

    /// Upstream revision vector of `TestRenderRack`.
    pub(crate) const UPSTREAM_TEST_PROFILE_REVISION: &str =
        "227fe4d76d124cd5f9ddf14866fca0d466d904ab1716f7320bc5c83add9a8de8";

    #[test]
    fn the_revision_matches_upstreams_vectors_with_omitempty_zeros_left_out() {
        // Upstream rule: the revision is SHA-256 over Go's encoding/json of
        // the spec, where omitempty drops numaNode: 0 and hostProcessorIndex: 0
        // of slot 0 although the profile writes them.
        let spec = upstream_test_profile_spec();
        let text = String::from_utf8(canonical_profile_json(&spec).unwrap()).unwrap();
        assert!(
            text.contains(r#"{"index":0,"pciAddress":"0000:01:00.0","rootComplex":"pci0000:00"},"#),
            "{text}"
        );
        assert!(
            text.contains(r#""numaNode":1,"hostProcessorIndex":1}"#),
            "{text}"
        );
        assert_eq!(
            profile_revision(&spec).unwrap(),
            UPSTREAM_TEST_PROFILE_REVISION
        );

        // Upstream TestProfileRevisionCanonicalVector: attribute string sets
        // sorted, map keys sorted.
        let mut with_attributes = spec.clone();
        let attributes = BTreeMap::from([
            (
                "zeta".to_string(),
                CapabilityAttribute {
                    strings: Some(vec!["two".into(), "one".into()]),
                    ..Default::default()
                },
            ),
            (
                "alpha".to_string(),
                CapabilityAttribute {
                    strings: Some(vec!["yes".into()]),
                    ..Default::default()
                },
            ),
        ]);
        with_attributes.node.gpus.capabilities = Some(GpuCapabilities {
            mig: None,
            attributes: Some(attributes),
        });
        assert_eq!(
            profile_revision(&with_attributes).unwrap(),
            "70b035e15002657884cebea9c76251dc1dc9dd31faa3917c9a7e92c7c34fe6ad"
        );
    }

    #[test]
    fn zeros_written_out_have_the_revision_of_the_profile_without_them() {
        // Upstream rule: Go's omitempty cannot tell an explicit zero from an
        // absent field, so every non-pointer optional field of the profile
        // spec hashes the same written as 0 / false / "" / [] / {} or left out.
        let bare = upstream_test_profile_spec();
        let mut zeros = bare.clone();
        let gpus = &mut zeros.node.gpus;
        gpus.model = GpuModel {
            vendor: Some(String::new()),
            product: Some(String::new()),
            product_name: Some(String::new()),
            architecture: Some(String::new()),
            compute_capability: None,
            cores: None,
            board: None,
            firmware: None,
        };
        gpus.memory.bus_width_bits = Some(0);
        gpus.pci = GpuPci {
            vendor_id: Some(String::new()),
            device_id: Some(String::new()),
            subsystem_vendor_id: Some(String::new()),
            subsystem_device_id: Some(String::new()),
            max_link: None,
        };
        gpus.capabilities = Some(GpuCapabilities {
            mig: None,
            attributes: Some(BTreeMap::new()),
        });
        let topology = zeros.node.topology.as_mut().unwrap();
        let fabric = topology.gpu_fabric.as_mut().unwrap();
        fabric.c2c_supported = Some(false);
        assert_eq!(
            profile_revision(&zeros).unwrap(),
            UPSTREAM_TEST_PROFILE_REVISION
        );

        // Slot 0 of the vector writes numaNode: 0, hostProcessorIndex: 0;
        // leaving them out is the same profile.
        let mut omitted = bare.clone();
        let slot = &mut omitted.node.topology.as_mut().unwrap().gpu_slots[0];
        slot.numa_node = None;
        slot.host_processor_index = None;
        assert_eq!(
            profile_revision(&omitted).unwrap(),
            UPSTREAM_TEST_PROFILE_REVISION
        );

        // Every other omitempty field, in nested objects that are present
        // (a present pointer object still encodes, as `{}`).
        let nested = |zero: bool| {
            let mut spec = bare.clone();
            let z = || zero.then_some(0);
            let gpus = &mut spec.node.gpus;
            gpus.model.cores = Some(GpuCores { cuda: z() });
            gpus.model.board = Some(GpuBoard {
                part_number: zero.then(String::new),
            });
            gpus.model.firmware = Some(GpuFirmware {
                vbios_version: zero.then(String::new),
                gsp_version: zero.then(String::new),
                info_rom: Some(GpuInfoRom {
                    image_version: zero.then(String::new),
                    oem_object_version: zero.then(String::new),
                    ecc_object_version: zero.then(String::new),
                    power_object_version: zero.then(String::new),
                }),
            });
            gpus.pci.max_link = Some(PciLink {
                generation: z(),
                width: z(),
            });
            gpus.power = Some(GpuPower {
                management_supported: zero.then_some(false),
                limits_milli_watts: Some(PowerLimits {
                    minimum: zero.then_some(0),
                    default: zero.then_some(0),
                    maximum: zero.then_some(0),
                }),
            });
            gpus.thermal = Some(GpuThermal {
                target_celsius: z(),
                max_operating_celsius: z(),
                slowdown_threshold_celsius: z(),
                shutdown_threshold_celsius: z(),
            });
            gpus.clocks = Some(GpuClocks {
                maximum_mhz: Some(MaximumClocks {
                    graphics: z(),
                    sm: z(),
                    memory: z(),
                    video: z(),
                }),
                supported: zero.then(Vec::new),
            });
            gpus.capabilities = Some(GpuCapabilities {
                mig: Some(MigCapability {
                    supported: zero.then_some(false),
                    max_gpu_instances: z(),
                }),
                attributes: Some(BTreeMap::from([(
                    "example.com/flag".to_string(),
                    CapabilityAttribute {
                        bool: Some(true),
                        string: zero.then(String::new),
                        strings: zero.then(Vec::new),
                        ..Default::default()
                    },
                )])),
            });
            spec.node.host = Some(HostSpec {
                cpu: Some(HostCpu {
                    vendor: zero.then(String::new),
                    product: zero.then(String::new),
                    architecture: zero.then(String::new),
                    cores: z(),
                }),
                memory: Some(HostMemory {
                    capacity: Quantity("512Gi".into()),
                    coherent_with_gpu: zero.then_some(false),
                }),
            });
            let topology = spec.node.topology.as_mut().unwrap();
            let fabric = topology.gpu_fabric.as_mut().unwrap();
            fabric.switches = Some(FabricSwitches {
                visible_per_node: z(),
            });
            spec.software.as_mut().unwrap().driver_version = Some("580.1".into());
            spec.defaults = Some(ProfileDefaults {
                runtime: Some(RuntimeState {
                    telemetry: Some(crate::api::RuntimeTelemetry {
                        performance_state: zero.then(String::new),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            });
            spec
        };
        assert_ne!(nested(true), nested(false));
        assert_eq!(
            profile_revision(&nested(true)).unwrap(),
            profile_revision(&nested(false)).unwrap()
        );
        // Network and software strings, and the fabric's numbers, also
        // vanish when zero (the profile is then invalid, but still hashes).
        let mut empty_strings = bare.clone();
        empty_strings.software = Some(SoftwareSpec {
            driver_version: Some(String::new()),
            nvml_version: Some(String::new()),
            cuda_version: Some(String::new()),
        });
        let topology = empty_strings.node.topology.as_mut().unwrap();
        *topology.network.as_mut().unwrap() = NetworkTopology {
            network_type: Some(String::new()),
            adapter_model: Some(String::new()),
            firmware_version: Some(String::new()),
            link_speed_gbps: Some(0),
            adapters_per_gpu: Some(0),
        };
        *topology.gpu_fabric.as_mut().unwrap() = GpuFabric {
            fabric_type: Some(String::new()),
            generation: Some(0),
            links_per_gpu: Some(0),
            bandwidth_per_link_mbps: Some(0),
            c2c_supported: Some(false),
            domain: Some(FabricDomain {
                scope: None,
                gpu_count: Some(0),
            }),
            switches: None,
        };
        let text = String::from_utf8(canonical_profile_json(&empty_strings).unwrap()).unwrap();
        assert!(
            text.contains(r#""gpuFabric":{"domain":{}},"network":{}}},"software":{}}"#),
            "{text}"
        );
    }

    #[test]
    fn quantities_are_hashed_in_their_canonical_form_like_go() {
        // Upstream: Go encodes a parsed resource.Quantity canonically, so
        // `1024Mi` and `1Gi` are the same profile content.
        let with_capacity = |capacity: &str, reserved: &str| {
            let mut spec = upstream_test_profile_spec();
            spec.node.gpus.memory.capacity = Quantity(capacity.into());
            spec.node.gpus.memory.reserved = Some(Quantity(reserved.into()));
            spec.node.host = Some(HostSpec {
                cpu: None,
                memory: Some(HostMemory {
                    capacity: Quantity(capacity.into()),
                    coherent_with_gpu: None,
                }),
            });
            profile_revision(&spec).unwrap()
        };
        assert_eq!(
            with_capacity("1Gi", "1Mi"),
            with_capacity("1024Mi", "1024Ki")
        );
        assert_eq!(with_capacity("512Mi", "1k"), with_capacity("0.5Gi", "1000"));
        assert_ne!(with_capacity("1Gi", "1Mi"), with_capacity("1G", "1Mi"));
        // The zero Quantity of upstream's vector profile is "0" either way.
        let mut zero = upstream_test_profile_spec();
        zero.node.gpus.memory.capacity = Quantity("0Gi".into());
        assert_eq!(
            profile_revision(&zero).unwrap(),
            UPSTREAM_TEST_PROFILE_REVISION
        );
    }

    #[test]
    fn pointer_fields_keep_an_explicit_zero_like_go() {
        // Upstream: the capability `bool`/`int` and every runtime-default
        // number are pointers, so an explicit zero is content.
        let bare = upstream_test_profile_spec();
        let with_attribute = |attribute: CapabilityAttribute| {
            let mut spec = bare.clone();
            spec.node.gpus.capabilities = Some(GpuCapabilities {
                mig: None,
                attributes: Some(BTreeMap::from([("a".to_string(), attribute)])),
            });
            profile_revision(&spec).unwrap()
        };
        let empty = with_attribute(CapabilityAttribute::default());
        assert_ne!(
            with_attribute(CapabilityAttribute {
                bool: Some(false),
                ..Default::default()
            }),
            empty
        );
        assert_ne!(
            with_attribute(CapabilityAttribute {
                int: Some(0),
                ..Default::default()
            }),
            empty
        );
        let with_draw = |draw: Option<i64>| {
            let mut spec = bare.clone();
            spec.defaults = Some(ProfileDefaults {
                runtime: Some(RuntimeState {
                    telemetry: Some(crate::api::RuntimeTelemetry {
                        power: Some(crate::api::PowerTelemetry {
                            mode: None,
                            draw_milli_watts: draw,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            });
            profile_revision(&spec).unwrap()
        };
        assert_ne!(with_draw(Some(0)), with_draw(None));
    }

    #[test]
    fn a_profile_without_topology_has_no_revision_with_upstreams_error() {
        // Upstream TestRevisionFunctionsRejectProfileWithoutTopology.
        let mut spec = upstream_test_profile_spec();
        spec.node.topology = None;
        assert_eq!(
            canonical_profile_json(&spec).unwrap_err().to_string(),
            "node.topology must be set"
        );
        assert_eq!(
            profile_revision(&spec).unwrap_err().to_string(),
            "marshal canonical profile: node.topology must be set"
        );
    }

    #[test]
    fn slot_checks_run_slot_by_slot_in_listed_order_like_upstream() {
        // Upstream ValidateProfile walks the slots as listed: index, PCI
        // address, root complex, duplicate address, then the next slot. A
        // later slot's bad index does not hide an earlier slot's address.
        let bad_address_then_bad_index = with(|spec| {
            let slots = &mut spec.node.topology.as_mut().unwrap().gpu_slots;
            slots[0].pci_address = "bad".into();
            slots[3].index = 9;
        });
        assert_eq!(
            message(&bad_address_then_bad_index),
            "gpuSlots PCI address \"bad\" is not canonical"
        );
        let bad_index_then_bad_address = with(|spec| {
            let slots = &mut spec.node.topology.as_mut().unwrap().gpu_slots;
            slots[0].index = 9;
            slots[3].pci_address = "bad".into();
        });
        assert_eq!(
            message(&bad_index_then_bad_address),
            "gpuSlots indexes must be unique and contiguous from zero"
        );
        // A repeated address is reported at the repeating slot, before a
        // later slot's bad root complex.
        let duplicate_then_bad_root = with(|spec| {
            let slots = &mut spec.node.topology.as_mut().unwrap().gpu_slots;
            slots[1].pci_address = slots[0].pci_address.clone();
            slots[2].root_complex = "bad".into();
        });
        assert_eq!(
            message(&duplicate_then_bad_root),
            "gpuSlots PCI addresses must be unique"
        );
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
