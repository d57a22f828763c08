//! What the sandbox knows about the fleet: watch caches of the objects the
//! device plugin, the demo and the fleet view read, fed from the API
//! server like any controller's, and one change counter that wakes the
//! readers (the fleet view's server-sent events) when any of them moves.

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
        };
        state.count_changes();
        Ok(state)
    }

    /// Every change of any cached object bumps the counter.
    fn count_changes(&self) {
        fn attach<K: controller_kit::caches::CachedObject>(
            store: &CachedStore<K>,
            changes: &watch::Sender<u64>,
        ) {
            let changes = changes.clone();
            store.attach(Arc::new(move |_| {
                changes.send_modify(|count| *count += 1);
            }));
        }
        attach(&self.nodes, &self.changes);
        attach(&self.racks, &self.changes);
        attach(&self.inventories, &self.changes);
        attach(&self.profiles, &self.changes);
        attach(&self.policies, &self.changes);
        attach(&self.pods, &self.changes);
        attach(&self.tfjobs, &self.changes);
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
