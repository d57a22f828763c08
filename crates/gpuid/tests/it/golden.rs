//! Every capture against the independent Python oracle
//! (`tests/fixtures/golden/oracle.py`), plus the facts each capture is
//! known for.

use std::collections::BTreeMap;

use gpuid::smi::{self, MigMode, SmiGpu, SmiReport};
use serde_json::Value;

use crate::fixtures::{all_captures, capture, root};

fn parse(relative: &str) -> SmiReport {
    smi::parse(&capture(relative)).unwrap()
}

#[test]
fn every_capture_parses_to_exactly_the_records_the_oracle_extracts() {
    let captures = all_captures();
    assert_eq!(
        captures.len(),
        11,
        "a new capture needs a golden file: run oracle.py"
    );
    for (name, xml) in captures {
        let report = smi::parse(&xml).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert!(report.warnings.is_empty(), "{name}: {:?}", report.warnings);
        let golden_path = root().join(format!("golden/{name}.ndjson"));
        let golden = std::fs::read_to_string(&golden_path)
            .unwrap_or_else(|err| panic!("{}: {err}", golden_path.display()));
        let expected: Vec<Value> = golden
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let actual: Vec<Value> = report
            .to_ndjson()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(actual.len(), expected.len(), "{name}: record count");
        for (index, (actual, expected)) in actual.iter().zip(&expected).enumerate() {
            assert_eq!(actual, expected, "{name}: GPU #{index}");
        }
        assert_eq!(
            report.attached_gpus.map(|n| n as usize),
            Some(report.gpus.len()),
            "{name}: attached_gpus matches the <gpu> count"
        );
    }
}

#[test]
fn gb200_yields_four_records_whose_module_pairs_share_two_board_serials() {
    let report = parse("hardware/gb200.xml");
    assert_eq!(report.gpus.len(), 4);
    let mut by_serial: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for gpu in &report.gpus {
        by_serial
            .entry(gpu.serial.as_deref().unwrap())
            .or_default()
            .push(gpu.module_id.unwrap());
    }
    let groups: Vec<Vec<u32>> = by_serial
        .into_values()
        .map(|mut modules| {
            modules.sort();
            modules
        })
        .collect();
    assert_eq!(groups, [vec![1, 2], vec![3, 4]]);
    let uuids: std::collections::BTreeSet<_> = report
        .gpus
        .iter()
        .map(|g| g.uuid.clone().unwrap())
        .collect();
    assert_eq!(uuids.len(), 4, "every GPU keeps its own UUID");
    for gpu in &report.gpus {
        assert_eq!(gpu.chassis_serial.as_deref(), Some("1820000000001"));
        assert_eq!(
            (gpu.slot_number, gpu.tray_index, gpu.host_id),
            (Some(14), Some(4), Some(1))
        );
        assert_eq!(gpu.peer_type.as_deref(), Some("Switch Connected"));
        assert_eq!(gpu.fabric_clique_id, Some(2));
        assert_eq!(
            gpu.fabric_cluster_uuid.as_deref(),
            Some("00000001-0000-0000-0000-000000000001")
        );
        assert_eq!(gpu.architecture.as_deref(), Some("Blackwell"));
        assert_eq!(gpu.driver_version.as_deref(), Some("580.173.02"));
        assert_eq!(gpu.cuda_version.as_deref(), Some("13.0"));
    }
    assert_eq!(report.dtd.as_deref(), Some("nvsmi_device_v13.dtd"));
}

#[test]
fn b200_yields_eight_records_with_no_chassis_and_module_ids_out_of_pci_order() {
    let report = parse("hardware/b200.xml");
    assert_eq!(report.gpus.len(), 8);
    assert!(
        report.gpus.iter().all(|gpu| gpu.chassis_serial.is_none()),
        "empty element is no value"
    );
    assert!(
        report
            .gpus
            .iter()
            .all(|gpu| gpu.slot_number.is_none() && gpu.tray_index.is_none())
    );
    let modules: Vec<u32> = report
        .gpus
        .iter()
        .map(|gpu| gpu.module_id.unwrap())
        .collect();
    assert_eq!(modules, [6, 8, 7, 5, 2, 4, 3, 1]);
    let pci: Vec<&str> = report
        .gpus
        .iter()
        .map(|gpu| gpu.pci_bus_id.as_deref().unwrap())
        .collect();
    let mut sorted = pci.clone();
    sorted.sort();
    assert_eq!(pci, sorted, "nvidia-smi lists GPUs in PCI order");
    let serials: std::collections::BTreeSet<_> =
        report.gpus.iter().map(|g| g.serial.clone()).collect();
    assert_eq!(serials.len(), 8);
}

#[test]
fn a_lost_gpu_keeps_its_identity_while_its_lost_values_are_absent() {
    let report = parse("simulated/gb200-lost.xml");
    let [healthy, lost] = report.gpus.as_slice() else {
        panic!("expected 2 GPUs")
    };
    assert_eq!(
        lost.uuid.as_deref(),
        Some("GPU-b200b200-0000-0000-0000-000000000001")
    );
    assert_eq!(lost.serial.as_deref(), Some("1562849103701"));
    assert_eq!(lost.pci_bus_id.as_deref(), Some("00000000:0B:00.0"));
    assert_eq!(lost.module_id, Some(2));
    assert_eq!(lost.chassis_serial.as_deref(), Some("1822725100200"));
    assert_eq!(
        (
            &lost.fabric_clique_id,
            &lost.fabric_cluster_uuid,
            &lost.fabric_state,
            &lost.fb_memory_total_mib
        ),
        (&None, &None, &None, &None),
        "values reading `GPU is lost` are no value"
    );
    assert_eq!(healthy.fabric_clique_id, Some(0));
    assert_eq!(healthy.fb_memory_total_mib, Some(196_608));
}

#[test]
fn short_pci_ids_are_canonicalised_to_the_eight_digit_domain_form() {
    let report = parse("simulated/a100-healthy.xml");
    let ids: Vec<_> = report
        .gpus
        .iter()
        .map(|gpu| gpu.pci_bus_id.clone().unwrap())
        .collect();
    assert_eq!(ids, ["00000000:07:00.0", "00000000:0F:00.0"]);
    assert!(
        report
            .gpus
            .iter()
            .all(|gpu| gpu.module_id.is_none() && gpu.pdi.is_none())
    );
}

#[test]
fn dtd_v12_captures_without_pdi_parse_like_v13_ones() {
    let report = parse("hardware/a100.xml");
    assert_eq!(report.dtd.as_deref(), Some("nvsmi_device_v12.dtd"));
    let gpu: &SmiGpu = &report.gpus[0];
    assert_eq!(gpu.pdi, None);
    assert_eq!(gpu.product_name.as_deref(), Some("NVIDIA A100-SXM4-40GB"));
    assert_eq!(gpu.chassis_serial, None, "N/A is no value");
    assert_eq!(gpu.module_id, Some(7));
}

#[test]
fn h100_keeps_the_one_board_part_number_that_differs() {
    let report = parse("hardware/h100.xml");
    let parts: Vec<_> = report
        .gpus
        .iter()
        .map(|gpu| gpu.board_part_number.as_deref().unwrap())
        .collect();
    assert_eq!(
        parts
            .iter()
            .filter(|part| **part == "965-2G520-A800-000")
            .count(),
        1
    );
    assert_eq!(
        parts
            .iter()
            .filter(|part| **part == "692-2G520-0200-000")
            .count(),
        7
    );
}

#[test]
fn l40s_reports_no_mig_mode_and_no_fabric_while_gb200_reports_mig_disabled() {
    let l40s = parse("hardware/l40s.xml");
    assert_eq!(l40s.gpus[0].mig_mode, None);
    assert_eq!(
        (
            l40s.gpus[0].fabric_clique_id,
            l40s.gpus[0].fabric_cluster_uuid.as_deref()
        ),
        (None, None)
    );
    assert_eq!(
        parse("hardware/gb200.xml").gpus[0].mig_mode,
        Some(MigMode::Disabled)
    );
}

#[test]
fn serials_stay_strings_with_leading_zeros() {
    let xml = br#"<nvidia_smi_log><gpu id="0000:01:00.0"><serial>0012345</serial><uuid>GPU-x</uuid></gpu></nvidia_smi_log>"#;
    let report = smi::parse(xml).unwrap();
    assert_eq!(report.gpus[0].serial.as_deref(), Some("0012345"));
    assert!(report.to_ndjson().contains(r#""serial":"0012345""#));
}
