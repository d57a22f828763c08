//! The Kubeflow Python SDK (`kubeflow-training` 1.9.3 from PyPI, with the
//! `kubernetes` client 33.1.0 it works with, installed by scripts/test.sh
//! into `.venv-kubeflow`) on our TFJobs: `get_job`, `wait_for_job_conditions`,
//! `get_job_pod_names` and `create_job`. Its TFJob model refuses a job
//! stored without `spec.runPolicy`, which upstream's own dist-mnist example
//! omits; the CRD's schema defaults give every stored job one.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{start_operator, test_cluster};

/// The interpreter: env `KUBEFLOW_PYTHON` or
/// `<workspace>/.venv-kubeflow/bin/python`.
fn python() -> PathBuf {
    if let Ok(path) = std::env::var("KUBEFLOW_PYTHON") {
        return PathBuf::from(path);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-kubeflow/bin/python");
    assert!(
        path.exists(),
        "python not found: set KUBEFLOW_PYTHON or run scripts/test.sh, which creates .venv-kubeflow with kubeflow-training ({})",
        path.display()
    );
    path
}

/// What makes the simulated containers end with code 0 after a second
/// (kube-sim's kubelet and the real lane's KWOK stages read it).
fn run_one_second() -> Value {
    json!({"kube-sim.gpufleet.dev/run-seconds": "1", "kube-sim.gpufleet.dev/exit-code": "0"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubeflow_sdk_reads_waits_for_and_lists_a_tfjob_applied_without_run_policy() {
    let cluster = test_cluster("sdk").await;
    let operator = start_operator(&cluster).await;
    // As upstream's dist-mnist example writes a TFJob: no runPolicy, no
    // replicas, no restartPolicy.
    crate::support::create_job(
        &cluster,
        "applied",
        json!({"tfReplicaSpecs": {"Worker": {"template": {
            "metadata": {"annotations": run_one_second()},
            "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]}
        }}}}),
    )
    .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, &cluster.kubeconfig).unwrap();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/tfjob_e2e/kubeflow_sdk.py");
    let output = tokio::time::timeout(
        Duration::from_secs(300),
        tokio::process::Command::new(python())
            .arg(&script)
            .arg(&kubeconfig)
            .arg(&cluster.namespace)
            .arg(run_one_second().to_string())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the SDK script finished within 300 s")
    .expect("python runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK script failed (kubeflow-training missing? scripts/test.sh installs it):\n{stderr}"
    );
    let seen: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("the script printed no JSON ({error}):\n{stderr}"));
    let namespace = &cluster.namespace;

    // The stored job as the SDK reads it: runPolicy present (empty, so the
    // operator's defaults apply), replicas and restartPolicy defaulted.
    assert_eq!(
        seen["applied_run_policy"]["clean_pod_policy"],
        Value::Null,
        "{seen}"
    );
    assert_eq!(
        seen["applied_replica_specs"],
        json!({"Worker": {"replicas": 1, "restart_policy": "Never"}}),
        "{seen}"
    );
    let succeeded = |key: &str| {
        let types = seen[key].as_array().cloned().unwrap_or_default();
        types.contains(&json!("Succeeded")) && !types.contains(&json!("Failed"))
    };
    assert!(succeeded("applied_true_conditions"), "{seen}");
    assert_eq!(seen["applied_pods"], json!(["applied-worker-0"]), "{seen}");
    assert_eq!(
        seen["applied_worker_0"],
        json!(["applied-worker-0"]),
        "{seen}"
    );
    assert!(succeeded("sdk_true_conditions"), "{seen}");
    assert_eq!(seen["sdk_pods"], json!(["from-sdk-worker-0"]), "{seen}");
    // The objects the SDK saw are the stored ones.
    let stored = crate::support::jobs(&cluster).get("applied").await.unwrap();
    let stored = serde_json::to_value(&stored).unwrap();
    assert_eq!(stored["metadata"]["namespace"], json!(namespace));
    assert!(stored["spec"]["runPolicy"].is_object(), "{stored}");
    operator.stop().await;
}
