//! RBAC enforcement for a ServiceAccount token, the same test on both
//! lanes (`GPUFLEET_TEST_CLUSTER`): on kube-sim with `.tls()` and
//! `.authorization(Rbac)`, on the real lane against kube-apiserver. Both
//! must answer the granted requests and deny the others with the same 403
//! Status, word for word, and a wrong token with the same 401.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
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

/// A ServiceAccount in a namespace of its own, the rights it is given one
/// ClusterRole at a time, and a client presenting its token. Every
/// cluster-scoped object a test makes carries `LABEL` for the cleanup.
struct Escalator {
    server: Server,
    admin: kube::Client,
    namespace: String,
    client: kube::Client,
    user: String,
}

const LABEL: &str = "gpufleet.test/rbac-escalation";

/// The groups kube-apiserver gives a ServiceAccount's token, as its
/// escalation refusal writes them.
fn groups_of(namespace: &str) -> String {
    format!(
        r#"["system:serviceaccounts" "system:serviceaccounts:{namespace}" "system:authenticated"]"#
    )
}

impl Escalator {
    async fn start(test: &str) -> Escalator {
        let (server, admin) = Server::start().await;
        let namespace = format!("{test}-{}", std::process::id());
        let mut ns = Namespace::default();
        ns.metadata.name = Some(namespace.clone());
        Api::<Namespace>::all(admin.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &namespace);
        let mut account = ServiceAccount::default();
        account.metadata.name = Some("escalator".into());
        accounts
            .create(&PostParams::default(), &account)
            .await
            .unwrap();
        let issued = accounts
            .create_token_request(
                "escalator",
                &PostParams::default(),
                &k8s_openapi::api::authentication::v1::TokenRequest::default(),
            )
            .await
            .expect("TokenRequest answers");
        let token = issued.status.expect("a token").token;
        let client = server.client_with_token(&token);
        let user = format!("system:serviceaccount:{namespace}:escalator");
        Escalator {
            server,
            admin,
            namespace,
            client,
            user,
        }
    }

    /// A cluster-scoped object's name, unique to this test run.
    fn name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.namespace)
    }

    fn labels(&self) -> serde_json::Value {
        serde_json::json!({ LABEL: self.namespace })
    }

    /// Makes ClusterRole `name` with `rules` (as the admin).
    async fn cluster_role(&self, name: &str, rules: serde_json::Value) {
        let role: ClusterRole = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": self.labels()},
            "rules": rules,
        }))
        .unwrap();
        Api::<ClusterRole>::all(self.admin.clone())
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
    }

    /// Grants the ServiceAccount `rules` cluster-wide, through a ClusterRole
    /// and ClusterRoleBinding named after `suffix`.
    async fn grant(&self, suffix: &str, rules: serde_json::Value) {
        let name = self.name(suffix);
        self.cluster_role(&name, rules).await;
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": self.labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "escalator", "namespace": self.namespace}],
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(self.admin.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }

    /// A ClusterRoleBinding of `role` to the ServiceAccount, as the
    /// ServiceAccount would send it.
    fn binding_to(&self, name: &str, role: &str) -> ClusterRoleBinding {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": self.labels()},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "escalator", "namespace": self.namespace}],
        }))
        .unwrap()
    }

    /// The escalation refusal kube-apiserver words for this user, after
    /// the object's `resource "name" is forbidden: `.
    fn refusal(&self, resource: &str, name: &str, missing: &[&str]) -> String {
        format!(
            "{resource}.rbac.authorization.k8s.io \"{name}\" is forbidden: user \"{}\" (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
            self.user,
            groups_of(&self.namespace),
            missing.join("\n")
        )
    }

    async fn finish(self) {
        let by_label = ListParams::default().labels(&format!("{LABEL}={}", self.namespace));
        Api::<ClusterRoleBinding>::all(self.admin.clone())
            .delete_collection(&DeleteParams::default(), &by_label)
            .await
            .unwrap();
        Api::<ClusterRole>::all(self.admin.clone())
            .delete_collection(&DeleteParams::default(), &by_label)
            .await
            .unwrap();
        Api::<Namespace>::all(self.admin.clone())
            .delete(&self.namespace, &DeleteParams::default())
            .await
            .unwrap();
        drop(self.server);
    }
}

/// Retries `attempt` while kube-apiserver's RBAC cache has not yet caught
/// up with a grant just made: while it answers the authorizer's own 403
/// ("cannot ..."), and, when `until_allowed`, while it answers any 403.
/// kube-sim decides from the store at once, so there it is one attempt.
async fn settled<T, F, Fut>(until_allowed: bool, mut attempt: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let result = attempt().await;
        let waiting = match &result {
            Err(kube::Error::Api(status)) if status.code == 403 => {
                until_allowed || status.message.contains(" cannot ")
            }
            _ => false,
        };
        if !waiting || Instant::now() >= deadline {
            return result;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// cluster-admin as kube-apiserver bootstraps it; kube-sim has no
/// bootstrap roles, so the test makes it there (the real lane has it).
async fn ensure_cluster_admin(admin: &kube::Client) {
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cluster-admin"},
        "rules": [
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ],
    }))
    .unwrap();
    match Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("cluster-admin could not be made: {e}"),
    }
}

const EVERYTHING: &str = r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#;
const EVERY_URL: &str = r#"{NonResourceURLs:["*"], Verbs:["*"]}"#;

#[tokio::test]
async fn a_service_account_that_may_only_create_cluster_role_bindings_cannot_bind_itself_to_cluster_admin()
 {
    let sa = Escalator::start("rbac-bind-admin").await;
    ensure_cluster_admin(&sa.admin).await;
    sa.grant(
        "creates-bindings",
        serde_json::json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"], "verbs": ["create"]}]),
    )
    .await;
    let name = sa.name("to-admin");
    let bindings: Api<ClusterRoleBinding> = Api::all(sa.client.clone());
    let to_admin = sa.binding_to(&name, "cluster-admin");
    let post = PostParams::default();
    let status =
        crate::support::status_of(settled(false, || bindings.create(&post, &to_admin)).await);
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        sa.refusal("clusterrolebindings", &name, &[EVERYTHING, EVERY_URL])
    );
    let details = status.details.expect("details");
    assert_eq!(
        (
            details.group.as_str(),
            details.kind.as_str(),
            details.name.as_str()
        ),
        (
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            name.as_str()
        )
    );
    let stored = Api::<ClusterRoleBinding>::all(sa.admin.clone())
        .get_opt(&name)
        .await
        .unwrap();
    assert!(stored.is_none(), "the refused binding was stored");
    sa.finish().await;
}

#[tokio::test]
async fn a_service_account_may_bind_a_role_it_does_not_hold_only_with_bind_on_that_role() {
    let sa = Escalator::start("rbac-bind-verb").await;
    let secrets_reader = sa.name("secrets-reader");
    let other = sa.name("other");
    let read_secrets = serde_json::json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}]);
    sa.cluster_role(&secrets_reader, read_secrets).await;
    sa.cluster_role(
        &other,
        serde_json::json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["delete"]}]),
    )
    .await;
    sa.grant(
        "binder",
        serde_json::json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterrolebindings"], "verbs": ["create"]},
        ]),
    )
    .await;
    let bindings: Api<ClusterRoleBinding> = Api::all(sa.client.clone());
    let name = sa.name("reads-secrets");
    let reads_secrets = sa.binding_to(&name, &secrets_reader);
    let post = PostParams::default();
    let status =
        crate::support::status_of(settled(false, || bindings.create(&post, &reads_secrets)).await);
    assert_eq!(
        status.message,
        sa.refusal(
            "clusterrolebindings",
            &name,
            &[r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}"#]
        )
    );

    // `bind` on that one ClusterRole, by name.
    sa.grant(
        "may-bind",
        serde_json::json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": [secrets_reader]},
        ]),
    )
    .await;
    settled(true, || bindings.create(&post, &reads_secrets))
        .await
        .expect("bind lets it bind the role it names");
    let elsewhere = sa.name("reads-other");
    let status = crate::support::status_of(
        bindings
            .create(&PostParams::default(), &sa.binding_to(&elsewhere, &other))
            .await,
    );
    // Named `bind` covers that role only.
    assert_eq!(
        status.message,
        sa.refusal(
            "clusterrolebindings",
            &elsewhere,
            &[r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["delete"]}"#]
        )
    );
    sa.finish().await;
}

#[tokio::test]
async fn a_service_account_may_create_a_cluster_role_granting_everything_only_with_escalate() {
    let sa = Escalator::start("rbac-escalate").await;
    sa.grant(
        "role-writer",
        serde_json::json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"]},
        ]),
    )
    .await;
    let name = sa.name("star");
    let star: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": sa.labels()},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    }))
    .unwrap();
    let roles: Api<ClusterRole> = Api::all(sa.client.clone());
    let post = PostParams::default();
    let status = crate::support::status_of(settled(false, || roles.create(&post, &star)).await);
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        sa.refusal("clusterroles", &name, &[EVERYTHING])
    );

    sa.grant(
        "escalates",
        serde_json::json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["escalate"]},
        ]),
    )
    .await;
    settled(true, || roles.create(&post, &star))
        .await
        .expect("escalate lets it create any ClusterRole");
    sa.finish().await;
}

#[tokio::test]
async fn a_service_account_may_grant_in_a_role_what_it_holds_in_that_namespace_and_nothing_more() {
    let sa = Escalator::start("rbac-role").await;
    let namespace = sa.namespace.clone();
    let holds: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "holds", "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["create"]},
        ],
    }))
    .unwrap();
    Api::<Role>::namespaced(sa.admin.clone(), &namespace)
        .create(&PostParams::default(), &holds)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "holds", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "holds"},
        "subjects": [{"kind": "ServiceAccount", "name": "escalator", "namespace": namespace}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(sa.admin.clone(), &namespace)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let role = |name: &str, verbs: &[&str]| -> Role {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": verbs}],
        }))
        .unwrap()
    };
    let roles: Api<Role> = Api::namespaced(sa.client.clone(), &namespace);
    let reader = role("secret-getter", &["get"]);
    let post = PostParams::default();
    settled(true, || roles.create(&post, &reader))
        .await
        .expect("a Role granting what it holds is created");
    let status = crate::support::status_of(
        roles
            .create(
                &PostParams::default(),
                &role("secret-deleter", &["get", "delete", "watch"]),
            )
            .await,
    );
    assert_eq!(
        status.message,
        sa.refusal(
            "roles",
            "secret-deleter",
            &[r#"{APIGroups:[""], Resources:["secrets"], Verbs:["delete" "watch"]}"#]
        )
    );
    sa.finish().await;
}

#[tokio::test]
async fn a_service_account_cannot_patch_or_apply_its_own_cluster_role_into_granting_everything() {
    let sa = Escalator::start("rbac-self-patch").await;
    let own = sa.name("own");
    sa.grant(
        "own",
        serde_json::json!([
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["get", "patch", "update"], "resourceNames": [own]},
        ]),
    )
    .await;
    let roles: Api<ClusterRole> = Api::all(sa.client.clone());
    let rules_with_star = serde_json::json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["get", "patch", "update"], "resourceNames": [own]},
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
    ]);
    let merge = Patch::Merge(serde_json::json!({"rules": rules_with_star}));
    let params = PatchParams::default();
    let status =
        crate::support::status_of(settled(false, || roles.patch(&own, &params, &merge)).await);
    assert_eq!(
        status.message,
        sa.refusal("clusterroles", &own, &[EVERYTHING])
    );
    // A JSON patch adds the rule without the body ever holding the role.
    let add: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "add", "path": "/rules/-", "value": {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}},
    ]))
    .unwrap();
    let status = crate::support::status_of(
        roles
            .patch(&own, &PatchParams::default(), &Patch::<()>::Json(add))
            .await,
    );
    assert_eq!(
        status.message,
        sa.refusal("clusterroles", &own, &[EVERYTHING])
    );
    let applied = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": own},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    });
    let status = crate::support::status_of(
        roles
            .patch(
                &own,
                &PatchParams::apply("escalator").force(),
                &Patch::Apply(&applied),
            )
            .await,
    );
    assert_eq!(
        status.message,
        sa.refusal("clusterroles", &own, &[EVERYTHING])
    );
    let stored = Api::<ClusterRole>::all(sa.admin.clone())
        .get(&own)
        .await
        .unwrap();
    assert_eq!(
        stored.rules.map(|r| r.len()),
        Some(1),
        "the role is as it was"
    );
    sa.finish().await;
}
