//! What simulated containers do over time, pure: given the pod's
//! annotations, its restart policy and the clock, when each container
//! exits, with which code, whether it restarts, and the pod status that
//! results. The clock is always passed in.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::{EXIT_CODE, RUN_SECONDS};

/// Bound on catch-up steps per advance, so a zero run time with a zero
/// restart delay cannot spin.
const MAX_STEPS: usize = 1000;

/// How one container behaves, from the pod's annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct Behaviour {
    /// None: runs until the pod is deleted.
    pub run_for: Option<Duration>,
    /// Exit code of run n (0-based); the last one repeats. Never empty.
    pub exit_codes: Vec<i32>,
}

/// A malformed annotation, reported on the pod instead of guessed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {key}: {value:?} is not {expected}")]
pub struct BadAnnotation {
    pub key: String,
    pub value: String,
    pub expected: &'static str,
}

fn per_container<'a>(
    annotations: &'a BTreeMap<String, String>,
    base: &str,
    container: &str,
) -> Option<(String, &'a String)> {
    let specific = format!("{base}.{container}");
    annotations
        .get(&specific)
        .map(|v| (specific, v))
        .or_else(|| annotations.get(base).map(|v| (base.to_string(), v)))
}

/// `unannotated_run_for` is how long a container without a run-seconds
/// annotation runs (None: until deleted).
pub fn behaviour(
    annotations: &BTreeMap<String, String>,
    container: &str,
    unannotated_run_for: Option<Duration>,
) -> Result<Behaviour, BadAnnotation> {
    let run_for = match per_container(annotations, RUN_SECONDS, container) {
        None => unannotated_run_for,
        Some((key, value)) => {
            let seconds: f64 = value.trim().parse().map_err(|_| BadAnnotation {
                key: key.clone(),
                value: value.clone(),
                expected: "a number of seconds",
            })?;
            if !seconds.is_finite() || seconds < 0.0 {
                return Err(BadAnnotation {
                    key,
                    value: value.clone(),
                    expected: "a number of seconds",
                });
            }
            Some(Duration::from_secs_f64(seconds))
        }
    };
    let exit_codes = match per_container(annotations, EXIT_CODE, container) {
        None => vec![0],
        Some((key, value)) => value
            .split(',')
            .map(|c| c.trim().parse::<i32>())
            .collect::<Result<Vec<_>, _>>()
            .ok()
            .filter(|codes| !codes.is_empty())
            .ok_or_else(|| BadAnnotation {
                key,
                value: value.clone(),
                expected: "an exit code or a comma-separated list of them",
            })?,
    };
    Ok(Behaviour {
        run_for,
        exit_codes,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    pub fn parse(value: Option<&str>) -> Self {
        match value {
            Some("OnFailure") => Self::OnFailure,
            Some("Never") => Self::Never,
            _ => Self::Always,
        }
    }

    fn restarts_after(self, exit_code: i32) -> bool {
        match self {
            Self::Always => true,
            Self::OnFailure => exit_code != 0,
            Self::Never => false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Termination {
    pub exit_code: i32,
    pub started: Timestamp,
    pub finished: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerState {
    Running {
        since: Timestamp,
    },
    /// Exited, restarting at `until`.
    BackOff {
        until: Timestamp,
    },
    Terminated(Termination),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRun {
    pub name: String,
    pub image: String,
    pub restart_count: i32,
    pub state: ContainerState,
    pub last_termination: Option<Termination>,
}

/// The simulated state of one pod, kept by the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRun {
    pub started: Timestamp,
    pub pod_ip: String,
    pub host_ip: String,
    pub containers: Vec<ContainerRun>,
}

impl PodRun {
    /// Every container starts running at `now`.
    pub fn start(
        containers: &[(String, String)],
        now: Timestamp,
        pod_ip: String,
        host_ip: String,
    ) -> Self {
        Self {
            started: now,
            pod_ip,
            host_ip,
            containers: containers
                .iter()
                .map(|(name, image)| ContainerRun {
                    name: name.clone(),
                    image: image.clone(),
                    restart_count: 0,
                    state: ContainerState::Running { since: now },
                    last_termination: None,
                })
                .collect(),
        }
    }

    pub fn phase(&self) -> &'static str {
        let all_done = self
            .containers
            .iter()
            .all(|c| matches!(c.state, ContainerState::Terminated(_)));
        if !all_done || self.containers.is_empty() {
            return "Running";
        }
        let all_ok = self
            .containers
            .iter()
            .all(|c| matches!(&c.state, ContainerState::Terminated(t) if t.exit_code == 0));
        if all_ok { "Succeeded" } else { "Failed" }
    }
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    let span = jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX);
    t.checked_add(span).unwrap_or(Timestamp::MAX)
}

/// Moves every container forward to `now` and returns when the next change
/// is due (None: nothing will change by itself).
pub fn advance(
    run: &mut PodRun,
    behaviours: &BTreeMap<String, Behaviour>,
    policy: RestartPolicy,
    restart_delay: Duration,
    now: Timestamp,
) -> Option<Timestamp> {
    let mut next: Option<Timestamp> = None;
    for container in &mut run.containers {
        let behaviour = behaviours.get(&container.name);
        for _ in 0..MAX_STEPS {
            match container.state.clone() {
                ContainerState::Running { since } => {
                    let Some(run_for) = behaviour.and_then(|b| b.run_for) else {
                        break;
                    };
                    let exit_at = add(since, run_for);
                    if exit_at > now {
                        next = Some(next.map_or(exit_at, |n| n.min(exit_at)));
                        break;
                    }
                    let codes = behaviour.map(|b| b.exit_codes.as_slice()).unwrap_or(&[0]);
                    let index = usize::try_from(container.restart_count)
                        .unwrap_or(0)
                        .min(codes.len().saturating_sub(1));
                    let exit_code = codes.get(index).copied().unwrap_or(0);
                    let termination = Termination {
                        exit_code,
                        started: since,
                        finished: exit_at,
                    };
                    if policy.restarts_after(exit_code) {
                        container.last_termination = Some(termination);
                        container.state = ContainerState::BackOff {
                            until: add(exit_at, restart_delay),
                        };
                    } else {
                        container.state = ContainerState::Terminated(termination);
                    }
                }
                ContainerState::BackOff { until } => {
                    if until > now {
                        next = Some(next.map_or(until, |n| n.min(until)));
                        break;
                    }
                    container.restart_count += 1;
                    container.state = ContainerState::Running { since: until };
                }
                ContainerState::Terminated(_) => break,
            }
        }
    }
    next
}

pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn terminated_json(t: &Termination, container_id: &str) -> Value {
    json!({
        "terminated": {
            "exitCode": t.exit_code,
            "reason": if t.exit_code == 0 { "Completed" } else { "Error" },
            "startedAt": format_time(t.started),
            "finishedAt": format_time(t.finished),
            "containerID": container_id,
        }
    })
}

fn container_status(pod_uid: &str, c: &ContainerRun) -> Value {
    let id = format!("kube-sim://{pod_uid}/{}/{}", c.name, c.restart_count);
    let (state, ready) = match &c.state {
        ContainerState::Running { since } => {
            (json!({"running": {"startedAt": format_time(*since)}}), true)
        }
        ContainerState::BackOff { .. } => (
            json!({"waiting": {
                "reason": "CrashLoopBackOff",
                "message": format!("back-off restarting container {}", c.name),
            }}),
            false,
        ),
        ContainerState::Terminated(t) => (terminated_json(t, &id), false),
    };
    let last_state = match &c.last_termination {
        Some(t) => terminated_json(
            t,
            &format!(
                "kube-sim://{pod_uid}/{}/{}",
                c.name,
                c.restart_count.max(1) - 1
            ),
        ),
        None => json!({}),
    };
    json!({
        "name": c.name,
        "image": c.image,
        "imageID": format!("{}@sha256:kube-sim", c.image),
        "containerID": id,
        "ready": ready,
        "started": matches!(c.state, ContainerState::Running { .. }),
        "restartCount": c.restart_count,
        "state": state,
        "lastState": last_state,
    })
}

/// Conditions the kubelet owns; others (PodScheduled, readiness gates,
/// DisruptionTarget) are left as they are.
const KUBELET_CONDITIONS: [&str; 4] = [
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

fn condition(
    existing: &[Value],
    type_: &str,
    status: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: &str,
) -> Value {
    let status = if status { "True" } else { "False" };
    let previous = existing
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_));
    // Transition time moves only when the status does.
    let since = previous
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| json!(now));
    let mut c = json!({
        "type": type_,
        "status": status,
        "lastProbeTime": null,
        "lastTransitionTime": since,
    });
    if let Some(reason) = reason {
        c["reason"] = json!(reason);
    }
    if let Some(message) = message {
        c["message"] = json!(message);
    }
    c
}

/// The pod status for `run`, keeping what the kubelet does not own from
/// `current` (the stored status).
pub fn render_status(
    current: &Value,
    pod_uid: &str,
    init_containers: &[(String, String)],
    run: &PodRun,
    now: Timestamp,
) -> Value {
    let now = format_time(now);
    let existing: Vec<Value> = current
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let phase = run.phase();
    let terminal = phase != "Running";
    let unready: Vec<&str> = run
        .containers
        .iter()
        .filter(|c| !matches!(c.state, ContainerState::Running { .. }))
        .map(|c| c.name.as_str())
        .collect();
    let (ready, reason, message) = if terminal {
        (false, Some("PodCompleted"), None)
    } else if unready.is_empty() {
        (true, None, None)
    } else {
        (
            false,
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let mut conditions: Vec<Value> = existing
        .iter()
        .filter(|c| {
            !c.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| KUBELET_CONDITIONS.contains(&t))
        })
        .cloned()
        .collect();
    conditions.push(condition(
        &existing,
        "PodReadyToStartContainers",
        !terminal,
        None,
        None,
        &now,
    ));
    conditions.push(condition(
        &existing,
        "Initialized",
        true,
        terminal.then_some("PodCompleted"),
        None,
        &now,
    ));
    conditions.push(condition(
        &existing,
        "ContainersReady",
        ready,
        reason,
        message.clone(),
        &now,
    ));
    conditions.push(condition(&existing, "Ready", ready, reason, message, &now));
    let mut status = current.as_object().cloned().unwrap_or_default();
    let init: Vec<Value> = init_containers
        .iter()
        .map(|(name, image)| {
            let done = Termination {
                exit_code: 0,
                started: run.started,
                finished: run.started,
            };
            json!({
                "name": name,
                "image": image,
                "imageID": format!("{image}@sha256:kube-sim"),
                "ready": true,
                "started": false,
                "restartCount": 0,
                "state": terminated_json(&done, &format!("kube-sim://{pod_uid}/{name}/0")),
                "lastState": {},
            })
        })
        .collect();
    status.insert("phase".into(), json!(phase));
    status.insert("conditions".into(), Value::Array(conditions));
    status.insert("hostIP".into(), json!(run.host_ip));
    status.insert("hostIPs".into(), json!([{"ip": run.host_ip}]));
    status.insert("podIP".into(), json!(run.pod_ip));
    status.insert("podIPs".into(), json!([{"ip": run.pod_ip}]));
    status.insert("startTime".into(), json!(format_time(run.started)));
    status.insert(
        "containerStatuses".into(),
        Value::Array(
            run.containers
                .iter()
                .map(|c| container_status(pod_uid, c))
                .collect(),
        ),
    );
    if init.is_empty() {
        status.remove("initContainerStatuses");
    } else {
        status.insert("initContainerStatuses".into(), Value::Array(init));
    }
    Value::Object(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn run_one(behaviour: Behaviour) -> (PodRun, BTreeMap<String, Behaviour>) {
        let run = PodRun::start(
            &[("main".into(), "img".into())],
            at(0),
            "10.244.0.2".into(),
            "172.18.0.2".into(),
        );
        (run, [("main".to_string(), behaviour)].into())
    }

    #[test]
    fn annotations_give_run_time_and_exit_codes_with_per_container_overrides() {
        let a = annotations(&[
            (RUN_SECONDS, "2"),
            (EXIT_CODE, "1"),
            ("kube-sim.gpufleet.dev/exit-code.worker", "3"),
            ("kube-sim.gpufleet.dev/run-seconds.worker", "0.5"),
        ]);
        assert_eq!(
            behaviour(&a, "main", None).unwrap(),
            Behaviour {
                run_for: Some(Duration::from_secs(2)),
                exit_codes: vec![1]
            }
        );
        assert_eq!(
            behaviour(&a, "worker", None).unwrap(),
            Behaviour {
                run_for: Some(Duration::from_millis(500)),
                exit_codes: vec![3]
            }
        );
        assert_eq!(
            behaviour(&BTreeMap::new(), "main", Some(Duration::ZERO))
                .unwrap()
                .run_for,
            Some(Duration::ZERO)
        );
        let none = behaviour(&BTreeMap::new(), "main", None).unwrap();
        assert_eq!(
            none,
            Behaviour {
                run_for: None,
                exit_codes: vec![0]
            }
        );
        assert!(behaviour(&annotations(&[(RUN_SECONDS, "soon")]), "main", None).is_err());
        assert!(behaviour(&annotations(&[(EXIT_CODE, "1,x")]), "main", None).is_err());
        assert_eq!(
            behaviour(&annotations(&[(EXIT_CODE, "1, 1, 0")]), "main", None)
                .unwrap()
                .exit_codes,
            vec![1, 1, 0]
        );
    }

    #[test]
    fn without_a_run_time_a_container_runs_forever() {
        let (mut run, b) = run_one(Behaviour {
            run_for: None,
            exit_codes: vec![0],
        });
        assert_eq!(
            advance(
                &mut run,
                &b,
                RestartPolicy::Never,
                Duration::ZERO,
                at(1_000_000)
            ),
            None
        );
        assert_eq!(run.phase(), "Running");
    }

    #[test]
    fn never_restart_ends_succeeded_or_failed_by_exit_code() {
        let (mut run, b) = run_one(Behaviour {
            run_for: Some(Duration::from_secs(2)),
            exit_codes: vec![0],
        });
        assert_eq!(
            advance(&mut run, &b, RestartPolicy::Never, Duration::ZERO, at(1)),
            Some(at(2))
        );
        assert_eq!(run.phase(), "Running");
        assert_eq!(
            advance(&mut run, &b, RestartPolicy::Never, Duration::ZERO, at(2)),
            None
        );
        assert_eq!(run.phase(), "Succeeded");
        let (mut run, b) = run_one(Behaviour {
            run_for: Some(Duration::from_secs(2)),
            exit_codes: vec![4],
        });
        advance(&mut run, &b, RestartPolicy::Never, Duration::ZERO, at(5));
        assert_eq!(run.phase(), "Failed");
        assert!(
            matches!(&run.containers[0].state, ContainerState::Terminated(t) if t.exit_code == 4 && t.finished == at(2))
        );
    }

    #[test]
    fn on_failure_restarts_failures_and_counts_them_until_success() {
        let (mut run, b) = run_one(Behaviour {
            run_for: Some(Duration::from_secs(1)),
            exit_codes: vec![1, 1, 0],
        });
        let delay = Duration::from_secs(1);
        // Runs: [0,1) exit 1, back-off to 2, [2,3) exit 1, back-off to 4, [4,5) exit 0.
        advance(&mut run, &b, RestartPolicy::OnFailure, delay, at(1));
        assert!(matches!(
            run.containers[0].state,
            ContainerState::BackOff { .. }
        ));
        assert_eq!(run.phase(), "Running");
        advance(&mut run, &b, RestartPolicy::OnFailure, delay, at(10));
        assert_eq!(run.containers[0].restart_count, 2);
        assert_eq!(run.phase(), "Succeeded");
    }

    #[test]
    fn always_restarts_even_after_success_and_never_ends() {
        let (mut run, b) = run_one(Behaviour {
            run_for: Some(Duration::from_secs(1)),
            exit_codes: vec![0],
        });
        let next = advance(
            &mut run,
            &b,
            RestartPolicy::Always,
            Duration::from_secs(1),
            at(9),
        );
        assert_eq!(run.containers[0].restart_count, 4);
        assert_eq!(run.phase(), "Running");
        assert!(next.is_some());
    }

    #[test]
    fn zero_run_time_and_zero_delay_cannot_spin_forever() {
        let (mut run, b) = run_one(Behaviour {
            run_for: Some(Duration::ZERO),
            exit_codes: vec![1],
        });
        advance(&mut run, &b, RestartPolicy::Always, Duration::ZERO, at(1));
        assert!(run.containers[0].restart_count > 0);
    }

    #[test]
    fn the_status_shows_running_containers_ready_and_keeps_pod_scheduled() {
        let (mut run, b) = run_one(Behaviour {
            run_for: None,
            exit_codes: vec![0],
        });
        advance(&mut run, &b, RestartPolicy::Always, Duration::ZERO, at(5));
        let current = json!({"phase": "Pending", "qosClass": "BestEffort", "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "x"}
        ]});
        let status = render_status(&current, "uid-1", &[], &run, at(5));
        assert_eq!(status["phase"], "Running");
        assert_eq!(status["qosClass"], "BestEffort");
        assert_eq!(status["podIP"], "10.244.0.2");
        assert_eq!(status["hostIP"], "172.18.0.2");
        assert_eq!(status["containerStatuses"][0]["ready"], true);
        assert!(status["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
        let types: Vec<&str> = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            [
                "PodScheduled",
                "PodReadyToStartContainers",
                "Initialized",
                "ContainersReady",
                "Ready"
            ]
        );
        // Rendering again from the rendered status changes nothing.
        assert_eq!(render_status(&status, "uid-1", &[], &run, at(50)), status);
    }

    #[test]
    fn a_completed_pod_is_not_ready_with_reason_pod_completed() {
        let (mut run, b) = run_one(Behaviour {
            run_for: Some(Duration::from_secs(1)),
            exit_codes: vec![0],
        });
        advance(&mut run, &b, RestartPolicy::Never, Duration::ZERO, at(5));
        let status = render_status(&json!({}), "u", &[("init".into(), "i".into())], &run, at(5));
        assert_eq!(status["phase"], "Succeeded");
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "False");
        assert_eq!(ready["reason"], "PodCompleted");
        assert_eq!(
            status["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(
            status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"],
            0
        );
    }
}
