//! `SGPUInventory`: the admin-owned desired capacity (rack groups of a profile).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How many racks of which profile exist, and which Nodes may fill them.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mokka.nvidia.com",
    version = "v1alpha1",
    kind = "SGPUInventory",
    plural = "sgpuinventories",
    shortname = "sinv",
    category = "mokka",
    doc = "Desired simulated-GPU capacity: rack groups of a profile (admin-owned).",
    status = "SGPUInventoryStatus",
    annotation("helm.sh/resource-policy", "keep"),
    printcolumn(
        name = "Groups",
        type_ = "string",
        json_path = ".status.rackGroupsSummary"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "integer",
        json_path = ".status.capacity.nodes"
    ),
    printcolumn(name = "GPUs", type_ = "integer", json_path = ".status.capacity.gpus"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SGPUInventorySpec {
    #[schemars(length(min = 1, max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    pub rack_groups: Vec<RackGroup>,
}

/// A number of identical racks rendered from one profile.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RackGroup {
    /// A DNS-1123 label, unique within the inventory (the controller checks both).
    #[schemars(length(min = 1, max = 63))]
    pub id: String,
    #[schemars(range(min = 1, max = 100000))]
    pub count: i32,
    pub profile_ref: ProfileNameRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
pub struct ProfileNameRef {
    #[schemars(length(min = 1))]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Absent or empty selects every eligible Node. Must not reference the
    /// labels the controller projects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SGPUInventoryStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack_groups_summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<InventoryCapacity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<InventoryUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    pub rack_groups: Option<Vec<RackGroupStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
    /// How the runtime policies targeting this inventory were settled
    /// (gpufleet addition; upstream reports decisions only on each policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_policies: Option<RuntimePolicySummary>,
}

/// Counts of the runtime policies targeting an inventory, by outcome.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["policies", "accepted", "conflicted", "invalidTarget"]))]
pub struct RuntimePolicySummary {
    /// Policies whose `spec.targetRef.name` is this inventory.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub policies: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub accepted: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub conflicted: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub invalid_target: i32,
}

/// Every count is required in the schema (upstream's fields have no
/// `omitempty`); decoding still defaults a missing one to 0.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("required" = ["racks", "nodes", "gpus"]))]
pub struct InventoryCapacity {
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub racks: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub nodes: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub gpus: i32,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["requestedNodes", "allocatedNodes", "availableNodes", "pendingNodes"]))]
pub struct InventoryUsage {
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub requested_nodes: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub allocated_nodes: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub available_nodes: i32,
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub pending_nodes: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("required" = ["id", "profileName", "capacity", "usage"]))]
pub struct RackGroupStatus {
    pub id: String,
    #[serde(default)]
    pub profile_name: String,
    #[serde(default)]
    pub capacity: InventoryCapacity,
    #[serde(default)]
    pub usage: InventoryUsage,
}
