//! The simulated kubelet's pod side: runs the pods bound to simulated
//! nodes through their phases and finishes graceful deletions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{StreamExt, stream};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::KubeletConfig;
use super::informer::{self, Subscriber};
use super::ipam::Ipv4Pool;
use super::lifecycle::{self, Behaviour, PodRun, RestartPolicy};
use super::node::is_simulated;

const FINAL_DELETE_ATTEMPTS: u32 = 5;

/// How soon a pod whose status write failed is synced again.
const RETRY: Duration = Duration::from_millis(200);

/// Status writes of one pass in flight at once. A pass decides every pod's
/// status in memory first; writing them one after another made a burst of
/// thousands of new pods wait on each other's round trips.
const STATUS_WRITES_IN_FLIGHT: usize = 32;

/// A pod status the pass decided on, written after the pass.
struct StatusWrite {
    key: String,
    uid: String,
    name: String,
    api: Api<Pod>,
    patch: serde_json::Value,
    /// When the pod's next timed change is due, whatever the write does.
    due: Option<Timestamp>,
}

/// The caches and change feeds the pod loop follows.
pub(crate) struct Watches {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub pod_changes: Arc<Subscriber>,
    pub node_changes: Arc<Subscriber>,
}

/// What syncing one pod leaves to do.
enum Synced {
    /// Its status changed: write it (the write carries the next due time).
    Write(Box<StatusWrite>),
    /// Nothing to write now; look again at this time.
    Due(Timestamp),
    /// Nothing to write and nothing timed.
    Idle,
}

struct Kubelet {
    client: kube::Client,
    config: KubeletConfig,
    store: Arc<crate::store::Store>,
    runs: HashMap<String, PodRun>,
    /// uid -> resourceVersion our last status write produced, so a cache
    /// that has not caught up yet is not mistaken for drift.
    written: HashMap<String, u64>,
    stopping: HashSet<String>,
    pod_ips: Ipv4Pool,
    /// Addresses held by `runs`, so a new pod's address needs no scan.
    pod_ips_in_use: HashSet<Ipv4Addr>,
    /// Every cached Node by name: its host IP if it is simulated and has
    /// one, else None. Updated from changed Nodes only.
    node_hosts: HashMap<String, Option<String>>,
    /// Pod key -> (uid, node name) as last synced, to forget a pod's state
    /// when it goes and to find the pods of a changed Node.
    pods_seen: HashMap<String, (Option<String>, Option<String>)>,
    /// Node name -> keys of the pods bound to it.
    by_node: HashMap<String, HashSet<String>>,
    /// Pod key -> when its next timed change (exit, restart) is due.
    due: HashMap<String, Timestamp>,
}

/// How long a container of a Job's pod runs without a run-seconds
/// annotation: it completes at once, as KWOK's `pod-complete` stage (which
/// the real-cluster lane uses) completes Job-owned pods, so `kubectl create
/// job` (which cannot set annotations) finishes.
const JOB_POD_RUN_TIME: Duration = Duration::ZERO;

fn owned_by_job(pod: &Pod) -> bool {
    pod.metadata.owner_references.iter().flatten().any(|owner| {
        owner.controller == Some(true) && owner.kind == "Job" && owner.api_version == "batch/v1"
    })
}

fn containers(pod: &Pod, init: bool) -> Vec<(String, String)> {
    let spec = pod.spec.as_ref();
    let list = if init {
        spec.and_then(|s| s.init_containers.clone())
            .unwrap_or_default()
    } else {
        spec.map(|s| s.containers.clone()).unwrap_or_default()
    };
    list.into_iter()
        .map(|c| (c.name, c.image.unwrap_or_default()))
        .collect()
}

fn bound_node(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
}

/// What the pod loop needs of a Node: its InternalIP when it is simulated.
fn host_ip(node: &Node) -> Option<String> {
    // Only the metadata is serialised: the opt-out check reads labels and
    // annotations as JSON, the address is read typed.
    let metadata = serde_json::to_value(&node.metadata).ok()?;
    if !is_simulated(&metadata) {
        return None;
    }
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

pub(crate) async fn run(
    client: kube::Client,
    config: KubeletConfig,
    watches: Watches,
    store: Arc<crate::store::Store>,
    shutdown: CancellationToken,
) {
    let Watches {
        pods,
        nodes,
        pod_changes,
        node_changes,
    } = watches;
    if !informer::ready(&pods, &shutdown).await || !informer::ready(&nodes, &shutdown).await {
        return;
    }
    let mut kubelet = Kubelet {
        client,
        config,
        store,
        runs: HashMap::new(),
        written: HashMap::new(),
        stopping: HashSet::new(),
        pod_ips: Ipv4Pool::new(Ipv4Addr::new(10, 244, 0, 0), 16, 2),
        pod_ips_in_use: HashSet::new(),
        node_hosts: HashMap::new(),
        pods_seen: HashMap::new(),
        by_node: HashMap::new(),
        due: HashMap::new(),
    };
    let mut first = true;
    loop {
        let mut pod_delta = pod_changes.take();
        let mut node_delta = node_changes.take();
        // The first pass looks at everything.
        if std::mem::take(&mut first) {
            pod_delta.all = true;
            node_delta.all = true;
        }
        let next = kubelet
            .pass(&pods, &nodes, pod_delta, node_delta, &shutdown)
            .await;
        let sleep = match next {
            Some(at) => {
                let wait = at.duration_since(Timestamp::now());
                Duration::try_from(wait).unwrap_or(Duration::ZERO)
            }
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = pod_changes.notified() => informer::coalesce().await,
            _ = node_changes.notified() => informer::coalesce().await,
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

impl Kubelet {
    /// Brings `node_hosts` up to date; returns the Nodes whose existence or
    /// host IP changed (a label patch changes neither).
    fn update_nodes(&mut self, nodes: &Store<Node>, delta: informer::Changes) -> Vec<String> {
        let mut changed = Vec::new();
        if delta.all {
            let fresh: HashMap<String, Option<String>> = nodes
                .state()
                .iter()
                .filter_map(|n| Some((n.metadata.name.clone()?, host_ip(n))))
                .collect();
            changed.extend(
                fresh
                    .iter()
                    .filter(|(name, ip)| self.node_hosts.get(*name) != Some(*ip))
                    .map(|(name, _)| name.clone()),
            );
            changed.extend(
                self.node_hosts
                    .keys()
                    .filter(|name| !fresh.contains_key(*name))
                    .cloned(),
            );
            self.node_hosts = fresh;
            return changed;
        }
        for name in delta.keys {
            let now = informer::get(nodes, &name).map(|n| host_ip(&n));
            let before = match &now {
                Some(ip) => self.node_hosts.insert(name.clone(), ip.clone()),
                None => self.node_hosts.remove(&name),
            };
            if before != now {
                changed.push(name);
            }
        }
        changed
    }

    /// One reconcile of the pods that changed, are due, or sit on a Node
    /// that changed; returns when the next timed change is due.
    async fn pass(
        &mut self,
        pods: &Store<Pod>,
        nodes: &Store<Node>,
        pod_delta: informer::Changes,
        node_delta: informer::Changes,
        shutdown: &CancellationToken,
    ) -> Option<Timestamp> {
        let mut keys: HashSet<String> = HashSet::new();
        for node in self.update_nodes(nodes, node_delta) {
            keys.extend(self.by_node.get(&node).into_iter().flatten().cloned());
        }
        if pod_delta.all {
            // Remembered pods too, so ones deleted while the watch was down
            // are forgotten.
            keys.extend(pods.state().iter().map(|p| informer::key_of(p.as_ref())));
            keys.extend(self.pods_seen.keys().cloned());
        } else {
            keys.extend(pod_delta.keys);
        }
        let now = Timestamp::now();
        keys.extend(
            self.due
                .iter()
                .filter(|(_, at)| **at <= now)
                .map(|(k, _)| k.clone()),
        );
        let writes: Vec<StatusWrite> = keys
            .iter()
            .filter_map(|key| self.sync_key(key, pods, shutdown))
            .collect();
        let written: Vec<(StatusWrite, Result<Pod, kube::Error>)> = stream::iter(writes)
            .map(|write| async move {
                let result = write
                    .api
                    .patch_status(
                        &write.name,
                        &PatchParams::default(),
                        &Patch::Merge(&write.patch),
                    )
                    .await;
                (write, result)
            })
            .buffer_unordered(STATUS_WRITES_IN_FLIGHT)
            .collect()
            .await;
        let now = Timestamp::now();
        for (write, result) in written {
            let mut due = write.due;
            match result {
                Ok(pod) => {
                    let new_rv = pod
                        .metadata
                        .resource_version
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    self.written.insert(write.uid, new_rv);
                }
                // A conflict means a newer pod is on its way through the
                // watch; any other failure has no event to bring the pod
                // back, so it is synced again shortly either way.
                Err(e) => {
                    tracing::debug!(pod = %write.name, error = %e, "pod status write failed");
                    let retry_at = now + RETRY;
                    due = Some(due.map_or(retry_at, |d| d.min(retry_at)));
                }
            }
            if let Some(at) = due {
                self.due.insert(write.key, at);
            }
        }
        self.due.values().min().copied()
    }

    /// Drops what this kubelet holds for a pod uid that is gone.
    fn forget_uid(&mut self, uid: &str) {
        if let Some(run) = self.runs.remove(uid)
            && let Ok(ip) = run.pod_ip.parse()
        {
            self.pod_ips_in_use.remove(&ip);
        }
        self.written.remove(uid);
        self.stopping.remove(uid);
    }

    fn unindex(&mut self, key: &str, node: Option<&String>) {
        if let Some(node) = node
            && let Some(keys) = self.by_node.get_mut(node)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_node.remove(node);
            }
        }
    }

    /// Records what the cache holds under `key` (forgetting a pod that went
    /// or was replaced) and syncs it; returns the status write it needs.
    fn sync_key(
        &mut self,
        key: &str,
        pods: &Store<Pod>,
        shutdown: &CancellationToken,
    ) -> Option<StatusWrite> {
        self.store
            .stats
            .kubelet_pod_syncs
            .fetch_add(1, Ordering::Relaxed);
        self.due.remove(key);
        let pod = informer::get(pods, key);
        let seen = pod
            .as_ref()
            .map(|p| (p.metadata.uid.clone(), bound_node(p)));
        let before = match &seen {
            Some(seen) => self.pods_seen.insert(key.to_string(), seen.clone()),
            None => self.pods_seen.remove(key),
        };
        if let Some((old_uid, old_node)) = before {
            let (uid, node) = seen.clone().unwrap_or_default();
            if old_node != node {
                self.unindex(key, old_node.as_ref());
            }
            if let Some(old_uid) = old_uid
                && uid.as_ref() != Some(&old_uid)
            {
                self.forget_uid(&old_uid);
            }
        }
        let pod = pod?;
        let node_name = bound_node(&pod);
        if let Some(node) = &node_name {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(key.to_string());
        }
        // Like the pod garbage collector: a deleting pod bound to a node
        // that does not exist has no kubelet to finish it.
        if let Some(node_name) = &node_name
            && !self.node_hosts.contains_key(node_name)
            && pod.metadata.deletion_timestamp.is_some()
            && let Some(uid) = pod.metadata.uid.clone()
            && self.stopping.insert(uid.clone())
        {
            let api = Api::namespaced(
                self.client.clone(),
                pod.metadata.namespace.as_deref().unwrap_or_default(),
            );
            let name = pod.metadata.name.clone().unwrap_or_default();
            self.finish_deletion(api, name, uid, shutdown.clone());
            return None;
        }
        let Some(Some(host_ip)) = node_name.as_ref().and_then(|n| self.node_hosts.get(n)) else {
            return None;
        };
        let host_ip = host_ip.clone();
        match self.sync_pod(key, &pod, &host_ip, shutdown) {
            Synced::Write(write) => Some(*write),
            Synced::Due(at) => {
                self.due.insert(key.to_string(), at);
                None
            }
            Synced::Idle => None,
        }
    }

    /// Advances a pod's simulated containers and decides its status.
    fn sync_pod(
        &mut self,
        key: &str,
        pod: &Pod,
        host_ip: &str,
        shutdown: &CancellationToken,
    ) -> Synced {
        let Some(uid) = pod.metadata.uid.clone() else {
            return Synced::Idle;
        };
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        if pod.metadata.deletion_timestamp.is_some() {
            if self.stopping.insert(uid.clone()) {
                self.finish_deletion(api, name, uid, shutdown.clone());
            }
            return Synced::Idle;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) && !self.runs.contains_key(&uid) {
            // Finished before this kubelet knew it; nothing left to run.
            return Synced::Idle;
        }
        let now = Timestamp::now();
        if !self.runs.contains_key(&uid) {
            let allocated = self.pod_ips.allocate(&self.pod_ips_in_use);
            if let Some(ip) = allocated {
                self.pod_ips_in_use.insert(ip);
            }
            let pod_ip = allocated.map(|ip| ip.to_string()).unwrap_or_default();
            let run = PodRun::start(&containers(pod, false), now, pod_ip, host_ip.to_string());
            self.runs.insert(uid.clone(), run);
        }
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let unannotated_run_for = owned_by_job(pod).then_some(JOB_POD_RUN_TIME);
        let mut behaviours = BTreeMap::new();
        for (container, _) in containers(pod, false) {
            let behaviour = lifecycle::behaviour(&annotations, &container, unannotated_run_for)
                .unwrap_or_else(|e| {
                tracing::warn!(pod = %name, error = %e, "ignoring a malformed kube-sim annotation");
                Behaviour {
                    run_for: None,
                    exit_codes: vec![0],
                }
            });
            behaviours.insert(container, behaviour);
        }
        let policy =
            RestartPolicy::parse(pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()));
        let Some(run) = self.runs.get_mut(&uid) else {
            return Synced::Idle;
        };
        let due = lifecycle::advance(run, &behaviours, policy, self.config.restart_delay, now);
        let current = pod
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or_else(|| json!({}));
        let status = lifecycle::render_status(&current, &uid, &containers(pod, true), run, now);
        let rv: u64 = pod
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let stale_view = self.written.get(&uid).is_some_and(|w| rv < *w);
        if status != current && !stale_view {
            return Synced::Write(Box::new(StatusWrite {
                key: key.to_string(),
                uid,
                name,
                api,
                patch: json!({
                    "metadata": {"resourceVersion": pod.metadata.resource_version},
                    "status": status,
                }),
                due,
            }));
        }
        match due {
            Some(at) => Synced::Due(at),
            None => Synced::Idle,
        }
    }

    /// Stops the containers (a short simulated stop, not the grace period)
    /// and removes the pod, as the kubelet's final delete does.
    fn finish_deletion(
        &self,
        api: Api<Pod>,
        name: String,
        uid: String,
        shutdown: CancellationToken,
    ) {
        let stop = self.config.stop_delay;
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(stop) => {}
            }
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            // Retried a few times: this kubelet will not look at the pod again.
            for attempt in 1..=FINAL_DELETE_ATTEMPTS {
                match api.delete(&name, &params).await {
                    Ok(_) => return,
                    // Gone already, or a new pod took the name.
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => return,
                    Err(e) => {
                        tracing::debug!(pod = %name, attempt, error = %e, "final pod delete failed");
                        tokio::select! {
                            _ = shutdown.cancelled() => return,
                            _ = tokio::time::sleep(stop.max(Duration::from_millis(100)) * attempt) => {}
                        }
                    }
                }
            }
        });
    }
}
