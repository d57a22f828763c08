//! Caches live as long as the process, handlers and workers only for a
//! leadership term, as in upstream (driven here without an election).

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use mokka::controller::MokkaController;
use mokka::identity::rack_name;
use mokka::plan::options::Options;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_leader_refuses_before_the_caches_sync_with_the_cache_not_ready_error() {
    let cluster = Cluster::start().await;
    let controller =
        MokkaController::new(cluster.controller_client.clone(), Options::default()).unwrap();
    assert!(!controller.cache_ready());
    let error = controller
        .run_leader(CancellationToken::new())
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "controller caches are not ready");
    assert!(!controller.leader_ready());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_promotion_replays_the_caches_and_demotion_keeps_them_running_with_no_further_writes()
{
    let cluster = Cluster::start().await;
    cluster.create_profile("one-node", 1, 1).await;
    cluster.create_node("node-a", "warm").await;
    let inventory = cluster.create_inventory("inv", "one-node", 1, "warm").await;
    let uid = inventory.uid().unwrap();
    let name = rack_name("inv", &uid, "compute", 0);
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
    assert!(controller.cache_ready());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        cluster.racks().get_opt(&name).await.unwrap().is_none(),
        "cache-only work reconciles nothing"
    );

    let term = CancellationToken::new();
    let leader = {
        let (controller, term) = (Arc::clone(&controller), term.clone());
        tokio::spawn(async move { controller.run_leader(term).await })
    };
    eventually(
        "handler replay to create the rack and bind the Node",
        || async {
            cluster
                .racks()
                .get_opt(&name)
                .await
                .unwrap()
                .filter(|rack| bound_names(rack) == vec![Some("node-a".to_string())])
        },
    )
    .await;
    assert!(controller.leader_ready());
    term.cancel();
    leader.await.unwrap().unwrap();
    assert!(!controller.leader_ready());
    assert!(
        controller.cache_ready(),
        "cancelling leadership leaves the caches ready"
    );

    // Later changes still reach the cache; nothing is written any more.
    let label = json!({"metadata": {"labels": {"team": "observed"}}});
    cluster
        .racks()
        .patch(&name, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    eventually("the cache to see the later rack update", || async {
        controller
            .cached_rack(&name)
            .filter(|rack| rack.labels().get("team").map(String::as_str) == Some("observed"))
    })
    .await;
    let writes = controller.metrics().rack_write_count();
    let patches = controller.metrics().node_patches.get();
    cluster.delete_node("node-a").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        controller.metrics().rack_write_count(),
        writes,
        "no rack write after the handlers detached"
    );
    assert_eq!(controller.metrics().node_patches.get(), patches);
    assert_eq!(controller.queued_keys(), 0);
    let rack = cluster.racks().get(&name).await.unwrap();
    assert_eq!(
        bound_names(&rack),
        vec![Some("node-a".to_string())],
        "a demoted replica releases nothing"
    );
    caches_stop.cancel();
    caches.await.unwrap().unwrap();
    assert!(!controller.cache_ready());
}
