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
    let mut status = json!({
        "active": active.len(),
        "succeeded": succeeded,
        "failed": failed,
        "ready": ready,
        "terminating": terminating,
        "uncountedTerminatedPods": {},
    });
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
