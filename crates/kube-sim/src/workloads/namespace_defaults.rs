//! What kube-controller-manager puts into every new namespace: the
//! `default` ServiceAccount (its serviceaccount controller) and, when the
//! server has a CA, the `kube-root-ca.crt` ConfigMap holding it (its
//! root-ca-cert-publisher). Clients wait for both: the Kubernetes e2e
//! framework will not start a test in a namespace without them, and pods
//! that mount the projected service-account volume read the CA from there.
//!
//! Each object is created once per namespace (by uid); one deleted later by
//! hand is not recreated, unlike upstream's controllers.
//!
//! At start it also writes what kube-apiserver's own bootstrap writes: the
//! `default/kubernetes` Service (ClusterIP 10.96.0.1, port 443 named
//! `https`, targetPort kube-sim's listener). kube-sim serves no Endpoints
//! or EndpointSlices, so there are none for it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::kubelet::informer::{self, Subscriber};

/// The ConfigMap kube-controller-manager publishes the cluster CA in.
pub(crate) const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";
/// The first address of the service range, which kube-apiserver keeps for
/// the `kubernetes` Service.
const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// Provisions the namespaces that exist at start before returning (so a
/// fresh server's resourceVersion is settled when `start()` returns), then
/// watches for new ones.
pub(crate) async fn spawn(
    client: kube::Client,
    ca_pem: Option<String>,
    listener_port: u16,
    shutdown: CancellationToken,
) {
    kubernetes_service(&client, listener_port).await;
    let existing = Api::<Namespace>::all(client.clone())
        .list(&Default::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default();
    for namespace in existing {
        if let Some(name) = namespace.metadata.name.as_deref() {
            provision(&client, name, ca_pem.as_deref()).await;
        }
    }
    let wake = Subscriber::new();
    let namespaces = informer::start(
        Api::<Namespace>::all(client.clone()),
        vec![wake.clone()],
        shutdown.clone(),
    );
    tokio::spawn(run(client, namespaces, ca_pem, wake, shutdown));
}

async fn run(
    client: kube::Client,
    namespaces: Store<Namespace>,
    ca_pem: Option<String>,
    wake: Arc<Subscriber>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&namespaces, &shutdown).await {
        return;
    }
    // Namespaces (by uid) already given their objects.
    let mut done: HashSet<String> = HashSet::new();
    loop {
        for namespace in namespaces.state() {
            let Some(uid) = namespace.metadata.uid.clone() else {
                continue;
            };
            let terminating = namespace.metadata.deletion_timestamp.is_some()
                || namespace.status.as_ref().and_then(|s| s.phase.as_deref())
                    == Some("Terminating");
            if terminating || done.contains(&uid) {
                continue;
            }
            let name = namespace.metadata.name.clone().unwrap_or_default();
            if provision(&client, &name, ca_pem.as_deref()).await {
                done.insert(uid);
            }
        }
        if !super::next_round(&wake, &shutdown).await {
            return;
        }
    }
}

/// Creates the namespace's objects; true when both exist now. Failed
/// writes are retried on the next round.
async fn provision(client: &kube::Client, namespace: &str, ca_pem: Option<&str>) -> bool {
    let pp = PostParams::default();
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("default".into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let mut ok = created_or_exists(accounts.create(&pp, &account).await);
    if let Some(ca) = ca_pem {
        let config_map = ConfigMap {
            metadata: ObjectMeta {
                name: Some(ROOT_CA_CONFIGMAP.into()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([("ca.crt".to_string(), ca.to_string())])),
            ..ConfigMap::default()
        };
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
        ok &= created_or_exists(config_maps.create(&pp, &config_map).await);
    }
    ok
}

/// The `default/kubernetes` Service.
async fn kubernetes_service(client: &kube::Client, listener_port: u16) {
    let pp = PostParams::default();
    let service: Service = match serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "type": "ClusterIP",
            "clusterIP": KUBERNETES_SERVICE_IP,
            "clusterIPs": [KUBERNETES_SERVICE_IP],
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": listener_port}],
            "sessionAffinity": "None"
        }
    })) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "the kubernetes Service does not build");
            return;
        }
    };
    created_or_exists(
        Api::<Service>::namespaced(client.clone(), "default")
            .create(&pp, &service)
            .await,
    );
}

fn created_or_exists<T>(result: Result<T, kube::Error>) -> bool {
    match result {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 409 => true,
        Err(e) => {
            tracing::debug!(error = %e, "namespace defaults: a write failed; retrying");
            false
        }
    }
}
