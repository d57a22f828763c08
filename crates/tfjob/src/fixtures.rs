//! The TFJob the scale benchmarks run: 1 Chief + 2 PS + 8 Workers on
//! kube-sim's simulated kubelet, which reads the run time and exit code of
//! a container from pod annotations.

use serde_json::json;

use crate::api::TFJobObject;

/// One replica spec of `replicas` pods that exit 0 after `run_seconds`,
/// or run until deleted with `None`.
fn replica(replicas: i32, run_seconds: Option<u64>) -> serde_json::Value {
    let mut annotations = json!({"kube-sim.gpufleet.dev/exit-code": "0"});
    if let Some(seconds) = run_seconds {
        annotations["kube-sim.gpufleet.dev/run-seconds"] = json!(seconds.to_string());
    }
    json!({
        "replicas": replicas,
        "restartPolicy": "Never",
        "template": {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/tensorflow:2.15.0"}]},
        },
    })
}

/// Job `name` in `namespace`: 1 Chief and 8 Workers exiting 0 after
/// `run_seconds`, 2 PS running until the job's clean-up.
pub fn eleven_replica_job(name: &str, namespace: &str, run_seconds: u64) -> TFJobObject {
    let job = json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"tfReplicaSpecs": {
            "Chief": replica(1, Some(run_seconds)),
            "PS": replica(2, None),
            "Worker": replica(8, Some(run_seconds)),
        }},
    });
    // The JSON above is a valid TFJob by construction; a failure here is a
    // bug in this function, so it is reported loudly rather than hidden.
    serde_json::from_value(job)
        .unwrap_or_else(|error| panic!("the bench TFJob is invalid: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_job_has_eleven_replicas_and_only_ps_run_without_end() {
        let job = eleven_replica_job("j", "ns", 20);
        let specs = &job.spec["tfReplicaSpecs"];
        assert_eq!(specs["Chief"]["replicas"], 1);
        assert_eq!(specs["PS"]["replicas"], 2);
        assert_eq!(specs["Worker"]["replicas"], 8);
        let run = |kind: &str| {
            specs[kind]["template"]["metadata"]["annotations"]["kube-sim.gpufleet.dev/run-seconds"]
                .clone()
        };
        assert_eq!(run("Worker"), "20");
        assert!(run("PS").is_null());
    }
}
