//! `nvidia-smi -q -x` as a simulated GPU Node's device plugin answers it:
//! the identities Mokka rendered for the Node's rack slot and the state
//! its effective runtime says. Pure: the assignment, the profile and the
//! timestamp come in, the document goes out.
//!
//! The layout follows real GB200/GB300 captures (DTD v13; gpuid's tests
//! read one, `crates/gpuid/tests/fixtures/hardware/gb200.xml`), cut down
//! to the sections a reader of identity and health looks at. Where Mokka
//! has no value of its own the sandbox chooses one, deterministically
//! (documented in `docs/sandbox.md`):
//!
//! * chassis serial: the NVL72 rack's, 13 decimal digits taken from the
//!   rack's fabric UUID, so every Node of a rack reports the same one;
//! * module id: GPU index + 1 (NVML numbers the GPUs of a tray from 1);
//! * slot number and tray index: the Node's index in the rack;
//! * a `Failed` GPU is reported as nvidia-smi reports a lost GPU (`GPU is
//!   lost` in place of its memory, utilisation, temperature and power);
//!   a `Degraded` GPU has an unhealthy NVLink route.

use std::fmt::Write;

use mokka::api::{DeviceState, SGPURackProfile, Toggle};

use crate::fleet_view::runtime::{AssignedGpu, NodeAssignment};
pub use crate::fleet_view::runtime::{chassis_serial, device_state, gpu_celsius};

/// What nvidia-smi prints for values of a GPU that fell off the bus.
pub const LOST: &str = "GPU is lost";

/// nvidia-smi's 8-hex-digit PCI domain: `0000:01:00.0` → `00000000:01:00.0`.
pub fn smi_bus_id(pci_address: &str) -> String {
    match pci_address.split_once(':') {
        Some((domain, rest)) if domain.len() < 8 => format!("{domain:0>8}:{rest}").to_uppercase(),
        _ => pci_address.to_uppercase(),
    }
}

/// NVML's module id of a GPU.
pub fn module_id(gpu_index: i32) -> i32 {
    gpu_index + 1
}

/// A memory quantity ("288Gi", "40Gi", "1048576Ki", bytes) in MiB.
pub fn quantity_mib(quantity: &str) -> Option<u64> {
    let text = quantity.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: u64 = number.parse().ok()?;
    let bytes_per_unit: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    number.checked_mul(bytes_per_unit).map(|bytes| bytes >> 20)
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

fn toggle(value: Option<Toggle>, default: &'static str) -> &'static str {
    match value {
        Some(Toggle::Enabled) => "Enabled",
        Some(Toggle::Disabled) => "Disabled",
        None => default,
    }
}

/// The whole document for one Node. `timestamp` is nvidia-smi's own
/// format (`Fri Aug 14 10:16:52 2026`).
pub fn render(assignment: &NodeAssignment, profile: &SGPURackProfile, timestamp: &str) -> String {
    let spec = &profile.spec;
    let software = spec.software.as_ref();
    let driver = software
        .and_then(|s| s.driver_version.as_deref())
        .unwrap_or("N/A");
    let cuda = software
        .and_then(|s| s.cuda_version.as_deref())
        .unwrap_or("N/A");
    let mut xml = String::with_capacity(2048 + assignment.gpus.len() * 2048);
    xml.push_str("<?xml version=\"1.0\" ?>\n");
    xml.push_str("<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v13.dtd\">\n");
    xml.push_str("<nvidia_smi_log>\n");
    let _ = writeln!(xml, "\t<timestamp>{}</timestamp>", escape(timestamp));
    let _ = writeln!(xml, "\t<driver_version>{}</driver_version>", escape(driver));
    let _ = writeln!(xml, "\t<cuda_version>{}</cuda_version>", escape(cuda));
    let _ = writeln!(
        xml,
        "\t<attached_gpus>{}</attached_gpus>",
        assignment.gpus.len()
    );
    for gpu in &assignment.gpus {
        render_gpu(&mut xml, assignment, profile, gpu);
    }
    xml.push_str("</nvidia_smi_log>\n");
    xml
}

fn render_gpu(
    xml: &mut String,
    assignment: &NodeAssignment,
    profile: &SGPURackProfile,
    gpu: &AssignedGpu,
) {
    let model = &profile.spec.node.gpus.model;
    let state = device_state(&gpu.runtime);
    let lost = state == DeviceState::Failed;
    let value = |text: String| if lost { LOST.to_string() } else { text };
    let modes = gpu.runtime.modes.as_ref();
    let telemetry = gpu.runtime.telemetry.as_ref();
    let memory_mib = quantity_mib(&profile.spec.node.gpus.memory.capacity.0);
    let bus_id = smi_bus_id(&gpu.pci_address);
    let product = model.product_name.as_deref().unwrap_or("NVIDIA GPU");
    let brand = model.vendor.as_deref().unwrap_or("NVIDIA");
    let architecture = model.architecture.as_deref().unwrap_or("N/A");
    let mig = toggle(modes.and_then(|m| m.mig), "Disabled");
    let persistence = toggle(modes.and_then(|m| m.persistence), "Enabled");
    let temperature = gpu_celsius(&gpu.runtime).map_or("N/A".to_string(), |c| format!("{c} C"));
    let memory_temperature = telemetry
        .and_then(|t| t.temperature.as_ref())
        .and_then(|t| t.memory_celsius)
        .map_or("N/A".to_string(), |c| format!("{c} C"));
    let power = telemetry
        .and_then(|t| t.power.as_ref())
        .and_then(|p| p.draw_milli_watts)
        .map_or("N/A".to_string(), |mw| {
            format!("{}.{:02} W", mw / 1000, (mw % 1000) / 10)
        });
    let performance = telemetry
        .and_then(|t| t.performance_state.as_deref())
        .unwrap_or("P0");
    let memory = memory_mib.map_or("N/A".to_string(), |mib| format!("{mib} MiB"));
    let route_unhealthy = if state == DeviceState::Degraded {
        "True"
    } else {
        "False"
    };
    let summary = if state == DeviceState::Degraded {
        "Unhealthy"
    } else {
        "Healthy"
    };
    let _ = write!(
        xml,
        "\t<gpu id=\"{bus_id}\">
\t\t<product_name>{product}</product_name>
\t\t<product_brand>{brand}</product_brand>
\t\t<product_architecture>{architecture}</product_architecture>
\t\t<persistence_mode>{persistence}</persistence_mode>
\t\t<mig_mode>
\t\t\t<current_mig>{mig}</current_mig>
\t\t\t<pending_mig>{mig}</pending_mig>
\t\t</mig_mode>
\t\t<serial>{serial}</serial>
\t\t<uuid>{uuid}</uuid>
\t\t<pdi>N/A</pdi>
\t\t<minor_number>{minor}</minor_number>
\t\t<vbios_version>97.00.9E.00.01</vbios_version>
\t\t<board_id>0x{board_id:x}</board_id>
\t\t<board_part_number>699-2G548-0200-000</board_part_number>
\t\t<gpu_part_number>N/A</gpu_part_number>
\t\t<platformInfo>
\t\t\t<chassis_serial_number>{chassis}</chassis_serial_number>
\t\t\t<slot_number>{slot}</slot_number>
\t\t\t<tray_index>{slot}</tray_index>
\t\t\t<host_id>1</host_id>
\t\t\t<peer_type>Switch Connected</peer_type>
\t\t\t<module_id>{module}</module_id>
\t\t\t<gpu_fabric_guid>0x{fabric_guid:016x}</gpu_fabric_guid>
\t\t</platformInfo>
\t\t<inforom_version>
\t\t\t<img_version>G548.0200.00.01</img_version>
\t\t</inforom_version>
\t\t<pci>
\t\t\t<pci_bus_id>{bus_id}</pci_bus_id>
\t\t</pci>
\t\t<performance_state>{performance}</performance_state>
\t\t<fb_memory_usage>
\t\t\t<total>{memory_total}</total>
\t\t</fb_memory_usage>
\t\t<temperature>
\t\t\t<gpu_temp>{gpu_temp}</gpu_temp>
\t\t\t<memory_temp>{memory_temp}</memory_temp>
\t\t</temperature>
\t\t<gpu_power_readings>
\t\t\t<instant_power_draw>{power_draw}</instant_power_draw>
\t\t</gpu_power_readings>
\t\t<fabric>
\t\t\t<state>Completed</state>
\t\t\t<status>Success</status>
\t\t\t<cliqueId>{clique}</cliqueId>
\t\t\t<clusterUuid>{cluster}</clusterUuid>
\t\t\t<health>
\t\t\t\t<summary>{summary}</summary>
\t\t\t\t<route_unhealthy>{route_unhealthy}</route_unhealthy>
\t\t\t</health>
\t\t</fabric>
\t</gpu>
",
        product = escape(product),
        brand = escape(brand),
        architecture = escape(architecture),
        serial = escape(&gpu.serial),
        uuid = escape(&gpu.uuid),
        minor = gpu.minor_number,
        board_id = 0xa00 + gpu.minor_number.max(0),
        chassis = chassis_serial(&assignment.fabric_uuid),
        slot = assignment.node_index,
        module = module_id(gpu.index),
        fabric_guid = fabric_guid(&gpu.uuid),
        memory_total = value(memory),
        gpu_temp = value(temperature),
        memory_temp = value(memory_temperature),
        power_draw = value(power),
        clique = assignment.clique_id,
        cluster = escape(&assignment.fabric_uuid),
    );
}

/// A per-GPU fabric GUID, from the GPU's UUID.
fn fabric_guid(uuid: &str) -> u64 {
    uuid.chars()
        .filter(char::is_ascii_hexdigit)
        .rev()
        .take(16)
        .fold(0u64, |value, c| {
            (value << 4) | u64::from(c.to_digit(16).unwrap_or(0))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use mokka::api::{RuntimeState, RuntimeTelemetry, TemperatureTelemetry};

    fn assignment(states: &[DeviceState]) -> NodeAssignment {
        NodeAssignment {
            rack_name: "sandbox-nvl72-0-abc".into(),
            rack_group: "nvl72".into(),
            rack_index: 0,
            node_index: 7,
            fabric_uuid: "2c79cf0a-9456-5f4d-8a1b-0123456789ab".into(),
            clique_id: 0,
            profile_name: "gb300-nvl72".into(),
            gpus: states
                .iter()
                .enumerate()
                .map(|(index, state)| AssignedGpu {
                    index: index as i32,
                    uuid: format!("GPU-0000000{index}-1111-2222-3333-444444444444"),
                    serial: format!("0000000000000000000{index}"),
                    minor_number: index as i32,
                    pci_address: format!("0000:0{}:00.0", index + 1),
                    runtime: RuntimeState {
                        device_state: Some(*state),
                        modes: None,
                        telemetry: Some(RuntimeTelemetry {
                            temperature: Some(TemperatureTelemetry {
                                mode: None,
                                gpu_celsius: Some(40 + index as i32),
                                memory_celsius: Some(36),
                            }),
                            ..Default::default()
                        }),
                    },
                })
                .collect(),
        }
    }

    fn profile() -> SGPURackProfile {
        super::super::fleet::gb300_profile()
    }

    #[test]
    fn gpuid_reads_back_every_identity_mokka_rendered() {
        let assignment = assignment(&[DeviceState::Healthy; 4]);
        let xml = render(&assignment, &profile(), "Tue Dec  1 17:00:00 2026");
        let report = gpuid::smi::parse(xml.as_bytes()).unwrap();
        assert!(report.warnings.is_empty(), "{:?}", report.warnings);
        assert_eq!(report.attached_gpus, Some(4));
        assert_eq!(report.driver_version.as_deref(), Some("580.65.06"));
        assert_eq!(report.gpus.len(), 4);
        for (gpu, parsed) in assignment.gpus.iter().zip(&report.gpus) {
            assert_eq!(parsed.uuid.as_deref(), Some(gpu.uuid.as_str()));
            assert_eq!(parsed.serial.as_deref(), Some(gpu.serial.as_str()));
            assert_eq!(parsed.minor_number, Some(gpu.minor_number as u32));
            assert_eq!(parsed.module_id, Some(gpu.index as u32 + 1));
            assert_eq!(parsed.fabric_clique_id, Some(0));
            assert_eq!(
                parsed.fabric_cluster_uuid.as_deref(),
                Some(assignment.fabric_uuid.as_str())
            );
            assert_eq!(
                parsed.chassis_serial.as_deref(),
                Some(chassis_serial(&assignment.fabric_uuid).as_str())
            );
            assert_eq!(
                parsed.pci_bus_id.as_deref(),
                Some(format!("00000000:0{}:00.0", gpu.index + 1).as_str())
            );
            assert_eq!(parsed.fb_memory_total_mib, Some(288 * 1024));
            assert_eq!(parsed.product_name.as_deref(), Some("NVIDIA GB300"));
        }
    }

    #[test]
    fn a_failed_gpu_reads_as_a_lost_gpu_whose_identity_remains() {
        let assignment = assignment(&[DeviceState::Healthy, DeviceState::Failed]);
        let xml = render(&assignment, &profile(), "Tue Dec  1 17:00:00 2026");
        let report = gpuid::smi::parse(xml.as_bytes()).unwrap();
        assert_eq!(report.gpus[0].fb_memory_total_mib, Some(288 * 1024));
        assert_eq!(report.gpus[1].fb_memory_total_mib, None);
        assert_eq!(
            report.gpus[1].serial.as_deref(),
            Some(assignment.gpus[1].serial.as_str())
        );
        let lost_gpu = xml.split("<gpu id=").nth(2).unwrap();
        assert!(lost_gpu.contains("<gpu_temp>GPU is lost</gpu_temp>"));
        let healthy_gpu = xml.split("<gpu id=").nth(1).unwrap();
        assert!(healthy_gpu.contains("<gpu_temp>40 C</gpu_temp>"));
    }

    #[test]
    fn a_degraded_gpu_reports_an_unhealthy_route() {
        let xml = render(
            &assignment(&[DeviceState::Degraded]),
            &profile(),
            "Tue Dec  1 17:00:00 2026",
        );
        assert!(xml.contains("<route_unhealthy>True</route_unhealthy>"));
        assert!(xml.contains("<summary>Unhealthy</summary>"));
    }

    #[test]
    fn every_node_of_a_rack_shares_the_chassis_serial_and_racks_differ() {
        let a = chassis_serial("2c79cf0a-9456-5f4d-8a1b-0123456789ab");
        assert_eq!(a.len(), 13);
        assert!(a.chars().all(|c| c.is_ascii_digit()));
        assert_eq!(a, chassis_serial("2c79cf0a-9456-5f4d-8a1b-0123456789ab"));
        assert_ne!(a, chassis_serial("3c79cf0a-9456-5f4d-8a1b-0123456789ab"));
    }

    #[test]
    fn quantities_convert_to_mib() {
        assert_eq!(quantity_mib("288Gi"), Some(294_912));
        assert_eq!(quantity_mib("1048576Ki"), Some(1024));
        assert_eq!(quantity_mib("1073741824"), Some(1024));
        assert_eq!(quantity_mib("lots"), None);
    }
}
