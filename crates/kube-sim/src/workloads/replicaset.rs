//! The ReplicaSet controller: keeps `spec.replicas` pods of the template
//! running and reports them in the status.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::plan::replicaset;
use super::{Expectations, PodOwner, owner_reference, pod_from_template, status_patch};

impl PodOwner for ReplicaSet {
    async fn sync(
        client: &kube::Client,
        owner: &Self,
        mine: &[&Pod],
        expectations: &mut Expectations,
    ) {
        sync(client, owner, mine, expectations).await;
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
