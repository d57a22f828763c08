//! A leader whose API server stops answering (503s, or Lease calls that hang) steps
//! down no later than the renew deadline after its last successful renew, its leader
//! work stops writing, and it leads again once the server is back.
//!
//! The replica runs on kube-sim's loopback client (`http_client`): that is the client a
//! deployed controller has, with kube's own retry layer that retries 503s for many
//! seconds inside one call. The leader work is a heartbeat that patches one ConfigMap
//! every 100 ms, so a leader that kept working would show up as patches in kube-sim's
//! request counters.

use std::time::Duration;

use controller_kit::{
    Action, Controller, LeaderElectionConfig, Manager, ManagerConfig, ManagerError,
    MetricsRegistry, Readiness,
};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube_sim::{Fault, KubeSim};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::support::*;

const OUTAGE_LEASE: &str = "outage-lease";
const HEARTBEAT: &str = "heartbeat";
const LEASE_DURATION: Duration = Duration::from_secs(4);
const RENEW_DEADLINE: Duration = Duration::from_secs(3);
const RETRY_PERIOD: Duration = Duration::from_millis(500);
/// After the renew deadline, leader work that has not returned by itself is aborted
/// once half of the gap between renew deadline and lease duration has passed.
const STOP_GRACE: Duration = Duration::from_millis(500);
/// Measurement slack: the 10 ms poll of the replica's state, the 1 ms timer
/// granularity, and scheduling delays on a loaded two-core CI machine.
const SLACK: Duration = Duration::from_millis(300);

struct Heartbeat {
    readiness: Readiness,
    metrics: MetricsRegistry,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), ManagerError>>,
}

impl Heartbeat {
    fn start(sim: &KubeSim) -> Heartbeat {
        let client = sim.http_client().expect("loopback client");
        let metrics = MetricsRegistry::new();
        let election = LeaderElectionConfig {
            identity: "heartbeat-replica".to_string(),
            lease_duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
            ..LeaderElectionConfig::new(NAMESPACE, OUTAGE_LEASE)
        };
        let mut manager = Manager::new(client.clone(), ManagerConfig::new(election), &metrics)
            .expect("valid manager config");
        let config_maps = manager
            .caches()
            .add(
                "configmaps",
                Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE),
                kube::runtime::watcher::Config::default(),
                controller_kit::StoreOptions::default(),
            )
            .expect("store added before run");
        let reconcile = move |key: String, _cancel: CancellationToken| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
            async move {
                let beat = Timestamp::now().to_string();
                let patch = serde_json::json!({"metadata": {"annotations": {"beat": beat}}});
                api.patch(&key, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(PatchFailed)?;
                Ok::<_, PatchFailed>(Action::RequeueAfter(Duration::from_millis(100)))
            }
        };
        manager.add(Controller::new("heartbeat", reconcile).watches(
            &config_maps,
            |event, enqueue| {
                if event.object().metadata.name.as_deref() == Some(HEARTBEAT) {
                    enqueue.add(HEARTBEAT.to_string());
                }
            },
        ));
        let readiness = manager.readiness();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(manager.run(shutdown.clone()));
        Heartbeat {
            readiness,
            metrics,
            shutdown,
            task,
        }
    }

    fn master_status(&self) -> bool {
        self.metrics
            .encode()
            .expect("metrics encode")
            .contains(&format!(
                "leader_election_master_status{{name=\"{OUTAGE_LEASE}\"}} 1"
            ))
    }

    fn leading_with_workers(&self) -> bool {
        let snapshot = self.readiness.snapshot();
        snapshot.leader_ready && self.master_status()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(20), self.task).await;
        assert!(
            matches!(result, Ok(Ok(Ok(())))),
            "the manager stopped cleanly"
        );
    }
}

fn heartbeat_patches(sim: &KubeSim, code: u16) -> u64 {
    sim.metrics().requests("patch", "configmaps", code)
}

async fn renew_time(sim: &KubeSim) -> Option<Timestamp> {
    let leases: Api<Lease> = Api::namespaced(sim.client(), NAMESPACE);
    let lease = leases.get_opt(OUTAGE_LEASE).await.ok()??;
    lease.spec?.renew_time.map(|time| time.0)
}

/// Waits for the leader's next renew and returns its `renewTime`. A fault injected right
/// after this makes it the last successful renew: the next one is a retry period away.
async fn fresh_renew(sim: &KubeSim) -> Timestamp {
    let before = renew_time(sim).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = renew_time(sim).await;
        if let Some(now) = now
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

/// When the replica was told to stop (workers no longer ready) and when its leader work
/// had stopped (the master-status gauge drops only after the work returned or was
/// aborted), both on the wall clock the Lease's `renewTime` uses.
struct StepDown {
    told: Timestamp,
    stopped: Timestamp,
}

async fn step_down(replica: &Heartbeat, limit: Duration) -> StepDown {
    let deadline = tokio::time::Instant::now() + limit;
    let mut told = None;
    loop {
        let now = Timestamp::now();
        if told.is_none() && !replica.readiness.snapshot().leader_ready {
            told = Some(now);
        }
        if !replica.master_status() {
            return StepDown {
                told: told.unwrap_or(now),
                stopped: now,
            };
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the leader did not step down within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The step-down bounds every test here checks; returns (told, stopped) after the last renew.
fn assert_step_down_in_time(last_renew: Timestamp, step: &StepDown) -> (Duration, Duration) {
    let told = since(last_renew, step.told);
    let stopped = since(last_renew, step.stopped);
    eprintln!(
        "last renew {last_renew}: told to stop after {told:?}, work stopped after {stopped:?}"
    );
    assert!(
        told <= RENEW_DEADLINE + SLACK,
        "told to stop {told:?} after the last renew; renew deadline {RENEW_DEADLINE:?}"
    );
    assert!(
        stopped <= RENEW_DEADLINE + STOP_GRACE + SLACK,
        "leader work stopped {stopped:?} after the last renew; renew deadline {RENEW_DEADLINE:?}, grace {STOP_GRACE:?}"
    );
    assert!(
        stopped < LEASE_DURATION,
        "leader work must be gone before the lease can expire for a successor"
    );
    (told, stopped)
}

async fn leads_and_beats(sim: &KubeSim, replica: &Heartbeat, what: &str) {
    let before = heartbeat_patches(sim, 200);
    eventually(Duration::from_secs(20), what, || {
        let leading = replica.leading_with_workers();
        let beats = heartbeat_patches(sim, 200);
        async move { leading && beats >= before + 3 }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_outage_longer_than_the_renew_deadline_stops_leader_work_in_time_and_it_resumes_after()
 {
    let sim = start_sim().await;
    create_config_map(&sim.client(), HEARTBEAT).await;
    let replica = Heartbeat::start(&sim);
    leads_and_beats(&sim, &replica, "the replica leads and beats").await;

    let last_renew = fresh_renew(&sim).await;
    let outage = Duration::from_secs(6);
    sim.faults().outage(outage);
    let outage_ends = tokio::time::Instant::now() + outage;
    let step = step_down(&replica, outage).await;
    let (told, _) = assert_step_down_in_time(last_renew, &step);
    assert!(
        told + Duration::from_millis(50) >= RENEW_DEADLINE,
        "503s are retried until the renew deadline, not given up on earlier: {told:?}"
    );
    let refused_at_stop = heartbeat_patches(&sim, 503);
    assert!(
        refused_at_stop > 0,
        "the heartbeat kept trying to write during the outage, so its silence below means something"
    );

    // For the rest of the outage the demoted replica sends no write: every request
    // would have been answered (and counted) with a 503.
    tokio::time::sleep_until(outage_ends).await;
    assert_eq!(
        heartbeat_patches(&sim, 503),
        refused_at_stop,
        "no heartbeat write after the step-down"
    );

    leads_and_beats(
        &sim,
        &replica,
        "the replica leads and beats again after the outage",
    )
    .await;
    replica.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_calls_that_hang_stop_leader_work_by_the_renew_deadline_and_it_resumes_after() {
    let sim = start_sim().await;
    create_config_map(&sim.client(), HEARTBEAT).await;
    let replica = Heartbeat::start(&sim);
    leads_and_beats(&sim, &replica, "the replica leads and beats").await;

    // Only the Lease hangs: the rest of the API keeps answering, so a leader that did
    // not step down would go on writing while a successor could take the Lease.
    let last_renew = fresh_renew(&sim).await;
    let hang = sim
        .faults()
        .add(Fault::latency(Duration::from_secs(60)).resource("leases"))
        .expect("valid fault");
    let step = step_down(&replica, Duration::from_secs(6)).await;
    assert_step_down_in_time(last_renew, &step);
    let beats_at_stop = heartbeat_patches(&sim, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        heartbeat_patches(&sim, 200),
        beats_at_stop,
        "no heartbeat write after the step-down, though the API takes writes"
    );
    assert!(!replica.leading_with_workers());

    assert!(sim.faults().remove(hang));
    leads_and_beats(
        &sim,
        &replica,
        "the replica leads and beats again once the Lease answers",
    )
    .await;
    replica.stop().await;
    sim.shutdown().await;
}
