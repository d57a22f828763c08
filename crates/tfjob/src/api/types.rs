//! The wire types of `kubeflow.org/v1` TFJob. Every field is optional on
//! input because three dialects of v1 YAML exist (v1.0.x with the run
//! fields at the top of `spec`, HEAD with `runPolicy`, training-operator
//! 1.9 with `suspend` and `managedBy`); the effective, defaulted view is
//! built by [`super::defaults`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// A TensorFlow training job: one pod and one headless Service per replica.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubeflow.org",
    version = "v1",
    kind = "TFJob",
    plural = "tfjobs",
    singular = "tfjob",
    namespaced,
    doc = "A distributed TensorFlow training job (Kubeflow TFJob).",
    status = "JobStatus",
    printcolumn(
        name = "State",
        type_ = "string",
        json_path = ".status.conditions[-1:].type"
    ),
    printcolumn(
        name = "Active",
        type_ = "string",
        priority = 1,
        json_path = ".status.replicaStatuses.*.active"
    ),
    printcolumn(
        name = "Succeeded",
        type_ = "string",
        priority = 1,
        json_path = ".status.replicaStatuses.*.succeeded"
    ),
    printcolumn(
        name = "Failed",
        type_ = "string",
        priority = 1,
        json_path = ".status.replicaStatuses.*.failed"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct TFJobSpec {
    /// Run-time policies (HEAD and training-operator dialects).
    // Defaulted to `{}` by the CRD schema, so every stored TFJob has one:
    // the Kubeflow SDK's model refuses a TFJob without it. Its fields get
    // no schema default: a v1.0.x job keeps them at the top of `spec`,
    // and a defaulted `runPolicy.cleanPodPolicy` would hide those.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub run_policy: Option<RunPolicy>,
    /// `""` (default rules) or `AllWorkers`; other strings behave like `""`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_policy: Option<String>,
    /// Replica specs by type; keys in any casing (`Chief`, `Master`, `PS`,
    /// `Worker`, `Evaluator`).
    // Optional in the schema so that a job without it is marked Failed
    // with a reason instead of refused, as upstream does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf_replica_specs: Option<BTreeMap<String, ReplicaSpec>>,
    /// Sparse `TF_CONFIG` (TF ClusterSpec propagation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_dynamic_worker: Option<bool>,
    /// Deprecated v1.0.x location of `runPolicy.cleanPodPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,
    /// Deprecated v1.0.x location of `runPolicy.ttlSecondsAfterFinished`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Deprecated v1.0.x location of `runPolicy.activeDeadlineSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Deprecated v1.0.x location of `runPolicy.backoffLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
}

/// Policies shared by all Kubeflow v1 jobs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clean_pod_policy: Option<CleanPodPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<SchedulingPolicy>,
    /// training-operator dialect: suspend the job (pods deleted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspend: Option<bool>,
    /// training-operator dialect: the controller that owns this job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}

/// Gang-scheduling parameters (PodGroup).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Which pods to delete once the job is finished.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CleanPodPolicy {
    All,
    Running,
    None,
}

/// What happens when a replica's container exits.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
    /// Pod gets `Never`; the operator recreates the pod on a retryable code.
    ExitCode,
    /// Written out as `""` by some generators; means the default (`Never`).
    #[serde(rename = "")]
    Unset,
}

/// One replica type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSpec {
    /// Defaults to 1 (in the CRD schema too, so the stored job says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 1))]
    pub replicas: Option<i32>,
    /// Pod template; must contain a container named `tensorflow`.
    // Schemaless in the CRD (preserve-unknown-fields): the pod schema
    // differs across Kubernetes versions, and the API server validates the
    // pods made from it anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pod_template_schema")]
    pub template: Option<PodTemplateSpec>,
    /// Defaults to `Never` (in the CRD schema too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Never"))]
    pub restart_policy: Option<RestartPolicy>,
}

fn pod_template_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// Observed state; JSON-compatible with kubeflow/common's JobStatus.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// Newest last; the `State` column shows the last one.
    #[serde(default, deserialize_with = "null_as_default")]
    pub conditions: Vec<JobCondition>,
    /// Per replica type (canonical key case).
    #[serde(default, deserialize_with = "null_as_default")]
    pub replica_statuses: BTreeMap<String, ReplicaStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<Time>,
    /// `metadata.generation` of the spec this status was computed from
    /// (additive; upstream has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Counted failures for `backoffLimit` and re-creation pacing
    /// (additive). Kept in status, not in memory, so an operator restart
    /// mid-backoff neither forgets nor recounts a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<BackoffStatus>,
}

/// Failures counted towards `backoffLimit`: pod failures and container
/// restarts, each pod UID counted once however often it is observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackoffStatus {
    /// Every failure counted so far, of live and of gone pods.
    #[serde(default)]
    pub failures: i32,
    /// What each live pod (by UID) has contributed to `failures`; a pod
    /// that is gone is dropped here, its failures stay counted.
    #[serde(default, deserialize_with = "null_as_default")]
    pub pods: BTreeMap<String, i32>,
    /// When the last failure was counted; pod re-creation waits 10 s after
    /// it, doubling per failure up to 360 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_time: Option<Time>,
}

/// Pod counts of one replica type.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub active: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub succeeded: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// The pods' label selector as a string (for HPA-style consumers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Indices whose replica succeeded, as ranges (`"0-2,5"`; additive).
    /// A succeeded index is never run again, even after its pod is gone
    /// (pod garbage collection, eviction, a manual delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded_indexes: Option<String>,
}

/// One entry of `status.conditions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobCondition {
    /// `Created`, `Running`, `Restarting`, `Succeeded`, `Failed`, `Suspended`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

fn is_zero(value: &i32) -> bool {
    *value == 0
}

/// Upstream serialises empty lists and maps as `null`.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}
