//! From capture to records, hashes and events, as the collector will use them.

use gpuid::inventory::{ChangeKind, diff, inventory_hash};
use gpuid::record::{GpuRecord, NodeIdentity, Observation, records_from_report};
use gpuid::smi;
use jiff::Timestamp;

use crate::fixtures::capture;

fn records(relative: &str, node_name: &str, observed_at: Timestamp) -> Vec<GpuRecord> {
    let report = smi::parse(&capture(relative)).unwrap();
    let node = NodeIdentity {
        name: node_name.into(),
        uid: format!("uid-{node_name}"),
        provider_id: None,
        system_uuid: Some(format!("SYS-{node_name}")),
    };
    let observation = Observation {
        cluster: "prod",
        node: &node,
        source_pod: "gpu-operator/nvidia-device-plugin-x",
        observed_at,
        collector_version: env!("CARGO_PKG_VERSION"),
    };
    records_from_report(&observation, &report).unwrap()
}

#[test]
fn a_b200_node_with_an_empty_chassis_still_exports_all_eight_gpus() {
    let now: Timestamp = "2026-08-21T08:39:32Z".parse().unwrap();
    let records = records("hardware/b200.xml", "b200-1", now);
    assert_eq!(
        records.len(),
        8,
        "upstream dropped every record of this node"
    );
    assert!(
        records
            .iter()
            .all(|r| r.machine_id == "sys-b200-1" && r.gpu.chassis_serial.is_none())
    );
    let events = diff(&[], &records, now);
    assert_eq!(events.len(), 8);
    assert!(events.iter().all(|e| e.kind == ChangeKind::GpuAdded));
}

#[test]
fn re_collecting_an_unchanged_node_gives_the_same_hash_and_no_events() {
    let first = records(
        "hardware/h100.xml",
        "h100-1",
        "2026-08-21T08:00:00Z".parse().unwrap(),
    );
    let second = records(
        "hardware/h100.xml",
        "h100-1",
        "2026-08-22T08:00:00Z".parse().unwrap(),
    );
    assert_eq!(inventory_hash(&first), inventory_hash(&second));
    assert!(diff(&first, &second, "2026-08-22T08:00:00Z".parse().unwrap()).is_empty());
}

#[test]
fn a_gpu_losing_its_fabric_shows_up_as_a_change_of_exactly_those_fields() {
    let t0: Timestamp = "2026-08-14T10:16:52Z".parse().unwrap();
    let t1: Timestamp = "2026-08-14T10:18:15Z".parse().unwrap();
    let healthy = records("simulated/gb200-healthy.xml", "gb-1", t0);
    let lost = records("simulated/gb200-lost.xml", "gb-1", t1);
    let events = diff(&healthy, &lost, t1);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, ChangeKind::GpuChanged);
    assert_eq!(
        events[0].gpu_key,
        "GPU-b200b200-0000-0000-0000-000000000001"
    );
    assert_eq!(
        events[0].changed_fields,
        [
            "fabric_clique_id",
            "fabric_cluster_uuid",
            "fb_memory_total_mib"
        ]
    );
}
