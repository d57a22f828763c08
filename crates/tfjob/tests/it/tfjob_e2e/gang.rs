//! Gang scheduling with Volcano and with scheduler-plugins PodGroups, on
//! both lanes. Neither lane runs a gang scheduler, so each test installs
//! the PodGroup CRD and plays the scheduler: it sets the group's
//! status.phase and binds the pods to the Node.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tfjob::api::{PodGroupObject, SchedulerPlugins};

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_job_waits_for_admission_and_then_starts_all_its_pods_together() {
    let cluster = test_cluster("gang").await;
    install_pod_group_crd::<tfjob::api::Volcano>(&cluster).await;
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
        bind(&cluster, &name).await;
    }
    wait_for_condition(&cluster, "gang", "Succeeded").await;
    eventually("the finished job's PodGroup is deleted", || async {
        groups.get_opt("gang").await.unwrap().is_none()
    })
    .await;
    operator.stop().await;
}

/// A cluster-scoped PriorityClass for one test, deleted again on drop of
/// the test's namespace run (its name carries the namespace).
async fn create_priority_class(cluster: &TestCluster, name: &str, value: i32) {
    let classes: Api<PriorityClass> = Api::all(cluster.client.clone());
    let class: PriorityClass = serde_json::from_value(json!({
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "labels": {"tfjob.gpufleet.dev/e2e": "true"}},
        "value": value,
    }))
    .unwrap();
    classes
        .create(&PostParams::default(), &class)
        .await
        .unwrap_or_else(|error| panic!("creating PriorityClass {name}: {error}"));
}

async fn delete_priority_class(cluster: &TestCluster, name: &str) {
    let classes: Api<PriorityClass> = Api::all(cluster.client.clone());
    classes
        .delete(name, &Default::default())
        .await
        .unwrap_or_else(|error| panic!("deleting PriorityClass {name}: {error}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_plugins_gang_follows_the_job_and_its_priority_classes() {
    let cluster = test_cluster("coscheduling").await;
    install_pod_group_crd::<SchedulerPlugins>(&cluster).await;
    let high = format!("{}-high", cluster.namespace);
    create_priority_class(&cluster, &high, 1000).await;
    let operator = start_operator_with(&cluster, |config| {
        config.plan.gang = Some(tfjob::plan::gang::GangConfig {
            scheduler_name: "scheduler-plugins-scheduler".into(),
        });
    })
    .await;
    let mut worker = replica(2, Some("1"), 0);
    worker["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "500m"}});
    worker["template"]["spec"]["priorityClassName"] = json!(high);
    let mut ps = replica(1, None, 0);
    ps["template"]["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "1"}});
    create_job(
        &cluster,
        "cosched",
        json!({
            "runPolicy": {"schedulingPolicy": {"minAvailable": 2, "scheduleTimeoutSeconds": 30}},
            "tfReplicaSpecs": {"Worker": worker, "PS": ps},
        }),
    )
    .await;
    let groups: Api<PodGroupObject<SchedulerPlugins>> =
        Api::namespaced(cluster.client.clone(), &cluster.namespace);
    eventually("the scheduler-plugins PodGroup exists", || async {
        groups.get_opt("cosched").await.unwrap().is_some()
    })
    .await;
    let group = groups.get("cosched").await.unwrap();
    // The two places go to the Worker pods, whose PriorityClass (1000)
    // outranks the PS (none): 2 x 500m, not PS 1 + one Worker 500m.
    assert_eq!(
        group.spec,
        json!({"minMember": 2, "minResources": {"cpu": "1"}, "scheduleTimeoutSeconds": 30})
    );
    // Coscheduling needs the pods to exist to gather the gang: they come
    // while the group is still Pending, labelled and named to its scheduler.
    eventually("all three pods are created", || async {
        job_pods(&cluster, "cosched").await.len() == 3
    })
    .await;
    let pods_api: Api<Pod> = pods(&cluster);
    for (name, _) in job_pods(&cluster, "cosched").await {
        let pod = pods_api.get(&name).await.unwrap();
        assert_eq!(
            pod.spec.unwrap().scheduler_name.as_deref(),
            Some("scheduler-plugins-scheduler")
        );
        assert_eq!(
            pod.metadata.labels.unwrap()["scheduling.x-k8s.io/pod-group"],
            "cosched"
        );
    }

    // The job changes: a third worker and a bigger minAvailable. The
    // group follows (in place: same UID), and the new pod joins it.
    patch_spec(
        &cluster,
        "cosched",
        json!({
            "runPolicy": {"schedulingPolicy": {"minAvailable": 3}},
            "tfReplicaSpecs": {"Worker": {"replicas": 3}},
        }),
    )
    .await;
    eventually("the PodGroup follows the job", || async {
        let spec = groups.get("cosched").await.unwrap().spec;
        spec["minMember"] == 3 && spec["minResources"] == json!({"cpu": "1500m"})
    })
    .await;
    assert_eq!(
        groups.get("cosched").await.unwrap().metadata.uid,
        group.metadata.uid
    );
    eventually("the fourth pod is created", || async {
        job_pods(&cluster, "cosched").await.len() == 4
    })
    .await;

    // The scheduler gathers the gang and binds it.
    groups
        .patch_status(
            "cosched",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Scheduling"}})),
        )
        .await
        .unwrap();
    for (name, _) in job_pods(&cluster, "cosched").await {
        bind(&cluster, &name).await;
    }
    wait_for_condition(&cluster, "cosched", "Succeeded").await;
    eventually("the finished job's PodGroup is deleted", || async {
        groups.get_opt("cosched").await.unwrap().is_none()
    })
    .await;
    // The operator counts the delete when its answer arrives, which can be
    // after this test's GET already finds the group gone.
    eventually("the operator counts the PodGroup deleted", || async {
        operator.metric("deleted_pod_groups_total") == Some(1.0)
    })
    .await;
    assert_eq!(operator.metric("created_pod_groups_total"), Some(1.0));
    assert_eq!(operator.metric("deleted_pod_groups_total"), Some(1.0));
    operator.stop().await;
    delete_priority_class(&cluster, &high).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volcano_gang_naming_a_missing_priority_class_gets_its_group_and_one_warning() {
    let cluster = test_cluster("gang-priority").await;
    install_pod_group_crd::<tfjob::api::Volcano>(&cluster).await;
    let operator = start_operator_with(&cluster, |config| {
        config.plan.gang = Some(tfjob::plan::gang::GangConfig {
            scheduler_name: "volcano".into(),
        });
    })
    .await;
    let missing = format!("{}-missing", cluster.namespace);
    create_job(
        &cluster,
        "prio",
        json!({
            "runPolicy": {"schedulingPolicy": {"priorityClass": missing, "queue": "research"}},
            "tfReplicaSpecs": {"Worker": replica(2, Some("1"), 0)},
        }),
    )
    .await;
    let groups: Api<PodGroupObject> = Api::namespaced(cluster.client.clone(), &cluster.namespace);
    eventually("the PodGroup exists", || async {
        groups.get_opt("prio").await.unwrap().is_some()
    })
    .await;
    let group = groups.get("prio").await.unwrap();
    assert_eq!(group.spec["priorityClassName"], json!(missing));
    assert_eq!(group.spec["queue"], "research");
    eventually("a PriorityClassNotFound warning", || async {
        event_count(&cluster, "PriorityClassNotFound").await == 1
    })
    .await;
    // Later passes (the group's status changes) do not repeat it.
    groups
        .patch_status(
            "prio",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Inqueue"}})),
        )
        .await
        .unwrap();
    eventually("both pods are created", || async {
        job_pods(&cluster, "prio").await.len() == 2
    })
    .await;
    assert_eq!(event_count(&cluster, "PriorityClassNotFound").await, 1);
    operator.stop().await;
}
