//! The Node catalog: what allocation knows about eligible Nodes, with a
//! generation that only allocation-relevant changes advance.
//!
//! A change of name, UID, creationTimestamp, deletionTimestamp or of a label
//! other than the two projected ones advances the generation. The
//! controller's own projection (the assigned and clique labels, the
//! annotation) never does, so projecting a Node cannot invalidate the
//! allocation that caused it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::node_meta::NodeMeta;

use crate::allocate::NodeInput;
use crate::selector::CONTROLLER_OWNED_LABELS;

/// The allocation-relevant view of one Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogNode {
    pub input: NodeInput,
}

impl CatalogNode {
    /// The catalog record of a (transformed) Node.
    pub fn from_node(node: &NodeMeta) -> Self {
        let meta = &node.metadata;
        let labels: BTreeMap<String, String> = meta
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|(key, _)| !CONTROLLER_OWNED_LABELS.contains(&key.as_str()))
            .collect();
        Self {
            input: NodeInput {
                name: meta.name.clone().unwrap_or_default(),
                uid: meta.uid.clone().unwrap_or_default(),
                created: meta.creation_timestamp.clone(),
                labels: Arc::new(labels),
                terminating: meta.deletion_timestamp.is_some(),
            },
        }
    }
}

/// Immutable records by name and UID, and the allocation generation.
#[derive(Debug, Default)]
pub struct NodeCatalog {
    by_name: HashMap<String, Arc<CatalogNode>>,
    name_of_uid: HashMap<String, String>,
    generation: u64,
    snapshot: Option<Arc<Vec<NodeInput>>>,
    /// UIDs whose record changed since the last [`NodeCatalog::take_changed`]
    /// (added, replaced or removed), so an incremental allocation is fed
    /// only what changed.
    changed: HashSet<String>,
}

impl NodeCatalog {
    /// Replaces the records for the Node's name and UID; returns whether the
    /// allocation generation advanced.
    pub fn upsert(&mut self, node: &NodeMeta) -> bool {
        let record = CatalogNode::from_node(node);
        if record.input.name.is_empty() {
            return false;
        }
        if self
            .by_name
            .get(&record.input.name)
            .is_some_and(|current| **current == record)
        {
            return false;
        }
        if let Some(previous) = self.by_name.get(&record.input.name)
            && previous.input.uid != record.input.uid
        {
            self.name_of_uid.remove(&previous.input.uid);
            self.changed.insert(previous.input.uid.clone());
        }
        if let Some(old_name) = self.name_of_uid.get(&record.input.uid).cloned()
            && old_name != record.input.name
        {
            self.by_name.remove(&old_name);
        }
        self.changed.insert(record.input.uid.clone());
        self.name_of_uid
            .insert(record.input.uid.clone(), record.input.name.clone());
        self.by_name
            .insert(record.input.name.clone(), Arc::new(record));
        self.advance();
        true
    }

    /// Removes the record only if the UID matches, so a stale delete never
    /// evicts a same-name replacement. Returns whether the generation advanced.
    pub fn delete(&mut self, name: &str, uid: &str) -> bool {
        match self.by_name.get(name) {
            Some(current) if current.input.uid == uid => {
                self.by_name.remove(name);
                self.name_of_uid.remove(uid);
                self.changed.insert(uid.to_string());
                self.advance();
                true
            }
            _ => false,
        }
    }

    fn advance(&mut self) {
        self.generation += 1;
        self.snapshot = None;
    }

    /// The allocation generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The record of `name`.
    pub fn get(&self, name: &str) -> Option<Arc<CatalogNode>> {
        self.by_name.get(name).cloned()
    }

    /// The name a UID is known under.
    pub fn name_of(&self, uid: &str) -> Option<&str> {
        self.name_of_uid.get(uid).map(String::as_str)
    }

    /// The record known under `uid`.
    pub fn by_uid(&self, uid: &str) -> Option<&NodeInput> {
        let name = self.name_of_uid.get(uid)?;
        self.by_name.get(name).map(|record| &record.input)
    }

    /// The UIDs changed since the previous call (see `changed`).
    pub fn take_changed(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.changed)
    }

    /// How many Nodes are known.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Every Node, sorted by (name, uid); cached until the next change.
    pub fn snapshot(&mut self) -> Arc<Vec<NodeInput>> {
        if let Some(snapshot) = &self.snapshot {
            return Arc::clone(snapshot);
        }
        let mut nodes: Vec<NodeInput> = self.by_name.values().map(|r| r.input.clone()).collect();
        nodes.sort_by(|a, b| (&a.name, &a.uid).cmp(&(&b.name, &b.uid)));
        let snapshot = Arc::new(nodes);
        self.snapshot = Some(Arc::clone(&snapshot));
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{
        ANNOTATION_SGPU_ASSIGNMENT, LABEL_GPU_CLIQUE, LABEL_SGPU_ASSIGNED, LABEL_SGPU_NODE,
    };
    use kube::api::ObjectMeta;

    fn node(name: &str, uid: &str, labels: &[(&str, &str)]) -> NodeMeta {
        NodeMeta {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(uid.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ownership: None,
        }
    }

    #[test]
    fn allocation_revision_ignores_owned_metadata() {
        let mut catalog = NodeCatalog::default();
        assert!(catalog.upsert(&node("a", "u1", &[(LABEL_SGPU_NODE, "true")])));
        let generation = catalog.generation();
        let mut projected = node(
            "a",
            "u1",
            &[
                (LABEL_SGPU_NODE, "true"),
                (LABEL_SGPU_ASSIGNED, "true"),
                (LABEL_GPU_CLIQUE, "x.0"),
            ],
        );
        projected.metadata.annotations = Some(
            [(ANNOTATION_SGPU_ASSIGNMENT.to_string(), "{}".to_string())]
                .into_iter()
                .collect(),
        );
        assert!(!catalog.upsert(&projected));
        assert_eq!(catalog.generation(), generation);
        assert!(catalog.upsert(&node(
            "a",
            "u1",
            &[(LABEL_SGPU_NODE, "true"), ("zone", "b")]
        )));
        assert_eq!(catalog.generation(), generation + 1);
    }

    #[test]
    fn a_stale_delete_never_evicts_a_same_name_replacement() {
        let mut catalog = NodeCatalog::default();
        catalog.upsert(&node("a", "old", &[]));
        catalog.upsert(&node("a", "new", &[]));
        assert!(!catalog.delete("a", "old"));
        assert_eq!(
            catalog.get("a").map(|r| r.input.uid.clone()).as_deref(),
            Some("new")
        );
        assert_eq!(catalog.name_of("old"), None);
        assert!(catalog.delete("a", "new"));
        assert!(catalog.is_empty());
    }

    #[test]
    fn the_snapshot_is_sorted_and_cached_until_the_next_change() {
        let mut catalog = NodeCatalog::default();
        catalog.upsert(&node("b", "u2", &[]));
        catalog.upsert(&node("a", "u1", &[]));
        let first = catalog.snapshot();
        assert_eq!(
            first.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert!(Arc::ptr_eq(&first, &catalog.snapshot()));
        catalog.upsert(&node("c", "u3", &[]));
        assert_eq!(catalog.snapshot().len(), 3);
    }

    #[test]
    fn snapshots_and_their_copies_share_each_nodes_labels_with_the_record() {
        let mut catalog = NodeCatalog::default();
        catalog.upsert(&node(
            "a",
            "u1",
            &[(LABEL_SGPU_NODE, "true"), ("pool", "x")],
        ));
        let record = catalog.get("a").unwrap();
        let snapshot = catalog.snapshot();
        // An allocation input is a copy of the snapshot's Vec.
        let copied: Vec<NodeInput> = snapshot.as_ref().clone();
        assert!(Arc::ptr_eq(&record.input.labels, &snapshot[0].labels));
        assert!(Arc::ptr_eq(&record.input.labels, &copied[0].labels));
        assert_eq!(copied[0].labels.get("pool").map(String::as_str), Some("x"));
    }
}
