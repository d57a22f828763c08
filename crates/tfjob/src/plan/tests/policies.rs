//! The run policies (restart, backoff, deadline, TTL, cleanup, suspend,
//! managedBy, gang scheduling) with gpufleet's fixes of upstream's defects
//! (crates/tfjob/README.md names each one).

use std::time::Duration;

use super::*;
use crate::api::RunPolicy;

fn at(seconds: i64) -> jiff::Timestamp {
    now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap()
}

fn run_at(job: &TFJob, pods: &[Pod], services: &[Service], when: jiff::Timestamp) -> Plan {
    let pods: Vec<&Pod> = pods.iter().collect();
    let services: Vec<&Service> = services.iter().collect();
    plan(&object(job), &pods, &services, when, &PlanConfig::default())
}

/// `job` whose status is `plan`'s.
fn next(job: &TFJob, plan: &Plan) -> TFJob {
    let mut job = job.clone();
    job.status = Some(plan.status.clone());
    job
}

fn with_run_policy(mut job: TFJob, run: RunPolicy) -> TFJob {
    job.spec.run_policy = Some(run);
    job
}

fn with_uid(mut pod: Pod, uid: &str) -> Pod {
    pod.metadata.uid = Some(uid.to_string());
    pod
}

fn with_restarts(mut pod: Pod, restarts: i32) -> Pod {
    let status = pod.status.get_or_insert_with(Default::default);
    status.container_statuses = Some(vec![ContainerStatus {
        name: "tensorflow".into(),
        restart_count: restarts,
        ..ContainerStatus::default()
    }]);
    pod
}

fn failures(plan: &Plan) -> i32 {
    plan.status.backoff.as_ref().map_or(0, |b| b.failures)
}

fn deleted_services(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            ChildAction::DeleteService { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

// --- Per-index outcomes -------------------------------------------------------

#[test]
fn a_replica_that_succeeded_is_never_re_run_after_its_pod_disappeared() {
    // Upstream #1186: the pod of worker 0 is garbage collected after success;
    // the job goes on without re-running it.
    let mut all_workers = job(&[("Worker", 2, None), ("PS", 1, None)]);
    all_workers.spec.success_policy = Some("AllWorkers".into());
    let job = after_first_pass(&all_workers);
    let first = run(
        &job,
        &pods_of(
            &job,
            &[
                ("Worker", 0, "Succeeded", Some(0)),
                ("Worker", 1, "Running", None),
                ("PS", 0, "Running", None),
            ],
        ),
        &all_services(&job),
    );
    let job = next(&job, &first);
    assert_eq!(
        job.status.as_ref().unwrap().replica_statuses["Worker"]
            .succeeded_indexes
            .as_deref(),
        Some("0")
    );
    let after_gc = run(
        &job,
        &pods_of(
            &job,
            &[("Worker", 1, "Running", None), ("PS", 0, "Running", None)],
        ),
        &all_services(&job),
    );
    assert_eq!(created_pods(&after_gc), Vec::<String>::new());
    assert_eq!(after_gc.status.replica_statuses["Worker"].succeeded, 1);
}

// --- Restart policies ---------------------------------------------------------

#[test]
fn failure_and_restart_conditions_carry_training_operator_v1_9s_reasons_and_messages() {
    // (Backoff limit and deadline: their own tests below, same reason.)
    let outcome = |policy: RestartPolicy, exit: i32| {
        let job = after_first_pass(&job(&[("Worker", 1, Some(policy))]));
        let pods = pods_of(&job, &[("Worker", 0, "Failed", Some(exit))]);
        let plan = run(&job, &pods, &all_services(&job));
        let last = last_condition(&plan.status).clone();
        let event = plan
            .events
            .iter()
            .find(|e| e.reason == last.reason.clone().unwrap_or_default())
            .map(|e| e.message.clone());
        (
            last.type_,
            last.reason.unwrap_or_default(),
            last.message.unwrap_or_default(),
            event,
        )
    };
    let never = outcome(RestartPolicy::Never, 1);
    assert_eq!(
        (never.0.as_str(), never.1.as_str(), never.2.as_str()),
        (
            "Failed",
            "TFJobFailed",
            "TFJob default/test-tfjob has failed because 1 Worker replica(s) failed."
        )
    );
    assert_eq!(
        never.3.as_deref(),
        Some(never.2.as_str()),
        "the event says the same"
    );
    let permanent = outcome(RestartPolicy::ExitCode, 1);
    assert_eq!(
        (
            permanent.0.as_str(),
            permanent.1.as_str(),
            permanent.2.as_str()
        ),
        (
            "Failed",
            "TFJobFailed",
            r#"job "test-tfjob" is failing because "Worker" replica(s) failed."#
        )
    );
    let retried = outcome(RestartPolicy::ExitCode, 137);
    assert_eq!(
        (retried.0.as_str(), retried.1.as_str(), retried.2.as_str()),
        (
            "Restarting",
            "TFJobRestarting",
            "job test-tfjob is restarting because Worker replica(s) failed."
        )
    );
    assert_eq!(retried.3.as_deref(), Some(retried.2.as_str()));
}

#[test]
fn an_exit_code_137_pod_is_re_created_and_its_failure_counted_once_per_pod_uid() {
    let job = after_first_pass(&job(&[("Worker", 1, Some(RestartPolicy::ExitCode))]));
    let failed = pods_of(&job, &[("Worker", 0, "Failed", Some(137))]);
    let first = run(&job, &failed, &all_services(&job));
    assert_eq!(deleted_pods(&first), ["test-tfjob-worker-0"]);
    assert_eq!(failures(&first), 1);
    assert_eq!(last_condition(&first.status).type_, "Restarting");
    // The same pod seen again (the delete not yet observed): not recounted.
    let job = next(&job, &first);
    let again = run(&job, &failed, &all_services(&job));
    assert_eq!(failures(&again), 1);
    // Its successor failing is a new UID: counted.
    let successor = vec![with_uid(failed[0].clone(), "pod-worker-0-b")];
    let job = next(&job, &again);
    let third = run_at(&job, &successor, &all_services(&job), at(60));
    assert_eq!(failures(&third), 2);
}

#[test]
fn a_failed_pod_under_on_failure_is_re_created_and_the_job_keeps_going() {
    // Upstream #999: a pod Failed under OnFailure failed the whole job.
    let job = after_first_pass(&job(&[("Worker", 2, Some(RestartPolicy::OnFailure))]));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Failed", Some(1)),
            ("Worker", 1, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert_eq!(deleted_pods(&plan), ["test-tfjob-worker-0"]);
    assert!(!true_conditions(&plan.status).contains(&"Failed"));
    assert_eq!(last_condition(&plan.status).type_, "Restarting");
}

#[test]
fn an_evicted_pod_is_re_created_at_once_without_counting_a_failure() {
    let job = after_first_pass(&job(&[("Worker", 1, Some(RestartPolicy::Never))]));
    let mut evicted = pod(&job, "Worker", 0, "Failed", Some(137));
    evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
    let first = run(&job, &[evicted], &all_services(&job));
    assert_eq!(deleted_pods(&first), ["test-tfjob-worker-0"]);
    assert_eq!(failures(&first), 0);
    assert!(!true_conditions(&first.status).contains(&"Failed"));
    // Gone: re-created in the next pass, no backoff wait.
    let job = next(&job, &first);
    let second = run(&job, &[], &all_services(&job));
    assert_eq!(created_pods(&second), ["test-tfjob-worker-0"]);
}

// --- backoffLimit and pacing --------------------------------------------------

#[test]
fn re_creation_after_a_counted_failure_waits_10_seconds_and_the_plan_wakes_exactly_then() {
    let job = after_first_pass(&job(&[("Worker", 1, Some(RestartPolicy::ExitCode))]));
    let failed = pods_of(&job, &[("Worker", 0, "Failed", Some(137))]);
    let first = run(&job, &failed, &all_services(&job));
    let job = next(&job, &first);
    let early = run_at(&job, &[], &all_services(&job), at(4));
    assert_eq!(created_pods(&early), Vec::<String>::new());
    assert_eq!(early.requeue_after, Some(Duration::from_secs(6)));
    let due = run_at(&job, &[], &all_services(&job), at(10));
    assert_eq!(created_pods(&due), ["test-tfjob-worker-0"]);
}

#[test]
fn backoff_limit_2_fails_the_job_on_the_third_counted_failure_with_the_upstream_message() {
    let base = with_run_policy(
        job(&[("Worker", 1, Some(RestartPolicy::ExitCode))]),
        RunPolicy {
            backoff_limit: Some(2),
            clean_pod_policy: Some(CleanPodPolicy::All),
            ..RunPolicy::default()
        },
    );
    let mut job = after_first_pass(&base);
    for (attempt, uid) in ["a", "b", "c"].iter().enumerate() {
        let failed = vec![with_uid(
            pod(&job, "Worker", 0, "Failed", Some(137)),
            &format!("pod-{uid}"),
        )];
        let when = at(1000 * i64::try_from(attempt).unwrap());
        let plan = run_at(&job, &failed, &all_services(&job), when);
        let failed_now = true_conditions(&plan.status).contains(&"Failed");
        assert_eq!(failed_now, attempt == 2, "failure {}", attempt + 1);
        if failed_now {
            let last = last_condition(&plan.status);
            assert_eq!(last.reason.as_deref(), Some("TFJobFailed"));
            assert_eq!(
                last.message.as_deref(),
                Some(
                    "Job test-tfjob has failed because it has reached the specified backoff limit"
                )
            );
            // cleanPodPolicy All in the same pass: the pod and its Service.
            assert_eq!(deleted_pods(&plan), ["test-tfjob-worker-0"]);
            assert_eq!(deleted_services(&plan), ["test-tfjob-worker-0"]);
        }
        job = next(&job, &plan);
    }
}

#[test]
fn container_restarts_count_towards_the_backoff_limit_once_per_pod_and_ps_restarts_too() {
    // With batch/v1 semantics: the limit is the number of retries allowed, so 4
    // restarts under backoffLimit 4 are not past it (upstream: >=), a fifth is.
    let base = with_run_policy(
        job(&[
            ("Worker", 4, Some(RestartPolicy::OnFailure)),
            ("PS", 2, None),
        ]),
        RunPolicy {
            backoff_limit: Some(4),
            clean_pod_policy: Some(CleanPodPolicy::Running),
            ..RunPolicy::default()
        },
    );
    let job = after_first_pass(&base);
    let running = |restarts: [i32; 4]| -> Vec<Pod> {
        let mut pods: Vec<Pod> = (0..4)
            .map(|i| {
                with_restarts(
                    pod(&job, "Worker", i, "Running", None),
                    restarts[usize::try_from(i).unwrap()],
                )
            })
            .collect();
        pods.extend(pods_of(
            &job,
            &[("PS", 0, "Running", None), ("PS", 1, "Running", None)],
        ));
        pods
    };
    let four = run(&job, &running([1, 1, 1, 1]), &all_services(&job));
    assert_eq!(failures(&four), 4);
    assert!(!true_conditions(&four.status).contains(&"Failed"));
    let job = next(&job, &four);
    // The same restarts observed again count nothing new.
    let same = run(&job, &running([1, 1, 1, 1]), &all_services(&job));
    assert_eq!(failures(&same), 4);
    let fifth = run(&job, &running([2, 1, 1, 1]), &all_services(&job));
    assert_eq!(failures(&fifth), 5);
    assert_eq!(last_condition(&fifth.status).type_, "Failed");
    assert_eq!(deleted_pods(&fifth).len(), 6, "cleanPodPolicy Running");
}

#[test]
fn backoff_limit_0_with_no_restarts_is_not_past_the_limit() {
    let base = with_run_policy(
        job(&[("Worker", 1, Some(RestartPolicy::OnFailure))]),
        RunPolicy {
            backoff_limit: Some(0),
            ..RunPolicy::default()
        },
    );
    let job = after_first_pass(&base);
    let plan = run(
        &job,
        &pods_of(&job, &[("Worker", 0, "Running", None)]),
        &all_services(&job),
    );
    assert_eq!(last_condition(&plan.status).type_, "Running");
    assert_eq!(plan.status.backoff, None);
}

// --- activeDeadlineSeconds ----------------------------------------------------

#[test]
fn past_its_deadline_a_job_fails_with_the_upstream_message_and_all_pods_go_with_policy_all() {
    // Upstream's reason and message, unchanged.
    let base = with_run_policy(
        dist_mnist(),
        RunPolicy {
            active_deadline_seconds: Some(2),
            clean_pod_policy: Some(CleanPodPolicy::All),
            ..RunPolicy::default()
        },
    );
    let job = after_first_pass(&base);
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Running", None),
            ("Worker", 2, "Running", None),
            ("Worker", 3, "Running", None),
            ("PS", 0, "Running", None),
            ("PS", 1, "Running", None),
        ],
    );
    let fresh = run_at(&job, &pods, &all_services(&job), at(1));
    assert!(!true_conditions(&fresh.status).contains(&"Failed"));
    assert_eq!(
        fresh.requeue_after,
        Some(Duration::from_secs(1)),
        "woken at the deadline"
    );
    let late = run_at(&job, &pods, &all_services(&job), at(2));
    let last = last_condition(&late.status);
    assert_eq!(last.type_, "Failed");
    assert_eq!(last.reason.as_deref(), Some("TFJobFailed"));
    assert_eq!(
        last.message.as_deref(),
        Some("Job test-tfjob has failed because it was active longer than specified deadline")
    );
    assert_eq!(deleted_pods(&late).len(), 6);
    assert_eq!(deleted_services(&late).len(), 6);
}

#[test]
fn a_deadline_of_0_is_already_past_and_without_a_deadline_nothing_is_deleted() {
    let zero = after_first_pass(&with_run_policy(
        job(&[("Worker", 1, None)]),
        RunPolicy {
            active_deadline_seconds: Some(0),
            ..RunPolicy::default()
        },
    ));
    let pods = pods_of(&zero, &[("Worker", 0, "Running", None)]);
    let plan = run(&zero, &pods, &all_services(&zero));
    assert_eq!(last_condition(&plan.status).type_, "Failed");
    let none = after_first_pass(&job(&[("Worker", 1, None)]));
    let plan = run_at(&none, &pods, &all_services(&none), at(100_000));
    assert_eq!(deleted_pods(&plan), Vec::<String>::new());
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn a_deadline_failure_wins_over_a_success_seen_in_the_same_pass() {
    let job = after_first_pass(&with_run_policy(
        job(&[("Worker", 1, None)]),
        RunPolicy {
            active_deadline_seconds: Some(5),
            ..RunPolicy::default()
        },
    ));
    let pods = pods_of(&job, &[("Worker", 0, "Succeeded", Some(0))]);
    let plan = run_at(&job, &pods, &all_services(&job), at(6));
    assert_eq!(true_conditions(&plan.status), ["Created", "Failed"]);
}

// --- ttlSecondsAfterFinished ---------------------------------------------------

#[test]
fn a_finished_job_waits_for_its_ttl_without_passes_and_is_deleted_in_the_background_then() {
    // One wake-up at completionTime + ttl, no re-queue loop before it (upstream
    // #965).
    let base = with_run_policy(
        job(&[("Worker", 1, None)]),
        RunPolicy {
            ttl_seconds_after_finished: Some(30),
            ..RunPolicy::default()
        },
    );
    let job = after_first_pass(&base);
    let pods = pods_of(&job, &[("Worker", 0, "Succeeded", Some(0))]);
    let done = run(&job, &pods, &all_services(&job));
    assert_eq!(last_condition(&done.status).type_, "Succeeded");
    assert_eq!(done.requeue_after, Some(Duration::from_secs(30)));
    let job = next(&job, &done);
    let waiting = run_at(&job, &pods, &[], at(20));
    assert_eq!(waiting.requeue_after, Some(Duration::from_secs(10)));
    assert!(!waiting.status_changed);
    assert!(waiting.actions.is_empty());
    let expired = run_at(&job, &pods, &[], at(30));
    assert_eq!(
        expired.actions,
        [ChildAction::DeleteJob {
            name: "test-tfjob".into(),
            uid: Some("uid-1".into())
        }]
    );
}

#[test]
fn ttl_0_deletes_a_job_whose_completion_time_has_passed() {
    let base = with_run_policy(
        job(&[("Worker", 1, None)]),
        RunPolicy {
            ttl_seconds_after_finished: Some(0),
            ..RunPolicy::default()
        },
    );
    let job = after_first_pass(&base);
    let done = run(
        &job,
        &pods_of(&job, &[("Worker", 0, "Failed", Some(1))]),
        &all_services(&job),
    );
    assert!(
        done.actions
            .iter()
            .any(|a| matches!(a, ChildAction::DeleteJob { .. }))
    );
}

// --- cleanPodPolicy -------------------------------------------------------------

#[test]
fn clean_pod_policy_running_also_removes_the_services_of_pods_that_vanished_earlier() {
    // Upstream deleted Services only by the name of a pod it deleted (#1191).
    let job = after_first_pass(&with_run_policy(
        job(&[("Worker", 2, None), ("PS", 1, None)]),
        RunPolicy {
            clean_pod_policy: Some(CleanPodPolicy::Running),
            ..RunPolicy::default()
        },
    ));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("PS", 0, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert_eq!(last_condition(&plan.status).type_, "Succeeded");
    assert_eq!(deleted_pods(&plan), ["test-tfjob-ps-0"]);
    let mut services = deleted_services(&plan);
    services.sort();
    assert_eq!(services, ["test-tfjob-ps-0", "test-tfjob-worker-1"]);
}

#[test]
fn clean_pod_policy_none_keeps_every_pod_and_service() {
    let job = after_first_pass(&with_run_policy(
        job(&[("Worker", 1, None), ("PS", 1, None)]),
        RunPolicy {
            clean_pod_policy: Some(CleanPodPolicy::None),
            ..RunPolicy::default()
        },
    ));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("PS", 0, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert_eq!(last_condition(&plan.status).type_, "Succeeded");
    assert!(deleted_pods(&plan).is_empty() && deleted_services(&plan).is_empty());
}

#[test]
fn a_job_without_clean_pod_policy_keeps_the_pods_of_workers_still_running_when_the_chief_succeeds()
{
    // training-operator v1.9's default None: the running workers and the
    // PS keep their pods (and logs); tf-operator deleted them (Running).
    let job = after_first_pass(&job(&[
        ("Chief", 1, None),
        ("Worker", 2, None),
        ("PS", 1, None),
    ]));
    let pods = pods_of(
        &job,
        &[
            ("Chief", 0, "Succeeded", Some(0)),
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Running", None),
            ("PS", 0, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert_eq!(last_condition(&plan.status).type_, "Succeeded");
    assert!(deleted_pods(&plan).is_empty() && deleted_services(&plan).is_empty());
    // A later pass of the finished job deletes nothing either.
    let finished = next(&job, &plan);
    let later = run(&finished, &pods, &all_services(&finished));
    assert!(deleted_pods(&later).is_empty() && deleted_services(&later).is_empty());
}

#[test]
fn the_operators_default_clean_pod_policy_running_restores_tf_operators_deletes() {
    let job = after_first_pass(&job(&[("Worker", 1, None), ("PS", 1, None)]));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("PS", 0, "Running", None),
        ],
    );
    let pod_refs: Vec<&Pod> = pods.iter().collect();
    let services = all_services(&job);
    let service_refs: Vec<&Service> = services.iter().collect();
    let config = PlanConfig {
        default_clean_pod_policy: CleanPodPolicy::Running,
        ..PlanConfig::default()
    };
    let plan = plan(&object(&job), &pod_refs, &service_refs, now(), &config);
    assert_eq!(deleted_pods(&plan), ["test-tfjob-ps-0"]);
}

// --- Success ----------------------------------------------------------------------

#[test]
fn running_ps_and_evaluator_replicas_never_block_success() {
    let job = after_first_pass(&job(&[
        ("Worker", 2, None),
        ("PS", 1, None),
        ("Evaluator", 1, None),
    ]));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("Worker", 1, "Succeeded", Some(0)),
            ("PS", 0, "Running", None),
            ("Evaluator", 0, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert_eq!(true_conditions(&plan.status), ["Created", "Succeeded"]);
}

// --- Suspend, managedBy -------------------------------------------------------------

fn suspended(job: TFJob, suspend: bool) -> TFJob {
    let mut run = job.spec.run_policy.clone().unwrap_or_default();
    run.suspend = Some(suspend);
    with_run_policy(job, run)
}

#[test]
fn a_tfjob_created_suspended_creates_no_pod_or_service_and_is_suspended() {
    // training-operator's suspend: no child exists while suspended.
    let plan = run(&suspended(dist_mnist(), true), &[], &[]);
    assert!(created_pods(&plan).is_empty() && created_services(&plan).is_empty());
    let last = last_condition(&plan.status);
    assert_eq!(last.type_, "Suspended");
    assert_eq!(last.reason.as_deref(), Some("TFJobSuspended"));
    assert_eq!(
        last.message.as_deref(),
        Some("TFJob test-tfjob is suspended.")
    );
    assert_eq!(plan.status.start_time, None);
    assert_eq!(plan.requeue_after, None);
}

#[test]
fn suspending_a_running_job_deletes_its_pods_and_resuming_resets_start_time_and_recreates_them() {
    // training-operator's suspend and resume.
    let job = after_first_pass(&job(&[("Worker", 2, None)]));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Running", None),
        ],
    );
    let running = run(&job, &pods, &all_services(&job));
    assert_eq!(last_condition(&running.status).type_, "Running");
    let job = suspended(next(&job, &running), true);
    let pause = run_at(&job, &pods, &all_services(&job), at(5));
    assert_eq!(deleted_pods(&pause).len(), 2);
    assert_eq!(deleted_services(&pause).len(), 2);
    let status = |plan: &Plan, type_: &str| {
        plan.status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| c.status.clone())
    };
    assert_eq!(status(&pause, "Running").as_deref(), Some("False"));
    assert_eq!(status(&pause, "Suspended").as_deref(), Some("True"));
    assert_eq!(pause.status.replica_statuses["Worker"].active, 0);

    let job = suspended(next(&job, &pause), false);
    let resume = run_at(&job, &[], &[], at(60));
    assert_eq!(status(&resume, "Suspended").as_deref(), Some("False"));
    let resumed = resume
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Suspended")
        .unwrap();
    assert_eq!(resumed.reason.as_deref(), Some("TFJobResumed"));
    assert_eq!(resume.status.start_time, Some(Time(at(60))));
    assert_eq!(created_pods(&resume).len(), 2);
    assert!(resume.events.iter().any(|e| e.reason == "TFJobResumed"));
}

#[test]
fn suspend_toggled_true_false_true_three_times_writes_training_operators_conditions_each_cycle() {
    // Each cycle ends exactly as training-operator v1.9 leaves it: no
    // condition twice, Failed never, nothing counted towards backoff, one
    // Suspended and one Resumed event per transition, startTime reset on
    // every resume, every pod and Service deleted on every suspend.
    let triples = |plan: &Plan| -> Vec<(String, String, String)> {
        plan.status
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone().unwrap_or_default(),
                )
            })
            .collect()
    };
    let expect = |list: &[(&str, &str, &str)]| -> Vec<(String, String, String)> {
        list.iter()
            .map(|(t, s, r)| (t.to_string(), s.to_string(), r.to_string()))
            .collect()
    };
    let events =
        |plan: &Plan, reason: &str| plan.events.iter().filter(|e| e.reason == reason).count();
    let mut job = after_first_pass(&job(&[("Worker", 2, None)]));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Running", None),
        ],
    );
    let running = run(&job, &pods, &all_services(&job));
    job = next(&job, &running);
    for cycle in 0..3 {
        let t = 100 * i64::from(cycle);
        job = suspended(job, true);
        let pause = run_at(&job, &pods, &all_services(&job), at(t + 10));
        assert_eq!(
            triples(&pause),
            expect(&[
                ("Created", "True", "TFJobCreated"),
                ("Running", "False", "TFJobSuspended"),
                ("Suspended", "True", "TFJobSuspended"),
            ]),
            "cycle {cycle}: suspended"
        );
        let suspended_condition = pause.status.conditions.last().unwrap();
        assert_eq!(
            suspended_condition.message.as_deref(),
            Some("TFJob test-tfjob is suspended.")
        );
        assert_eq!(deleted_pods(&pause).len(), 2, "cycle {cycle}");
        assert_eq!(deleted_services(&pause).len(), 2, "cycle {cycle}");
        assert_eq!(events(&pause, "TFJobSuspended"), 1);
        job = next(&job, &pause);
        // A second pass while still suspended (its pods gone) changes nothing.
        let still = run_at(&job, &[], &[], at(t + 20));
        assert!(
            !still.status_changed && still.events.is_empty(),
            "cycle {cycle}"
        );
        assert!(created_pods(&still).is_empty());

        job = suspended(job, false);
        let resume = run_at(&job, &[], &[], at(t + 30));
        assert_eq!(
            triples(&resume),
            expect(&[
                ("Created", "True", "TFJobCreated"),
                ("Running", "False", "TFJobSuspended"),
                ("Suspended", "False", "TFJobResumed"),
            ]),
            "cycle {cycle}: resumed"
        );
        assert_eq!(
            resume.status.conditions.last().unwrap().message.as_deref(),
            Some("TFJob test-tfjob is resumed.")
        );
        assert_eq!(resume.status.start_time, Some(Time(at(t + 30))));
        assert_eq!(created_pods(&resume).len(), 2, "cycle {cycle}");
        assert_eq!(events(&resume, "TFJobResumed"), 1);
        job = next(&job, &resume);
        let again = run_at(&job, &pods, &all_services(&job), at(t + 40));
        assert_eq!(
            triples(&again),
            expect(&[
                ("Created", "True", "TFJobCreated"),
                ("Suspended", "False", "TFJobResumed"),
                ("Running", "True", "TFJobRunning"),
            ]),
            "cycle {cycle}: running again"
        );
        assert_eq!(failures(&again), 0, "suspension is no failure");
        job = next(&job, &again);
    }
}

#[test]
fn a_job_managed_by_another_controller_is_never_reconciled() {
    // training-operator's `runPolicy.managedBy`: a job another controller
    // manages is left entirely alone.
    let job = with_run_policy(
        dist_mnist(),
        RunPolicy {
            managed_by: Some("kueue.x-k8s.io/multikueue".into()),
            ..RunPolicy::default()
        },
    );
    let plan = run(&job, &[], &[]);
    assert!(plan.actions.is_empty() && plan.events.is_empty());
    assert!(!plan.status_changed);
    let ours = with_run_policy(
        dist_mnist(),
        RunPolicy {
            managed_by: Some("kubeflow.org/training-operator".into()),
            ..RunPolicy::default()
        },
    );
    assert_eq!(created_pods(&run(&ours, &[], &[])).len(), 6);
}

// --- Gang scheduling --------------------------------------------------------------

fn run_gang(job: &TFJob, group: Option<&gang::ObservedPodGroup>, when: jiff::Timestamp) -> Plan {
    run_gang_with(job, "volcano", group, when)
}

fn run_gang_with(
    job: &TFJob,
    scheduler_name: &str,
    group: Option<&gang::ObservedPodGroup>,
    when: jiff::Timestamp,
) -> Plan {
    let config = PlanConfig {
        gang: Some(gang::GangConfig {
            scheduler_name: scheduler_name.into(),
        }),
        ..PlanConfig::default()
    };
    let services = all_services(job);
    let service_refs: Vec<&Service> = services.iter().collect();
    let snapshot = gang::GangSnapshot {
        pod_group: group.cloned(),
        priority_classes: Default::default(),
    };
    plan_with_gang(&object(job), &[], &service_refs, &snapshot, when, &config)
}

fn pod_objects_created(plan: &Plan) -> Vec<&Pod> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            ChildAction::CreatePod(pod) => Some(pod.as_ref()),
            _ => None,
        })
        .collect()
}

fn pod_groups_created(plan: &Plan) -> Vec<&serde_json::Value> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            ChildAction::CreatePodGroup(group) => Some(group.as_ref()),
            _ => None,
        })
        .collect()
}

/// The PodGroup the operator would have created for `job`, observed in
/// `phase`.
fn observed_group(job: &TFJob, scheduler_name: &str, phase: &str) -> gang::ObservedPodGroup {
    let first = run_gang_with(job, scheduler_name, None, now());
    gang::ObservedPodGroup {
        uid: Some("pg-1".into()),
        phase: Some(phase.into()),
        created: Some(now()),
        spec: pod_groups_created(&first)[0]["spec"].clone(),
    }
}

#[test]
fn with_gang_scheduling_the_pod_group_comes_first_and_pods_only_once_it_is_admitted() {
    let job = after_first_pass(&dist_mnist());
    let first = run_gang(&job, None, now());
    assert!(created_pods(&first).is_empty());
    assert!(
        first
            .actions
            .iter()
            .any(|a| matches!(a, ChildAction::CreatePodGroup(_)))
    );
    let pending = observed_group(&job, "volcano", "Pending");
    let waiting = run_gang(&job, Some(&pending), now());
    assert!(created_pods(&waiting).is_empty());
    assert!(
        waiting.actions.is_empty(),
        "a group in step with the job is left alone"
    );
    let admitted = gang::ObservedPodGroup {
        phase: Some("Inqueue".into()),
        ..pending
    };
    let go = run_gang(&job, Some(&admitted), now());
    assert_eq!(created_pods(&go).len(), 6, "the whole gang at once");
    let ChildAction::CreatePod(pod) = &go
        .actions
        .iter()
        .find(|a| matches!(a, ChildAction::CreatePod(_)))
        .unwrap()
    else {
        unreachable!()
    };
    assert_eq!(
        pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
        Some("volcano")
    );
    let annotations = pod.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["scheduling.k8s.io/group-name"], "test-tfjob");
    assert_eq!(annotations["volcano.sh/task-spec"], "ps");
}

#[test]
fn with_scheduler_plugins_the_pod_group_comes_first_and_the_pods_follow_at_once_labelled() {
    let job = after_first_pass(&dist_mnist());
    let first = run_gang_with(&job, "scheduler-plugins-scheduler", None, now());
    assert!(created_pods(&first).is_empty());
    let groups = pod_groups_created(&first);
    assert_eq!(groups[0]["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
    assert_eq!(groups[0]["spec"]["minMember"], 6);
    // Coscheduling's group stays Pending until the pods exist: they are
    // created now, and the scheduler binds all or none of them.
    let pending = observed_group(&job, "scheduler-plugins-scheduler", "Pending");
    let go = run_gang_with(&job, "scheduler-plugins-scheduler", Some(&pending), now());
    let pods = pod_objects_created(&go);
    assert_eq!(pods.len(), 6);
    for pod in pods {
        assert_eq!(
            pod.spec.as_ref().unwrap().scheduler_name.as_deref(),
            Some("scheduler-plugins-scheduler")
        );
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()["scheduling.x-k8s.io/pod-group"],
            "test-tfjob"
        );
    }
}

#[test]
fn a_template_naming_another_scheduler_keeps_it_with_one_warning() {
    let mut base = dist_mnist();
    let worker = base
        .spec
        .tf_replica_specs
        .as_mut()
        .unwrap()
        .get_mut("Worker")
        .unwrap();
    worker
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .scheduler_name = Some("custom".into());
    let job = after_first_pass(&base);
    let admitted = observed_group(&job, "volcano", "Running");
    let go = run_gang(&job, Some(&admitted), now());
    let schedulers: Vec<(String, Option<String>)> = pod_objects_created(&go)
        .iter()
        .map(|pod| {
            (
                pod.metadata.name.clone().unwrap(),
                pod.spec.as_ref().unwrap().scheduler_name.clone(),
            )
        })
        .collect();
    for (name, scheduler) in &schedulers {
        let expected = if name.contains("-worker-") {
            "custom"
        } else {
            "volcano"
        };
        assert_eq!(scheduler.as_deref(), Some(expected), "{name}");
    }
    let warnings: Vec<&PlannedEvent> = go
        .events
        .iter()
        .filter(|e| e.reason == "SettedPodTemplateSchedulerName")
        .collect();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].type_, EventType::Warning);
}

#[test]
fn a_pod_group_is_updated_when_the_jobs_replicas_change() {
    let job = after_first_pass(&dist_mnist());
    let admitted = observed_group(&job, "volcano", "Running");
    let mut scaled = job.clone();
    let worker = scaled
        .spec
        .tf_replica_specs
        .as_mut()
        .unwrap()
        .get_mut("Worker")
        .unwrap();
    worker.replicas = Some(worker.replicas.unwrap() + 2);
    let plan = run_gang(&scaled, Some(&admitted), now());
    let updates: Vec<&ChildAction> = plan
        .actions
        .iter()
        .filter(|a| matches!(a, ChildAction::UpdatePodGroup { .. }))
        .collect();
    assert_eq!(
        updates,
        [&ChildAction::UpdatePodGroup {
            name: "test-tfjob".into(),
            uid: Some("pg-1".into()),
            spec: Box::new(serde_json::json!({"minMember": 8})),
        }]
    );
    assert_eq!(created_pods(&plan).len(), 8, "the whole scaled gang");
}

#[test]
fn a_missing_priority_class_is_warned_about_once_per_class_and_the_group_is_still_created() {
    let mut base = dist_mnist();
    let worker = base
        .spec
        .tf_replica_specs
        .as_mut()
        .unwrap()
        .get_mut("Worker")
        .unwrap();
    worker
        .template
        .as_mut()
        .unwrap()
        .spec
        .as_mut()
        .unwrap()
        .priority_class_name = Some("gone".into());
    let job = after_first_pass(&base);
    let first = run_gang(&job, None, now());
    assert_eq!(pod_groups_created(&first).len(), 1);
    let warning = first
        .events
        .iter()
        .find(|e| e.reason == "PriorityClassNotFound")
        .unwrap();
    assert_eq!(warning.type_, EventType::Warning);
    assert!(
        warning
            .message
            .starts_with("PriorityClass gone named by the Worker pod template does not exist")
    );
    assert!(warning.dedup_key.is_some());
}

/// dist-mnist after its first pass, with `scheduleTimeoutSeconds: 60`.
fn with_schedule_timeout_of_60_seconds() -> TFJob {
    let mut base = dist_mnist();
    base.spec.run_policy = Some(RunPolicy {
        scheduling_policy: Some(crate::api::SchedulingPolicy {
            schedule_timeout_seconds: Some(60),
            ..Default::default()
        }),
        ..RunPolicy::default()
    });
    after_first_pass(&base)
}

#[test]
fn a_pod_group_not_admitted_within_the_schedule_timeout_fails_the_job() {
    let job = with_schedule_timeout_of_60_seconds();
    let pending = observed_group(&job, "volcano", "Pending");
    let waiting = run_gang(&job, Some(&pending), at(30));
    assert!(!true_conditions(&waiting.status).contains(&"Failed"));
    assert_eq!(waiting.requeue_after, Some(Duration::from_secs(30)));
    let late = run_gang(&job, Some(&pending), at(60));
    let last = last_condition(&late.status);
    assert_eq!(last.type_, "Failed");
    assert_eq!(
        last.message.as_deref(),
        Some("Job test-tfjob has failed because its PodGroup was not admitted within 60 seconds")
    );
    assert!(
        late.actions
            .iter()
            .any(|a| matches!(a, ChildAction::DeletePodGroup { .. }))
    );
    // Coscheduling enforces its scheduleTimeoutSeconds itself (and retries
    // the group): the job is not failed for it.
    let pending = observed_group(&job, "scheduler-plugins-scheduler", "Pending");
    let plugins = run_gang_with(&job, "scheduler-plugins-scheduler", Some(&pending), at(600));
    assert!(!true_conditions(&plugins.status).contains(&"Failed"));
}

#[test]
fn a_finished_job_deleting_its_pod_group_says_so_once_as_training_operator_does() {
    let job = with_schedule_timeout_of_60_seconds();
    let pending = observed_group(&job, "volcano", "Pending");
    let terminated = |plan: &Plan| {
        plan.events
            .iter()
            .filter(|e| e.reason == "JobTerminated")
            .map(|e| e.message.clone())
            .collect::<Vec<_>>()
    };
    // The job fails for its group's timeout, and the group goes with the
    // note training-operator writes before deleting it.
    let late = run_gang(&job, Some(&pending), at(60));
    assert_eq!(
        terminated(&late),
        ["Job has been terminated. Deleting PodGroup"]
    );
    // Once the group is gone, later passes of the finished job say nothing
    // more (training-operator repeats it on every pass).
    let finished = next(&job, &late);
    let later = run_gang(&finished, None, at(90));
    assert!(terminated(&later).is_empty());
    // A job still running deletes no group and says nothing of it.
    let waiting = run_gang(&job, Some(&pending), at(30));
    assert!(terminated(&waiting).is_empty());
}

#[test]
fn a_pod_group_carries_the_jobs_annotations_and_no_empty_map_without_them() {
    let job = after_first_pass(&dist_mnist());
    let bare = run_gang_with(&job, "scheduler-plugins", None, now());
    let group = pod_groups_created(&bare)[0];
    assert!(
        group["metadata"].get("annotations").is_none(),
        "training-operator leaves the field out: {group}"
    );
    let mut annotated = job.clone();
    annotated.metadata.annotations = Some([("team".to_string(), "vision".to_string())].into());
    let plan = run_gang_with(&annotated, "scheduler-plugins", None, now());
    assert_eq!(
        pod_groups_created(&plan)[0]["metadata"]["annotations"],
        serde_json::json!({"team": "vision"})
    );
}
