//! The Mokka controller under kube-sim's fault injection (kube-sim only:
//! the real lane cannot inject faults): conflict storms, server errors,
//! dropped watches, a forced 410 and a 10 s outage must converge to the
//! same racks and projections as a fault-free run, and the live Node GET
//! stays bounded when the server hangs; a policy whose status writes fail
//! does not hold back another policy's status.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::ResourceExt;
use kube_sim::{Fault, Verb};
use mokka::identity::rack_name;

use crate::mokka_e2e::support::*;

/// Rack index → bound Node names, and Node name → projected, once converged.
async fn converge(cluster: &Cluster, limit: Duration) -> BTreeMap<i32, Vec<Option<String>>> {
    let uid = cluster
        .inventories()
        .get("inv")
        .await
        .unwrap()
        .uid()
        .unwrap();
    eventually_within(
        limit,
        "racks bound and every bound Node projected",
        || async {
            let mut state = BTreeMap::new();
            for index in 0..3 {
                let rack = cluster
                    .racks()
                    .get_opt(&rack_name("inv", &uid, "compute", index))
                    .await
                    .ok()??;
                for slot in &rack.spec.nodes {
                    let node = cluster
                        .nodes()
                        .get(&slot.node_ref.as_ref()?.name)
                        .await
                        .ok()?;
                    if !projected_onto(&node, &rack) {
                        return None;
                    }
                }
                state.insert(index as i32, bound_names(&rack));
            }
            let programmed =
                condition(&cluster.inventories().get("inv").await.ok()?, "Programmed")?;
            (programmed.0 == "True").then_some(state)
        },
    )
    .await
}

async fn scenario(cluster: &Cluster) {
    cluster.create_profile("two-node", 2, 1).await;
    for i in 0..6 {
        cluster.create_node(&format!("node-{i}"), "faults").await;
    }
    cluster
        .create_inventory("inv", "two-node", 3, "faults")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_errors_dropped_watches_a_forced_410_and_an_outage_converge_like_a_fault_free_run()
 {
    let clean = Cluster::start_sim().await;
    scenario(&clean).await;
    let replica = clean.start_leader("clean").await;
    let expected = converge(&clean, Duration::from_secs(30)).await;
    replica.stop().await;

    let faulty = Cluster::start_sim().await;
    let sim = faulty.sim().unwrap();
    let faults = sim.faults();
    faults.seed(7);
    faults
        .add(
            Fault::error(409)
                .on(Verb::Update, "sgpuracks")
                .probability(0.5),
        )
        .unwrap();
    faults
        .add(Fault::error(409).on(Verb::Create, "sgpuracks").times(2))
        .unwrap();
    faults
        .add(Fault::error(500).on(Verb::Patch, "nodes").times(4))
        .unwrap();
    faults
        .add(
            Fault::error(500)
                .on(Verb::Update, "sgpuinventories")
                .times(3),
        )
        .unwrap();
    faults
        .add(Fault::close_watch_after(3).resource("nodes"))
        .unwrap();
    faults
        .add(Fault::expire_next_watch().resource("sgpuracks"))
        .unwrap();
    scenario(&faulty).await;
    let replica = faulty.start_leader("faulty").await;
    // A 10 s outage while the controller works.
    tokio::time::sleep(Duration::from_millis(200)).await;
    faults.outage(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let converged = converge(&faulty, Duration::from_secs(90)).await;
    assert_eq!(
        converged, expected,
        "the same bindings as the fault-free run"
    );
    assert!(
        sim.metrics()
            .faults_injected("update", "sgpuracks", "error_409")
            + sim
                .metrics()
                .faults_injected("create", "sgpuracks", "error_409")
            > 0
    );
    assert!(
        sim.metrics().faults_injected("patch", "nodes", "error_500") > 0,
        "the Node 500s were hit"
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_node_get_timeout_bounds_a_server_that_does_not_answer() {
    let cluster = Cluster::start_sim().await;
    cluster.create_node("node-a", "live").await;
    let sim = cluster.sim().unwrap();
    sim.faults()
        .add(Fault::latency(Duration::from_secs(30)).on(Verb::Get, "nodes"))
        .unwrap();
    let live = mokka::controller::nodes::LiveNodes::new(
        cluster.client.clone(),
        1,
        Duration::from_millis(200),
    );
    let started = std::time::Instant::now();
    let error = live
        .get("node-a", &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        error.to_string(),
        "live GET of Node \"node-a\" timed out after 200ms"
    );

    // The caller's cancellation is honoured as well, while waiting for a slot too.
    let cancel = tokio_util::sync::CancellationToken::new();
    let (first, ()) = tokio::join!(live.get("node-a", &cancel), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    assert!(matches!(
        first,
        Err(mokka::controller::nodes::LiveNodeError::Cancelled { .. })
    ));
}

/// A status write that keeps failing for one policy neither stops nor
/// delays the status of the next one, the joined error names the policy
/// that failed, and the failed one converges once the server takes its
/// writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_policys_failing_status_write_does_not_hold_back_another_policys_status() {
    let log = CapturedLog::install();
    let cluster = Cluster::start_sim().await;
    cluster.create_profile("policy-shape", 1, 2).await;
    cluster
        .create_inventory("inv", "policy-shape", 1, "status-faults")
        .await;
    let faults = cluster.sim().unwrap().faults();
    faults
        .add(
            Fault::error(500)
                .on(Verb::Update, "sgpuruntimepolicies/status")
                .name("broken"),
        )
        .unwrap();
    let leader = cluster.start_leader("status-faults").await;
    // Decisions are written in name order: "broken" is tried first.
    cluster
        .create_policy(
            "broken",
            "inv",
            serde_json::json!({}),
            serde_json::json!({"deviceState": "Failed"}),
        )
        .await;
    cluster
        .create_policy(
            "healthy",
            "inv",
            serde_json::json!({"rackIndexes": [0]}),
            serde_json::json!({"telemetry": {"temperature": {"mode": "Fixed", "gpuCelsius": 90}}}),
        )
        .await;
    let policies = cluster.policies();
    let healthy = eventually("policy healthy to be Accepted", || async {
        policy_condition(&policies.get("healthy").await.ok()?).filter(|c| c.1 == "Accepted")
    })
    .await;
    assert_eq!(healthy.0, "True");
    eventually("the joined error to name the failing policy", || async {
        log.text()
            .contains(r#"update runtime policy "broken" status: "#)
            .then_some(())
    })
    .await;
    let broken = policies.get("broken").await.unwrap();
    assert_eq!(policy_condition(&broken), None, "{:?}", broken.status);
    let sim = cluster.sim().unwrap();
    assert!(
        sim.metrics()
            .faults_injected("update", "sgpuruntimepolicies/status", "error_500")
            > 0
    );

    // The failed inventory is retried: once writes go through, it converges.
    faults.clear();
    let broken = eventually("policy broken to be Accepted after the fault", || async {
        policy_condition(&policies.get("broken").await.ok()?).filter(|c| c.1 == "Accepted")
    })
    .await;
    assert_eq!(broken.0, "True");
    leader.stop().await;
}
