//! The Deployment controller: one ReplicaSet per pod template revision,
//! scaled step by step as the strategy allows, and the Deployment status
//! `kubectl rollout status` reads.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::plan::deployment::{
    self, DESIRED_REPLICAS, MAX_REPLICAS, NewReplicaSet, POD_TEMPLATE_HASH, REVISION,
};
use super::{
    Expectations, by_controller, next_round, owner_reference, resource_version, status_patch,
};
use crate::kubelet::informer::{self, Subscriber};
use crate::object::now_rfc3339;

pub(super) async fn run(
    client: kube::Client,
    deployments: Store<Deployment>,
    replicasets: Store<ReplicaSet>,
    wake: Arc<Subscriber>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&deployments, &shutdown).await
        || !informer::ready(&replicasets, &shutdown).await
    {
        return;
    }
    let mut expectations = Expectations::default();
    loop {
        let owned = by_controller(&replicasets, "Deployment");
        for d in deployments.state() {
            if d.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let uid = d.metadata.uid.clone().unwrap_or_default();
            let mine: Vec<&ReplicaSet> = owned
                .get(&uid)
                .map(|v| v.iter().map(Arc::as_ref).collect())
                .unwrap_or_default();
            let seen = |name: &str| {
                mine.iter()
                    .find(|rs| rs.metadata.name.as_deref() == Some(name))
                    .map(|rs| {
                        (
                            resource_version(*rs),
                            rs.metadata.deletion_timestamp.is_none(),
                        )
                    })
            };
            if !expectations.satisfied(&uid, seen) {
                continue;
            }
            sync(&client, &d, &mine, &mut expectations).await;
        }
        if !next_round(&wake, &shutdown).await {
            return;
        }
    }
}

async fn sync(
    client: &kube::Client,
    d: &Deployment,
    mine: &[&ReplicaSet],
    expectations: &mut Expectations,
) {
    let namespace = d.metadata.namespace.clone().unwrap_or_default();
    let name = d.metadata.name.clone().unwrap_or_default();
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let rs_api: Api<ReplicaSet> = Api::namespaced(client.clone(), &namespace);
    let plan = deployment::plan(d, mine);
    let mut wrote = false;
    if let Some(new) = &plan.create {
        match rs_api
            .create(&PostParams::default(), &new_replica_set(d, new))
            .await
        {
            Ok(_) => expectations.created(&uid, new.name.clone()),
            // Already there (a cache behind the server): adopt it next round.
            Err(e) => tracing::debug!(deployment = %name, error = %e, "replica set create failed"),
        }
        wrote = true;
    }
    for (rs, replicas) in &plan.scale {
        let patch = json!({"spec": {"replicas": replicas}});
        match rs_api
            .patch(rs, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => expectations.written(&uid, rs.clone(), resource_version(&written)),
            Err(e) => {
                tracing::debug!(deployment = %name, replicaset = %rs, error = %e, "scale failed")
            }
        }
        wrote = true;
    }
    for rs in &plan.delete {
        match rs_api.delete(rs, &DeleteParams::background()).await {
            Ok(_) => expectations.deleted(&uid, rs.clone()),
            Err(e) => {
                tracing::debug!(deployment = %name, replicaset = %rs, error = %e, "history cleanup failed")
            }
        }
    }
    let api: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
    let revision = plan.revision.to_string();
    let annotated = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION))
        == Some(&revision);
    if plan.revision > 0 && !annotated {
        let patch = json!({"metadata": {"annotations": {REVISION: revision}}});
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(deployment = %name, error = %e, "revision annotation failed");
        }
    }
    if wrote {
        // The status follows from the ReplicaSets once the cache has them.
        return;
    }
    let mut status = deployment::status(d, mine, &now_rfc3339());
    let current = d
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_else(|| json!({}));
    if let Some(collisions) = current.get("collisionCount") {
        status["collisionCount"] = collisions.clone();
    }
    if current != status {
        let patch = status_patch(&current, &status);
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(deployment = %name, error = %e, "status write failed");
        }
    }
}

fn new_replica_set(d: &Deployment, new: &NewReplicaSet) -> ReplicaSet {
    let spec = d.spec.clone().unwrap_or_default();
    let mut template = spec.template.clone();
    let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
    meta.labels
        .get_or_insert_with(BTreeMap::new)
        .insert(POD_TEMPLATE_HASH.into(), new.hash.clone());
    let mut selector: LabelSelector = spec.selector.clone();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(POD_TEMPLATE_HASH.into(), new.hash.clone());
    let desired = spec.replicas.unwrap_or(1);
    let (surge, _) = deployment::surge_and_unavailable(d);
    let mut labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(POD_TEMPLATE_HASH.into(), new.hash.clone());
    ReplicaSet {
        metadata: ObjectMeta {
            name: Some(new.name.clone()),
            namespace: d.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (REVISION.into(), new.revision.to_string()),
                (DESIRED_REPLICAS.into(), desired.to_string()),
                (MAX_REPLICAS.into(), (desired + surge).to_string()),
            ])),
            owner_references: Some(vec![owner_reference(d)]),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(new.replicas),
            min_ready_seconds: spec.min_ready_seconds,
            selector,
            template: Some(template),
        }),
        status: None,
    }
}
