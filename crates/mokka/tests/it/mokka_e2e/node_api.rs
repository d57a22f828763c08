//! The node-agent HTTP API (issue 14 item 3) through the controller's real
//! router, with tokens reviewed by the API server of the lane (kube-sim or
//! the real control plane).

use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use http_body_util::BodyExt;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use mokka::controller::MokkaController;
use mokka::identity::rack_name;
use mokka::node_view::NodeAssignments;
use mokka::plan::options::Options;
use serde_json::{Value, json};
use tower::ServiceExt;

use super::support::*;

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Value,
}

async fn get(router: &Router, uri: &str, token: Option<&str>, etag: Option<&str>) -> Answer {
    let mut request = Request::get(uri);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if let Some(etag) = etag {
        request = request.header(header::IF_NONE_MATCH, etag);
    }
    let response = router
        .clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .expect("the router answers");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        body,
    }
}

fn etag(answer: &Answer) -> String {
    answer
        .headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .expect("an ETag")
        .to_string()
}

/// A profile of one Node with four GPUs, an inventory of one rack, the
/// token Node, and a leader that binds it; returns the Node's UID.
async fn bound_token_node(cluster: &Cluster, inventory: &str) -> (String, String) {
    cluster.create_profile("agent-shape", 1, 4).await;
    let node = cluster.create_node(TOKEN_NODE, "agents").await;
    let created = cluster
        .create_inventory(inventory, "agent-shape", 1, "agents")
        .await;
    let rack = rack_name(inventory, &created.uid().unwrap(), "compute", 0);
    (node.uid().unwrap(), rack)
}

async fn wait_bound(cluster: &Cluster, rack: &str) {
    let racks = cluster.racks();
    eventually("the token Node to be bound", || async {
        racks
            .get_opt(rack)
            .await
            .unwrap()
            .filter(|rack| bound_names(rack) == vec![Some(TOKEN_NODE.to_string())])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_itself_and_an_allowed_service_account_read_the_assignment_and_everyone_else_is_refused()
 {
    let cluster = Cluster::start().await;
    let (uid, rack) = bound_token_node(&cluster, "auth-inv").await;
    let replica = cluster.start_leader("auth-leader").await;
    wait_bound(&cluster, &rack).await;
    let router = replica.controller.node_api().router();
    let uri = format!("/v1alpha1/nodes/{TOKEN_NODE}/assignment?uid={uid}");

    let anonymous = get(&router, &uri, None, None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        anonymous.headers.get(header::WWW_AUTHENTICATE).unwrap(),
        "Bearer realm=\"mokka\""
    );
    assert_eq!(
        anonymous.body["message"],
        "a bearer token is required (Authorization: Bearer <token>)"
    );
    let forged = get(&router, &uri, Some("not-a-token"), None).await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);

    let node = cluster.node_token.clone();
    // The replica answers from its caches, which may trail the bound rack
    // by a moment: wait for the answer that shows the binding.
    let own = eventually("the Node's own answer with its assignment", || async {
        let answer = get(&router, &uri, Some(&node), None).await;
        let assigned = answer.body["assignments"].as_array().map_or(0, Vec::len);
        (answer.status == StatusCode::OK && assigned == 1).then_some(answer)
    })
    .await;
    let view: NodeAssignments = serde_json::from_value(own.body.clone()).unwrap();
    assert_eq!(view.node.name, TOKEN_NODE);
    assert_eq!(view.assignments.len(), 1);
    assert_eq!(view.assignments[0].rack.name, rack);
    assert_eq!(view.assignments[0].gpus.len(), 4);
    assert_eq!(view.assignments[0].node.gpus.count, 4);

    let other = get(
        &router,
        "/v1alpha1/nodes/another-node/assignment?uid=u-1",
        Some(&node),
        None,
    )
    .await;
    assert_eq!(other.status, StatusCode::FORBIDDEN);
    assert_eq!(
        other.body["message"],
        format!(
            "system:node:{TOKEN_NODE} may read only its own Node's assignment, not \"another-node\""
        )
    );

    let reader = cluster.service_account_token("agent-reader", true).await;
    let allowed = eventually("the allowed ServiceAccount's answer", || async {
        let answer = get(&router, &uri, Some(&reader), None).await;
        (answer.status == StatusCode::OK).then_some(answer)
    })
    .await;
    assert_eq!(allowed.body, own.body, "the same answer for every reader");
    let stranger = cluster.service_account_token("agent-stranger", false).await;
    let refused = get(&router, &uri, Some(&stranger), None).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(
        refused.body["message"],
        format!(
            "system:serviceaccount:{LEASE_NAMESPACE}:agent-stranger may not get sgpuracks.mokka.nvidia.com"
        )
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_names_uids_and_query_parameters_get_400_with_a_message() {
    let cluster = Cluster::start().await;
    let replica = cluster.start_replica("malformed-replica").await;
    let router = replica.controller.node_api().router();
    let token = cluster.node_token.clone();
    for (uri, message) in [
        (
            format!("/v1alpha1/nodes/{TOKEN_NODE}/assignment"),
            "the uid query parameter is required: the Node's metadata.uid",
        ),
        (
            "/v1alpha1/nodes/Bad_Name/assignment?uid=u".to_string(),
            "Node name \"Bad_Name\" is not a valid Kubernetes object name (a lowercase RFC 1123 subdomain of at most 253 characters)",
        ),
        (
            format!("/v1alpha1/nodes/{TOKEN_NODE}/assignment?uid=%00%ff"),
            "uid \"\\0\u{fffd}\" is not a Kubernetes UID (1 to 128 letters, digits, '-', '_' or '.')",
        ),
        (
            format!("/v1alpha1/nodes/{TOKEN_NODE}/assignment?uid=u&watch=true&timeoutSeconds=9999"),
            "timeoutSeconds=\"9999\": the value must be a whole number of seconds from 1 to 300",
        ),
        (
            format!("/v1alpha1/nodes/{TOKEN_NODE}/assignment?uid=u&since=1"),
            "unknown query parameter \"since\": only uid, watch and timeoutSeconds are accepted",
        ),
    ] {
        let answer = get(&router, &uri, Some(&token), None).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(answer.body["message"], message, "{uri}");
        assert_eq!(answer.body["reason"], "BadRequest");
    }
    let openapi = get(&router, "/v1alpha1/openapi.json", None, None).await;
    assert_eq!(openapi.status, StatusCode::OK);
    assert!(
        openapi.body["paths"]["/v1alpha1/nodes/{name}/assignment"]["get"].is_object(),
        "the OpenAPI description names the assignment route"
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_answers_503_with_retry_after_across_a_profile_edit_then_200_after_the_rack_re_renders()
 {
    let cluster = Cluster::start().await;
    // Before the caches sync: 503 CacheNotReady.
    let cold = MokkaController::new(cluster.controller_client.clone(), Options::default()).unwrap();
    let cold_router = cold.node_api().router();
    let token = cluster.node_token.clone();
    let answer = get(
        &cold_router,
        &format!("/v1alpha1/nodes/{TOKEN_NODE}/assignment?uid=u"),
        Some(&token),
        None,
    )
    .await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.body["reason"], "CacheNotReady");
    assert_eq!(answer.headers.get(header::RETRY_AFTER).unwrap(), "2");

    let (uid, rack) = bound_token_node(&cluster, "stale-inv").await;
    let leader = cluster.start_leader("stale-leader").await;
    wait_bound(&cluster, &rack).await;
    leader.stop().await;
    hold_lease(&cluster, "another-replica", 3600).await;
    let standby = cluster.start_replica("stale-standby").await;
    let router = standby.controller.node_api().router();
    let uri = format!("/v1alpha1/nodes/{TOKEN_NODE}/assignment?uid={uid}");
    let before = mutating_requests(&cluster);
    let first = eventually("the standby's answer", || async {
        let answer = get(&router, &uri, Some(&token), None).await;
        (answer.status == StatusCode::OK).then_some(answer)
    })
    .await;
    assert_eq!(standby.controller.queued_keys(), 0);
    if cluster.sim().is_some() {
        assert_eq!(
            mutating_requests(&cluster),
            before,
            "answering makes no mutating request"
        );
    }

    cluster
        .profiles()
        .patch(
            "agent-shape",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"defaults": {"runtime": {"deviceState": "Degraded"}}}})),
        )
        .await
        .unwrap();
    let stale = eventually("503 while the rack is not re-rendered", || async {
        let answer = get(&router, &uri, Some(&token), None).await;
        (answer.status == StatusCode::SERVICE_UNAVAILABLE).then_some(answer)
    })
    .await;
    assert_eq!(stale.body["reason"], "StaleRuntimeInputs");
    assert!(
        stale.body["message"]
            .as_str()
            .unwrap()
            .starts_with("cached runtime inputs do not match the rendered rack: SGPURackProfile \"agent-shape\" is no longer generation 1 of UID"),
        "{}",
        stale.body
    );
    assert_eq!(stale.headers.get(header::RETRY_AFTER).unwrap(), "2");

    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(cluster.client.clone(), LEASE_NAMESPACE);
    leases
        .delete(LEASE_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let fresh = eventually("200 after the rack re-renders", || async {
        let answer = get(&router, &uri, Some(&token), None).await;
        (answer.status == StatusCode::OK).then_some(answer)
    })
    .await;
    assert_ne!(
        etag(&fresh),
        etag(&first),
        "a new profile revision, a new ETag"
    );
    assert_eq!(
        fresh.body["assignments"][0]["gpus"][0]["runtime"]["deviceState"],
        "Degraded"
    );
    standby.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_none_match_is_304_at_once_and_a_long_poll_wakes_within_a_second_of_a_policy_change() {
    let cluster = Cluster::start().await;
    let (uid, rack) = bound_token_node(&cluster, "watch-inv").await;
    let replica = cluster.start_leader("watch-leader").await;
    wait_bound(&cluster, &rack).await;
    let router = replica.controller.node_api().router();
    let token = cluster.node_token.clone();
    let uri = format!("/v1alpha1/nodes/{TOKEN_NODE}/assignment?uid={uid}");
    // The replica's caches, not the API server, decide the answer: wait
    // until they hold the binding too (an unbound Node's answer is a 200
    // with no assignment, which the binding would change a moment later).
    let first = eventually("the first answer with the binding", || async {
        let answer = get(&router, &uri, Some(&token), None).await;
        let bound = answer.body["assignments"]
            .as_array()
            .is_some_and(|assignments| assignments.len() == 1);
        (answer.status == StatusCode::OK && bound).then_some(answer)
    })
    .await;
    let tag = etag(&first);

    let same = get(&router, &uri, Some(&token), Some(&tag)).await;
    assert_eq!(same.status, StatusCode::NOT_MODIFIED);
    assert_eq!(etag(&same), tag);

    // A long-poll with nothing changing ends with 304 at its timeout.
    let started = Instant::now();
    let timed_out = get(
        &router,
        &format!("{uri}&watch=true&timeoutSeconds=1"),
        Some(&token),
        Some(&tag),
    )
    .await;
    assert_eq!(timed_out.status, StatusCode::NOT_MODIFIED);
    assert!(started.elapsed() >= Duration::from_millis(900));

    // A policy change wakes a waiting long-poll with the new state.
    let watch = {
        let router = router.clone();
        let uri = format!("{uri}&watch=true&timeoutSeconds=30");
        let token = token.clone();
        let tag = tag.clone();
        tokio::spawn(async move {
            let answer = get(&router, &uri, Some(&token), Some(&tag)).await;
            (answer, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let changed_at = Instant::now();
    cluster
        .create_policy(
            "watch-hot",
            "watch-inv",
            json!({"gpuIndexes": [2]}),
            json!({"telemetry": {"temperature": {"gpuCelsius": 91}}}),
        )
        .await;
    let (answer, answered_at) = watch.await.unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    let waited = answered_at - changed_at;
    assert!(
        waited < Duration::from_secs(1),
        "the long-poll answered {waited:?} after the policy change"
    );
    assert_ne!(etag(&answer), tag);
    assert_eq!(
        answer.body["assignments"][0]["gpus"][2]["runtime"]["telemetry"]["temperature"]["gpuCelsius"],
        91
    );
    replica.stop().await;
}

/// Creates `value` unless an object of that name exists (the real lane
/// keeps what earlier runs made).
async fn create_once<K>(api: &Api<K>, value: Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(value).unwrap();
    match api.create(&kube::api::PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating {object:?}: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_reads_any_assignment_a_user_without_the_grant_gets_403_and_a_node_only_its_own() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use mokka::controller::node_api::auth::{AuthError, Authenticator};

    let cluster = Cluster::start().await;
    // Even were every Node allowed to get racks, a Node reads only its own.
    create_once(
        &Api::<ClusterRole>::all(cluster.client.clone()),
        json!({
            "metadata": {"name": "mokka-e2e-nodes-read-racks"},
            "rules": [{"apiGroups": ["mokka.nvidia.com"], "resources": ["sgpuracks"], "verbs": ["get"]}]
        }),
    )
    .await;
    create_once(
        &Api::<ClusterRoleBinding>::all(cluster.client.clone()),
        json!({
            "metadata": {"name": "mokka-e2e-nodes-read-racks"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mokka-e2e-nodes-read-racks"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]
        }),
    )
    .await;
    let auth = Authenticator::new(cluster.controller_client.clone());

    let admin = auth.authenticate(&cluster.admin_token).await.unwrap();
    assert_eq!(admin.username, "alice");
    auth.authorize(&admin, TOKEN_NODE)
        .await
        .expect("an admin reads any Node's assignment");
    auth.authorize(&admin, "another-node").await.unwrap();

    let user = auth.authenticate(&cluster.ungranted_token).await.unwrap();
    assert_eq!(
        auth.authorize(&user, TOKEN_NODE).await,
        Err(AuthError::Forbidden(
            "bob may not get sgpuracks.mokka.nvidia.com".into()
        ))
    );

    let node = auth.authenticate(&cluster.node_token).await.unwrap();
    // kube-apiserver's RBAC cache may lag the binding just made.
    let deadline = Instant::now() + Duration::from_secs(20);
    while auth.authorize(&node, TOKEN_NODE).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the Node never read its own assignment"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        auth.authorize(&node, "another-node").await,
        Err(AuthError::Forbidden(format!(
            "system:node:{TOKEN_NODE} may read only its own Node's assignment, not \"another-node\""
        )))
    );
}
