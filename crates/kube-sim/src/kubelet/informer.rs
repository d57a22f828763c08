//! Shared watch caches for the simulated components: kube-runtime
//! reflectors over the in-process client. Each event wakes every interested
//! loop and records, per loop, which objects changed, so a loop can look at
//! those alone instead of the whole cache.

use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::Api;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What changed since a loop last looked.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The cache was (re)listed: anything may have changed, including
    /// objects deleted while the watch was down, which no key names.
    pub all: bool,
    /// Keys of objects applied or deleted: `name` for cluster-scoped
    /// objects, `namespace/name` for namespaced ones.
    pub keys: HashSet<String>,
}

impl Changes {
    fn mark(&mut self, key: String) {
        // Once everything is dirty, single keys add nothing and would only grow.
        if !self.all {
            self.keys.insert(key);
        }
    }

    fn mark_all(&mut self) {
        self.all = true;
        self.keys.clear();
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        !self.all && self.keys.is_empty()
    }
}

/// One consumer loop's view of an informer: a wake-up and its own dirty set,
/// so loops draining at different times do not steal each other's keys.
#[derive(Debug, Default)]
pub struct Subscriber {
    wake: Notify,
    dirty: Mutex<Changes>,
}

impl Subscriber {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Waits for the next change (returns at once if one came since the
    /// last wait).
    pub async fn notified(&self) {
        self.wake.notified().await;
    }

    /// Takes what changed since the last call, leaving the set empty.
    pub fn take(&self) -> Changes {
        std::mem::take(&mut *self.dirty.lock())
    }

    fn record(&self, change: &Change) {
        {
            let mut dirty = self.dirty.lock();
            match change {
                Change::Key(key) => dirty.mark(key.clone()),
                Change::All => dirty.mark_all(),
                Change::Nothing => {}
            }
        }
        self.wake.notify_one();
    }
}

/// The cache key of an object: `namespace/name`, or `name` without a namespace.
pub fn key_of<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

/// Looks a key made by [`key_of`] up in `store`.
pub fn get<K>(store: &Store<K>, key: &str) -> Option<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let reference = match key.split_once('/') {
        Some((ns, name)) => ObjectRef::new(name).within(ns),
        None => ObjectRef::new(key),
    };
    store.get(&reference)
}

/// What one watcher event means for the dirty sets.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    Key(String),
    All,
    Nothing,
}

fn change_of<K: Resource>(event: &watcher::Event<K>) -> Change {
    match event {
        watcher::Event::Apply(o) | watcher::Event::Delete(o) => Change::Key(key_of(o)),
        // A relist replaces the cache wholesale when it is done; objects that
        // vanished meanwhile send no Delete, so everything must be looked at.
        watcher::Event::Init | watcher::Event::InitDone => Change::All,
        // The relist's objects are covered by the InitDone that follows.
        watcher::Event::InitApply(_) => Change::Nothing,
    }
}

/// Starts a reflector for `api`; every event (including relists) is recorded
/// in and wakes all of `subscribers`. The task ends with `shutdown`.
pub fn start<K>(
    api: Api<K>,
    subscribers: Vec<Arc<Subscriber>>,
    shutdown: CancellationToken,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                event = stream.next() => match event {
                    // The reflector has applied the event to the cache by now,
                    // so a loop woken by it finds the new state.
                    Some(Ok(event)) => {
                        let change = change_of(&event);
                        subscribers.iter().for_each(|s| s.record(&change));
                    }
                    Some(Err(e)) => tracing::debug!(error = %e, "simulated kubelet watch error; retrying"),
                    None => break,
                },
            }
        }
    });
    reader
}

/// Waits until `store` has listed once, or shutdown.
pub async fn ready<K>(store: &Store<K>, shutdown: &CancellationToken) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    // `wait_until_ready` keeps only the waker of the last task that polled
    // it, so with several loops sharing one store the others would sleep
    // forever; polling again on a short timer makes every waiter see it.
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return false,
            result = tokio::time::timeout(
                std::time::Duration::from_millis(50),
                store.wait_until_ready(),
            ) => match result {
                Ok(ready) => return ready.is_ok(),
                Err(_) => continue,
            },
        }
    }
}

/// A burst of changes (a Job creating many pods, a relist) wakes a loop
/// once: it waits this long after the first change before acting.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(5);

pub async fn coalesce() {
    tokio::time::sleep(COALESCE).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Node, Pod};

    fn pod(ns: &str, name: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.namespace = Some(ns.into());
        pod.metadata.name = Some(name.into());
        pod
    }

    fn node(name: &str) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node
    }

    #[test]
    fn keys_are_name_or_namespace_slash_name() {
        assert_eq!(key_of(&node("n1")), "n1");
        assert_eq!(key_of(&pod("team-a", "p")), "team-a/p");
    }

    #[test]
    fn applies_and_deletes_mark_their_key_and_relists_mark_everything() {
        assert_eq!(
            change_of(&watcher::Event::Apply(pod("a", "p"))),
            Change::Key("a/p".into())
        );
        assert_eq!(
            change_of(&watcher::Event::Delete(node("n"))),
            Change::Key("n".into())
        );
        assert_eq!(change_of::<Node>(&watcher::Event::Init), Change::All);
        assert_eq!(change_of::<Node>(&watcher::Event::InitDone), Change::All);
        assert_eq!(
            change_of(&watcher::Event::InitApply(node("n"))),
            Change::Nothing
        );
    }

    #[test]
    fn each_subscriber_drains_its_own_dirty_set() {
        let (a, b) = (Subscriber::new(), Subscriber::new());
        for s in [&a, &b] {
            s.record(&Change::Key("n1".into()));
            s.record(&Change::Key("n2".into()));
            s.record(&Change::Key("n1".into()));
        }
        let taken = a.take();
        assert!(!taken.all);
        assert_eq!(taken.keys, HashSet::from(["n1".into(), "n2".into()]));
        // Taking drains: a second take is empty, and b still has its keys.
        assert!(a.take().is_empty());
        assert_eq!(b.take().keys.len(), 2);
    }

    #[test]
    fn a_relist_supersedes_keys_until_taken() {
        let s = Subscriber::new();
        s.record(&Change::Key("n1".into()));
        s.record(&Change::All);
        s.record(&Change::Key("n2".into()));
        let taken = s.take();
        assert!(taken.all);
        assert!(taken.keys.is_empty());
        s.record(&Change::Key("n3".into()));
        let next = s.take();
        assert!(!next.all);
        assert_eq!(next.keys, HashSet::from(["n3".into()]));
    }
}
