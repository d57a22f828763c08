//! A Node's Mokka assignment and each of its GPUs' effective runtime, as
//! the device plugin reports them.
//!
//! Shared by the sandbox's device plugin (what nvidia-smi reports) and the
//! fleet view (what the page shows), so the two never disagree.
//!
//! The one place the sandbox asks "what did Mokka assign to this Node and
//! what runtime state does each GPU have". Issue #14 added the cached read
//! API (`assignments_for_node` and `effective_runtime` on
//! `mokka::controller::MokkaController`, with upstream's error values);
//! [`node_assignment`] could call it instead of evaluating the policies
//! itself here, but does not yet: it uses the pure core,
//! `mokka::policy::Evaluation`, which is what that API is built on.

use std::collections::BTreeMap;

use mokka::api::{
    DeviceState, RuntimeState, SGPUInventory, SGPURack, SGPURackProfile, SGPURuntimePolicy,
    TargetKind,
};
use mokka::policy::{Evaluation, EvaluationInput, GpuCoordinate};

/// What one Node was given: its rack slot and the GPUs in it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeAssignment {
    pub rack_name: String,
    pub rack_group: String,
    pub rack_index: i32,
    pub node_index: i32,
    pub fabric_uuid: String,
    pub clique_id: i32,
    pub profile_name: String,
    /// In GPU index order.
    pub gpus: Vec<AssignedGpu>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AssignedGpu {
    pub index: i32,
    pub uuid: String,
    pub serial: String,
    pub minor_number: i32,
    pub pci_address: String,
    pub runtime: RuntimeState,
}

/// The inputs, borrowed from wherever the caller keeps them (the
/// sandbox's watch caches).
#[derive(Clone, Copy)]
pub struct Inputs<'a> {
    pub racks: &'a [std::sync::Arc<SGPURack>],
    pub inventories: &'a [std::sync::Arc<SGPUInventory>],
    pub profiles: &'a BTreeMap<String, SGPURackProfile>,
    pub policies: &'a [std::sync::Arc<SGPURuntimePolicy>],
}

/// Why a bound Node's runtime cannot be told.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("rack {rack}: its inventory {inventory} is not in the cache")]
    InventoryMissing { rack: String, inventory: String },
    #[error("inventory {inventory}: {message}")]
    Evaluation { inventory: String, message: String },
}

/// The assignment of Node (`name`, `uid`), or None when no rack slot is
/// bound to exactly that Node.
pub fn node_assignment(
    inputs: Inputs<'_>,
    name: &str,
    uid: &str,
) -> Result<Option<NodeAssignment>, RuntimeError> {
    let bound = inputs.racks.iter().find_map(|rack| {
        rack.spec
            .nodes
            .iter()
            .find(|slot| slot.bound_to(name, uid))
            .map(|slot| (rack, slot))
    });
    let Some((rack, slot)) = bound else {
        return Ok(None);
    };
    let rack_name = rack.metadata.name.clone().unwrap_or_default();
    let inventory_name = &rack.spec.inventory_ref.name;
    let inventory = inputs
        .inventories
        .iter()
        .find(|inventory| inventory.metadata.name.as_deref() == Some(inventory_name.as_str()))
        .ok_or_else(|| RuntimeError::InventoryMissing {
            rack: rack_name.clone(),
            inventory: inventory_name.clone(),
        })?;
    let policies: Vec<SGPURuntimePolicy> = inputs
        .policies
        .iter()
        .filter(|policy| {
            policy.spec.target_ref.kind == TargetKind::SgpuInventory
                && policy.spec.target_ref.name == *inventory_name
        })
        .map(|policy| (**policy).clone())
        .collect();
    let evaluation = Evaluation::new(EvaluationInput {
        inventory_name,
        inventory: Some(inventory),
        profiles: inputs.profiles,
        policies: &policies,
    })
    .map_err(|error| RuntimeError::Evaluation {
        inventory: inventory_name.clone(),
        message: error.to_string(),
    })?;
    let defaults = inputs
        .profiles
        .get(&rack.spec.profile_ref.name)
        .and_then(|profile| profile.spec.defaults.as_ref())
        .and_then(|defaults| defaults.runtime.as_ref());
    let identity = &rack.spec.identity;
    let mut gpus: Vec<AssignedGpu> = slot
        .gpus
        .iter()
        .map(|gpu| AssignedGpu {
            index: gpu.index,
            uuid: gpu.uuid.clone(),
            serial: gpu.serial.clone(),
            minor_number: gpu.minor_number,
            pci_address: gpu.pci_address.clone(),
            runtime: evaluation.runtime(
                defaults,
                GpuCoordinate {
                    group: &identity.rack_group,
                    rack: identity.rack_index,
                    node: slot.index,
                    gpu: gpu.index,
                },
            ),
        })
        .collect();
    gpus.sort_by_key(|gpu| gpu.index);
    Ok(Some(NodeAssignment {
        rack_name,
        rack_group: identity.rack_group.clone(),
        rack_index: identity.rack_index,
        node_index: slot.index,
        fabric_uuid: identity.fabric_uuid.clone(),
        clique_id: identity.clique_id,
        profile_name: rack.spec.profile_ref.name.clone(),
        gpus,
    }))
}

/// The rack's chassis serial: 13 decimal digits from its fabric UUID.
pub fn chassis_serial(fabric_uuid: &str) -> String {
    let digits: u64 = fabric_uuid
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(15)
        .fold(0u64, |value, c| {
            value * 16 + u64::from(c.to_digit(16).unwrap_or(0))
        });
    format!("{:013}", digits % 10_000_000_000_000)
}

/// The device state a runtime says (Healthy when it says nothing).
pub fn device_state(runtime: &RuntimeState) -> DeviceState {
    runtime.device_state.unwrap_or(DeviceState::Healthy)
}

/// The GPU temperature a runtime says, if any.
pub fn gpu_celsius(runtime: &RuntimeState) -> Option<i32> {
    runtime
        .telemetry
        .as_ref()
        .and_then(|telemetry| telemetry.temperature.as_ref())
        .and_then(|temperature| temperature.gpu_celsius)
}
