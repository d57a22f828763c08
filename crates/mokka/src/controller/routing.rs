//! Event routing: which watch event wakes which queue, following
//! upstream's handlers.
//!
//! Process-lifetime handlers keep the Node catalog and the topology counter
//! current on every replica, leader or not. Write-side handlers exist only
//! while leading; attaching them replays every cached object, so work
//! observed while standby is done after promotion.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::node_meta::NodeMeta;
use controller_kit::ObjectEvent;
use parking_lot::Mutex;

use super::state::Context;
use super::{INDEX_NODE_NAME, Queues};
use crate::allocate::GroupKey;
use crate::api::{SGPUInventory, SGPURack, SGPURackProfile, SGPURuntimePolicy};
use crate::plan::catalog::CatalogNode;
use crate::plan::rack::{controller_owner, owner_matches_inventory_ref};
use crate::selector::PlacementSelector;

/// What makes an object's change relevant to planning: identity,
/// generation (spec), deletion, finalizers and owners. Status-only writes
/// (ours included) leave it unchanged, so they cause no work.
fn fingerprint(meta: &kube::api::ObjectMeta) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.uid.hash(&mut hasher);
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp.is_some().hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    for owner in meta.owner_references.iter().flatten() {
        (&owner.uid, &owner.name, &owner.kind, owner.controller).hash(&mut hasher);
    }
    hasher.finish()
}

/// A policy's status, so a status-only change (someone else's write, or a
/// stale one) is told apart from no change at all.
fn status_fingerprint(policy: &SGPURuntimePolicy) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&policy.status)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// Remembers fingerprints by name; `changed` is true for a new or changed
/// object and for every delete.
#[derive(Default)]
struct Seen(Mutex<HashMap<String, u64>>);

impl Seen {
    fn changed<K: kube::Resource>(&self, event: &ObjectEvent<K>) -> bool {
        let meta = event.object().meta();
        let name = meta.name.clone().unwrap_or_default();
        let mut seen = self.0.lock();
        match event {
            ObjectEvent::Applied(_) => {
                seen.insert(name, fingerprint(meta)) != Some(fingerprint(meta))
            }
            ObjectEvent::Deleted(_) => {
                seen.remove(&name);
                true
            }
        }
    }
}

/// Catalog and topology upkeep, attached once for the process lifetime.
pub(crate) fn attach_process_handlers(context: &Arc<Context>) {
    let weak = Arc::downgrade(context);
    context
        .nodes
        .attach(Arc::new(move |event: &ObjectEvent<NodeMeta>| {
            let Some(context) = weak.upgrade() else {
                return;
            };
            let mut catalog = context.catalog.lock();
            match event {
                ObjectEvent::Applied(node) => {
                    catalog.upsert(node);
                }
                ObjectEvent::Deleted(node) => {
                    catalog.delete(
                        node.metadata.name.as_deref().unwrap_or_default(),
                        node.metadata.uid.as_deref().unwrap_or_default(),
                    );
                }
            }
        }));
    let bump = |context: &Arc<Context>| {
        let weak = Arc::downgrade(context);
        move || {
            if let Some(context) = weak.upgrade() {
                context.topology.fetch_add(1, Ordering::SeqCst);
                context.inputs_changed();
            }
        }
    };
    let on_inventory = bump(context);
    context
        .inventories
        .attach(Arc::new(move |_: &ObjectEvent<SGPUInventory>| {
            on_inventory()
        }));
    let on_profile = bump(context);
    context
        .profiles
        .attach(Arc::new(move |_: &ObjectEvent<SGPURackProfile>| {
            on_profile()
        }));
    let on_rack = bump(context);
    let weak = Arc::downgrade(context);
    // A rack's status-only write (ours, once per projection progress step)
    // changes nothing the allocation reads; bumping the topology for it
    // would recompute the cluster plan thousands of times at scale.
    let seen_racks = Seen::default();
    context
        .racks
        .attach(Arc::new(move |event: &ObjectEvent<SGPURack>| {
            if !seen_racks.changed(event) {
                return;
            }
            if let Some(context) = weak.upgrade() {
                let name = event.object().metadata.name.as_deref().unwrap_or_default();
                context.allocation.lock().rack_changed(name);
            }
            on_rack();
            if let (ObjectEvent::Deleted(rack), Some(context)) = (event, weak.upgrade()) {
                context.forget_rack(rack.metadata.name.as_deref().unwrap_or_default());
            }
        }));
    // Policies never change materialization: they only move the evaluation
    // revision of their target inventories and wake the read API.
    let weak = Arc::downgrade(context);
    context
        .policies
        .attach(Arc::new(move |event: &ObjectEvent<SGPURuntimePolicy>| {
            let Some(context) = weak.upgrade() else {
                return;
            };
            let deleted = matches!(event, ObjectEvent::Deleted(_));
            if !context
                .evaluations
                .observe(event.object(), deleted)
                .is_empty()
            {
                context.inputs_changed();
            }
        }));
}

/// A rack's spec without its bindings, plus its owners: what only a full
/// inventory reconcile repairs when it changes.
fn template_fingerprint(rack: &SGPURack) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&rack.spec.without_bindings())
        .unwrap_or_default()
        .hash(&mut hasher);
    for owner in rack.metadata.owner_references.iter().flatten() {
        (&owner.uid, &owner.name, &owner.kind, owner.controller).hash(&mut hasher);
    }
    hasher.finish()
}

/// Compiled placement selectors per inventory generation, so routing a
/// Node event costs one match per group and no compile.
#[derive(Default)]
struct GroupSelectors(Mutex<HashMap<String, CompiledGroups>>);

/// (inventory generation, each group's ID and compiled selector; an
/// invalid selector matches nothing).
type CompiledGroups = (Option<i64>, Arc<Vec<(String, Option<PlacementSelector>)>>);

impl GroupSelectors {
    /// The groups of `inventory` whose selector matches any of `labels`.
    fn matching(
        &self,
        inventory: &SGPUInventory,
        records: &[Option<&CatalogNode>],
    ) -> Vec<GroupKey> {
        let name = inventory.metadata.name.clone().unwrap_or_default();
        let uid = inventory.metadata.uid.clone().unwrap_or_default();
        let generation = inventory.metadata.generation;
        let compiled = {
            let mut cache = self.0.lock();
            match cache.get(&uid) {
                Some((at, compiled)) if *at == generation => Arc::clone(compiled),
                _ => {
                    let compiled: Arc<Vec<(String, Option<PlacementSelector>)>> = Arc::new(
                        inventory
                            .spec
                            .rack_groups
                            .iter()
                            .map(|group| {
                                let selector = group
                                    .placement
                                    .as_ref()
                                    .and_then(|placement| placement.node_selector.as_ref());
                                (group.id.clone(), PlacementSelector::compile(selector).ok())
                            })
                            .collect(),
                    );
                    cache.insert(uid.clone(), (generation, Arc::clone(&compiled)));
                    compiled
                }
            }
        };
        compiled
            .iter()
            .filter(|(_, selector)| {
                selector.as_ref().is_some_and(|selector| {
                    records
                        .iter()
                        .flatten()
                        .any(|record| selector.matches(&record.input.labels))
                })
            })
            .map(|(group, _)| GroupKey::new(&name, &uid, group))
            .collect()
    }
}

/// A detach function per attached handler, in attachment order.
pub(crate) type Detach = Box<dyn FnOnce() + Send>;

/// Attaches the write-side handlers; each replays its whole store.
pub(crate) fn attach_leader_handlers(context: &Arc<Context>, queues: &Arc<Queues>) -> Vec<Detach> {
    let mut detach: Vec<Detach> = Vec::new();

    // Inventories: the inventory and its status.
    {
        let queues = Arc::clone(queues);
        let seen = Seen::default();
        let id = context
            .inventories
            .attach(Arc::new(move |event: &ObjectEvent<SGPUInventory>| {
                // Status-only updates (our own writes) cause no work.
                if !seen.changed(event) {
                    return;
                }
                let name = event.object().metadata.name.clone().unwrap_or_default();
                queues.inventory(&name);
                queues.inventory_status(&name);
                queues.policy_status(&name);
            }));
        let store = context.inventories.clone();
        detach.push(Box::new(move || store.detach(id)));
    }

    // Profiles: every inventory that references the profile.
    {
        let queues = Arc::clone(queues);
        let inventories = context.inventories.clone();
        let seen = Seen::default();
        let id = context
            .profiles
            .attach(Arc::new(move |event: &ObjectEvent<SGPURackProfile>| {
                if !seen.changed(event) {
                    return;
                }
                let profile = event.object().metadata.name.clone().unwrap_or_default();
                for inventory in inventories.state() {
                    if inventory
                        .spec
                        .rack_groups
                        .iter()
                        .any(|group| group.profile_ref.name == profile)
                    {
                        let name = inventory.metadata.name.clone().unwrap_or_default();
                        queues.inventory(&name);
                        queues.inventory_status(&name);
                        // The profile's shape bounds the policies' indexes.
                        queues.policy_status(&name);
                    }
                }
            }));
        let store = context.profiles.clone();
        detach.push(Box::new(move || store.detach(id)));
    }

    // Policies: a spec change re-evaluates the old and new targets; a
    // status-only change re-checks its target (the reconciler trusts its
    // cache); a change of labels or other metadata routes nothing. Each
    // touched target's inventory status carries the summary.
    {
        let queues = Arc::clone(queues);
        let seen: Mutex<HashMap<String, (u64, u64, String)>> = Mutex::new(HashMap::new());
        let id =
            context
                .policies
                .attach(Arc::new(move |event: &ObjectEvent<SGPURuntimePolicy>| {
                    let policy = event.object();
                    let name = policy.metadata.name.clone().unwrap_or_default();
                    let target = policy.spec.target_ref.name.clone();
                    let spec = fingerprint(&policy.metadata);
                    let status = status_fingerprint(policy);
                    let previous = {
                        let mut seen = seen.lock();
                        match event {
                            ObjectEvent::Applied(_) => {
                                seen.insert(name, (spec, status, target.clone()))
                            }
                            ObjectEvent::Deleted(_) => seen.remove(&name),
                        }
                    };
                    let deleted = matches!(event, ObjectEvent::Deleted(_));
                    match previous {
                        Some((old_spec, old_status, old_target)) if !deleted => {
                            if old_spec != spec || old_target != target {
                                for inventory in [old_target, target] {
                                    queues.policy_status(&inventory);
                                    queues.inventory_status(&inventory);
                                }
                            } else if old_status != status {
                                queues.policy_status(&target);
                            }
                        }
                        _ => {
                            queues.policy_status(&target);
                            queues.inventory_status(&target);
                        }
                    }
                }));
        let store = context.policies.clone();
        detach.push(Box::new(move || store.detach(id)));
    }

    // Racks: the owning and claiming inventories, projections of bound
    // Nodes, rack and inventory status.
    {
        let queues = Arc::clone(queues);
        let weak = Arc::downgrade(context);
        let seen = Seen::default();
        let templates: Mutex<HashMap<String, u64>> = Mutex::new(HashMap::new());
        let id = context
            .racks
            .attach(Arc::new(move |event: &ObjectEvent<SGPURack>| {
                let Some(context) = weak.upgrade() else {
                    return;
                };
                let rack = event.object();
                let name = rack.metadata.name.clone().unwrap_or_default();
                // As upstream: a status-only update only observes the status
                // (the pending-write guard) and refreshes statuses.
                if !seen.changed(event) {
                    if let ObjectEvent::Applied(_) = event {
                        observe_rack_status(&context, rack);
                        queues.rack_status(&name);
                        queues.inventory_status(&rack.spec.inventory_ref.name);
                    }
                    return;
                }
                // As upstream: a change of bindings only (our own writes,
                // mostly) is the rack group's work; a new rack, a changed
                // template or owner, a deletion or a foreign rack wake the full
                // reconcile of every inventory involved (a new rack too: that
                // reconcile's count of missing racks feeds status; the
                // inventory queue folds a burst of creates into one).
                let template = template_fingerprint(rack);
                let previous = {
                    let mut templates = templates.lock();
                    match event {
                        ObjectEvent::Applied(_) => templates.insert(name.clone(), template),
                        ObjectEvent::Deleted(_) => templates.remove(&name),
                    }
                };
                let bindings_only = matches!(event, ObjectEvent::Applied(_))
                    && previous == Some(template)
                    && rack.metadata.deletion_timestamp.is_none()
                    && owner_matches_inventory_ref(rack);
                if bindings_only {
                    queues.group(GroupKey::new(
                        &rack.spec.inventory_ref.name,
                        &rack.spec.inventory_ref.uid,
                        &rack.spec.identity.rack_group,
                    ));
                    queues.inventory_status(&rack.spec.inventory_ref.name);
                } else {
                    let mut inventories = vec![rack.spec.inventory_ref.name.clone()];
                    if let Some(owner) = controller_owner(rack) {
                        inventories.push(owner.name.clone());
                    }
                    if let Some(claimant) = context.claims.lock().get(&name) {
                        inventories.push(claimant.clone());
                    }
                    inventories.sort();
                    inventories.dedup();
                    for inventory in inventories.iter().filter(|name| !name.is_empty()) {
                        queues.inventory(inventory);
                        queues.inventory_status(inventory);
                    }
                }
                for slot in &rack.spec.nodes {
                    if let Some(node) = &slot.node_ref {
                        queues.project(&node.name);
                    }
                }
                if let ObjectEvent::Applied(_) = event {
                    observe_rack_status(&context, rack);
                    queues.rack_status(&name);
                }
            }));
        let store = context.racks.clone();
        detach.push(Box::new(move || store.detach(id)));
    }

    // Nodes: projection of the Node, status of racks bound to it, and, only
    // when an allocation-relevant field changed (our own projection does
    // not wake the rack reconciler), the groups it affects: those of the
    // racks bound to it and those whose selector matches its old or new
    // labels (upstream routes Node events the same way).
    {
        let queues = Arc::clone(queues);
        let weak = Arc::downgrade(context);
        // The catalog's record when it is the same, so the labels are held
        // once (a copy per Node was ~1 KiB of every Node's footprint).
        let last_seen: Mutex<HashMap<String, Arc<CatalogNode>>> = Mutex::new(HashMap::new());
        let selectors = GroupSelectors::default();
        let id = context
            .nodes
            .attach(Arc::new(move |event: &ObjectEvent<NodeMeta>| {
                let Some(context) = weak.upgrade() else {
                    return;
                };
                let node = event.object();
                let name = node.metadata.name.clone().unwrap_or_default();
                queues.project(&name);
                let record = CatalogNode::from_node(node);
                let record = context
                    .catalog
                    .lock()
                    .get(&name)
                    .filter(|known| **known == record)
                    .unwrap_or_else(|| Arc::new(record));
                let (relevant, previous) = {
                    let mut seen = last_seen.lock();
                    match event {
                        ObjectEvent::Applied(_) => {
                            let previous = seen.insert(name.clone(), Arc::clone(&record));
                            (previous.as_ref() != Some(&record), previous)
                        }
                        ObjectEvent::Deleted(_) => (true, seen.remove(&name)),
                    }
                };
                for rack in context.racks.by_index(INDEX_NODE_NAME, &name) {
                    queues.rack_status(rack.metadata.name.as_deref().unwrap_or_default());
                    queues.inventory_status(&rack.spec.inventory_ref.name);
                    if relevant {
                        queues.group(GroupKey::new(
                            &rack.spec.inventory_ref.name,
                            &rack.spec.inventory_ref.uid,
                            &rack.spec.identity.rack_group,
                        ));
                    }
                }
                if relevant {
                    let labels = [Some(&*record), previous.as_deref()];
                    for inventory in context.inventories.state() {
                        for key in selectors.matching(&inventory, &labels) {
                            queues.inventory_status(&key.inventory_name);
                            queues.group(key);
                        }
                    }
                }
            }));
        let store = context.nodes.clone();
        detach.push(Box::new(move || store.detach(id)));
    }
    detach
}

/// Clears a pending rack status write once the cache shows it.
fn observe_rack_status(context: &Context, rack: &SGPURack) {
    let name = rack.metadata.name.clone().unwrap_or_default();
    let mut pending = context.pending_rack_status.lock();
    if let Some(written) = pending.get(&name)
        && rack.status.as_ref() == Some(written)
    {
        pending.remove(&name);
    }
}
