//! The planner against upstream's behaviour, one sentence per test name.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateTerminated, ContainerStatus, Pod, PodStatus, Service,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::*;
use crate::api::{ReplicaSpec, RestartPolicy, RunPolicy, TFJobSpec};
use crate::testing::{job_with, tf_template};

fn now() -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_700_000_000).unwrap()
}

fn job(types: &[(&str, i32, Option<RestartPolicy>)]) -> TFJob {
    job_with(TFJobSpec {
        tf_replica_specs: Some(
            types
                .iter()
                .map(|(key, n, policy)| {
                    (
                        key.to_string(),
                        ReplicaSpec {
                            replicas: Some(*n),
                            template: Some(tf_template("img:1")),
                            restart_policy: *policy,
                        },
                    )
                })
                .collect(),
        ),
        ..TFJobSpec::default()
    })
}

/// `job` with `runPolicy.cleanPodPolicy` set (the default is `None`).
fn with_clean_pod_policy(mut job: TFJob, policy: CleanPodPolicy) -> TFJob {
    job.spec
        .run_policy
        .get_or_insert_with(RunPolicy::default)
        .clean_pod_policy = Some(policy);
    job
}

fn object(job: &TFJob) -> TFJobObject {
    serde_json::from_value(serde_json::to_value(job).unwrap()).unwrap()
}

/// A pod of `job` as the operator would have created it, in `phase`; a
/// terminated tensorflow container when `exit` is given.
fn pod(job: &TFJob, rtype: &str, index: i32, phase: &str, exit: Option<i32>) -> Pod {
    let rtype = ReplicaType::from_key(rtype);
    let name = job.metadata.name.as_deref().unwrap();
    Pod {
        metadata: ObjectMeta {
            name: Some(names::child_name(name, &rtype.lower(), index)),
            namespace: job.metadata.namespace.clone(),
            uid: Some(format!("pod-{}-{index}", rtype.lower())),
            labels: Some(names::replica_labels(name, &rtype, index, false)),
            owner_references: Some(vec![names::owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(PodStatus {
            phase: Some(phase.to_string()),
            container_statuses: exit.map(|code| {
                vec![ContainerStatus {
                    name: "tensorflow".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: code,
                            ..ContainerStateTerminated::default()
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]
            }),
            ..PodStatus::default()
        }),
    }
}

fn service(job: &TFJob, rtype: &str, index: i32) -> Service {
    let rtype = ReplicaType::from_key(rtype);
    let spec = defaults::apply(job, CleanPodPolicy::Running);
    let mut service = children::build_service(job, &spec, &rtype, index);
    service.metadata.uid = Some(format!("svc-{}-{index}", rtype.lower()));
    service
}

fn all_services(job: &TFJob) -> Vec<Service> {
    let spec = defaults::apply(job, CleanPodPolicy::Running);
    spec.replicas
        .iter()
        .flat_map(|(rtype, r)| (0..r.replicas).map(move |i| (rtype.clone(), i)))
        .map(|(rtype, i)| service(job, rtype.canonical(), i))
        .collect()
}

fn run(job: &TFJob, pods: &[Pod], services: &[Service]) -> Plan {
    let pods: Vec<&Pod> = pods.iter().collect();
    let services: Vec<&Service> = services.iter().collect();
    plan(
        &object(job),
        &pods,
        &services,
        now(),
        &PlanConfig::default(),
    )
}

fn created_pods(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            ChildAction::CreatePod(pod) => pod.metadata.name.clone(),
            _ => None,
        })
        .collect()
}

fn created_services(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            ChildAction::CreateService(svc) => svc.metadata.name.clone(),
            _ => None,
        })
        .collect()
}

fn deleted_pods(plan: &Plan) -> Vec<String> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            ChildAction::DeletePod { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// Condition types with status True, in list order.
fn true_conditions(status: &JobStatus) -> Vec<&str> {
    status
        .conditions
        .iter()
        .filter(|c| c.status == "True")
        .map(|c| c.type_.as_str())
        .collect()
}

fn last_condition(status: &JobStatus) -> &crate::api::JobCondition {
    status.conditions.last().unwrap()
}

fn dist_mnist() -> TFJob {
    job(&[("Worker", 4, None), ("PS", 2, None)])
}

/// `job` with the status of a previous pass (Created already recorded).
fn after_first_pass(job: &TFJob) -> TFJob {
    let first = run(job, &[], &[]);
    let mut job = job.clone();
    job.status = Some(first.status);
    job
}

fn pods_of(job: &TFJob, specs: &[(&str, i32, &str, Option<i32>)]) -> Vec<Pod> {
    specs
        .iter()
        .map(|(rtype, index, phase, exit)| pod(job, rtype, *index, phase, *exit))
        .collect()
}

// --- Creation, naming, labels, ownership ---------------------------------

#[test]
fn a_1_worker_job_creates_exactly_1_pod_and_1_service() {
    let plan = run(&job(&[("Worker", 1, None)]), &[], &[]);
    assert_eq!(created_pods(&plan), ["test-tfjob-worker-0"]);
    assert_eq!(created_services(&plan), ["test-tfjob-worker-0"]);
}

#[test]
fn a_4_worker_2_ps_job_creates_6_pods_and_6_services() {
    let plan = run(&dist_mnist(), &[], &[]);
    assert_eq!(
        created_pods(&plan),
        [
            "test-tfjob-ps-0",
            "test-tfjob-ps-1",
            "test-tfjob-worker-0",
            "test-tfjob-worker-1",
            "test-tfjob-worker-2",
            "test-tfjob-worker-3"
        ]
    );
    assert_eq!(created_services(&plan).len(), 6);
}

#[test]
fn the_first_pass_records_created_with_upstream_reason_and_message() {
    let plan = run(&dist_mnist(), &[], &[]);
    assert!(plan.status_changed);
    let created = &plan.status.conditions[0];
    assert_eq!(created.type_, "Created");
    assert_eq!(created.reason.as_deref(), Some("TFJobCreated"));
    assert_eq!(
        created.message.as_deref(),
        Some("TFJob test-tfjob is created.")
    );
    assert_eq!(plan.status.start_time, Some(Time(now())));
    assert_eq!(plan.status.observed_generation, Some(1));
}

#[test]
fn when_all_6_pods_pending_and_all_6_services_exist_nothing_is_created_and_no_condition_is_added() {
    let job = after_first_pass(&dist_mnist());
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Pending", None),
            ("Worker", 1, "Pending", None),
            ("Worker", 2, "Pending", None),
            ("Worker", 3, "Pending", None),
            ("PS", 0, "Pending", None),
            ("PS", 1, "Pending", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert_eq!(plan.actions, []);
    assert_eq!(
        plan.status.conditions,
        job.status.as_ref().unwrap().conditions
    );
    assert!(!plan.status_changed);
}

#[test]
fn with_2_of_4_workers_and_1_of_2_ps_pending_exactly_3_pods_and_3_services_are_created() {
    let job = dist_mnist();
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Pending", None),
            ("Worker", 1, "Pending", None),
            ("PS", 0, "Pending", None),
        ],
    );
    let services = vec![
        service(&job, "Worker", 0),
        service(&job, "Worker", 1),
        service(&job, "PS", 0),
    ];
    let plan = run(&job, &pods, &services);
    assert_eq!(
        created_pods(&plan),
        [
            "test-tfjob-ps-1",
            "test-tfjob-worker-2",
            "test-tfjob-worker-3"
        ]
    );
    assert_eq!(
        created_services(&plan),
        [
            "test-tfjob-ps-1",
            "test-tfjob-worker-2",
            "test-tfjob-worker-3"
        ]
    );
}

#[test]
fn pod_names_of_a_job_are_exactly_the_set_of_job_type_index_for_all_declared_types() {
    let job = job(&[
        ("Chief", 1, None),
        ("evaluator", 1, None),
        ("ps", 2, None),
        ("WORKER", 3, None),
    ]);
    let mut names = created_pods(&run(&job, &[], &[]));
    names.sort();
    assert_eq!(
        names,
        [
            "test-tfjob-chief-0",
            "test-tfjob-evaluator-0",
            "test-tfjob-ps-0",
            "test-tfjob-ps-1",
            "test-tfjob-worker-0",
            "test-tfjob-worker-1",
            "test-tfjob-worker-2"
        ]
    );
}

#[test]
fn job_scaled_to_2_workers_while_pods_0_1_2_exist_deletes_exactly_the_index_2_worker_pod() {
    let job = job(&[("Worker", 2, None)]);
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Running", None),
            ("Worker", 2, "Running", None),
        ],
    );
    let mut services = all_services(&job);
    services.push(service(&job, "Worker", 2));
    let plan = run(&job, &pods, &services);
    assert_eq!(deleted_pods(&plan), ["test-tfjob-worker-2"]);
    assert!(plan.actions.contains(&ChildAction::DeleteService {
        name: "test-tfjob-worker-2".into(),
        uid: Some("svc-worker-2".into())
    }));
    assert_eq!(created_pods(&plan), Vec::<String>::new());
}

#[test]
fn job_scaled_to_3_workers_while_only_worker_0_exists_creates_worker_1_and_worker_2_in_that_order()
{
    let job = job(&[("Worker", 3, None)]);
    let pods = pods_of(&job, &[("Worker", 0, "Running", None)]);
    let plan = run(&job, &pods, &[]);
    assert_eq!(
        created_pods(&plan),
        ["test-tfjob-worker-1", "test-tfjob-worker-2"]
    );
}

#[test]
fn an_orphan_pod_with_the_job_labels_is_adopted_and_a_pod_of_another_controller_is_left_alone() {
    let job = job(&[("Worker", 2, None)]);
    let mut orphan = pod(&job, "Worker", 0, "Running", None);
    orphan.metadata.owner_references = None;
    let mut foreign = pod(&job, "Worker", 1, "Running", None);
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
    let plan = run(&job, &[orphan, foreign], &all_services(&job));
    assert!(plan.actions.iter().any(|a| matches!(a,
        ChildAction::SetPodOwners { name, owners, .. }
            if name == "test-tfjob-worker-0" && owners.len() == 1 && owners[0].uid == "uid-1")));
    assert_eq!(
        created_pods(&plan),
        ["test-tfjob-worker-1"],
        "the foreign pod does not fill slot 1 (its create will report AlreadyExists)"
    );
}

#[test]
fn an_owned_pod_whose_labels_no_longer_match_is_released() {
    let job = job(&[("Worker", 1, None)]);
    let mut relabelled = pod(&job, "Worker", 0, "Running", None);
    relabelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("job-name".into(), "other".into());
    let plan = run(&job, &[relabelled], &all_services(&job));
    assert!(plan.actions.iter().any(|a| matches!(a,
        ChildAction::SetPodOwners { name, owners, .. }
            if name == "test-tfjob-worker-0" && owners.is_empty())));
}

// --- Restart policy and exit codes ------------------------------------------

#[test]
fn a_worker_pod_with_exit_code_policy_phase_failed_and_exit_code_130_is_deleted_to_be_recreated() {
    let job = after_first_pass(&job(&[
        ("Worker", 2, Some(RestartPolicy::ExitCode)),
        ("PS", 1, None),
    ]));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Failed", Some(130)),
            ("Worker", 1, "Running", None),
            ("PS", 0, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert_eq!(deleted_pods(&plan), ["test-tfjob-worker-0"]);
    assert_eq!(plan.status.replica_statuses["Worker"].failed, 0);
}

#[test]
fn a_failed_exit_code_pod_with_a_retryable_code_produces_restarting_not_failed() {
    // "Chief is failed and restarting".
    let job = after_first_pass(&job(&[
        ("Chief", 1, Some(RestartPolicy::ExitCode)),
        ("Worker", 1, None),
    ]));
    let pods = pods_of(
        &job,
        &[
            ("Chief", 0, "Failed", Some(137)),
            ("Worker", 0, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    let last = last_condition(&plan.status);
    assert_eq!(last.type_, "Restarting");
    assert_eq!(last.reason.as_deref(), Some("TFJobRestarting"));
    assert_eq!(
        last.message.as_deref(),
        Some("job test-tfjob is restarting because Chief replica(s) failed.")
    );
    assert!(!true_conditions(&plan.status).contains(&"Failed"));
    assert!(
        plan.events
            .iter()
            .any(|e| e.reason == "TFJobRestarting" && e.type_ == EventType::Warning)
    );
}

#[test]
fn a_failed_exit_code_pod_with_a_permanent_code_sets_the_job_failed() {
    let job = after_first_pass(&with_clean_pod_policy(
        job(&[("Worker", 2, Some(RestartPolicy::ExitCode))]),
        CleanPodPolicy::Running,
    ));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Failed", Some(1)),
            ("Worker", 1, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert_eq!(last_condition(&plan.status).type_, "Failed");
    // The failed pod is not restarted; in the same pass cleanPodPolicy
    // Running removes the still-running worker.
    assert_eq!(deleted_pods(&plan), ["test-tfjob-worker-1"]);
}

#[test]
fn a_retryable_restart_elsewhere_never_masks_a_permanent_failure() {
    let job = after_first_pass(&job(&[
        ("Worker", 1, Some(RestartPolicy::ExitCode)),
        ("PS", 1, None),
    ]));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Failed", Some(137)),
            ("PS", 0, "Failed", Some(1)),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    assert!(true_conditions(&plan.status).contains(&"Failed"));
}

#[test]
fn each_terminated_tensorflow_container_yields_one_exited_with_code_event_key() {
    let job = after_first_pass(&job(&[("Worker", 2, None)]));
    let pods = pods_of(
        &job,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("Worker", 1, "Running", None),
        ],
    );
    let plan = run(&job, &pods, &all_services(&job));
    let exits: Vec<&PlannedEvent> = plan
        .events
        .iter()
        .filter(|e| e.reason == "ExitedWithCode")
        .collect();
    assert_eq!(exits.len(), 1);
    assert_eq!(
        exits[0].message,
        "Pod: default.test-tfjob-worker-0 exited with code 0"
    );
    assert!(exits[0].dedup_key.is_some());
}

// --- Status -------------------------------------------------------------------

fn status_for(job: &TFJob, specs: &[(&str, i32, &str, Option<i32>)]) -> JobStatus {
    let job = after_first_pass(job);
    let pods = pods_of(&job, specs);
    run(&job, &pods, &all_services(&job)).status
}

#[test]
fn all_4_workers_and_2_ps_running_gives_running_start_time_and_active_counts() {
    let status = status_for(
        &dist_mnist(),
        &[
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Running", None),
            ("Worker", 2, "Running", None),
            ("Worker", 3, "Running", None),
            ("PS", 0, "Running", None),
            ("PS", 1, "Running", None),
        ],
    );
    let running = last_condition(&status);
    assert_eq!(running.type_, "Running");
    assert_eq!(running.reason.as_deref(), Some("TFJobRunning"));
    assert_eq!(
        running.message.as_deref(),
        Some("TFJob default/test-tfjob is running.")
    );
    assert!(status.start_time.is_some());
    assert_eq!(status.replica_statuses["Worker"].active, 4);
    assert_eq!(status.replica_statuses["PS"].active, 2);
    assert_eq!(
        status.replica_statuses["Worker"].selector.as_deref(),
        Some("group-name=kubeflow.org,job-name=test-tfjob,replica-type=worker")
    );
}

#[test]
fn one_of_4_workers_running_gives_running() {
    let status = status_for(
        &dist_mnist(),
        &[
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Pending", None),
            ("Worker", 2, "Pending", None),
            ("Worker", 3, "Pending", None),
        ],
    );
    assert_eq!(true_conditions(&status), ["Created", "Running"]);
}

#[test]
fn one_worker_succeeded_with_others_pending_and_no_worker_0_success_gives_no_running_or_succeeded()
{
    let status = status_for(
        &dist_mnist(),
        &[
            ("Worker", 0, "Pending", None),
            ("Worker", 1, "Succeeded", Some(0)),
            ("Worker", 2, "Pending", None),
            ("Worker", 3, "Pending", None),
        ],
    );
    assert_eq!(true_conditions(&status), ["Created"]);
}

#[test]
fn all_workers_and_ps_succeeded_gives_succeeded() {
    let status = status_for(
        &dist_mnist(),
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("Worker", 1, "Succeeded", Some(0)),
            ("Worker", 2, "Succeeded", Some(0)),
            ("Worker", 3, "Succeeded", Some(0)),
            ("PS", 0, "Succeeded", Some(0)),
            ("PS", 1, "Succeeded", Some(0)),
        ],
    );
    let last = last_condition(&status);
    assert_eq!(last.type_, "Succeeded");
    assert_eq!(last.reason.as_deref(), Some("TFJobSucceeded"));
    assert_eq!(
        last.message.as_deref(),
        Some("TFJob default/test-tfjob successfully completed.")
    );
    assert_eq!(status.completion_time, Some(Time(now())));
}

#[test]
fn chief_succeeded_gives_succeeded_chief_running_gives_running_chief_failed_gives_failed() {
    let job = job(&[("Chief", 1, None), ("Worker", 2, None)]);
    let last = |phase: &str, exit| {
        last_condition(&status_for(&job, &[("Chief", 0, phase, exit)]))
            .type_
            .clone()
    };
    assert_eq!(last("Succeeded", Some(0)), "Succeeded");
    assert_eq!(last("Running", None), "Running");
    assert_eq!(last("Failed", Some(1)), "Failed");
}

#[test]
fn no_chief_the_single_worker_failed_gives_failed_succeeded_gives_succeeded_running_gives_running()
{
    let job = job(&[("Worker", 1, None)]);
    let last = |phase: &str, exit| {
        last_condition(&status_for(&job, &[("Worker", 0, phase, exit)])).clone()
    };
    let failed = last("Failed", Some(1));
    assert_eq!(failed.type_, "Failed");
    assert_eq!(failed.reason.as_deref(), Some("TFJobFailed"));
    assert_eq!(
        failed.message.as_deref(),
        Some("TFJob default/test-tfjob has failed because 1 Worker replica(s) failed.")
    );
    assert_eq!(last("Succeeded", Some(0)).type_, "Succeeded");
    assert_eq!(last("Running", None).type_, "Running");
}

#[test]
fn no_chief_2_of_4_succeeded_and_2_active_running_2_running_2_failed_failed_2_succeeded_2_failed_failed()
 {
    let job = job(&[("Worker", 4, None)]);
    // Worker 0 is not among the succeeded ones, so it cannot complete the job.
    let two_two = status_for(
        &job,
        &[
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Running", None),
            ("Worker", 2, "Succeeded", Some(0)),
            ("Worker", 3, "Succeeded", Some(0)),
        ],
    );
    assert_eq!(last_condition(&two_two).type_, "Running");
    let running_failed = status_for(
        &job,
        &[
            ("Worker", 0, "Running", None),
            ("Worker", 1, "Running", None),
            ("Worker", 2, "Failed", Some(1)),
            ("Worker", 3, "Failed", Some(1)),
        ],
    );
    assert_eq!(last_condition(&running_failed).type_, "Failed");
    let succeeded_failed = status_for(
        &job,
        &[
            ("Worker", 0, "Failed", Some(1)),
            ("Worker", 1, "Failed", Some(1)),
            ("Worker", 2, "Succeeded", Some(0)),
            ("Worker", 3, "Succeeded", Some(0)),
        ],
    );
    assert_eq!(last_condition(&succeeded_failed).type_, "Failed");
}

fn worker0_done_three_active(policy: Option<&str>) -> JobStatus {
    let mut job = job(&[("Worker", 4, None)]);
    job.spec.success_policy = policy.map(str::to_string);
    status_for(
        &job,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("Worker", 1, "Running", None),
            ("Worker", 2, "Running", None),
            ("Worker", 3, "Running", None),
        ],
    )
}

#[test]
fn no_chief_worker_0_succeeded_with_exit_0_and_3_workers_active_gives_succeeded() {
    assert_eq!(
        last_condition(&worker0_done_three_active(None)).type_,
        "Succeeded"
    );
}

#[test]
fn with_all_workers_policy_worker_0_done_and_3_active_is_running_all_4_done_succeeded_and_a_failure_fails()
 {
    assert_eq!(
        last_condition(&worker0_done_three_active(Some("AllWorkers"))).type_,
        "Running"
    );
    let mut job = job(&[("Worker", 4, None)]);
    job.spec.success_policy = Some("AllWorkers".into());
    let all = status_for(
        &job,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("Worker", 1, "Succeeded", Some(0)),
            ("Worker", 2, "Succeeded", Some(0)),
            ("Worker", 3, "Succeeded", Some(0)),
        ],
    );
    assert_eq!(last_condition(&all).type_, "Succeeded");
    let one_failed = status_for(
        &job,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("Worker", 1, "Running", None),
            ("Worker", 2, "Running", None),
            ("Worker", 3, "Failed", Some(1)),
        ],
    );
    assert_eq!(last_condition(&one_failed).type_, "Failed");
}

#[test]
fn chief_running_with_workers_succeeded_is_running_a_failed_ps_fails_chief_failed_fails_chief_succeeded_with_workers_failed_fails_in_one_pass()
 {
    let job = job(&[("Chief", 1, None), ("Worker", 2, None), ("PS", 1, None)]);
    let workers_done = [
        ("Worker", 0, "Succeeded", Some(0)),
        ("Worker", 1, "Succeeded", Some(0)),
    ];
    let with = |extra: &[(&'static str, i32, &'static str, Option<i32>)]| {
        let mut all: Vec<(&str, i32, &str, Option<i32>)> = workers_done.to_vec();
        all.extend_from_slice(extra);
        status_for(&job, &all)
    };
    assert_eq!(
        last_condition(&with(&[
            ("Chief", 0, "Running", None),
            ("PS", 0, "Running", None)
        ]))
        .type_,
        "Running"
    );
    assert_eq!(
        last_condition(&with(&[
            ("Chief", 0, "Running", None),
            ("PS", 0, "Failed", Some(1))
        ]))
        .type_,
        "Failed"
    );
    assert_eq!(
        last_condition(&with(&[("Chief", 0, "Failed", Some(1))])).type_,
        "Failed"
    );
    let failed_workers = status_for(
        &job,
        &[
            ("Chief", 0, "Succeeded", Some(0)),
            ("Worker", 0, "Failed", Some(1)),
            ("Worker", 1, "Failed", Some(1)),
        ],
    );
    // Decided in one pass, failure wins (upstream appended both, Failed
    // last, so its State column showed Failed too).
    assert_eq!(true_conditions(&failed_workers), ["Created", "Failed"]);
    // Once Succeeded is recorded, a later worker failure changes nothing.
    let succeeded = status_for(&job, &[("Chief", 0, "Succeeded", Some(0))]);
    let mut done = job.clone();
    done.status = Some(succeeded);
    let later = run(
        &done,
        &pods_of(
            &done,
            &[
                ("Chief", 0, "Succeeded", Some(0)),
                ("Worker", 0, "Failed", Some(1)),
            ],
        ),
        &all_services(&done),
    );
    assert_eq!(true_conditions(&later.status), ["Created", "Succeeded"]);
}

#[test]
fn worker0_completed_is_true_for_a_single_succeeded_worker_master_or_chief_only_jobs_and_worker_0_done_worker_1_failed()
 {
    let single = status_for(
        &job(&[("Worker", 1, None)]),
        &[("Worker", 0, "Succeeded", Some(0))],
    );
    assert!(true_conditions(&single).contains(&"Succeeded"));
    for key in ["Master", "Chief"] {
        let only = status_for(&job(&[(key, 1, None)]), &[(key, 0, "Succeeded", Some(0))]);
        assert!(true_conditions(&only).contains(&"Succeeded"), "{key}");
    }
    let two = status_for(
        &job(&[("Worker", 2, None)]),
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("Worker", 1, "Failed", Some(1)),
        ],
    );
    // Worker 0 counts as completed (its index is on record), but decided
    // in one pass the failure of worker 1 wins.
    assert_eq!(
        two.replica_statuses["Worker"].succeeded_indexes.as_deref(),
        Some("0")
    );
    assert_eq!(true_conditions(&two), ["Created", "Failed"]);
}

#[test]
fn worker0_completed_is_false_for_a_running_worker_0_and_for_worker_0_failed_with_worker_1_running()
{
    let running = status_for(
        &job(&[("Worker", 2, None)]),
        &[("Worker", 0, "Running", None)],
    );
    assert!(!true_conditions(&running).contains(&"Succeeded"));
    let failed = status_for(
        &job(&[("Worker", 2, None)]),
        &[
            ("Worker", 0, "Failed", Some(1)),
            ("Worker", 1, "Running", None),
        ],
    );
    assert!(!true_conditions(&failed).contains(&"Succeeded"));
}

#[test]
fn a_ps_only_job_never_succeeds() {
    let status = status_for(
        &job(&[("PS", 2, None)]),
        &[
            ("PS", 0, "Succeeded", Some(0)),
            ("PS", 1, "Succeeded", Some(0)),
        ],
    );
    assert!(!true_conditions(&status).contains(&"Succeeded"));
}

#[test]
fn a_finished_job_creates_nothing_and_with_policy_running_deletes_running_and_pending_pods_only() {
    let job = with_clean_pod_policy(
        job(&[("Worker", 2, None), ("PS", 2, None)]),
        CleanPodPolicy::Running,
    );
    let finished = {
        let pods = pods_of(
            &job,
            &[
                ("Worker", 0, "Succeeded", Some(0)),
                ("Worker", 1, "Succeeded", Some(0)),
                ("PS", 0, "Running", None),
                ("PS", 1, "Running", None),
            ],
        );
        let mut job = after_first_pass(&job);
        job.status = Some(run(&job, &pods, &all_services(&job)).status);
        job
    };
    assert!(true_conditions(finished.status.as_ref().unwrap()).contains(&"Succeeded"));
    // PS 1 has vanished: it must not come back.
    let pods = pods_of(
        &finished,
        &[
            ("Worker", 0, "Succeeded", Some(0)),
            ("Worker", 1, "Succeeded", Some(0)),
            ("PS", 0, "Running", None),
        ],
    );
    let plan = run(&finished, &pods, &all_services(&finished));
    assert_eq!(created_pods(&plan), Vec::<String>::new());
    assert_eq!(deleted_pods(&plan), ["test-tfjob-ps-0"]);
    assert!(plan.actions.contains(&ChildAction::DeleteService {
        name: "test-tfjob-ps-0".into(),
        uid: Some("svc-ps-0".into())
    }));
    assert_eq!(plan.status.replica_statuses["PS"].active, 0);
    assert_eq!(plan.status.replica_statuses["PS"].succeeded, 2);
}

#[test]
fn a_success_emits_one_tfjob_succeeded_event_and_the_next_pass_none() {
    let job = after_first_pass(&job(&[("Worker", 1, None)]));
    let pods = pods_of(&job, &[("Worker", 0, "Succeeded", Some(0))]);
    let first = run(&job, &pods, &all_services(&job));
    assert_eq!(
        first
            .events
            .iter()
            .filter(|e| e.reason == "TFJobSucceeded")
            .count(),
        1
    );
    let mut job = job.clone();
    job.status = Some(first.status);
    let second = run(&job, &pods, &all_services(&job));
    assert!(second.events.iter().all(|e| e.reason != "TFJobSucceeded"));
    assert!(!second.status_changed);
}

// --- Defaults and validation (through the planner) ----------------------------

#[test]
fn a_job_without_tf_replica_specs_ends_failed_with_invalid_spec_reason_and_no_pods() {
    let mut object = object(&job(&[("Worker", 1, None)]));
    object.spec = serde_json::json!({"notTheActualField": {"Worker": {"replicas": 1}}});
    let plan = plan(&object, &[], &[], now(), &PlanConfig::default());
    assert_eq!(plan.actions, []);
    let last = last_condition(&plan.status);
    assert_eq!(last.type_, "Failed");
    assert_eq!(last.reason.as_deref(), Some("InvalidTFJobSpec"));
    assert!(
        last.message
            .as_deref()
            .unwrap()
            .contains("the spec is invalid")
    );
    assert_eq!(plan.events.len(), 1);
    assert_eq!(plan.events[0].reason, "InvalidTFJobSpec");
    assert_eq!(plan.events[0].type_, EventType::Warning);
}

#[test]
fn an_undecodable_spec_is_marked_failed_with_the_decoding_problem() {
    let mut object = object(&job(&[("Worker", 1, None)]));
    object.spec = serde_json::json!({"tfReplicaSpecs": {"Worker": {"template": {"spec": {"containers": "nope"}}}}});
    let plan = plan(&object, &[], &[], now(), &PlanConfig::default());
    assert_eq!(plan.actions, []);
    let message = last_condition(&plan.status).message.clone().unwrap();
    assert!(
        message.starts_with("Failed to marshal the object to TFJob; the spec is invalid: "),
        "{message}"
    );
    assert!(message.contains("invalid type"), "{message}");
}

#[test]
fn specs_rejected_by_validation_never_create_pods() {
    let both = job(&[("Chief", 1, None), ("Master", 1, None)]);
    let plan = run(&both, &[], &[]);
    assert_eq!(plan.actions, []);
    assert_eq!(
        last_condition(&plan.status).message.as_deref(),
        Some(
            "Failed to marshal the object to TFJob; the spec is invalid: TFJobSpec is not valid: more than 1 chief/master found"
        )
    );
}

#[test]
fn legacy_top_level_fields_raise_one_deprecated_field_warning_per_field_and_generation() {
    let mut job = job(&[("Worker", 1, None)]);
    job.spec.clean_pod_policy = Some(CleanPodPolicy::All);
    let plan = run(&job, &[], &[]);
    let warnings: Vec<&PlannedEvent> = plan
        .events
        .iter()
        .filter(|e| e.reason == "DeprecatedField")
        .collect();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].type_, EventType::Warning);
    assert!(warnings[0].message.contains("spec.cleanPodPolicy"));
    assert_eq!(
        warnings[0].dedup_key.as_deref(),
        Some("uid-1/deprecated/spec.cleanPodPolicy/1")
    );
}

#[test]
fn a_job_being_deleted_is_left_to_the_garbage_collector() {
    let mut job = job(&[("Worker", 1, None)]);
    job.metadata.deletion_timestamp = Some(Time(now()));
    let plan = run(&job, &[], &[]);
    assert_eq!(plan.actions, []);
    assert!(!plan.status_changed);
}

/// Issue 16: restart, backoff, deadline, TTL, cleanup, suspend, managedBy.
mod policies;
