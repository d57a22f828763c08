//! The simulated kube-scheduler: binds pending `default-scheduler` pods to
//! fitting nodes through `pods/{name}/binding`, or marks them
//! `PodScheduled=False` / `Unschedulable` with kube-scheduler's message.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Api, Resource};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::fit::{self, Candidate, PODS, Resources};
use super::informer::{self, Subscriber};
use super::lifecycle::format_time;

pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// Pods this scheduler must place: no node, not deleting, ours.
pub fn wants_scheduling(pod: &Pod) -> bool {
    let scheduler = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or(DEFAULT_SCHEDULER);
    scheduler == DEFAULT_SCHEDULER
        && node_name(pod).is_none()
        && pod.metadata.deletion_timestamp.is_none()
        && !is_terminal(pod)
}

fn add(total: &mut Resources, requests: &Resources) {
    for (k, v) in requests {
        *total.entry(k.clone()).or_default() += v;
    }
    *total.entry(PODS.to_string()).or_default() += 1000;
}

/// The PodScheduled condition as the pod has it: (status, reason, message).
fn scheduled_condition(pod: &Pod) -> Option<(String, Option<String>, Option<String>)> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The caches and change feeds the scheduler follows.
pub(crate) struct Watches {
    pub pods: Store<Pod>,
    pub nodes: Store<Node>,
    pub pod_changes: Arc<Subscriber>,
    pub node_changes: Arc<Subscriber>,
}

/// What the bound, live pods use, per node, kept up to date from the
/// changed keys (recounting every pod on each pass was a hot spot with
/// 11,000 pods).
#[derive(Debug, Default)]
struct Usage {
    /// Pod key -> (node, requests) of a bound pod that is not terminal.
    bound: HashMap<String, (String, Resources)>,
    per_node: HashMap<String, Resources>,
}

impl Usage {
    fn remove(&mut self, key: &str) {
        if let Some((node, requests)) = self.bound.remove(key)
            && let Some(total) = self.per_node.get_mut(&node)
        {
            subtract(total, &requests);
        }
    }

    fn observe(&mut self, key: &str, pod: Option<&Pod>) {
        self.remove(key);
        if let Some(pod) = pod.filter(|p| !is_terminal(p))
            && let Some(node) = node_name(pod)
        {
            let requests = fit::pod_requests(pod);
            add(
                self.per_node.entry(node.to_string()).or_default(),
                &requests,
            );
            self.bound
                .insert(key.to_string(), (node.to_string(), requests));
        }
    }
}

fn subtract(total: &mut Resources, requests: &Resources) {
    for (k, v) in requests {
        if let Some(t) = total.get_mut(k) {
            *t -= v;
        }
    }
    if let Some(pods) = total.get_mut(PODS) {
        *pods -= 1000;
    }
}

/// Brings the set of pods that want scheduling (by cache key), and what
/// bound pods use, up to date with what changed, so a pass need not scan
/// every pod.
fn track_pending(
    pending: &mut HashSet<String>,
    used: &mut Usage,
    pods: &Store<Pod>,
    changes: informer::Changes,
) {
    if changes.all {
        pending.clear();
        *used = Usage::default();
        for pod in pods.state() {
            let key = informer::key_of(pod.as_ref());
            if wants_scheduling(&pod) {
                pending.insert(key.clone());
            }
            used.observe(&key, Some(&pod));
        }
        return;
    }
    for key in changes.keys {
        let pod = informer::get(pods, &key);
        used.observe(&key, pod.as_deref());
        match pod {
            Some(pod) if wants_scheduling(&pod) => pending.insert(key),
            _ => pending.remove(&key),
        };
    }
}

pub(crate) async fn run(client: kube::Client, watches: Watches, shutdown: CancellationToken) {
    let Watches {
        pods,
        nodes,
        pod_changes,
        node_changes,
    } = watches;
    if !informer::ready(&pods, &shutdown).await || !informer::ready(&nodes, &shutdown).await {
        return;
    }
    // Pods bound but not yet seen bound in the cache: uid -> (node, requests).
    let mut assumed: HashMap<String, (String, Resources)> = HashMap::new();
    let mut pending: HashSet<String> = HashSet::new();
    let mut used = Usage::default();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: DEFAULT_SCHEDULER.into(),
            instance: None,
        },
    );
    let mut first = true;
    loop {
        let mut pod_delta = pod_changes.take();
        // The first pass looks at every pod.
        pod_delta.all |= std::mem::take(&mut first);
        // Node changes matter only to pods still waiting for a node; the
        // keys are drained so they do not pile up.
        node_changes.take();
        track_pending(&mut pending, &mut used, &pods, pod_delta);
        if pending.is_empty() {
            // Nothing waits, so no usage recount over all pods; every
            // assumed pod has been seen bound (or is gone).
            assumed.clear();
        } else {
            let waiting = Waiting {
                pods: &pods,
                pending: &pending,
                used: &used,
            };
            schedule_pass(&client, &recorder, waiting, &nodes, &mut assumed).await;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = pod_changes.notified() => informer::coalesce().await,
            _ = node_changes.notified() => informer::coalesce().await,
        }
    }
}

/// Records a scheduling decision as kube-scheduler does (`Scheduled`,
/// `FailedScheduling`); losing an Event never blocks scheduling.
async fn record(recorder: &Recorder, pod: &Pod, type_: EventType, reason: &str, note: String) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "Scheduling".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot record a scheduling event");
    }
}

/// The pods a pass places and what bound pods use.
struct Waiting<'a> {
    pods: &'a Store<Pod>,
    pending: &'a HashSet<String>,
    used: &'a Usage,
}

async fn schedule_pass(
    client: &kube::Client,
    recorder: &Recorder,
    waiting: Waiting<'_>,
    nodes: &Store<Node>,
    assumed: &mut HashMap<String, (String, Resources)>,
) {
    let mut nodes = nodes.state();
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut used = waiting.used.per_node.clone();
    let pending_pods: Vec<Arc<Pod>> = waiting
        .pending
        .iter()
        .filter_map(|key| informer::get(waiting.pods, key))
        .collect();
    // An assumed pod stays assumed while the cache still shows it waiting;
    // once it shows it bound (or gone) the tracked usage covers it.
    let waiting_uids: HashSet<&str> = pending_pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    assumed.retain(|uid, _| waiting_uids.contains(uid.as_str()));
    for (node, requests) in assumed.values() {
        add(used.entry(node.clone()).or_default(), requests);
    }
    let mut pending: Vec<&Arc<Pod>> = pending_pods
        .iter()
        .filter(|p| {
            p.metadata
                .uid
                .as_deref()
                .is_none_or(|u| !assumed.contains_key(u))
        })
        .collect();
    pending.sort_by_key(|p| {
        (
            std::cmp::Reverse(p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)),
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
            p.metadata.name.clone(),
        )
    });
    let allocatable: BTreeMap<String, Resources> = nodes
        .iter()
        .map(|n| {
            (
                n.metadata.name.clone().unwrap_or_default(),
                fit::allocatable(n),
            )
        })
        .collect();
    // Placements are decided one pod after another against the usage so far,
    // as kube-scheduler's single scheduling loop does; only the API writes
    // (bindings, Unschedulable conditions, their Events) run concurrently,
    // so a burst of pods does not wait on one round trip after another.
    let mut writes = Vec::new();
    for pod in pending {
        let candidates: Vec<Candidate<'_>> = nodes
            .iter()
            .map(|n| {
                let name = n.metadata.name.clone().unwrap_or_default();
                Candidate {
                    node: n,
                    allocatable: allocatable.get(&name).cloned().unwrap_or_default(),
                    used: used.get(&name).cloned().unwrap_or_default(),
                }
            })
            .collect();
        match fit::choose(pod, &candidates) {
            Ok(node) => {
                let node_name = node.metadata.name.clone().unwrap_or_default();
                let requests = fit::pod_requests(pod);
                add(used.entry(node_name.clone()).or_default(), &requests);
                writes.push(Decision::Bind {
                    pod: Arc::clone(pod),
                    node: node_name,
                    requests,
                });
            }
            Err(message) => {
                let want = (
                    "False".to_string(),
                    Some("Unschedulable".to_string()),
                    Some(message.clone()),
                );
                if scheduled_condition(pod).as_ref() != Some(&want) {
                    writes.push(Decision::Unschedulable {
                        pod: Arc::clone(pod),
                        message,
                    });
                }
            }
        }
    }
    let bound: Vec<Option<(String, (String, Resources))>> = stream::iter(writes)
        .map(|decision| write_decision(client, recorder, decision))
        .buffer_unordered(SCHEDULING_WRITES_IN_FLIGHT)
        .collect()
        .await;
    assumed.extend(bound.into_iter().flatten());
}

/// API writes of one scheduling pass in flight at once.
const SCHEDULING_WRITES_IN_FLIGHT: usize = 32;

/// What the scheduling pass decided for one pod.
enum Decision {
    Bind {
        pod: Arc<Pod>,
        node: String,
        requests: Resources,
    },
    Unschedulable {
        pod: Arc<Pod>,
        message: String,
    },
}

/// Writes one decision (and its Event); a bound pod comes back as the
/// assumed entry `uid -> (node, requests)`.
async fn write_decision(
    client: &kube::Client,
    recorder: &Recorder,
    decision: Decision,
) -> Option<(String, (String, Resources))> {
    let pod = match &decision {
        Decision::Bind { pod, .. } | Decision::Unschedulable { pod, .. } => Arc::clone(pod),
    };
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    match decision {
        Decision::Bind {
            node: node_name,
            requests,
            ..
        } => {
            let binding = json!({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
            });
            match api
                .create_subresource::<Value, Value>(
                    "binding",
                    &name,
                    &PostParams::default(),
                    &binding,
                )
                .await
            {
                Ok(_) => {
                    record(
                        recorder,
                        &pod,
                        EventType::Normal,
                        "Scheduled",
                        format!("Successfully assigned {namespace}/{name} to {node_name}"),
                    )
                    .await;
                    pod.metadata
                        .uid
                        .clone()
                        .map(|uid| (uid, (node_name, requests)))
                }
                Err(e) => {
                    tracing::debug!(pod = %name, error = %e, "binding failed; retrying on the next change");
                    None
                }
            }
        }
        Decision::Unschedulable { message, .. } => {
            let mut conditions: Vec<Value> = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| c.type_ != "PodScheduled")
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect();
            conditions.push(json!({
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastProbeTime": null,
                "lastTransitionTime": format_time(jiff::Timestamp::now()),
            }));
            let patch = json!({"status": {"conditions": conditions}});
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    record(
                        recorder,
                        &pod,
                        EventType::Warning,
                        "FailedScheduling",
                        message,
                    )
                    .await
                }
                Err(e) => {
                    tracing::debug!(pod = %name, error = %e, "cannot record Unschedulable")
                }
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = json!([{"name": "c", "image": "i"}]);
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec}))
            .unwrap()
    }

    #[test]
    fn only_unbound_default_scheduler_pods_are_scheduled() {
        assert!(wants_scheduling(&pod(json!({}))));
        assert!(wants_scheduling(&pod(
            json!({"schedulerName": "default-scheduler"})
        )));
        assert!(!wants_scheduling(&pod(json!({"schedulerName": "volcano"}))));
        assert!(!wants_scheduling(&pod(json!({"nodeName": "n1"}))));
    }

    #[test]
    fn usage_counts_bound_live_pods_only_and_follows_their_changes() {
        let mut bound = pod(json!({"nodeName": "n1"}));
        bound.spec.as_mut().unwrap().containers[0].resources =
            serde_json::from_value(json!({"limits": {"nvidia.com/gpu": "2"}})).unwrap();
        let mut done = bound.clone();
        done.status = serde_json::from_value(json!({"phase": "Succeeded"})).unwrap();
        let mut used = Usage::default();
        used.observe("ns/bound", Some(&bound));
        used.observe("ns/done", Some(&done));
        used.observe("ns/waiting", Some(&pod(json!({}))));
        assert_eq!(used.per_node["n1"]["nvidia.com/gpu"], 2000);
        assert_eq!(used.per_node["n1"][PODS], 1000);
        assert_eq!(used.per_node.len(), 1);
        // The bound pod finishes: its node is free again.
        used.observe("ns/bound", Some(&done));
        assert_eq!(used.per_node["n1"]["nvidia.com/gpu"], 0);
        assert_eq!(used.per_node["n1"][PODS], 0);
        used.observe("ns/bound", Some(&bound));
        used.observe("ns/bound", None);
        assert_eq!(used.per_node["n1"][PODS], 0);
        assert!(used.bound.is_empty());
    }

    #[test]
    fn the_pending_set_follows_changed_pods_and_a_relist_rebuilds_it() {
        use kube::runtime::watcher::Event as WatchEvent;
        let (reader, mut writer) = kube::runtime::reflector::store::<Pod>();
        let named = |name: &str, spec: Value| {
            let mut p = pod(spec);
            p.metadata.name = Some(name.into());
            p.metadata.namespace = Some("ns".into());
            p
        };
        writer.apply_watcher_event(&WatchEvent::Apply(named("a", json!({}))));
        writer.apply_watcher_event(&WatchEvent::Apply(named("b", json!({"nodeName": "n1"}))));
        let mut pending = HashSet::new();
        let mut used = Usage::default();
        let changed = |keys: &[&str]| informer::Changes {
            all: false,
            keys: keys.iter().map(|k| k.to_string()).collect(),
        };
        track_pending(&mut pending, &mut used, &reader, changed(&["ns/a", "ns/b"]));
        assert_eq!(pending, HashSet::from(["ns/a".to_string()]));
        // "a" gets bound: it leaves the set; a key no longer cached leaves too.
        writer.apply_watcher_event(&WatchEvent::Apply(named("a", json!({"nodeName": "n1"}))));
        track_pending(
            &mut pending,
            &mut used,
            &reader,
            changed(&["ns/a", "ns/gone"]),
        );
        assert!(pending.is_empty());
        writer.apply_watcher_event(&WatchEvent::Apply(named("c", json!({}))));
        let relist = informer::Changes {
            all: true,
            keys: HashSet::new(),
        };
        track_pending(&mut pending, &mut used, &reader, relist);
        assert_eq!(pending, HashSet::from(["ns/c".to_string()]));
    }
}
