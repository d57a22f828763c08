//! Deployments and Jobs made with kubectl's generators, on both lanes: on
//! kube-sim (default) its workload controllers act; on the real lane
//! (GPUFLEET_TEST_CLUSTER=real) kube-controller-manager does, with KWOK
//! running the pods. The same assertions hold on both, so what kube-sim's
//! controllers report (names, labels, owner references, status counts,
//! condition types, reasons and messages) is checked against the real ones.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube_sim::KubeSim;
use kube_sim::lane::{Lane, client_from_kubeconfig};
use serde_json::json;

use crate::kubectl_parity::Kubectl;

/// The lane's client and kubectl, and kube-sim when it is the lane.
struct Target {
    client: kube::Client,
    kubectl: Kubectl,
    _sim: Option<KubeSim>,
}

async fn target() -> Target {
    match Lane::from_env().unwrap() {
        Lane::Sim => {
            let sim = KubeSim::builder().start().await.unwrap();
            Target {
                client: sim.client(),
                kubectl: Kubectl::new(&sim),
                _sim: Some(sim),
            }
        }
        Lane::Real(cluster) => Target {
            client: client_from_kubeconfig(&cluster.admin_kubeconfig)
                .await
                .unwrap(),
            kubectl: Kubectl::for_kubeconfig(&cluster.admin_kubeconfig),
            _sim: None,
        },
    }
}

/// A namespace and a Node of the test's own (KWOK manages the Node on the
/// real lane; kube-sim simulates it), removed by [`Scope::close`].
struct Scope {
    namespace: String,
    node: String,
}

impl Scope {
    async fn open(client: &kube::Client, name: &str) -> Scope {
        let suffix: String = uuid::Uuid::new_v4().simple().to_string()[..6].into();
        let scope = Scope {
            namespace: format!("{name}-{suffix}"),
            node: format!("{name}-node-{suffix}"),
        };
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": scope.namespace}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": scope.node, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": scope.node, "type": "kwok"}},
            "status": {"capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
                       "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
        scope
    }

    async fn close(self, client: &kube::Client) {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let _ = namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await;
        let nodes: Api<Node> = Api::all(client.clone());
        let _ = nodes.delete(&self.node, &DeleteParams::default()).await;
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_rolls_out_and_rolls_to_a_new_image_as_on_kube_controller_manager() {
    let target = target().await;
    let scope = Scope::open(&target.client, "wl-deploy").await;
    let ns = scope.namespace.as_str();
    let kubectl = &target.kubectl;
    kubectl
        .ok(&[
            "create",
            "deployment",
            "web",
            "-n",
            ns,
            "--image=nginx:1.27",
            "--replicas=2",
        ])
        .await;
    kubectl
        .ok(&[
            "rollout",
            "status",
            "deployment/web",
            "-n",
            ns,
            "--timeout=60s",
        ])
        .await;
    kubectl
        .ok(&[
            "set",
            "image",
            "deployment/web",
            "-n",
            ns,
            "nginx=nginx:1.28",
        ])
        .await;
    kubectl
        .ok(&[
            "rollout",
            "status",
            "deployment/web",
            "-n",
            ns,
            "--timeout=60s",
        ])
        .await;

    let deployments: Api<Deployment> = Api::namespaced(target.client.clone(), ns);
    let d = deployments.get("web").await.unwrap();
    assert_eq!(
        d.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
        "2"
    );
    let status = d.status.unwrap();
    assert_eq!(status.observed_generation, d.metadata.generation);
    assert_eq!(
        (
            status.replicas,
            status.updated_replicas,
            status.ready_replicas,
            status.available_replicas
        ),
        (Some(2), Some(2), Some(2), Some(2))
    );
    let conditions: BTreeMap<String, (String, String, String)> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.type_,
                (
                    c.status,
                    c.reason.unwrap_or_default(),
                    c.message.unwrap_or_default(),
                ),
            )
        })
        .collect();
    assert_eq!(
        conditions["Available"],
        (
            "True".into(),
            "MinimumReplicasAvailable".into(),
            "Deployment has minimum availability.".into()
        )
    );
    let (status_p, reason_p, message_p) = &conditions["Progressing"];
    assert_eq!(
        (status_p.as_str(), reason_p.as_str()),
        ("True", "NewReplicaSetAvailable")
    );
    assert!(
        message_p.ends_with("has successfully progressed."),
        "{message_p}"
    );

    let sets: Api<ReplicaSet> = Api::namespaced(target.client.clone(), ns);
    let mut sets = sets.list(&ListParams::default()).await.unwrap().items;
    sets.sort_by_key(|rs| {
        rs.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"].clone()
    });
    assert_eq!(sets.len(), 2);
    for (rs, (revision, replicas)) in sets.iter().zip([("1", 0), ("2", 2)]) {
        let name = rs.metadata.name.clone().unwrap();
        let hash = &rs.metadata.labels.as_ref().unwrap()["pod-template-hash"];
        assert_eq!(name, format!("web-{hash}"));
        assert_eq!(
            rs.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"],
            revision
        );
        assert_eq!(rs.spec.as_ref().unwrap().replicas, Some(replicas));
        assert_eq!(
            rs.spec
                .as_ref()
                .unwrap()
                .selector
                .match_labels
                .as_ref()
                .unwrap()["pod-template-hash"],
            *hash
        );
        let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("Deployment", "web", Some(true), Some(true))
        );
    }
    let current = sets[1].metadata.name.clone().unwrap();
    let pods: Api<Pod> = Api::namespaced(target.client.clone(), ns);
    eventually("only the new ReplicaSet's pods are left", || async {
        let live: Vec<Pod> = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.len() == 2
            && live.iter().all(|p| {
                let name = p.metadata.name.as_deref().unwrap_or_default();
                name.strip_prefix(&format!("{current}-"))
                    .is_some_and(|s| s.len() == 5)
            })
    })
    .await;
    scope.close(&target.client).await;
}

fn condition<'a>(conditions: &'a [JobCondition], kind: &str) -> &'a JobCondition {
    conditions
        .iter()
        .find(|c| c.type_ == kind)
        .unwrap_or_else(|| panic!("no {kind} condition in {conditions:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_complete_or_fail_at_their_backoff_limit_as_on_kube_controller_manager() {
    let target = target().await;
    let scope = Scope::open(&target.client, "wl-job").await;
    let ns = scope.namespace.as_str();
    let kubectl = &target.kubectl;
    kubectl
        .ok(&[
            "create",
            "job",
            "pi",
            "-n",
            ns,
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
            "-n",
            ns,
            "--timeout=60s",
        ])
        .await;
    let jobs: Api<Job> = Api::namespaced(target.client.clone(), ns);
    let pi = jobs.get("pi").await.unwrap();
    let uid = pi.metadata.uid.clone().unwrap();
    assert_eq!(
        pi.spec
            .as_ref()
            .unwrap()
            .selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap()["batch.kubernetes.io/controller-uid"],
        uid
    );
    let spec = pi.spec.as_ref().unwrap();
    assert_eq!(
        (
            spec.completions,
            spec.parallelism,
            spec.backoff_limit,
            spec.manual_selector,
            spec.suspend,
            spec.completion_mode.as_deref(),
            spec.pod_replacement_policy.as_deref()
        ),
        (
            Some(1),
            Some(1),
            Some(6),
            Some(false),
            Some(false),
            Some("NonIndexed"),
            Some("TerminatingOrFailed")
        ),
        "the server's Job defaults"
    );
    let status = pi.status.unwrap();
    // Zero counts are left out; `ready` and `terminating` are written.
    assert_eq!(
        (
            status.succeeded,
            status.active,
            status.failed,
            status.ready,
            status.terminating
        ),
        (Some(1), None, None, Some(0), Some(0))
    );
    assert!(status.start_time.is_some() && status.completion_time.is_some());
    let conditions = status.conditions.unwrap();
    for kind in ["SuccessCriteriaMet", "Complete"] {
        let c = condition(&conditions, kind);
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
            (
                "True",
                Some("CompletionsReached"),
                Some("Reached expected number of succeeded pods")
            ),
            "{kind}"
        );
    }
    let pods: Api<Pod> = Api::namespaced(target.client.clone(), ns);
    let pi_pods = pods
        .list(&ListParams::default().labels("job-name=pi"))
        .await
        .unwrap()
        .items;
    assert_eq!(pi_pods.len(), 1);
    let labels = pi_pods[0].metadata.labels.clone().unwrap();
    for (key, value) in [
        ("batch.kubernetes.io/job-name", "pi"),
        ("controller-uid", uid.as_str()),
        ("batch.kubernetes.io/controller-uid", uid.as_str()),
    ] {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
    }
    assert!(
        pi_pods[0]
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("pi-")
    );

    let manifest = kubectl.file(
        "failing.yaml",
        &format!(
            r#"
apiVersion: batch/v1
kind: Job
metadata: {{name: flaky, namespace: {ns}}}
spec:
  backoffLimit: 1
  template:
    metadata:
      annotations: {{kube-sim.gpufleet.dev/run-seconds: "0.2", kube-sim.gpufleet.dev/exit-code: "1"}}
    spec:
      restartPolicy: Never
      containers: [{{name: main, image: busybox}}]
"#
        ),
    );
    kubectl
        .ok(&["apply", "--validate=strict", "-f", &manifest])
        .await;
    kubectl
        .ok(&[
            "wait",
            "--for=condition=failed",
            "job/flaky",
            "-n",
            ns,
            "--timeout=50s",
        ])
        .await;
    let status = jobs.get("flaky").await.unwrap().status.unwrap();
    assert_eq!(status.failed, Some(2), "one run plus backoffLimit retries");
    let conditions = status.conditions.unwrap();
    for kind in ["FailureTarget", "Failed"] {
        let c = condition(&conditions, kind);
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
            (
                "True",
                Some("BackoffLimitExceeded"),
                Some("Job has reached the specified backoff limit")
            ),
            "{kind}"
        );
    }
    scope.close(&target.client).await;
}
