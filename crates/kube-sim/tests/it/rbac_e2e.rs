//! RBAC enforcement for a ServiceAccount token, the same test on both
//! lanes (`GPUFLEET_TEST_CLUSTER`): on kube-sim with `.tls()` and
//! `.authorization(Rbac)`, on the real lane against kube-apiserver. Both
//! must answer the granted requests and deny the others with the same 403
//! Status, word for word, and a wrong token with the same 401.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube_sim::lane::{Lane, client_from_kubeconfig};
use kube_sim::{Authorization, KubeSim};

use crate::support::status_of;

/// The server under test: an admin client and a way to present a token.
enum Server {
    Sim(Box<KubeSim>),
    Real(Box<kube::Config>),
}

impl Server {
    async fn start() -> (Server, kube::Client) {
        match Lane::from_env().expect("GPUFLEET_TEST_CLUSTER is valid") {
            Lane::Sim => {
                let sim = KubeSim::builder()
                    .tls()
                    .authorization(Authorization::Rbac)
                    .start()
                    .await
                    .expect("kube-sim starts");
                let admin = sim.http_client().expect("an admin client");
                (Server::Sim(Box::new(sim)), admin)
            }
            Lane::Real(real) => {
                let admin = client_from_kubeconfig(&real.admin_kubeconfig)
                    .await
                    .expect("the real lane's admin kubeconfig");
                let kubeconfig = kube::config::Kubeconfig::read_from(&real.admin_kubeconfig)
                    .expect("the admin kubeconfig reads");
                let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .expect("the admin kubeconfig is usable");
                (Server::Real(Box::new(config)), admin)
            }
        }
    }

    /// A client presenting only `token` (no client certificate).
    fn client_with_token(&self, token: &str) -> kube::Client {
        match self {
            Server::Sim(sim) => sim.http_client_with_token(Some(token)).unwrap(),
            Server::Real(config) => {
                let mut config = (**config).clone();
                config.auth_info = kube::config::AuthInfo {
                    token: Some(token.to_string().into()),
                    ..Default::default()
                };
                kube::Client::try_from(config).unwrap()
            }
        }
    }
}

fn reader_role(namespace: &str) -> Role {
    Role {
        metadata: kube::api::ObjectMeta {
            name: Some("configmap-reader".into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs: vec!["get".into(), "list".into()],
            ..Default::default()
        }]),
    }
}

fn reader_binding(namespace: &str) -> RoleBinding {
    RoleBinding {
        metadata: kube::api::ObjectMeta {
            name: Some("configmap-reader".into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: "configmap-reader".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "reader".into(),
            namespace: Some(namespace.into()),
            ..Default::default()
        }]),
    }
}

#[tokio::test]
async fn a_service_account_token_gets_what_its_role_grants_and_kube_apiservers_403_otherwise() {
    let (server, admin) = Server::start().await;
    let namespace = format!("rbac-e2e-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some(namespace.clone());
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &namespace);
    let mut account = ServiceAccount::default();
    account.metadata.name = Some("reader".into());
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    Api::<Role>::namespaced(admin.clone(), &namespace)
        .create(&PostParams::default(), &reader_role(&namespace))
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &namespace)
        .create(&PostParams::default(), &reader_binding(&namespace))
        .await
        .unwrap();
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("visible".into());
    Api::<ConfigMap>::namespaced(admin.clone(), &namespace)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();

    let issued = accounts
        .create_token_request(
            "reader",
            &PostParams::default(),
            &k8s_openapi::api::authentication::v1::TokenRequest::default(),
        )
        .await
        .expect("TokenRequest answers");
    let token = issued.status.expect("a token").token;
    let reader = server.client_with_token(&token);
    let user = format!("system:serviceaccount:{namespace}:reader");

    // Granted. kube-apiserver's RBAC cache sees a new binding a moment later.
    let configmaps: Api<ConfigMap> = Api::namespaced(reader.clone(), &namespace);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match configmaps.get("visible").await {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "the binding is not in force yet");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("get of a granted ConfigMap failed: {e}"),
        }
    }
    configmaps
        .list(&ListParams::default())
        .await
        .expect("list is granted");

    // Denied: verb, resource, namespace and cluster scope in the message.
    let secrets: Api<Secret> = Api::namespaced(reader.clone(), &namespace);
    let status = status_of(secrets.list(&ListParams::default()).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        format!(
            r#"secrets is forbidden: User "{user}" cannot list resource "secrets" in API group "" in the namespace "{namespace}""#
        )
    );
    let details = status.details.expect("details");
    assert_eq!(
        (
            details.kind.as_str(),
            details.group.as_str(),
            details.name.as_str()
        ),
        ("secrets", "", "")
    );
    let status = status_of(configmaps.delete("visible", &DeleteParams::default()).await);
    assert_eq!(
        status.message,
        format!(
            r#"configmaps "visible" is forbidden: User "{user}" cannot delete resource "configmaps" in API group "" in the namespace "{namespace}""#
        )
    );
    assert_eq!(status.details.expect("details").name, "visible");
    let elsewhere: Api<ConfigMap> = Api::namespaced(reader.clone(), "default");
    let status = status_of(elsewhere.list(&ListParams::default()).await);
    assert_eq!(
        status.message,
        format!(
            r#"configmaps is forbidden: User "{user}" cannot list resource "configmaps" in API group "" in the namespace "default""#
        )
    );
    let nodes: Api<Node> = Api::all(reader.clone());
    let status = status_of(nodes.list(&ListParams::default()).await);
    assert_eq!(
        status.message,
        format!(
            r#"nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" at the cluster scope"#
        )
    );
    let roles: Api<Role> = Api::namespaced(reader.clone(), &namespace);
    let status = status_of(roles.get("configmap-reader").await);
    assert_eq!(
        status.message,
        format!(
            r#"roles.rbac.authorization.k8s.io "configmap-reader" is forbidden: User "{user}" cannot get resource "roles" in API group "rbac.authorization.k8s.io" in the namespace "{namespace}""#
        )
    );
    assert_eq!(
        status.details.expect("details").group,
        "rbac.authorization.k8s.io"
    );
    let (code, body) =
        crate::support::raw(&reader, "GET", "/metrics", "application/json", b"").await;
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        format!(r#"forbidden: User "{user}" cannot get path "/metrics""#)
    );
    // Discovery is every authenticated user's.
    let (code, _) = crate::support::raw(&reader, "GET", "/apis", "application/json", b"").await;
    assert_eq!(code, 200);

    // A token that is not one: 401 with the Unauthorized Status.
    let stranger = server.client_with_token("not-a-token");
    let status = status_of(
        Api::<ConfigMap>::namespaced(stranger, &namespace)
            .get("visible")
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (401, "Unauthorized", "Unauthorized")
    );

    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await
        .unwrap();
}
