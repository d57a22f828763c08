//! The `kubeflow.org/v1` TFJob API: wire types, replica types, in-memory
//! defaults, validation and the generated CRD.

// `printcolumn(..)` repeats `type_ = ".."` by design; clippy reads the
// repeated key as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
mod types;

pub mod defaults;
pub mod object;
pub mod v1alpha1;
pub mod validate;

pub use object::{PodGroupApi, PodGroupObject, SchedulerPlugins, TFJobObject, Volcano};
pub use types::*;

use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group.
pub const GROUP: &str = "kubeflow.org";
/// Served version.
pub const VERSION: &str = "v1";
/// `apiVersion` of TFJobs (and of the owner references on their children).
pub const API_VERSION: &str = "kubeflow.org/v1";
/// Kind.
pub const KIND: &str = "TFJob";

/// `runPolicy.managedBy` of jobs this operator reconciles (unset means the
/// same); a job managed by anything else (e.g. MultiKueue) is left alone.
pub const MANAGED_BY_OPERATOR: &str = "kubeflow.org/training-operator";

/// Name of the container that gets `TF_CONFIG` and decides exit codes.
pub const CONTAINER_NAME: &str = "tensorflow";
/// Name of the port every replica listens on.
pub const PORT_NAME: &str = "tfjob-port";
/// Port used when the template names none.
pub const DEFAULT_PORT: i32 = 2222;

/// A replica type, ordered as upstream visits them (alphabetically by
/// canonical key), unknown types last.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReplicaType {
    Chief,
    Evaluator,
    Master,
    PS,
    Worker,
    /// A key that is none of the five; kept as written (upstream does too).
    Other(String),
}

impl ReplicaType {
    /// The type a key means, ignoring case (`worker`, `WORKER` → `Worker`).
    pub fn from_key(key: &str) -> ReplicaType {
        match key.to_ascii_lowercase().as_str() {
            "chief" => ReplicaType::Chief,
            "evaluator" => ReplicaType::Evaluator,
            "master" => ReplicaType::Master,
            "ps" => ReplicaType::PS,
            "worker" => ReplicaType::Worker,
            _ => ReplicaType::Other(key.to_string()),
        }
    }

    /// The canonical key (`Worker`, `PS`, ...), used in `replicaStatuses`
    /// and condition messages.
    pub fn canonical(&self) -> &str {
        match self {
            ReplicaType::Chief => "Chief",
            ReplicaType::Evaluator => "Evaluator",
            ReplicaType::Master => "Master",
            ReplicaType::PS => "PS",
            ReplicaType::Worker => "Worker",
            ReplicaType::Other(key) => key,
        }
    }

    /// The lower-case name used in child names, labels and `TF_CONFIG`.
    pub fn lower(&self) -> String {
        self.canonical().to_ascii_lowercase()
    }

    /// Chief, or its legacy synonym Master: the replica that alone decides
    /// success when present.
    pub fn is_chief(&self) -> bool {
        matches!(self, ReplicaType::Chief | ReplicaType::Master)
    }

    /// One of the five types upstream knows (unknown types get pods and
    /// appear in `TF_CONFIG` but never count towards "distributed").
    pub fn is_known(&self) -> bool {
        !matches!(self, ReplicaType::Other(_))
    }
}

impl fmt::Display for ReplicaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.canonical())
    }
}

/// The TFJob CRD generated from the types.
pub fn crd() -> CustomResourceDefinition {
    TFJob::crd()
}

/// The CRD as YAML, as checked in under `deploy/crds/kubeflow.org.yaml`.
pub fn crds_yaml() -> Result<String, CrdYamlError> {
    let yaml = serde_saphyr::to_string(&crd()).map_err(|error| CrdYamlError(error.to_string()))?;
    let mut out = String::from("---\n");
    out.push_str(&yaml);
    if !yaml.ends_with('\n') {
        out.push('\n');
    }
    Ok(out)
}

/// The CRD could not be rendered as YAML.
#[derive(Debug, thiserror::Error)]
#[error("serialize CRD tfjobs.kubeflow.org to YAML: {0}")]
pub struct CrdYamlError(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_is_tfjobs_kubeflow_org_v1_with_status_and_the_state_and_age_columns() {
        let crd = crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("tfjobs.kubeflow.org"));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1");
        assert!(version.subresources.as_ref().unwrap().status.is_some());
        let columns: Vec<(&str, &str)> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(columns[0], ("State", ".status.conditions[-1:].type"));
        assert!(columns.contains(&("Age", ".metadata.creationTimestamp")));
        let schema = serde_json::to_value(version.schema.as_ref().unwrap()).unwrap();
        let spec = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for legacy in [
            "cleanPodPolicy",
            "ttlSecondsAfterFinished",
            "activeDeadlineSeconds",
            "backoffLimit",
        ] {
            assert!(spec.get(legacy).is_some(), "legacy field {legacy} declared");
        }
        let template = &spec["tfReplicaSpecs"]["additionalProperties"]["properties"]["template"];
        assert_eq!(template["x-kubernetes-preserve-unknown-fields"], true);
        assert!(
            crds_yaml()
                .unwrap()
                .contains("kind: CustomResourceDefinition")
        );
    }

    #[test]
    fn the_three_v1_dialects_decode() {
        for yaml in [
            // v1.0.x: run fields at the top of spec.
            "cleanPodPolicy: None\nttlSecondsAfterFinished: 10\nactiveDeadlineSeconds: 5\nbackoffLimit: 2\ntfReplicaSpecs:\n  worker: {replicas: 2, restartPolicy: ExitCode}\n",
            // HEAD: runPolicy, successPolicy, enableDynamicWorker.
            "runPolicy: {cleanPodPolicy: Running, backoffLimit: 3}\nsuccessPolicy: AllWorkers\nenableDynamicWorker: true\ntfReplicaSpecs:\n  PS: {replicas: 1}\n  Worker: {replicas: 4, restartPolicy: OnFailure}\n",
            // training-operator 1.9: suspend, managedBy, scheduleTimeoutSeconds.
            "runPolicy:\n  suspend: false\n  managedBy: kubeflow.org/training-operator\n  schedulingPolicy: {minAvailable: 2, queue: q, scheduleTimeoutSeconds: 30, minResources: {cpu: '2'}}\ntfReplicaSpecs:\n  Chief: {replicas: 1, restartPolicy: Always}\n  Evaluator: {restartPolicy: Never}\n",
        ] {
            let spec: TFJobSpec =
                serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}: {yaml}"));
            assert!(spec.tf_replica_specs.is_some());
        }
    }
}
