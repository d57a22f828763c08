//! Minimal workload controllers, in the spirit of kube-controller-manager's:
//! Deployment -> ReplicaSet -> Pod and Job -> Pod. They talk to kube-sim
//! through the in-process `kube::Client` like the simulated kubelet does,
//! and start with it. Decisions are pure ([`plan`]); the loops here read
//! the watch caches, write, and remember what they wrote until the caches
//! show it (upstream's "expectations"), so a stale cache never doubles pods.

mod deployment;
mod job;
pub(crate) mod namespace_defaults;
pub(crate) mod plan;
mod replicaset;
pub(crate) mod token_secrets;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::Resource;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::kubelet::informer::{self, Subscriber};

/// Time-based decisions (minReadySeconds, activeDeadlineSeconds) and
/// retries of failed writes happen at least this often.
const RESYNC: Duration = Duration::from_secs(1);
/// How long a write not yet seen in the cache holds its owner back.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the Deployment, ReplicaSet and Job controllers; they stop with
/// `shutdown`.
pub(crate) fn spawn(client: kube::Client, shutdown: CancellationToken) {
    let deployment_wake = Subscriber::new();
    let replicaset_wake = Subscriber::new();
    let job_wake = Subscriber::new();
    let deployments = informer::start(
        Api::<Deployment>::all(client.clone()),
        vec![deployment_wake.clone()],
        shutdown.clone(),
    );
    let replicasets = informer::start(
        Api::<ReplicaSet>::all(client.clone()),
        vec![deployment_wake.clone(), replicaset_wake.clone()],
        shutdown.clone(),
    );
    let pods = informer::start(
        Api::<Pod>::all(client.clone()),
        vec![replicaset_wake.clone(), job_wake.clone()],
        shutdown.clone(),
    );
    let jobs = informer::start(
        Api::<Job>::all(client.clone()),
        vec![job_wake.clone()],
        shutdown.clone(),
    );
    tokio::spawn(deployment::run(
        client.clone(),
        deployments,
        replicasets.clone(),
        deployment_wake,
        shutdown.clone(),
    ));
    tokio::spawn(run_pod_owner(
        client.clone(),
        replicasets,
        pods.clone(),
        replicaset_wake,
        shutdown.clone(),
    ));
    tokio::spawn(run_pod_owner(client, jobs, pods, job_wake, shutdown));
}

/// A kind whose controller owns pods directly: ReplicaSets and Jobs share
/// one loop and differ only in how one owner is synced.
trait PodOwner: Resource<DynamicType = ()> + Clone + Send + Sync + 'static {
    /// Brings one owner's pods and status to what its spec asks for.
    fn sync(
        client: &kube::Client,
        owner: &Self,
        mine: &[&Pod],
        expectations: &mut Expectations,
    ) -> impl std::future::Future<Output = ()> + Send;
}

/// Every round: each live owner whose earlier writes the pod cache already
/// shows is synced against the pods it controls.
async fn run_pod_owner<K: PodOwner>(
    client: kube::Client,
    owners: Store<K>,
    pods: Store<Pod>,
    wake: Arc<Subscriber>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&owners, &shutdown).await || !informer::ready(&pods, &shutdown).await {
        return;
    }
    let kind = K::kind(&());
    let mut expectations = Expectations::default();
    loop {
        let owned = by_controller(&pods, &kind);
        for owner in owners.state() {
            if owner.meta().deletion_timestamp.is_some() {
                continue;
            }
            let uid = owner.meta().uid.clone().unwrap_or_default();
            let mine: Vec<&Pod> = owned
                .get(&uid)
                .map(|v| v.iter().map(Arc::as_ref).collect())
                .unwrap_or_default();
            let seen = |name: &str| {
                mine.iter()
                    .find(|p| p.metadata.name.as_deref() == Some(name))
                    .map(|p| (resource_version(*p), plan::pods::is_active(p)))
            };
            if !expectations.satisfied(&uid, seen) {
                continue;
            }
            K::sync(&client, &owner, &mine, &mut expectations).await;
        }
        if !next_round(&wake, &shutdown).await {
            return;
        }
    }
}

/// Waits for a change, the resync period or shutdown (false).
async fn next_round(wake: &Subscriber, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => return false,
        _ = wake.notified() => informer::coalesce().await,
        _ = tokio::time::sleep(RESYNC) => {}
    }
    // Every round looks at every object, so the keys only need draining.
    wake.take();
    true
}

/// The uid of the object's controller, if it has one of `kind`.
fn controller_uid<K: Resource>(object: &K, kind: &str) -> Option<String> {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && o.kind == kind)
        .map(|o| o.uid.clone())
}

/// The objects in `store` grouped by the uid of their `kind` controller.
fn by_controller<K>(store: &Store<K>, kind: &str) -> HashMap<String, Vec<Arc<K>>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let mut groups: HashMap<String, Vec<Arc<K>>> = HashMap::new();
    for object in store.state() {
        if let Some(uid) = controller_uid(object.as_ref(), kind) {
            groups.entry(uid).or_default().push(object);
        }
    }
    groups
}

/// A controller reference to `owner`, which the garbage collector follows.
fn owner_reference<K: Resource<DynamicType = ()>>(owner: &K) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A pod of `template`, named `<prefix><5 random characters>` by the server.
fn pod_from_template(template: &PodTemplateSpec, prefix: String, owner: OwnerReference) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(prefix),
            labels: meta.labels,
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Writes not yet seen in the watch caches, per owner uid.
#[derive(Default)]
struct Expectations {
    pending: HashMap<String, Pending>,
}

struct Pending {
    /// Names of objects created that the cache must show.
    created: Vec<String>,
    /// Names of objects deleted that the cache must stop showing as live.
    deleted: Vec<String>,
    /// (name, resourceVersion) of writes the cache must reach.
    written: Vec<(String, u64)>,
    since: Instant,
}

impl Expectations {
    fn entry(&mut self, owner: &str) -> &mut Pending {
        self.pending
            .entry(owner.to_string())
            .or_insert_with(|| Pending {
                created: Vec::new(),
                deleted: Vec::new(),
                written: Vec::new(),
                since: Instant::now(),
            })
    }

    fn created(&mut self, owner: &str, name: String) {
        self.entry(owner).created.push(name);
    }

    fn deleted(&mut self, owner: &str, name: String) {
        self.entry(owner).deleted.push(name);
    }

    fn written(&mut self, owner: &str, name: String, resource_version: u64) {
        self.entry(owner).written.push((name, resource_version));
    }

    /// Whether `owner` may be planned again: everything it wrote shows in
    /// `seen` (name -> (resourceVersion, live)), or the wait timed out.
    fn satisfied(&mut self, owner: &str, seen: impl Fn(&str) -> Option<(u64, bool)>) -> bool {
        let Some(pending) = self.pending.get(owner) else {
            return true;
        };
        let done = pending.created.iter().all(|n| seen(n).is_some())
            && pending
                .deleted
                .iter()
                .all(|n| !seen(n).is_some_and(|(_, live)| live))
            && pending
                .written
                .iter()
                .all(|(n, rv)| seen(n).is_none_or(|(seen_rv, _)| seen_rv >= *rv));
        if done || pending.since.elapsed() > EXPECTATION_TIMEOUT {
            self.pending.remove(owner);
            true
        } else {
            false
        }
    }
}

/// A merge patch that makes `.status` exactly `wanted`: fields of `current`
/// that `wanted` leaves out are removed (a merge patch keeps what it does
/// not name).
fn status_patch(current: &serde_json::Value, wanted: &serde_json::Value) -> serde_json::Value {
    let mut status = wanted.clone();
    if let (Some(current), Some(patch)) = (current.as_object(), status.as_object_mut()) {
        for key in current.keys() {
            if !patch.contains_key(key) {
                patch.insert(key.clone(), serde_json::Value::Null);
            }
        }
    }
    serde_json::json!({ "status": status })
}

fn resource_version<K: Resource>(object: &K) -> u64 {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Expectations;

    #[test]
    fn an_owner_waits_until_the_cache_shows_its_creates_deletes_and_writes() {
        let mut expectations = Expectations::default();
        assert!(expectations.satisfied("rs-1", |_| None), "nothing pending");
        expectations.created("rs-1", "web-a".into());
        expectations.deleted("rs-1", "web-b".into());
        expectations.written("rs-1", "web-c".into(), 7);
        // web-a not seen yet.
        assert!(!expectations.satisfied("rs-1", |n| (n != "web-a").then_some((9, true))));
        // web-b still live.
        let b_live = |n: &str| Some((if n == "web-c" { 7 } else { 1 }, true));
        assert!(!expectations.satisfied("rs-1", b_live));
        // web-c behind the written version.
        let c_behind = |n: &str| match n {
            "web-a" => Some((1, true)),
            "web-b" => Some((1, false)),
            _ => Some((6, true)),
        };
        assert!(!expectations.satisfied("rs-1", c_behind));
        let all_seen = |n: &str| match n {
            "web-a" => Some((1, true)),
            "web-b" => None,
            _ => Some((7, true)),
        };
        assert!(expectations.satisfied("rs-1", all_seen));
        // Met expectations are forgotten.
        assert!(expectations.satisfied("rs-1", |_| None));
    }

    #[test]
    fn a_status_patch_removes_what_the_new_status_leaves_out() {
        let current = json!({"active": 1, "succeeded": 0, "ready": 1});
        let wanted = json!({"succeeded": 1, "ready": 0});
        assert_eq!(
            super::status_patch(&current, &wanted),
            json!({"status": {"active": null, "succeeded": 1, "ready": 0}})
        );
    }
}
