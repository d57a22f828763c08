//! Change detection: a content hash per node inventory and a diff between
//! two inventories that yields typed events with deterministic ids.
//!
//! Upstream re-exported everything after every restart and could not tell a
//! new GPU from a re-read one. With a stable hash persisted next to the node
//! the collector exports only on change, and the events say what changed.

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::record::{GpuRecord, MachineIdSource};
use crate::smi::MigMode;

/// Namespace of change-event ids: UUIDv5 of the URL namespace and
/// `urn:gpufleet:gpuid:change-event` (see the test that derives it).
pub const EVENT_ID_NAMESPACE: Uuid = Uuid::from_u128(0x4221_2347_9ed4_5d5c_9cfe_ceaa_0399_dd1d);

/// A SHA-256 digest, shown as lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentHash(pub [u8; 32]);

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentHash({self})")
    }
}

impl Serialize for ContentHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// The fields of a record that describe the GPU and where it is, in a fixed
/// order. Left out, because they change without the inventory changing:
/// the observation time, the device-plugin pod (re-created on every
/// rollout), the collector version, nvidia-smi's document position (the
/// index can change at boot) and the fabric state/status (health, not
/// identity). Struct serialisation keeps this order whatever serde_json
/// features the final binary enables, so hashes are stable across builds.
#[derive(Serialize, PartialEq)]
struct StableGpu<'a> {
    schema_version: u32,
    cluster: &'a str,
    gpu_key: String,
    node_name: &'a str,
    node_uid: &'a str,
    provider_id: Option<&'a str>,
    system_uuid: Option<&'a str>,
    machine_id: &'a str,
    machine_id_source: MachineIdSource,
    pci_bus_id: Option<&'a str>,
    uuid: Option<&'a str>,
    serial: Option<&'a str>,
    pdi: Option<&'a str>,
    minor_number: Option<u32>,
    product_name: Option<&'a str>,
    product_brand: Option<&'a str>,
    architecture: Option<&'a str>,
    board_part_number: Option<&'a str>,
    gpu_part_number: Option<&'a str>,
    board_id: Option<&'a str>,
    vbios_version: Option<&'a str>,
    inforom_image_version: Option<&'a str>,
    driver_version: Option<&'a str>,
    cuda_version: Option<&'a str>,
    chassis_serial: Option<&'a str>,
    slot_number: Option<u32>,
    tray_index: Option<u32>,
    host_id: Option<u32>,
    peer_type: Option<&'a str>,
    module_id: Option<u32>,
    gpu_fabric_guid: Option<&'a str>,
    fabric_clique_id: Option<u32>,
    fabric_cluster_uuid: Option<&'a str>,
    mig_mode: Option<MigMode>,
    mig_mode_pending: Option<MigMode>,
    fb_memory_total_mib: Option<u64>,
}

/// Fields whose change means the GPU is now somewhere else.
const LOCATION_FIELDS: &[&str] = &["node_name", "node_uid", "machine_id"];

impl<'a> StableGpu<'a> {
    fn of(record: &'a GpuRecord) -> Self {
        let gpu = &record.gpu;
        StableGpu {
            schema_version: record.schema_version,
            cluster: &record.cluster,
            gpu_key: record.gpu_key(),
            node_name: &record.node_name,
            node_uid: &record.node_uid,
            provider_id: record.provider_id.as_deref(),
            system_uuid: record.system_uuid.as_deref(),
            machine_id: &record.machine_id,
            machine_id_source: record.machine_id_source,
            pci_bus_id: gpu.pci_bus_id.as_deref(),
            uuid: gpu.uuid.as_deref(),
            serial: gpu.serial.as_deref(),
            pdi: gpu.pdi.as_deref(),
            minor_number: gpu.minor_number,
            product_name: gpu.product_name.as_deref(),
            product_brand: gpu.product_brand.as_deref(),
            architecture: gpu.architecture.as_deref(),
            board_part_number: gpu.board_part_number.as_deref(),
            gpu_part_number: gpu.gpu_part_number.as_deref(),
            board_id: gpu.board_id.as_deref(),
            vbios_version: gpu.vbios_version.as_deref(),
            inforom_image_version: gpu.inforom_image_version.as_deref(),
            driver_version: gpu.driver_version.as_deref(),
            cuda_version: gpu.cuda_version.as_deref(),
            chassis_serial: gpu.chassis_serial.as_deref(),
            slot_number: gpu.slot_number,
            tray_index: gpu.tray_index,
            host_id: gpu.host_id,
            peer_type: gpu.peer_type.as_deref(),
            module_id: gpu.module_id,
            gpu_fabric_guid: gpu.gpu_fabric_guid.as_deref(),
            fabric_clique_id: gpu.fabric_clique_id,
            fabric_cluster_uuid: gpu.fabric_cluster_uuid.as_deref(),
            mig_mode: gpu.mig_mode,
            mig_mode_pending: gpu.mig_mode_pending,
            fb_memory_total_mib: gpu.fb_memory_total_mib,
        }
    }

    fn canonical_bytes(&self) -> Vec<u8> {
        // Serialising borrowed strings and integers into a Vec cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Names of the fields that differ, in field order.
    fn changed_fields(&self, other: &StableGpu<'_>) -> Vec<String> {
        let (Ok(serde_json::Value::Object(left)), Ok(serde_json::Value::Object(right))) =
            (serde_json::to_value(self), serde_json::to_value(other))
        else {
            return Vec::new();
        };
        let mut changed: Vec<String> = left
            .iter()
            .filter(|(name, value)| right.get(name.as_str()) != Some(value))
            .map(|(name, _)| name.clone())
            .collect();
        changed.sort();
        changed
    }
}

/// Hash of one record's stable content.
pub fn record_hash(record: &GpuRecord) -> ContentHash {
    digest(&[StableGpu::of(record).canonical_bytes()])
}

/// Hash of a set of records (normally one node's), independent of their
/// order and of the volatile fields. Equal hashes mean nothing to export.
pub fn inventory_hash(records: &[GpuRecord]) -> ContentHash {
    let mut encoded: Vec<Vec<u8>> = records
        .iter()
        .map(|record| StableGpu::of(record).canonical_bytes())
        .collect();
    encoded.sort();
    digest(&encoded)
}

fn digest(parts: &[Vec<u8>]) -> ContentHash {
    let mut hasher = Sha256::new();
    hasher.update(b"gpuid-inventory/v1\n");
    for part in parts {
        // Length prefixes keep two different splits of the same bytes apart.
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    ContentHash(hasher.finalize().into())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    GpuAdded,
    GpuRemoved,
    /// Seen on a different node or machine than before.
    GpuMoved,
    /// Same place, different attributes (driver, VBIOS, MIG mode, slot, …).
    GpuChanged,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::GpuAdded => "gpu_added",
            ChangeKind::GpuRemoved => "gpu_removed",
            ChangeKind::GpuMoved => "gpu_moved",
            ChangeKind::GpuChanged => "gpu_changed",
        }
    }
}

/// One change between two inventories.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEvent {
    /// UUIDv5 over the kind, cluster, GPU key, both content hashes and the
    /// observation time: the same diff always yields the same id (safe to
    /// retry and to insert with `ON CONFLICT DO NOTHING`), while a GPU that
    /// leaves and comes back at a later observation gets a new one.
    pub id: Uuid,
    pub kind: ChangeKind,
    pub cluster: String,
    pub gpu_key: String,
    pub observed_at: Timestamp,
    /// Stable fields that differ (empty for added and removed).
    pub changed_fields: Vec<String>,
    pub before: Option<GpuRecord>,
    pub after: Option<GpuRecord>,
}

type Key = (String, String);

/// Indexes records by (cluster, GPU key). If a key occurs twice (a GPU
/// reported by a stale and a fresh node), the latest observation wins, ties
/// broken by node name and content, so the choice never depends on order.
fn index(records: &[GpuRecord]) -> BTreeMap<Key, &GpuRecord> {
    let mut by_key: BTreeMap<Key, &GpuRecord> = BTreeMap::new();
    for record in records {
        let key = (record.cluster.clone(), record.gpu_key());
        let rank = |r: &GpuRecord| (r.observed_at, r.node_name.clone(), record_hash(r));
        match by_key.get(&key) {
            Some(existing) if rank(existing) >= rank(record) => {}
            _ => {
                by_key.insert(key, record);
            }
        }
    }
    by_key
}

/// What changed from `before` to `after` (whole-cluster inventories, so
/// that a GPU leaving one node and appearing on another is one move, not a
/// removal plus an addition). Events come sorted by cluster and GPU key.
pub fn diff(before: &[GpuRecord], after: &[GpuRecord], observed_at: Timestamp) -> Vec<ChangeEvent> {
    let before = index(before);
    let after = index(after);
    let mut keys: Vec<&Key> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();

    let mut events = Vec::new();
    for key in keys {
        let old = before.get(key).copied();
        let new = after.get(key).copied();
        let (kind, changed_fields) = match (old, new) {
            (None, Some(_)) => (ChangeKind::GpuAdded, Vec::new()),
            (Some(_), None) => (ChangeKind::GpuRemoved, Vec::new()),
            (Some(old), Some(new)) => {
                let changed = StableGpu::of(old).changed_fields(&StableGpu::of(new));
                if changed.is_empty() {
                    continue;
                }
                let moved = changed
                    .iter()
                    .any(|field| LOCATION_FIELDS.contains(&field.as_str()));
                (
                    if moved {
                        ChangeKind::GpuMoved
                    } else {
                        ChangeKind::GpuChanged
                    },
                    changed,
                )
            }
            (None, None) => continue,
        };
        let id = event_id(kind, key, old, new, observed_at);
        events.push(ChangeEvent {
            id,
            kind,
            cluster: key.0.clone(),
            gpu_key: key.1.clone(),
            observed_at,
            changed_fields,
            before: old.cloned(),
            after: new.cloned(),
        });
    }
    events
}

fn event_id(
    kind: ChangeKind,
    (cluster, gpu_key): &Key,
    before: Option<&GpuRecord>,
    after: Option<&GpuRecord>,
    observed_at: Timestamp,
) -> Uuid {
    let hash = |record: Option<&GpuRecord>| {
        record.map_or_else(|| "-".to_owned(), |r| record_hash(r).to_string())
    };
    // NUL separators: no field can contain one, so the name is unambiguous.
    let name = format!(
        "v1\0{}\0{cluster}\0{gpu_key}\0{}\0{}\0{}",
        kind.as_str(),
        hash(before),
        hash(after),
        observed_at.as_nanosecond()
    );
    Uuid::new_v5(&EVENT_ID_NAMESPACE, name.as_bytes())
}

#[cfg(test)]
mod tests;
