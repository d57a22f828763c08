//! Gang scheduling (upstream's, with the partial-allocation deadlock below
//! fixed) with either gang scheduler upstream supports, chosen by
//! `--gang-scheduler-name` as training-operator does: `volcano` means
//! Volcano's `scheduling.volcano.sh/v1beta1` PodGroup, any other name the
//! scheduler-plugins coscheduling `scheduling.x-k8s.io/v1alpha1` PodGroup
//! with that scheduler name on the pods.
//!
//! The job's PodGroup is always created before any of its pods and kept in
//! step with the job (minMember, minResources, ...). With Volcano the pods
//! wait until Volcano admitted the group (its phase is neither empty nor
//! `Pending`), so a job never holds part of its pods on the cluster while
//! the rest cannot be placed (upstream's partial-allocation deadlock,
//! #1264). Coscheduling works the other way round: its PodGroup leaves
//! `Pending` only once `minMember` pods exist and wait at the scheduler's
//! Permit stage, which binds all of them or none; holding the pods back
//! there would deadlock, so they are created as soon as the group exists.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::names::owner_reference;
use crate::api::TFJob;
use crate::api::defaults::EffectiveSpec;

/// The annotation Volcano reads a pod's group from.
pub const GROUP_NAME_ANNOTATION: &str = "scheduling.k8s.io/group-name";
/// The annotation naming the Volcano task (the lower-case replica type).
pub const TASK_SPEC_ANNOTATION: &str = "volcano.sh/task-spec";
/// The label the coscheduling plugin reads a pod's group from.
pub const POD_GROUP_LABEL: &str = "scheduling.x-k8s.io/pod-group";
/// The scheduler name that selects Volcano.
pub const VOLCANO: &str = "volcano";

/// Which PodGroup API a gang scheduler reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GangScheduler {
    /// `scheduling.volcano.sh/v1beta1`.
    Volcano,
    /// scheduler-plugins coscheduling, `scheduling.x-k8s.io/v1alpha1`.
    SchedulerPlugins,
}

impl GangScheduler {
    /// `apiVersion` of this scheduler's PodGroups.
    pub fn api_version(self) -> &'static str {
        match self {
            GangScheduler::Volcano => "scheduling.volcano.sh/v1beta1",
            GangScheduler::SchedulerPlugins => "scheduling.x-k8s.io/v1alpha1",
        }
    }
}

/// Gang scheduling settings (`--enable-gang-scheduling`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangConfig {
    /// `schedulerName` of the pods (`--gang-scheduler-name`, `volcano`);
    /// it also selects the PodGroup API ([`GangConfig::scheduler`]).
    pub scheduler_name: String,
}

impl GangConfig {
    /// `volcano` is Volcano; any other name is a scheduler-plugins
    /// scheduler (training-operator's rule).
    pub fn scheduler(&self) -> GangScheduler {
        if self.scheduler_name == VOLCANO {
            GangScheduler::Volcano
        } else {
            GangScheduler::SchedulerPlugins
        }
    }
}

/// The job's PodGroup as observed.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ObservedPodGroup {
    pub uid: Option<String>,
    /// `status.phase` (`Pending`, `Inqueue`, `Running`, ...).
    pub phase: Option<String>,
    /// When the group was created (the scheduling timeout runs from it).
    pub created: Option<jiff::Timestamp>,
    /// Its `spec`, to see whether it still matches the job.
    pub spec: Value,
}

impl ObservedPodGroup {
    /// The scheduler admitted the group: it moved past `Pending`.
    pub fn is_admitted(&self) -> bool {
        !matches!(self.phase.as_deref(), None | Some("") | Some("Pending"))
    }

    /// Whether the job's pods may be created now: with Volcano once the
    /// group is admitted, with coscheduling as soon as the group exists
    /// (see the module comment).
    pub fn allows_pods(&self, scheduler: GangScheduler) -> bool {
        match scheduler {
            GangScheduler::Volcano => self.is_admitted(),
            GangScheduler::SchedulerPlugins => true,
        }
    }
}

/// What the planner knows of the cluster for gang scheduling.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GangSnapshot {
    /// The job's PodGroup, if it exists.
    pub pod_group: Option<ObservedPodGroup>,
    /// Every PriorityClass by name, with its value.
    pub priority_classes: BTreeMap<String, i32>,
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

/// The PriorityClass a replica's pods name, if any.
fn priority_class_of(replica: &crate::api::defaults::EffectiveReplica) -> Option<&str> {
    replica
        .template
        .spec
        .as_ref()
        .and_then(|pod| pod.priority_class_name.as_deref())
        .filter(|class| !class.is_empty())
}

/// What the first `min_member` pods ask for: each container's requests, its
/// limits where it has no requests (as upstream counts them), summed per
/// resource. Replicas are taken by their PriorityClass value, highest first
/// (as the scheduler would place them), ties in the planner's type order; a
/// replica with no class, or one naming a class that does not exist, counts
/// as 0 (upstream dereferenced a nil lister there).
pub fn min_resources(
    spec: &EffectiveSpec,
    min_member: i32,
    priority_classes: &BTreeMap<String, i32>,
) -> BTreeMap<String, String> {
    let mut replicas: Vec<_> = spec.replicas.values().collect();
    let value = |replica: &crate::api::defaults::EffectiveReplica| {
        priority_class_of(replica)
            .and_then(|class| priority_classes.get(class).copied())
            .unwrap_or(0)
    };
    // A stable sort keeps the type order among equal priorities.
    replicas.sort_by_key(|replica| std::cmp::Reverse(value(replica)));
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    let mut left = min_member;
    for replica in replicas {
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

/// The `spec` the job's PodGroup should have. Both APIs: `minMember` from
/// `schedulingPolicy.minAvailable` or every replica, `minResources` from
/// the policy or computed ([`min_resources`]). Volcano adds `queue` and
/// `priorityClassName` from the policy; coscheduling
/// `scheduleTimeoutSeconds` (its scheduler's wait at Permit).
pub fn pod_group_spec(
    job: &TFJob,
    spec: &EffectiveSpec,
    scheduler: GangScheduler,
    priority_classes: &BTreeMap<String, i32>,
) -> Value {
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
        None => min_resources(spec, min_member, priority_classes),
    };
    let mut group_spec = json!({"minMember": min_member, "minResources": min_resources});
    match scheduler {
        GangScheduler::Volcano => {
            if let Some(queue) = policy.queue.filter(|q| !q.is_empty()) {
                group_spec["queue"] = json!(queue);
            }
            if let Some(class) = policy.priority_class.filter(|c| !c.is_empty()) {
                group_spec["priorityClassName"] = json!(class);
            }
        }
        GangScheduler::SchedulerPlugins => {
            if let Some(seconds) = policy.schedule_timeout_seconds {
                group_spec["scheduleTimeoutSeconds"] = json!(seconds);
            }
        }
    }
    group_spec
}

/// The PodGroup of `job`: named after it, its annotations, a controller
/// owner reference, the spec of [`pod_group_spec`].
pub fn pod_group(
    job: &TFJob,
    spec: &EffectiveSpec,
    scheduler: GangScheduler,
    priority_classes: &BTreeMap<String, i32>,
) -> Value {
    let mut group = json!({
        "apiVersion": scheduler.api_version(),
        "kind": "PodGroup",
        "metadata": {
            "name": job.metadata.name,
            "namespace": job.metadata.namespace,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_group_spec(job, spec, scheduler, priority_classes),
    });
    // The job's annotations, if it has any: training-operator copies the
    // job's map as it is, so a job without annotations gives a group
    // without the field, not an empty map (the referee corpus's gang
    // scenario).
    if let Some(annotations) = job.metadata.annotations.as_ref() {
        group["metadata"]["annotations"] = json!(annotations);
    }
    group
}

/// Whether two `minResources` maps ask for the same: the same resources,
/// and amounts equal as numbers (`1` and `1000m` are one core), so a
/// scheduler that rewrites quantities causes no update loop.
fn same_resources(observed: &Value, desired: &Value) -> bool {
    let amounts = |value: &Value| -> Option<BTreeMap<String, f64>> {
        value
            .as_object()
            .map(|map| {
                map.iter()
                    .map(|(name, quantity)| {
                        Some((name.clone(), parse_quantity(quantity.as_str()?)?))
                    })
                    .collect::<Option<BTreeMap<_, _>>>()
            })
            .unwrap_or_else(|| Some(BTreeMap::new()))
    };
    match (amounts(observed), amounts(desired)) {
        (Some(observed), Some(desired)) => {
            observed.len() == desired.len()
                && observed.iter().all(|(name, amount)| {
                    desired.get(name).is_some_and(|wanted| {
                        (wanted - amount).abs() <= 1e-9 * amount.abs().max(1.0)
                    })
                })
        }
        _ => observed == desired,
    }
}

/// The merge patch of `spec` that brings an existing PodGroup in line with
/// the job, or None when it matches. Only the fields the operator sets are
/// compared (a scheduler's own defaults, such as Volcano's queue
/// `default`, are left alone); a changed `minResources` is replaced as a
/// whole, resources no longer asked for nulled.
pub fn spec_update(observed: &Value, desired: &Value) -> Option<Value> {
    let desired = desired.as_object()?;
    let mut patch = serde_json::Map::new();
    for (key, wanted) in desired {
        let current = observed.get(key).unwrap_or(&Value::Null);
        let same = match key.as_str() {
            "minResources" => same_resources(current, wanted),
            _ => current == wanted,
        };
        if same {
            continue;
        }
        let mut value = wanted.clone();
        if key == "minResources"
            && let (Some(current), Some(value)) = (current.as_object(), value.as_object_mut())
        {
            for gone in current.keys() {
                value.entry(gone.clone()).or_insert(Value::Null);
            }
        }
        patch.insert(key.clone(), value);
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// PriorityClasses the job names that do not exist, each with where it is
/// named (`schedulingPolicy.priorityClass`, `Worker`, ...).
pub fn missing_priority_classes(
    job: &TFJob,
    spec: &EffectiveSpec,
    priority_classes: &BTreeMap<String, i32>,
) -> Vec<(String, String)> {
    let mut missing = Vec::new();
    let policy_class = job
        .spec
        .run_policy
        .as_ref()
        .and_then(|run| run.scheduling_policy.as_ref())
        .and_then(|policy| policy.priority_class.as_deref())
        .filter(|class| !class.is_empty());
    if let Some(class) = policy_class
        && !priority_classes.contains_key(class)
    {
        missing.push((
            class.to_string(),
            "runPolicy.schedulingPolicy.priorityClass".to_string(),
        ));
    }
    for (rtype, replica) in &spec.replicas {
        if let Some(class) = priority_class_of(replica)
            && !priority_classes.contains_key(class)
        {
            missing.push((class.to_string(), format!("the {rtype} pod template")));
        }
    }
    missing
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::api::{CleanPodPolicy, ReplicaSpec, RunPolicy, SchedulingPolicy, TFJob, TFJobSpec};
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
        let group = pod_group(&job, &spec, GangScheduler::Volcano, &BTreeMap::new());
        assert_eq!(group["apiVersion"], "scheduling.volcano.sh/v1beta1");
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
        let group = pod_group(&job, &spec, GangScheduler::Volcano, &BTreeMap::new());
        assert_eq!(group["spec"]["minMember"], 2);
        assert_eq!(group["spec"]["minResources"], json!({"cpu": "2"}));
        assert_eq!(group["spec"]["queue"], "research");
        assert_eq!(group["spec"]["priorityClassName"], "high");
    }

    #[test]
    fn a_pod_group_is_admitted_once_volcano_moved_it_past_pending() {
        let phase = |p: Option<&str>| ObservedPodGroup {
            phase: p.map(str::to_string),
            ..ObservedPodGroup::default()
        };
        assert!(!phase(None).is_admitted());
        assert!(!phase(Some("Pending")).is_admitted());
        assert!(phase(Some("Inqueue")).is_admitted());
        assert!(phase(Some("Running")).is_admitted());
        assert!(!phase(Some("Pending")).allows_pods(GangScheduler::Volcano));
        // Coscheduling leaves Pending only once the pods exist.
        assert!(phase(Some("Pending")).allows_pods(GangScheduler::SchedulerPlugins));
        assert!(phase(None).allows_pods(GangScheduler::SchedulerPlugins));
    }

    #[test]
    fn the_gang_scheduler_name_volcano_selects_volcano_and_any_other_scheduler_plugins() {
        let config = |name: &str| GangConfig {
            scheduler_name: name.into(),
        };
        assert_eq!(config("volcano").scheduler(), GangScheduler::Volcano);
        assert_eq!(
            config("scheduler-plugins-scheduler").scheduler(),
            GangScheduler::SchedulerPlugins
        );
    }

    fn with_policy(mut job: TFJob, policy: SchedulingPolicy) -> TFJob {
        job.spec.run_policy = Some(RunPolicy {
            scheduling_policy: Some(policy),
            ..RunPolicy::default()
        });
        job
    }

    #[test]
    fn a_scheduler_plugins_pod_group_has_min_member_min_resources_and_the_schedule_timeout_only() {
        let job = with_policy(
            job_with(TFJobSpec {
                tf_replica_specs: Some(
                    [("Worker".to_string(), replica(3, &[("cpu", "2")], &[]))].into(),
                ),
                ..TFJobSpec::default()
            }),
            SchedulingPolicy {
                queue: Some("research".into()),
                priority_class: Some("high".into()),
                schedule_timeout_seconds: Some(30),
                ..SchedulingPolicy::default()
            },
        );
        let spec = crate::api::defaults::apply(&job, CleanPodPolicy::Running);
        let group = pod_group(
            &job,
            &spec,
            GangScheduler::SchedulerPlugins,
            &BTreeMap::new(),
        );
        assert_eq!(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
        assert_eq!(group["kind"], "PodGroup");
        assert_eq!(
            group["spec"],
            json!({"minMember": 3, "minResources": {"cpu": "6"}, "scheduleTimeoutSeconds": 30})
        );
    }

    fn set_class(job: &mut TFJob, rtype: &str, class: Option<&str>) {
        let replica = job
            .spec
            .tf_replica_specs
            .as_mut()
            .unwrap()
            .get_mut(rtype)
            .unwrap();
        replica
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .priority_class_name = class.map(str::to_string);
    }

    #[test]
    fn min_resources_take_the_highest_priority_replicas_first_and_a_missing_class_counts_as_zero() {
        let mut job = with_policy(
            job_with(TFJobSpec {
                tf_replica_specs: Some(
                    [
                        ("Chief".to_string(), replica(1, &[("cpu", "4")], &[])),
                        ("PS".to_string(), replica(2, &[("cpu", "500m")], &[])),
                        ("Worker".to_string(), replica(4, &[("cpu", "1")], &[])),
                    ]
                    .into(),
                ),
                ..TFJobSpec::default()
            }),
            SchedulingPolicy {
                min_available: Some(4),
                ..SchedulingPolicy::default()
            },
        );
        set_class(&mut job, "Chief", Some("missing"));
        set_class(&mut job, "Worker", Some("high"));
        let classes: BTreeMap<String, i32> =
            [("high".to_string(), 1000), ("low".to_string(), -5)].into();
        let cpu = |text: &str| BTreeMap::from([("cpu".to_string(), text.to_string())]);
        let spec = crate::api::defaults::apply(&job, CleanPodPolicy::Running);
        // Worker (1000) fills the four places before anything else.
        assert_eq!(min_resources(&spec, 4, &classes), cpu("4"));
        // With no class known every replica is 0 and type order decides:
        // Chief 4, PS 2 x 0.5, one Worker.
        assert_eq!(min_resources(&spec, 4, &BTreeMap::new()), cpu("6"));
        assert_eq!(
            missing_priority_classes(&job, &spec, &classes),
            [("missing".to_string(), "the Chief pod template".to_string())]
        );
        // A negative value puts a replica behind those with none.
        set_class(&mut job, "Chief", Some("low"));
        set_class(&mut job, "Worker", None);
        let spec = crate::api::defaults::apply(&job, CleanPodPolicy::Running);
        assert_eq!(
            min_resources(&spec, 4, &classes),
            cpu("3"),
            "PS 2 x 0.5 and Worker 2 x 1"
        );
        assert!(missing_priority_classes(&job, &spec, &classes).is_empty());
    }

    #[test]
    fn an_existing_pod_group_is_patched_only_where_it_differs_from_the_job() {
        let desired = json!({"minMember": 3, "minResources": {"cpu": "1500m", "memory": "2Gi"}, "queue": "q"});
        // Same amounts in other notation, and a scheduler default: in sync.
        let same = json!({"minMember": 3, "minResources": {"cpu": "1.5", "memory": "2048Mi"}, "queue": "q", "priorityClassName": "x"});
        assert_eq!(spec_update(&same, &desired), None);
        let drifted = json!({"minMember": 2, "minResources": {"cpu": "1", "nvidia.com/gpu": "1"}, "queue": "q"});
        assert_eq!(
            spec_update(&drifted, &desired),
            Some(json!({
                "minMember": 3,
                "minResources": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": null},
            }))
        );
        assert_eq!(
            spec_update(&json!({}), &desired),
            Some(desired.clone()),
            "a group with no spec gets all of it"
        );
    }
}
