//! Cluster IPs for Services, allocated from 10.96.0.0/12 by a controller
//! (as the apiserver's allocator would at create time), unique and not
//! handed out again while a Service holds them.

use std::collections::HashSet;
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
    loop {
        // Services are few; each pass looks at all of them, so the keys
        // only need draining.
        changes.take();
        let all = services.state();
        let mut in_use: HashSet<Ipv4Addr> = all
            .iter()
            .filter_map(|s| s.spec.as_ref()?.cluster_ip.as_deref()?.parse().ok())
            .collect();
        for service in all.iter().filter(|s| needs_cluster_ip(s)) {
            let Some(ip) = pool.allocate(&in_use) else {
                tracing::warn!("the service range 10.96.0.0/12 is full");
                break;
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
                Ok(_) => {
                    in_use.insert(ip);
                }
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
