//! The end-to-end scenarios of issue 15 (the life of a job, success by
//! chief or workers, recreated and adopted children, invalid specs, legacy
//! fields, operator restarts, no leader election, on a live API server), on
//! both lanes: kube-sim by default, the real control plane with
//! `GPUFLEET_TEST_CLUSTER=real` (one test at a time).

use kube::api::DeleteParams;
use serde_json::json;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dist_mnist_job_with_2_ps_and_4_workers_goes_created_running_succeeded_when_the_workers_exit_0()
 {
    let cluster = test_cluster("dist-mnist").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "dist-mnist",
        json!({"tfReplicaSpecs": {
            "PS": replica(2, None, 0),
            "Worker": replica(4, Some("2"), 0),
        }}),
    )
    .await;

    wait_for_condition(&cluster, "dist-mnist", "Running").await;
    let names: Vec<String> = job_pods(&cluster, "dist-mnist")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "dist-mnist-ps-0",
            "dist-mnist-ps-1",
            "dist-mnist-worker-0",
            "dist-mnist-worker-1",
            "dist-mnist-worker-2",
            "dist-mnist-worker-3"
        ]
    );
    assert_eq!(job_services(&cluster, "dist-mnist").await.len(), 6);
    let worker = pods(&cluster).get("dist-mnist-worker-1").await.unwrap();
    let env = worker.spec.unwrap().containers[0].env.clone().unwrap();
    let tf_config = env.iter().find(|e| e.name == "TF_CONFIG").unwrap();
    let ns = &cluster.namespace;
    let address = |task: &str| format!("\"dist-mnist-{task}.{ns}.svc:2222\"");
    let expected = format!(
        r#"{{"cluster":{{"ps":[{},{}],"worker":[{},{},{},{}]}},"task":{{"type":"worker","index":1}},"environment":"cloud"}}"#,
        address("ps-0"),
        address("ps-1"),
        address("worker-0"),
        address("worker-1"),
        address("worker-2"),
        address("worker-3"),
    );
    assert_eq!(tf_config.value.as_deref(), Some(expected.as_str()));

    let status = wait_for_condition(&cluster, "dist-mnist", "Succeeded").await;
    let types: Vec<(&str, &str)> = status
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("Created", "True"),
            ("Running", "False"),
            ("Succeeded", "True")
        ]
    );
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    // cleanPodPolicy defaults to None (training-operator v1.9): the PS
    // pods keep running, the workers stay.
    for ps in ["dist-mnist-ps-0", "dist-mnist-ps-1"] {
        assert_eq!(pod_phase(&cluster, ps).await.as_deref(), Some("Running"));
    }
    assert_eq!(
        pod_phase(&cluster, "dist-mnist-worker-0").await.as_deref(),
        Some("Succeeded")
    );
    assert_eq!(
        event_count(&cluster, "TFJobSucceeded").await,
        1,
        "one event per transition"
    );
    // The first pass creates all six pods and Services: one Event per
    // kind names them all, in replica order (not six Events, nor a series
    // whose note names only the first pod).
    assert_eq!(
        event_notes(&cluster, "SuccessfulCreatePod").await,
        [
            "Created pods: dist-mnist-ps-0, dist-mnist-ps-1, dist-mnist-worker-0, dist-mnist-worker-1, dist-mnist-worker-2, dist-mnist-worker-3"
        ]
    );
    assert_eq!(
        event_notes(&cluster, "SuccessfulCreateService").await,
        [
            "Created services: dist-mnist-ps-0, dist-mnist-ps-1, dist-mnist-worker-0, dist-mnist-worker-1, dist-mnist-worker-2, dist-mnist-worker-3"
        ]
    );
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_a_chief_succeeds_when_the_chief_does() {
    let cluster = test_cluster("chief").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "chief-job",
        json!({"tfReplicaSpecs": {
            "Chief": replica(1, Some("1"), 0),
            "Worker": replica(2, None, 0),
        }}),
    )
    .await;
    let status = wait_for_condition(&cluster, "chief-job", "Succeeded").await;
    assert_eq!(status.conditions.last().unwrap().type_, "Succeeded");
    assert_eq!(
        status.conditions.last().unwrap().message,
        Some(format!(
            "TFJob {}/chief-job successfully completed.",
            cluster.namespace
        ))
    );
    let chief = pods(&cluster).get("chief-job-chief-0").await.unwrap();
    assert_eq!(chief.metadata.labels.unwrap()["job-role"], "master");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_is_recreated_under_the_same_name() {
    let cluster = test_cluster("recreate").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "recreate",
        json!({"tfReplicaSpecs": {"Worker": replica(2, None, 0), "PS": replica(1, None, 0)}}),
    )
    .await;
    wait_for_condition(&cluster, "recreate", "Running").await;
    eventually("worker 1 runs", || async {
        pod_phase(&cluster, "recreate-worker-1").await.as_deref() == Some("Running")
    })
    .await;
    let before = pods(&cluster)
        .get("recreate-worker-1")
        .await
        .unwrap()
        .metadata
        .uid;
    pods(&cluster)
        .delete("recreate-worker-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("worker 1 is back under the same name", || async {
        match pods(&cluster).get_opt("recreate-worker-1").await.unwrap() {
            Some(pod) => pod.metadata.uid != before && pod.metadata.deletion_timestamp.is_none(),
            None => false,
        }
    })
    .await;
    assert_eq!(job_pods(&cluster, "recreate").await.len(), 3);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_job_fails_with_reason_and_message_and_creates_no_pod() {
    let cluster = test_cluster("invalid").await;
    let operator = start_operator(&cluster).await;
    let mut no_tensorflow = replica(1, None, 0);
    no_tensorflow["template"]["spec"]["containers"][0]["name"] = json!("main");
    create_job(
        &cluster,
        "invalid",
        json!({"tfReplicaSpecs": {"Worker": no_tensorflow}}),
    )
    .await;
    // Upstream's invalid_tfjob e2e shape: the replica specs under an unknown key.
    create_job(
        &cluster,
        "no-specs",
        json!({"notTheActualField": {"Worker": replica(1, None, 0)}}),
    )
    .await;
    let status = wait_for_condition(&cluster, "invalid", "Failed").await;
    let failed = status.conditions.last().unwrap();
    assert_eq!(failed.reason.as_deref(), Some("InvalidTFJobSpec"));
    assert_eq!(
        failed.message.as_deref(),
        Some(
            "Failed to marshal the object to TFJob; the spec is invalid: TFJobSpec is not valid: There is no container named tensorflow in Worker"
        )
    );
    let status = wait_for_condition(&cluster, "no-specs", "Failed").await;
    let failed = status.conditions.last().unwrap();
    assert_eq!(failed.reason.as_deref(), Some("InvalidTFJobSpec"));
    assert!(
        failed
            .message
            .as_deref()
            .unwrap()
            .contains("the spec is invalid")
    );
    assert_eq!(job_pods(&cluster, "invalid").await, []);
    assert_eq!(job_pods(&cluster, "no-specs").await, []);
    assert_eq!(job_services(&cluster, "invalid").await, []);
    // Events are written in the background, after the status.
    eventually("one InvalidTFJobSpec Event per job", || async {
        event_count(&cluster, "InvalidTFJobSpec").await == 2
    })
    .await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_restart_mid_job_creates_no_duplicate_child() {
    let cluster = test_cluster("restart").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "restart",
        json!({"tfReplicaSpecs": {"PS": replica(1, None, 0), "Worker": replica(2, None, 0)}}),
    )
    .await;
    wait_for_condition(&cluster, "restart", "Running").await;
    eventually("all three pods and services exist", || async {
        job_pods(&cluster, "restart").await.len() == 3
            && job_services(&cluster, "restart").await.len() == 3
    })
    .await;
    let pods_before = job_pods(&cluster, "restart").await;
    let services_before = job_services(&cluster, "restart").await;
    let status_before = status(&cluster, "restart").await;
    operator.stop().await;

    let operator = start_operator(&cluster).await;
    // Give the new leader time to replay and reconcile every cached object.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(job_pods(&cluster, "restart").await, pods_before);
    assert_eq!(job_services(&cluster, "restart").await, services_before);
    assert_eq!(
        reported_children(&cluster, "SuccessfulCreatePod")
            .await
            .len(),
        3
    );
    assert_eq!(
        reported_children(&cluster, "SuccessfulCreateService")
            .await
            .len(),
        3
    );
    let status_after = status(&cluster, "restart").await;
    assert_eq!(status_after.conditions, status_before.conditions);
    assert_eq!(status_after.start_time, status_before.start_time);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_top_level_clean_pod_policy_is_kept_by_the_crd_and_honoured_with_a_deprecated_field_warning()
 {
    let cluster = test_cluster("legacy").await;
    let operator = start_operator(&cluster).await;
    let mut worker = replica(2, Some("1"), 0);
    worker["restartPolicy"] = json!("ExitCode");
    // The v1.0.x dialect: run fields at the top of spec, lower-case keys.
    create_job(
        &cluster,
        "legacy",
        json!({"cleanPodPolicy": "All", "backoffLimit": 3, "tfReplicaSpecs": {"worker": worker}}),
    )
    .await;
    let stored = jobs(&cluster).get("legacy").await.unwrap();
    assert_eq!(stored.spec["cleanPodPolicy"], "All", "not pruned");
    assert_eq!(stored.spec["backoffLimit"], 3);
    wait_for_condition(&cluster, "legacy", "Succeeded").await;
    // All (not the default Running) applies: the succeeded workers go too.
    eventually("every pod of the job is deleted", || async {
        job_pods(&cluster, "legacy").await.is_empty()
    })
    .await;
    assert_eq!(event_count(&cluster, "DeprecatedField").await, 2);
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_pod_with_the_job_labels_is_adopted_and_a_deleted_service_is_recreated() {
    let cluster = test_cluster("adopt").await;
    let operator = start_operator(&cluster).await;
    // A pod left by an older operator: short labels only, no owner.
    let orphan: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "adopt-worker-0", "labels": {
            "group-name": "kubeflow.org", "job-name": "adopt",
            "replica-type": "worker", "replica-index": "0"}},
        "spec": {"containers": [{"name": "tensorflow", "image": "img:1"}]}
    }))
    .unwrap();
    let orphan = pods(&cluster)
        .create(&Default::default(), &orphan)
        .await
        .unwrap();
    create_job(
        &cluster,
        "adopt",
        json!({"tfReplicaSpecs": {"Worker": replica(2, None, 0)}}),
    )
    .await;
    let job_uid = jobs(&cluster).get("adopt").await.unwrap().metadata.uid;
    eventually("the orphan is adopted", || async {
        let pod = pods(&cluster).get("adopt-worker-0").await.unwrap();
        pod.metadata.uid == orphan.metadata.uid
            && pod
                .metadata
                .owner_references
                .unwrap_or_default()
                .iter()
                .any(|o| Some(&o.uid) == job_uid.as_ref() && o.controller == Some(true))
    })
    .await;
    eventually("both services exist", || async {
        job_services(&cluster, "adopt").await.len() == 2
    })
    .await;
    assert_eq!(job_pods(&cluster, "adopt").await.len(), 2);
    let before = services(&cluster)
        .get("adopt-worker-1")
        .await
        .unwrap()
        .metadata
        .uid;
    services(&cluster)
        .delete("adopt-worker-1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the service is back under the same name", || async {
        services(&cluster)
            .get_opt("adopt-worker-1")
            .await
            .unwrap()
            .is_some_and(|s| s.metadata.uid != before)
    })
    .await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_leader_election_the_operator_runs_jobs_and_takes_no_lease() {
    let cluster = test_cluster("no-election").await;
    let operator = start_operator_with(&cluster, |config| config.leader_election = false).await;
    create_job(
        &cluster,
        "solo",
        json!({"tfReplicaSpecs": {"Worker": replica(1, Some("1"), 0)}}),
    )
    .await;
    wait_for_condition(&cluster, "solo", "Succeeded").await;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::all(cluster.client.clone());
    let ours = leases
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|lease| lease.metadata.name.as_deref() == Some(cluster.namespace.as_str()))
        .count();
    assert_eq!(ours, 0, "no Lease named after the test's operator");
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_selects_exactly_its_pod_by_training_operator_v1_9s_labels() {
    let cluster = test_cluster("selector").await;
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "sel",
        json!({"tfReplicaSpecs": {"Worker": replica(2, None, 0), "PS": replica(1, None, 0)}}),
    )
    .await;
    eventually("three Services exist", || async {
        job_services(&cluster, "sel").await.len() == 3
    })
    .await;
    for (service_name, rtype, index) in [
        ("sel-worker-0", "worker", "0"),
        ("sel-worker-1", "worker", "1"),
        ("sel-ps-0", "ps", "0"),
    ] {
        let service = services(&cluster).get(service_name).await.unwrap();
        let spec = service.spec.unwrap();
        let selector = spec.selector.unwrap();
        let expected: std::collections::BTreeMap<String, String> = [
            ("training.kubeflow.org/operator-name", "tfjob-controller"),
            ("training.kubeflow.org/job-name", "sel"),
            ("training.kubeflow.org/replica-type", rtype),
            ("training.kubeflow.org/replica-index", index),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(selector, expected, "{service_name}");
        // Kept on purpose (README): peers resolve before they are ready.
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        // The API server's own label selection finds exactly its pod.
        let text = selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let selected: Vec<String> = pods(&cluster)
            .list(&kube::api::ListParams::default().labels(&text))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        assert_eq!(selected, [service_name]);
        // The legacy set stays on pods and Services (README).
        let labels = service.metadata.labels.unwrap();
        for legacy in ["group-name", "job-name", "replica-type", "replica-index"] {
            assert!(labels.contains_key(legacy), "{service_name} lacks {legacy}");
        }
    }
    operator.stop().await;
}
