//! The simulated kubelet's node side: reports node status once (and again
//! if it drifts) and renews the node Lease in `kube-node-lease`.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::KubeletConfig;
use super::informer::{self, Subscriber};
use super::ipam::Ipv4Pool;
use super::lifecycle::format_time;
use super::node::{desired_status, internal_ip, is_simulated};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";

fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// How soon a failed status write or lease renewal is tried again.
const RETRY: Duration = Duration::from_millis(200);

/// The InternalIP each Node holds (reported, or assigned by this loop and
/// not yet reported), kept up to date from the Nodes a pass looks at, so
/// handing out a unique address needs no scan of every Node.
#[derive(Debug, Default)]
struct NodeAddresses {
    by_node: HashMap<String, Ipv4Addr>,
    /// How many Nodes hold each address (a creator may give two the same).
    holders: HashMap<Ipv4Addr, usize>,
}

impl NodeAddresses {
    fn get(&self, node: &str) -> Option<Ipv4Addr> {
        self.by_node.get(node).copied()
    }

    fn set(&mut self, node: &str, ip: Option<Ipv4Addr>) {
        let old = match ip {
            Some(ip) => self.by_node.insert(node.to_string(), ip),
            None => self.by_node.remove(node),
        };
        if old == ip {
            return;
        }
        if let Some(old) = old
            && let Some(count) = self.holders.get_mut(&old)
        {
            *count -= 1;
            if *count == 0 {
                self.holders.remove(&old);
            }
        }
        if let Some(ip) = ip {
            *self.holders.entry(ip).or_default() += 1;
        }
    }

    fn in_use(&self, ip: &Ipv4Addr) -> bool {
        self.holders.contains_key(ip)
    }
}

pub(crate) async fn run(
    client: kube::Client,
    config: KubeletConfig,
    nodes: Store<Node>,
    changes: Arc<Subscriber>,
    store: Arc<crate::store::Store>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&nodes, &shutdown).await {
        return;
    }
    let node_api: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let mut addresses = NodeAddresses::default();
    let mut pool = Ipv4Pool::new(Ipv4Addr::new(172, 18, 0, 0), 16, 2);
    // Simulated, live nodes -> (uid, when their lease is next renewed). The
    // uid tells a Node deleted and created again under the same name (its
    // Lease went with the old one) from the same Node.
    let mut lease_due: HashMap<String, (String, Instant)> = HashMap::new();
    // Nodes whose status write failed, looked at again soon.
    let mut retry: HashSet<String> = HashSet::new();
    let mut first = true;
    loop {
        let mut delta = changes.take();
        delta.all |= std::mem::take(&mut first);
        let started = Instant::now();
        let mut names: HashSet<String> = if delta.all {
            // Every cached Node, and every remembered one, so Nodes deleted
            // while the watch was down are forgotten.
            nodes
                .state()
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .chain(addresses.by_node.keys().cloned())
                .chain(lease_due.keys().cloned())
                .collect()
        } else {
            delta.keys
        };
        names.extend(retry.drain());
        names.extend(
            lease_due
                .iter()
                .filter(|(_, (_, at))| *at <= started)
                .map(|(n, _)| n.clone()),
        );
        // Sorted, so addresses are handed out in name order after a relist.
        let mut names: Vec<String> = names.into_iter().collect();
        names.sort_unstable();
        let now = jiff::Timestamp::now();
        for name in names {
            store
                .stats
                .kubelet_node_syncs
                .fetch_add(1, Ordering::Relaxed);
            let Some(node) = informer::get(&nodes, &name) else {
                addresses.set(&name, None);
                lease_due.remove(&name);
                continue;
            };
            let Ok(value) = serde_json::to_value(node.as_ref()) else {
                continue;
            };
            let metadata = value.get("metadata").unwrap_or(&Value::Null);
            let reported = internal_ip(&value);
            if !is_simulated(metadata) || metadata.get("deletionTimestamp").is_some() {
                // Not simulated (or going): no lease, but the address it
                // reports stays taken.
                addresses.set(&name, reported.and_then(|ip| ip.parse().ok()));
                lease_due.remove(&name);
                continue;
            }
            let ip = match reported {
                Some(ip) => {
                    addresses.set(&name, ip.parse().ok());
                    ip
                }
                None => match addresses.get(&name) {
                    Some(ip) => ip.to_string(),
                    None => {
                        let ip = pool.allocate_unless(|ip| addresses.in_use(ip));
                        addresses.set(&name, ip);
                        ip.map(|ip| ip.to_string()).unwrap_or_default()
                    }
                },
            };
            if let Some(status) = desired_status(&value, &ip, &format_time(now)) {
                let patch = json!({"status": status});
                if let Err(e) = node_api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::debug!(node = %name, error = %e, "node status write failed");
                    retry.insert(name.clone());
                }
            }
            let uid = metadata
                .get("uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let due = lease_due
                .get(&name)
                .is_none_or(|(renewed_for, at)| renewed_for != uid || *at <= started);
            if due {
                let next = match renew_lease(&leases, &name, uid, &config, now).await {
                    Ok(()) => config.lease_renew_interval,
                    Err(e) => {
                        tracing::debug!(node = %name, error = %e, "node lease renewal failed");
                        RETRY.min(config.lease_renew_interval)
                    }
                };
                lease_due.insert(name, (uid.to_string(), Instant::now() + next));
            }
        }
        let mut wake_at = Instant::now() + config.lease_renew_interval;
        if let Some(at) = lease_due.values().map(|(_, at)| *at).min() {
            wake_at = wake_at.min(at);
        }
        if !retry.is_empty() {
            wake_at = wake_at.min(Instant::now() + RETRY);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = changes.notified() => informer::coalesce().await,
            _ = tokio::time::sleep_until(wake_at) => {}
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

    #[test]
    fn node_addresses_count_holders_and_free_on_forget() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let mut addresses = NodeAddresses::default();
        addresses.set("a", Some(ip("172.18.0.2")));
        addresses.set("b", Some(ip("172.18.0.2")));
        addresses.set("a", Some(ip("172.18.0.2")));
        addresses.set("b", None);
        // "a" still holds it: setting it again did not count twice.
        assert!(addresses.in_use(&ip("172.18.0.2")));
        addresses.set("a", Some(ip("172.18.0.3")));
        assert!(!addresses.in_use(&ip("172.18.0.2")));
        assert_eq!(addresses.get("a"), Some(ip("172.18.0.3")));
        addresses.set("a", None);
        assert!(addresses.holders.is_empty() && addresses.by_node.is_empty());
    }
}
