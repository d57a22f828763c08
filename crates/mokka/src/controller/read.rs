//! The read API (upstream's `AssignmentsForNode` and `EffectiveRuntime`): a
//! Node's assignments and the effective runtime of its GPUs, answered from
//! the process-lifetime caches, so every replica with synced caches —
//! leader or standby — serves it without any write work. In-process callers
//! (the sandbox) and the node-agent HTTP API use the same two calls.

use std::sync::Arc;

use controller_kit::Caches;

use super::INDEX_NODE_UID;
use super::policies::evaluation;
use super::state::Context;
use crate::api::{RackNode, RuntimeState, SGPURack};
use crate::policy::GpuCoordinate;
use crate::text::go_quote;

/// One logical Node of a rack bound to the asked-for Node. The rack is the
/// caller's own copy: changing it changes nothing in the caches.
#[derive(Clone, Debug, PartialEq)]
pub struct AssignmentSnapshot {
    pub rack: SGPURack,
    /// `index` of the bound slot in `rack.spec.nodes`.
    pub node_index: i32,
}

impl AssignmentSnapshot {
    /// The bound logical Node, `None` when `node_index` names no slot.
    pub fn node(&self) -> Option<&RackNode> {
        self.rack.spec.node_by_index(self.node_index)
    }

    /// Whether the rack is being deleted (such racks are still returned).
    pub fn deleting(&self) -> bool {
        self.rack.metadata.deletion_timestamp.is_some()
    }
}

/// One bound slot of a cached rack, shared with the cache (read-only).
pub(crate) struct BoundSlot {
    pub rack: Arc<SGPURack>,
    pub node_index: i32,
}

/// The effective runtime of one GPU of a logical Node.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuRuntime {
    pub index: i32,
    pub runtime: RuntimeState,
}

/// Why a read could not be answered. `CacheNotReady` and
/// `StaleRuntimeInputs` are transient: retry later.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("assignment lookup requires exact Node name and UID")]
    ExactIdentityRequired,
    #[error("controller caches are not ready")]
    CacheNotReady,
    /// The cached inventory or profile is not the one the rack was rendered
    /// from (upstream's `ErrStaleRuntimeInputs`, with the detail).
    #[error("cached runtime inputs do not match the rendered rack: {0}")]
    StaleRuntimeInputs(String),
    #[error("effective runtime requires a rack and one of its logical Nodes")]
    RackAndNodeRequired,
    /// The inventory's policies could not be evaluated.
    #[error("{0}")]
    Evaluation(String),
}

impl ReadError {
    /// Whether asking again later can succeed without anyone changing an object.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ReadError::CacheNotReady | ReadError::StaleRuntimeInputs(_)
        )
    }
}

/// A cheap handle to one replica's read API.
#[derive(Clone)]
pub struct ReadApi {
    context: Arc<Context>,
    caches: Caches,
}

impl ReadApi {
    pub(crate) fn new(context: Arc<Context>, caches: Caches) -> Self {
        Self { context, caches }
    }

    /// True once every cache has synced.
    pub fn ready(&self) -> bool {
        self.caches.cache_ready()
    }

    /// The rack slots bound to exactly this Node (name and UID; a UID match
    /// alone is not enough), sorted by rack name, rack UID and slot index.
    /// Racks being deleted are included. No binding is an empty list.
    pub fn assignments_for_node(
        &self,
        name: &str,
        uid: &str,
    ) -> Result<Vec<AssignmentSnapshot>, ReadError> {
        Ok(self
            .bound_slots(name, uid)?
            .into_iter()
            .map(|slot| AssignmentSnapshot {
                rack: (*slot.rack).clone(),
                node_index: slot.node_index,
            })
            .collect())
    }

    /// [`Self::assignments_for_node`] without the copies: the cached racks
    /// themselves, shared. The node API answers from these because copying
    /// a 100-Node rack (its managedFields are large JSON trees) cost more
    /// than the rest of an answer together.
    pub(crate) fn bound_slots(&self, name: &str, uid: &str) -> Result<Vec<BoundSlot>, ReadError> {
        if name.is_empty() || uid.is_empty() {
            return Err(ReadError::ExactIdentityRequired);
        }
        if !self.ready() {
            return Err(ReadError::CacheNotReady);
        }
        let mut racks: Vec<Arc<SGPURack>> = self.context.racks.by_index(INDEX_NODE_UID, uid);
        racks.sort_by(|a, b| {
            (&a.metadata.name, &a.metadata.uid).cmp(&(&b.metadata.name, &b.metadata.uid))
        });
        let mut slots = Vec::new();
        for rack in racks {
            let mut indexes: Vec<i32> = rack
                .spec
                .nodes
                .iter()
                .filter(|slot| slot.bound_to(name, uid))
                .map(|slot| slot.index)
                .collect();
            indexes.sort_unstable();
            for node_index in indexes {
                slots.push(BoundSlot {
                    rack: Arc::clone(&rack),
                    node_index,
                });
            }
        }
        Ok(slots)
    }

    /// The effective runtime of every GPU of the assignment's logical Node,
    /// in rack order: the profile defaults overridden by the accepted
    /// policies that select each GPU. Refuses, rather than mixing revisions,
    /// while the cached inventory or profile is not the one the rack was
    /// rendered from.
    pub fn effective_runtime(
        &self,
        assignment: &AssignmentSnapshot,
    ) -> Result<Vec<GpuRuntime>, ReadError> {
        self.slot_runtime(&assignment.rack, assignment.node_index)
    }

    /// [`Self::effective_runtime`] of slot `node_index` of `rack`.
    pub(crate) fn slot_runtime(
        &self,
        rack: &SGPURack,
        node_index: i32,
    ) -> Result<Vec<GpuRuntime>, ReadError> {
        let Some(node) = rack.spec.node_by_index(node_index) else {
            return Err(ReadError::RackAndNodeRequired);
        };
        if !self.ready() {
            return Err(ReadError::CacheNotReady);
        }
        let inventory_ref = &rack.spec.inventory_ref;
        match self.context.inventories.get(&inventory_ref.name) {
            Some(inventory)
                if inventory.metadata.uid.as_deref() == Some(inventory_ref.uid.as_str()) => {}
            _ => {
                return Err(ReadError::StaleRuntimeInputs(format!(
                    "SGPUInventory {} is no longer UID {}",
                    go_quote(&inventory_ref.name),
                    go_quote(&inventory_ref.uid)
                )));
            }
        }
        let profile_ref = &rack.spec.profile_ref;
        // A newer profile generation may carry other defaults: the rack has
        // not re-rendered yet, so its state would mix revisions.
        let profile = match self.context.profiles.get(&profile_ref.name) {
            Some(profile)
                if profile.metadata.uid.as_deref() == Some(profile_ref.uid.as_str())
                    && profile.metadata.generation == Some(profile_ref.generation) =>
            {
                profile
            }
            _ => {
                return Err(ReadError::StaleRuntimeInputs(format!(
                    "SGPURackProfile {} is no longer generation {} of UID {}",
                    go_quote(&profile_ref.name),
                    profile_ref.generation,
                    go_quote(&profile_ref.uid)
                )));
            }
        };
        let evaluation = evaluation(&self.context, &inventory_ref.name);
        let evaluation = evaluation
            .as_ref()
            .as_ref()
            .map_err(|error| ReadError::Evaluation(error.to_string()))?;
        let defaults = profile
            .spec
            .defaults
            .as_ref()
            .and_then(|defaults| defaults.runtime.as_ref());
        let compiled: Vec<GpuRuntime> = node
            .gpus
            .iter()
            .map(|gpu| GpuRuntime {
                index: gpu.index,
                runtime: evaluation.runtime(
                    defaults,
                    GpuCoordinate {
                        group: &rack.spec.identity.rack_group,
                        rack: rack.spec.identity.rack_index,
                        node: node.index,
                        gpu: gpu.index,
                    },
                ),
            })
            .collect();
        tracing::debug!(
            inventory = %inventory_ref.name,
            rack = rack.metadata.name.as_deref().unwrap_or_default(),
            rackGroup = %rack.spec.identity.rack_group,
            rackIndex = rack.spec.identity.rack_index,
            nodeIndex = node.index,
            node = node.node_ref.as_ref().map(|bound| bound.name.as_str()),
            gpus = compiled.len(),
            profileGeneration = profile_ref.generation,
            "Compiled GPU runtime"
        );
        Ok(compiled)
    }

    /// The cached profile of this name (for callers rendering a Node's shape).
    pub fn cached_profile(&self, name: &str) -> Option<Arc<crate::api::SGPURackProfile>> {
        self.context.profiles.get(name)
    }

    /// A receiver that changes whenever an input of this API changes
    /// (racks, inventories, profiles, policies): long-polls wait on it.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.context.changes.subscribe()
    }
}
