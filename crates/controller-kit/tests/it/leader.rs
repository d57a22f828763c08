//! Two managers in one process against one kube-sim: election, standby behaviour,
//! handover, drain-before-release, readiness and metrics.

use std::time::Duration;

use axum::body::Body;
use controller_kit::readiness::ReplicaRole;
use controller_kit::serve::AdminServer;
use http_body_util::BodyExt;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::support::*;

const SETTLE: Duration = Duration::from_secs(10);

/// Starts two replicas and waits until one leads (workers running) and one is standby.
async fn elect(
    sim: &kube_sim::KubeSim,
    options: impl Fn() -> ReplicaOptions,
) -> (Replica, Replica) {
    let first = start_replica(sim, "replica-a", options());
    let second = start_replica(sim, "replica-b", options());
    eventually(SETTLE, "one leader and one standby, both ready", || {
        let (a, b) = (first.readiness.snapshot(), second.readiness.snapshot());
        async move {
            let roles = [a.role, b.role];
            a.is_ready()
                && b.is_ready()
                && roles.contains(&ReplicaRole::Leader)
                && roles.contains(&ReplicaRole::Standby)
        }
    })
    .await;
    if first.readiness.snapshot().role == ReplicaRole::Leader {
        (first, second)
    } else {
        (second, first)
    }
}

async fn readyz(readiness: &controller_kit::Readiness) -> (u16, String) {
    let router =
        AdminServer::new(readiness.clone(), controller_kit::MetricsRegistry::new()).router();
    let response = router
        .oneshot(http::Request::get("/readyz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_managers_elect_exactly_one_leader_and_the_standby_reads_but_never_writes() {
    let sim = start_sim().await;
    for name in ["alpha", "beta", "gamma"] {
        create_config_map(&sim.client(), name).await;
    }
    let (leader, standby) = elect(&sim, ReplicaOptions::default).await;
    let client = sim.client();
    for name in ["alpha", "beta", "gamma"] {
        let client = client.clone();
        let expected = leader.identity.clone();
        eventually(SETTLE, "the leader reconciles every pre-existing object", move || {
            let client = client.clone();
            let expected = expected.clone();
            async move { reconciled_by(&client, name).await.as_deref() == Some(expected.as_str()) }
        })
        .await;
    }

    // The standby's cache follows the leader's writes, so it serves current reads.
    eventually(
        SETTLE,
        "the standby cache sees the leader's annotation",
        || {
            let cached = standby.config_maps.get_namespaced(NAMESPACE, "gamma");
            let expected = leader.identity.clone();
            async move {
                cached
                    .and_then(|config_map| config_map.metadata.annotations.clone())
                    .and_then(|annotations| annotations.get(RECONCILED_BY).cloned())
                    == Some(expected)
            }
        },
    )
    .await;

    // Over more than a lease duration the standby sends no mutating request at all,
    // while the leader keeps renewing.
    let standby_before = standby.mutations.all();
    let leader_renewals_before = leader.mutations.matching("/leases/").len();
    tokio::time::sleep(LEASE_DURATION + Duration::from_millis(500)).await;
    assert_eq!(
        standby.mutations.all(),
        standby_before,
        "the standby wrote something"
    );
    assert!(standby.mutations.matching("/configmaps").is_empty());
    assert!(
        leader.mutations.matching("/leases/").len() > leader_renewals_before,
        "the leader renews"
    );
    assert!(
        standby.finished.lock().is_empty(),
        "the standby reconciled nothing"
    );

    // Readiness: both are ready, with different reasons.
    assert_eq!(
        readyz(&leader.readiness).await,
        (200, "ready: leader with running workers\n".to_string())
    );
    assert_eq!(
        readyz(&standby.readiness).await,
        (200, "ready: standby with synced caches\n".to_string())
    );

    // Metrics: queue metrics under client-go's names and the election status.
    let leader_metrics = leader.metrics.encode().unwrap();
    for name in [
        "workqueue_depth{name=\"configmaps\"}",
        "workqueue_adds_total{name=\"configmaps\"} 3",
        "workqueue_retries_total{name=\"configmaps\"}",
        "workqueue_queue_duration_seconds_count{name=\"configmaps\"} 3",
        "workqueue_work_duration_seconds_count{name=\"configmaps\"} 3",
        "workqueue_unfinished_work_seconds{name=\"configmaps\"}",
        "workqueue_longest_running_processor_seconds{name=\"configmaps\"}",
        "leader_election_master_status{name=\"test-lease\"} 1",
        "leader_election_transitions_total{name=\"test-lease\"}",
    ] {
        assert!(
            leader_metrics.contains(name),
            "leader /metrics lacks {name}:\n{leader_metrics}"
        );
    }
    let standby_metrics = standby.metrics.encode().unwrap();
    assert!(
        standby_metrics.contains("leader_election_master_status{name=\"test-lease\"} 0"),
        "{standby_metrics}"
    );
    assert!(
        !standby_metrics.contains("workqueue_adds_total{name=\"configmaps\"}"),
        "{standby_metrics}"
    );

    leader.stop().await;
    standby.stop().await;
    sim.shutdown().await;
}

async fn handover(release_on_cancel: bool) -> Duration {
    let sim = start_sim().await;
    let (leader, standby) = elect(&sim, || ReplicaOptions {
        release_on_cancel,
        ..ReplicaOptions::default()
    })
    .await;
    let killed_at = Instant::now();
    let old_leader = leader.identity.clone();
    leader.stop().await;
    assert_eq!(standby.readiness.snapshot().role, ReplicaRole::Standby);

    // Created after the old leader stopped and before the standby took over: only the
    // new leader can reconcile it, from its cache replay.
    create_config_map(&sim.client(), "created-during-handover").await;
    eventually(SETTLE, "the standby caches the new object", || {
        let cached = standby
            .config_maps
            .get_namespaced(NAMESPACE, "created-during-handover")
            .is_some();
        async move { cached }
    })
    .await;
    if standby.readiness.snapshot().role == ReplicaRole::Standby {
        assert_eq!(
            reconciled_by(&sim.client(), "created-during-handover").await,
            None,
            "a standby does not reconcile"
        );
    }

    let readiness = standby.readiness.clone();
    eventually(SETTLE, "the standby becomes a ready leader", move || {
        let snapshot = readiness.snapshot();
        async move { snapshot.role == ReplicaRole::Leader && snapshot.is_ready() }
    })
    .await;
    let took = killed_at.elapsed();

    let client = sim.client();
    let successor = standby.identity.clone();
    eventually(
        SETTLE,
        "the new leader reconciles the object created while it was standby",
        move || {
            let client = client.clone();
            let successor = successor.clone();
            async move {
                reconciled_by(&client, "created-during-handover")
                    .await
                    .as_deref()
                    == Some(successor.as_str())
            }
        },
    )
    .await;
    assert_ne!(old_leader, standby.identity);
    standby.stop().await;
    sim.shutdown().await;
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_without_release_hands_over_once_the_lease_expires() {
    let took = handover(false).await;
    // The standby must see the lease unrenewed for a full lease duration on its own
    // clock; it notices within a couple of (jittered) retry periods either side.
    let bound = LEASE_DURATION + RETRY_PERIOD.mul_f64(2.2 * 2.0) + Duration::from_millis(500);
    assert!(took <= bound, "handover took {took:?}, bound {bound:?}");
    assert!(
        took >= LEASE_DURATION - RETRY_PERIOD.mul_f64(2.2),
        "took over before expiry: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_releasing_leader_hands_over_well_within_the_lease_duration() {
    let took = handover(true).await;
    assert!(took < LEASE_DURATION, "handover took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_work_is_drained_before_the_lease_is_released() {
    let sim = start_sim().await;
    let slow = ("slow".to_string(), Duration::from_millis(1200));
    let (leader, standby) = elect(&sim, || ReplicaOptions {
        slow_key: Some(slow.clone()),
        ..ReplicaOptions::default()
    })
    .await;
    create_config_map(&sim.client(), "slow").await;
    // Let the slow reconcile start, then demote the leader mid-flight.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let finished = std::sync::Arc::clone(&leader.finished);
    let standby_readiness = standby.readiness.clone();
    let leader_identity = leader.identity.clone();
    leader.stop().await;

    let finished = finished.lock().clone();
    let (key, holder_after_drain) = finished
        .iter()
        .find(|(key, _)| key == "slow")
        .cloned()
        .expect("the in-flight reconcile finished during the drain");
    assert_eq!(key, "slow");
    assert_eq!(
        holder_after_drain.as_deref(),
        Some(leader_identity.as_str()),
        "the lease is still held while the leader drains, so no successor overlaps"
    );
    // And the successor takes over only after the release.
    eventually(
        SETTLE,
        "the standby takes over after the release",
        move || {
            let role = standby_readiness.snapshot().role;
            async move { role == ReplicaRole::Leader }
        },
    )
    .await;
    standby.stop().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_moves_from_not_ready_to_leader_and_back_to_stopped() {
    let sim = start_sim().await;
    let replica = start_replica(&sim, "solo", ReplicaOptions::default());
    let readiness = replica.readiness.clone();
    eventually(
        SETTLE,
        "the single replica leads with running workers",
        move || {
            let snapshot = readiness.snapshot();
            async move {
                snapshot.is_ready() && snapshot.role == ReplicaRole::Leader && snapshot.leader_ready
            }
        },
    )
    .await;
    assert_eq!(
        readyz(&replica.readiness).await,
        (200, "ready: leader with running workers\n".to_string())
    );
    let readiness = replica.readiness.clone();
    replica.stop().await;
    let last = readiness.snapshot();
    assert_eq!(last.role, ReplicaRole::Stopped);
    assert!(!last.cache_ready, "caches stop with the manager");
    assert!(!last.leader_ready);
    assert_eq!(
        readyz(&readiness).await,
        (503, "not ready: caches are not synced\n".to_string())
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_the_lease_drains_keeps_its_caches_and_becomes_a_standby() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::api::{Api, Patch, PatchParams};

    let sim = start_sim().await;
    let replica = start_replica(&sim, "solo", ReplicaOptions::default());
    let readiness = replica.readiness.clone();
    eventually(SETTLE, "the replica leads", move || {
        let snapshot = readiness.snapshot();
        async move { snapshot.role == ReplicaRole::Leader && snapshot.leader_ready }
    })
    .await;

    // Another party takes the lease for 30 s; the replica can no longer renew.
    let leases: Api<Lease> = Api::namespaced(sim.client(), NAMESPACE);
    let now = jiff::Timestamp::now().to_string();
    let steal = serde_json::json!({"spec": {
        "holderIdentity": "intruder", "leaseDurationSeconds": 30, "renewTime": now, "acquireTime": now
    }});
    leases
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(&steal))
        .await
        .unwrap();

    let readiness = replica.readiness.clone();
    eventually(
        SETTLE,
        "the replica notices and becomes a ready standby",
        move || {
            let snapshot = readiness.snapshot();
            async move {
                snapshot.role == ReplicaRole::Standby
                    && snapshot.is_ready()
                    && !snapshot.leader_ready
            }
        },
    )
    .await;
    assert_eq!(
        replica
            .metrics
            .encode()
            .unwrap()
            .lines()
            .find(|line| line.starts_with("leader_election_master_status")),
        Some("leader_election_master_status{name=\"test-lease\"} 0")
    );
    let holder = leases
        .get(LEASE)
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.holder_identity);
    assert_eq!(
        holder.as_deref(),
        Some("intruder"),
        "a demoted replica never releases someone else's lease"
    );

    // Caches keep running and serving; the demoted replica reconciles nothing.
    create_config_map(&sim.client(), "after-demotion").await;
    eventually(
        SETTLE,
        "the demoted replica's cache still follows the cluster",
        || {
            let cached = replica
                .config_maps
                .get_namespaced(NAMESPACE, "after-demotion")
                .is_some();
            async move { cached }
        },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(reconciled_by(&sim.client(), "after-demotion").await, None);
    assert!(replica.mutations.matching("/configmaps").is_empty());
    replica.stop().await;
    sim.shutdown().await;
}
