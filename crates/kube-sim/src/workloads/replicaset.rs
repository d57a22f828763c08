//! The ReplicaSet controller: keeps `spec.replicas` pods of the template
//! running and reports them in the status.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::plan::{pods, replicaset};
use super::{
    Expectations, by_controller, next_round, owner_reference, pod_from_template, resource_version,
    status_patch,
};
use crate::kubelet::informer::{self, Subscriber};

pub(super) async fn run(
    client: kube::Client,
    replicasets: Store<ReplicaSet>,
    pods: Store<Pod>,
    wake: Arc<Subscriber>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&replicasets, &shutdown).await || !informer::ready(&pods, &shutdown).await {
        return;
    }
    let mut expectations = Expectations::default();
    loop {
        let owned = by_controller(&pods, "ReplicaSet");
        for rs in replicasets.state() {
            if rs.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let uid = rs.metadata.uid.clone().unwrap_or_default();
            let mine: Vec<&Pod> = owned
                .get(&uid)
                .map(|v| v.iter().map(Arc::as_ref).collect())
                .unwrap_or_default();
            let seen = |name: &str| {
                mine.iter()
                    .find(|p| p.metadata.name.as_deref() == Some(name))
                    .map(|p| (resource_version(*p), pods::is_active(p)))
            };
            if !expectations.satisfied(&uid, seen) {
                continue;
            }
            sync(&client, &rs, &mine, &mut expectations).await;
        }
        if !next_round(&wake, &shutdown).await {
            return;
        }
    }
}

async fn sync(
    client: &kube::Client,
    rs: &ReplicaSet,
    mine: &[&Pod],
    expectations: &mut Expectations,
) {
    let namespace = rs.metadata.namespace.clone().unwrap_or_default();
    let name = rs.metadata.name.clone().unwrap_or_default();
    let uid = rs.metadata.uid.clone().unwrap_or_default();
    let plan = replicaset::plan(rs, mine, Timestamp::now());
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    if let Some(template) = rs.spec.as_ref().and_then(|s| s.template.as_ref()) {
        for _ in 0..plan.create {
            let pod = pod_from_template(template, format!("{name}-"), owner_reference(rs));
            match pod_api.create(&PostParams::default(), &pod).await {
                Ok(created) => {
                    expectations.created(&uid, created.metadata.name.unwrap_or_default())
                }
                Err(e) => {
                    tracing::debug!(replicaset = %name, error = %e, "pod create failed");
                    break;
                }
            }
        }
    }
    for pod in plan.delete {
        match pod_api.delete(&pod, &DeleteParams::default()).await {
            Ok(_) => expectations.deleted(&uid, pod),
            Err(e) => {
                tracing::debug!(replicaset = %name, pod = %pod, error = %e, "pod delete failed")
            }
        }
    }
    let current = rs
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_else(|| json!({}));
    if current != plan.status {
        let api: Api<ReplicaSet> = Api::namespaced(client.clone(), &namespace);
        let patch = status_patch(&current, &plan.status);
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(replicaset = %name, error = %e, "status write failed");
        }
    }
}
