//! Builders shared by the unit tests.

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::{TFJob, TFJobSpec};

/// A pod template with one `tensorflow` container running `image`.
pub fn tf_template(image: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: None,
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "tensorflow".into(),
                image: Some(image.into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
    }
}

/// Job `test-tfjob` in namespace `default` with uid `uid-1`.
pub fn job_with(spec: TFJobSpec) -> TFJob {
    TFJob {
        metadata: ObjectMeta {
            name: Some("test-tfjob".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            generation: Some(1),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}
