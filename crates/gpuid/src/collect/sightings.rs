//! Where each GPU was last seen, for move detection.
//!
//! The collector needs, for any GPU, the node it was last seen on, and when
//! that node is not the one being collected, the record it had there (the
//! `before` of a `gpu_moved`). Moves are rare; lookups of a GPU on its own
//! node are the common case. So each node's last inventory is kept as the
//! compact JSON it is stored as on the Node, and parsed only when a GPU
//! turns up elsewhere. At 500 nodes of 8 GPUs this is about a quarter of
//! the memory of keeping every record as a struct (measured in
//! docs/benchmarks.md, "gpuid's memory").

use std::collections::HashMap;
use std::sync::Arc;

use crate::record::GpuRecord;

/// GPU → node, and node → its last inventory.
#[derive(Debug, Default)]
pub struct Sightings {
    /// GPU key → the node it was last seen on.
    node_of: HashMap<String, Arc<str>>,
    /// Node → its last inventory as compact JSON (all its records, some of
    /// which may since have been seen on another node).
    inventory_of: HashMap<Arc<str>, Box<str>>,
}

impl Sightings {
    /// `node`'s records were just collected: every GPU in them was last seen
    /// there, and the node's GPUs not in them are no longer seen anywhere.
    pub fn remember(&mut self, node: &str, records: &[GpuRecord]) {
        let node = self.node_name(node);
        self.node_of.retain(|_, seen| *seen != node);
        for record in records {
            self.node_of.insert(record.gpu_key(), Arc::clone(&node));
        }
        self.inventory_of.insert(node, encode(records));
    }

    /// Adds `node`'s stored inventory without taking a GPU away from a node
    /// it was already seen on (the seeding at start, where the first node
    /// listed wins).
    pub fn seed(&mut self, node: &str, records: &[GpuRecord]) {
        let node = self.node_name(node);
        for record in records {
            self.node_of
                .entry(record.gpu_key())
                .or_insert_with(|| Arc::clone(&node));
        }
        self.inventory_of.insert(node, encode(records));
    }

    /// The record of the GPU `gpu_key` on the node it was last seen on,
    /// unless that node is `here`.
    pub fn elsewhere(&self, gpu_key: &str, here: &str) -> Option<GpuRecord> {
        let node = self.node_of.get(gpu_key)?;
        if &**node == here {
            return None;
        }
        self.records_of(node)
            .into_iter()
            .find(|record| record.gpu_key() == gpu_key)
    }

    /// Forgets `node`; returns the records of the GPUs last seen there.
    pub fn forget(&mut self, node: &str) -> Vec<GpuRecord> {
        let records = self.records_of(node);
        self.node_of.retain(|_, seen| &**seen != node);
        self.inventory_of.remove(node);
        records
            .into_iter()
            .filter(|record| !self.node_of.contains_key(&record.gpu_key()))
            .collect()
    }

    /// The node's inventory, with only the GPUs still last seen there.
    fn records_of(&self, node: &str) -> Vec<GpuRecord> {
        let Some(json) = self.inventory_of.get(node) else {
            return Vec::new();
        };
        let records: Vec<GpuRecord> = serde_json::from_str(json).unwrap_or_else(|error| {
            // Written by `encode` from records of this build; unreachable
            // short of a serde bug, and then a move reads as add + remove.
            tracing::warn!(%node, %error, "cannot read back a remembered inventory");
            Vec::new()
        });
        records
            .into_iter()
            .filter(|record| {
                self.node_of
                    .get(&record.gpu_key())
                    .is_some_and(|seen| &**seen == node)
            })
            .collect()
    }

    /// The shared name of `node` (one allocation per node, not per GPU).
    fn node_name(&self, node: &str) -> Arc<str> {
        self.inventory_of
            .get_key_value(node)
            .map_or_else(|| Arc::from(node), |(name, _)| Arc::clone(name))
    }
}

fn encode(records: &[GpuRecord]) -> Box<str> {
    serde_json::to_string(records)
        .unwrap_or_else(|error| {
            tracing::warn!(%error, "cannot encode an inventory to remember it");
            "[]".to_owned()
        })
        .into_boxed_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::MachineIdSource;
    use crate::smi::SmiGpu;

    fn record_on(node: &str, uuid: &str) -> GpuRecord {
        GpuRecord {
            schema_version: 1,
            cluster: "prod".into(),
            node_name: node.into(),
            node_uid: format!("uid-{node}"),
            provider_id: None,
            system_uuid: Some(format!("sys-{node}")),
            machine_id: format!("sys-{node}"),
            machine_id_source: MachineIdSource::SystemUuid,
            source_pod: format!("gpu-operator/plugin-{node}"),
            observed_at: jiff::Timestamp::UNIX_EPOCH,
            collector_version: "test".into(),
            gpu: SmiGpu {
                uuid: Some(uuid.into()),
                serial: Some(format!("serial-{uuid}")),
                ..SmiGpu::default()
            },
        }
    }

    fn keys(records: &[GpuRecord]) -> Vec<String> {
        records.iter().map(GpuRecord::gpu_key).collect()
    }

    #[test]
    fn a_gpu_on_its_own_node_is_not_elsewhere() {
        let mut sightings = Sightings::default();
        sightings.remember("node-a", &[record_on("node-a", "GPU-1")]);
        assert_eq!(sightings.elsewhere("GPU-1", "node-a"), None);
        assert_eq!(sightings.elsewhere("GPU-unknown", "node-a"), None);
    }

    #[test]
    fn a_gpu_seen_on_another_node_comes_back_with_its_record_there() {
        let mut sightings = Sightings::default();
        let before = record_on("node-a", "GPU-1");
        sightings.remember("node-a", &[before.clone(), record_on("node-a", "GPU-2")]);
        assert_eq!(sightings.elsewhere("GPU-1", "node-b"), Some(before));
    }

    #[test]
    fn remembering_a_node_moves_its_gpus_there_and_drops_the_ones_it_lost() {
        let mut sightings = Sightings::default();
        sightings.remember(
            "node-a",
            &[record_on("node-a", "GPU-1"), record_on("node-a", "GPU-2")],
        );
        sightings.remember("node-b", &[record_on("node-b", "GPU-1")]);
        // GPU-1 now belongs to node-b; node-a keeps only GPU-2.
        assert_eq!(
            sightings.elsewhere("GPU-1", "node-a").map(|r| r.node_name),
            Some("node-b".to_owned())
        );
        assert_eq!(keys(&sightings.forget("node-a")), ["GPU-2"]);
        // node-a collected again without GPU-2: it is seen nowhere.
        sightings.remember("node-a", &[]);
        assert_eq!(sightings.elsewhere("GPU-2", "node-c"), None);
    }

    #[test]
    fn seeding_keeps_the_first_node_a_gpu_was_found_on() {
        let mut sightings = Sightings::default();
        sightings.seed("node-a", &[record_on("node-a", "GPU-1")]);
        sightings.seed(
            "node-b",
            &[record_on("node-b", "GPU-1"), record_on("node-b", "GPU-2")],
        );
        assert_eq!(
            sightings.elsewhere("GPU-1", "node-c").map(|r| r.node_name),
            Some("node-a".to_owned())
        );
        assert_eq!(keys(&sightings.forget("node-b")), ["GPU-2"]);
        assert_eq!(keys(&sightings.forget("node-a")), ["GPU-1"]);
        assert_eq!(sightings.elsewhere("GPU-1", "node-c"), None);
    }
}
