//! The policy/v1 Eviction subresource through kube-rs's `evict`.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::support::{sim, status_of};

async fn pod(pods: &Api<Pod>, name: &str) {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "gpu"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
}

async fn budget(budgets: &Api<PodDisruptionBudget>, allowed: i64) {
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "gpu"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "gpu"}}},
    }))
    .unwrap();
    let created = budgets.create(&PostParams::default(), &pdb).await.unwrap();
    let generation = created.metadata.generation.unwrap_or(1);
    budgets
        .patch_status(
            "gpu",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "observedGeneration": generation, "disruptionsAllowed": allowed,
                "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1,
            }})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn an_eviction_deletes_a_pod_its_budget_allows_and_is_429_when_the_budget_has_none_left() {
    let sim = sim().await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "default");
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(sim.client(), "default");

    // No budget: the pod goes.
    pod(&pods, "free").await;
    pods.evict("free", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("free").await.unwrap().is_none());

    pod(&pods, "a").await;
    pod(&pods, "b").await;
    budget(&budgets, 1).await;
    pods.evict("a", &EvictParams::default()).await.unwrap();
    assert!(pods.get_opt("a").await.unwrap().is_none());
    let left = budgets.get_status("gpu").await.unwrap();
    assert_eq!(left.status.unwrap().disruptions_allowed, 0);

    let refused = status_of(pods.evict("b", &EvictParams::default()).await);
    assert_eq!(refused.code, 429);
    assert_eq!(
        refused.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    let cause = &refused.details.unwrap().causes[0];
    assert_eq!(cause.reason, "DisruptionBudget");
    assert_eq!(
        cause.message,
        "The disruption budget gpu needs 1 healthy pods and has 1 currently"
    );
    assert!(
        pods.get_opt("b").await.unwrap().is_some(),
        "the refused pod stays"
    );
}
