//! The `mokka.nvidia.com/v1alpha1` API: custom resource types, their schemas
//! and the generated CustomResourceDefinitions.

// `printcolumn(..)` repeats `type_ = ".."` by design; clippy reads the
// repeated key as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
mod inventory;
#[allow(clippy::duplicated_attributes)]
mod policy;
#[allow(clippy::duplicated_attributes)]
mod profile;
#[allow(clippy::duplicated_attributes)]
mod rack;
mod runtime;
mod schema;

pub use schema::QUANTITY_PATTERN;

pub use inventory::*;
pub use policy::*;
pub use profile::*;
pub use rack::*;
pub use runtime::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::MokkaError;

/// API group of every Mokka kind.
pub const GROUP: &str = "mokka.nvidia.com";
/// The only served version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every Mokka object.
pub const API_VERSION: &str = "mokka.nvidia.com/v1alpha1";

/// Label every eligible Node carries (`=true`).
pub const LABEL_SGPU_NODE: &str = "mokka.nvidia.com/sgpu-node";
/// Label the controller projects onto bound Nodes.
pub const LABEL_SGPU_ASSIGNED: &str = "mokka.nvidia.com/sgpu-assigned";
/// Clique label the controller projects onto bound Nodes.
pub const LABEL_GPU_CLIQUE: &str = "nvidia.com/gpu.clique";
/// Annotation the controller projects onto bound Nodes.
pub const ANNOTATION_SGPU_ASSIGNMENT: &str = "mokka.nvidia.com/sgpu-assignment";

/// The four CRDs, in a stable order (profile, inventory, rack, policy).
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        SGPURackProfile::crd(),
        SGPUInventory::crd(),
        SGPURack::crd(),
        SGPURuntimePolicy::crd(),
    ];
    for version in crds.iter_mut().flat_map(|crd| crd.spec.versions.iter_mut()) {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|validation| validation.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        // The schemas are ours; a round trip that failed would leave the
        // generated schema, which the CRD tests would catch.
        if let Ok(mut value) = serde_json::to_value(&*schema) {
            schema::conform(&mut value);
            if let Ok(conformed) = serde_json::from_value(value) {
                *schema = conformed;
            }
        }
    }
    crds
}

/// The four CRDs as one multi-document YAML stream, as checked in under
/// `deploy/crds/mokka.nvidia.com.yaml`.
pub fn crds_yaml() -> Result<String, MokkaError> {
    let mut out = String::new();
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let yaml = serde_saphyr::to_string(&crd).map_err(|source| MokkaError::CrdYaml {
            name,
            message: source.to_string(),
        })?;
        out.push_str("---\n");
        out.push_str(&yaml);
        if !yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}
