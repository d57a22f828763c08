//! What a pod's end means for its replica (upstream's restart policies,
//! fixed where upstream failed the whole job for a pod that failed under
//! `OnFailure`, #999): which exit codes an `ExitCode` replica retries,
//! which failures are disruptions (retried without counting), how many
//! failures a pod contributes to `backoffLimit`, and how long re-creation
//! waits.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::api::RestartPolicy;

/// Exit codes an `ExitCode` replica retries: a list of single codes and
/// ranges, `N-` meaning N and above. The default `128-` is the signal range
/// (137 = SIGKILL, 143 = SIGTERM), as training-operator does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitCodeSet {
    ranges: Vec<(i32, Option<i32>)>,
}

impl Default for ExitCodeSet {
    fn default() -> Self {
        Self {
            ranges: vec![(128, None)],
        }
    }
}

/// A retryable-exit-code list that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{part:?} is not an exit code, a range N-M with N <= M, or N- (N and above); write e.g. \"128-\" or \"1,130-143\""
)]
pub struct BadExitCodeSet {
    pub part: String,
}

impl std::str::FromStr for ExitCodeSet {
    type Err = BadExitCodeSet;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut ranges = Vec::new();
        for part in text.split(',').map(str::trim) {
            let bad = || BadExitCodeSet {
                part: part.to_string(),
            };
            let range = match part.split_once('-') {
                Some((low, "")) => (low.trim().parse().map_err(|_| bad())?, None),
                Some((low, high)) => {
                    let low: i32 = low.trim().parse().map_err(|_| bad())?;
                    let high: i32 = high.trim().parse().map_err(|_| bad())?;
                    if low > high {
                        return Err(bad());
                    }
                    (low, Some(high))
                }
                None => {
                    let code: i32 = part.parse().map_err(|_| bad())?;
                    (code, Some(code))
                }
            };
            ranges.push(range);
        }
        Ok(Self { ranges })
    }
}

impl ExitCodeSet {
    pub fn contains(&self, code: i32) -> bool {
        self.ranges
            .iter()
            .any(|&(low, high)| code >= low && high.is_none_or(|high| code <= high))
    }
}

/// Pod `status.reason`s a kubelet or the control plane writes when it
/// ends a pod for reasons of its own, not the workload's.
const DISRUPTION_REASONS: [&str; 5] =
    ["Evicted", "NodeLost", "Preempted", "Shutdown", "Terminated"];

/// Whether the pod ended because of the cluster (eviction, preemption,
/// node loss or shutdown, a `DisruptionTarget` condition) rather than its
/// own code: such a pod is re-created without counting a failure.
pub fn is_disruption(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let disruption_target = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "DisruptionTarget" && c.status == "True");
    disruption_target
        || status
            .reason
            .as_deref()
            .is_some_and(|reason| DISRUPTION_REASONS.contains(&reason))
}

/// What a Failed pod of a replica with `policy` and tensorflow exit code
/// `exit_code` leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedPod {
    /// Re-created; counted towards `backoffLimit` unless a disruption.
    Retry { counted: bool },
    /// The replica failed for good: the job fails.
    Permanent,
}

pub fn failed_pod(
    pod: &Pod,
    policy: RestartPolicy,
    exit_code: i32,
    retryable: &ExitCodeSet,
) -> FailedPod {
    if is_disruption(pod) {
        return FailedPod::Retry { counted: false };
    }
    match policy {
        // The kubelet restarts containers in place; a pod that still ends
        // Failed (e.g. its activeDeadlineSeconds) is re-created, not the
        // job failed (upstream issue #999).
        RestartPolicy::Always | RestartPolicy::OnFailure => FailedPod::Retry { counted: true },
        RestartPolicy::ExitCode if retryable.contains(exit_code) => {
            FailedPod::Retry { counted: true }
        }
        RestartPolicy::ExitCode | RestartPolicy::Never | RestartPolicy::Unset => {
            FailedPod::Permanent
        }
    }
}

/// Container restarts of a pod (init and app containers), as the kubelet
/// reports them.
pub fn container_restarts(pod: &Pod) -> i32 {
    let Some(status) = pod.status.as_ref() else {
        return 0;
    };
    status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .map(|c| c.restart_count.max(0))
        .sum()
}

/// Pacing of pod re-creation after counted failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Wait after the first failure (10 s, upstream's never-used
    /// `DefaultJobBackOff`).
    pub base: Duration,
    /// Longest wait (360 s, upstream's `MaxJobBackOff`).
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(10),
            max: Duration::from_secs(360),
        }
    }
}

impl Backoff {
    /// Wait before re-creating pods after `failures` counted failures:
    /// base, doubling per failure, at most max; none without failures.
    pub fn delay(&self, failures: i32) -> Duration {
        if failures <= 0 {
            return Duration::ZERO;
        }
        let doublings = u32::try_from(failures - 1).unwrap_or(u32::MAX).min(31);
        self.base
            .checked_mul(1u32 << doublings)
            .unwrap_or(self.max)
            .min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    use super::*;

    fn failed(reason: Option<&str>, disruption_target: bool) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                reason: reason.map(str::to_string),
                conditions: disruption_target.then(|| {
                    vec![PodCondition {
                        type_: "DisruptionTarget".into(),
                        status: "True".into(),
                        ..PodCondition::default()
                    }]
                }),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn exit_codes_of_128_and_above_are_retryable_by_default_and_the_set_is_configurable() {
        let default = ExitCodeSet::default();
        assert!(default.contains(128) && default.contains(137) && default.contains(255));
        assert!(!default.contains(1) && !default.contains(127) && !default.contains(0));
        let custom: ExitCodeSet = "1, 130-143".parse().unwrap();
        assert!(custom.contains(1) && custom.contains(137) && !custom.contains(144));
        assert!(!custom.contains(2));
        let error = "130-1".parse::<ExitCodeSet>().unwrap_err().to_string();
        assert!(error.contains("\"130-1\""), "{error}");
        assert!("x".parse::<ExitCodeSet>().is_err());
    }

    #[test]
    fn an_exit_code_replica_retries_retryable_codes_and_fails_on_others() {
        let set = ExitCodeSet::default();
        let pod = failed(None, false);
        assert_eq!(
            failed_pod(&pod, RestartPolicy::ExitCode, 137, &set),
            FailedPod::Retry { counted: true }
        );
        assert_eq!(
            failed_pod(&pod, RestartPolicy::ExitCode, 1, &set),
            FailedPod::Permanent
        );
        assert_eq!(
            failed_pod(&pod, RestartPolicy::Never, 137, &set),
            FailedPod::Permanent
        );
    }

    #[test]
    fn a_failed_pod_under_on_failure_or_always_is_recreated_instead_of_failing_the_job() {
        let set = ExitCodeSet::default();
        for policy in [RestartPolicy::OnFailure, RestartPolicy::Always] {
            assert_eq!(
                failed_pod(&failed(None, false), policy, 1, &set),
                FailedPod::Retry { counted: true }
            );
        }
    }

    #[test]
    fn eviction_preemption_and_node_loss_are_retried_without_counting_under_every_policy() {
        let set = ExitCodeSet::default();
        for pod in [
            failed(Some("Evicted"), false),
            failed(Some("NodeLost"), false),
            failed(None, true),
        ] {
            assert!(is_disruption(&pod));
            for policy in [
                RestartPolicy::Never,
                RestartPolicy::ExitCode,
                RestartPolicy::OnFailure,
            ] {
                assert_eq!(
                    failed_pod(&pod, policy, 1, &set),
                    FailedPod::Retry { counted: false }
                );
            }
        }
        assert!(!is_disruption(&failed(Some("Error"), false)));
    }

    #[test]
    fn re_creation_waits_10_seconds_doubling_per_failure_up_to_360() {
        let backoff = Backoff::default();
        let secs = |n| backoff.delay(n).as_secs();
        assert_eq!(
            [0, 1, 2, 3, 4, 5, 6, 7, 100].map(secs),
            [0, 10, 20, 40, 80, 160, 320, 360, 360]
        );
    }
}
