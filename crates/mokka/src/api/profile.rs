//! `SGPURackProfile`: the admin-owned, static shape of a rack.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::runtime::RuntimeState;

/// The shape of one simulated GPU rack: Nodes per rack, GPUs per Node, and
/// the static GPU, host, topology and software description they share.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mokka.nvidia.com",
    version = "v1alpha1",
    kind = "SGPURackProfile",
    plural = "sgpurackprofiles",
    shortname = "srprof",
    category = "mokka",
    doc = "Static shape of a simulated GPU rack (admin-owned).",
    annotation("helm.sh/resource-policy", "keep"),
    printcolumn(
        name = "Nodes/Rack",
        type_ = "integer",
        json_path = ".spec.rack.nodesPerRack"
    ),
    printcolumn(
        name = "GPUs/Node",
        type_ = "integer",
        json_path = ".spec.node.gpus.count"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SGPURackProfileSpec {
    pub rack: RackShape,
    pub node: NodeShape,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software: Option<SoftwareSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<ProfileDefaults>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RackShape {
    #[schemars(range(min = 1, max = 1024))]
    pub nodes_per_rack: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "size(self.topology.gpuSlots) == self.gpus.count && self.topology.gpuSlots.all(slot, slot.index < self.gpus.count)",
    "message": "topology.gpuSlots must contain one slot per GPU with indexes in range"
}]))]
pub struct NodeShape {
    pub gpus: GpuSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostSpec>,
    /// Required by the CRD. It stays an `Option` in Rust so a profile read
    /// from elsewhere without it reaches `validate_profile`, which names it.
    #[schemars(required)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<NodeTopology>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuSpec {
    #[schemars(range(min = 1, max = 64))]
    pub count: i32,
    pub model: GpuModel,
    pub memory: GpuMemory,
    pub pci: GpuPci,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<GpuPower>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thermal: Option<GpuThermal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks: Option<GpuClocks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<GpuCapabilities>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuModel {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<ComputeCapability>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<GpuCores>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board: Option<GpuBoard>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<GpuFirmware>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ComputeCapability {
    pub major: i32,
    pub minor: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct GpuCores {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuBoard {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_number: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuFirmware {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vbios_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gsp_version: Option<String>,
    #[serde(default, rename = "infoROM", skip_serializing_if = "Option::is_none")]
    pub info_rom: Option<GpuInfoRom>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuInfoRom {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oem_object_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_object_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_object_version: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuMemory {
    pub capacity: Quantity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar1_capacity: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_width_bits: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct GpuPci {
    #[serde(default, rename = "vendorID", skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<String>,
    #[serde(default, rename = "deviceID", skip_serializing_if = "Option::is_none")]
    pub device_id: Option<String>,
    #[serde(
        default,
        rename = "subsystemVendorID",
        skip_serializing_if = "Option::is_none"
    )]
    pub subsystem_vendor_id: Option<String>,
    #[serde(
        default,
        rename = "subsystemDeviceID",
        skip_serializing_if = "Option::is_none"
    )]
    pub subsystem_device_id: Option<String>,
    #[serde(default, rename = "maxLink", skip_serializing_if = "Option::is_none")]
    pub max_link: Option<PciLink>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PciLink {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuPower {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub management_supported: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits_milli_watts: Option<PowerLimits>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PowerLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuThermal {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_celsius: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_operating_celsius: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_threshold_celsius: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_threshold_celsius: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct GpuClocks {
    #[serde(
        default,
        rename = "maximumMHz",
        skip_serializing_if = "Option::is_none"
    )]
    pub maximum_mhz: Option<MaximumClocks>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported: Option<Vec<SupportedClocks>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MaximumClocks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graphics: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub video: Option<i32>,
}

/// One supported memory clock and the graphics clocks allowed with it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct SupportedClocks {
    #[serde(rename = "memoryMHz")]
    pub memory_mhz: i32,
    #[serde(rename = "graphicsMHz")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub graphics_mhz: Vec<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct GpuCapabilities {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigCapability>,
    /// Qualified attribute name to value. Set exactly one of the value fields.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributes: Option<BTreeMap<String, CapabilityAttribute>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MigCapability {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported: Option<bool>,
    #[serde(
        default,
        rename = "maxGPUInstances",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_gpu_instances: Option<i32>,
}

/// A typed capability value; exactly one field is meant to be set (not
/// enforced, as upstream).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct CapabilityAttribute {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bool: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub strings: Option<Vec<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct HostSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<HostCpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<HostMemory>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct HostCpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostMemory {
    pub capacity: Quantity,
    #[serde(
        default,
        rename = "coherentWithGPU",
        skip_serializing_if = "Option::is_none"
    )]
    pub coherent_with_gpu: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTopology {
    #[schemars(length(min = 1, max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["index"]))]
    pub gpu_slots: Vec<GpuSlot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_fabric: Option<GpuFabric>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkTopology>,
}

/// Where one GPU of a Node sits on the host's PCI tree.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuSlot {
    #[schemars(range(min = 0, max = 63))]
    pub index: i32,
    #[schemars(regex(pattern = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"))]
    pub pci_address: String,
    #[schemars(regex(pattern = r"^pci[0-9a-f]{4}:[0-9a-f]{2}$"))]
    pub root_complex: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_processor_index: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct GpuFabric {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub fabric_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i32>,
    #[serde(
        default,
        rename = "linksPerGPU",
        skip_serializing_if = "Option::is_none"
    )]
    pub links_per_gpu: Option<i32>,
    #[serde(
        default,
        rename = "bandwidthPerLinkMBps",
        skip_serializing_if = "Option::is_none"
    )]
    pub bandwidth_per_link_mbps: Option<i32>,
    #[serde(
        default,
        rename = "c2cSupported",
        skip_serializing_if = "Option::is_none"
    )]
    pub c2c_supported: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<FabricDomain>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switches: Option<FabricSwitches>,
}

/// How far the GPU fabric reaches.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum FabricScope {
    Node,
    Rack,
    Cluster,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FabricDomain {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<FabricScope>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_count: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FabricSwitches {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_per_node: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NetworkTopology {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub network_type: Option<String>,
    #[serde(
        default,
        rename = "adapterModel",
        skip_serializing_if = "Option::is_none"
    )]
    pub adapter_model: Option<String>,
    #[serde(
        default,
        rename = "firmwareVersion",
        skip_serializing_if = "Option::is_none"
    )]
    pub firmware_version: Option<String>,
    #[serde(
        default,
        rename = "linkSpeedGbps",
        skip_serializing_if = "Option::is_none"
    )]
    pub link_speed_gbps: Option<i32>,
    #[serde(
        default,
        rename = "adaptersPerGPU",
        skip_serializing_if = "Option::is_none"
    )]
    pub adapters_per_gpu: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SoftwareSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvml_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_version: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ProfileDefaults {
    /// Initial runtime state of every GPU the profile renders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeState>,
}
