//! Behaviour of hashing and diffing, on records built from a real capture.

use super::*;
use crate::record::{NodeIdentity, Observation, records_from_report};
use crate::smi;

const GB200: &[u8] = include_bytes!("../../tests/fixtures/hardware/gb200.xml");

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_787_000_000 + seconds).unwrap()
}

fn node(name: &str, instance: &str) -> NodeIdentity {
    NodeIdentity {
        name: name.into(),
        uid: format!("uid-{name}"),
        provider_id: Some(format!("aws:///us-east-1a/{instance}")),
        system_uuid: None,
    }
}

fn records_on(node: &NodeIdentity, pod: &str, observed_at: Timestamp) -> Vec<GpuRecord> {
    let report = smi::parse(GB200).unwrap();
    let observation = Observation {
        cluster: "prod",
        node,
        source_pod: pod,
        observed_at,
        collector_version: "0.1.0",
    };
    records_from_report(&observation, &report).unwrap()
}

#[test]
fn the_event_namespace_is_derived_from_its_documented_name() {
    assert_eq!(
        EVENT_ID_NAMESPACE,
        Uuid::new_v5(&Uuid::NAMESPACE_URL, b"urn:gpufleet:gpuid:change-event")
    );
}

#[test]
fn the_inventory_hash_ignores_record_order() {
    let records = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let mut reversed = records.clone();
    reversed.reverse();
    assert_eq!(inventory_hash(&records), inventory_hash(&reversed));
}

#[test]
fn the_inventory_hash_ignores_volatile_fields() {
    let first = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let mut later = records_on(&node("n1", "i-1"), "gpu-operator/dp-b", at(3600));
    for record in &mut later {
        record.collector_version = "0.2.0".into();
        record.gpu.fabric_state = Some("In Progress".into());
        record.gpu.index += 10;
    }
    assert_eq!(inventory_hash(&first), inventory_hash(&later));
}

#[test]
fn the_inventory_hash_changes_when_any_stable_field_changes() {
    let records = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let base = inventory_hash(&records);
    type Mutation = Box<dyn Fn(&mut GpuRecord)>;
    let mutations: Vec<(&str, Mutation)> = vec![
        (
            "serial",
            Box::new(|r| r.gpu.serial = Some("1650000000009".into())),
        ),
        (
            "driver",
            Box::new(|r| r.gpu.driver_version = Some("590.1".into())),
        ),
        ("slot", Box::new(|r| r.gpu.slot_number = None)),
        ("machine", Box::new(|r| r.machine_id = "i-2".into())),
        ("node uid", Box::new(|r| r.node_uid = "other".into())),
        (
            "mig",
            Box::new(|r| r.gpu.mig_mode = Some(smi::MigMode::Enabled)),
        ),
    ];
    for (what, mutate) in mutations {
        let mut changed = records.clone();
        mutate(&mut changed[2]);
        assert_ne!(inventory_hash(&changed), base, "{what}");
    }
    assert_ne!(
        inventory_hash(&records[..3]),
        base,
        "a missing GPU changes the hash"
    );
}

#[test]
fn the_hash_is_pinned_so_persisted_hashes_survive_upgrades() {
    // Hashes are stored next to nodes to skip re-exports after a restart;
    // if this literal has to change, bump the "v1" tag in `digest` so old
    // and new hashes never compare equal by accident.
    let records = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let hash = inventory_hash(&records);
    assert_eq!(hash.to_string(), PINNED_GB200_HASH);
    assert_eq!(
        serde_json::to_string(&hash).unwrap(),
        format!("\"{PINNED_GB200_HASH}\"")
    );
}

const PINNED_GB200_HASH: &str = "396eb416621cb0c2b8b534ad7909c5acd993f98fa6ec22b1e53eefd8242d2259";

#[test]
fn identical_inventories_produce_no_events() {
    let before = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let after = records_on(&node("n1", "i-1"), "gpu-operator/dp-b", at(60));
    assert!(diff(&before, &after, at(60)).is_empty());
}

#[test]
fn a_new_node_reports_every_gpu_as_added_even_when_two_share_a_board_serial() {
    let after = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let events = diff(&[], &after, at(0));
    assert_eq!(events.len(), 4);
    assert!(
        events
            .iter()
            .all(|e| e.kind == ChangeKind::GpuAdded && e.before.is_none())
    );
    let keys: Vec<_> = events.iter().map(|e| e.gpu_key.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "events are sorted by GPU key");
}

#[test]
fn a_gpu_that_disappears_is_removed() {
    let before = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let after = before[..3].to_vec();
    let events = diff(&before, &after, at(60));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, ChangeKind::GpuRemoved);
    assert_eq!(events[0].gpu_key, before[3].gpu_key());
    assert_eq!(events[0].before.as_ref(), Some(&before[3]));
}

#[test]
fn a_gpu_seen_on_another_node_is_one_move_not_a_removal_and_an_addition() {
    let before = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let after = records_on(&node("n2", "i-2"), "gpu-operator/dp-b", at(60));
    let events = diff(&before, &after, at(60));
    assert_eq!(events.len(), 4);
    for event in &events {
        assert_eq!(event.kind, ChangeKind::GpuMoved);
        assert_eq!(
            event.changed_fields,
            ["machine_id", "node_name", "node_uid", "provider_id"]
        );
        assert_eq!(
            event.before.as_ref().map(|r| r.node_name.as_str()),
            Some("n1")
        );
        assert_eq!(
            event.after.as_ref().map(|r| r.node_name.as_str()),
            Some("n2")
        );
    }
}

#[test]
fn an_attribute_change_in_place_is_a_change_listing_the_fields() {
    let before = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let mut after = before.clone();
    after[1].gpu.vbios_version = Some("97.00.B9.00.70".into());
    after[1].gpu.driver_version = Some("580.200.01".into());
    let events = diff(&before, &after, at(60));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, ChangeKind::GpuChanged);
    assert_eq!(
        events[0].changed_fields,
        ["driver_version", "vbios_version"]
    );
}

#[test]
fn event_ids_are_deterministic_for_the_same_diff_and_distinct_otherwise() {
    let before = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let ids = |events: Vec<ChangeEvent>| events.into_iter().map(|e| e.id).collect::<Vec<_>>();
    let first = ids(diff(&[], &before, at(0)));
    assert_eq!(
        first,
        ids(diff(&[], &before, at(0))),
        "retrying the same diff"
    );
    let mut unique = first.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), first.len(), "one id per GPU");
    let re_added = ids(diff(&[], &before, at(7200)));
    assert!(
        first.iter().all(|id| !re_added.contains(id)),
        "a later re-add is a new event"
    );
    assert!(first.iter().all(|id| id.get_version_num() == 5));
}

#[test]
fn duplicate_reports_of_one_gpu_resolve_to_the_latest_observation() {
    let stale = records_on(&node("n1", "i-1"), "gpu-operator/dp-a", at(0));
    let fresh = records_on(&node("n2", "i-2"), "gpu-operator/dp-b", at(60));
    let both: Vec<_> = stale.iter().chain(fresh.iter()).cloned().collect();
    let mut both_reversed = both.clone();
    both_reversed.reverse();
    assert!(diff(&fresh, &both, at(90)).is_empty());
    assert!(diff(&fresh, &both_reversed, at(90)).is_empty());
}
