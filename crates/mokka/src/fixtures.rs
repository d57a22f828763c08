//! Example objects for tests, benchmarks and demos. They follow the upstream
//! example manifests (`manifests/*.yaml` in this crate) and are built in code
//! so that dimensions can vary.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::*;

/// The upstream example profile manifest (an A100 rack of 2 Nodes).
pub const EXAMPLE_PROFILE_YAML: &str = include_str!("../manifests/sgpu-rack-profile.yaml");
/// The upstream example inventory manifest (training and inference groups).
pub const EXAMPLE_INVENTORY_YAML: &str = include_str!("../manifests/sgpu-inventory.yaml");
/// The upstream example rack manifest (illustrative identities).
pub const EXAMPLE_RACK_YAML: &str = include_str!("../manifests/sgpu-rack.yaml");
/// The upstream example runtime policy manifest.
pub const EXAMPLE_POLICY_YAML: &str = include_str!("../manifests/sgpu-runtime-policy.yaml");

/// A valid profile spec with `nodes_per_rack` Nodes of `gpus` GPUs each,
/// with fabric, network, clocks, capability attributes and runtime defaults
/// filled in like the upstream example.
pub fn example_profile_spec(nodes_per_rack: i32, gpus: i32) -> SGPURackProfileSpec {
    let slots = (0..gpus.max(0))
        .map(|index| GpuSlot {
            index,
            pci_address: format!("{:04x}:{:02x}:00.0", index / 8, index % 256 + 1),
            root_complex: format!("pci{:04x}:{:02x}", index / 8, index % 8),
            numa_node: Some(index / 32),
            host_processor_index: Some(index / 32),
        })
        .collect();
    let mut attributes = BTreeMap::new();
    attributes.insert(
        "nvidia.com/features".to_string(),
        CapabilityAttribute {
            strings: Some(vec!["nvlink".into(), "mig".into(), "c2c".into()]),
            ..Default::default()
        },
    );
    attributes.insert(
        "nvidia.com/sm-count".to_string(),
        CapabilityAttribute {
            int: Some(108),
            ..Default::default()
        },
    );
    SGPURackProfileSpec {
        rack: RackShape { nodes_per_rack },
        node: NodeShape {
            gpus: GpuSpec {
                count: gpus,
                model: GpuModel {
                    vendor: Some("NVIDIA".into()),
                    product: Some("A100-SXM4-40GB".into()),
                    product_name: Some("NVIDIA A100-SXM4-40GB".into()),
                    architecture: Some("Ampere".into()),
                    compute_capability: Some(ComputeCapability { major: 8, minor: 0 }),
                    cores: Some(GpuCores { cuda: Some(6912) }),
                    board: None,
                    firmware: None,
                },
                memory: GpuMemory {
                    capacity: Quantity("40Gi".into()),
                    reserved: Some(Quantity("1Mi".into())),
                    bar1_capacity: Some(Quantity("32Gi".into())),
                    bus_width_bits: Some(5120),
                },
                pci: GpuPci {
                    vendor_id: Some("10de".into()),
                    device_id: Some("20b0".into()),
                    subsystem_vendor_id: Some("10de".into()),
                    subsystem_device_id: Some("134f".into()),
                    max_link: Some(PciLink {
                        generation: Some(4),
                        width: Some(16),
                    }),
                },
                power: Some(GpuPower {
                    management_supported: Some(true),
                    limits_milli_watts: Some(PowerLimits {
                        minimum: Some(100_000),
                        default: Some(400_000),
                        maximum: Some(400_000),
                    }),
                }),
                thermal: Some(GpuThermal {
                    target_celsius: Some(83),
                    max_operating_celsius: Some(87),
                    slowdown_threshold_celsius: Some(90),
                    shutdown_threshold_celsius: Some(92),
                }),
                clocks: Some(GpuClocks {
                    maximum_mhz: Some(MaximumClocks {
                        graphics: Some(1410),
                        sm: Some(1410),
                        memory: Some(1215),
                        video: Some(1290),
                    }),
                    supported: Some(vec![SupportedClocks {
                        memory_mhz: 1215,
                        graphics_mhz: vec![1095, 1215, 1410],
                    }]),
                }),
                capabilities: Some(GpuCapabilities {
                    mig: Some(MigCapability {
                        supported: Some(true),
                        max_gpu_instances: Some(7),
                    }),
                    attributes: Some(attributes),
                }),
            },
            host: None,
            topology: Some(NodeTopology {
                gpu_slots: slots,
                gpu_fabric: Some(GpuFabric {
                    fabric_type: Some("NVLink".into()),
                    generation: Some(3),
                    links_per_gpu: Some(12),
                    bandwidth_per_link_mbps: Some(25_000),
                    c2c_supported: Some(false),
                    domain: Some(FabricDomain {
                        scope: Some(FabricScope::Rack),
                        gpu_count: Some(nodes_per_rack.saturating_mul(gpus)),
                    }),
                    switches: Some(FabricSwitches {
                        visible_per_node: Some(1),
                    }),
                }),
                network: Some(NetworkTopology {
                    network_type: Some("InfiniBand".into()),
                    adapter_model: Some("ConnectX-7".into()),
                    firmware_version: Some("28.43.1014".into()),
                    link_speed_gbps: Some(400),
                    adapters_per_gpu: Some(1),
                }),
            }),
        },
        software: Some(SoftwareSpec {
            driver_version: Some("580.65.06".into()),
            nvml_version: Some("13.0".into()),
            cuda_version: Some("13.0".into()),
        }),
        defaults: Some(ProfileDefaults {
            runtime: Some(example_default_runtime()),
        }),
    }
}

/// The runtime defaults of the upstream example profile.
pub fn example_default_runtime() -> RuntimeState {
    RuntimeState {
        device_state: Some(DeviceState::Healthy),
        modes: Some(RuntimeModes {
            persistence: Some(Toggle::Enabled),
            compute: Some(ComputeMode::Default),
            mig: Some(Toggle::Disabled),
            ecc: Some(Toggle::Enabled),
            accounting: Some(Toggle::Disabled),
        }),
        telemetry: Some(RuntimeTelemetry {
            performance_state: Some("P0".into()),
            temperature: Some(TemperatureTelemetry {
                mode: Some(ValueMode::Fixed),
                gpu_celsius: Some(38),
                memory_celsius: Some(36),
            }),
            power: Some(PowerTelemetry {
                mode: Some(ValueMode::Fixed),
                draw_milli_watts: Some(175_000),
            }),
            ..Default::default()
        }),
    }
}

/// A profile object with name, UID and generation set (as the API server
/// would), so it can be rendered.
pub fn example_profile(name: &str, uid: &str, nodes_per_rack: i32, gpus: i32) -> SGPURackProfile {
    let mut profile = SGPURackProfile::new(name, example_profile_spec(nodes_per_rack, gpus));
    profile.metadata.uid = Some(uid.to_string());
    profile.metadata.generation = Some(1);
    profile
}

/// A GB300 NVL72-shaped profile: 18 Nodes of 4 GPUs per rack.
pub fn gb300_nvl72_profile(name: &str, uid: &str) -> SGPURackProfile {
    example_profile(name, uid, 18, 4)
}

/// Object metadata with name, UID and an RFC 3339 creation timestamp.
pub fn metadata(name: &str, uid: &str, created: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        creation_timestamp: jiff_free_time(created),
        generation: Some(1),
        ..Default::default()
    }
}

/// Parses an RFC 3339 timestamp through k8s-openapi's own `Time` decoding, so
/// fixtures need no extra time crate.
fn jiff_free_time(created: &str) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    serde_json::from_value(serde_json::Value::String(created.to_string())).ok()
}
