//! The elected collector under an API outage, kube-sim only (the real lane
//! cannot inject faults). A 503 outage, or Lease calls that hang while the rest
//! of the API answers, must end its leader work no later than the renew
//! deadline after its last successful renew (plus the stop grace for work that
//! does not return by itself); a demoted replica runs no nvidia-smi, and once
//! the server answers it leads and collects again.
//!
//! The fleet's collector client is kube-sim's loopback client, the client stack
//! of a deployed collector: kube's retry layer retries 503s for many seconds
//! inside one call, which is what kept an earlier leader in office through an
//! outage. The collector re-collects every 300 ms, so a leader that kept working
//! would show up as nvidia-smi calls.

use std::time::Duration;

use controller_kit::LeaderElectionConfig;
use gpuid::collect::Election;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube_sim::{Fault, KubeSim};

use crate::collect_support::*;

const LEASE: &str = "gpuid-leader-faults";
const LEASE_DURATION: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
/// Leader work that has not returned by itself is aborted once half of the gap
/// between renew deadline and lease duration has passed after the deadline.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// Measurement slack: the 10 ms poll of the replica's state, the 1 ms timer
/// granularity, and scheduling delays on a loaded two-core CI machine.
const SLACK: Duration = Duration::from_millis(300);

/// A fleet of one GPU node and an elected collector that leads and has collected it.
async fn leading_collector() -> (Fleet, Replica) {
    let fleet = Fleet::start().await;
    fleet.add_node("gpu-1").await;
    fleet.answer("gpu-1", Answer::Xml(capture("hardware/a100.xml", "lf")));
    fleet.add_plugin_pod("plugin-1", "gpu-1").await;
    let mut settings = settings(1);
    settings.resync = Duration::from_millis(300);
    let mut election = LeaderElectionConfig::new(LEASE_NAMESPACE, LEASE);
    election.lease_duration = LEASE_DURATION;
    election.renew_deadline = RENEW_DEADLINE;
    election.retry_period = RETRY_PERIOD;
    let replica = Replica::start(&fleet, settings, Election::Lease(election)).await;
    collects(&fleet, &replica, "the collector leads and collects").await;
    (fleet, replica)
}

async fn master_status(replica: &Replica) -> Option<u8> {
    let (_, metrics) = replica.admin_get("/metrics").await;
    let series = format!("leader_election_master_status{{name=\"{LEASE}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|value| value.trim().parse().ok())
}

async fn leading(replica: &Replica) -> bool {
    replica.readiness.snapshot().leader_ready && master_status(replica).await == Some(1)
}

/// Waits until the replica leads and has run nvidia-smi twice more.
async fn collects(fleet: &Fleet, replica: &Replica, what: &str) {
    let before = fleet.exec_count();
    eventually(what, || async {
        (leading(replica).await && fleet.exec_count() >= before + 2).then_some(())
    })
    .await;
}

async fn renew_time(fleet: &Fleet) -> Option<Timestamp> {
    let leases: Api<Lease> = Api::namespaced(fleet.client.clone(), LEASE_NAMESPACE);
    let lease = leases.get_opt(LEASE).await.ok()??;
    lease.spec?.renew_time.map(|time| time.0)
}

/// Waits for the leader's next renew and returns its `renewTime`; a fault
/// injected right after it makes it the last successful renew (the next one is
/// a retry period away).
async fn fresh_renew(fleet: &Fleet) -> Timestamp {
    let before = renew_time(fleet).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(now) = renew_time(fleet).await
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
async fn step_down(replica: &Replica, last_renew: Timestamp, limit: Duration) -> Duration {
    let deadline = tokio::time::Instant::now() + limit;
    let mut told = None;
    loop {
        let now = Timestamp::now();
        if told.is_none() && !replica.readiness.snapshot().leader_ready {
            told = Some(now);
        }
        if master_status(replica).await == Some(0) {
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
            "the collector did not step down within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// nvidia-smi calls that reached kube-sim, answered or refused.
fn exec_requests(sim: &KubeSim) -> u64 {
    sim.metrics()
        .encode()
        .lines()
        .filter(|line| {
            line.starts_with("kube_sim_requests_total{") && line.contains("resource=\"pods/exec\"")
        })
        .filter_map(|line| line.rsplit(' ').next()?.trim().parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_outage_ends_the_collectors_leader_work_by_the_renew_deadline_and_it_leads_again_after()
 {
    let (fleet, replica) = leading_collector().await;
    let sim = fleet.sim();

    let last_renew = fresh_renew(&fleet).await;
    let outage = Duration::from_secs(6);
    sim.faults().outage(outage);
    let outage_ends = tokio::time::Instant::now() + outage;
    let told = step_down(&replica, last_renew, outage).await;
    assert!(
        told + Duration::from_millis(50) >= RENEW_DEADLINE,
        "503s are retried until the renew deadline: {told:?}"
    );
    // The rest of the outage: a demoted replica tries no nvidia-smi (each
    // attempt would reach kube-sim and be refused).
    let tried = exec_requests(sim);
    tokio::time::sleep_until(outage_ends).await;
    assert_eq!(exec_requests(sim), tried, "no exec while demoted");

    collects(&fleet, &replica, "the collector leads and collects again").await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_lease_calls_end_the_collectors_leader_work_by_the_renew_deadline_and_it_resumes_after()
 {
    let (fleet, replica) = leading_collector().await;
    let sim = fleet.sim();

    // Only the collector's Lease hangs: nvidia-smi keeps answering, so a leader
    // that kept going would go on collecting while a successor could take over.
    let last_renew = fresh_renew(&fleet).await;
    let hang = sim
        .faults()
        .add(
            Fault::latency(Duration::from_secs(60))
                .resource("leases")
                .namespace(LEASE_NAMESPACE),
        )
        .expect("valid fault");
    step_down(&replica, last_renew, Duration::from_secs(6)).await;
    let execs = fleet.exec_count();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        fleet.exec_count(),
        execs,
        "no nvidia-smi after the step-down, though the API answers"
    );
    assert!(!leading(&replica).await);

    assert!(sim.faults().remove(hang));
    collects(
        &fleet,
        &replica,
        "the collector leads and collects again once the Lease answers",
    )
    .await;
    replica.stop().await;
}
