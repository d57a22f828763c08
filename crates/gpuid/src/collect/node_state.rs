//! What gpuid keeps on a Node, and the merge patch that brings it there
//! (pure: no I/O, the clock is passed in).
//!
//! Durable state lives on the Node itself, so restarts, leader changes and
//! device-plugin pod re-creations do not re-export unchanged inventories.
//! It is kept per exporter destination (`<exporter>` is
//! [`ExporterIdentity::key`], for example `postgres-3f1c9a0b7e`), because
//! "exported" is only true for the destination that received it: a new
//! destination finds no state and receives the full inventory once, and
//! another destination's state stays for when it comes back.
//!
//! * `<prefix>/<exporter>.inventory-hash`: content hash of the last
//!   inventory exported there;
//! * `<prefix>/<exporter>.exported-at`: when (RFC 3339);
//! * `<prefix>/<exporter>.inventory`: the inventory itself as compact JSON
//!   (the previous state a later diff starts from);
//! * `<prefix>/<exporter>.destination`: the destination in words, without
//!   credentials, so a person can tell whose state it is.
//!
//! The unscoped annotations of earlier releases (`<prefix>/inventory-hash`,
//! `exported-at`, `inventory`) are removed by the first export record.
//!
//! Labels are few and stable, for selectors: GPU count, the chassis serial
//! when the node's GPUs share one, and one serial label per GPU keyed by its
//! module id (else minor number, else document index), never by sort order.
//!
//! Next to them, by default, upstream gpuid's label set under
//! `gpuid.github.com/` ([`upstream_labels`]), so selectors and dashboards
//! written for upstream keep working.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::config::ExporterIdentity;
use crate::inventory::{ContentHash, inventory_hash};
use crate::record::GpuRecord;

pub const HASH_ANNOTATION: &str = "inventory-hash";
pub const EXPORTED_AT_ANNOTATION: &str = "exported-at";
pub const INVENTORY_ANNOTATION: &str = "inventory";
pub const DESTINATION_ANNOTATION: &str = "destination";

/// Upstream gpuid's label prefix.
pub const UPSTREAM_PREFIX: &str = "gpuid.github.com";

/// The names gpuid writes on a Node: its label prefix, whether upstream's
/// labels are written too, and the exporter whose state it keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeKeys {
    pub prefix: String,
    /// Also write (and keep exact) upstream's `gpuid.github.com/` labels.
    pub upstream_labels: bool,
    /// [`ExporterIdentity::key`] of the configured exporter.
    pub exporter_key: String,
    /// [`ExporterIdentity::destination`].
    pub destination: String,
}

impl NodeKeys {
    pub fn new(prefix: &str, exporter: &ExporterIdentity) -> NodeKeys {
        NodeKeys {
            prefix: prefix.to_owned(),
            upstream_labels: true,
            exporter_key: exporter.key(),
            destination: exporter.destination.clone(),
        }
    }

    /// The same keys with upstream's labels on or off.
    pub fn with_upstream_labels(mut self, enabled: bool) -> NodeKeys {
        self.upstream_labels = enabled;
        self
    }

    /// Whether `key` is a label gpuid owns (and so removes when stale).
    fn owns_label(&self, key: &str) -> bool {
        key.strip_prefix(&self.prefix)
            .is_some_and(|rest| rest.starts_with('/'))
            || (self.upstream_labels && key.starts_with(UPSTREAM_PREFIX))
    }

    /// `<prefix>/<exporter>.<name>`: one of this exporter's state annotations.
    pub fn state_annotation(&self, name: &str) -> String {
        format!("{}/{}.{name}", self.prefix, self.exporter_key)
    }

    /// The unscoped state annotation of releases before per-exporter state.
    fn legacy_annotation(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }
}

/// Kubernetes' limit for a label value and for the name part of a key.
const LABEL_MAX: usize = 63;

/// gpuid's state read back from a Node's annotations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredState {
    pub hash: Option<String>,
    pub exported_at: Option<Timestamp>,
    /// The stored inventory; empty when absent or unreadable (then every
    /// GPU counts as added, which is the safe side).
    pub records: Vec<GpuRecord>,
}

impl StoredState {
    /// The state of `keys`' exporter; another exporter's state is ignored.
    pub fn from_annotations(
        keys: &NodeKeys,
        annotations: &BTreeMap<String, String>,
    ) -> StoredState {
        let get = |name: &str| annotations.get(&keys.state_annotation(name));
        StoredState {
            hash: get(HASH_ANNOTATION).cloned(),
            exported_at: get(EXPORTED_AT_ANNOTATION).and_then(|raw| raw.parse().ok()),
            records: get(INVENTORY_ANNOTATION)
                .and_then(|raw| serde_json::from_str(raw).ok())
                .unwrap_or_default(),
        }
    }
}

/// Why the inventory goes out (or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportReason {
    /// No stored hash or a different one.
    Changed,
    /// Same content, but the last export is older than the heartbeat.
    Heartbeat,
    /// Same content, exported recently: nothing to send.
    Unchanged,
}

/// Compares the fresh inventory with the stored state.
pub fn export_reason(
    stored: &StoredState,
    hash: ContentHash,
    now: Timestamp,
    heartbeat: std::time::Duration,
) -> ExportReason {
    if stored.hash.as_deref() != Some(hash.to_string().as_str()) {
        return ExportReason::Changed;
    }
    if heartbeat.is_zero() {
        return ExportReason::Unchanged;
    }
    let due = match stored.exported_at {
        None => true,
        Some(at) => now.duration_since(at).unsigned_abs() >= heartbeat,
    };
    if due {
        ExportReason::Heartbeat
    } else {
        ExportReason::Unchanged
    }
}

/// Makes `raw` a valid label value: only `[A-Za-z0-9._-]` (others become
/// `_`), alphanumeric at both ends, at most 63 characters. `None` when
/// nothing is left.
pub fn label_value(raw: &str) -> Option<String> {
    let mapped: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(LABEL_MAX)
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// The per-GPU part of a label name, from the most stable position the GPU
/// reports.
fn gpu_slot(record: &GpuRecord) -> String {
    let gpu = &record.gpu;
    match (gpu.module_id, gpu.minor_number) {
        (Some(module), _) => format!("module-{module}"),
        (None, Some(minor)) => format!("minor-{minor}"),
        (None, None) => format!("index-{}", gpu.index),
    }
}

/// Labels (name after the prefix → value) describing `records`.
pub fn desired_labels(records: &[GpuRecord]) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    if records.is_empty() {
        return labels;
    }
    labels.insert("gpu-count".to_owned(), records.len().to_string());
    let mut chassis: Vec<&str> = records
        .iter()
        .filter_map(|r| r.gpu.chassis_serial.as_deref())
        .collect();
    chassis.sort_unstable();
    chassis.dedup();
    if let [only] = chassis.as_slice()
        && let Some(value) = label_value(only)
    {
        labels.insert("chassis-serial".to_owned(), value);
    }
    for record in records {
        if let Some(serial) = record.gpu.serial.as_deref().and_then(label_value) {
            labels.insert(format!("{}.serial", gpu_slot(record)), serial);
        }
    }
    labels
}

/// Upstream's label value rule: empty or exactly `N/A` is `na`; every
/// character outside `[A-Za-z0-9._-]` becomes `-`; leading and trailing
/// non-alphanumerics are stripped; nothing left is `na`. Upstream had no
/// length cap (a longer value made the whole patch fail); here a value is
/// cut to 63 characters and stripped again, so the patch always passes.
pub fn upstream_label_value(raw: &str) -> String {
    if raw.is_empty() || raw == "N/A" {
        return "na".to_owned();
    }
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let capped = trimmed
        .get(..LABEL_MAX)
        .unwrap_or(trimmed)
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if capped.is_empty() {
        "na".to_owned()
    } else {
        capped.to_owned()
    }
}

/// Upstream gpuid's labels (full keys) for `records`, computed as upstream
/// did: GPUs are grouped by chassis serial; within a group the distinct
/// board serials are sorted as strings and numbered from 0 (so the two
/// GPUs of a GB200 module share one label, and the numbers are sort
/// positions, not slots).
///
/// * One group with a chassis: `chassis`, `chassis-count` = 1, `gpu-<j>`.
/// * One group without a chassis (H100, B200): `gpu-<j>` only.
/// * Several groups: for the groups with a chassis, sorted by chassis
///   serial and numbered `<i>` from 0, `chassis-<i>` and
///   `chassis-<i>-gpu-<j>`; for the GPUs without a chassis, plain
///   `gpu-<j>`; `chassis-count` = the number of groups with a chassis.
///
/// Where upstream's keys collided, one rule decides: every GPU without a
/// usable chassis (absent, empty, `N/A` or any other placeholder) is in one
/// group, numbered once, instead of one group per spelling whose `gpu-<j>`
/// labels overwrote each other in map order. A GPU without a serial counts
/// as the serial `na`, as upstream's sanitiser made it.
pub fn upstream_labels(records: &[GpuRecord]) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    if records.is_empty() {
        return labels;
    }
    let mut groups: BTreeMap<Option<&str>, Vec<&str>> = BTreeMap::new();
    for record in records {
        groups
            .entry(record.gpu.chassis_serial.as_deref())
            .or_default()
            .push(record.gpu.serial.as_deref().unwrap_or(""));
    }
    for serials in groups.values_mut() {
        serials.sort_unstable();
        serials.dedup();
    }
    let key = |name: String| format!("{UPSTREAM_PREFIX}/{name}");
    let number_gpus = |labels: &mut BTreeMap<String, String>,
                       name: &dyn Fn(usize) -> String,
                       serials: &[&str]| {
        for (j, serial) in serials.iter().enumerate() {
            labels.insert(key(name(j)), upstream_label_value(serial));
        }
    };
    let unchassied = groups.remove(&None);
    let chassied: Vec<(&str, Vec<&str>)> = groups
        .into_iter()
        .filter_map(|(chassis, serials)| chassis.map(|chassis| (chassis, serials)))
        .collect();
    match (chassied.as_slice(), &unchassied) {
        ([(chassis, serials)], None) => {
            labels.insert(key("chassis".to_owned()), upstream_label_value(chassis));
            labels.insert(key("chassis-count".to_owned()), "1".to_owned());
            number_gpus(&mut labels, &|j| format!("gpu-{j}"), serials);
        }
        _ => {
            for (i, (chassis, serials)) in chassied.iter().enumerate() {
                labels.insert(key(format!("chassis-{i}")), upstream_label_value(chassis));
                number_gpus(&mut labels, &|j| format!("chassis-{i}-gpu-{j}"), serials);
            }
            if !chassied.is_empty() {
                labels.insert(key("chassis-count".to_owned()), chassied.len().to_string());
            }
            if let Some(serials) = &unchassied {
                number_gpus(&mut labels, &|j| format!("gpu-{j}"), serials);
            }
        }
    }
    labels
}

/// Compact JSON of the records for the inventory annotation, sorted by GPU
/// key so equal inventories give equal text.
pub fn inventory_json(records: &[GpuRecord]) -> String {
    let mut sorted: Vec<&GpuRecord> = records.iter().collect();
    sorted.sort_by_key(|r| r.gpu_key());
    serde_json::to_string(&sorted).unwrap_or_else(|_| "[]".to_owned())
}

/// What to write on the Node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeUpdate {
    /// Set the hash, time and inventory annotations (after an export).
    pub record_export: Option<(ContentHash, Timestamp)>,
    pub records: Vec<GpuRecord>,
}

/// The JSON merge patch that makes the Node's gpuid labels exactly
/// [`desired_labels`] (removing stale ones with `null`) and, when asked,
/// records the export. `None` when the Node already matches.
pub fn node_patch(
    keys: &NodeKeys,
    current_labels: &BTreeMap<String, String>,
    current_annotations: &BTreeMap<String, String>,
    update: &NodeUpdate,
) -> Option<Value> {
    let owned = format!("{}/", keys.prefix);
    let mut desired: BTreeMap<String, String> = desired_labels(&update.records)
        .into_iter()
        .map(|(name, value)| (format!("{owned}{name}"), value))
        .collect();
    if keys.upstream_labels {
        desired.extend(upstream_labels(&update.records));
    }
    let mut labels = Map::new();
    for (name, value) in &desired {
        if current_labels.get(name) != Some(value) {
            labels.insert(name.clone(), Value::String(value.clone()));
        }
    }
    for name in current_labels.keys() {
        if keys.owns_label(name) && !desired.contains_key(name) {
            labels.insert(name.clone(), Value::Null);
        }
    }
    let mut annotations = Map::new();
    if let Some((hash, at)) = update.record_export {
        for (key, value) in export_annotations(keys, hash, at, &update.records) {
            if current_annotations.get(&key) != Some(&value) {
                annotations.insert(key, Value::String(value));
            }
        }
        for name in [
            HASH_ANNOTATION,
            EXPORTED_AT_ANNOTATION,
            INVENTORY_ANNOTATION,
        ] {
            let legacy = keys.legacy_annotation(name);
            if current_annotations.contains_key(&legacy) {
                annotations.insert(legacy, Value::Null);
            }
        }
    }
    if labels.is_empty() && annotations.is_empty() {
        return None;
    }
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".to_owned(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".to_owned(), Value::Object(annotations));
    }
    Some(json!({ "metadata": metadata }))
}

/// The state annotations recording an export to `keys`' exporter.
fn export_annotations(
    keys: &NodeKeys,
    hash: ContentHash,
    at: Timestamp,
    records: &[GpuRecord],
) -> [(String, String); 4] {
    [
        (keys.state_annotation(HASH_ANNOTATION), hash.to_string()),
        (
            keys.state_annotation(EXPORTED_AT_ANNOTATION),
            at.to_string(),
        ),
        (
            keys.state_annotation(INVENTORY_ANNOTATION),
            inventory_json(records),
        ),
        (
            keys.state_annotation(DESTINATION_ANNOTATION),
            keys.destination.clone(),
        ),
    ]
}

/// The merge patch recording an export: hash, time, inventory and destination.
pub fn export_patch(
    keys: &NodeKeys,
    hash: ContentHash,
    at: Timestamp,
    records: &[GpuRecord],
) -> Value {
    let annotations: Map<String, Value> = export_annotations(keys, hash, at, records)
        .into_iter()
        .map(|(key, value)| (key, Value::String(value)))
        .collect();
    json!({ "metadata": { "annotations": annotations } })
}

/// The hash the annotation stores for `records`.
pub fn stored_hash(records: &[GpuRecord]) -> ContentHash {
    inventory_hash(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{NodeIdentity, Observation, records_from_report};
    use crate::smi::parse;

    const PREFIX: &str = "gpuid.gpufleet.dev";

    fn keys() -> NodeKeys {
        NodeKeys::new(
            PREFIX,
            &ExporterIdentity::of(&crate::config::ExporterConfig::Stdout),
        )
    }

    fn records(capture: &str) -> Vec<GpuRecord> {
        let path = format!("{}/tests/fixtures/{capture}", env!("CARGO_MANIFEST_DIR"));
        let xml = std::fs::read(path).unwrap();
        let node = NodeIdentity {
            name: "n1".into(),
            uid: "u1".into(),
            provider_id: Some("kind://docker/c/n1".into()),
            system_uuid: None,
        };
        let observation = Observation {
            cluster: "c",
            node: &node,
            source_pod: "ns/p",
            observed_at: Timestamp::UNIX_EPOCH,
            collector_version: "t",
        };
        records_from_report(&observation, &parse(&xml).unwrap()).unwrap()
    }

    #[test]
    fn label_values_are_sanitised_and_capped_at_63() {
        assert_eq!(
            label_value(" 1650924060013 ").as_deref(),
            Some("1650924060013")
        );
        assert_eq!(label_value("a b/c").as_deref(), Some("a_b_c"));
        assert_eq!(label_value("--x--").as_deref(), Some("x"));
        assert_eq!(label_value("///"), None);
        let long = "A".repeat(100) + "-";
        assert_eq!(label_value(&long).map(|v| v.len()), Some(63));
    }

    #[test]
    fn gb200_labels_key_each_serial_by_module_id_and_share_the_chassis() {
        let labels = desired_labels(&records("hardware/gb200.xml"));
        assert_eq!(labels.get("gpu-count").map(String::as_str), Some("4"));
        assert!(labels.contains_key("chassis-serial"), "{labels:?}");
        let serial_labels: Vec<_> = labels.keys().filter(|k| k.ends_with(".serial")).collect();
        assert_eq!(serial_labels.len(), 4, "{labels:?}");
        assert!(serial_labels.iter().all(|k| k.starts_with("module-")));
        for (name, value) in &labels {
            assert!(name.len() <= 63 && value.len() <= 63, "{name}={value}");
        }
    }

    #[test]
    fn a_patch_adds_labels_records_the_export_and_later_removes_stale_labels() {
        let gb200 = records("hardware/gb200.xml");
        let hash = stored_hash(&gb200);
        let at: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let update = NodeUpdate {
            record_export: Some((hash, at)),
            records: gb200.clone(),
        };
        let patch = node_patch(&keys(), &BTreeMap::new(), &BTreeMap::new(), &update).unwrap();
        let labels: BTreeMap<String, String> =
            serde_json::from_value(patch["metadata"]["labels"].clone()).unwrap();
        let annotations: BTreeMap<String, String> =
            serde_json::from_value(patch["metadata"]["annotations"].clone()).unwrap();
        let stored = StoredState::from_annotations(&keys(), &annotations);
        assert_eq!(stored.hash, Some(hash.to_string()));
        assert_eq!(stored.exported_at, Some(at));
        assert_eq!(
            stored_hash(&stored.records),
            hash,
            "the inventory round-trips"
        );
        assert_eq!(
            node_patch(&keys(), &labels, &annotations, &update),
            None,
            "an up-to-date node needs no patch"
        );

        let gone = NodeUpdate {
            record_export: None,
            records: Vec::new(),
        };
        let mut with_foreign = labels.clone();
        with_foreign.insert("team".into(), "ml".into());
        let patch = node_patch(&keys(), &with_foreign, &annotations, &gone).unwrap();
        let removed = patch["metadata"]["labels"].as_object().unwrap();
        assert_eq!(removed.len(), labels.len());
        assert!(removed.values().all(Value::is_null));
        assert!(
            !removed.contains_key("team"),
            "labels of others are left alone"
        );
    }

    #[test]
    fn upstream_values_are_sanitised_as_upstream_did() {
        for (raw, want) in [
            ("N/A", "na"),
            ("", "na"),
            ("!@#valid123$%^", "valid123"),
            ("GPU-123/456", "GPU-123-456"),
            ("N/A-1650924060013", "N-A-1650924060013"),
            ("a b_c.d-e", "a-b_c.d-e"),
            ("///", "na"),
        ] {
            assert_eq!(upstream_label_value(raw), want, "{raw:?}");
        }
        let long = upstream_label_value(&format!("{}-{}", "A".repeat(62), "B".repeat(10)));
        assert_eq!(
            long,
            "A".repeat(62),
            "cut to 63, then the trailing '-' stripped"
        );
    }

    fn upstream(capture: &str) -> BTreeMap<String, String> {
        upstream_labels(&records(capture))
            .into_iter()
            .map(|(key, value)| {
                let name = key.strip_prefix("gpuid.github.com/").unwrap().to_owned();
                (name, value)
            })
            .collect()
    }

    #[test]
    fn upstream_labels_of_a_gb200_node_are_chassis_count_and_one_per_module_serial() {
        // Upstream's documented example for its gb200 capture.
        let labels = upstream("hardware/gb200.xml");
        let module_serials: std::collections::BTreeSet<String> = records("hardware/gb200.xml")
            .iter()
            .filter_map(|r| r.gpu.serial.clone())
            .collect();
        let chassis = records("hardware/gb200.xml")[0]
            .gpu
            .chassis_serial
            .clone()
            .unwrap();
        let mut want: BTreeMap<String, String> = [
            ("chassis".to_owned(), chassis),
            ("chassis-count".to_owned(), "1".to_owned()),
        ]
        .into();
        for (j, serial) in module_serials.iter().enumerate() {
            want.insert(format!("gpu-{j}"), serial.clone());
        }
        assert_eq!(labels, want);
        assert_eq!(module_serials.len(), 2, "4 GPUs on 2 modules");
    }

    #[test]
    fn upstream_labels_of_an_h100_node_are_the_sorted_serials_without_chassis() {
        let labels = upstream("hardware/h100.xml");
        let mut serials: Vec<String> = records("hardware/h100.xml")
            .iter()
            .filter_map(|r| r.gpu.serial.clone())
            .collect();
        serials.sort();
        let want: BTreeMap<String, String> = serials
            .into_iter()
            .enumerate()
            .map(|(j, serial)| (format!("gpu-{j}"), serial))
            .collect();
        assert_eq!(labels, want);
        assert_eq!(labels.len(), 8);
    }

    #[test]
    fn several_chassis_are_numbered_by_sorted_chassis_and_gpus_without_one_get_plain_keys() {
        let mut mixed = records("hardware/gb200.xml");
        mixed[0].gpu.chassis_serial = Some("B-chassis".into());
        mixed[0].gpu.serial = Some("s2".into());
        mixed[1].gpu.chassis_serial = Some("A-chassis".into());
        mixed[1].gpu.serial = Some("s1".into());
        mixed[2].gpu.chassis_serial = None;
        mixed[2].gpu.serial = Some("loose-b".into());
        mixed[3].gpu.chassis_serial = None;
        mixed[3].gpu.serial = None;
        let labels: BTreeMap<String, String> = upstream_labels(&mixed)
            .into_iter()
            .map(|(k, v)| (k.trim_start_matches("gpuid.github.com/").to_owned(), v))
            .collect();
        let want: BTreeMap<String, String> = [
            ("chassis-0", "A-chassis"),
            ("chassis-0-gpu-0", "s1"),
            ("chassis-1", "B-chassis"),
            ("chassis-1-gpu-0", "s2"),
            ("chassis-count", "2"),
            // Both GPUs without a chassis are one group: no key is written twice.
            ("gpu-0", "na"),
            ("gpu-1", "loose-b"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(labels, want);
        let mut reversed = mixed.clone();
        reversed.reverse();
        assert_eq!(
            upstream_labels(&reversed),
            upstream_labels(&mixed),
            "independent of order"
        );
    }

    #[test]
    fn upstream_labels_are_written_by_default_kept_exact_and_left_alone_when_off() {
        let h100 = records("hardware/h100.xml");
        let update = NodeUpdate {
            record_export: None,
            records: h100,
        };
        let current: BTreeMap<String, String> = [
            ("gpuid.github.com/chassis".to_owned(), "stale".to_owned()),
            ("team".to_owned(), "ml".to_owned()),
        ]
        .into();
        let patch = node_patch(&keys(), &current, &BTreeMap::new(), &update).unwrap();
        let labels = patch["metadata"]["labels"].as_object().unwrap();
        assert_eq!(
            labels["gpuid.github.com/chassis"],
            Value::Null,
            "stale upstream label removed"
        );
        assert!(labels.contains_key("gpuid.github.com/gpu-7"));
        assert!(labels.contains_key(&format!("{PREFIX}/gpu-count")));
        assert!(!labels.contains_key("team"));

        let off = keys().with_upstream_labels(false);
        let patch = node_patch(&off, &current, &BTreeMap::new(), &update).unwrap();
        let labels = patch["metadata"]["labels"].as_object().unwrap();
        assert!(
            labels
                .keys()
                .all(|key| key.starts_with(&format!("{PREFIX}/"))),
            "with the knob off upstream's keys are neither written nor removed: {labels:?}"
        );
    }

    #[test]
    fn another_exporters_state_is_not_mistaken_for_this_ones_and_is_kept() {
        let h100 = records("hardware/h100.xml");
        let hash = stored_hash(&h100);
        let at: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let update = NodeUpdate {
            record_export: Some((hash, at)),
            records: h100.clone(),
        };
        let stdout = keys();
        let patch = node_patch(&stdout, &BTreeMap::new(), &BTreeMap::new(), &update).unwrap();
        let mut annotations: BTreeMap<String, String> =
            serde_json::from_value(patch["metadata"]["annotations"].clone()).unwrap();
        assert_eq!(
            annotations
                .get(&stdout.state_annotation(DESTINATION_ANNOTATION))
                .map(String::as_str),
            Some("stdout")
        );
        let postgres = NodeKeys::new(
            PREFIX,
            &ExporterIdentity::of(&crate::config::ExporterConfig::Postgres(
                crate::config::PostgresExporterConfig {
                    connection: crate::config::PostgresConnection::Dsn(crate::config::Secret::new(
                        "postgres://u:p@db/inv",
                    )),
                    table: crate::config::PostgresTable {
                        schema: None,
                        name: "gpu".into(),
                    },
                    auto_migrate: true,
                },
            )),
        );
        let fresh = StoredState::from_annotations(&postgres, &annotations);
        assert_eq!(
            fresh,
            StoredState::default(),
            "a new destination starts from nothing"
        );
        let day = std::time::Duration::from_secs(86_400);
        assert_eq!(export_reason(&fresh, hash, at, day), ExportReason::Changed);

        let patch = node_patch(&postgres, &BTreeMap::new(), &annotations, &update).unwrap();
        let written = patch["metadata"]["annotations"].as_object().unwrap();
        assert!(
            written
                .keys()
                .all(|key| key.starts_with(&format!("{PREFIX}/postgres-"))),
            "only the postgres state is written: {written:?}"
        );
        for (key, value) in written {
            annotations.insert(key.clone(), value.as_str().unwrap().to_owned());
        }
        assert_eq!(
            StoredState::from_annotations(&stdout, &annotations).hash,
            Some(hash.to_string())
        );
        assert_eq!(
            StoredState::from_annotations(&postgres, &annotations).hash,
            Some(hash.to_string())
        );
    }

    #[test]
    fn the_unscoped_state_of_earlier_releases_is_removed_by_the_first_export_record() {
        let h100 = records("hardware/h100.xml");
        let legacy: BTreeMap<String, String> = [
            (format!("{PREFIX}/inventory-hash"), "old".to_owned()),
            (
                format!("{PREFIX}/exported-at"),
                "2025-01-01T00:00:00Z".to_owned(),
            ),
            (format!("{PREFIX}/inventory"), "[]".to_owned()),
        ]
        .into();
        assert_eq!(
            StoredState::from_annotations(&keys(), &legacy),
            StoredState::default()
        );
        let update = NodeUpdate {
            record_export: Some((stored_hash(&h100), Timestamp::UNIX_EPOCH)),
            records: h100,
        };
        let patch = node_patch(&keys(), &BTreeMap::new(), &legacy, &update).unwrap();
        for key in legacy.keys() {
            assert_eq!(patch["metadata"]["annotations"][key], Value::Null, "{key}");
        }
    }

    #[test]
    fn export_happens_on_change_and_on_heartbeat_only() {
        let hash = stored_hash(&records("hardware/h100.xml"));
        let day = std::time::Duration::from_secs(86_400);
        let at: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let stored = StoredState {
            hash: Some(hash.to_string()),
            exported_at: Some(at),
            records: Vec::new(),
        };
        let soon = at + jiff::SignedDuration::from_hours(1);
        let later = at + jiff::SignedDuration::from_hours(25);
        assert_eq!(
            export_reason(&stored, hash, soon, day),
            ExportReason::Unchanged
        );
        assert_eq!(
            export_reason(&stored, hash, later, day),
            ExportReason::Heartbeat
        );
        assert_eq!(
            export_reason(&stored, hash, later, std::time::Duration::ZERO),
            ExportReason::Unchanged
        );
        let other = stored_hash(&records("hardware/a100.xml"));
        assert_eq!(
            export_reason(&stored, other, soon, day),
            ExportReason::Changed
        );
        assert_eq!(
            export_reason(&StoredState::default(), hash, soon, day),
            ExportReason::Changed
        );
    }
}
