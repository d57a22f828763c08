//! The simulated kubelet's pod side: runs the pods bound to simulated
//! nodes through their phases and finishes graceful deletions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::KubeletConfig;
use super::informer;
use super::ipam::Ipv4Pool;
use super::lifecycle::{self, Behaviour, PodRun, RestartPolicy};
use super::node::{self, is_simulated};

const FINAL_DELETE_ATTEMPTS: u32 = 5;

struct Kubelet {
    client: kube::Client,
    config: KubeletConfig,
    runs: HashMap<String, PodRun>,
    /// uid -> resourceVersion our last status write produced, so a cache
    /// that has not caught up yet is not mistaken for drift.
    written: HashMap<String, u64>,
    stopping: HashSet<String>,
    pod_ips: Ipv4Pool,
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

pub(crate) async fn run(
    client: kube::Client,
    config: KubeletConfig,
    pods: Store<Pod>,
    nodes: Store<Node>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&pods, &shutdown).await || !informer::ready(&nodes, &shutdown).await {
        return;
    }
    let mut kubelet = Kubelet {
        client,
        config,
        runs: HashMap::new(),
        written: HashMap::new(),
        stopping: HashSet::new(),
        pod_ips: Ipv4Pool::new(Ipv4Addr::new(10, 244, 0, 0), 16, 2),
    };
    loop {
        let next = kubelet.pass(&pods, &nodes, &shutdown).await;
        let sleep = match next {
            Some(at) => {
                let wait = at.duration_since(Timestamp::now());
                Duration::try_from(wait).unwrap_or(Duration::ZERO)
            }
            None => Duration::from_secs(3600),
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = wake.notified() => informer::coalesce().await,
            _ = tokio::time::sleep(sleep) => {}
        }
    }
}

impl Kubelet {
    /// One reconcile of every pod on a simulated node; returns when the
    /// next timed change is due.
    async fn pass(
        &mut self,
        pods: &Store<Pod>,
        nodes: &Store<Node>,
        shutdown: &CancellationToken,
    ) -> Option<Timestamp> {
        let host_ips: BTreeMap<String, String> = nodes
            .state()
            .iter()
            .filter_map(|n| {
                let value = serde_json::to_value(n.as_ref()).ok()?;
                if !is_simulated(value.get("metadata").unwrap_or(&Value::Null)) {
                    return None;
                }
                let ip = node::internal_ip(&value)?;
                Some((n.metadata.name.clone()?, ip))
            })
            .collect();
        let all = pods.state();
        let live: HashSet<String> = all.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        self.runs.retain(|uid, _| live.contains(uid));
        self.written.retain(|uid, _| live.contains(uid));
        self.stopping.retain(|uid| live.contains(uid));
        let known_nodes: HashSet<String> = nodes
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let mut next: Option<Timestamp> = None;
        for pod in &all {
            let node_name = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .filter(|n| !n.is_empty());
            // Like the pod garbage collector: a deleting pod bound to a node
            // that does not exist has no kubelet to finish it.
            if let Some(node_name) = node_name
                && !known_nodes.contains(node_name)
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
                continue;
            }
            let Some(host_ip) = node_name.and_then(|n| host_ips.get(n)) else {
                continue;
            };
            if let Some(due) = self.sync_pod(pod, host_ip, shutdown).await {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        next
    }

    async fn sync_pod(
        &mut self,
        pod: &Pod,
        host_ip: &str,
        shutdown: &CancellationToken,
    ) -> Option<Timestamp> {
        let uid = pod.metadata.uid.clone()?;
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        if pod.metadata.deletion_timestamp.is_some() {
            if self.stopping.insert(uid.clone()) {
                self.finish_deletion(api, name, uid, shutdown.clone());
            }
            return None;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) && !self.runs.contains_key(&uid) {
            // Finished before this kubelet knew it; nothing left to run.
            return None;
        }
        let now = Timestamp::now();
        if !self.runs.contains_key(&uid) {
            let in_use: HashSet<Ipv4Addr> = self
                .runs
                .values()
                .filter_map(|r| r.pod_ip.parse().ok())
                .collect();
            let pod_ip = self
                .pod_ips
                .allocate(&in_use)
                .map(|ip| ip.to_string())
                .unwrap_or_default();
            let run = PodRun::start(&containers(pod, false), now, pod_ip, host_ip.to_string());
            self.runs.insert(uid.clone(), run);
        }
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let mut behaviours = BTreeMap::new();
        for (container, _) in containers(pod, false) {
            let behaviour = lifecycle::behaviour(&annotations, &container).unwrap_or_else(|e| {
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
        let run = self.runs.get_mut(&uid)?;
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
            let patch = json!({
                "metadata": {"resourceVersion": pod.metadata.resource_version},
                "status": status,
            });
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(written) => {
                    let new_rv = written
                        .metadata
                        .resource_version
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    self.written.insert(uid, new_rv);
                }
                // A conflict means a newer pod is on its way through the watch.
                Err(e) => tracing::debug!(pod = %name, error = %e, "pod status write failed"),
            }
        }
        due
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
