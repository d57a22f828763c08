//! The Mokka leader under an API outage (kube-sim only: the real lane cannot inject
//! faults). A 503 outage, or Lease calls that hang while the rest of the API answers,
//! must end its leader work no later than the renew deadline after its last successful
//! renew (plus the stop grace for work that does not return by itself); a demoted
//! replica writes nothing, and once the server answers again it leads and works again.
//!
//! The controller runs on kube-sim's loopback client, the client stack a deployed
//! controller has: kube's retry layer retries 503s for many seconds inside one call,
//! which is what kept an earlier leader in office through an outage.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube_sim::Fault;
use mokka::controller::MokkaController;

use crate::mokka_e2e::support::*;

/// Leader work that has not returned by itself is aborted once half of the gap
/// between renew deadline and lease duration has passed after the deadline.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// Measurement slack: the 10 ms poll of the replica's state, the 1 ms timer
/// granularity, and scheduling delays on a loaded two-core CI machine.
const SLACK: Duration = Duration::from_millis(300);

/// kube-sim, with the controller on the loopback client instead of the in-process one.
async fn cluster_on_loopback() -> Cluster {
    let mut cluster = Cluster::start_sim().await;
    cluster.controller_client = cluster
        .sim()
        .expect("kube-sim")
        .http_client()
        .expect("loopback client");
    cluster
}

fn master_status(controller: &MokkaController) -> bool {
    controller
        .registry()
        .encode()
        .expect("metrics encode")
        .contains(&format!(
            "leader_election_master_status{{name=\"{LEASE_NAME}\"}} 1"
        ))
}

async fn renew_time(cluster: &Cluster) -> Option<Timestamp> {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), LEASE_NAMESPACE);
    let lease = leases.get_opt(LEASE_NAME).await.ok()??;
    lease.spec?.renew_time.map(|time| time.0)
}

/// Waits for the leader's next renew and returns its `renewTime`; a fault injected
/// right after it makes it the last successful renew (the next is a retry period away).
async fn fresh_renew(cluster: &Cluster) -> Timestamp {
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

/// Polls the replica until its leader work has stopped (the master-status gauge drops
/// only after the work returned or was aborted). Returns how long after `last_renew`
/// it was told to stop (`leader_ready` off) and how long until its work had stopped.
async fn step_down(
    controller: &MokkaController,
    last_renew: Timestamp,
    limit: Duration,
) -> (Duration, Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    let mut told = None;
    loop {
        let now = Timestamp::now();
        if told.is_none() && !controller.leader_ready() {
            told = Some(now);
        }
        if !master_status(controller) {
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
            return (told, stopped);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leader did not step down within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn leads_again(controller: &Arc<MokkaController>, what: &str) {
    eventually_within(Duration::from_secs(20), what, || async {
        (controller.leader_ready() && master_status(controller)).then_some(())
    })
    .await;
}

async fn racks(cluster: &Cluster) -> usize {
    cluster
        .racks()
        .list(&ListParams::default())
        .await
        .map_or(0, |list| list.items.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_outage_ends_mokka_leader_work_by_the_renew_deadline_and_it_leads_again_after() {
    let cluster = cluster_on_loopback().await;
    cluster.create_profile("two-node", 2, 1).await;
    for i in 0..4 {
        cluster.create_node(&format!("node-{i}"), "outage").await;
    }
    let replica = cluster.start_leader("outage-leader").await;
    let controller = Arc::clone(&replica.controller);

    let last_renew = fresh_renew(&cluster).await;
    let outage = Duration::from_secs(5);
    let sim = cluster.sim().expect("kube-sim");
    sim.faults().outage(outage);
    let outage_ends = tokio::time::Instant::now() + outage;
    let (told, _) = step_down(&controller, last_renew, outage).await;
    assert!(
        told + Duration::from_millis(50) >= RENEW_DEADLINE,
        "503s are retried until the renew deadline: {told:?}"
    );
    // The rest of the outage: a demoted replica sends no write (each would be a 503).
    let writes = mutating_requests(&cluster);
    tokio::time::sleep_until(outage_ends).await;
    assert_eq!(
        mutating_requests(&cluster),
        writes,
        "no write while demoted"
    );
    assert!(!controller.leader_ready());

    leads_again(&controller, "the replica to lead again after the outage").await;
    cluster
        .create_inventory("inv", "two-node", 2, "outage")
        .await;
    eventually("the new leader term to create the racks", || async {
        (racks(&cluster).await == 2).then_some(())
    })
    .await;
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hanging_lease_calls_end_mokka_leader_work_by_the_renew_deadline_and_it_resumes_after() {
    let cluster = cluster_on_loopback().await;
    cluster.create_profile("two-node", 2, 1).await;
    for i in 0..4 {
        cluster.create_node(&format!("node-{i}"), "hang").await;
    }
    let replica = cluster.start_leader("hang-leader").await;
    let controller = Arc::clone(&replica.controller);

    // Only the Lease hangs: the rest of the API takes writes, so a leader that kept
    // going would bind racks while a successor could take the Lease.
    let last_renew = fresh_renew(&cluster).await;
    let sim = cluster.sim().expect("kube-sim");
    let hang = sim
        .faults()
        .add(Fault::latency(Duration::from_secs(60)).resource("leases"))
        .expect("valid fault");
    step_down(&controller, last_renew, Duration::from_secs(5)).await;

    cluster.create_inventory("inv", "two-node", 2, "hang").await;
    let writes = mutating_requests(&cluster);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        mutating_requests(&cluster),
        writes,
        "the demoted replica writes nothing, though the API takes writes"
    );
    assert_eq!(racks(&cluster).await, 0);
    assert!(!controller.leader_ready());

    assert!(sim.faults().remove(hang));
    leads_again(
        &controller,
        "the replica to lead again once the Lease answers",
    )
    .await;
    eventually("the new leader term to create the racks", || async {
        (racks(&cluster).await == 2).then_some(())
    })
    .await;
    replica.stop().await;
}

/// The elector aborts leader work that outlives a lost lease. An aborted term must
/// leave nothing behind: no readiness claiming running workers, no term in progress,
/// so the next term starts normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_leader_term_clears_its_state_and_the_next_term_starts() {
    use mokka::plan::options::Options;
    use tokio_util::sync::CancellationToken;

    let cluster = Cluster::start_sim().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "aborted").await;
    let options = Options {
        status_debounce: Duration::ZERO,
        ..Options::default()
    };
    let controller =
        Arc::new(MokkaController::new(cluster.controller_client.clone(), options).unwrap());
    let caches_stop = CancellationToken::new();
    let caches = {
        let (controller, stop) = (Arc::clone(&controller), caches_stop.clone());
        tokio::spawn(async move { controller.run_caches(stop).await })
    };
    tokio::time::timeout(Duration::from_secs(30), controller.caches_synced())
        .await
        .expect("caches sync");

    let first = {
        let controller = Arc::clone(&controller);
        tokio::spawn(async move { controller.run_leader(CancellationToken::new()).await })
    };
    eventually("the first term to run", || async {
        controller.leader_ready().then_some(())
    })
    .await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert!(!controller.leader_ready());
    assert!(!controller.readiness().snapshot().leader_ready);
    assert_eq!(controller.queued_keys(), 0);

    cluster
        .create_inventory("inv", "one-node", 1, "aborted")
        .await;
    let term = CancellationToken::new();
    let second = {
        let (controller, term) = (Arc::clone(&controller), term.clone());
        tokio::spawn(async move { controller.run_leader(term).await })
    };
    eventually("the second term to run and create the rack", || async {
        (controller.leader_ready() && racks(&cluster).await == 1).then_some(())
    })
    .await;
    term.cancel();
    second.await.unwrap().unwrap();
    caches_stop.cancel();
    caches.await.unwrap().unwrap();
}

/// A worker stuck in a call that does not come back (a rack create the server holds for
/// two minutes; the reconcile does not watch its token around writes) must not hold the
/// Lease hostage. On shutdown the leader keeps renewing while its workers drain, so a
/// drain without a bound would keep the Lease, and every standby out, for as long as
/// the call hangs. The runtime gives up on the worker after the drain timeout, releases
/// the Lease, and a standby takes over at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stuck_past_the_drain_timeout_does_not_hold_the_lease() {
    use kube_sim::Verb;
    use mokka::plan::options::Options;

    let cluster = cluster_on_loopback().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "stuck").await;
    let sim = cluster.sim().expect("kube-sim");
    let stuck = sim
        .faults()
        .add(
            Fault::latency(Duration::from_secs(120))
                .on(Verb::Create, "sgpuracks")
                .times(1),
        )
        .expect("valid fault");
    // A `times(1)` rule leaves the list once it has fired: only the first create
    // hangs, so the next leader's create goes through.
    let fired = || !sim.faults().list().iter().any(|fault| fault.id == stuck);
    let drain_timeout = Duration::from_secs(1);
    let options = Options {
        status_debounce: Duration::ZERO,
        ..Options::default()
    };
    let leader = cluster
        .start_replica_draining("stuck-leader", options, drain_timeout)
        .await;
    eventually("the first replica to lead", || async {
        leader.controller.leader_ready().then_some(())
    })
    .await;
    let standby = cluster
        .start_replica_draining("patient-standby", options, drain_timeout)
        .await;
    cluster
        .create_inventory("inv", "one-node", 1, "stuck")
        .await;
    eventually("a worker to be stuck creating the rack", || async {
        fired().then_some(())
    })
    .await;
    assert!(!standby.controller.leader_ready());

    let asked = tokio::time::Instant::now();
    tokio::time::timeout(drain_timeout + Duration::from_secs(5), leader.stop())
        .await
        .expect("the leader stops, giving up on its stuck worker, long before the call returns");
    let stopped = asked.elapsed();
    assert!(
        stopped >= drain_timeout,
        "the worker had its drain timeout: stopped after {stopped:?}"
    );
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), LEASE_NAMESPACE);
    let lease = leases.get(LEASE_NAME).await.expect("the Lease");
    let holder = lease.spec.and_then(|spec| spec.holder_identity);
    assert!(
        holder.as_deref() != Some("stuck-leader"),
        "the stopped leader released its Lease: holder {holder:?}"
    );
    // A released Lease is taken within a retry period or two, not a lease duration.
    eventually_within(
        LEASE_DURATION,
        "the standby to lead once the Lease is released",
        || async { standby.controller.leader_ready().then_some(()) },
    )
    .await;

    eventually("the new leader to create the rack", || async {
        (racks(&cluster).await == 1).then_some(())
    })
    .await;
    standby.stop().await;
}
