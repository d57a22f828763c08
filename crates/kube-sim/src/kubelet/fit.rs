//! The scheduler's decisions, pure: which nodes a pod fits (kube-scheduler's
//! default filters, in its order: NodeUnschedulable, TaintToleration,
//! NodeAffinity, NodeResourcesFit), which one to pick, and the
//! `0/N nodes are available: …` message when none fits.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod, Taint, Toleration,
};

use super::quantity::parse_milli;

/// Resource amounts in milli-units, keyed by resource name.
pub type Resources = BTreeMap<String, i128>;

pub const PODS: &str = "pods";
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Why one node cannot take a pod, worded as kube-scheduler words it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    Unschedulable,
    UntoleratedTaint { key: String, value: String },
    AffinityOrSelector,
    Insufficient(String),
    TooManyPods,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unschedulable => f.write_str("node(s) were unschedulable"),
            Reason::UntoleratedTaint { key, value } => {
                write!(f, "node(s) had untolerated taint {{{key}: {value}}}")
            }
            Reason::AffinityOrSelector => {
                f.write_str("node(s) didn't match Pod's node affinity/selector")
            }
            Reason::Insufficient(resource) => write!(f, "Insufficient {resource}"),
            Reason::TooManyPods => f.write_str("Too many pods"),
        }
    }
}

/// What a node offers and what is already bound to it.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    pub node: &'a Node,
    pub allocatable: Resources,
    /// Requests of the non-terminal pods bound to the node, plus `pods`
    /// counting them (1000 per pod).
    pub used: Resources,
}

fn amounts(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Resources {
    map.into_iter()
        .flatten()
        .filter_map(|(k, v)| parse_milli(&v.0).ok().map(|q| (k.clone(), q)))
        .collect()
}

/// What a node can hold: `status.allocatable`, else `status.capacity`.
pub fn allocatable(node: &Node) -> Resources {
    let status = node.status.as_ref();
    let mut all = amounts(status.and_then(|s| s.capacity.as_ref()));
    all.extend(amounts(status.and_then(|s| s.allocatable.as_ref())));
    all
}

fn container_requests(container: &Container) -> Resources {
    let resources = container.resources.as_ref();
    // The apiserver defaults a missing request to the limit.
    let mut requests = amounts(resources.and_then(|r| r.limits.as_ref()));
    requests.extend(amounts(resources.and_then(|r| r.requests.as_ref())));
    requests
}

/// A pod's effective requests: the larger of the containers' sum and each
/// init container, plus the pod overhead.
pub fn pod_requests(pod: &Pod) -> Resources {
    let mut total = Resources::new();
    let Some(spec) = pod.spec.as_ref() else {
        return total;
    };
    for c in &spec.containers {
        for (k, v) in container_requests(c) {
            *total.entry(k).or_default() += v;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in container_requests(c) {
            let entry = total.entry(k).or_default();
            *entry = (*entry).max(v);
        }
    }
    for (k, v) in amounts(spec.overhead.as_ref()) {
        *total.entry(k).or_default() += v;
    }
    total
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key = toleration.key.as_deref().unwrap_or_default();
    let operator = toleration.operator.as_deref().unwrap_or("Equal");
    let key_ok = (key.is_empty() && operator == "Exists") || key == taint.key;
    let value_ok = match operator {
        "Exists" => true,
        _ => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
    };
    effect_ok && key_ok && value_ok
}

fn untolerated(pod: &Pod, taints: &[Taint]) -> Option<Reason> {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
        .map(|t| Reason::UntoleratedTaint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
        })
}

fn requirement_matches(req: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&req.key);
    let values = req.values.as_deref().unwrap_or_default();
    let as_int = |s: &str| s.parse::<i64>().ok();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| as_int(v)),
                values.first().and_then(|v| as_int(v)),
            ) else {
                return false;
            };
            if req.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        // An empty term selects no node.
        return false;
    }
    let node_fields: BTreeMap<String, String> = [(
        "metadata.name".to_string(),
        node.metadata.name.clone().unwrap_or_default(),
    )]
    .into();
    exprs.iter().all(|r| requirement_matches(r, &labels))
        && fields.iter().all(|r| requirement_matches(r, &node_fields))
}

fn affinity_matches(pod: &Pod, node: &Node) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    let affinity_ok = required.is_none_or(|sel| {
        sel.node_selector_terms
            .iter()
            .any(|term| term_matches(term, node))
    });
    selector_ok && affinity_ok
}

/// Runs the filters on one node; the first failing filter decides, except
/// that the resource filter reports every short resource.
pub fn filter(
    pod: &Pod,
    candidate: &Candidate<'_>,
    requests: &Resources,
) -> Result<(), Vec<Reason>> {
    let node = candidate.node;
    let spec = node.spec.as_ref();
    let mut taints: Vec<Taint> = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
    if spec.and_then(|s| s.unschedulable).unwrap_or(false) {
        let tolerated = untolerated(
            pod,
            &[Taint {
                key: UNSCHEDULABLE_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }],
        )
        .is_none();
        if !tolerated {
            return Err(vec![Reason::Unschedulable]);
        }
    }
    // The node lifecycle controller taints nodes that are not Ready.
    if !node_is_ready(node) && !taints.iter().any(|t| t.key == NOT_READY_TAINT) {
        taints.push(Taint {
            key: NOT_READY_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        });
    }
    if let Some(reason) = untolerated(pod, &taints) {
        return Err(vec![reason]);
    }
    if !affinity_matches(pod, node) {
        return Err(vec![Reason::AffinityOrSelector]);
    }
    let mut short = Vec::new();
    let pods_used = candidate.used.get(PODS).copied().unwrap_or(0);
    if let Some(max_pods) = candidate.allocatable.get(PODS)
        && pods_used + 1000 > *max_pods
    {
        short.push(Reason::TooManyPods);
    }
    for (resource, amount) in requests {
        if *amount <= 0 || resource == PODS {
            continue;
        }
        let free = candidate.allocatable.get(resource).copied().unwrap_or(0)
            - candidate.used.get(resource).copied().unwrap_or(0);
        if *amount > free {
            short.push(Reason::Insufficient(resource.clone()));
        }
    }
    if short.is_empty() { Ok(()) } else { Err(short) }
}

/// kube-scheduler's FitError text: reasons counted over nodes, sorted as
/// strings, e.g. `0/3 nodes are available: 1 node(s) didn't match Pod's
/// node affinity/selector, 2 Insufficient nvidia.com/gpu.`
pub fn fit_error_message(total_nodes: usize, reasons: &BTreeMap<Reason, usize>) -> String {
    if total_nodes == 0 {
        return "no nodes available to schedule pods".into();
    }
    let mut parts: Vec<String> = reasons
        .iter()
        .map(|(reason, count)| format!("{count} {reason}"))
        .collect();
    parts.sort();
    format!("0/{total_nodes} nodes are available: {}.", parts.join(", "))
}

/// Share of cpu and memory left free after placing `requests`; higher is
/// better (kube-scheduler's LeastAllocated default).
fn free_share(candidate: &Candidate<'_>, requests: &Resources) -> f64 {
    let share = |resource: &str| {
        let total = candidate.allocatable.get(resource).copied().unwrap_or(0);
        if total <= 0 {
            return 0.0;
        }
        let used = candidate.used.get(resource).copied().unwrap_or(0)
            + requests.get(resource).copied().unwrap_or(0);
        (total - used) as f64 / total as f64
    };
    (share("cpu") + share("memory")) / 2.0
}

/// The node to bind to, or kube-scheduler's message when none fits.
pub fn choose<'a>(pod: &Pod, candidates: &[Candidate<'a>]) -> Result<&'a Node, String> {
    let requests = pod_requests(pod);
    let mut reasons: BTreeMap<Reason, usize> = BTreeMap::new();
    let mut best: Option<(&Candidate<'a>, f64)> = None;
    for candidate in candidates {
        match filter(pod, candidate, &requests) {
            Ok(()) => {
                let score = free_share(candidate, &requests);
                let better = match best {
                    None => true,
                    Some((b, s)) => {
                        score > s
                            || (score == s && candidate.node.metadata.name < b.node.metadata.name)
                    }
                };
                if better {
                    best = Some((candidate, score));
                }
            }
            Err(why) => {
                for reason in why {
                    *reasons.entry(reason).or_default() += 1;
                }
            }
        }
    }
    match best {
        Some((candidate, _)) => Ok(candidate.node),
        None => Err(fit_error_message(candidates.len(), &reasons)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(
        name: &str,
        labels: serde_json::Value,
        allocatable: serde_json::Value,
        extra: serde_json::Value,
    ) -> Node {
        let mut value = json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            }
        });
        if let Some(spec) = extra.get("spec") {
            value["spec"] = spec.clone();
        }
        if let Some(conditions) = extra.get("conditions") {
            value["status"]["conditions"] = conditions.clone();
        }
        serde_json::from_value(value).unwrap()
    }

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        if spec.get("containers").is_none() {
            spec["containers"] = json!([{"name": "c", "image": "i"}]);
        }
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn gpu_pod(gpus: u32) -> Pod {
        pod(json!({"containers": [{"name": "c", "image": "i",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}))
    }

    fn candidate(node: &Node) -> Candidate<'_> {
        Candidate {
            node,
            allocatable: allocatable(node),
            used: Resources::new(),
        }
    }

    fn cpu_node(name: &str) -> Node {
        node(
            name,
            json!({}),
            json!({"cpu": "32", "memory": "256Gi", "pods": "110"}),
            json!({}),
        )
    }

    fn gpu_node(name: &str, gpus: &str) -> Node {
        node(
            name,
            json!({"nvidia.com/gpu.present": "true"}),
            json!({"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": gpus}),
            json!({}),
        )
    }

    #[test]
    fn a_gpu_pod_binds_to_the_gpu_node_not_the_cpu_nodes() {
        let nodes = [cpu_node("cpu-a"), gpu_node("gpu-1", "8"), cpu_node("cpu-b")];
        let candidates: Vec<_> = nodes.iter().map(candidate).collect();
        let chosen = choose(&gpu_pod(2), &candidates).unwrap();
        assert_eq!(chosen.metadata.name.as_deref(), Some("gpu-1"));
    }

    #[test]
    fn too_many_gpus_gives_kube_schedulers_message() {
        let nodes = [
            cpu_node("cpu-a"),
            gpu_node("gpu-1", "8"),
            gpu_node("gpu-2", "8"),
        ];
        let candidates: Vec<_> = nodes.iter().map(candidate).collect();
        let mut p = gpu_pod(9);
        p.spec.as_mut().unwrap().node_selector =
            Some([("nvidia.com/gpu.present".to_string(), "true".to_string())].into());
        assert_eq!(
            choose(&p, &candidates).unwrap_err(),
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu."
        );
    }

    #[test]
    fn used_gpus_count_against_the_node() {
        let n = gpu_node("gpu-1", "4");
        let mut c = candidate(&n);
        c.used.insert("nvidia.com/gpu".into(), 3000);
        c.used.insert(PODS.into(), 1000);
        assert_eq!(
            filter(&gpu_pod(2), &c, &pod_requests(&gpu_pod(2))),
            Err(vec![Reason::Insufficient("nvidia.com/gpu".into())])
        );
        assert_eq!(filter(&gpu_pod(1), &c, &pod_requests(&gpu_pod(1))), Ok(()));
    }

    #[test]
    fn a_full_node_reports_too_many_pods() {
        let n = node("small", json!({}), json!({"pods": "1"}), json!({}));
        let mut c = candidate(&n);
        c.used.insert(PODS.into(), 1000);
        let p = pod(json!({}));
        assert_eq!(
            filter(&p, &c, &pod_requests(&p)),
            Err(vec![Reason::TooManyPods])
        );
    }

    #[test]
    fn taints_need_tolerations_and_prefer_no_schedule_is_ignored() {
        let tainted = node(
            "t",
            json!({}),
            json!({"pods": "110"}),
            json!({"spec": {"taints": [
                {"key": "soft", "effect": "PreferNoSchedule"},
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
            ]}}),
        );
        let c = candidate(&tainted);
        let plain = pod(json!({}));
        let reasons = filter(&plain, &c, &Resources::new()).unwrap_err();
        assert_eq!(
            reasons[0].to_string(),
            "node(s) had untolerated taint {nvidia.com/gpu: present}"
        );
        let equal = pod(
            json!({"tolerations": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}),
        );
        assert_eq!(filter(&equal, &c, &Resources::new()), Ok(()));
        let exists_all = pod(json!({"tolerations": [{"operator": "Exists"}]}));
        assert_eq!(filter(&exists_all, &c, &Resources::new()), Ok(()));
        let wrong_value =
            pod(json!({"tolerations": [{"key": "nvidia.com/gpu", "value": "absent"}]}));
        assert!(filter(&wrong_value, &c, &Resources::new()).is_err());
    }

    #[test]
    fn not_ready_and_cordoned_nodes_are_filtered() {
        let not_ready = node(
            "n",
            json!({}),
            json!({"pods": "110"}),
            json!({"conditions": [{"type": "Ready", "status": "False"}]}),
        );
        let p = pod(json!({}));
        assert_eq!(
            filter(&p, &candidate(&not_ready), &Resources::new()).unwrap_err()[0].to_string(),
            "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        );
        let cordoned = node(
            "c",
            json!({}),
            json!({"pods": "110"}),
            json!({"spec": {"unschedulable": true}}),
        );
        assert_eq!(
            filter(&p, &candidate(&cordoned), &Resources::new()),
            Err(vec![Reason::Unschedulable])
        );
    }

    #[test]
    fn required_node_affinity_supports_every_operator() {
        let n = node(
            "n",
            json!({"gpus": "8", "zone": "a", "tier": "gpu"}),
            json!({"pods": "110"}),
            json!({}),
        );
        let c = candidate(&n);
        let with = |exprs: serde_json::Value| {
            pod(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": exprs}]}}}}),
            )
        };
        let fits = |exprs: serde_json::Value| filter(&with(exprs), &c, &Resources::new()).is_ok();
        assert!(fits(
            json!([{"key": "zone", "operator": "In", "values": ["a", "b"]}])
        ));
        assert!(!fits(
            json!([{"key": "zone", "operator": "NotIn", "values": ["a"]}])
        ));
        assert!(fits(json!([{"key": "tier", "operator": "Exists"}])));
        assert!(!fits(json!([{"key": "tier", "operator": "DoesNotExist"}])));
        assert!(fits(
            json!([{"key": "gpus", "operator": "Gt", "values": ["4"]}])
        ));
        assert!(!fits(
            json!([{"key": "gpus", "operator": "Lt", "values": ["4"]}])
        ));
        assert!(!fits(
            json!([{"key": "zone", "operator": "Gt", "values": ["4"]}])
        ));
        // Terms are ORed.
        let either = pod(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}
            ]}}}}),
        );
        assert!(filter(&either, &c, &Resources::new()).is_ok());
    }

    #[test]
    fn requests_default_to_limits_and_init_containers_take_the_max() {
        let p = pod(json!({
            "containers": [
                {"name": "a", "image": "i", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "image": "i", "resources": {"requests": {"cpu": "250m"}}}
            ],
            "initContainers": [{"name": "init", "image": "i", "resources": {"requests": {"cpu": "2"}}}]
        }));
        let r = pod_requests(&p);
        assert_eq!(r["cpu"], 2000);
        assert_eq!(r["memory"], (1i128 << 30) * 1000);
    }

    #[test]
    fn the_least_allocated_node_wins_and_ties_go_by_name() {
        let a = cpu_node("a");
        let b = cpu_node("b");
        let mut busy = candidate(&a);
        busy.used.insert("cpu".into(), 16_000);
        let candidates = vec![busy, candidate(&b)];
        let p = pod(json!({}));
        assert_eq!(
            choose(&p, &candidates).unwrap().metadata.name.as_deref(),
            Some("b")
        );
        let candidates = vec![candidate(&b), candidate(&a)];
        assert_eq!(
            choose(&p, &candidates).unwrap().metadata.name.as_deref(),
            Some("a")
        );
    }

    #[test]
    fn no_nodes_at_all_has_its_own_message() {
        assert_eq!(
            choose(&pod(json!({})), &[]).unwrap_err(),
            "no nodes available to schedule pods"
        );
    }
}
