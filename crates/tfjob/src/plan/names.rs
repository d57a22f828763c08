//! Child names, labels and owner references, as upstream sets them. Both
//! label sets are written: the short one upstream HEAD selects on and the
//! `training.kubeflow.org/*` one later releases use, so tools of either era
//! find the pods.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};

use crate::api::{API_VERSION, KIND, ReplicaType, TFJob};

pub const LABEL_GROUP_NAME: &str = "group-name";
pub const GROUP_NAME: &str = "kubeflow.org";
pub const LABEL_JOB_NAME: &str = "job-name";
pub const LABEL_REPLICA_TYPE: &str = "replica-type";
pub const LABEL_REPLICA_INDEX: &str = "replica-index";
pub const LABEL_JOB_ROLE: &str = "job-role";
pub const JOB_ROLE_MASTER: &str = "master";

pub const LABEL_OPERATOR_NAME: &str = "training.kubeflow.org/operator-name";
pub const OPERATOR_NAME: &str = "tfjob-controller";
pub const LABEL_FQ_JOB_NAME: &str = "training.kubeflow.org/job-name";
pub const LABEL_FQ_REPLICA_TYPE: &str = "training.kubeflow.org/replica-type";
pub const LABEL_FQ_REPLICA_INDEX: &str = "training.kubeflow.org/replica-index";
pub const LABEL_FQ_JOB_ROLE: &str = "training.kubeflow.org/job-role";

/// Labels of v1.0.0 pods, still read so in-flight jobs keep their pods.
const LABEL_LEGACY_REPLICA_TYPE: &str = "tf-replica-type";
const LABEL_LEGACY_REPLICA_INDEX: &str = "tf-replica-index";

/// The label selector the operator's pod and Service watches use: every
/// historical label set carries `group-name`.
pub const WATCH_SELECTOR: &str = "group-name=kubeflow.org";

/// `{job}-{type}-{index}` with `/` replaced by `-`, as upstream.
pub fn child_name(job: &str, replica_type_lower: &str, index: i32) -> String {
    format!("{job}-{replica_type_lower}-{index}").replace('/', "-")
}

/// The job name as it appears in label values.
pub fn job_label_value(job: &str) -> String {
    job.replace('/', "-")
}

/// Labels of the pod or Service of one replica (`master_role` only for
/// pods: Services never carry `job-role`).
pub fn replica_labels(
    job: &str,
    replica_type: &ReplicaType,
    index: i32,
    master_role: bool,
) -> BTreeMap<String, String> {
    let job = job_label_value(job);
    let rtype = replica_type.lower();
    let index = index.to_string();
    let mut labels = BTreeMap::from([
        (LABEL_GROUP_NAME.to_string(), GROUP_NAME.to_string()),
        (LABEL_JOB_NAME.to_string(), job.clone()),
        (LABEL_REPLICA_TYPE.to_string(), rtype.clone()),
        (LABEL_REPLICA_INDEX.to_string(), index.clone()),
        (LABEL_OPERATOR_NAME.to_string(), OPERATOR_NAME.to_string()),
        (LABEL_FQ_JOB_NAME.to_string(), job),
        (LABEL_FQ_REPLICA_TYPE.to_string(), rtype),
        (LABEL_FQ_REPLICA_INDEX.to_string(), index),
    ]);
    if master_role {
        labels.insert(LABEL_JOB_ROLE.to_string(), JOB_ROLE_MASTER.to_string());
        labels.insert(LABEL_FQ_JOB_ROLE.to_string(), JOB_ROLE_MASTER.to_string());
    }
    labels
}

/// The labels a Service selects its pod by: training-operator v1.9's
/// four `training.kubeflow.org/*` ones, so a Service and the pods it
/// selects read the same as v1.9's (the short set is on the pods too, but
/// selecting on it would make a Service v1.9 would never have written).
pub fn service_selector(
    job: &str,
    replica_type: &ReplicaType,
    index: i32,
) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_OPERATOR_NAME.to_string(), OPERATOR_NAME.to_string()),
        (LABEL_FQ_JOB_NAME.to_string(), job_label_value(job)),
        (LABEL_FQ_REPLICA_TYPE.to_string(), replica_type.lower()),
        (LABEL_FQ_REPLICA_INDEX.to_string(), index.to_string()),
    ])
}

/// Whether a child with `labels` belongs to job `job` by labels (the
/// claim selector: `group-name` and `job-name`).
pub fn matches_job(labels: &BTreeMap<String, String>, job: &str) -> bool {
    labels.get(LABEL_GROUP_NAME).map(String::as_str) == Some(GROUP_NAME)
        && (labels.get(LABEL_JOB_NAME) == Some(&job_label_value(job))
            || labels.get("tf-job-name") == Some(&job_label_value(job)))
}

/// The replica type label of a child, in any historical label set.
pub fn replica_type_of(labels: &BTreeMap<String, String>) -> Option<&str> {
    [
        LABEL_REPLICA_TYPE,
        LABEL_FQ_REPLICA_TYPE,
        LABEL_LEGACY_REPLICA_TYPE,
    ]
    .iter()
    .find_map(|key| labels.get(*key).map(String::as_str))
}

/// The replica index of a child; `None` when absent, unparsable or negative
/// (such children are ignored, never a crash as upstream).
pub fn replica_index_of(labels: &BTreeMap<String, String>) -> Option<i32> {
    [
        LABEL_REPLICA_INDEX,
        LABEL_FQ_REPLICA_INDEX,
        LABEL_LEGACY_REPLICA_INDEX,
    ]
    .iter()
    .find_map(|key| labels.get(*key))
    .and_then(|value| value.parse::<i32>().ok())
    .filter(|index| *index >= 0)
}

/// `replicaStatuses[T].selector` and `.labelSelector`.
pub fn replica_selector(job: &str, replica_type: &ReplicaType) -> (String, LabelSelector) {
    let labels = BTreeMap::from([
        (LABEL_GROUP_NAME.to_string(), GROUP_NAME.to_string()),
        (LABEL_JOB_NAME.to_string(), job_label_value(job)),
        (LABEL_REPLICA_TYPE.to_string(), replica_type.lower()),
    ]);
    let text = labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    (
        text,
        LabelSelector {
            match_labels: Some(labels),
            ..LabelSelector::default()
        },
    )
}

/// The controller owner reference every child carries.
pub fn owner_reference(job: &TFJob) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_string(),
        kind: KIND.to_string(),
        name: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The controller owner reference of a child, if any.
pub fn controller_of(refs: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    refs?.iter().find(|r| r.controller == Some(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_names_are_job_rtype_lower_index_for_every_index_of_every_type() {
        assert_eq!(child_name("mnist", "worker", 0), "mnist-worker-0");
        assert_eq!(child_name("mnist", "ps", 11), "mnist-ps-11");
        assert_eq!(
            child_name("mnist", &ReplicaType::from_key("EVALUATOR").lower(), 0),
            "mnist-evaluator-0"
        );
    }

    #[test]
    fn generated_labels_map_slashed_job_names_to_dashes_and_carry_group_name() {
        let labels = replica_labels("test/key", &ReplicaType::Worker, 0, false);
        assert_eq!(labels["job-name"], "test-key");
        assert_eq!(labels["group-name"], "kubeflow.org");
        assert_eq!(labels["replica-type"], "worker");
        assert_eq!(labels["replica-index"], "0");
        assert_eq!(labels["training.kubeflow.org/job-name"], "test-key");
        assert_eq!(
            labels["training.kubeflow.org/operator-name"],
            "tfjob-controller"
        );
        assert!(!labels.contains_key("job-role"));
    }

    #[test]
    fn children_of_every_historical_label_set_are_recognised() {
        let v100 = BTreeMap::from([
            ("group-name".to_string(), "kubeflow.org".to_string()),
            ("tf-job-name".to_string(), "j".to_string()),
            ("tf-replica-type".to_string(), "worker".to_string()),
            ("tf-replica-index".to_string(), "3".to_string()),
        ]);
        assert!(matches_job(&v100, "j"));
        assert_eq!(replica_type_of(&v100), Some("worker"));
        assert_eq!(replica_index_of(&v100), Some(3));
        let negative = BTreeMap::from([("replica-index".to_string(), "-1".to_string())]);
        assert_eq!(replica_index_of(&negative), None);
    }
}
