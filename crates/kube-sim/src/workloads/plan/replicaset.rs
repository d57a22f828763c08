//! The ReplicaSet controller's decision: how many pods to add, which to
//! delete, and the status that the pods it owns give.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::pods;

#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaSetPlan {
    /// Pods to create from the template.
    pub create: usize,
    /// Names of pods to delete.
    pub delete: Vec<String>,
    /// The whole `.status` to write (if it differs from the stored one).
    pub status: Value,
}

/// `owned`: the pods whose controller reference is this ReplicaSet.
pub fn plan(rs: &ReplicaSet, owned: &[&Pod], now: Timestamp) -> ReplicaSetPlan {
    let spec = rs.spec.as_ref();
    let desired = usize::try_from(spec.and_then(|s| s.replicas).unwrap_or(1)).unwrap_or(0);
    let min_ready = spec.and_then(|s| s.min_ready_seconds).unwrap_or(0);
    let mut active: Vec<&Pod> = owned
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    let (create, delete) = if active.len() < desired {
        (desired - active.len(), Vec::new())
    } else {
        pods::deletion_order(&mut active);
        let excess = active.len() - desired;
        (0, active[..excess].iter().map(|p| pods::name(p)).collect())
    };
    let ready = active.iter().filter(|p| pods::is_ready(p)).count();
    let available = active
        .iter()
        .filter(|p| pods::is_available(p, min_ready, now))
        .count();
    let status = json!({
        "replicas": active.len(),
        "fullyLabeledReplicas": active.len(),
        "readyReplicas": ready,
        "availableReplicas": available,
        "observedGeneration": rs.metadata.generation.unwrap_or(0),
    });
    ReplicaSetPlan {
        create,
        delete,
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(replicas: i32) -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": "web-abc", "generation": 2},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}}},
        }))
        .unwrap()
    }

    fn pod(name: &str, phase: &str, ready: bool, node: Option<&str>, created: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"containers": [], "nodeName": node},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}, "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        }))
        .unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:01:00Z".parse().unwrap()
    }

    #[test]
    fn missing_replicas_are_created_and_finished_pods_do_not_count() {
        let done = pod("a", "Succeeded", false, Some("n"), "2026-01-01T00:00:00Z");
        let running = pod("b", "Running", true, Some("n"), "2026-01-01T00:00:00Z");
        let plan = plan(&rs(3), &[&done, &running], now());
        assert_eq!(plan.create, 2);
        assert!(plan.delete.is_empty());
        assert_eq!(
            plan.status,
            json!({"replicas": 1, "fullyLabeledReplicas": 1, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 2})
        );
    }

    #[test]
    fn scaling_down_gives_up_unscheduled_then_not_ready_then_newest_pods_first() {
        let old_ready = pod("old", "Running", true, Some("n"), "2026-01-01T00:00:00Z");
        let new_ready = pod("new", "Running", true, Some("n"), "2026-01-01T00:00:30Z");
        let not_ready = pod("slow", "Running", false, Some("n"), "2026-01-01T00:00:00Z");
        let unscheduled = pod("lost", "Pending", false, None, "2026-01-01T00:00:00Z");
        let all = [&old_ready, &new_ready, &not_ready, &unscheduled];
        assert_eq!(plan(&rs(1), &all, now()).delete, ["lost", "slow", "new"]);
        assert_eq!(plan(&rs(3), &all, now()).delete, ["lost"]);
    }

    #[test]
    fn min_ready_seconds_hold_back_availability() {
        let mut set = rs(1);
        set.spec.as_mut().unwrap().min_ready_seconds = Some(120);
        let ready = pod("a", "Running", true, Some("n"), "2026-01-01T00:00:00Z");
        let status = plan(&set, &[&ready], now()).status;
        assert_eq!(status["readyReplicas"], 1);
        assert_eq!(status["availableReplicas"], 0);
    }
}
