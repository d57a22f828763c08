//! Shared watch caches for the simulated components: kube-runtime
//! reflectors over the in-process client, waking every interested loop on
//! each change.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::Api;
use kube::Resource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Starts a reflector for `api`; every event (including relists) wakes all
/// of `wakers`. The task ends with `shutdown`.
pub fn start<K>(api: Api<K>, wakers: Vec<Arc<Notify>>, shutdown: CancellationToken) -> Store<K>
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
                    Some(Ok(_)) => wakers.iter().for_each(|w| w.notify_one()),
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
