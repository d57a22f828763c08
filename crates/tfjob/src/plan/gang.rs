//! Gang scheduling with Volcano (report 2.17, fixed as 5.3 says): the
//! job's `PodGroup` is created first, and pods only once Volcano admitted
//! the group (its phase is neither empty nor `Pending`), so a job never
//! holds part of its pods on the cluster while the rest cannot be placed
//! (upstream's partial-allocation deadlock, #1264).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::names::owner_reference;
use crate::api::TFJob;
use crate::api::defaults::EffectiveSpec;

/// The annotation Volcano reads a pod's group from.
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";

/// Gang scheduling settings (`--enable-gang-scheduling`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangConfig {
    /// `schedulerName` of the pods (`--gang-scheduler-name`, `volcano`).
    pub scheduler_name: String,
}

/// The job's PodGroup as observed.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ObservedPodGroup {
    pub uid: Option<String>,
    /// `status.phase` (`Pending`, `Inqueue`, `Running`, ...).
    pub phase: Option<String>,
    /// When the group was created (the scheduling timeout runs from it).
    pub created: Option<jiff::Timestamp>,
}

impl ObservedPodGroup {
    /// Volcano admitted the group: its pods may be created.
    pub fn is_admitted(&self) -> bool {
        !matches!(self.phase.as_deref(), None | Some("") | Some("Pending"))
    }
}

/// A Kubernetes quantity as a number of base units (cores, bytes, ...),
/// or None when it is not one.
pub fn parse_quantity(text: &str) -> Option<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "Pi" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "Ei" => 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(number * factor)
}

/// Writes a sum back: milli-units when fractional, else the largest binary
/// suffix that divides it, else a plain integer.
pub fn format_quantity(value: f64) -> String {
    let millis = (value * 1000.0).round();
    if millis % 1000.0 != 0.0 {
        return format!("{millis}m");
    }
    let whole = millis / 1000.0;
    for (suffix, unit) in [
        ("Ti", 1024.0_f64.powi(4)),
        ("Gi", 1024.0_f64.powi(3)),
        ("Mi", 1024.0_f64.powi(2)),
        ("Ki", 1024.0),
    ] {
        if whole >= unit && whole % unit == 0.0 {
            return format!("{}{suffix}", whole / unit);
        }
    }
    format!("{whole}")
}

/// What the first `min_member` pods ask for: each container's requests,
/// its limits where it has no requests (report 2.17), summed per resource.
/// Replicas are taken in the planner's type order.
pub fn min_resources(spec: &EffectiveSpec, min_member: i32) -> BTreeMap<String, String> {
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    let mut left = min_member;
    for replica in spec.replicas.values() {
        let Some(pod) = replica.template.spec.as_ref() else {
            continue;
        };
        let pods = replica.replicas.min(left).max(0);
        left -= pods;
        for container in &pod.containers {
            let resources = container.resources.as_ref();
            let asked = resources
                .and_then(|r| r.requests.as_ref())
                .or_else(|| resources.and_then(|r| r.limits.as_ref()));
            for (name, quantity) in asked.into_iter().flatten() {
                if let Some(value) = parse_quantity(&quantity.0) {
                    *totals.entry(name.clone()).or_default() += value * f64::from(pods);
                }
            }
        }
        if left <= 0 {
            break;
        }
    }
    totals
        .into_iter()
        .map(|(name, value)| (name, format_quantity(value)))
        .collect()
}

/// The Volcano PodGroup of `job`: named after it, its annotations, a
/// controller owner reference; `minMember` from
/// `schedulingPolicy.minAvailable` or every replica; `minResources`, queue
/// and priority class from the scheduling policy, `minResources` computed
/// when absent.
pub fn pod_group(job: &TFJob, spec: &EffectiveSpec) -> Value {
    let policy = job
        .spec
        .run_policy
        .as_ref()
        .and_then(|run| run.scheduling_policy.clone())
        .unwrap_or_default();
    let total: i32 = spec.replicas.values().map(|r| r.replicas).sum();
    let min_member = policy.min_available.unwrap_or(total);
    let min_resources: BTreeMap<String, String> = match &policy.min_resources {
        Some(given) => given
            .iter()
            .map(|(name, quantity)| (name.clone(), quantity.0.clone()))
            .collect(),
        None => min_resources(spec, min_member),
    };
    let mut group_spec = json!({"minMember": min_member, "minResources": min_resources});
    if let Some(queue) = policy.queue.filter(|q| !q.is_empty()) {
        group_spec["queue"] = json!(queue);
    }
    if let Some(class) = policy.priority_class.filter(|c| !c.is_empty()) {
        group_spec["priorityClassName"] = json!(class);
    }
    json!({
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": job.metadata.name,
            "namespace": job.metadata.namespace,
            "annotations": job.metadata.annotations.clone().unwrap_or_default(),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": group_spec,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::api::{CleanPodPolicy, ReplicaSpec, RunPolicy, SchedulingPolicy, TFJobSpec};
    use crate::testing::{job_with, tf_template};

    fn replica(n: i32, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> ReplicaSpec {
        let mut template = tf_template("img:1");
        let to_map = |pairs: &[(&str, &str)]| {
            (!pairs.is_empty()).then(|| {
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect()
            })
        };
        template.spec.as_mut().unwrap().containers[0].resources = Some(ResourceRequirements {
            requests: to_map(requests),
            limits: to_map(limits),
            ..ResourceRequirements::default()
        });
        ReplicaSpec {
            replicas: Some(n),
            template: Some(template),
            restart_policy: None,
        }
    }

    #[test]
    fn quantities_parse_and_sums_print_in_kubernetes_notation() {
        assert_eq!(parse_quantity("500m"), Some(0.5));
        assert_eq!(parse_quantity("1Gi"), Some(1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse_quantity("2"), Some(2.0));
        assert_eq!(parse_quantity("1x"), None);
        assert_eq!(format_quantity(1.5), "1500m");
        assert_eq!(format_quantity(3.0 * 1024.0 * 1024.0 * 1024.0), "3Gi");
        assert_eq!(format_quantity(4.0), "4");
    }

    #[test]
    fn the_pod_group_has_every_replica_as_min_member_and_sums_requests_falling_back_to_limits() {
        let job = job_with(TFJobSpec {
            tf_replica_specs: Some(
                [
                    (
                        "Worker".to_string(),
                        replica(2, &[("cpu", "500m"), ("memory", "1Gi")], &[]),
                    ),
                    // No requests: its limits count.
                    (
                        "PS".to_string(),
                        replica(1, &[], &[("cpu", "1"), ("memory", "1Gi")]),
                    ),
                ]
                .into(),
            ),
            ..TFJobSpec::default()
        });
        let spec = crate::api::defaults::apply(&job, CleanPodPolicy::Running);
        let group = pod_group(&job, &spec);
        assert_eq!(group["spec"]["minMember"], 3);
        assert_eq!(
            group["spec"]["minResources"],
            json!({"cpu": "2", "memory": "3Gi"})
        );
        assert_eq!(group["metadata"]["name"], "test-tfjob");
        assert_eq!(group["metadata"]["ownerReferences"][0]["controller"], true);
        assert!(group["spec"].get("queue").is_none());
    }

    #[test]
    fn the_scheduling_policy_sets_min_member_min_resources_queue_and_priority_class() {
        let mut job = job_with(TFJobSpec {
            tf_replica_specs: Some(
                [("Worker".to_string(), replica(4, &[("cpu", "1")], &[]))].into(),
            ),
            ..TFJobSpec::default()
        });
        job.spec.run_policy = Some(RunPolicy {
            scheduling_policy: Some(SchedulingPolicy {
                min_available: Some(2),
                queue: Some("research".into()),
                priority_class: Some("high".into()),
                ..SchedulingPolicy::default()
            }),
            ..RunPolicy::default()
        });
        let spec = crate::api::defaults::apply(&job, CleanPodPolicy::Running);
        let group = pod_group(&job, &spec);
        assert_eq!(group["spec"]["minMember"], 2);
        assert_eq!(group["spec"]["minResources"], json!({"cpu": "2"}));
        assert_eq!(group["spec"]["queue"], "research");
        assert_eq!(group["spec"]["priorityClassName"], "high");
    }

    #[test]
    fn a_pod_group_is_admitted_once_volcano_moved_it_past_pending() {
        let phase = |p: Option<&str>| ObservedPodGroup {
            uid: None,
            phase: p.map(str::to_string),
            created: None,
        };
        assert!(!phase(None).is_admitted());
        assert!(!phase(Some("Pending")).is_admitted());
        assert!(phase(Some("Inqueue")).is_admitted());
        assert!(phase(Some("Running")).is_admitted());
    }
}
