//! What the fleet view (and, in the sandbox, the device plugin and the
//! demo) knows about the fleet: watch caches of the objects they read, fed
//! from the API server like any controller's, one change counter that
//! wakes the readers when any of them moves, and the names of what moved
//! since the fleet view last looked ([`FleetState::take_dirty`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use controller_kit::caches::DetachedStore;
use controller_kit::{CachedStore, Caches, StoreOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::runtime::watcher;
use mokka::api::{SGPUInventory, SGPURack, SGPURackProfile, SGPURuntimePolicy};
use tfjob::api::object::TFJobObject;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::model::{Dirty, Sources};
use super::runtime::{Inputs, NodeAssignment, node_assignment};

/// Whether Mokka projected the Node as assigned
/// (`mokka.nvidia.com/sgpu-assigned=true`).
pub fn is_assigned(node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(mokka::api::LABEL_SGPU_ASSIGNED))
        .is_some_and(|value| value == "true")
}

/// Whether the pod belongs to TFJob `job` (the operator's controller
/// owner reference).
pub fn owned_by_tfjob(pod: &Pod, job: &str) -> bool {
    pod.metadata
        .owner_references
        .as_ref()
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|owner| owner.kind == tfjob::api::KIND && owner.name == job)
        })
}

/// The Node's assignment as the device plugin sees it now.
pub fn current_assignment(
    state: &FleetState,
    node: &str,
) -> Result<Option<(NodeAssignment, SGPURackProfile)>, String> {
    let Some(node_object) = state.nodes.get(node) else {
        return Ok(None);
    };
    let uid = node_object.metadata.uid.clone().unwrap_or_default();
    let racks = state.racks.state();
    let inventories = state.inventories.state();
    let policies = state.policies.state();
    let profiles: BTreeMap<String, SGPURackProfile> = state
        .profiles
        .state()
        .iter()
        .filter_map(|p| p.metadata.name.clone().map(|name| (name, (**p).clone())))
        .collect();
    let inputs = Inputs {
        racks: &racks,
        inventories: &inventories,
        profiles: &profiles,
        policies: &policies,
    };
    let Some(assignment) = node_assignment(inputs, node, &uid).map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    let profile = profiles
        .get(&assignment.profile_name)
        .cloned()
        .ok_or_else(|| format!("profile {} is not in the cache", assignment.profile_name))?;
    Ok(Some((assignment, profile)))
}

/// The watched objects. Clones share the same caches.
#[derive(Clone)]
pub struct FleetState {
    pub nodes: CachedStore<Node>,
    pub racks: CachedStore<SGPURack>,
    pub inventories: CachedStore<SGPUInventory>,
    pub profiles: CachedStore<SGPURackProfile>,
    pub policies: CachedStore<SGPURuntimePolicy>,
    pub pods: CachedStore<Pod>,
    pub tfjobs: CachedStore<TFJobObject>,
    /// Whether pods and TFJobs are watched (`gpufleet mokka --ui` watches
    /// only what Mokka's RBAC lets it read; their stores stay empty).
    pub workloads: bool,
    caches: Caches,
    changes: watch::Sender<u64>,
    dirty: Arc<parking_lot::Mutex<Dirty>>,
}

impl FleetState {
    /// Registers the caches; nothing is watched until [`FleetState::run`].
    /// `workloads`: watch pods and TFJobs too.
    pub fn new(client: &kube::Client, workloads: bool) -> anyhow::Result<FleetState> {
        let caches = Caches::new();
        let (changes, _) = watch::channel(0u64);
        let config = watcher::Config::default;
        let nodes = caches.add(
            "sandbox-nodes",
            Api::<Node>::all(client.clone()),
            config(),
            StoreOptions::default().transform(|node: &mut Node| {
                node.metadata.managed_fields = None;
            }),
        )?;
        let racks = caches.add(
            "sandbox-racks",
            Api::<SGPURack>::all(client.clone()),
            config(),
            StoreOptions::default(),
        )?;
        let inventories = caches.add(
            "sandbox-inventories",
            Api::<SGPUInventory>::all(client.clone()),
            config(),
            StoreOptions::default(),
        )?;
        let profiles = caches.add(
            "sandbox-profiles",
            Api::<SGPURackProfile>::all(client.clone()),
            config(),
            StoreOptions::default(),
        )?;
        let policies = caches.add(
            "sandbox-policies",
            Api::<SGPURuntimePolicy>::all(client.clone()),
            config(),
            StoreOptions::default(),
        )?;
        let (pods, tfjobs) = if workloads {
            let pods = caches.add(
                "sandbox-pods",
                Api::<Pod>::all(client.clone()),
                config(),
                StoreOptions::default().transform(|pod: &mut Pod| {
                    pod.metadata.managed_fields = None;
                }),
            )?;
            let tfjobs = caches.add(
                "sandbox-tfjobs",
                Api::<TFJobObject>::all(client.clone()),
                config(),
                StoreOptions::default(),
            )?;
            (pods, tfjobs)
        } else {
            (
                DetachedStore::new("unwatched-pods", StoreOptions::default()).reader(),
                DetachedStore::new("unwatched-tfjobs", StoreOptions::default()).reader(),
            )
        };
        let state = FleetState {
            nodes,
            racks,
            inventories,
            profiles,
            policies,
            pods,
            tfjobs,
            workloads,
            caches,
            changes,
            dirty: Arc::new(parking_lot::Mutex::new(Dirty {
                all: true,
                jobs: true,
                ..Dirty::default()
            })),
        };
        state.count_changes();
        Ok(state)
    }

    /// Every change of any cached object bumps the counter and records
    /// what it can affect in the fleet view.
    fn count_changes(&self) {
        fn attach<K: controller_kit::caches::CachedObject>(
            store: &CachedStore<K>,
            changes: &watch::Sender<u64>,
            dirty: &Arc<parking_lot::Mutex<Dirty>>,
            mark: fn(&K, &mut Dirty),
        ) {
            let changes = changes.clone();
            let dirty = dirty.clone();
            store.attach(Arc::new(move |event| {
                mark(event.object(), &mut dirty.lock());
                changes.send_modify(|count| *count += 1);
            }));
        }
        fn attach_specs<K>(
            store: &CachedStore<K>,
            changes: &watch::Sender<u64>,
            dirty: &Arc<parking_lot::Mutex<Dirty>>,
        ) where
            K: controller_kit::caches::CachedObject + kube::Resource,
        {
            let changes = changes.clone();
            let dirty = dirty.clone();
            let seen = parking_lot::Mutex::new(BTreeMap::<String, (String, i64)>::new());
            store.attach(Arc::new(move |event| {
                let meta = event.object().meta();
                let name = meta.name.clone().unwrap_or_default();
                let now = (
                    meta.uid.clone().unwrap_or_default(),
                    meta.generation.unwrap_or_default(),
                );
                let moved = match event {
                    controller_kit::ObjectEvent::Applied(_) => {
                        seen.lock().insert(name, now.clone()) != Some(now)
                    }
                    controller_kit::ObjectEvent::Deleted(_) => seen.lock().remove(&name).is_some(),
                };
                if moved {
                    dirty.lock().runtime = true;
                }
                changes.send_modify(|count| *count += 1);
            }));
        }
        fn name(meta: &kube::api::ObjectMeta) -> String {
            meta.name.clone().unwrap_or_default()
        }
        let (changes, dirty) = (&self.changes, &self.dirty);
        attach(&self.nodes, changes, dirty, |node, d| {
            d.nodes.insert(name(&node.metadata));
        });
        attach(&self.racks, changes, dirty, |rack, d| {
            d.racks.insert(name(&rack.metadata));
        });
        // These can change any GPU's runtime, or a rack's profile, but only
        // through their spec: Mokka's status writes (many while it renders
        // thousands of racks) leave the generation alone and the view too.
        attach_specs(&self.inventories, changes, dirty);
        attach_specs(&self.profiles, changes, dirty);
        attach_specs(&self.policies, changes, dirty);
        // Only a TFJob's own pods change what the view shows of it (the
        // device-plugin pods, one per Node, do not).
        attach(&self.pods, changes, dirty, |pod, d| {
            if pod
                .metadata
                .owner_references
                .as_ref()
                .is_some_and(|owners| owners.iter().any(|o| o.kind == tfjob::api::KIND))
            {
                d.jobs = true;
            }
        });
        attach(&self.tfjobs, changes, dirty, |_, d| d.jobs = true);
    }

    /// What changed since the last call (everything, the first time).
    pub fn take_dirty(&self) -> Dirty {
        std::mem::take(&mut *self.dirty.lock())
    }

    /// Runs the watches until `cancel`.
    pub async fn run(&self, cancel: CancellationToken) -> anyhow::Result<()> {
        self.caches.run(cancel).await?;
        Ok(())
    }

    pub async fn synced(&self) {
        self.caches.caches_synced().await;
    }

    /// A receiver that sees the counter move on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

impl Sources for FleetState {
    fn racks(&self) -> Vec<Arc<SGPURack>> {
        self.racks.state()
    }
    fn rack(&self, name: &str) -> Option<Arc<SGPURack>> {
        self.racks.get(name)
    }
    fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
    }
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(name)
    }
    fn inventories(&self) -> Vec<Arc<SGPUInventory>> {
        self.inventories.state()
    }
    fn profiles(&self) -> Vec<Arc<SGPURackProfile>> {
        self.profiles.state()
    }
    fn policies(&self) -> Vec<Arc<SGPURuntimePolicy>> {
        self.policies.state()
    }
    fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods.state()
    }
    fn tfjobs(&self) -> Vec<Arc<TFJobObject>> {
        self.tfjobs.state()
    }
}
