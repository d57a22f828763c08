//! The node API's token and access reviews under a burst of requests
//! (kube-sim only: it counts the reviews the API server received). Who may
//! read assignments is tested on both lanes in `mokka_e2e::node_api`.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use mokka::controller::node_api::auth::Authenticator;
use serde_json::json;

const TOKEN: &str = "burst-agent-token";
const USER: &str = "system:serviceaccount:mokka-system:burst-agents";

async fn sim_with_reader() -> kube_sim::KubeSim {
    let sim = kube_sim::KubeSim::builder()
        .kubelet(kube_sim::KubeletConfig::disabled())
        .static_tokens([kube_sim::tokens::StaticToken::new(
            TOKEN,
            USER,
            "burst-agents-uid",
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:mokka-system",
            ],
        )])
        .start()
        .await
        .expect("kube-sim");
    let client = sim.client();
    Api::<ClusterRole>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "burst-rack-reader"},
                "rules": [{"apiGroups": ["mokka.nvidia.com"], "resources": ["sgpuracks"], "verbs": ["get"]}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(client)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "burst-agents"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "burst-rack-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "burst-agents", "namespace": "mokka-system"}]
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    sim
}

/// Sends `requests` concurrent authentications and authorizations of the
/// shared token and checks each one succeeded.
async fn burst(auth: &Arc<Authenticator>, requests: usize) {
    let mut tasks = Vec::new();
    for _ in 0..requests {
        let auth = Arc::clone(auth);
        tasks.push(tokio::spawn(async move {
            let caller = auth.authenticate(TOKEN).await.expect("authenticated");
            auth.authorize(&caller, "any-node").await.expect("allowed");
            caller.username
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), USER);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_requests_sharing_a_token_sends_one_token_review_and_one_access_review_per_expiry()
 {
    let sim = sim_with_reader().await;
    let reviews = |resource: &str| sim.metrics().requests("create", resource, 201);
    let (tokens_before, access_before) = (reviews("tokenreviews"), reviews("subjectaccessreviews"));
    let ttl = Duration::from_millis(500);
    let auth = Arc::new(Authenticator::with_ttl(sim.client(), ttl));

    burst(&auth, 64).await;
    assert_eq!(reviews("tokenreviews") - tokens_before, 1);
    assert_eq!(reviews("subjectaccessreviews") - access_before, 1);

    burst(&auth, 64).await;
    assert_eq!(
        reviews("tokenreviews") - tokens_before,
        1,
        "answered from the cache within the TTL"
    );

    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    burst(&auth, 64).await;
    assert_eq!(
        reviews("tokenreviews") - tokens_before,
        2,
        "one more review after the expiry, not one per waiting request"
    );
    assert_eq!(reviews("subjectaccessreviews") - access_before, 2);
}
