//! TokenRequest and TokenReview through the kube client: issued
//! ServiceAccount tokens and static `--token-auth-file` tokens authenticate,
//! anything else does not, and a deleted ServiceAccount's tokens die with it.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec, TokenReview};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DeleteParams, PostParams};
use kube_sim::KubeSim;
use kube_sim::tokens::StaticToken;
use serde_json::json;

use super::support::status_of;

async fn review(client: &kube::Client, token: &str) -> serde_json::Value {
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let review: TokenReview = serde_json::from_value(json!({"spec": {"token": token}})).unwrap();
    let answered = reviews
        .create(&PostParams::default(), &review)
        .await
        .expect("a TokenReview is answered");
    serde_json::to_value(answered.status).unwrap()
}

#[tokio::test]
async fn a_token_request_issues_a_token_that_a_token_review_maps_to_the_service_account_until_it_is_deleted()
 {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = sim.client();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "agent"}})).unwrap();
    let account = accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let issued = accounts
        .create_token_request(
            "agent",
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    expiration_seconds: Some(1200),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .expect("TokenRequest is answered");
    let status = issued.status.expect("a token");
    assert_eq!(issued.spec.expiration_seconds, Some(1200));
    assert_eq!(
        issued.spec.audiences,
        vec![kube_sim::tokens::DEFAULT_AUDIENCE.to_string()]
    );
    assert!(status.expiration_timestamp.0 > k8s_openapi::jiff::Timestamp::now());

    let answer = review(&client, &status.token).await;
    assert_eq!(answer["authenticated"], json!(true));
    assert_eq!(
        answer["user"]["username"],
        json!("system:serviceaccount:default:agent")
    );
    assert_eq!(answer["user"]["uid"], json!(account.metadata.uid.unwrap()));
    assert_eq!(
        answer["user"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );

    let rejected = review(&client, "not-a-token").await;
    assert_eq!(rejected["authenticated"], json!(null));
    assert_eq!(rejected["error"], json!("invalid bearer token"));

    accounts
        .delete("agent", &DeleteParams::default())
        .await
        .unwrap();
    let orphan = review(&client, &status.token).await;
    assert_ne!(orphan["authenticated"], json!(true));

    let short = accounts
        .create_token_request("agent", &PostParams::default(), &TokenRequest::default())
        .await;
    assert_eq!(status_of(short).code, 404, "no account, no token");
}

#[tokio::test]
async fn a_static_token_authenticates_its_user_and_a_too_short_token_request_is_invalid() {
    let file = "node-secret,system:node:gpu-1,node-uid,\"system:nodes\"\n";
    let sim = KubeSim::builder()
        .static_tokens(StaticToken::parse_file(file).unwrap())
        .start()
        .await
        .unwrap();
    let client = sim.client();
    let answer = review(&client, "node-secret").await;
    assert_eq!(answer["authenticated"], json!(true));
    assert_eq!(answer["user"]["username"], json!("system:node:gpu-1"));
    assert_eq!(
        answer["user"]["groups"],
        json!(["system:nodes", "system:authenticated"])
    );

    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "brief"}})).unwrap(),
        )
        .await
        .unwrap();
    let status = status_of(
        accounts
            .create_token_request(
                "brief",
                &PostParams::default(),
                &TokenRequest {
                    spec: TokenRequestSpec {
                        expiration_seconds: Some(60),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await,
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        status.message,
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
    );
}

/// `kubectl create token` sends its TokenRequest as protobuf; the token it
/// prints authenticates as the ServiceAccount for the audience asked for.
#[tokio::test]
async fn kubectl_create_token_prints_a_token_that_reviews_as_the_service_account() {
    let sim = KubeSim::builder().start().await.unwrap();
    let client = sim.client();
    let kubectl = crate::kubectl_parity::Kubectl::new(&sim);
    kubectl.ok(&["create", "serviceaccount", "agent"]).await;
    let token = kubectl
        .ok(&[
            "create",
            "token",
            "agent",
            "--audience",
            "mokka-node-api",
            "--duration",
            "10m",
        ])
        .await;
    let token = token.trim();
    assert!(!token.is_empty(), "kubectl printed no token");
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let asked: TokenReview =
        serde_json::from_value(json!({"spec": {"token": token, "audiences": ["mokka-node-api"]}}))
            .unwrap();
    let answered = reviews
        .create(&PostParams::default(), &asked)
        .await
        .expect("a TokenReview is answered");
    let status = serde_json::to_value(answered.status).unwrap();
    assert_eq!(status["authenticated"], json!(true), "{status}");
    assert_eq!(
        status["user"]["username"],
        json!("system:serviceaccount:default:agent")
    );
    assert_eq!(status["audiences"], json!(["mokka-node-api"]), "{status}");
    // A missing ServiceAccount is the real server's NotFound, printed by kubectl.
    let missing = kubectl.run(&["create", "token", "nobody"]).await;
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("serviceaccounts \"nobody\" not found"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
}

/// `kubectl create -f` of a TokenReview finds its kind through discovery,
/// and the admin token reviews as the user `kubectl auth whoami` names, as
/// on kube-apiserver. kubectl's default strict validation stays on: a kind
/// without a PATCH operation is validated on the client, against the
/// OpenAPI v2 models client-go decodes from `/openapi/v2` as gnostic
/// protobuf, so a misspelt field is refused before anything is sent.
#[tokio::test]
async fn the_admin_token_reviews_as_the_user_kubectl_auth_whoami_names() {
    let sim = kube_sim::KubeSim::builder()
        .require_token()
        .tls()
        .start()
        .await
        .unwrap();
    let kubectl = crate::kubectl_parity::Kubectl::new(&sim);
    let review = kubectl.file(
        "review.yaml",
        &format!(
            "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: {}\n",
            sim.token().unwrap()
        ),
    );
    let created: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["create", "-f", &review, "-o", "json"]).await).unwrap();
    assert_eq!(created["status"]["authenticated"], true, "{created}");
    let whoami: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["auth", "whoami", "-o", "json"]).await).unwrap();
    assert_eq!(
        created["status"]["user"]["username"],
        whoami["status"]["userInfo"]["username"]
    );
    let mut reviewed: Vec<&str> = created["status"]["user"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g.as_str())
        .collect();
    let mut asked: Vec<&str> = whoami["status"]["userInfo"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g.as_str())
        .collect();
    reviewed.sort_unstable();
    asked.sort_unstable();
    assert_eq!(reviewed, asked);
    // A SubjectAccessReview is found the same way.
    let sar = kubectl.file(
        "sar.yaml",
        "apiVersion: authorization.k8s.io/v1\nkind: SubjectAccessReview\nspec:\n  user: nobody\n  resourceAttributes: {verb: get, resource: pods, namespace: default}\n",
    );
    let answered: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["create", "-f", &sar, "-o", "json"]).await).unwrap();
    assert_eq!(answered["status"]["allowed"], false, "{answered}");
    // Client-side validation is real: a misspelt spec field is refused by
    // kubectl itself, naming the field and the v2 definition it is not in.
    let misspelt = kubectl.file(
        "misspelt.yaml",
        "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  tokn: abc\n",
    );
    let refused = kubectl.run(&["create", "-f", &misspelt]).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"unknown field "tokn" in io.k8s.api.authentication.v1.TokenReviewSpec"#),
        "{stderr}"
    );
}

/// A ServiceAccount-token Secret is filled as kube-controller-manager fills
/// it, and its token authenticates requests and reviews as the account
/// while the Secret exists and the account keeps its uid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_token_secret_is_filled_and_its_token_reviews_as_the_account() {
    use k8s_openapi::api::core::v1::Secret;
    let sim = KubeSim::builder()
        .tls()
        .require_token()
        .authorization(kube_sim::Authorization::Rbac)
        .start()
        .await
        .unwrap();
    let client = sim.client();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "legacy"}})).unwrap();
    let account = accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "legacy-token", "annotations": {"kubernetes.io/service-account.name": "legacy"}},
        "type": "kubernetes.io/service-account-token"
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let filled = loop {
        let secret = secrets.get("legacy-token").await.unwrap();
        if secret
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("token"))
        {
            break secret;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the token Secret is not filled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let data = filled.data.clone().unwrap();
    let token = String::from_utf8(data["token"].0.clone()).unwrap();
    assert_eq!(data["namespace"].0, b"default");
    assert_eq!(
        String::from_utf8(data["ca.crt"].0.clone()).unwrap(),
        sim.ca_pem().unwrap()
    );
    assert_eq!(
        filled.metadata.annotations.unwrap()["kubernetes.io/service-account.uid"],
        account.metadata.uid.clone().unwrap()
    );

    let answer = review(&client, &token).await;
    assert_eq!(answer["authenticated"], json!(true), "{answer}");
    assert_eq!(
        answer["user"]["username"],
        "system:serviceaccount:default:legacy"
    );
    assert_eq!(answer["user"]["uid"], json!(account.metadata.uid));
    // The token also authenticates requests: with no RBAC grant it gets the
    // real 403 naming the account, not a 401.
    let as_account = sim.http_client_with_token(Some(&token)).unwrap();
    let denied = Api::<Secret>::namespaced(as_account, "default")
        .list(&Default::default())
        .await;
    let status = status_of(denied);
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status
            .message
            .contains("system:serviceaccount:default:legacy"),
        "{}",
        status.message
    );
    // Another audience than the API's is refused.
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let other: TokenReview =
        serde_json::from_value(json!({"spec": {"token": token, "audiences": ["vault"]}})).unwrap();
    let answered = reviews
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    let answered = serde_json::to_value(answered.status).unwrap();
    assert_eq!(
        answered["error"],
        "invalid bearer token, token audiences is invalid"
    );
    // The token dies with its Secret.
    secrets
        .delete("legacy-token", &DeleteParams::default())
        .await
        .unwrap();
    let answer = review(&client, &token).await;
    assert_eq!(answer["error"], "invalid bearer token", "{answer}");
}
