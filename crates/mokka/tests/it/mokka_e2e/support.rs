//! The cluster the Mokka end-to-end tests drive: kube-sim by default, the
//! real control plane with `GPUFLEET_TEST_CLUSTER=real` (see
//! `kube_sim::lane`). On the real lane the controller runs with the
//! restricted kubeconfig of deploy/mokka's ServiceAccount, so its RBAC is
//! what a cluster enforces.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_kit::manager::DEFAULT_DRAIN_TIMEOUT;
use controller_kit::{LeaderElectionConfig, ManagerConfig};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube_sim::KubeSim;
use kube_sim::lane::Lane;
use mokka::api::{SGPUInventory, SGPURack, SGPURackProfile, SGPURuntimePolicy};
use mokka::controller::MokkaController;
use mokka::plan::options::Options;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Where replicas hold their Lease (deploy/mokka's namespace).
pub const LEASE_NAMESPACE: &str = "mokka-system";
pub const LEASE_NAME: &str = "mokka-e2e.mokka.nvidia.com";
/// The replicas' election timing: short, so handovers take seconds.
pub const LEASE_DURATION: Duration = Duration::from_secs(3);
pub const RENEW_DEADLINE: Duration = Duration::from_secs(2);
pub const RETRY_PERIOD: Duration = Duration::from_millis(500);
/// Every test Node carries it; the real lane's clean-up selects by it.
pub const TEST_NODE_LABEL: &str = "mokka-e2e";
/// The Node a static bearer token speaks for on both lanes (the real lane's
/// `--token-auth-file`, kube-sim's static tokens).
pub const TOKEN_NODE: &str = "mokka-agent-node";
/// kube-sim's static token for [`TOKEN_NODE`] (the real lane's is random).
const SIM_NODE_TOKEN: &str = "kube-sim-static-token-for-mokka-agent-node";

pub struct Cluster {
    pub sim: Option<KubeSim>,
    /// The test's own client (cluster admin on the real lane).
    pub client: kube::Client,
    /// What the controller runs with.
    pub controller_client: kube::Client,
    /// A bearer token of Node [`TOKEN_NODE`] (`system:node:…` in `system:nodes`).
    pub node_token: String,
    /// Bearer tokens of two people: `alice`, a cluster admin
    /// (`system:masters`), and `bob`, granted nothing.
    pub admin_token: String,
    pub ungranted_token: String,
}

/// kube-sim's static tokens for alice and bob (the real lane's are random).
const SIM_ADMIN_TOKEN: &str = "kube-sim-static-token-for-alice";
const SIM_UNGRANTED_TOKEN: &str = "kube-sim-static-token-for-bob";

/// The token of `user` in the real lane's `--token-auth-file` (CSV lines
/// `token,user,uid[,groups]`).
fn token_of(csv: &str, user: &str) -> Option<String> {
    csv.lines()
        .map(|line| line.split(',').collect::<Vec<_>>())
        .find(|fields| fields.get(1) == Some(&user))
        .and_then(|fields| fields.first().map(|token| token.to_string()))
        .filter(|token| !token.is_empty())
}

impl Cluster {
    pub async fn start() -> Cluster {
        match Lane::from_env().expect("GPUFLEET_TEST_CLUSTER") {
            Lane::Sim => {
                let sim = KubeSim::builder()
                    .static_tokens([
                        kube_sim::tokens::StaticToken::new(
                            SIM_NODE_TOKEN,
                            &format!("system:node:{TOKEN_NODE}"),
                            "node-uid",
                            &["system:nodes"],
                        ),
                        kube_sim::tokens::StaticToken::new(
                            SIM_ADMIN_TOKEN,
                            "alice",
                            "alice-uid",
                            &["system:masters"],
                        ),
                        kube_sim::tokens::StaticToken::new(
                            SIM_UNGRANTED_TOKEN,
                            "bob",
                            "bob-uid",
                            &[],
                        ),
                    ])
                    .start()
                    .await
                    .expect("kube-sim starts");
                let client = sim.client();
                let cluster = Cluster {
                    sim: Some(sim),
                    controller_client: client.clone(),
                    client,
                    node_token: SIM_NODE_TOKEN.to_string(),
                    admin_token: SIM_ADMIN_TOKEN.to_string(),
                    ungranted_token: SIM_UNGRANTED_TOKEN.to_string(),
                };
                cluster.install_crds().await;
                cluster.create_namespace(LEASE_NAMESPACE).await;
                cluster
            }
            Lane::Real(real) => {
                let client = kube_sim::lane::client_from_kubeconfig(&real.admin_kubeconfig)
                    .await
                    .expect("admin kubeconfig");
                let controller_kubeconfig = real.service_account_kubeconfig("mokka-controller");
                assert!(
                    controller_kubeconfig.exists(),
                    "{} is missing: run scripts/real-cluster.sh up after deploy/mokka/01-rbac.yaml exists",
                    controller_kubeconfig.display()
                );
                let controller_client =
                    kube_sim::lane::client_from_kubeconfig(&controller_kubeconfig)
                        .await
                        .expect("mokka kubeconfig");
                let token_file = real.dir.join("token-auth.csv");
                let csv = std::fs::read_to_string(&token_file).unwrap_or_default();
                let token = |user: &str| {
                    token_of(&csv, user).unwrap_or_else(|| {
                        panic!(
                            "{} has no token for {user}: restart the lane with the current scripts/real-cluster.sh, which writes it",
                            token_file.display()
                        )
                    })
                };
                let node_token = token(&format!("system:node:{TOKEN_NODE}"));
                let admin_token = token("alice");
                let ungranted_token = token("bob");
                let cluster = Cluster {
                    sim: None,
                    client,
                    controller_client,
                    node_token,
                    admin_token,
                    ungranted_token,
                };
                cluster.clean().await;
                cluster
            }
        }
    }

    /// kube-sim whatever the lane (tests of kube-sim's fault injection).
    pub async fn start_sim() -> Cluster {
        Self::start_sim_with_kinds(|_| true).await
    }

    /// kube-sim serving only the Mokka kinds (CRD `spec.names.kind`) that
    /// `keep` accepts: an install of an older upstream without some kinds.
    pub async fn start_sim_with_kinds(keep: impl Fn(&str) -> bool) -> Cluster {
        // No simulated kubelet: Mokka's Nodes need none, and its Node status
        // patches would take faults aimed at the controller's Node writes.
        let sim = KubeSim::builder()
            .kubelet(kube_sim::KubeletConfig::disabled())
            .start()
            .await
            .expect("kube-sim starts");
        let client = sim.client();
        let cluster = Cluster {
            sim: Some(sim),
            controller_client: client.clone(),
            client,
            node_token: String::new(),
            admin_token: String::new(),
            ungranted_token: String::new(),
        };
        cluster.install_crds_of(keep).await;
        cluster.create_namespace(LEASE_NAMESPACE).await;
        cluster
    }

    /// A token of ServiceAccount `name` (in the Lease namespace), which may
    /// `get` sgpuracks when `may_read_racks`.
    pub async fn service_account_token(&self, name: &str, may_read_racks: bool) -> String {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let account: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        ignore_exists(accounts.create(&PostParams::default(), &account).await);
        if may_read_racks {
            let roles: Api<ClusterRole> = Api::all(self.client.clone());
            let role: ClusterRole = serde_json::from_value(json!({
                "metadata": {"name": "mokka-e2e-rack-reader"},
                "rules": [{"apiGroups": ["mokka.nvidia.com"], "resources": ["sgpuracks"], "verbs": ["get"]}]
            }))
            .unwrap();
            ignore_exists(roles.create(&PostParams::default(), &role).await);
            let bindings: Api<ClusterRoleBinding> = Api::all(self.client.clone());
            let binding: ClusterRoleBinding = serde_json::from_value(json!({
                "metadata": {"name": format!("mokka-e2e-{name}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "mokka-e2e-rack-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": LEASE_NAMESPACE}]
            }))
            .unwrap();
            ignore_exists(bindings.create(&PostParams::default(), &binding).await);
        }
        let issued = accounts
            .create_token_request(
                name,
                &PostParams::default(),
                &TokenRequest {
                    spec: TokenRequestSpec {
                        expiration_seconds: Some(3600),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .expect("TokenRequest answered");
        issued.status.expect("a token").token
    }

    pub fn sim(&self) -> Option<&KubeSim> {
        self.sim.as_ref()
    }

    async fn install_crds(&self) {
        self.install_crds_of(|_| true).await;
    }

    async fn install_crds_of(&self, keep: impl Fn(&str) -> bool) {
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in mokka::crds()
            .into_iter()
            .filter(|crd| keep(&crd.spec.names.kind))
        {
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("the generated CRDs are accepted");
        }
        let racks: Api<SGPURack> = Api::all(self.client.clone());
        eventually("the Mokka kinds are served", || async {
            racks.list(&ListParams::default()).await.ok()
        })
        .await;
    }

    async fn create_namespace(&self, name: &str) {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let namespace: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        match namespaces.create(&PostParams::default(), &namespace).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => panic!("creating namespace {name}: {error}"),
        }
    }

    /// The real lane is shared by the tests (run one at a time): each starts
    /// from no Mokka objects, no test Nodes and no Lease.
    async fn clean(&self) {
        let clear = json!({"metadata": {"finalizers": null}});
        let racks: Api<SGPURack> = Api::all(self.client.clone());
        let inventories: Api<SGPUInventory> = Api::all(self.client.clone());
        let profiles: Api<SGPURackProfile> = Api::all(self.client.clone());
        for rack in racks.list(&ListParams::default()).await.unwrap().items {
            let name = rack.metadata.name.unwrap();
            let _ = racks
                .patch(&name, &PatchParams::default(), &Patch::Merge(&clear))
                .await;
            let _ = racks.delete(&name, &DeleteParams::default()).await;
        }
        for inventory in inventories
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
        {
            let name = inventory.metadata.name.unwrap();
            let _ = inventories
                .patch(&name, &PatchParams::default(), &Patch::Merge(&clear))
                .await;
            let _ = inventories.delete(&name, &DeleteParams::default()).await;
        }
        profiles
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap();
        let policies: Api<SGPURuntimePolicy> = Api::all(self.client.clone());
        policies
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap();
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(TEST_NODE_LABEL),
            )
            .await
            .unwrap();
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let _ = leases.delete(LEASE_NAME, &DeleteParams::default()).await;
        eventually("the previous test's objects to be gone", || async {
            let left = racks
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                + inventories
                    .list(&ListParams::default())
                    .await
                    .unwrap()
                    .items
                    .len()
                + nodes
                    .list(&ListParams::default().labels(TEST_NODE_LABEL))
                    .await
                    .unwrap()
                    .items
                    .len();
            (left == 0).then_some(())
        })
        .await;
    }

    pub async fn create_profile(
        &self,
        name: &str,
        nodes_per_rack: i32,
        gpus: i32,
    ) -> SGPURackProfile {
        let profile = SGPURackProfile::new(
            name,
            mokka::fixtures::example_profile_spec(nodes_per_rack, gpus),
        );
        let api: Api<SGPURackProfile> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &profile)
            .await
            .expect("profile accepted")
    }

    /// An inventory with one group `compute` of `count` racks of `profile`, placing Nodes labelled `pool=<pool>`.
    pub async fn create_inventory(
        &self,
        name: &str,
        profile: &str,
        count: i32,
        pool: &str,
    ) -> SGPUInventory {
        let inventory: SGPUInventory = serde_json::from_value(json!({
            "apiVersion": "mokka.nvidia.com/v1alpha1",
            "kind": "SGPUInventory",
            "metadata": {"name": name},
            "spec": {"rackGroups": [{
                "id": "compute",
                "count": count,
                "profileRef": {"name": profile},
                "placement": {"nodeSelector": {"matchLabels": {"pool": pool}}}
            }]}
        }))
        .unwrap();
        let api: Api<SGPUInventory> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &inventory)
            .await
            .expect("inventory accepted")
    }

    /// An eligible Node in `pool`.
    pub async fn create_node(&self, name: &str, pool: &str) -> Node {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {
                "mokka.nvidia.com/sgpu-node": "true",
                "pool": pool,
                TEST_NODE_LABEL: "true",
            }}
        }))
        .unwrap();
        let api: Api<Node> = Api::all(self.client.clone());
        api.create(&PostParams::default(), &node)
            .await
            .expect("node accepted")
    }

    pub async fn delete_node(&self, name: &str) {
        let api: Api<Node> = Api::all(self.client.clone());
        api.delete(name, &DeleteParams::default())
            .await
            .expect("node deleted");
        eventually("the Node to be gone", || async {
            api.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }

    /// A runtime policy on inventory `inventory`: `target` holds the optional
    /// axes (`rackGroups`, `rackIndexes`, …), `runtime` the override.
    pub async fn create_policy(
        &self,
        name: &str,
        inventory: &str,
        target: serde_json::Value,
        runtime: serde_json::Value,
    ) -> SGPURuntimePolicy {
        let mut target_ref = json!({
            "group": "mokka.nvidia.com",
            "kind": "SGPUInventory",
            "name": inventory,
        });
        if let (Some(target_ref), Some(axes)) = (target_ref.as_object_mut(), target.as_object()) {
            target_ref.extend(axes.clone());
        }
        let policy: SGPURuntimePolicy = serde_json::from_value(json!({
            "apiVersion": "mokka.nvidia.com/v1alpha1",
            "kind": "SGPURuntimePolicy",
            "metadata": {"name": name},
            "spec": {"targetRef": target_ref, "runtime": runtime}
        }))
        .unwrap();
        self.policies()
            .create(&PostParams::default(), &policy)
            .await
            .expect("policy accepted")
    }

    pub fn policies(&self) -> Api<SGPURuntimePolicy> {
        Api::all(self.client.clone())
    }
    pub fn profiles(&self) -> Api<SGPURackProfile> {
        Api::all(self.client.clone())
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }
    pub fn racks(&self) -> Api<SGPURack> {
        Api::all(self.client.clone())
    }
    pub fn inventories(&self) -> Api<SGPUInventory> {
        Api::all(self.client.clone())
    }

    /// Starts a replica; returns once it has synced caches.
    pub async fn start_replica(&self, identity: &str) -> Replica {
        self.start_replica_with(identity, Options::default()).await
    }

    /// Starts a replica with `options` (status debounce forced to zero so
    /// tests need not wait for it); returns once it has synced caches.
    pub async fn start_replica_with(&self, identity: &str, options: Options) -> Replica {
        let options = Options {
            status_debounce: Duration::ZERO,
            ..options
        };
        self.start_replica_timed(identity, options).await
    }

    /// [`Cluster::start_replica_with`] keeping the debounce of `options`
    /// (tests of coalescing).
    pub async fn start_replica_timed(&self, identity: &str, options: Options) -> Replica {
        self.start_replica_draining(identity, options, DEFAULT_DRAIN_TIMEOUT)
            .await
    }

    /// [`Cluster::start_replica_timed`] whose workers get `drain_timeout` to
    /// finish when leadership ends.
    pub async fn start_replica_draining(
        &self,
        identity: &str,
        options: Options,
        drain_timeout: Duration,
    ) -> Replica {
        let controller = Arc::new(
            MokkaController::new(self.controller_client.clone(), options)
                .expect("controller builds"),
        );
        let mut election = LeaderElectionConfig::new(LEASE_NAMESPACE, LEASE_NAME);
        election.identity = identity.to_string();
        election.lease_duration = LEASE_DURATION;
        election.renew_deadline = RENEW_DEADLINE;
        election.retry_period = RETRY_PERIOD;
        let config = ManagerConfig {
            drain_timeout,
            ..ManagerConfig::new(election)
        };
        let shutdown = CancellationToken::new();
        let task = {
            let controller = Arc::clone(&controller);
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                controller
                    .run_with(config, shutdown)
                    .await
                    .expect("controller runs")
            })
        };
        let readiness = controller.readiness();
        tokio::time::timeout(
            Duration::from_secs(30),
            readiness.wait_for(|s| s.cache_ready),
        )
        .await
        .expect("the replica's caches sync");
        Replica {
            controller,
            shutdown,
            task,
        }
    }

    /// Starts a replica and waits until it leads with running workers.
    pub async fn start_leader(&self, identity: &str) -> Replica {
        self.start_leader_with(identity, Options::default()).await
    }

    /// [`Cluster::start_leader`] with `options`.
    pub async fn start_leader_with(&self, identity: &str, options: Options) -> Replica {
        let options = Options {
            status_debounce: Duration::ZERO,
            ..options
        };
        self.start_leader_timed(identity, options).await
    }

    /// [`Cluster::start_leader_with`] keeping the debounce of `options`.
    pub async fn start_leader_timed(&self, identity: &str, options: Options) -> Replica {
        let replica = self.start_replica_timed(identity, options).await;
        let controller = Arc::clone(&replica.controller);
        eventually("the replica to lead", || async {
            controller.leader_ready().then_some(())
        })
        .await;
        replica
    }
}

pub struct Replica {
    pub controller: Arc<MokkaController>,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

impl Replica {
    /// Stops the replica and waits until it has drained and released its Lease.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("controller task");
    }
}

fn ignore_exists<T>(result: Result<T, kube::Error>) {
    match result {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating a test object: {error}"),
    }
}

/// Polls `check` until it returns Some (30 s at most).
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(Duration::from_secs(30), what, check).await
}

/// Polls `check` until it returns Some, at most `limit`.
pub async fn eventually_within<T, F, Fut>(limit: Duration, what: &str, check: F) -> T
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The condition `kind` of an inventory, as (status, reason, message).
pub fn condition(inventory: &SGPUInventory, kind: &str) -> Option<(String, String, String)> {
    inventory
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The `Accepted` condition of a policy, as (status, reason, message, observedGeneration).
pub fn policy_condition(
    policy: &SGPURuntimePolicy,
) -> Option<(String, String, String, Option<i64>)> {
    policy
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Accepted")
        .map(|c| {
            (
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
                c.observed_generation,
            )
        })
}

/// The Node names bound in a rack, by slot.
pub fn bound_names(rack: &SGPURack) -> Vec<Option<String>> {
    rack.spec
        .nodes
        .iter()
        .map(|slot| slot.node_ref.as_ref().map(|n| n.name.clone()))
        .collect()
}

/// Whether a Node carries the projection of a binding to `rack`.
pub fn projected_onto(node: &Node, rack: &SGPURack) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let annotation = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("mokka.nvidia.com/sgpu-assignment"))
        .cloned();
    labels
        .get("mokka.nvidia.com/sgpu-assigned")
        .map(String::as_str)
        == Some("true")
        && labels.get("nvidia.com/gpu.clique")
            == Some(&format!("{}.0", rack.spec.identity.fabric_uuid))
        && annotation.is_some_and(|a| a.contains(rack.metadata.uid.as_deref().unwrap_or("?")))
}

/// Whether a Node carries none of the three projected keys.
pub fn unprojected(node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    !labels.contains_key("mokka.nvidia.com/sgpu-assigned")
        && !labels.contains_key("nvidia.com/gpu.clique")
        && !node
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("mokka.nvidia.com/sgpu-assignment"))
}

/// Mutating requests kube-sim answered, by `verb resource` (every code).
pub fn mutating_requests(cluster: &Cluster) -> BTreeMap<String, u64> {
    let Some(sim) = cluster.sim() else {
        return BTreeMap::new();
    };
    let mut counts = BTreeMap::new();
    for line in sim.metrics().encode().lines() {
        let Some(rest) = line.strip_prefix("kube_sim_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let verb = label("verb");
        let resource = label("resource");
        // kube-sim's simulated kubelet renews its Node Leases and Node status;
        // the Lease of the election is checked by its resourceVersion instead.
        if resource == "leases" || resource == "nodes/status" {
            continue;
        }
        // kube-sim gives each new namespace its `default` ServiceAccount and
        // `kube-root-ca.crt` ConfigMap a moment after it is created, as
        // kube-controller-manager does; Mokka writes neither kind.
        if verb == "create" && (resource == "serviceaccounts" || resource == "configmaps") {
            continue;
        }
        // Token and access reviews are computed, never stored: not writes.
        if resource.ends_with("reviews") {
            continue;
        }
        if ["create", "update", "patch", "delete", "deletecollection"].contains(&verb.as_str()) {
            *counts.entry(format!("{verb} {resource}")).or_default() +=
                value.trim().parse::<u64>().unwrap_or(0);
        }
    }
    counts
}

/// A Lease held by a replica that is not running, renewed `now`, for `seconds`.
pub async fn hold_lease(cluster: &Cluster, holder: &str, seconds: i32) -> Lease {
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), LEASE_NAMESPACE);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEASE_NAME, "namespace": LEASE_NAMESPACE},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": seconds, "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
    }))
    .unwrap();
    // A Lease released by a stopped replica may still exist.
    let _ = leases.delete(LEASE_NAME, &DeleteParams::default()).await;
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("the test holds the Lease")
}

/// The controller's log lines, kept for the tests that check its messages.
#[derive(Clone, Default)]
pub struct CapturedLog(Arc<parking_lot::Mutex<Vec<u8>>>);

impl CapturedLog {
    /// Installs the capture (text lines, info and above) as this process's
    /// subscriber: nextest runs each test in its own process, so it sees
    /// this test's lines only.
    pub fn install() -> Self {
        let log = Self::default();
        tracing_subscriber::fmt()
            .with_writer(log.clone())
            .with_ansi(false)
            .try_init()
            .expect("the log capture needs its own process: run the tests with cargo nextest");
        log
    }

    /// Like [`CapturedLog::install`], in the binary's JSON form (fields
    /// flattened into each line), filtered by the `EnvFilter` `directives`.
    pub fn install_json(directives: &str) -> Self {
        let log = Self::default();
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_env_filter(tracing_subscriber::EnvFilter::new(directives))
            .with_writer(log.clone())
            .try_init()
            .expect("the log capture needs its own process: run the tests with cargo nextest");
        log
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }

    /// Every line, parsed (for a JSON capture; a line that is not JSON fails the test).
    pub fn json_lines(&self) -> Vec<serde_json::Value> {
        self.text()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }
}

impl std::io::Write for CapturedLog {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for CapturedLog {
    type Writer = CapturedLog;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}
