//! The operator's leadership under an API outage, kube-sim only (the real lane
//! cannot inject faults; not an `*_e2e` module). A 503 outage, or Lease calls
//! that hang while the rest of the API answers, must end its leader work no
//! later than the renew deadline after its last successful renew (plus the stop
//! grace for work that does not return by itself); a demoted replica creates
//! nothing, and once the server answers it leads and reconciles again.
//!
//! The operator runs on kube-sim's loopback client, the client stack of a
//! deployed operator: kube's retry layer retries 503s for many seconds inside
//! one call, which is what kept an earlier leader in office through an outage.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube_sim::{Fault, KubeSim};
use serde_json::json;

use crate::support::*;

const LEASE_DURATION: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
/// Leader work that has not returned by itself is aborted once half of the gap
/// between renew deadline and lease duration has passed after the deadline.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// Measurement slack: the 10 ms poll of the replica's state, the 1 ms timer
/// granularity, and scheduling delays on a loaded two-core CI machine.
const SLACK: Duration = Duration::from_millis(300);

async fn leader_on_loopback(cluster: &mut TestCluster) -> RunningOperator {
    cluster.operator_on_loopback();
    let operator = start_operator_with(cluster, |config| {
        config.election.lease_duration = LEASE_DURATION;
        config.election.renew_deadline = RENEW_DEADLINE;
        config.election.retry_period = RETRY_PERIOD;
    })
    .await;
    leads(&operator, "the operator leads").await;
    operator
}

fn leading(operator: &RunningOperator) -> bool {
    operator.readiness.snapshot().leader_ready
        && operator.metric("leader_election_master_status") == Some(1.0)
}

async fn leads(operator: &RunningOperator, what: &str) {
    eventually_within(Duration::from_secs(20), what, || {
        let leading = leading(operator);
        async move { leading }
    })
    .await;
}

async fn renew_time(cluster: &TestCluster) -> Option<Timestamp> {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), cluster.lease_namespace());
    let lease = leases.get_opt(&cluster.namespace).await.ok()??;
    lease.spec?.renew_time.map(|time| time.0)
}

/// Waits for the leader's next renew and returns its `renewTime`; a fault
/// injected right after it makes it the last successful renew (the next one is
/// a retry period away).
async fn fresh_renew(cluster: &TestCluster) -> Timestamp {
    let before = renew_time(cluster).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(now) = renew_time(cluster).await
            && Some(now) != before
        {
            return now;
        }
        assert!(tokio::time::Instant::now() < deadline, "the leader renews");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn since(earlier: Timestamp, later: Timestamp) -> Duration {
    Duration::try_from(later.duration_since(earlier)).unwrap_or_default()
}

/// Polls until the leader work has stopped (the master-status gauge drops only
/// after it returned or was aborted) and checks both bounds; returns how long
/// after `last_renew` the replica was told to stop.
async fn step_down(operator: &RunningOperator, last_renew: Timestamp, limit: Duration) -> Duration {
    let deadline = tokio::time::Instant::now() + limit;
    let mut told = None;
    loop {
        let now = Timestamp::now();
        if told.is_none() && !operator.readiness.snapshot().leader_ready {
            told = Some(now);
        }
        if operator.metric("leader_election_master_status") == Some(0.0) {
            let told = since(last_renew, told.unwrap_or(now));
            let stopped = since(last_renew, now);
            eprintln!(
                "last renew {last_renew}: told to stop after {told:?}, work stopped after {stopped:?}"
            );
            assert!(
                told <= RENEW_DEADLINE + SLACK,
                "told to stop {told:?} after the last renew; renew deadline {RENEW_DEADLINE:?}"
            );
            assert!(
                stopped <= RENEW_DEADLINE + STOP_GRACE + SLACK,
                "leader work stopped {stopped:?} after the last renew"
            );
            assert!(stopped < LEASE_DURATION, "gone before the lease can expire");
            return told;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the operator did not step down within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Mutating requests kube-sim answered (any code), by `verb resource`, leaving
/// out the Lease and what the simulated kubelet writes.
fn writes(sim: &KubeSim) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in sim.metrics().encode().lines() {
        let Some(rest) = line.strip_prefix("kube_sim_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let (verb, resource) = (label("verb"), label("resource"));
        if ["leases", "nodes/status", "pods/status"].contains(&resource.as_str()) {
            continue;
        }
        if ["create", "update", "patch", "delete", "deletecollection"].contains(&verb.as_str()) {
            *counts.entry(format!("{verb} {resource}")).or_default() +=
                value.trim().parse::<u64>().unwrap_or(0);
        }
    }
    counts
}

async fn pod_count(cluster: &TestCluster) -> usize {
    pods(cluster)
        .list(&ListParams::default())
        .await
        .map_or(0, |list| list.items.len())
}

async fn create_worker_job(cluster: &TestCluster, name: &str) {
    create_job(
        cluster,
        name,
        json!({"tfReplicaSpecs": {"Worker": replica(1, None, 0)}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_outage_ends_the_operators_leader_work_by_the_renew_deadline_and_it_leads_again_after()
 {
    let mut cluster = test_cluster("leader-outage").await;
    let operator = leader_on_loopback(&mut cluster).await;

    let last_renew = fresh_renew(&cluster).await;
    let outage = Duration::from_secs(6);
    cluster.sim().faults().outage(outage);
    let outage_ends = tokio::time::Instant::now() + outage;
    let told = step_down(&operator, last_renew, outage).await;
    assert!(
        told + Duration::from_millis(50) >= RENEW_DEADLINE,
        "503s are retried until the renew deadline: {told:?}"
    );
    // The rest of the outage: a demoted replica sends no write (each would be a 503).
    let before = writes(cluster.sim());
    tokio::time::sleep_until(outage_ends).await;
    assert_eq!(writes(cluster.sim()), before, "no write while demoted");

    leads(&operator, "the operator leads again after the outage").await;
    create_worker_job(&cluster, "after-outage").await;
    eventually("the new leader term creates the worker pod", || async {
        pod_count(&cluster).await == 1
    })
    .await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_lease_calls_end_the_operators_leader_work_by_the_renew_deadline_and_it_resumes_after()
 {
    let mut cluster = test_cluster("leader-hang").await;
    let operator = leader_on_loopback(&mut cluster).await;

    // Only this operator's Lease hangs (not the simulated kubelet's node Leases):
    // the rest of the API takes writes, so a leader that kept going would create
    // pods while a successor could take the Lease.
    let last_renew = fresh_renew(&cluster).await;
    let hang = cluster
        .sim()
        .faults()
        .add(
            Fault::latency(Duration::from_secs(60))
                .resource("leases")
                .namespace(cluster.lease_namespace()),
        )
        .expect("valid fault");
    step_down(&operator, last_renew, Duration::from_secs(6)).await;

    create_worker_job(&cluster, "while-demoted").await;
    let before = writes(cluster.sim());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        writes(cluster.sim()),
        before,
        "the demoted replica writes nothing, though the API takes writes"
    );
    assert_eq!(pod_count(&cluster).await, 0);
    assert!(!leading(&operator));

    assert!(cluster.sim().faults().remove(hang));
    leads(&operator, "the operator leads again once the Lease answers").await;
    eventually("the new leader term creates the worker pod", || async {
        pod_count(&cluster).await == 1
    })
    .await;
    operator.stop().await;
}
