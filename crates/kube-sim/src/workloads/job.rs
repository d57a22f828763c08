//! The Job controller: runs the template's pods to the wanted number of
//! completions, within the backoff limit and deadline, and keeps the Job
//! status and conditions `kubectl wait --for=condition=complete` reads.

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::plan::job;
use super::{Expectations, PodOwner, owner_reference, pod_from_template, status_patch};

impl PodOwner for Job {
    async fn sync(
        client: &kube::Client,
        owner: &Self,
        mine: &[&Pod],
        expectations: &mut Expectations,
    ) {
        sync(client, owner, mine, expectations).await;
    }
}

async fn sync(client: &kube::Client, j: &Job, mine: &[&Pod], expectations: &mut Expectations) {
    let namespace = j.metadata.namespace.clone().unwrap_or_default();
    let name = j.metadata.name.clone().unwrap_or_default();
    let uid = j.metadata.uid.clone().unwrap_or_default();
    let plan = job::plan(j, mine, Timestamp::now());
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    if let Some(template) = j.spec.as_ref().map(|s| &s.template) {
        for _ in 0..plan.create {
            let pod = pod_from_template(template, format!("{name}-"), owner_reference(j));
            match pod_api.create(&PostParams::default(), &pod).await {
                Ok(created) => {
                    expectations.created(&uid, created.metadata.name.unwrap_or_default())
                }
                Err(e) => {
                    tracing::debug!(job = %name, error = %e, "pod create failed");
                    break;
                }
            }
        }
    }
    for pod in plan.delete {
        match pod_api.delete(&pod, &DeleteParams::default()).await {
            Ok(_) => expectations.deleted(&uid, pod),
            Err(e) => tracing::debug!(job = %name, pod = %pod, error = %e, "pod delete failed"),
        }
    }
    let current = j
        .status
        .as_ref()
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or_else(|| json!({}));
    if current != plan.status {
        let api: Api<Job> = Api::namespaced(client.clone(), &namespace);
        let patch = status_patch(&current, &plan.status);
        if let Err(e) = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::debug!(job = %name, error = %e, "status write failed");
        }
    }
}
