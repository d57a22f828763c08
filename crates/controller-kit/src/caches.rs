//! Process-lifetime caches: kube-runtime reflector stores fed by watchers, with optional
//! transforms, secondary indexes and attachable event handlers.
//!
//! Caches run for the whole life of the process, on every replica. Reads are served
//! from the stores with no API call. Leader work attaches handlers to the warm stores
//! on promotion (every cached object is replayed to the handler) and detaches them on
//! demotion, while the caches keep running.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch_stream};
use parking_lot::{Mutex, RwLock};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::readiness::Readiness;

/// The object kinds a cache can hold: cluster types with static type information.
pub trait CachedObject:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
}
impl<K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static>
    CachedObject for K
{
}

/// Cache setup or run failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Stores must be added before the caches run.
    #[error("cannot add store {store:?}: the caches are already running")]
    AlreadyRunning {
        /// The store that came too late.
        store: String,
    },
    /// `run` was called twice.
    #[error("the caches were started twice")]
    StartedTwice,
}

/// Shrinks an object before it is stored (for example drops spec, status, managed fields).
pub type Transform<K> = Arc<dyn Fn(&mut K) + Send + Sync>;
/// Computes the values under which an object is found in one secondary index.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// Options of one store.
pub struct StoreOptions<K> {
    transform: Option<Transform<K>>,
    indexes: Vec<(String, IndexFn<K>)>,
}

impl<K> Default for StoreOptions<K> {
    fn default() -> Self {
        Self {
            transform: None,
            indexes: Vec::new(),
        }
    }
}

impl<K> StoreOptions<K> {
    /// Applies `transform` to every object before it is stored and handed to handlers.
    pub fn transform(mut self, transform: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        self.transform = Some(Arc::new(transform));
        self
    }

    /// Adds a secondary index `name`: objects are found by every value `values` returns.
    pub fn index(
        mut self,
        name: impl Into<String>,
        values: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.indexes.push((name.into(), Arc::new(values)));
        self
    }
}

/// A change delivered to an attached handler.
#[derive(Debug)]
pub enum ObjectEvent<K> {
    /// The object was added or changed (or replayed when the handler attached).
    Applied(Arc<K>),
    /// The object was deleted (the last state the cache held).
    Deleted(Arc<K>),
}

impl<K> ObjectEvent<K> {
    /// The object, whichever the change.
    pub fn object(&self) -> &Arc<K> {
        match self {
            Self::Applied(object) | Self::Deleted(object) => object,
        }
    }
}

/// A handler receiving the changes of one store; it runs on the cache task, so keep it
/// quick (typically it only adds keys to a queue).
pub type Handler<K> = Arc<dyn Fn(&ObjectEvent<K>) + Send + Sync>;

/// Identifies an attached handler for [`CachedStore::detach`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HandlerId(u64);

/// Secondary indexes of one store: index → value → objects.
///
/// An object's reference is held once (`Arc`) however many values name it,
/// and each value's text once, shared by both maps. A rack names about 100
/// Nodes by name and by UID; a whole `ObjectRef` copy (name, namespace,
/// resourceVersion, UID) in a one-element `HashSet` per value was about
/// 0.7 KB each, most of the indexes' memory (docs/benchmarks.md, issue #29).
/// A value names few objects, so they are kept in a `Vec`.
struct IndexTable<K: CachedObject> {
    functions: Vec<(String, IndexFn<K>)>,
    /// By the position of the index function: value → the objects it names.
    entries: Vec<ObjectsByValue<K>>,
    /// Each indexed object's (index position, value) pairs.
    values_of: HashMap<SharedRef<K>, Vec<(usize, Arc<str>)>>,
}

/// One reference per cached object, shared by every value naming it.
type SharedRef<K> = Arc<ObjectRef<K>>;

/// One index: value → the objects it names.
type ObjectsByValue<K> = HashMap<Arc<str>, Vec<SharedRef<K>>>;

impl<K: CachedObject> IndexTable<K> {
    fn new(functions: Vec<(String, IndexFn<K>)>) -> Self {
        let entries = functions.iter().map(|_| HashMap::new()).collect();
        Self {
            functions,
            entries,
            values_of: HashMap::new(),
        }
    }

    fn empty_like(&self) -> Self {
        Self::new(self.functions.clone())
    }

    fn upsert(&mut self, object: &K) {
        if self.functions.is_empty() {
            return;
        }
        let object_ref = Arc::new(ObjectRef::from_obj(object));
        self.remove(&object_ref);
        let mut values = Vec::new();
        for (position, (_, function)) in self.functions.iter().enumerate() {
            let Some(by_value) = self.entries.get_mut(position) else {
                continue;
            };
            for value in function(object) {
                let value: Arc<str> = match by_value.get_key_value(value.as_str()) {
                    Some((known, _)) => Arc::clone(known),
                    None => Arc::from(value),
                };
                let refs = by_value.entry(Arc::clone(&value)).or_default();
                if !refs.contains(&object_ref) {
                    refs.push(Arc::clone(&object_ref));
                }
                values.push((position, value));
            }
        }
        self.values_of.insert(object_ref, values);
    }

    fn remove(&mut self, object_ref: &ObjectRef<K>) {
        let Some(values) = self.values_of.remove(object_ref) else {
            return;
        };
        for (position, value) in values {
            if let Some(by_value) = self.entries.get_mut(position)
                && let Some(refs) = by_value.get_mut(&*value)
            {
                refs.retain(|known| **known != *object_ref);
                if refs.is_empty() {
                    by_value.remove(&*value);
                }
            }
        }
    }

    fn lookup(&self, index: &str, value: &str) -> Vec<ObjectRef<K>> {
        self.functions
            .iter()
            .position(|(name, _)| name == index)
            .and_then(|position| self.entries.get(position))
            .and_then(|by_value| by_value.get(value))
            .map(|refs| refs.iter().map(|known| known.as_ref().clone()).collect())
            .unwrap_or_default()
    }
}

struct Handlers<K> {
    next_id: u64,
    attached: Vec<(HandlerId, Handler<K>)>,
}

/// A read handle to one cached kind. Cheap to clone; reads never call the API.
pub struct CachedStore<K: CachedObject> {
    name: Arc<str>,
    store: Store<K>,
    indexes: Arc<RwLock<IndexTable<K>>>,
    handlers: Arc<Mutex<Handlers<K>>>,
}

impl<K: CachedObject> Clone for CachedStore<K> {
    fn clone(&self) -> Self {
        Self {
            name: Arc::clone(&self.name),
            store: self.store.clone(),
            indexes: Arc::clone(&self.indexes),
            handlers: Arc::clone(&self.handlers),
        }
    }
}

impl<K: CachedObject> CachedStore<K> {
    /// The store's name (for logs).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The underlying kube-runtime store.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The cached object `name` (cluster-scoped kinds).
    pub fn get(&self, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name))
    }

    /// The cached object `namespace/name`.
    pub fn get_namespaced(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.store.get(&ObjectRef::new(name).within(namespace))
    }

    /// Every cached object.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.store.is_empty()
    }

    /// The objects whose `index` values include `value`.
    pub fn by_index(&self, index: &str, value: &str) -> Vec<Arc<K>> {
        let refs = self.indexes.read().lookup(index, value);
        refs.iter()
            .filter_map(|object_ref| self.store.get(object_ref))
            .collect()
    }

    /// Attaches `handler` and replays every cached object to it as `Applied`.
    ///
    /// Replay and later events are delivered under one lock, so no change between the
    /// snapshot and the attachment is lost (a change may at most be seen twice).
    pub fn attach(&self, handler: Handler<K>) -> HandlerId {
        let mut handlers = self.handlers.lock();
        let id = HandlerId(handlers.next_id);
        handlers.next_id += 1;
        for object in self.store.state() {
            handler(&ObjectEvent::Applied(object));
        }
        handlers.attached.push((id, handler));
        id
    }

    /// Detaches a handler; it receives nothing after this returns.
    pub fn detach(&self, id: HandlerId) {
        self.handlers
            .lock()
            .attached
            .retain(|(attached, _)| *attached != id);
    }

    /// How many handlers are attached.
    pub fn attached_handlers(&self) -> usize {
        self.handlers.lock().attached.len()
    }

    fn dispatch(&self, event: &ObjectEvent<K>) {
        let handlers = self.handlers.lock();
        for (_, handler) in &handlers.attached {
            handler(event);
        }
    }

    fn has_handlers(&self) -> bool {
        !self.handlers.lock().attached.is_empty()
    }
}

type StoreRunner =
    Box<dyn FnOnce(CancellationToken, Arc<SyncTracker>) -> BoxFuture<'static, ()> + Send>;

/// Counts stores that have synced and publishes "all synced".
struct SyncTracker {
    expected: usize,
    synced: AtomicUsize,
    all_synced: watch::Sender<bool>,
    cache_ready: Arc<AtomicBool>,
    readiness: Option<Readiness>,
}

impl SyncTracker {
    fn store_synced(&self) {
        let synced = self.synced.fetch_add(1, Ordering::SeqCst) + 1;
        if synced == self.expected {
            self.set_ready(true);
            self.all_synced.send_replace(true);
        }
    }

    fn set_ready(&self, ready: bool) {
        self.cache_ready.store(ready, Ordering::SeqCst);
        if let Some(readiness) = &self.readiness {
            readiness.set_cache_ready(ready);
        }
    }
}

struct CachesInner {
    runners: Mutex<Option<Vec<(String, StoreRunner)>>>,
    all_synced: watch::Sender<bool>,
    cache_ready: Arc<AtomicBool>,
    readiness: Option<Readiness>,
    /// Watch events applied to all stores, for tests and benchmarks.
    events_applied: Arc<AtomicU64>,
}

/// The set of process-lifetime stores. Cheap to clone.
#[derive(Clone)]
pub struct Caches {
    inner: Arc<CachesInner>,
}

impl Default for Caches {
    fn default() -> Self {
        Self::new()
    }
}

impl Caches {
    /// An empty set of caches.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// An empty set of caches that reports cache readiness into `readiness`.
    pub fn with_readiness(readiness: Readiness) -> Self {
        Self::build(Some(readiness))
    }

    fn build(readiness: Option<Readiness>) -> Self {
        Self {
            inner: Arc::new(CachesInner {
                runners: Mutex::new(Some(Vec::new())),
                all_synced: watch::channel(false).0,
                cache_ready: Arc::new(AtomicBool::new(false)),
                readiness,
                events_applied: Arc::new(AtomicU64::new(0)),
            }),
        }
    }

    /// Adds a store of every `K` that `api` lists and watches with `config`.
    pub fn add<K: CachedObject>(
        &self,
        name: impl Into<String>,
        api: Api<K>,
        config: watcher::Config,
        options: StoreOptions<K>,
    ) -> Result<CachedStore<K>, CacheError> {
        let name = name.into();
        let mut runners = self.inner.runners.lock();
        let Some(runners) = runners.as_mut() else {
            return Err(CacheError::AlreadyRunning { store: name });
        };
        let writer: Writer<K> = Writer::default();
        let cached = CachedStore {
            name: Arc::from(name.as_str()),
            store: writer.as_reader(),
            indexes: Arc::new(RwLock::new(IndexTable::new(options.indexes))),
            handlers: Arc::new(Mutex::new(Handlers {
                next_id: 0,
                attached: Vec::new(),
            })),
        };
        let feed = StoreFeed {
            cached: cached.clone(),
            writer,
            transform: options.transform,
            pending_indexes: None,
            events_applied: Arc::clone(&self.inner.events_applied),
        };
        let runner: StoreRunner =
            Box::new(move |cancel, tracker| run_store(feed, api, config, cancel, tracker).boxed());
        runners.push((name, runner));
        Ok(cached)
    }

    /// Runs every store until `cancel`; sets cache readiness once all have synced and
    /// clears it when they stop. Watch errors are retried with kube's default backoff.
    pub async fn run(&self, cancel: CancellationToken) -> Result<(), CacheError> {
        let runners = self
            .inner
            .runners
            .lock()
            .take()
            .ok_or(CacheError::StartedTwice)?;
        let tracker = Arc::new(SyncTracker {
            expected: runners.len(),
            synced: AtomicUsize::new(0),
            all_synced: self.inner.all_synced.clone(),
            cache_ready: Arc::clone(&self.inner.cache_ready),
            readiness: self.inner.readiness.clone(),
        });
        if runners.is_empty() {
            tracker.set_ready(true);
            tracker.all_synced.send_replace(true);
        }
        futures::future::join_all(runners.into_iter().map(|(name, runner)| {
            tracing::debug!(store = %name, "starting cache");
            runner(cancel.clone(), Arc::clone(&tracker))
        }))
        .await;
        tracker.set_ready(false);
        Ok(())
    }

    /// Resolves once every store has synced (at once if that already happened).
    pub async fn caches_synced(&self) {
        let mut synced = self.inner.all_synced.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = synced.wait_for(|synced| *synced).await;
    }

    /// True while the synced caches run.
    pub fn cache_ready(&self) -> bool {
        self.inner.cache_ready.load(Ordering::SeqCst)
    }

    /// Watch events applied so far across all stores.
    pub fn events_applied(&self) -> u64 {
        self.inner.events_applied.load(Ordering::Relaxed)
    }
}

/// Everything one store's task owns.
struct StoreFeed<K: CachedObject> {
    cached: CachedStore<K>,
    writer: Writer<K>,
    transform: Option<Transform<K>>,
    /// Indexes being rebuilt during a (re)list, swapped in at `InitDone`.
    pending_indexes: Option<IndexTable<K>>,
    events_applied: Arc<AtomicU64>,
}

impl<K: CachedObject> StoreFeed<K> {
    /// Applies one watch event to store, indexes and handlers; returns true on `InitDone`.
    pub(crate) fn apply(&mut self, mut event: Event<K>) -> bool {
        if let Some(transform) = &self.transform {
            match &mut event {
                Event::Apply(object) | Event::Delete(object) | Event::InitApply(object) => {
                    transform(object)
                }
                Event::Init | Event::InitDone => {}
            }
        }
        self.events_applied.fetch_add(1, Ordering::Relaxed);
        match &event {
            Event::Apply(object) => {
                self.writer.apply_watcher_event(&event);
                self.cached.indexes.write().upsert(object);
                if self.cached.has_handlers()
                    && let Some(stored) = self.cached.store.get(&ObjectRef::from_obj(object))
                {
                    self.cached.dispatch(&ObjectEvent::Applied(stored));
                }
                false
            }
            Event::Delete(object) => {
                let object_ref = ObjectRef::from_obj(object);
                let last_state = self.cached.store.get(&object_ref);
                self.writer.apply_watcher_event(&event);
                self.cached.indexes.write().remove(&object_ref);
                if self.cached.has_handlers() {
                    let deleted = last_state.unwrap_or_else(|| Arc::new(object.clone()));
                    self.cached.dispatch(&ObjectEvent::Deleted(deleted));
                }
                false
            }
            Event::Init => {
                self.writer.apply_watcher_event(&event);
                self.pending_indexes = Some(self.cached.indexes.read().empty_like());
                false
            }
            Event::InitApply(object) => {
                self.writer.apply_watcher_event(&event);
                if let Some(pending) = self.pending_indexes.as_mut() {
                    pending.upsert(object);
                }
                false
            }
            Event::InitDone => {
                let before: Option<HashMap<ObjectRef<K>, Arc<K>>> =
                    self.cached.has_handlers().then(|| {
                        self.cached
                            .store
                            .state()
                            .into_iter()
                            .map(|object| (ObjectRef::from_obj(object.as_ref()), object))
                            .collect()
                    });
                self.writer.apply_watcher_event(&event);
                if let Some(pending) = self.pending_indexes.take() {
                    *self.cached.indexes.write() = pending;
                }
                if let Some(mut before) = before {
                    // A relist replays every object and reports those that vanished meanwhile.
                    for object in self.cached.store.state() {
                        before.remove(&ObjectRef::from_obj(object.as_ref()));
                        self.cached.dispatch(&ObjectEvent::Applied(object));
                    }
                    for (_, vanished) in before {
                        self.cached.dispatch(&ObjectEvent::Deleted(vanished));
                    }
                }
                true
            }
        }
    }
}

async fn run_store<K: CachedObject>(
    mut feed: StoreFeed<K>,
    api: Api<K>,
    config: watcher::Config,
    cancel: CancellationToken,
    tracker: Arc<SyncTracker>,
) {
    let stream = watch_stream(api, config).default_backoff();
    futures::pin_mut!(stream);
    let mut synced = false;
    loop {
        let next = tokio::select! {
            () = cancel.cancelled() => break,
            next = stream.next() => next,
        };
        match next {
            Some(Ok(event)) => {
                if feed.apply(event) && !synced {
                    synced = true;
                    tracing::info!(
                        store = feed.cached.name(),
                        objects = feed.cached.len(),
                        "cache synced"
                    );
                    tracker.store_synced();
                }
            }
            Some(Err(error)) => {
                // Retried by the backoff; logged because it reveals RBAC or CRD problems.
                tracing::warn!(store = feed.cached.name(), %error, "cache watch failed; retrying");
            }
            None => break,
        }
    }
}

/// A store filled directly from watch events, with no API server (for benchmarks and
/// unit tests of transforms and indexes).
pub struct DetachedStore<K: CachedObject> {
    feed: StoreFeed<K>,
}

impl<K: CachedObject> DetachedStore<K> {
    /// A store with `options`, fed only through [`DetachedStore::apply`].
    pub fn new(name: &str, options: StoreOptions<K>) -> Self {
        let writer: Writer<K> = Writer::default();
        let cached = CachedStore {
            name: Arc::from(name),
            store: writer.as_reader(),
            indexes: Arc::new(RwLock::new(IndexTable::new(options.indexes))),
            handlers: Arc::new(Mutex::new(Handlers {
                next_id: 0,
                attached: Vec::new(),
            })),
        };
        Self {
            feed: StoreFeed {
                cached,
                writer,
                transform: options.transform,
                pending_indexes: None,
                events_applied: Arc::new(AtomicU64::new(0)),
            },
        }
    }

    /// Applies one watch event exactly as a running cache would.
    pub fn apply(&mut self, event: Event<K>) {
        self.feed.apply(event);
    }

    /// The read handle.
    pub fn reader(&self) -> CachedStore<K> {
        self.feed.cached.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Node, NodeSpec};
    use kube::api::ObjectMeta;
    use std::collections::BTreeMap;

    fn node(name: &str, uid: &str, labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                uid: Some(uid.to_string()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some("sim://node".to_string()),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn by_uid(node: &Node) -> Vec<String> {
        node.metadata.uid.iter().cloned().collect()
    }

    #[test]
    fn transform_strips_fields_before_the_object_is_stored() {
        let mut store = DetachedStore::new(
            "nodes",
            StoreOptions::default().transform(|node: &mut Node| node.spec = None),
        );
        store.apply(Event::Apply(node("n1", "u1", &[])));
        let cached = store.reader().get("n1").unwrap();
        assert!(cached.spec.is_none());
        assert_eq!(cached.metadata.uid.as_deref(), Some("u1"));
    }

    #[test]
    fn secondary_index_follows_updates_deletes_and_relists() {
        let mut store = DetachedStore::new(
            "nodes",
            StoreOptions::default()
                .index("uid", by_uid)
                .index("rack", |node: &Node| {
                    node.metadata
                        .labels
                        .as_ref()
                        .and_then(|labels| labels.get("rack"))
                        .cloned()
                        .into_iter()
                        .collect()
                }),
        );
        let reader = store.reader();
        store.apply(Event::Apply(node("n1", "u1", &[("rack", "r1")])));
        store.apply(Event::Apply(node("n2", "u2", &[("rack", "r1")])));
        assert_eq!(reader.by_index("rack", "r1").len(), 2);
        assert_eq!(
            reader.by_index("uid", "u2")[0].metadata.name.as_deref(),
            Some("n2")
        );

        // n1 moves racks: the old value no longer finds it.
        store.apply(Event::Apply(node("n1", "u1", &[("rack", "r2")])));
        assert_eq!(reader.by_index("rack", "r1").len(), 1);
        assert_eq!(reader.by_index("rack", "r2").len(), 1);

        store.apply(Event::Delete(node("n2", "u2", &[("rack", "r1")])));
        assert!(reader.by_index("rack", "r1").is_empty());
        assert!(reader.by_index("uid", "u2").is_empty());

        // A relist replaces everything at InitDone, indexes included.
        store.apply(Event::Init);
        store.apply(Event::InitApply(node("n3", "u3", &[("rack", "r9")])));
        assert_eq!(
            reader.by_index("rack", "r2").len(),
            1,
            "old index served until InitDone"
        );
        store.apply(Event::InitDone);
        assert!(reader.by_index("rack", "r2").is_empty());
        assert_eq!(reader.by_index("rack", "r9").len(), 1);
        assert!(reader.by_index("no-such-index", "x").is_empty());
    }

    #[test]
    fn an_object_named_by_many_values_is_referenced_once_and_each_value_stored_once() {
        let labels = |node: &Node| -> Vec<String> {
            let mut values: Vec<String> = node
                .metadata
                .labels
                .iter()
                .flatten()
                .map(|(_, v)| v.clone())
                .collect();
            // A value named twice by one object finds it once.
            values.extend(values.first().cloned());
            values
        };
        let mut table = IndexTable::new(vec![(
            "label".to_string(),
            Arc::new(labels) as IndexFn<Node>,
        )]);
        table.upsert(&node("n1", "u1", &[("a", "x"), ("b", "y"), ("c", "z")]));
        table.upsert(&node("n2", "u2", &[("a", "x")]));
        let (n1, values) = table
            .values_of
            .iter()
            .find(|(object, _)| object.name == "n1")
            .unwrap();
        // One reference, held by the three values and by `values_of`.
        assert_eq!(Arc::strong_count(n1), 4);
        for (position, value) in values {
            let (key, _) = table.entries[*position].get_key_value(&**value).unwrap();
            assert!(Arc::ptr_eq(key, value), "the value's text is shared");
        }
        assert_eq!(
            table
                .lookup("label", "x")
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>(),
            ["n1", "n2"]
        );
        table.remove(&ObjectRef::from_obj(&node("n1", "u1", &[])));
        assert_eq!(table.lookup("label", "x").len(), 1);
        assert!(table.lookup("label", "y").is_empty());
        assert_eq!(table.entries[0].len(), 1);
    }

    #[test]
    fn attaching_a_handler_replays_the_cache_then_streams_changes() {
        let mut store: DetachedStore<ConfigMap> =
            DetachedStore::new("configmaps", StoreOptions::default());
        let reader = store.reader();
        let config_map = |name: &str| ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("ns".to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        store.apply(Event::Apply(config_map("a")));
        store.apply(Event::Apply(config_map("b")));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let handler: Handler<ConfigMap> = {
            let seen = Arc::clone(&seen);
            Arc::new(move |event: &ObjectEvent<ConfigMap>| {
                let kind = match event {
                    ObjectEvent::Applied(_) => "applied",
                    ObjectEvent::Deleted(_) => "deleted",
                };
                seen.lock().push(format!(
                    "{kind} {}",
                    event.object().metadata.name.clone().unwrap_or_default()
                ));
            })
        };
        let id = reader.attach(handler);
        let mut replayed = seen.lock().clone();
        replayed.sort();
        assert_eq!(replayed, vec!["applied a", "applied b"]);

        store.apply(Event::Delete(config_map("a")));
        store.apply(Event::Init);
        store.apply(Event::InitApply(config_map("c")));
        store.apply(Event::InitDone);
        let tail: Vec<String> = seen.lock()[2..].to_vec();
        assert_eq!(tail, vec!["deleted a", "applied c", "deleted b"]);
        assert_eq!(
            reader
                .get_namespaced("ns", "c")
                .map(|cm| cm.metadata.name.clone()),
            Some(Some("c".into()))
        );

        reader.detach(id);
        store.apply(Event::Apply(config_map("d")));
        assert_eq!(seen.lock().len(), 5, "a detached handler receives nothing");
        assert_eq!(reader.attached_handlers(), 0);
    }
}
