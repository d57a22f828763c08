//! Cluster IPs for Services, allocated from 10.96.0.0/12 by a controller
//! (as the apiserver's allocator would at create time), unique and not
//! handed out again while a Service holds them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::informer::{self, Subscriber};
use super::ipam::Ipv4Pool;

/// Services that need an address: not ExternalName, not headless, none yet.
pub fn needs_cluster_ip(service: &Service) -> bool {
    let Some(spec) = service.spec.as_ref() else {
        return true;
    };
    spec.type_.as_deref() != Some("ExternalName")
        && spec.cluster_ip.as_deref().is_none_or(str::is_empty)
}

/// The cluster IPs Services hold, and the Services still waiting for one,
/// kept up to date from the changed keys: a pass over every Service on
/// each change cost O(Services) per created Service (11,000 headless
/// Services of 1,000 TFJobs made it a hot spot of kube-sim's CPU).
#[derive(Debug, Default)]
struct Addresses {
    /// Service key -> (uid, the address it holds or was just given).
    held: HashMap<String, (Option<String>, Ipv4Addr)>,
    in_use: HashSet<Ipv4Addr>,
    waiting: BTreeSet<String>,
}

impl Addresses {
    fn release(&mut self, key: &str) {
        if let Some((_, ip)) = self.held.remove(key) {
            self.in_use.remove(&ip);
        }
    }

    fn hold(&mut self, key: &str, uid: Option<String>, ip: Ipv4Addr) {
        self.release(key);
        self.held.insert(key.to_string(), (uid, ip));
        self.in_use.insert(ip);
    }

    /// Records what the cache now holds under `key`.
    fn observe(&mut self, key: &str, service: Option<&Service>) {
        let Some(service) = service else {
            self.release(key);
            self.waiting.remove(key);
            return;
        };
        let uid = service.metadata.uid.clone();
        let address = service
            .spec
            .as_ref()
            .and_then(|s| s.cluster_ip.as_deref()?.parse::<Ipv4Addr>().ok());
        match address {
            Some(ip) => self.hold(key, uid, ip),
            // An address handed out to this very Service stays held while
            // the cache has not caught up with the write; one held for an
            // older Service of the same name is free again.
            None => {
                if self
                    .held
                    .get(key)
                    .is_some_and(|(held_uid, _)| *held_uid != uid)
                {
                    self.release(key);
                }
            }
        }
        if needs_cluster_ip(service) && !self.held.contains_key(key) {
            self.waiting.insert(key.to_string());
        } else {
            self.waiting.remove(key);
        }
    }

    fn update(&mut self, services: &Store<Service>, changes: informer::Changes) {
        if changes.all {
            *self = Self::default();
            for service in services.state() {
                self.observe(&informer::key_of(service.as_ref()), Some(&service));
            }
            return;
        }
        for key in changes.keys {
            let service = informer::get(services, &key);
            self.observe(&key, service.as_deref());
        }
    }
}

pub(crate) async fn run(
    client: kube::Client,
    services: Store<Service>,
    changes: Arc<Subscriber>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&services, &shutdown).await {
        return;
    }
    let mut pool = Ipv4Pool::service_cidr();
    let mut addresses = Addresses::default();
    let mut first = true;
    loop {
        let mut delta = changes.take();
        // The first pass looks at every Service.
        delta.all |= std::mem::take(&mut first);
        addresses.update(&services, delta);
        let waiting: Vec<String> = std::mem::take(&mut addresses.waiting).into_iter().collect();
        for key in waiting {
            let Some(service) = informer::get(&services, &key) else {
                continue;
            };
            let Some(ip) = pool.allocate(&addresses.in_use) else {
                tracing::warn!("the service range 10.96.0.0/12 is full");
                addresses.waiting.insert(key);
                continue;
            };
            let name = service.metadata.name.clone().unwrap_or_default();
            let namespace = service.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Service> = Api::namespaced(client.clone(), &namespace);
            let patch = json!({
                "metadata": {"resourceVersion": service.metadata.resource_version},
                "spec": {"clusterIP": ip.to_string(), "clusterIPs": [ip.to_string()]},
            });
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => addresses.hold(&key, service.metadata.uid.clone(), ip),
                // A conflict brings the newer Service through the watch,
                // which puts it back on the waiting list.
                Err(e) => tracing::debug!(service = %name, error = %e, "cluster IP write failed"),
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = changes.notified() => informer::coalesce().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(spec: serde_json::Value) -> Service {
        serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": spec})).unwrap()
    }

    fn named(name: &str, uid: &str, spec: serde_json::Value) -> Service {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "uid": uid}, "spec": spec}),
        )
        .unwrap()
    }

    #[test]
    fn addresses_follow_the_changed_services_and_an_address_given_out_stays_held() {
        let mut addresses = Addresses::default();
        let ip: Ipv4Addr = "10.96.0.7".parse().unwrap();
        addresses.observe(
            "ns/a",
            Some(&named("a", "1", json!({"clusterIP": "10.96.0.7"}))),
        );
        addresses.observe("ns/h", Some(&named("h", "2", json!({"clusterIP": "None"}))));
        addresses.observe("ns/b", Some(&named("b", "3", json!({}))));
        assert!(addresses.in_use.contains(&ip));
        assert_eq!(addresses.waiting, BTreeSet::from(["ns/b".to_string()]));
        // b is given an address; a stale cached b without it keeps it held.
        let given: Ipv4Addr = "10.96.0.8".parse().unwrap();
        addresses.waiting.clear();
        addresses.hold("ns/b", Some("3".into()), given);
        addresses.observe("ns/b", Some(&named("b", "3", json!({}))));
        assert!(addresses.waiting.is_empty() && addresses.in_use.contains(&given));
        // A new Service of the same name needs its own address.
        addresses.observe("ns/b", Some(&named("b", "4", json!({}))));
        assert!(!addresses.in_use.contains(&given));
        assert_eq!(addresses.waiting, BTreeSet::from(["ns/b".to_string()]));
        // A deleted Service frees its address.
        addresses.observe("ns/a", None);
        assert!(!addresses.in_use.contains(&ip));
    }

    #[test]
    fn headless_external_name_and_addressed_services_are_left_alone() {
        assert!(needs_cluster_ip(&service(json!({"ports": [{"port": 80}]}))));
        assert!(needs_cluster_ip(&service(json!({"clusterIP": ""}))));
        assert!(!needs_cluster_ip(&service(json!({"clusterIP": "None"}))));
        assert!(!needs_cluster_ip(&service(
            json!({"clusterIP": "10.96.0.9"})
        )));
        assert!(!needs_cluster_ip(&service(
            json!({"type": "ExternalName", "externalName": "x.example"})
        )));
    }
}
