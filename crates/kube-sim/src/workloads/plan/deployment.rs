//! The Deployment controller's decision: which ReplicaSet runs the current
//! pod template, how far each ReplicaSet is scaled in this step of a
//! rollout (RollingUpdate's maxSurge/maxUnavailable, or Recreate), which
//! old ReplicaSets fall out of the revision history, and the status.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

/// A ReplicaSet to create for the current template.
#[derive(Debug, Clone, PartialEq)]
pub struct NewReplicaSet {
    pub name: String,
    pub hash: String,
    pub revision: u64,
    pub replicas: i32,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeploymentPlan {
    pub create: Option<NewReplicaSet>,
    /// (ReplicaSet name, new spec.replicas).
    pub scale: Vec<(String, i32)>,
    /// Old ReplicaSets beyond `revisionHistoryLimit`, scaled to zero.
    pub delete: Vec<String>,
    /// The Deployment's `deployment.kubernetes.io/revision`.
    pub revision: u64,
}

/// FNV-1a (32 bits) of the template's JSON, its decimal digits spelled in
/// the alphabet upstream uses for names (no vowels, no look-alikes). The
/// value is kube-sim's own: upstream hashes Go's printing of the struct,
/// which only Go reproduces; names have the same shape.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let text = serde_json::to_string(template).unwrap_or_default();
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.to_string()
        .bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

/// The template a ReplicaSet runs, without the label its Deployment added.
fn template_without_hash(rs: &ReplicaSet) -> Option<PodTemplateSpec> {
    let mut template = rs.spec.as_ref()?.template.clone()?;
    if let Some(labels) = template.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(POD_TEMPLATE_HASH);
    }
    Some(template)
}

pub fn revision_of(rs: &ReplicaSet) -> u64 {
    rs.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn spec_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn status_of(rs: &ReplicaSet) -> (i32, i32, i32) {
    rs.status
        .as_ref()
        .map(|s| {
            (
                s.replicas,
                s.ready_replicas.unwrap_or(0),
                s.available_replicas.unwrap_or(0),
            )
        })
        .unwrap_or_default()
}

/// A percentage of `total`, rounded up (surge) or down (unavailable), or
/// an absolute number.
fn resolve(value: Option<&IntOrString>, total: i32, round_up: bool) -> i32 {
    match value {
        None => {
            let quarter = f64::from(total) * 0.25;
            (if round_up {
                quarter.ceil()
            } else {
                quarter.floor()
            }) as i32
        }
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let percent: f64 = s.trim_end_matches('%').parse().unwrap_or(25.0);
            let share = f64::from(total) * percent / 100.0;
            (if round_up {
                share.ceil()
            } else {
                share.floor()
            }) as i32
        }
    }
}

/// (maxSurge, maxUnavailable) of a RollingUpdate; both zero means one
/// may be unavailable, as upstream does to let a rollout move.
pub fn surge_and_unavailable(deployment: &Deployment) -> (i32, i32) {
    let spec = deployment.spec.as_ref();
    let desired = spec.and_then(|s| s.replicas).unwrap_or(1);
    let rolling = spec
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref());
    if spec
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate")
    {
        return (0, desired);
    }
    let surge = resolve(rolling.and_then(|r| r.max_surge.as_ref()), desired, true);
    let unavailable = resolve(
        rolling.and_then(|r| r.max_unavailable.as_ref()),
        desired,
        false,
    );
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// The ReplicaSet among `owned` that runs `deployment`'s current template.
pub fn current<'a>(deployment: &Deployment, owned: &[&'a ReplicaSet]) -> Option<&'a ReplicaSet> {
    let template = deployment.spec.as_ref().map(|s| &s.template)?;
    owned
        .iter()
        .copied()
        .find(|rs| template_without_hash(rs).as_ref() == Some(template))
}

/// `owned`: the ReplicaSets whose controller reference is this Deployment.
pub fn plan(deployment: &Deployment, owned: &[&ReplicaSet]) -> DeploymentPlan {
    let spec = deployment.spec.as_ref();
    let desired = spec.and_then(|s| s.replicas).unwrap_or(1);
    let recreate = spec
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate");
    let paused = spec.and_then(|s| s.paused).unwrap_or(false);
    let new = current(deployment, owned);
    let mut old: Vec<&ReplicaSet> = owned
        .iter()
        .copied()
        .filter(|rs| new.is_none_or(|n| n.metadata.uid != rs.metadata.uid))
        .collect();
    old.sort_by_key(|rs| (revision_of(rs), rs.metadata.name.clone()));
    let max_old_revision = old.iter().map(|rs| revision_of(rs)).max().unwrap_or(0);
    let mut plan = DeploymentPlan {
        revision: new.map(revision_of).unwrap_or(max_old_revision),
        ..Default::default()
    };
    // Working copy of every ReplicaSet's spec.replicas as this step sets them.
    let mut replicas: Vec<(String, i32)> = owned
        .iter()
        .map(|rs| {
            (
                rs.metadata.name.clone().unwrap_or_default(),
                spec_replicas(rs),
            )
        })
        .collect();
    let set = |replicas: &mut Vec<(String, i32)>, name: &str, value: i32| {
        if let Some(entry) = replicas.iter_mut().find(|(n, _)| n == name) {
            entry.1 = value;
        }
    };

    let new_name = new.and_then(|rs| rs.metadata.name.clone());
    if paused {
        // A paused Deployment only follows scaling of the current set.
        if let Some(name) = &new_name {
            set(&mut replicas, name, desired);
        }
    } else if recreate {
        let old_running = old.iter().any(|rs| status_of(rs).0 > 0);
        for rs in &old {
            set(
                &mut replicas,
                rs.metadata.name.as_deref().unwrap_or_default(),
                0,
            );
        }
        if !old_running {
            match &new_name {
                Some(name) => set(&mut replicas, name, desired),
                None => plan.create = Some(new_replica_set(deployment, max_old_revision, desired)),
            }
        }
    } else {
        let (surge, unavailable) = surge_and_unavailable(deployment);
        // Scale the new set up within maxSurge (or down to the target).
        let total: i32 = replicas.iter().map(|(_, r)| r).sum();
        let new_now = new.map(spec_replicas).unwrap_or(0);
        let new_target = if new_now > desired {
            desired
        } else {
            let room = (desired + surge - total).max(0);
            new_now + room.min(desired - new_now)
        };
        match &new_name {
            Some(name) => set(&mut replicas, name, new_target),
            None => {
                plan.create = Some(new_replica_set(deployment, max_old_revision, new_target));
                replicas.push((String::new(), new_target));
            }
        }
        // Scale old sets down as far as maxUnavailable allows: first their
        // pods that are not available anyway, then available ones.
        let min_available = desired - unavailable;
        let new_available = new.map(|rs| status_of(rs).2).unwrap_or(0);
        let new_unavailable = (new_target - new_available).max(0);
        let all: i32 = replicas.iter().map(|(_, r)| r).sum();
        let mut budget = all - min_available - new_unavailable;
        for rs in &old {
            if budget <= 0 {
                break;
            }
            let name = rs.metadata.name.as_deref().unwrap_or_default();
            let count = spec_replicas(rs);
            let unhealthy = (count - status_of(rs).2).max(0).min(budget);
            if unhealthy > 0 {
                set(&mut replicas, name, count - unhealthy);
                budget -= unhealthy;
            }
        }
        let available: i32 = owned.iter().map(|rs| status_of(rs).2).sum();
        let mut budget = available - min_available;
        for rs in &old {
            if budget <= 0 {
                break;
            }
            let name = rs.metadata.name.as_deref().unwrap_or_default();
            let count = replicas
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, r)| *r)
                .unwrap_or(0);
            let down = count.min(budget);
            if down > 0 {
                set(&mut replicas, name, count - down);
                budget -= down;
            }
        }
    }
    for rs in owned {
        let name = rs.metadata.name.clone().unwrap_or_default();
        if let Some((_, value)) = replicas.iter().find(|(n, _)| *n == name)
            && *value != spec_replicas(rs)
        {
            plan.scale.push((name, *value));
        }
    }
    // History: old sets at zero, beyond the limit, oldest first.
    let limit = spec
        .and_then(|s| s.revision_history_limit)
        .unwrap_or(10)
        .max(0) as usize;
    let idle: Vec<&&ReplicaSet> = old
        .iter()
        .filter(|rs| spec_replicas(rs) == 0 && status_of(rs).0 == 0)
        .collect();
    if idle.len() > limit {
        plan.delete = idle[..idle.len() - limit]
            .iter()
            .filter_map(|rs| rs.metadata.name.clone())
            .collect();
    }
    if let Some(created) = &plan.create {
        plan.revision = created.revision;
    }
    plan
}

fn new_replica_set(deployment: &Deployment, max_old_revision: u64, replicas: i32) -> NewReplicaSet {
    let hash = deployment
        .spec
        .as_ref()
        .map(|s| template_hash(&s.template))
        .unwrap_or_default();
    NewReplicaSet {
        name: format!(
            "{}-{hash}",
            deployment.metadata.name.as_deref().unwrap_or_default()
        ),
        hash,
        revision: max_old_revision + 1,
        replicas,
    }
}

/// One condition as upstream keeps them: a change of status moves
/// `lastTransitionTime`, a change of reason or message `lastUpdateTime`.
fn condition(
    existing: &[Value],
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &str,
) -> Value {
    let status = if status { "True" } else { "False" };
    let old = existing.iter().find(|c| c["type"] == kind);
    let transition = match old {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    let update = match old {
        Some(c) if c["status"] == status && c["reason"] == reason && c["message"] == message => {
            c["lastUpdateTime"].clone()
        }
        _ => json!(now),
    };
    json!({
        "type": kind, "status": status, "reason": reason, "message": message,
        "lastTransitionTime": transition, "lastUpdateTime": update,
    })
}

/// The Deployment's status from its ReplicaSets as they are now.
pub fn status(deployment: &Deployment, owned: &[&ReplicaSet], now: &str) -> Value {
    let desired = deployment
        .spec
        .as_ref()
        .and_then(|s| s.replicas)
        .unwrap_or(1);
    let new = current(deployment, owned);
    let (mut replicas, mut ready, mut available) = (0, 0, 0);
    for rs in owned {
        let (r, rd, a) = status_of(rs);
        replicas += r;
        ready += rd;
        available += a;
    }
    let updated = new.map(|rs| status_of(rs).0).unwrap_or(0);
    let (_, unavailable) = surge_and_unavailable(deployment);
    let existing: Vec<Value> = deployment
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(&s.conditions).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let available_condition = if available >= desired - unavailable {
        condition(
            &existing,
            "Available",
            true,
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.",
            now,
        )
    } else {
        condition(
            &existing,
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.",
            now,
        )
    };
    let new_name = new
        .and_then(|rs| rs.metadata.name.clone())
        .unwrap_or_default();
    let complete =
        new.is_some() && updated == desired && replicas == desired && available == desired;
    let progressing = if complete {
        condition(
            &existing,
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            &format!("ReplicaSet \"{new_name}\" has successfully progressed."),
            now,
        )
    } else if new.is_some_and(|rs| rs.status.is_none()) {
        condition(
            &existing,
            "Progressing",
            true,
            "NewReplicaSetCreated",
            &format!("Created new replica set \"{new_name}\""),
            now,
        )
    } else {
        condition(
            &existing,
            "Progressing",
            true,
            "ReplicaSetUpdated",
            &format!("ReplicaSet \"{new_name}\" is progressing."),
            now,
        )
    };
    json!({
        "observedGeneration": deployment.metadata.generation.unwrap_or(0),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "unavailableReplicas": (desired - available).max(0),
        "conditions": [available_condition, progressing],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i32, image: &str, strategy: Value) -> Deployment {
        let mut value = json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "d-1", "generation": 2},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "main", "image": image}]}},
            },
        });
        if !strategy.is_null() {
            value["spec"]["strategy"] = strategy;
        }
        serde_json::from_value(value).unwrap()
    }

    /// A ReplicaSet of `d`'s template as the controller makes them, at
    /// `replicas` with `running` pods of which `available` are available.
    fn replica_set(
        d: &Deployment,
        name: &str,
        revision: u64,
        replicas: i32,
        running: i32,
        available: i32,
    ) -> ReplicaSet {
        let mut template = serde_json::to_value(&d.spec.as_ref().unwrap().template).unwrap();
        template["metadata"]["labels"]["pod-template-hash"] = json!(name);
        serde_json::from_value(json!({
            "metadata": {"name": name, "uid": format!("uid-{name}"),
                         "annotations": {REVISION: revision.to_string()}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "template": template},
            "status": {"replicas": running, "readyReplicas": available, "availableReplicas": available},
        }))
        .unwrap()
    }

    #[test]
    fn the_template_hash_is_stable_and_spelled_in_the_safe_alphabet() {
        let d = deployment(3, "nginx:1.27", Value::Null);
        let hash = template_hash(&d.spec.as_ref().unwrap().template);
        assert_eq!(hash, template_hash(&d.spec.as_ref().unwrap().template));
        assert!(!hash.is_empty() && hash.len() <= 10);
        assert!(
            hash.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)),
            "{hash}"
        );
        let other = deployment(3, "nginx:1.28", Value::Null);
        assert_ne!(hash, template_hash(&other.spec.as_ref().unwrap().template));
    }

    #[test]
    fn a_new_deployment_gets_its_first_replica_set_at_full_size() {
        let d = deployment(3, "nginx:1.27", Value::Null);
        let plan = plan(&d, &[]);
        let created = plan.create.unwrap();
        assert_eq!(created.name, format!("web-{}", created.hash));
        assert_eq!((created.revision, created.replicas), (1, 3));
        assert_eq!(plan.revision, 1);
    }

    #[test]
    fn a_template_change_surges_one_and_takes_one_old_pod_down_within_the_25_percent_defaults() {
        let old_d = deployment(4, "nginx:1.27", Value::Null);
        let old = replica_set(&old_d, "web-old", 1, 4, 4, 4);
        let d = deployment(4, "nginx:1.28", Value::Null);
        let plan = plan(&d, &[&old]);
        let created = plan.create.unwrap();
        assert_eq!((created.revision, created.replicas), (2, 1));
        assert_eq!(plan.scale, [("web-old".to_string(), 3)]);
    }

    #[test]
    fn old_pods_go_only_as_new_ones_become_available() {
        let old_d = deployment(4, "nginx:1.27", Value::Null);
        let d = deployment(4, "nginx:1.28", Value::Null);
        // New set at 2 (none available yet), old at 3 all available:
        // 5 pods = desired + surge, and 3 available = the minimum.
        let new = replica_set(&d, "web-new", 2, 2, 2, 0);
        let old = replica_set(&old_d, "web-old", 1, 3, 3, 3);
        assert_eq!(plan(&d, &[&new, &old]).scale, []);
        // Both new pods available: two old ones may go (5 available, 3
        // needed); the new set grows on the next step, when there is room.
        let new = replica_set(&d, "web-new", 2, 2, 2, 2);
        assert_eq!(plan(&d, &[&new, &old]).scale, [("web-old".to_string(), 1)]);
        let old = replica_set(&old_d, "web-old", 1, 1, 1, 1);
        assert_eq!(plan(&d, &[&new, &old]).scale, [("web-new".to_string(), 4)]);
    }

    #[test]
    fn scaling_without_a_template_change_resizes_the_current_set() {
        let d = deployment(1, "nginx:1.27", Value::Null);
        let current = replica_set(&d, "web-a", 1, 3, 3, 3);
        assert_eq!(plan(&d, &[&current]).scale, [("web-a".to_string(), 1)]);
        let d = deployment(5, "nginx:1.27", Value::Null);
        assert_eq!(plan(&d, &[&current]).scale, [("web-a".to_string(), 5)]);
    }

    #[test]
    fn recreate_stops_every_old_pod_before_the_new_set_starts() {
        let recreate = json!({"type": "Recreate"});
        let old_d = deployment(2, "busybox:1.36", recreate.clone());
        let d = deployment(2, "busybox:1.37", recreate);
        let running = replica_set(&old_d, "web-old", 1, 2, 2, 2);
        let plan_now = plan(&d, &[&running]);
        assert_eq!(plan_now.scale, [("web-old".to_string(), 0)]);
        assert!(plan_now.create.is_none());
        let stopped = replica_set(&old_d, "web-old", 1, 0, 0, 0);
        let created = plan(&d, &[&stopped]).create.unwrap();
        assert_eq!((created.revision, created.replicas), (2, 2));
    }

    #[test]
    fn idle_old_sets_beyond_the_history_limit_are_deleted_oldest_first() {
        let mut d = deployment(1, "nginx:4", Value::Null);
        d.spec.as_mut().unwrap().revision_history_limit = Some(1);
        let old: Vec<ReplicaSet> = (1..=3)
            .map(|r| {
                replica_set(
                    &deployment(1, &format!("nginx:{r}"), Value::Null),
                    &format!("web-r{r}"),
                    r,
                    0,
                    0,
                    0,
                )
            })
            .collect();
        let current = replica_set(&d, "web-r4", 4, 1, 1, 1);
        let mut all: Vec<&ReplicaSet> = old.iter().collect();
        all.push(&current);
        assert_eq!(plan(&d, &all).delete, ["web-r1", "web-r2"]);
    }

    #[test]
    fn a_complete_rollout_reports_upstreams_conditions() {
        let d = deployment(2, "nginx:1.27", Value::Null);
        let current = replica_set(&d, "web-a", 1, 2, 2, 2);
        let status = status(&d, &[&current], "2026-01-01T00:00:00Z");
        assert_eq!(
            (
                status["observedGeneration"].clone(),
                status["replicas"].clone(),
                status["updatedReplicas"].clone(),
                status["availableReplicas"].clone()
            ),
            (json!(2), json!(2), json!(2), json!(2))
        );
        let conditions = status["conditions"].as_array().unwrap();
        assert_eq!(conditions[0]["reason"], "MinimumReplicasAvailable");
        assert_eq!(
            conditions[0]["message"],
            "Deployment has minimum availability."
        );
        assert_eq!(conditions[1]["reason"], "NewReplicaSetAvailable");
        assert_eq!(
            conditions[1]["message"],
            "ReplicaSet \"web-a\" has successfully progressed."
        );
    }

    #[test]
    fn a_rollout_in_progress_is_progressing_and_unavailable_below_the_minimum() {
        let d = deployment(4, "nginx:1.28", Value::Null);
        let old_d = deployment(4, "nginx:1.27", Value::Null);
        let new = replica_set(&d, "web-new", 2, 2, 2, 0);
        let old = replica_set(&old_d, "web-old", 1, 2, 2, 2);
        let status = status(&d, &[&new, &old], "2026-01-01T00:00:00Z");
        assert_eq!(status["updatedReplicas"], 2);
        assert_eq!(status["unavailableReplicas"], 2);
        let conditions = status["conditions"].as_array().unwrap();
        assert_eq!(
            (
                conditions[0]["status"].clone(),
                conditions[0]["reason"].clone()
            ),
            (json!("False"), json!("MinimumReplicasUnavailable"))
        );
        assert_eq!(conditions[1]["reason"], "ReplicaSetUpdated");
    }
}
