//! The Job controller's decision (NonIndexed completion mode): how many
//! pods to start, which to stop, and the status and conditions, with
//! batch/v1's reasons and messages.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::pods;

pub const BACKOFF_LIMIT_EXCEEDED: &str = "BackoffLimitExceeded";
pub const BACKOFF_LIMIT_MESSAGE: &str = "Job has reached the specified backoff limit";
pub const DEADLINE_EXCEEDED: &str = "DeadlineExceeded";
pub const DEADLINE_MESSAGE: &str = "Job was active longer than specified deadline";
pub const COMPLETIONS_REACHED: &str = "CompletionsReached";
pub const COMPLETIONS_MESSAGE: &str = "Reached expected number of succeeded pods";

#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    pub create: usize,
    pub delete: Vec<String>,
    /// The whole `.status` to write (if it differs from the stored one).
    pub status: Value,
}

fn has_condition(job: &Job, kind: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == kind && c.status == "True"))
}

fn condition(kind: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": kind, "status": "True", "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now,
    })
}

/// Container restarts of the active pods: what counts against the backoff
/// limit under `restartPolicy: OnFailure`, where pods do not fail.
fn restarts(active: &[&Pod]) -> i32 {
    active
        .iter()
        .filter_map(|p| p.status.as_ref())
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .map(|c| c.restart_count)
        .sum()
}

/// `owned`: the pods whose controller reference is this Job.
pub fn plan(job: &Job, owned: &[&Pod], now: Timestamp) -> JobPlan {
    let now_text = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let spec = job.spec.as_ref();
    let parallelism = spec.and_then(|s| s.parallelism).unwrap_or(1).max(0);
    let completions = spec.and_then(|s| s.completions);
    let backoff_limit = spec.and_then(|s| s.backoff_limit).unwrap_or(6);
    let suspended = spec.and_then(|s| s.suspend).unwrap_or(false);
    let on_failure = spec
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.restart_policy.as_deref())
        == Some("OnFailure");

    let mut active: Vec<&Pod> = owned
        .iter()
        .copied()
        .filter(|p| pods::is_active(p))
        .collect();
    let succeeded = owned
        .iter()
        .filter(|p| pods::phase(p) == "Succeeded")
        .count() as i32;
    let failed = owned.iter().filter(|p| pods::phase(p) == "Failed").count() as i32;
    let terminating = owned
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .count();
    let ready = active.iter().filter(|p| pods::is_ready(p)).count();

    let old = job.status.as_ref();
    let mut conditions: Vec<Value> = old
        .and_then(|s| serde_json::to_value(&s.conditions).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let start_time = old
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .or_else(|| (!suspended).then(|| now_text.clone()));
    let mut completion_time = old
        .and_then(|s| s.completion_time.as_ref())
        .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());

    let finished = has_condition(job, "Complete") || has_condition(job, "Failed");
    // Why the Job is failing, once it is (the terminal condition waits for
    // its pods to stop, as upstream's FailureTarget does).
    let failure = if finished {
        None
    } else if has_condition(job, "FailureTarget") {
        conditions
            .iter()
            .find(|c| c["type"] == "FailureTarget")
            .map(|c| {
                (
                    c["reason"].as_str().unwrap_or_default().to_string(),
                    c["message"].as_str().unwrap_or_default().to_string(),
                )
            })
    } else if failed > backoff_limit || (on_failure && restarts(&active) > backoff_limit) {
        Some((BACKOFF_LIMIT_EXCEEDED.into(), BACKOFF_LIMIT_MESSAGE.into()))
    } else if let (Some(deadline), Some(start)) = (
        spec.and_then(|s| s.active_deadline_seconds),
        old.and_then(|s| s.start_time.as_ref()),
    ) && start
        .0
        .checked_add(jiff::SignedDuration::from_secs(deadline))
        .is_ok_and(|end| end <= now)
    {
        Some((DEADLINE_EXCEEDED.into(), DEADLINE_MESSAGE.into()))
    } else {
        None
    };
    let success = !finished
        && failure.is_none()
        && match completions {
            Some(c) => succeeded >= c,
            None => succeeded > 0 && active.is_empty(),
        };

    let (create, delete) = if finished || failure.is_some() || success || suspended {
        (0, active.iter().map(|p| pods::name(p)).collect())
    } else {
        let want = match completions {
            Some(c) => parallelism.min((c - succeeded).max(0)),
            // A work queue: once one pod succeeded, no new ones start.
            None if succeeded > 0 => (active.len() as i32).min(parallelism),
            None => parallelism,
        } as usize;
        if active.len() < want {
            (want - active.len(), Vec::new())
        } else {
            pods::deletion_order(&mut active);
            let excess = active.len() - want;
            (0, active[..excess].iter().map(|p| pods::name(p)).collect())
        }
    };
    let stopped = active.is_empty() && terminating == 0;
    if let Some((reason, message)) = &failure {
        if !has_condition(job, "FailureTarget") {
            conditions.push(condition("FailureTarget", reason, message, &now_text));
        }
        if stopped {
            conditions.push(condition("Failed", reason, message, &now_text));
        }
    }
    if success || has_condition(job, "SuccessCriteriaMet") && !finished {
        if !has_condition(job, "SuccessCriteriaMet") {
            conditions.push(condition(
                "SuccessCriteriaMet",
                COMPLETIONS_REACHED,
                COMPLETIONS_MESSAGE,
                &now_text,
            ));
        }
        if stopped {
            conditions.push(condition(
                "Complete",
                COMPLETIONS_REACHED,
                COMPLETIONS_MESSAGE,
                &now_text,
            ));
            completion_time = Some(now_text.clone());
        }
    }
    // As kube-apiserver serialises it: the counts are omitted at zero,
    // `ready` and `terminating` are pointers and kept.
    let mut status = json!({
        "ready": ready,
        "terminating": terminating,
        "uncountedTerminatedPods": {},
    });
    for (key, count) in [
        ("active", active.len() as i32),
        ("succeeded", succeeded),
        ("failed", failed),
    ] {
        if count > 0 {
            status[key] = json!(count);
        }
    }
    if !conditions.is_empty() {
        status["conditions"] = json!(conditions);
    }
    if let Some(start) = start_time {
        status["startTime"] = json!(start);
    }
    if let Some(done) = completion_time {
        status["completionTime"] = json!(done);
    }
    JobPlan {
        create,
        delete,
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(spec: Value, status: Value) -> Job {
        let mut value = json!({
            "metadata": {"name": "pi", "uid": "j-1"},
            "spec": {"template": {"spec": {"containers": [], "restartPolicy": "Never"}}},
        });
        if let (Some(base), Some(extra)) = (value["spec"].as_object_mut(), spec.as_object()) {
            base.extend(extra.clone());
        }
        if !status.is_null() {
            value["status"] = status;
        }
        serde_json::from_value(value).unwrap()
    }

    fn pod(name: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": []}, "status": {"phase": phase}})).unwrap()
    }

    fn now() -> Timestamp {
        "2026-01-01T00:00:10Z".parse().unwrap()
    }

    fn types(status: &Value) -> Vec<&str> {
        status["conditions"]
            .as_array()
            .map(|cs| cs.iter().filter_map(|c| c["type"].as_str()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn a_new_job_starts_one_pod_and_records_its_start() {
        let plan = plan(&job(json!({}), Value::Null), &[], now());
        assert_eq!(plan.create, 1);
        assert_eq!(plan.status["startTime"], "2026-01-01T00:00:10Z");
        // Zero counts are left out, as kube-apiserver serialises them.
        assert_eq!(
            plan.status,
            json!({"ready": 0, "terminating": 0, "uncountedTerminatedPods": {}, "startTime": "2026-01-01T00:00:10Z"})
        );
        assert!(types(&plan.status).is_empty());
    }

    #[test]
    fn reaching_the_completions_meets_the_success_criteria_and_completes() {
        let done = pod("pi-a", "Succeeded");
        let plan = plan(
            &job(json!({"completions": 1}), Value::Null),
            &[&done],
            now(),
        );
        assert_eq!(plan.create, 0);
        assert_eq!(types(&plan.status), ["SuccessCriteriaMet", "Complete"]);
        assert_eq!(plan.status["conditions"][1]["reason"], COMPLETIONS_REACHED);
        assert_eq!(plan.status["completionTime"], "2026-01-01T00:00:10Z");
    }

    #[test]
    fn failures_beyond_the_backoff_limit_fail_the_job_once_no_pod_runs() {
        let failed = [pod("a", "Failed"), pod("b", "Failed")];
        let refs: Vec<&Pod> = failed.iter().collect();
        let plan = plan(&job(json!({"backoffLimit": 1}), Value::Null), &refs, now());
        assert_eq!(plan.create, 0);
        assert_eq!(types(&plan.status), ["FailureTarget", "Failed"]);
        assert_eq!(
            plan.status["conditions"][1]["reason"],
            BACKOFF_LIMIT_EXCEEDED
        );
        assert_eq!(
            plan.status["conditions"][1]["message"],
            BACKOFF_LIMIT_MESSAGE
        );
        assert_eq!(plan.status["failed"], 2);
    }

    #[test]
    fn within_the_backoff_limit_a_failed_pod_is_replaced() {
        let failed = pod("a", "Failed");
        let plan = plan(
            &job(json!({"backoffLimit": 1}), Value::Null),
            &[&failed],
            now(),
        );
        assert_eq!(plan.create, 1);
        assert!(types(&plan.status).is_empty());
    }

    #[test]
    fn a_failing_job_stops_its_running_pods_before_it_is_failed() {
        let pods = [pod("a", "Failed"), pod("b", "Running")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let plan = plan(
            &job(
                json!({"backoffLimit": 0, "parallelism": 2, "completions": 2}),
                Value::Null,
            ),
            &refs,
            now(),
        );
        assert_eq!(plan.delete, ["b"]);
        assert_eq!(types(&plan.status), ["FailureTarget"]);
    }

    #[test]
    fn parallelism_bounds_the_pods_still_needed_for_the_completions() {
        let pods = [
            pod("a", "Succeeded"),
            pod("b", "Succeeded"),
            pod("c", "Succeeded"),
            pod("d", "Running"),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let spec = json!({"completions": 5, "parallelism": 3});
        assert_eq!(plan(&job(spec, Value::Null), &refs, now()).create, 1);
    }

    #[test]
    fn a_work_queue_job_starts_nothing_after_a_success_and_completes_when_idle() {
        let spec = json!({"parallelism": 2, "completions": null});
        let busy = [pod("a", "Succeeded"), pod("b", "Running")];
        let refs: Vec<&Pod> = busy.iter().collect();
        let plan_busy = plan(&job(spec.clone(), Value::Null), &refs, now());
        assert_eq!(plan_busy.create, 0);
        assert!(types(&plan_busy.status).is_empty());
        let idle = [pod("a", "Succeeded"), pod("b", "Succeeded")];
        let refs: Vec<&Pod> = idle.iter().collect();
        assert_eq!(
            types(&plan(&job(spec, Value::Null), &refs, now()).status),
            ["SuccessCriteriaMet", "Complete"]
        );
    }

    #[test]
    fn an_active_deadline_fails_the_job_with_deadline_exceeded() {
        let status = json!({"startTime": "2026-01-01T00:00:00Z"});
        let running = pod("a", "Running");
        let plan = plan(
            &job(json!({"activeDeadlineSeconds": 5}), status),
            &[&running],
            now(),
        );
        assert_eq!(plan.delete, ["a"]);
        assert_eq!(plan.status["conditions"][0]["reason"], DEADLINE_EXCEEDED);
    }
}
