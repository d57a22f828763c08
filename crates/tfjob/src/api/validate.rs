//! Validation of a TFJob spec before defaults (so with the keys as
//! written), with upstream's messages, plus the checks upstream lacked:
//! child names must be valid Service names (at most 63 characters,
//! DNS-1035; upstream #1101 left such jobs stuck forever) and two keys must
//! not name the same replica type.

use std::collections::BTreeMap;

use super::{CONTAINER_NAME, ReplicaType, TFJob};

/// Prefix of every validation message (upstream's wording).
pub const INVALID_PREFIX: &str = "TFJobSpec is not valid";

/// Longest Service name Kubernetes accepts (DNS-1035 label).
pub const MAX_CHILD_NAME: usize = 63;

/// Why a spec is invalid: the first problem found, as upstream reports one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    pub message: String,
}

fn invalid(detail: impl std::fmt::Display) -> ValidationError {
    ValidationError {
        message: format!("{INVALID_PREFIX}: {detail}"),
    }
}

/// Checks `job`; `Ok` means pods may be created for it.
pub fn validate(job: &TFJob) -> Result<(), ValidationError> {
    let Some(specs) = job.spec.tf_replica_specs.as_ref() else {
        return Err(ValidationError {
            message: INVALID_PREFIX.to_string(),
        });
    };
    if specs.is_empty() {
        return Err(ValidationError {
            message: INVALID_PREFIX.to_string(),
        });
    }
    for (key, spec) in specs {
        let containers = spec
            .template
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .map(|pod| pod.containers.as_slice())
            .unwrap_or_default();
        if containers.is_empty() {
            return Err(invalid(format!("containers definition expected in {key}")));
        }
        let mut has_tensorflow = false;
        for container in containers {
            if container.image.as_deref().unwrap_or_default().is_empty() {
                return Err(invalid(format!(
                    "Image is undefined in the container of {key}"
                )));
            }
            has_tensorflow |= container.name == CONTAINER_NAME;
        }
        if !has_tensorflow {
            return Err(invalid(format!(
                "There is no container named {CONTAINER_NAME} in {key}"
            )));
        }
    }
    let chiefs = specs
        .keys()
        .filter(|key| ReplicaType::from_key(key).is_chief())
        .count();
    if chiefs > 1 {
        return Err(invalid("more than 1 chief/master found"));
    }
    let mut seen: BTreeMap<ReplicaType, &str> = BTreeMap::new();
    for key in specs.keys() {
        if let Some(first) = seen.insert(ReplicaType::from_key(key), key) {
            return Err(invalid(format!(
                "replica keys {first} and {key} name the same replica type; keep one"
            )));
        }
    }
    validate_child_names(job)
}

/// `len(job) + 1 + len(type) + 1 + digits(max index) <= 63`, and the
/// name must make a DNS-1035 label (Services need one).
fn validate_child_names(job: &TFJob) -> Result<(), ValidationError> {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    for (key, spec) in job.spec.tf_replica_specs.iter().flatten() {
        let replicas = spec.replicas.unwrap_or(1);
        if replicas <= 0 {
            continue;
        }
        let child =
            crate::plan::names::child_name(name, &ReplicaType::from_key(key).lower(), replicas - 1);
        if child.len() > MAX_CHILD_NAME {
            return Err(invalid(format!(
                "the name {name:?} is too long: child name {child:?} has {} characters, \
                 more than the {MAX_CHILD_NAME} a Service name may have; shorten the TFJob name \
                 to at most {} characters",
                child.len(),
                MAX_CHILD_NAME - (child.len() - name.len()),
            )));
        }
        if !is_dns1035_label(&child) {
            return Err(invalid(format!(
                "child name {child:?} is not a valid Service name (lower-case letters, digits \
                 and '-', starting with a letter); rename the TFJob"
            )));
        }
    }
    Ok(())
}

fn is_dns1035_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    matches!(bytes.first(), Some(b'a'..=b'z'))
        && matches!(bytes.last(), Some(b'a'..=b'z' | b'0'..=b'9'))
        && bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ReplicaSpec, TFJobSpec};
    use crate::testing::{job_with, tf_template};

    fn spec(specs: Vec<(&str, ReplicaSpec)>) -> TFJob {
        job_with(TFJobSpec {
            tf_replica_specs: Some(specs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
            ..TFJobSpec::default()
        })
    }

    fn replica(template: k8s_openapi::api::core::v1::PodTemplateSpec) -> ReplicaSpec {
        ReplicaSpec {
            template: Some(template),
            ..ReplicaSpec::default()
        }
    }

    fn message(job: &TFJob) -> String {
        validate(job).unwrap_err().message
    }

    #[test]
    fn specs_with_nil_replica_specs_no_containers_no_image_no_tensorflow_or_chief_and_master_are_rejected()
     {
        let nil = job_with(TFJobSpec::default());
        assert_eq!(message(&nil), "TFJobSpec is not valid");

        let no_containers = spec(vec![("Worker", ReplicaSpec::default())]);
        assert_eq!(
            message(&no_containers),
            "TFJobSpec is not valid: containers definition expected in Worker"
        );

        let no_image = spec(vec![("Worker", replica(tf_template("")))]);
        assert_eq!(
            message(&no_image),
            "TFJobSpec is not valid: Image is undefined in the container of Worker"
        );

        let mut other = tf_template("img:1");
        other.spec.as_mut().unwrap().containers[0].name = "main".into();
        assert_eq!(
            message(&spec(vec![("ps", replica(other))])),
            "TFJobSpec is not valid: There is no container named tensorflow in ps"
        );

        let both = spec(vec![
            ("Chief", replica(tf_template("img:1"))),
            ("Master", replica(tf_template("img:1"))),
        ]);
        assert_eq!(
            message(&both),
            "TFJobSpec is not valid: more than 1 chief/master found"
        );
    }

    #[test]
    fn a_name_whose_longest_child_name_exceeds_63_characters_is_rejected() {
        let mut job = spec(vec![(
            "Worker",
            ReplicaSpec {
                replicas: Some(10),
                ..replica(tf_template("img:1"))
            },
        )]);
        // "-worker-9" is 9 characters: 54 fit, 55 do not.
        job.metadata.name = Some("a".repeat(54));
        assert_eq!(validate(&job), Ok(()));
        job.metadata.name = Some("a".repeat(55));
        let message = message(&job);
        assert!(message.contains("has 64 characters"), "{message}");
        assert!(message.contains("at most 54 characters"), "{message}");
    }

    #[test]
    fn a_name_that_makes_no_valid_service_name_is_rejected() {
        let mut job = spec(vec![("Worker", replica(tf_template("img:1")))]);
        job.metadata.name = Some("my.job".into());
        assert!(message(&job).contains("not a valid Service name"));
    }

    #[test]
    fn two_keys_for_the_same_replica_type_are_rejected() {
        let job = spec(vec![
            ("Worker", replica(tf_template("img:1"))),
            ("worker", replica(tf_template("img:1"))),
        ]);
        assert!(message(&job).contains("name the same replica type"));
    }
}
