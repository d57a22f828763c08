//! `SGPURuntimePolicy`: a sparse runtime override for a slice of an inventory.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::runtime::RuntimeState;

/// Overrides the runtime state of the GPUs its target selects.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mokka.nvidia.com",
    version = "v1alpha1",
    kind = "SGPURuntimePolicy",
    plural = "sgpuruntimepolicies",
    shortname = "srpol",
    category = "mokka",
    doc = "A sparse runtime override for GPUs of an inventory (automation-owned).",
    status = "SGPURuntimePolicyStatus",
    annotation("helm.sh/resource-policy", "keep"),
    printcolumn(
        name = "Inventory",
        type_ = "string",
        json_path = ".spec.targetRef.name"
    ),
    printcolumn(
        name = "RackGroups",
        type_ = "string",
        json_path = ".status.rackGroupsSummary"
    ),
    printcolumn(
        name = "Racks",
        type_ = "string",
        json_path = ".status.rackIndexesSummary"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "string",
        json_path = ".status.nodeIndexesSummary"
    ),
    printcolumn(
        name = "GPUs",
        type_ = "string",
        json_path = ".status.gpuIndexesSummary"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SGPURuntimePolicySpec {
    pub target_ref: PolicyTargetRef,
    /// Absent means the policy sets nothing (it is accepted and never conflicts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeState>,
}

/// API group of a policy target; only Mokka inventories can be targeted.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TargetGroup {
    #[default]
    #[serde(rename = "mokka.nvidia.com")]
    Mokka,
}

/// Kind of a policy target.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TargetKind {
    #[default]
    #[serde(rename = "SGPUInventory")]
    SgpuInventory,
}

/// The inventory a policy targets, narrowed by optional axes. The deepest
/// listed axis decides the policy's scope.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyTargetRef {
    pub group: TargetGroup,
    pub kind: TargetKind,
    #[schemars(length(min = 1))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub rack_groups: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(range(min = 0)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub rack_indexes: Option<Vec<i32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(range(min = 0)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub node_indexes: Option<Vec<i32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), inner(range(min = 0)))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub gpu_indexes: Option<Vec<i32>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SGPURuntimePolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack_groups_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack_indexes_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_indexes_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_indexes_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
}
