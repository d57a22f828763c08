//! kubectl's generator commands (protobuf bodies) for Deployments, Services
//! and Jobs, and the workload controllers behind `rollout status`, `scale`,
//! `set image`, `delete` and `wait --for=condition=…`, on kube-sim.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube_sim::KubeSim;
use serde_json::json;

use crate::kubectl_parity::Kubectl;
use crate::support::sim;

async fn with_node(sim: &KubeSim) {
    let nodes: Api<Node> = Api::all(sim.client());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "node-1"},
        "status": {"capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
}

/// Polls `check` until it holds, failing the test after 30 s with `what`.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn live_pods(sim: &KubeSim, selector: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    pods.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

async fn replica_sets(sim: &KubeSim, selector: &str) -> Vec<ReplicaSet> {
    let api: Api<ReplicaSet> = Api::default_namespaced(sim.client());
    api.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
}

/// The cells of the first row under a table's header.
fn second_row(table: &str) -> Vec<&str> {
    table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

#[tokio::test]
async fn create_deployment_rolls_out_scales_updates_and_is_collected() {
    let sim = sim().await;
    with_node(&sim).await;
    let kubectl = Kubectl::new(&sim);
    kubectl
        .ok(&[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=3",
            "--port=8080",
            "--",
            "sleep",
            "3600",
        ])
        .await;
    let deployments: Api<Deployment> = Api::default_namespaced(sim.client());
    let stored = deployments.get("web").await.unwrap();
    let container = &stored
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(container.image.as_deref(), Some("nginx:1.27"));
    assert_eq!(
        container.command.as_deref(),
        Some(&["sleep".to_string(), "3600".into()][..])
    );
    assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 8080);

    kubectl
        .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
        .await;
    let sets = replica_sets(&sim, "app=web").await;
    assert_eq!(sets.len(), 1, "one ReplicaSet for one template");
    let first = &sets[0];
    let hash = first.metadata.labels.as_ref().unwrap()["pod-template-hash"].clone();
    let first_name = first.metadata.name.clone().unwrap();
    assert_eq!(first_name, format!("web-{hash}"));
    let owner = &first.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.controller),
        ("Deployment", "web", Some(true))
    );
    let pods = live_pods(&sim, "app=web").await;
    assert_eq!(pods.len(), 3);
    for pod in &pods {
        let name = pod.metadata.name.as_deref().unwrap();
        let suffix = name
            .strip_prefix(&format!("{first_name}-"))
            .unwrap_or_default();
        assert_eq!(
            suffix.len(),
            5,
            "pod {name} is named <replicaset>-<5 characters>"
        );
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()["pod-template-hash"],
            hash
        );
    }
    let status = deployments.get_status("web").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.ready_replicas,
            status.available_replicas
        ),
        (Some(3), Some(3), Some(3), Some(3))
    );
    let reasons: BTreeSet<(String, String)> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.reason.unwrap_or_default()))
        .collect();
    assert_eq!(
        reasons,
        BTreeSet::from([
            ("Available".into(), "MinimumReplicasAvailable".into()),
            ("Progressing".into(), "NewReplicaSetAvailable".into()),
        ])
    );

    let table = kubectl.ok(&["get", "deployment", "web"]).await;
    assert_eq!(second_row(&table)[..4], ["web", "3/3", "3", "3"], "{table}");
    let table = kubectl.ok(&["get", "replicaset", &first_name]).await;
    assert_eq!(second_row(&table)[1..4], ["3", "3", "3"], "{table}");

    kubectl
        .ok(&["scale", "deployment/web", "--replicas=1"])
        .await;
    eventually("scaled down to one pod", || async {
        live_pods(&sim, "app=web").await.len() == 1
    })
    .await;
    kubectl
        .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
        .await;
    kubectl
        .ok(&["scale", "deployment/web", "--replicas=4"])
        .await;
    kubectl
        .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
        .await;
    assert_eq!(live_pods(&sim, "app=web").await.len(), 4);

    kubectl
        .ok(&["set", "image", "deployment/web", "nginx=nginx:1.28"])
        .await;
    kubectl
        .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
        .await;
    let sets = replica_sets(&sim, "app=web").await;
    assert_eq!(sets.len(), 2, "the old ReplicaSet is kept as history");
    for rs in &sets {
        let replicas = rs.spec.as_ref().unwrap().replicas;
        let revision =
            rs.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"].clone();
        if rs.metadata.name.as_deref() == Some(first_name.as_str()) {
            assert_eq!((replicas, revision.as_str()), (Some(0), "1"));
        } else {
            assert_eq!((replicas, revision.as_str()), (Some(4), "2"));
        }
    }
    eventually("the old pods are gone", || async {
        let pods = live_pods(&sim, "app=web").await;
        pods.len() == 4
            && pods.iter().all(|p| {
                p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("nginx:1.28")
            })
    })
    .await;
    let history = kubectl.ok(&["rollout", "history", "deployment/web"]).await;
    assert!(history.contains('1') && history.contains('2'), "{history}");

    kubectl.ok(&["delete", "deployment", "web"]).await;
    eventually("ReplicaSets and pods are garbage collected", || async {
        replica_sets(&sim, "app=web").await.is_empty()
            && live_pods(&sim, "app=web").await.is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_recreate_deployment_replaces_all_pods_at_once() {
    let sim = sim().await;
    with_node(&sim).await;
    let kubectl = Kubectl::new(&sim);
    let manifest = kubectl.file(
        "recreate.yaml",
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: batchy}
spec:
  replicas: 2
  strategy: {type: Recreate}
  selector: {matchLabels: {app: batchy}}
  template:
    metadata: {labels: {app: batchy}}
    spec:
      containers: [{name: main, image: "busybox:1.36"}]
"#,
    );
    kubectl
        .ok(&["apply", "--validate=strict", "-f", &manifest])
        .await;
    kubectl
        .ok(&["rollout", "status", "deployment/batchy", "--timeout=60s"])
        .await;
    kubectl
        .ok(&["set", "image", "deployment/batchy", "main=busybox:1.37"])
        .await;
    kubectl
        .ok(&["rollout", "status", "deployment/batchy", "--timeout=60s"])
        .await;
    let pods = live_pods(&sim, "app=batchy").await;
    assert_eq!(pods.len(), 2);
    assert!(
        pods.iter().all(
            |p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("busybox:1.37")
        )
    );
}

#[tokio::test]
async fn create_service_generators_store_all_four_types() {
    let sim = sim().await;
    let kubectl = Kubectl::new(&sim);
    kubectl
        .ok(&[
            "create",
            "service",
            "clusterip",
            "cip",
            "--tcp=5678:8080",
            "--tcp=80:http",
        ])
        .await;
    kubectl
        .ok(&[
            "create",
            "service",
            "clusterip",
            "headless",
            "--clusterip=None",
        ])
        .await;
    kubectl
        .ok(&[
            "create",
            "service",
            "nodeport",
            "np",
            "--tcp=5678:8080",
            "--node-port=30080",
        ])
        .await;
    kubectl
        .ok(&["create", "service", "loadbalancer", "lb", "--tcp=443"])
        .await;
    kubectl
        .ok(&[
            "create",
            "service",
            "externalname",
            "ext",
            "--external-name=db.example.com",
        ])
        .await;
    let services: Api<Service> = Api::default_namespaced(sim.client());
    let spec = |s: Service| serde_json::to_value(s.spec.unwrap()).unwrap();
    let cip = spec(services.get("cip").await.unwrap());
    assert_eq!(cip["type"], "ClusterIP");
    assert_eq!(cip["selector"], json!({"app": "cip"}));
    assert_eq!(
        cip["ports"],
        json!([
            {"name": "5678-8080", "protocol": "TCP", "port": 5678, "targetPort": 8080},
            {"name": "80-http", "protocol": "TCP", "port": 80, "targetPort": "http"},
        ])
    );
    assert_eq!(
        spec(services.get("headless").await.unwrap())["clusterIP"],
        "None"
    );
    let np = spec(services.get("np").await.unwrap());
    assert_eq!(
        (np["type"].clone(), np["ports"][0]["nodePort"].clone()),
        (json!("NodePort"), json!(30080))
    );
    let lb = spec(services.get("lb").await.unwrap());
    assert_eq!(
        (lb["type"].clone(), lb["ports"][0]["port"].clone()),
        (json!("LoadBalancer"), json!(443))
    );
    let ext = spec(services.get("ext").await.unwrap());
    assert_eq!(
        (ext["type"].clone(), ext["externalName"].clone()),
        (json!("ExternalName"), json!("db.example.com"))
    );
}

#[tokio::test]
async fn create_job_runs_to_completion_and_a_failing_job_stops_at_its_backoff_limit() {
    let sim = sim().await;
    with_node(&sim).await;
    let kubectl = Kubectl::new(&sim);
    kubectl
        .ok(&[
            "create",
            "job",
            "pi",
            "--image=perl:5.34",
            "--",
            "perl",
            "-e",
            "print 1",
        ])
        .await;
    kubectl
        .ok(&[
            "wait",
            "--for=condition=complete",
            "job/pi",
            "--timeout=60s",
        ])
        .await;
    let table = kubectl.ok(&["get", "job", "pi"]).await;
    assert_eq!(
        second_row(&table)[..3],
        ["pi", "Complete", "1/1"],
        "{table}"
    );
    let jobs: Api<Job> = Api::default_namespaced(sim.client());
    let pi = jobs.get("pi").await.unwrap();
    let uid = pi.metadata.uid.clone().unwrap();
    let status = pi.status.unwrap();
    assert_eq!((status.succeeded, status.active.unwrap_or(0)), (Some(1), 0));
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    let kinds: Vec<String> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(kinds, ["SuccessCriteriaMet", "Complete"]);
    let pods = live_pods(&sim, "job-name=pi").await;
    assert_eq!(pods.len(), 1, "the finished pod is kept");
    let labels = pods[0].metadata.labels.clone().unwrap();
    assert_eq!(labels["batch.kubernetes.io/job-name"], "pi");
    assert_eq!(labels["controller-uid"], uid);
    assert_eq!(labels["batch.kubernetes.io/controller-uid"], uid);

    let manifest = kubectl.file(
        "failing.yaml",
        r#"
apiVersion: batch/v1
kind: Job
metadata: {name: flaky}
spec:
  backoffLimit: 1
  template:
    metadata:
      annotations: {kube-sim.gpufleet.dev/run-seconds: "0.1", kube-sim.gpufleet.dev/exit-code: "1"}
    spec:
      restartPolicy: Never
      containers: [{name: main, image: busybox}]
"#,
    );
    kubectl
        .ok(&["apply", "--validate=strict", "-f", &manifest])
        .await;
    kubectl
        .ok(&[
            "wait",
            "--for=condition=failed",
            "job/flaky",
            "--timeout=60s",
        ])
        .await;
    let status = jobs.get("flaky").await.unwrap().status.unwrap();
    assert_eq!(status.failed, Some(2), "one try plus backoffLimit retries");
    let failed = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert_eq!(
        failed.message.as_deref(),
        Some("Job has reached the specified backoff limit")
    );

    kubectl
        .ok(&["delete", "job", "pi", "--cascade=foreground"])
        .await;
    eventually("the Job's pods are collected", || async {
        live_pods(&sim, "job-name=pi").await.is_empty()
    })
    .await;
}

#[tokio::test]
async fn the_tfjob_operator_deploy_manifest_applies_strictly_and_rolls_out() {
    let sim = sim().await;
    with_node(&sim).await;
    let kubectl = Kubectl::new(&sim);
    let deploy = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/tfjob");
    for manifest in ["01-rbac.yaml", "02-deployment.yaml"] {
        let path = deploy.join(manifest).display().to_string();
        kubectl
            .ok(&["apply", "--validate=strict", "-f", &path])
            .await;
    }
    kubectl
        .ok(&[
            "rollout",
            "status",
            "deployment/tf-job-operator",
            "-n",
            "kubeflow",
            "--timeout=60s",
        ])
        .await;
    let pods: Api<Pod> = Api::namespaced(sim.client(), "kubeflow");
    let running = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=tfjob"))
        .await
        .unwrap()
        .items;
    assert_eq!(running.len(), 2);
    assert!(
        running
            .iter()
            .all(|p| { p.spec.as_ref().unwrap().service_account_name.as_deref() == Some("tfjob") })
    );
}
