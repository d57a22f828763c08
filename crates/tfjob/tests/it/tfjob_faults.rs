//! Fault injection, kube-sim only (the real lane cannot be made to answer
//! 500s or cut watches): API errors, dropped and expired watches must end
//! in the same final status as a fault-free run. Not an `*_e2e` module, so
//! CI's real lane does not run it.

use kube_sim::{Fault, Verb};
use serde_json::json;

use crate::support::*;

/// A job that retries once and then exceeds `backoffLimit: 1`: conditions,
/// counted failures and pods created, with or without faults.
/// Also returns how often each fault fired.
async fn run_flaky_job(
    faults: &[Fault],
) -> ((Vec<(String, String, String)>, i32, usize), Vec<u64>) {
    let cluster = test_cluster("faults").await;
    for fault in faults {
        cluster.sim().faults().add(fault.clone()).unwrap();
    }
    let operator = start_operator(&cluster).await;
    create_job(
        &cluster,
        "flaky",
        json!({
            "runPolicy": {"backoffLimit": 1, "cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                "Worker": replica_with(1, Some("1"), 137, "ExitCode"),
                "PS": replica(1, None, 0),
            },
        }),
    )
    .await;
    let status = wait_for_condition(&cluster, "flaky", "Failed").await;
    let conditions = condition_triples(&status);
    let failures = status.backoff.as_ref().map_or(0, |b| b.failures);
    let created = reported_children(&cluster, "SuccessfulCreatePod")
        .await
        .len();
    operator.stop().await;
    let fired = cluster
        .sim()
        .faults()
        .list()
        .iter()
        .map(|f| f.fired)
        .collect();
    ((conditions, failures, created), fired)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_and_dropped_or_expired_watches_end_in_the_same_final_status_as_a_fault_free_run()
 {
    let (clean, _) = run_flaky_job(&[]).await;
    assert_eq!(clean.1, 2, "two counted failures");
    assert_eq!(clean.2, 3, "worker twice, PS once");
    let (faulty, fired) = run_flaky_job(&[
        Fault::error(500).on(Verb::Create, "pods").times(2),
        Fault::error(500).on(Verb::Patch, "tfjobs").times(2),
        Fault::error(503).on(Verb::Delete, "pods").times(1),
        Fault::close_watch_after(2).resource("pods").times(3),
        Fault::expire_next_watch().resource("tfjobs"),
    ])
    .await;
    assert!(fired.iter().all(|&n| n > 0), "every fault hit: {fired:?}");
    assert_eq!(faulty, clean);
}
