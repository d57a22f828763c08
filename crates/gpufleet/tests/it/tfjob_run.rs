//! `gpufleet tfjob` as a process against a kube-sim over loopback: it
//! serves health and metrics, runs a job to success, and stops on SIGTERM.

use std::io::Read;
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::{KilledOnDrop, free_port, poll_http};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpufleet_tfjob_runs_a_job_to_success_serves_health_and_metrics_and_stops_on_sigterm() {
    let sim = kube_sim::KubeSim::builder().start().await.unwrap();
    let client = sim.client();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &tfjob::api::crd())
        .await
        .unwrap();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-1"}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    let port = free_port();
    let mut operator = KilledOnDrop {
        name: "gpufleet tfjob",
        child: Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            // tf-operator's Go-style spelling, as an old Deployment has it.
            .args(["tfjob", "-kubeconfig"])
            .arg(&kubeconfig)
            .args([
                &format!("-metrics-bind-address=127.0.0.1:{port}"),
                "-json-log-format",
                "-resyc-period=12h",
                "-threadiness=2",
                // The client behind the token bucket of --qps/--burst.
                "-qps=50",
                "-burst=20",
            ])
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    };
    poll_http(port, "/healthz", |status, _| status == 200).await;
    poll_http(port, "/readyz", |status, _| status == 200).await;

    let jobs: Api<tfjob::api::TFJobObject> = Api::namespaced(client.clone(), "default");
    let job: tfjob::api::TFJobObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "single"},
        "spec": {"tfReplicaSpecs": {"Worker": {"template": {
            "metadata": {"annotations": {"kube-sim.gpufleet.dev/run-seconds": "0.5"}},
            "spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}
        }}}}
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let metrics = poll_http(port, "/metrics", |status, body| {
        status == 200
            && body.contains(r#"tf_operator_jobs_successful_total{job_namespace="default"} 1"#)
    })
    .await;
    assert!(metrics.contains("created_pods_total 1"), "{metrics}");
    assert!(
        metrics.contains(
            r#"training_operator_jobs_successful_total{job_namespace="default",framework="tensorflow"} 1"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("training_operator_reconcile_duration_seconds_count"),
        "{metrics}"
    );
    let stored = jobs.get("single").await.unwrap();
    let jobs_uid = stored.metadata.uid.clone();
    let last = stored.status().conditions.pop().unwrap();
    assert_eq!(last.type_, "Succeeded");

    let status = operator.terminate().await;
    assert!(status.success(), "{status:?}");
    // JSON log records of a pass carry the span controller-kit's worker loop
    // opens for it: the controller, the job's key and its UID.
    let mut stderr = String::new();
    if let Some(mut pipe) = operator.child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    let uid = jobs_uid.unwrap();
    let record = stderr
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|record| record["message"] == "job state changed" && record["state"] == "Succeeded")
        .unwrap_or_else(|| panic!("no JSON record of the success in:\n{stderr}"));
    let span = &record["span"];
    assert_eq!(span["name"], "reconcile", "{record}");
    assert_eq!(span["controller"], "tfjobs", "{record}");
    assert_eq!(span["key"], "default/single", "{record}");
    assert_eq!(span["uid"], uid.as_str(), "{record}");
}
