//! The object store: every object of every kind, one global resourceVersion,
//! and a bounded per-resource event history that watches resume from.
//!
//! All commits happen under one lock, so the resourceVersion order is the
//! commit order and every watcher sees the same sequence. Creates and
//! patches of plain kinds do their work before taking it (see `update`).

mod crds;
mod delete;
mod durable;
mod list;
mod service_addresses;
mod update;
mod watch;
mod write;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use delete::{DeleteOptions, Propagation};
pub use durable::{DATABASE_FILE, DataDirError};
pub use list::{ListOptions, ListPage};
pub use watch::WatchOptions;
pub use write::{KeptObject, Subresource, WriteParams, WriteScope};

use crate::error::ApiError;
use crate::object::{ObjectKey, StoredObject};
use crate::resources::{GroupResource, Registry, ResourceType};

/// Tunables of one kube-sim instance.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Events kept per resource for watches to resume from; older resumes get 410.
    pub history_per_resource: usize,
    /// How often an idle watch with bookmarks enabled receives a BOOKMARK.
    pub bookmark_interval: Duration,
    /// How long a paged list's snapshot stays available to `continue` tokens.
    pub snapshot_ttl: Duration,
    /// Pods bound to a node are deleted gracefully (deletionTimestamp plus
    /// grace period) and removed by the kubelet, as in a real cluster. Off
    /// when no simulated kubelet runs, so deletions complete at once.
    pub graceful_pod_deletion: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            history_per_resource: 10_000,
            bookmark_interval: Duration::from_secs(60),
            snapshot_ttl: Duration::from_secs(300),
            graceful_pod_deletion: true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// One committed change, as watches replay it.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub change: ChangeType,
    pub object: Arc<StoredObject>,
    /// The state before a modification, used to turn selector transitions
    /// into ADDED/DELETED the way the real watch cache does.
    pub previous: Option<Arc<StoredObject>>,
}

pub(crate) struct ResourceStore {
    pub objects: BTreeMap<ObjectKey, Arc<StoredObject>>,
    history: VecDeque<Arc<Change>>,
    /// Events at or below this resourceVersion may have been dropped.
    compacted_rv: u64,
    notify: tokio::sync::watch::Sender<u64>,
    /// Distinguishes a re-created CRD's store from the one before it.
    epoch: u64,
}

impl ResourceStore {
    fn new(epoch: u64) -> Self {
        Self {
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            compacted_rv: 0,
            notify: tokio::sync::watch::Sender::new(0),
            epoch,
        }
    }
}

pub(crate) struct State {
    rv: u64,
    history_limit: usize,
    pub registry: Registry,
    resources: HashMap<GroupResource, ResourceStore>,
    /// Stores of deleted CRDs, kept while watchers still drain their last
    /// events (the DELETED events of the CRD's objects).
    retired: Vec<(GroupResource, ResourceStore)>,
    next_epoch: u64,
    graceful_pod_deletion: bool,
    /// Where each object lives, by uid (owners are referenced by uid).
    by_uid: HashMap<String, (GroupResource, ObjectKey)>,
    /// Dependents of each owner uid, for garbage collection.
    dependents: HashMap<String, BTreeSet<(GroupResource, ObjectKey)>>,
    /// The on-disk copy (`--data-dir`); every commit is written to it
    /// before memory changes, and a write it refuses is not acknowledged.
    journal: Option<durable::Journal>,
    /// The store was opened on a data directory; once its journal is closed
    /// (shutdown) writes are refused instead of silently staying in memory.
    durable: bool,
    /// Cluster IPs and node ports held by Services; learnt on first use.
    service_addresses: Option<service_addresses::ServiceAddresses>,
    /// Bumped on every commit to `admissionregistration.k8s.io`.
    admission_epoch: Arc<AtomicU64>,
}

/// Counters a test or benchmark can read to see what the server did.
#[derive(Debug, Default)]
pub struct Stats {
    pub writes: AtomicU64,
    pub lists: AtomicU64,
    pub watches_started: AtomicU64,
    /// In-stream 410 `Expired` events sent to watches that fell behind.
    pub watch_expired: AtomicU64,
    pub bookmarks: AtomicU64,
    /// Nodes the simulated kubelet's node loop examined (status and lease),
    /// so a test can see it looks at changed and due Nodes only.
    pub kubelet_node_syncs: AtomicU64,
    /// Pods the simulated kubelet's pod loop synced, likewise.
    pub kubelet_pod_syncs: AtomicU64,
}

pub struct Store {
    state: Mutex<State>,
    snapshots: Mutex<list::Snapshots>,
    pub config: StoreConfig,
    pub shutdown: CancellationToken,
    pub stats: Stats,
    /// See [`Store::admission_epoch`]; the state bumps it on commit.
    admission_epoch: Arc<AtomicU64>,
}

impl Store {
    /// An in-memory store: nothing survives the process.
    pub fn new(config: StoreConfig) -> Arc<Self> {
        let store = Self::build(config, None);
        store.seed_namespaces();
        store
    }

    /// A store kept in `dir` (created when missing): what it held is read
    /// back, resourceVersions continue where they stopped, and every later
    /// commit reaches the database before it is acknowledged. A directory
    /// holding anything else, or a database that is not ours or is corrupt,
    /// is refused and left as it was.
    pub fn open(config: StoreConfig, dir: &std::path::Path) -> Result<Arc<Self>, DataDirError> {
        let (journal, restored) = durable::Journal::open(dir)?;
        let fresh = restored.rows.is_empty() && restored.rv == 0;
        let store = Self::build(config, Some(journal));
        if fresh {
            store.seed_namespaces();
        } else {
            store.state.lock().restore(restored, dir)?;
        }
        Ok(store)
    }

    fn build(config: StoreConfig, journal: Option<durable::Journal>) -> Arc<Self> {
        let registry = Registry::with_builtins();
        let resources = registry
            .all()
            .filter(|t| t.stored_as.is_none())
            .map(|t| (t.group_resource(), ResourceStore::new(0)))
            .collect();
        let admission_epoch = Arc::new(AtomicU64::new(0));
        Arc::new(Self {
            state: Mutex::new(State {
                rv: 0,
                history_limit: config.history_per_resource,
                registry,
                resources,
                retired: Vec::new(),
                next_epoch: 1,
                graceful_pod_deletion: config.graceful_pod_deletion,
                by_uid: HashMap::new(),
                dependents: HashMap::new(),
                durable: journal.is_some(),
                journal,
                service_addresses: None,
                admission_epoch: admission_epoch.clone(),
            }),
            snapshots: Mutex::new(list::Snapshots::default()),
            config,
            shutdown: CancellationToken::new(),
            stats: Stats::default(),
            admission_epoch,
        })
    }

    fn seed_namespaces(&self) {
        let mut state = self.state.lock();
        let Some(rt) = state.registry.lookup("", "v1", "namespaces") else {
            return;
        };
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let body = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name},
            });
            // The built-in namespaces are valid by construction.
            let scope = WriteScope {
                rt: &rt,
                version: "v1",
                namespace: None,
                params: &WriteParams::system(),
            };
            let _ = state.create(scope, body, write::Ownership::Record);
        }
    }

    /// Closes the data directory (if any) so another store can open it;
    /// writes after this are refused.
    pub fn close_data_dir(&self) {
        self.state.lock().journal = None;
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.state.lock().rv
    }

    pub fn registry(&self) -> Registry {
        self.state.lock().registry.clone()
    }

    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.state.lock().registry.lookup(group, version, plural)
    }

    pub fn get(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let state = self.state.lock();
        let key = (namespace.unwrap_or_default().to_string(), name.to_string());
        state
            .resources
            .get(&rt.storage_key())
            .and_then(|r| r.objects.get(&key))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    /// One stored object, for kube-sim's own readers (admission resolving a
    /// webhook's Service); not counted as a client's request.
    pub(crate) fn object_value(
        &self,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        let gr = GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        };
        let key = (namespace.to_string(), name.to_string());
        let object = self
            .state
            .lock()
            .resources
            .get(&gr)?
            .objects
            .get(&key)
            .cloned();
        object.map(|o| o.value())
    }

    /// Every stored object of a resource (in `namespace` when given), for
    /// kube-sim's own readers; not counted as a client's list.
    pub(crate) fn values_of(
        &self,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
    ) -> Vec<Value> {
        let gr = GroupResource {
            group: group.to_string(),
            resource: resource.to_string(),
        };
        let objects: Vec<Arc<StoredObject>> = {
            let state = self.state.lock();
            let Some(store) = state.resources.get(&gr) else {
                return Vec::new();
            };
            match namespace {
                Some(ns) => store
                    .objects
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((object_ns, _), _)| object_ns == ns)
                    .map(|(_, o)| o.clone())
                    .collect(),
                None => store.objects.values().cloned().collect(),
            }
        };
        objects.iter().map(|o| o.value()).collect()
    }

    /// Changes whenever an admission configuration (webhook or policy) is
    /// written, so the admission layer knows when to read them again
    /// without taking the store's lock on every write.
    pub(crate) fn admission_epoch(&self) -> u64 {
        self.admission_epoch
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The object's JSON as served at `version` (only `apiVersion` differs
    /// between versions of one resource).
    pub fn render(rt: &ResourceType, version: &str, obj: &StoredObject) -> Bytes {
        if let Some(stored) = &rt.stored_as {
            let value = (stored.to_view)(obj.value());
            return serde_json::to_vec(&value)
                .map(Bytes::from)
                .unwrap_or_else(|_| obj.json.clone());
        }
        if version == rt.storage_version {
            return obj.json.clone();
        }
        let mut value = obj.value();
        value["apiVersion"] = Value::String(rt.api_version(version));
        serde_json::to_vec(&value)
            .map(Bytes::from)
            .unwrap_or_else(|_| obj.json.clone())
    }
}

impl State {
    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    /// The live or retired store a watch started on.
    fn store_for_watch(&self, gr: &GroupResource, epoch: u64) -> Option<(&ResourceStore, bool)> {
        if let Some(live) = self.resources.get(gr).filter(|r| r.epoch == epoch) {
            return Some((live, false));
        }
        self.retired
            .iter()
            .find(|(g, r)| g == gr && r.epoch == epoch)
            .map(|(_, r)| (r, true))
    }

    fn resource(&self, rt: &ResourceType) -> Result<&ResourceStore, ApiError> {
        self.resources
            .get(&rt.storage_key())
            .ok_or_else(ApiError::no_such_resource)
    }

    /// Writes a change to the data directory, when there is one.
    fn persist(
        &mut self,
        gr: &GroupResource,
        change: ChangeType,
        object: &StoredObject,
    ) -> Result<(), ApiError> {
        let Some(journal) = self.journal.as_mut() else {
            if self.durable {
                return Err(ApiError::service_unavailable(
                    "kube-sim is shutting down: its data directory is closed",
                ));
            }
            return Ok(());
        };
        journal
            .write(gr, object, change == ChangeType::Deleted)
            .map_err(|e| {
                tracing::error!(dir = %journal.dir().display(), error = %e, "kube-sim: the data directory refused a write");
                ApiError::internal(format!("storing the change in the data directory failed: {e}"))
            })
    }

    /// Loads what a data directory held: CRDs first (they declare the kinds
    /// of the rest), then every other object, with the uid and owner
    /// indexes. The watch history starts empty and compacted at the restored
    /// resourceVersion, so an older watch gets 410 and relists.
    fn restore(
        &mut self,
        restored: durable::Restored,
        dir: &std::path::Path,
    ) -> Result<(), DataDirError> {
        let crd_resource = GroupResource {
            group: "apiextensions.k8s.io".to_string(),
            resource: "customresourcedefinitions".to_string(),
        };
        let (crds, others): (Vec<_>, Vec<_>) = restored
            .rows
            .into_iter()
            .partition(|row| row.resource == crd_resource);
        let mut max_rv = restored.rv;
        for row in crds.into_iter().chain(others) {
            let corrupt = |detail: String| DataDirError::Corrupt {
                dir: dir.to_path_buf(),
                detail,
            };
            let Some(rt) = self.registry.get(&row.resource).cloned() else {
                return Err(corrupt(format!(
                    "it holds {} objects of a kind no stored CustomResourceDefinition declares",
                    row.resource.resource
                )));
            };
            let value: Value = serde_json::from_slice(&row.json).map_err(|e| {
                corrupt(format!(
                    "an object of {} is not JSON: {e}",
                    row.resource.resource
                ))
            })?;
            let stored = StoredObject::from_value(&rt, &value).map_err(|e| {
                corrupt(format!(
                    "an object of {} is unreadable: {e}",
                    row.resource.resource
                ))
            })?;
            max_rv = max_rv.max(stored.rv);
            let is_crd = row.resource == crd_resource;
            let stored = Arc::new(stored);
            let key = stored.key();
            let Some(store) = self.resources.get_mut(&row.resource) else {
                return Err(corrupt(format!("no store for {}", row.resource.resource)));
            };
            store.objects.insert(key.clone(), stored.clone());
            if !stored.uid.is_empty() {
                self.by_uid
                    .insert(stored.uid.clone(), (row.resource.clone(), key.clone()));
            }
            self.index_owners(&row.resource, &key, &[], &stored.owners);
            if is_crd {
                self.register_crd(&stored);
            }
        }
        self.rv = max_rv;
        for store in self.resources.values_mut() {
            store.compacted_rv = max_rv;
            store.notify.send_replace(max_rv);
        }
        Ok(())
    }

    /// Commits a change: updates the object map, appends to the history
    /// (evicting the oldest entry beyond `limit`) and wakes watchers.
    fn record(
        &mut self,
        gr: &GroupResource,
        change: ChangeType,
        object: Arc<StoredObject>,
        previous: Option<Arc<StoredObject>>,
    ) {
        // A create already holds what `allocate` gave it; only updates and
        // deletes change what a Service holds (each a parse of the object,
        // kept off the create path TFJob's headless Services take).
        if gr.group.is_empty()
            && gr.resource == "services"
            && change != ChangeType::Added
            && let Some(addresses) = &mut self.service_addresses
        {
            if let Some(previous) = &previous {
                addresses.release(&previous.value());
            }
            if change != ChangeType::Deleted {
                addresses.hold(&object.value());
            }
        }
        if gr.group == "admissionregistration.k8s.io" {
            self.admission_epoch
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        let limit = self.history_limit;
        let Some(store) = self.resources.get_mut(gr) else {
            return;
        };
        let key = object.key();
        match change {
            ChangeType::Deleted => {
                store.objects.remove(&key);
            }
            _ => {
                store.objects.insert(key.clone(), object.clone());
            }
        }
        let store_limit = limit;
        let rv = object.rv;
        let (old_owners, new_owners) = (
            previous
                .as_ref()
                .map(|p| p.owners.clone())
                .unwrap_or_default(),
            if change == ChangeType::Deleted {
                Vec::new()
            } else {
                object.owners.clone()
            },
        );
        store.history.push_back(Arc::new(Change {
            rv,
            change,
            object,
            previous,
        }));
        while store.history.len() > store_limit.max(1) {
            if let Some(evicted) = store.history.pop_front() {
                store.compacted_rv = evicted.rv;
            }
        }
        store.notify.send_replace(rv);
        self.index_owners(gr, &key, &old_owners, &new_owners);
        if let Some(last) = self.resources.get(gr).and_then(|r| r.history.back()) {
            let uid = last.object.uid.clone();
            if change == ChangeType::Deleted {
                self.by_uid.remove(&uid);
            } else if !uid.is_empty() {
                self.by_uid.insert(uid, (gr.clone(), key));
            }
        }
    }

    fn index_owners(
        &mut self,
        gr: &GroupResource,
        key: &ObjectKey,
        old: &[(String, bool)],
        new: &[(String, bool)],
    ) {
        let entry = (gr.clone(), key.clone());
        for (uid, _) in old {
            if let Some(set) = self.dependents.get_mut(uid) {
                set.remove(&entry);
                if set.is_empty() {
                    self.dependents.remove(uid);
                }
            }
        }
        for (uid, _) in new {
            self.dependents
                .entry(uid.clone())
                .or_default()
                .insert(entry.clone());
        }
    }
}
