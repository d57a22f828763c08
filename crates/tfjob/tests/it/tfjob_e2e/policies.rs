//! The end-to-end scenarios of issue 16 item 7 (restart policies, backoff,
//! deadline, TTL, cleanup, suspend), on both lanes. Containers end by the
//! `kube-sim.gpufleet.dev/*` pod annotations, which kube-sim's kubelet and
//! the real lane's KWOK stages honour alike.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use tfjob::api::TFJobObject;

use crate::support::*;

fn failures(status: &tfjob::api::JobStatus) -> i32 {
    status.backoff.as_ref().map_or(0, |b| b.failures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_code_137_restarts_the_replica_and_the_job_still_succeeds() {
    let cluster = test_cluster("exit-137").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "retry",
        json!({"tfReplicaSpecs": {"Worker": replica_with(1, Some("1"), 137, "ExitCode")}}),
    )
    .await;
    let restarting = wait_for_condition(&cluster, "retry", "Restarting").await;
    // Not the last condition: the re-created pod may already have made the
    // job Running again by the time the status is read.
    let last = restarting
        .conditions
        .iter()
        .find(|c| c.type_ == "Restarting")
        .unwrap();
    assert_eq!(last.reason.as_deref(), Some("TFJobRestarting"));
    assert_eq!(
        last.message.as_deref(),
        Some("job retry is restarting because Worker replica(s) failed.")
    );
    // What killed the container is gone (say, the OOM was fixed): the
    // re-created pod, made from the current template, exits 0.
    patch_spec(
        &cluster,
        "retry",
        json!({"tfReplicaSpecs": {"Worker": {"template": {"metadata": {"annotations": {
            "kube-sim.gpufleet.dev/exit-code": "0"}}}}}}),
    )
    .await;
    let status = wait_for_condition(&cluster, "retry", "Succeeded").await;
    assert!(!true_types(&status).contains(&"Failed".to_string()));
    assert!(failures(&status) >= 1, "the 137 was counted");
    assert!(
        reported_children(&cluster, "SuccessfulCreatePod")
            .await
            .len()
            >= 2
    );
    assert!(event_count(&cluster, "TFJobRestarting").await >= 1);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_1_under_exit_code_fails_the_job_with_the_upstream_reason_and_no_retry() {
    let cluster = test_cluster("exit-1").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "fatal",
        json!({"tfReplicaSpecs": {"Worker": replica_with(1, Some("1"), 1, "ExitCode")}}),
    )
    .await;
    let status = wait_for_condition(&cluster, "fatal", "Failed").await;
    let last = status.conditions.last().unwrap();
    assert_eq!(last.reason.as_deref(), Some("TFJobFailed"));
    assert_eq!(
        last.message.as_deref(),
        Some(r#"job "fatal" is failing because "Worker" replica(s) failed."#)
    );
    assert_eq!(status.replica_statuses["Worker"].failed, 1);
    assert_eq!(
        reported_children(&cluster, "SuccessfulCreatePod")
            .await
            .len(),
        1
    );
    assert_eq!(
        pod_phase(&cluster, "fatal-worker-0").await.as_deref(),
        Some("Failed"),
        "kept: cleanPodPolicy Running deletes only running pods"
    );
    // Counted once, under the legacy and the training-operator name (right
    // after the status write that the test saw).
    let ns = &cluster.namespace;
    let legacy = format!("tf_operator_jobs_failed_total{{job_namespace=\"{ns}\"}}");
    let current = format!(
        "training_operator_jobs_failed_total{{job_namespace=\"{ns}\",framework=\"tensorflow\"}}"
    );
    eventually("the failure is counted", || async {
        operator.metric(&legacy) == Some(1.0) && operator.metric(&current) == Some(1.0)
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(operator.metric(&legacy), Some(1.0), "once");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_limit_2_fails_the_job_after_exactly_3_counted_failures() {
    let cluster = test_cluster("backoff").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "flaky",
        json!({
            "runPolicy": {"backoffLimit": 2, "cleanPodPolicy": "None"},
            "tfReplicaSpecs": {"Worker": replica_with(1, Some("1"), 137, "ExitCode")},
        }),
    )
    .await;
    let status = wait_for_condition(&cluster, "flaky", "Failed").await;
    let last = status.conditions.last().unwrap();
    assert_eq!(last.reason.as_deref(), Some("TFJobFailed"));
    assert_eq!(
        last.message.as_deref(),
        Some("Job flaky has failed because it has reached the specified backoff limit")
    );
    assert_eq!(failures(&status), 3);
    // The first pod and two re-creations, nothing after the third failure.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        reported_children(&cluster, "SuccessfulCreatePod")
            .await
            .len(),
        3
    );
    assert_eq!(job_pods(&cluster, "flaky").await.len(), 1);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_of_5_seconds_fails_a_hanging_job_within_6_seconds() {
    let cluster = test_cluster("deadline").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "hang",
        json!({
            "runPolicy": {"activeDeadlineSeconds": 5},
            "tfReplicaSpecs": {"Worker": replica(1, None, 0)},
        }),
    )
    .await;
    wait_for_condition(&cluster, "hang", "Running").await;
    let status = wait_for_condition(&cluster, "hang", "Failed").await;
    let last = status.conditions.last().unwrap();
    assert_eq!(last.reason.as_deref(), Some("TFJobFailed"));
    assert_eq!(
        last.message.as_deref(),
        Some("Job hang has failed because it was active longer than specified deadline")
    );
    // Whole seconds on the wire: the failure is recorded 5 or 6 s after the
    // start, by the wake-up at the deadline, not by a later event.
    let start = status.start_time.unwrap().0;
    let end = status.completion_time.unwrap().0;
    let active = end.duration_since(start).as_secs();
    assert!((5..=6).contains(&active), "failed after {active} s");
    // The default cleanPodPolicy None holds for a job failed by its
    // deadline too (README: differences from upstream): the pod is kept.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        pod_phase(&cluster, "hang-worker-0").await.as_deref(),
        Some("Running")
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_deletes_a_finished_job_with_its_children_and_costs_no_reconcile_while_waiting() {
    let cluster = test_cluster("ttl").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "short",
        json!({
            "runPolicy": {"ttlSecondsAfterFinished": 5, "cleanPodPolicy": "None"},
            "tfReplicaSpecs": {"Worker": replica(1, Some("1"), 0)},
        }),
    )
    .await;
    wait_for_condition(&cluster, "short", "Succeeded").await;
    eventually("the pod and service exist", || async {
        job_pods(&cluster, "short").await.len() == 1
            && job_services(&cluster, "short").await.len() == 1
    })
    .await;
    // Upstream re-queued a finished job every few milliseconds until its
    // TTL (#965); here nothing happens until the one wake-up at expiry.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = operator.reconciles();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(operator.reconciles(), before, "no pass while the TTL runs");
    eventually("the TFJob is deleted", || async {
        jobs(&cluster).get_opt("short").await.unwrap().is_none()
    })
    .await;
    eventually("its pod and service are collected", || async {
        job_pods(&cluster, "short").await.is_empty()
            && job_services(&cluster, "short").await.is_empty()
    })
    .await;
    assert_eq!(event_count(&cluster, "SuccessfulDeleteJob").await, 1);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_clean_pod_policy_leaves_exactly_the_pods_it_should() {
    // Chief and worker finish (the worker first, so it is not running when the
    // chief's success ends the job), the PS would run forever.
    let cluster = test_cluster("cleanup").await;
    let operator = start_operator(&cluster).await;
    for policy in ["All", "Running", "None"] {
        create_job(
            &cluster,
            &format!("clean-{}", policy.to_lowercase()),
            json!({
                "runPolicy": {"cleanPodPolicy": policy},
                "tfReplicaSpecs": {
                    "Chief": replica(1, Some("3"), 0),
                    "PS": replica(1, None, 0),
                    "Worker": replica(1, Some("1"), 0),
                },
            }),
        )
        .await;
    }
    for policy in ["all", "running", "none"] {
        wait_for_condition(&cluster, &format!("clean-{policy}"), "Succeeded").await;
    }
    let names = |job: &str| {
        let cluster = &cluster;
        let job = job.to_string();
        async move {
            job_pods(cluster, &job)
                .await
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
        }
    };
    eventually("All deletes every pod", || async {
        names("clean-all").await.is_empty()
    })
    .await;
    eventually("Running deletes the running PS only", || async {
        names("clean-running").await == ["clean-running-chief-0", "clean-running-worker-0"]
    })
    .await;
    for pod in ["clean-running-chief-0", "clean-running-worker-0"] {
        assert_eq!(pod_phase(&cluster, pod).await.as_deref(), Some("Succeeded"));
    }
    assert_eq!(
        names("clean-none").await,
        [
            "clean-none-chief-0",
            "clean-none-ps-0",
            "clean-none-worker-0"
        ]
    );
    assert_eq!(
        pod_phase(&cluster, "clean-none-ps-0").await.as_deref(),
        Some("Running")
    );
    assert_eq!(job_services(&cluster, "clean-all").await, []);
    assert_eq!(job_services(&cluster, "clean-none").await.len(), 3);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_clean_pod_policy_workers_still_running_when_the_chief_succeeds_keep_their_pods()
{
    // training-operator v1.9 defaults cleanPodPolicy to None: the job ends
    // with the chief, and the workers and the PS that still run keep their
    // pods (their logs) and Services.
    let cluster = test_cluster("default-clean").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "keep",
        json!({"tfReplicaSpecs": {
            "Chief": replica(1, Some("2"), 0),
            "PS": replica(1, None, 0),
            "Worker": replica(2, None, 0),
        }}),
    )
    .await;
    wait_for_condition(&cluster, "keep", "Succeeded").await;
    // Long enough for a clean-up pass to have deleted them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let names = |children: Vec<(String, String)>| -> Vec<String> {
        children.into_iter().map(|(name, _)| name).collect()
    };
    let all = [
        "keep-chief-0",
        "keep-ps-0",
        "keep-worker-0",
        "keep-worker-1",
    ];
    assert_eq!(names(job_pods(&cluster, "keep").await), all);
    assert_eq!(names(job_services(&cluster, "keep").await), all);
    for pod in ["keep-ps-0", "keep-worker-0", "keep-worker-1"] {
        assert_eq!(pod_phase(&cluster, pod).await.as_deref(), Some("Running"));
    }
    assert_eq!(
        reported_children(&cluster, "SuccessfulDeletePod")
            .await
            .len(),
        0
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_jobs_running_parameter_servers_and_their_services_go_in_one_request_each() {
    // Three PS that would run forever; the chief's success ends the job
    // and cleanPodPolicy Running deletes them: one DeleteCollection for the
    // pods and one for their Services, each child still reported by its
    // own event.
    let cluster = test_cluster("collect").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "batch",
        json!({
            "runPolicy": {"cleanPodPolicy": "Running"},
            "tfReplicaSpecs": {
                "Chief": replica(1, Some("2"), 0),
                "PS": replica(3, None, 0),
            },
        }),
    )
    .await;
    wait_for_condition(&cluster, "batch", "Succeeded").await;
    let ps = ["batch-ps-0", "batch-ps-1", "batch-ps-2"];
    eventually(
        "the parameter servers and their Services are gone",
        || async {
            let pods: Vec<String> = job_pods(&cluster, "batch")
                .await
                .into_iter()
                .map(|(name, _)| name)
                .collect();
            let services: Vec<String> = job_services(&cluster, "batch")
                .await
                .into_iter()
                .map(|(name, _)| name)
                .collect();
            pods == ["batch-chief-0"] && services == ["batch-chief-0"]
        },
    )
    .await;
    assert_eq!(
        pod_phase(&cluster, "batch-chief-0").await.as_deref(),
        Some("Succeeded")
    );
    eventually("a deletion reported for each child", || async {
        let counts = (
            reported_children(&cluster, "SuccessfulDeletePod")
                .await
                .len(),
            reported_children(&cluster, "SuccessfulDeleteService")
                .await
                .len(),
        );
        counts == (3, 3)
    })
    .await;
    // One DeleteCollection, one Event naming the three deleted pods.
    let mut deleted = reported_children(&cluster, "SuccessfulDeletePod").await;
    deleted.sort();
    let mut expected = ps.to_vec();
    expected.sort();
    assert_eq!(deleted, expected);
    assert_eq!(
        event_notes(&cluster, "SuccessfulDeletePod").await.len(),
        1,
        "one Event for the pass"
    );
    if let Some(sim) = cluster.kube_sim() {
        let requests = |verb: &str, resource: &str| sim.metrics().requests(verb, resource, 200);
        // (DELETEs of pods are counted too, but the simulated kubelet
        // sends them when the terminated pods are removed.)
        assert_eq!(
            [
                requests("deletecollection", "pods"),
                requests("deletecollection", "services"),
                requests("delete", "services"),
            ],
            [1, 1, 0],
            "DeleteCollections of pods and Services, then DELETEs of Services"
        );
    }
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_deletes_running_pods_and_resume_recreates_them_with_the_kueue_queue_label_kept() {
    let cluster = test_cluster("suspend").await;
    let operator = start_operator(&cluster).await;
    // As Kueue submits it: suspended, with its queue's label.
    let job: TFJobObject = serde_json::from_value(json!({
        "metadata": {"name": "queued", "namespace": cluster.namespace,
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {
            "runPolicy": {"suspend": true},
            "tfReplicaSpecs": {"PS": replica(1, None, 0), "Worker": replica(2, None, 0)},
        },
    }))
    .unwrap();
    jobs(&cluster)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
    let suspended = wait_for_condition(&cluster, "queued", "Suspended").await;
    assert_eq!(
        suspended.conditions.last().unwrap().message.as_deref(),
        Some("TFJob queued is suspended.")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(job_pods(&cluster, "queued").await, []);
    assert_eq!(suspended.start_time, None);

    // Admitted.
    patch_spec(&cluster, "queued", json!({"runPolicy": {"suspend": false}})).await;
    wait_for_condition(&cluster, "queued", "Running").await;
    eventually("three pods run", || async {
        job_pods(&cluster, "queued").await.len() == 3
    })
    .await;
    let first_pods = job_pods(&cluster, "queued").await;
    let resumed = status(&cluster, "queued").await;
    let suspended_condition = resumed
        .conditions
        .iter()
        .find(|c| c.type_ == "Suspended")
        .unwrap();
    assert_eq!(suspended_condition.status, "False");
    assert_eq!(suspended_condition.reason.as_deref(), Some("TFJobResumed"));

    // Preempted: suspended again.
    patch_spec(&cluster, "queued", json!({"runPolicy": {"suspend": true}})).await;
    wait_for_condition(&cluster, "queued", "Suspended").await;
    eventually("every pod and service is deleted", || async {
        job_pods(&cluster, "queued").await.is_empty()
            && job_services(&cluster, "queued").await.is_empty()
    })
    .await;
    let paused = status(&cluster, "queued").await;
    assert!(!true_types(&paused).contains(&"Running".to_string()));
    assert!(paused.replica_statuses.values().all(|r| r.active == 0));

    patch_spec(&cluster, "queued", json!({"runPolicy": {"suspend": false}})).await;
    eventually("the pods are back under the same names", || async {
        let pods = job_pods(&cluster, "queued").await;
        pods.len() == 3
            && pods
                .iter()
                .zip(&first_pods)
                .all(|(now, before)| now.0 == before.0 && now.1 != before.1)
    })
    .await;
    wait_for_condition(&cluster, "queued", "Running").await;
    let stored = jobs(&cluster).get("queued").await.unwrap();
    assert_eq!(
        stored.metadata.labels.unwrap()["kueue.x-k8s.io/queue-name"],
        "user-queue"
    );
    assert!(event_count(&cluster, "TFJobSuspended").await >= 2);
    assert!(event_count(&cluster, "TFJobResumed").await >= 2);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_toggled_true_false_true_repeatedly_converges_with_training_operators_conditions() {
    let cluster = test_cluster("toggle").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "toggled",
        json!({"tfReplicaSpecs": {"PS": replica(1, None, 0), "Worker": replica(2, None, 0)}}),
    )
    .await;
    wait_for_condition(&cluster, "toggled", "Running").await;
    // Faster than the operator can finish a pass's deletes or creates.
    for _ in 0..4 {
        patch_spec(&cluster, "toggled", json!({"runPolicy": {"suspend": true}})).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
        patch_spec(
            &cluster,
            "toggled",
            json!({"runPolicy": {"suspend": false}}),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    patch_spec(&cluster, "toggled", json!({"runPolicy": {"suspend": true}})).await;
    eventually("suspended with no pod and no Service", || async {
        let current = status(&cluster, "toggled").await;
        true_types(&current).contains(&"Suspended".to_string())
            && job_pods(&cluster, "toggled").await.is_empty()
            && job_services(&cluster, "toggled").await.is_empty()
    })
    .await;
    let paused = status(&cluster, "toggled").await;
    let triple = |t: &str, s: &str, r: &str| (t.to_string(), s.to_string(), r.to_string());
    assert_eq!(
        condition_triples(&paused),
        [
            triple("Created", "True", "TFJobCreated"),
            triple("Running", "False", "TFJobSuspended"),
            triple("Suspended", "True", "TFJobSuspended"),
        ]
    );
    assert_eq!(
        paused.conditions.last().unwrap().message.as_deref(),
        Some("TFJob toggled is suspended.")
    );
    assert!(paused.replica_statuses.values().all(|r| r.active == 0));
    assert_eq!(
        failures(&paused),
        0,
        "deletes by suspension are no failures"
    );

    patch_spec(
        &cluster,
        "toggled",
        json!({"runPolicy": {"suspend": false}}),
    )
    .await;
    eventually("three pods run again and the job is Running", || async {
        let current = status(&cluster, "toggled").await;
        let pods = job_pods(&cluster, "toggled").await;
        let mut running = 0;
        for (name, _) in &pods {
            if pod_phase(&cluster, name).await.as_deref() == Some("Running") {
                running += 1;
            }
        }
        running == 3 && true_types(&current).contains(&"Running".to_string())
    })
    .await;
    let resumed = status(&cluster, "toggled").await;
    assert_eq!(
        condition_triples(&resumed),
        [
            triple("Created", "True", "TFJobCreated"),
            triple("Suspended", "False", "TFJobResumed"),
            triple("Running", "True", "TFJobRunning"),
        ]
    );
    assert_eq!(failures(&resumed), 0);
    assert_eq!(job_services(&cluster, "toggled").await.len(), 3);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restart_mid_backoff_neither_recounts_nor_rushes_the_re_creation() {
    let cluster = test_cluster("mid-backoff").await;
    let slow = |config: &mut tfjob::run::OperatorConfig| {
        config.plan.backoff.base = Duration::from_secs(3);
    };
    let operator = start_operator_with(&cluster, slow).await;
    create_job(
        &cluster,
        "paced",
        json!({
            "runPolicy": {"backoffLimit": 1, "cleanPodPolicy": "None"},
            "tfReplicaSpecs": {"Worker": replica_with(1, Some("1"), 137, "ExitCode")},
        }),
    )
    .await;
    let restarting = wait_for_condition(&cluster, "paced", "Restarting").await;
    let first_failure = restarting
        .backoff
        .as_ref()
        .and_then(|b| b.last_failure_time.clone())
        .expect("the failure is on record before the pod goes")
        .0;
    assert_eq!(failures(&restarting), 1);
    operator.stop().await;
    let operator = start_operator_with(&cluster, slow).await;

    let status = wait_for_condition(&cluster, "paced", "Failed").await;
    // The same outcome as without the restart: two counted failures
    // (backoffLimit 1), the backoff reason, two pods ever created.
    assert_eq!(failures(&status), 2);
    assert_eq!(
        condition_triples(&status).last().unwrap(),
        &(
            "Failed".to_string(),
            "True".to_string(),
            "TFJobFailed".to_string()
        )
    );
    assert_eq!(
        reported_children(&cluster, "SuccessfulCreatePod")
            .await
            .len(),
        2
    );
    let second: Pod = pods(&cluster).get("paced-worker-0").await.unwrap();
    let created = second.metadata.creation_timestamp.unwrap().0;
    assert!(
        created.duration_since(first_failure).as_secs() >= 3,
        "re-created {created} before the backoff after {first_failure} ended"
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_managed_by_multikueue_is_left_alone_and_one_managed_by_training_operator_runs() {
    let cluster = test_cluster("managed-by").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "elsewhere",
        json!({
            "runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"},
            "tfReplicaSpecs": {"Worker": replica(1, Some("1"), 0)},
        }),
    )
    .await;
    create_job(
        &cluster,
        "here",
        json!({
            "runPolicy": {"managedBy": "kubeflow.org/training-operator"},
            "tfReplicaSpecs": {"Worker": replica(1, Some("1"), 0)},
        }),
    )
    .await;
    // Once "here" is done, the operator has long seen "elsewhere" too.
    wait_for_condition(&cluster, "here", "Succeeded").await;
    // A change to it (as MultiKueue's admission would make) is not acted on
    // either.
    patch_spec(
        &cluster,
        "elsewhere",
        json!({"runPolicy": {"suspend": false}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let untouched = jobs(&cluster).get("elsewhere").await.unwrap();
    assert!(untouched.status.is_null(), "{:?}", untouched.status);
    assert_eq!(job_pods(&cluster, "elsewhere").await, []);
    assert_eq!(job_services(&cluster, "elsewhere").await, []);
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(cluster.client.clone(), &cluster.namespace);
    let about_elsewhere = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("elsewhere"))
        .count();
    assert_eq!(about_elsewhere, 0, "no event about a job managed elsewhere");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_restarts_under_on_failure_count_towards_the_backoff_limit() {
    // The kubelet (kube-sim's, or KWOK's stages) restarts the container in
    // place; each restart is one counted failure of the same pod.
    let cluster = test_cluster("on-failure").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "crashloop",
        json!({
            "runPolicy": {"backoffLimit": 1, "cleanPodPolicy": "None"},
            "tfReplicaSpecs": {"Worker": replica_with(1, Some("1"), 1, "OnFailure")},
        }),
    )
    .await;
    let status = wait_for_condition(&cluster, "crashloop", "Failed").await;
    let last = status.conditions.last().unwrap();
    assert_eq!(last.reason.as_deref(), Some("TFJobFailed"));
    assert_eq!(failures(&status), 2, "two restarts of one pod");
    assert_eq!(
        reported_children(&cluster, "SuccessfulCreatePod")
            .await
            .len(),
        1
    );
    let pod: Pod = pods(&cluster).get("crashloop-worker-0").await.unwrap();
    assert_eq!(
        pod.spec.unwrap().restart_policy.as_deref(),
        Some("OnFailure"),
        "the replica's restartPolicy is copied to the pod, as upstream does"
    );
    operator.stop().await;
}
