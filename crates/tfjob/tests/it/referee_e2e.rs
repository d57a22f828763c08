//! The referee: Kubeflow training-operator v1.9.3, built unmodified from the
//! Go module proxy (scripts/training-operator.sh), run as a process beside
//! the API server with `--enable-scheme=tfjob`, its cert rotation and its
//! validating webhook on, as its own Deployment runs it. How it is started,
//! and which parts of a cluster the test plays for it, is in
//! `referee_process.rs`, which the process bench shares.

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube_sim::lane::Lane;
use serde_json::json;

use crate::referee_process::{
    CERT_SECRET, OPERATOR_NAMESPACE, RefereeStart, WEBHOOK_CONFIGURATION, tail,
};
use crate::support::{
    TestCluster, create_job, eventually_within, replica, test_cluster, wait_for_condition,
};

/// The operator process; killed when dropped.
pub struct Referee {
    child: Child,
    log: PathBuf,
    /// The kubeconfig file and the log live here.
    _work: tempfile::TempDir,
}

impl Referee {
    pub fn log_tail(&self) -> String {
        tail(&self.log, 30)
    }
}

impl Drop for Referee {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the referee against the test's cluster, ready.
pub async fn start_referee(cluster: &TestCluster) -> Referee {
    start_referee_with(cluster, Vec::new()).await
}

/// [`start_referee`] with flags after the usual ones
/// (`--gang-scheduler-name` and so on).
pub async fn start_referee_with(cluster: &TestCluster, extra_args: Vec<String>) -> Referee {
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = match Lane::from_env().unwrap() {
        Lane::Real(real) => real.admin_kubeconfig,
        Lane::Sim => {
            let path = work.path().join("kubeconfig");
            std::fs::write(&path, cluster.sim().kubeconfig()).unwrap();
            path
        }
    };
    let log = work.path().join("training-operator.log");
    let child = crate::referee_process::start_referee(RefereeStart {
        admin: cluster.client.clone(),
        admin_kubeconfig: &kubeconfig,
        operator_kubeconfig: &kubeconfig,
        log: &log,
        extra_args,
    })
    .await;
    Referee {
        child,
        log,
        _work: work,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn training_operator_v1_9_3_runs_unmodified_with_its_webhook_and_cert_rotation() {
    let cluster = test_cluster("referee").await;
    let referee = start_referee(&cluster).await;
    let configurations = webhook_configurations(&cluster);
    let injected = configurations.get(WEBHOOK_CONFIGURATION).await.unwrap();
    let bundle = injected.data["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let secret: Api<Secret> = Api::namespaced(cluster.client.clone(), OPERATOR_NAMESPACE);
    let ca = secret
        .get(CERT_SECRET)
        .await
        .unwrap()
        .data
        .unwrap_or_default();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(&bundle)
            .ok(),
        ca.get("ca.crt").map(|c| c.0.clone()),
        "the rotator injected its CA into the webhook configuration"
    );

    // The webhook, called by the API server: a TFJob without a
    // `tensorflow` container is refused in the operator's words.
    let jobs = crate::support::jobs(&cluster);
    let mut no_tensorflow = replica(1, Some("1"), 0);
    no_tensorflow["template"]["spec"]["containers"][0]["name"] = json!("trainer");
    let refused: tfjob::api::TFJobObject = serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1", "kind": "TFJob",
        "metadata": {"name": "no-tensorflow", "namespace": cluster.namespace},
        "spec": {"tfReplicaSpecs": {"Worker": no_tensorflow}},
    }))
    .unwrap();
    match jobs.create(&PostParams::default(), &refused).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert_eq!(
                status.message,
                "admission webhook \"validator.tfjob.training-operator.kubeflow.org\" denied the request: spec.tfReplicaSpecs[Worker].template.spec.containers: Required value: must have at least one container with name tensorflow"
            );
        }
        other => panic!(
            "the webhook let a TFJob without a tensorflow container through: {other:?}\n{}",
            referee.log_tail()
        ),
    }

    // The operator, reconciling: a two-worker job runs to Succeeded.
    let mut spec = json!({"tfReplicaSpecs": {"Worker": replica(2, Some("1"), 0)}});
    spec["runPolicy"] = json!({"cleanPodPolicy": "None"});
    create_job(&cluster, "smoke", spec).await;
    let deadline = Duration::from_secs(90);
    // training-operator v1.9 labels its children with the
    // training.kubeflow.org/ keys only.
    let selector = ListParams::default().labels("training.kubeflow.org/job-name=smoke");
    let pods = crate::support::pods(&cluster);
    let services = crate::support::services(&cluster);
    eventually_within(
        deadline,
        "the referee creates both worker pods and Services",
        || async {
            pods.list(&selector)
                .await
                .map(|l| l.items.len())
                .unwrap_or(0)
                == 2
                && services
                    .list(&selector)
                    .await
                    .map(|l| l.items.len())
                    .unwrap_or(0)
                    == 2
        },
    )
    .await;
    let status = wait_for_condition(&cluster, "smoke", "Succeeded").await;
    assert!(
        status.completion_time.is_some(),
        "a succeeded job has its completion time: {status:?}"
    );

    drop(referee);
    forget_referee(&cluster).await;
}

/// The ValidatingWebhookConfigurations of the test's cluster.
fn webhook_configurations(cluster: &TestCluster) -> Api<DynamicObject> {
    Api::all_with(
        cluster.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(
                "admissionregistration.k8s.io",
                "v1",
                "ValidatingWebhookConfiguration",
            ),
            "validatingwebhookconfigurations",
        ),
    )
}

/// After a referee has stopped, on the real lane: that cluster is shared,
/// so a webhook configuration whose server is gone would refuse every
/// later TFJob, and the other tests expect our CRD (generated from the
/// Rust types) rather than upstream's. kube-sim is the test's own: nothing
/// to do.
pub async fn forget_referee(cluster: &TestCluster) {
    if cluster.kube_sim().is_some() {
        return;
    }
    let configurations = webhook_configurations(cluster);
    let _ = configurations
        .delete(WEBHOOK_CONFIGURATION, &DeleteParams::default())
        .await;
    let crds: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let current = crds.get("tfjobs.kubeflow.org").await.unwrap();
    let mut ours = tfjob::api::crd();
    ours.metadata.resource_version = current.metadata.resource_version;
    crds.replace("tfjobs.kubeflow.org", &PostParams::default(), &ours)
        .await
        .unwrap_or_else(|e| panic!("restoring our TFJob CRD after the referee: {e}"));
}
