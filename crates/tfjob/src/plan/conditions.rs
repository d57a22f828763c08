//! The condition algebra, exactly as upstream: conditions are appended,
//! Failed is final, Running and Restarting exclude each other, and a
//! terminal condition sets Running to False. Clients and the `State`
//! printer column (the last condition) depend on it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{JobCondition, JobStatus};

pub const CREATED: &str = "Created";
pub const RUNNING: &str = "Running";
pub const RESTARTING: &str = "Restarting";
pub const SUCCEEDED: &str = "Succeeded";
pub const FAILED: &str = "Failed";
pub const SUSPENDED: &str = "Suspended";

pub const TRUE: &str = "True";
pub const FALSE: &str = "False";

pub const REASON_CREATED: &str = "TFJobCreated";
pub const REASON_RUNNING: &str = "TFJobRunning";
pub const REASON_RESTARTING: &str = "TFJobRestarting";
pub const REASON_SUCCEEDED: &str = "TFJobSucceeded";
/// Reason of every Failed but an invalid spec: a replica failed, the
/// backoff limit, the deadline, the PodGroup timeout. training-operator
/// v1.9 writes kind + `Failed` for all of them (tf-operator wrote
/// `JobFailed` for the limits, which clients matching v1.9 miss).
pub const REASON_FAILED: &str = "TFJobFailed";
pub const REASON_INVALID_SPEC: &str = "InvalidTFJobSpec";
pub const REASON_SUSPENDED: &str = "TFJobSuspended";
pub const REASON_RESUMED: &str = "TFJobResumed";

/// `TFJob {name} is created.`
pub fn created_message(name: &str) -> String {
    format!("TFJob {name} is created.")
}
/// `TFJob {ns}/{name} is running.`
pub fn running_message(namespace: &str, name: &str) -> String {
    format!("TFJob {namespace}/{name} is running.")
}
/// `TFJob {ns}/{name} successfully completed.`
pub fn succeeded_message(namespace: &str, name: &str) -> String {
    format!("TFJob {namespace}/{name} successfully completed.")
}
/// `TFJob {ns}/{name} has failed because {n} {RType} replica(s) failed.`
pub fn failed_message(namespace: &str, name: &str, failed: i32, rtype: &str) -> String {
    format!("TFJob {namespace}/{name} has failed because {failed} {rtype} replica(s) failed.")
}
/// `job {name} is restarting because {RType} replica(s) failed.`
/// (training-operator v1.9's words; tf-operator began with `TFJob`).
pub fn restarting_message(name: &str, rtype: &str) -> String {
    format!("job {name} is restarting because {rtype} replica(s) failed.")
}
/// `job "{name}" is failing because "{RType}" replica(s) failed.`: an
/// `ExitCode` replica ended with a permanent code (training-operator v1.9
/// writes this one, quoted, before its generic replica-failure message).
pub fn exit_code_failed_message(name: &str, rtype: &str) -> String {
    format!("job \"{name}\" is failing because \"{rtype}\" replica(s) failed.")
}
/// `Job {name} has failed because it has reached the specified backoff limit`
pub fn backoff_limit_message(name: &str) -> String {
    format!("Job {name} has failed because it has reached the specified backoff limit")
}
/// `Job {name} has failed because it was active longer than specified deadline`
pub fn deadline_message(name: &str) -> String {
    format!("Job {name} has failed because it was active longer than specified deadline")
}
/// Gang scheduling gave up waiting for the PodGroup (gpufleet's wording;
/// upstream left the job pending forever).
pub fn scheduling_timeout_message(name: &str, seconds: i32) -> String {
    format!("Job {name} has failed because its PodGroup was not admitted within {seconds} seconds")
}
/// `TFJob {name} is suspended.`
pub fn suspended_message(name: &str) -> String {
    format!("TFJob {name} is suspended.")
}
/// `TFJob {name} is resumed.`
pub fn resumed_message(name: &str) -> String {
    format!("TFJob {name} is resumed.")
}
/// The invalid-spec message; upstream's words, then the specific problem
/// (upstream's message ended in a generic text instead, so the user never
/// learnt what was wrong).
pub fn invalid_spec_message(problem: &str) -> String {
    format!("Failed to marshal the object to TFJob; the spec is invalid: {problem}")
}

/// Whether a condition of `type_` with status `True` exists.
pub fn has_true(status: &JobStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == TRUE)
}

/// Succeeded or Failed is true: the job is finished.
pub fn is_finished(status: &JobStatus) -> bool {
    has_true(status, SUCCEEDED) || has_true(status, FAILED)
}

/// Records condition `type_` = True with `reason` and `message` at `now`.
/// Returns whether anything changed (so callers emit one event per
/// transition).
pub fn set(status: &mut JobStatus, type_: &str, reason: &str, message: &str, now: Time) -> bool {
    set_with_status(status, type_, TRUE, reason, message, now)
}

/// [`set`] with an explicit condition status.
pub fn set_with_status(
    status: &mut JobStatus,
    type_: &str,
    condition_status: &str,
    reason: &str,
    message: &str,
    now: Time,
) -> bool {
    // 1. A failed job is final.
    if has_true(status, FAILED) {
        return false;
    }
    let mut last_transition_time = Some(now.clone());
    if let Some(existing) = status.conditions.iter().find(|c| c.type_ == type_)
        && existing.status == condition_status
    {
        // 2. Same status and reason: nothing to do, timestamps untouched.
        if existing.reason.as_deref() == Some(reason) {
            return false;
        }
        // 3. Same status, new reason or message: the transition time stays.
        last_transition_time = existing.last_transition_time.clone();
    }
    let mut kept = Vec::with_capacity(status.conditions.len() + 1);
    for mut condition in std::mem::take(&mut status.conditions) {
        // 5. Running and Restarting exclude each other.
        let excluded = (type_ == RUNNING && condition.type_ == RESTARTING)
            || (type_ == RESTARTING && condition.type_ == RUNNING);
        if condition.type_ == type_ || excluded {
            continue;
        }
        // 6. A finished job is no longer running (the entry stays, False).
        if (type_ == SUCCEEDED || type_ == FAILED) && condition.type_ == RUNNING {
            condition.status = FALSE.to_string();
        }
        kept.push(condition);
    }
    // 4. The new condition goes last.
    kept.push(JobCondition {
        type_: type_.to_string(),
        status: condition_status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_update_time: Some(now),
        last_transition_time,
    });
    status.conditions = kept;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn types(status: &JobStatus) -> Vec<(&str, &str)> {
        status
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect()
    }

    #[test]
    fn adding_created_then_running_yields_created_running_restarting_replaces_running_and_back() {
        let mut status = JobStatus::default();
        assert!(set(&mut status, CREATED, REASON_CREATED, "c", at(1)));
        assert!(set(&mut status, RUNNING, REASON_RUNNING, "r", at(2)));
        assert_eq!(types(&status), [("Created", "True"), ("Running", "True")]);
        assert!(set(&mut status, RESTARTING, REASON_RESTARTING, "x", at(3)));
        assert_eq!(
            types(&status),
            [("Created", "True"), ("Restarting", "True")]
        );
        assert!(set(&mut status, RUNNING, REASON_RUNNING, "r", at(4)));
        assert_eq!(types(&status), [("Created", "True"), ("Running", "True")]);
    }

    #[test]
    fn the_same_status_and_reason_is_a_no_op_that_keeps_timestamps() {
        let mut status = JobStatus::default();
        set(&mut status, RUNNING, REASON_RUNNING, "r", at(1));
        assert!(!set(
            &mut status,
            RUNNING,
            REASON_RUNNING,
            "other message",
            at(2)
        ));
        assert_eq!(status.conditions[0].last_update_time, Some(at(1)));
        assert_eq!(status.conditions[0].message.as_deref(), Some("r"));
    }

    #[test]
    fn the_same_status_with_a_new_reason_keeps_the_transition_time_and_moves_last() {
        let mut status = JobStatus::default();
        set(&mut status, RUNNING, "A", "a", at(1));
        set(&mut status, CREATED, REASON_CREATED, "c", at(2));
        assert!(set(&mut status, RUNNING, "B", "b", at(3)));
        assert_eq!(types(&status), [("Created", "True"), ("Running", "True")]);
        let running = &status.conditions[1];
        assert_eq!(running.last_transition_time, Some(at(1)));
        assert_eq!(running.last_update_time, Some(at(3)));
        assert_eq!(running.reason.as_deref(), Some("B"));
    }

    #[test]
    fn whenever_succeeded_or_failed_is_present_no_running_condition_is_true() {
        for terminal in [SUCCEEDED, FAILED] {
            let mut status = JobStatus::default();
            set(&mut status, CREATED, REASON_CREATED, "c", at(1));
            set(&mut status, RUNNING, REASON_RUNNING, "r", at(2));
            set(&mut status, terminal, "R", "m", at(3));
            assert_eq!(
                types(&status),
                [
                    ("Created", "True"),
                    ("Running", "False"),
                    (terminal, "True")
                ]
            );
        }
    }

    #[test]
    fn once_failed_nothing_changes_again() {
        let mut status = JobStatus::default();
        set(&mut status, FAILED, REASON_FAILED, "f", at(1));
        let before = status.clone();
        assert!(!set(&mut status, RUNNING, REASON_RUNNING, "r", at(2)));
        assert!(!set(&mut status, SUCCEEDED, REASON_SUCCEEDED, "s", at(2)));
        assert_eq!(status, before);
    }

    #[test]
    fn succeeded_then_failed_in_one_pass_leaves_both_with_failed_last() {
        let mut status = JobStatus::default();
        set(&mut status, SUCCEEDED, REASON_SUCCEEDED, "s", at(1));
        set(&mut status, FAILED, REASON_FAILED, "f", at(1));
        assert_eq!(types(&status), [("Succeeded", "True"), ("Failed", "True")]);
    }
}
