//! The controller's allocation, kept incrementally: the pure `Allocator`
//! fed with what changed since the previous cluster plan (Node UIDs the
//! catalog marked, racks whose spec or existence changed, the admitted
//! groups) instead of a fresh `allocate()` over every Node and binding.
//!
//! The allocator's plan equals `allocate()` of its input, so the result is
//! the same as before; only the cost changes (a Node event costs the work
//! of that Node, not of the whole fleet). Whatever the allocator cannot
//! represent (two racks at one coordinate, a change it refuses) drops it,
//! and the next plan is built from scratch, which also yields `allocate()`'s
//! error for that input.

use std::collections::{HashMap, HashSet};

use controller_kit::CachedStore;

use crate::allocate::{
    Allocation, AllocationError, AllocationInput, Allocator, Binding, Change, GroupInput, GroupKey,
};
use crate::api::SGPURack;
use crate::plan::catalog::NodeCatalog;
use crate::plan::inventory::rack_bindings;

/// A binding coordinate: group, rack index, Node index.
type Coordinate = (GroupKey, i32, i32);

fn coordinate(binding: &Binding) -> Coordinate {
    (
        binding.group.as_ref().clone(),
        binding.rack_index,
        binding.node_index,
    )
}

/// How the last plan was obtained (for tests and metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SyncWork {
    /// The allocator was (re)built from the whole input.
    pub rebuilt: bool,
    /// Changes fed to the allocator incrementally.
    pub changes: usize,
}

#[derive(Default)]
pub(crate) struct LiveAllocation {
    allocator: Option<Allocator>,
    groups: Vec<GroupInput>,
    /// Rack name → the bindings fed for it.
    fed: HashMap<String, Vec<Binding>>,
    /// Coordinate → the rack whose binding the allocator holds there.
    holders: HashMap<Coordinate, String>,
    /// Racks whose spec or existence changed since the last sync.
    dirty_racks: HashSet<String>,
    last: SyncWork,
}

impl LiveAllocation {
    /// Notes a rack whose bindings may have changed (any spec change,
    /// create or delete).
    pub fn rack_changed(&mut self, name: &str) {
        if self.allocator.is_some() {
            self.dirty_racks.insert(name.to_string());
        }
    }

    pub fn last_sync(&self) -> SyncWork {
        self.last
    }

    /// The allocation for `groups`, the catalog's Nodes and the cached
    /// racks' bindings.
    pub fn allocation(
        &mut self,
        groups: Vec<GroupInput>,
        catalog: &mut NodeCatalog,
        racks: &CachedStore<SGPURack>,
    ) -> Result<Allocation, AllocationError> {
        let changed_uids = catalog.take_changed();
        if self.allocator.is_some() {
            match self.feed(groups.clone(), &changed_uids, catalog, racks) {
                Ok(changes) => {
                    self.last = SyncWork {
                        rebuilt: false,
                        changes,
                    };
                    if let Some(allocator) = &self.allocator {
                        return Ok(allocator.allocation().clone());
                    }
                }
                Err(()) => self.allocator = None,
            }
        }
        self.rebuild(groups, catalog, racks)
    }

    fn rebuild(
        &mut self,
        groups: Vec<GroupInput>,
        catalog: &mut NodeCatalog,
        racks: &CachedStore<SGPURack>,
    ) -> Result<Allocation, AllocationError> {
        self.fed.clear();
        self.holders.clear();
        self.dirty_racks.clear();
        self.last = SyncWork {
            rebuilt: true,
            changes: 0,
        };
        let mut bindings = Vec::new();
        for rack in racks.state() {
            let name = rack.metadata.name.clone().unwrap_or_default();
            let fed = rack_bindings(&rack);
            for binding in &fed {
                self.holders.insert(coordinate(binding), name.clone());
            }
            bindings.extend(fed.iter().cloned());
            self.fed.insert(name, fed);
        }
        let input = AllocationInput {
            groups: groups.clone(),
            nodes: catalog.snapshot().as_ref().clone(),
            bindings,
        };
        match Allocator::new(&input) {
            Ok(allocator) => {
                let allocation = allocator.allocation().clone();
                self.allocator = Some(allocator);
                self.groups = groups;
                Ok(allocation)
            }
            Err(error) => {
                // Stay unbuilt: the next plan starts from scratch again.
                self.allocator = None;
                Err(error)
            }
        }
    }

    /// Feeds the changes to the allocator as one batch; `Err` means the
    /// allocator cannot represent the new input and must be rebuilt (the
    /// bookkeeping is then discarded with it, so it is edited in place).
    fn feed(
        &mut self,
        groups: Vec<GroupInput>,
        changed_uids: &HashSet<String>,
        catalog: &NodeCatalog,
        racks: &CachedStore<SGPURack>,
    ) -> Result<usize, ()> {
        let mut changes = Vec::new();
        if groups != self.groups {
            changes.push(Change::SetGroups(groups.clone()));
        }
        for uid in changed_uids {
            match catalog.by_uid(uid) {
                Some(node) => changes.push(Change::UpsertNode(node.clone())),
                None => changes.push(Change::RemoveNode { uid: uid.clone() }),
            }
        }
        for name in std::mem::take(&mut self.dirty_racks) {
            let old = self.fed.remove(&name).unwrap_or_default();
            let new = racks
                .get(&name)
                .map(|rack| rack_bindings(&rack))
                .unwrap_or_default();
            let new_coordinates: HashSet<Coordinate> = new.iter().map(coordinate).collect();
            for binding in &old {
                let at = coordinate(binding);
                if !new_coordinates.contains(&at) && self.holders.get(&at) == Some(&name) {
                    self.holders.remove(&at);
                    changes.push(Change::Unbind {
                        group: at.0,
                        rack_index: at.1,
                        node_index: at.2,
                    });
                }
            }
            let old_bindings: HashSet<&Binding> = old.iter().collect();
            for binding in &new {
                let at = coordinate(binding);
                if self.holders.get(&at).is_some_and(|holder| *holder != name) {
                    // Two racks at one coordinate: `allocate` refuses that input.
                    return Err(());
                }
                self.holders.insert(at, name.clone());
                if !old_bindings.contains(binding) {
                    changes.push(Change::Bind(binding.clone()));
                }
            }
            if !new.is_empty() {
                self.fed.insert(name, new);
            }
        }
        let count = changes.len();
        if count > 0 {
            let Some(allocator) = self.allocator.as_mut() else {
                return Err(());
            };
            allocator.apply(changes).map_err(|_| ())?;
        }
        self.groups = groups;
        Ok(count)
    }
}
