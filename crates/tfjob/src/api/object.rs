//! The TFJob as the cache holds it: metadata typed, spec and status kept
//! as JSON. Like upstream's unstructured informer (issue #561), one
//! undecodable object must not break the watch of every other job; it is
//! decoded per reconcile and, when it cannot be, marked Failed.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

use super::{JobStatus, TFJob, TFJobSpec};

/// A TFJob with its spec not yet decoded.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TFJobObject {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
    #[serde(default)]
    pub status: Value,
}

/// Written with `apiVersion` and `kind` (kube-apiserver refuses a create
/// whose body lacks them) and without a null spec or status.
impl Serialize for TFJobObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("apiVersion", super::API_VERSION)?;
        map.serialize_entry("kind", super::KIND)?;
        map.serialize_entry("metadata", &self.metadata)?;
        if !self.spec.is_null() {
            map.serialize_entry("spec", &self.spec)?;
        }
        if !self.status.is_null() {
            map.serialize_entry("status", &self.status)?;
        }
        map.end()
    }
}

impl Resource for TFJobObject {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(super::KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(super::GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(super::VERSION)
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(super::API_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("tfjobs")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl TFJobObject {
    /// The typed job, or why the spec cannot be read. A status that cannot
    /// be read is treated as empty: the operator owns it and rewrites it.
    pub fn decode(&self) -> Result<TFJob, String> {
        let spec: TFJobSpec = if self.spec.is_null() {
            TFJobSpec::default()
        } else {
            serde_json::from_value(self.spec.clone()).map_err(|error| error.to_string())?
        };
        let status: Option<JobStatus> = if self.status.is_null() {
            None
        } else {
            serde_json::from_value(self.status.clone()).ok()
        };
        Ok(TFJob {
            metadata: self.metadata.clone(),
            spec,
            status,
        })
    }

    /// The status as far as it can be read (for the invalid-job path).
    pub fn status(&self) -> JobStatus {
        serde_json::from_value(self.status.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_object_is_written_with_api_version_and_kind_and_without_null_fields() {
        let job = TFJobObject {
            metadata: ObjectMeta {
                name: Some("mnist".into()),
                ..ObjectMeta::default()
            },
            spec: serde_json::json!({"tfReplicaSpecs": {}}),
            status: Value::Null,
        };
        assert_eq!(
            serde_json::to_value(&job).unwrap(),
            serde_json::json!({
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "metadata": {"name": "mnist"},
                "spec": {"tfReplicaSpecs": {}},
            })
        );
        let back: TFJobObject =
            serde_json::from_value(serde_json::to_value(&job).unwrap()).unwrap();
        assert_eq!(back.spec, job.spec);
    }
}

/// The PodGroup API of one gang scheduler, for [`PodGroupObject`].
pub trait PodGroupApi: Clone + Default + std::fmt::Debug + Send + Sync + 'static {
    const GROUP: &'static str;
    const VERSION: &'static str;
    const API_VERSION: &'static str;
}

/// Volcano's `scheduling.volcano.sh/v1beta1` PodGroups.
#[derive(Clone, Debug, Default)]
pub struct Volcano;

impl PodGroupApi for Volcano {
    const GROUP: &'static str = "scheduling.volcano.sh";
    const VERSION: &'static str = "v1beta1";
    const API_VERSION: &'static str = "scheduling.volcano.sh/v1beta1";
}

/// scheduler-plugins' coscheduling `scheduling.x-k8s.io/v1alpha1`
/// PodGroups.
#[derive(Clone, Debug, Default)]
pub struct SchedulerPlugins;

impl PodGroupApi for SchedulerPlugins {
    const GROUP: &'static str = "scheduling.x-k8s.io";
    const VERSION: &'static str = "v1alpha1";
    const API_VERSION: &'static str = "scheduling.x-k8s.io/v1alpha1";
}

/// A gang scheduler's `PodGroup` (Volcano's unless the API says
/// otherwise); only metadata, `spec` and `status.phase` are read, the
/// rest kept as JSON.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(bound = "")]
pub struct PodGroupObject<A: PodGroupApi = Volcano> {
    #[serde(rename = "apiVersion", default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub spec: Value,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub status: Value,
    #[serde(skip)]
    api: std::marker::PhantomData<A>,
}

impl<A: PodGroupApi> Resource for PodGroupObject<A> {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("PodGroup")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(A::GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(A::VERSION)
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(A::API_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("podgroups")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<A: PodGroupApi> PodGroupObject<A> {
    /// `status.phase`, if any.
    pub fn phase(&self) -> Option<String> {
        self.status
            .get("phase")
            .and_then(Value::as_str)
            .map(str::to_string)
    }
}
