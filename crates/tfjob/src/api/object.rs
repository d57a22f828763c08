//! The TFJob as the cache holds it: metadata typed, spec and status kept
//! as JSON. Like upstream's unstructured informer (issue #561), one
//! undecodable object must not break the watch of every other job; it is
//! decoded per reconcile and, when it cannot be, marked Failed.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{JobStatus, TFJob, TFJobSpec};

/// A TFJob with its spec not yet decoded.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TFJobObject {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Value,
    #[serde(default)]
    pub status: Value,
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
