//! Gang scheduling with Volcano PodGroups, on both lanes. Neither lane runs
//! Volcano, so the test installs the PodGroup CRD and plays Volcano: it
//! admits the group (status.phase Inqueue) and binds the pods to the Node.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tfjob::api::PodGroupObject;

use crate::support::*;

/// The PodGroup CRD, as far as the operator and this test use it.
async fn install_pod_group_crd(cluster: &TestCluster) {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "podgroups.scheduling.volcano.sh"},
        "spec": {
            "group": "scheduling.volcano.sh",
            "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup", "listKind": "PodGroupList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1beta1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    }))
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("the PodGroup CRD is refused: {error}"),
    }
    let groups: Api<PodGroupObject> = Api::all(cluster.client.clone());
    eventually("podgroups are served", || async {
        groups.list(&Default::default()).await.is_ok()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_job_waits_for_admission_and_then_starts_all_its_pods_together() {
    let cluster = test_cluster("gang").await;
    install_pod_group_crd(&cluster).await;
    let operator = start_operator_with(&cluster, |config| {
        config.plan.gang = Some(tfjob::plan::gang::GangConfig {
            scheduler_name: "volcano".into(),
        });
    })
    .await;
    let mut worker = replica(2, Some("1"), 0);
    worker["template"]["spec"]["containers"][0]["resources"] =
        json!({"requests": {"cpu": "500m", "memory": "1Gi"}});
    create_job(
        &cluster,
        "gang",
        json!({"tfReplicaSpecs": {"Worker": worker, "PS": replica(1, None, 0)}}),
    )
    .await;
    let groups: Api<PodGroupObject> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    eventually("the PodGroup exists", || async {
        groups.get_opt("gang").await.unwrap().is_some()
    })
    .await;
    let group = groups.get("gang").await.unwrap();
    assert_eq!(group.spec["minMember"], 3);
    assert_eq!(
        group.spec["minResources"],
        json!({"cpu": "1", "memory": "2Gi"})
    );
    // Not admitted yet: no pod at all (never a part of the gang).
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(job_pods(&cluster, "gang").await, []);

    // Volcano admits the group.
    groups
        .patch_status(
            "gang",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Inqueue"}})),
        )
        .await
        .unwrap();
    eventually("all three pods are created", || async {
        job_pods(&cluster, "gang").await.len() == 3
    })
    .await;
    // And places them (the pods name Volcano as their scheduler).
    let pods_api: Api<Pod> = pods(&cluster);
    for (name, _) in job_pods(&cluster, "gang").await {
        let pod = pods_api.get(&name).await.unwrap();
        let spec = pod.spec.unwrap();
        assert_eq!(spec.scheduler_name.as_deref(), Some("volcano"));
        assert_eq!(
            pod.metadata.annotations.unwrap()["scheduling.k8s.io/group-name"],
            "gang"
        );
        let binding = json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "tfjob-node-1"},
        });
        pods_api
            .create_subresource::<_, serde_json::Value>(
                "binding",
                &name,
                &PostParams::default(),
                &binding,
            )
            .await
            .unwrap();
    }
    wait_for_condition(&cluster, "gang", "Succeeded").await;
    eventually("the finished job's PodGroup is deleted", || async {
        groups.get_opt("gang").await.unwrap().is_none()
    })
    .await;
    operator.stop().await;
}
