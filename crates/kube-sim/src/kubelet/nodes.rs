//! The simulated kubelet's node side: reports node status once (and again
//! if it drifts) and renews the node Lease in `kube-node-lease`.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::KubeletConfig;
use super::informer;
use super::ipam::Ipv4Pool;
use super::lifecycle::format_time;
use super::node::{desired_status, internal_ip, is_simulated};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";

fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

pub(crate) async fn run(
    client: kube::Client,
    config: KubeletConfig,
    nodes: Store<Node>,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&nodes, &shutdown).await {
        return;
    }
    let node_api: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let mut addresses: HashMap<String, String> = HashMap::new();
    let mut pool = Ipv4Pool::new(Ipv4Addr::new(172, 18, 0, 0), 16, 2);
    let mut renewed: HashMap<String, Instant> = HashMap::new();
    loop {
        let now = jiff::Timestamp::now();
        let all: Vec<Value> = nodes
            .state()
            .iter()
            .filter_map(|n| serde_json::to_value(n.as_ref()).ok())
            .collect();
        let in_use: HashSet<Ipv4Addr> = all
            .iter()
            .filter_map(internal_ip)
            .chain(addresses.values().cloned())
            .filter_map(|ip| ip.parse().ok())
            .collect();
        let mut in_use = in_use;
        let mut present = HashSet::new();
        for node in &all {
            let metadata = node.get("metadata").unwrap_or(&Value::Null);
            let Some(name) = metadata.get("name").and_then(Value::as_str) else {
                continue;
            };
            if !is_simulated(metadata) || metadata.get("deletionTimestamp").is_some() {
                continue;
            }
            present.insert(name.to_string());
            let ip = match internal_ip(node).or_else(|| addresses.get(name).cloned()) {
                Some(ip) => ip,
                None => {
                    let ip = pool
                        .allocate(&in_use)
                        .map(|ip| ip.to_string())
                        .unwrap_or_default();
                    if let Ok(parsed) = ip.parse() {
                        in_use.insert(parsed);
                    }
                    ip
                }
            };
            addresses.insert(name.to_string(), ip.clone());
            if let Some(status) = desired_status(node, &ip, &format_time(now)) {
                let patch = json!({"status": status});
                if let Err(e) = node_api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::debug!(node = %name, error = %e, "node status write failed");
                }
            }
            let due = renewed
                .get(name)
                .is_none_or(|at| at.elapsed() >= config.lease_renew_interval);
            if due {
                let uid = metadata
                    .get("uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                match renew_lease(&leases, name, uid, &config, now).await {
                    Ok(()) => {
                        renewed.insert(name.to_string(), Instant::now());
                    }
                    Err(e) => {
                        tracing::debug!(node = %name, error = %e, "node lease renewal failed")
                    }
                }
            }
        }
        renewed.retain(|n, _| present.contains(n));
        addresses.retain(|n, _| present.contains(n));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = wake.notified() => informer::coalesce().await,
            _ = tokio::time::sleep(config.lease_renew_interval) => {}
        }
    }
}

/// Creates the node's Lease (owned by the Node, so it goes with it) or
/// moves its renewTime forward.
async fn renew_lease(
    leases: &Api<Lease>,
    node: &str,
    node_uid: &str,
    config: &KubeletConfig,
    now: jiff::Timestamp,
) -> Result<(), kube::Error> {
    let spec = json!({
        "holderIdentity": node,
        "leaseDurationSeconds": config.lease_duration_seconds,
        "renewTime": micro_time(now),
    });
    match leases
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": spec})),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            let lease: Lease = serde_json::from_value(json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": node,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [{
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node,
                        "uid": node_uid,
                    }],
                },
                "spec": spec,
            }))
            .map_err(kube::Error::SerdeError)?;
            leases
                .create(&PostParams::default(), &lease)
                .await
                .map(|_| ())
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_renew_times_are_micro_times() {
        let t = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        assert_eq!(micro_time(t), "2027-01-15T08:00:00.000000Z");
    }
}
