//! `SGPURack`: one rendered rack of an inventory, owned by the controller.
//! The durable Node assignment is `spec.nodes[].nodeRef`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A rendered rack: identities of every GPU and the Nodes bound to its slots.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "mokka.nvidia.com",
    version = "v1alpha1",
    kind = "SGPURack",
    plural = "sgpuracks",
    shortname = "sgpur",
    category = "mokka",
    doc = "One rendered rack of an inventory and its Node bindings (controller-owned).",
    status = "SGPURackStatus",
    annotation("helm.sh/resource-policy", "keep"),
    printcolumn(
        name = "Inventory",
        type_ = "string",
        json_path = ".spec.inventoryRef.name"
    ),
    printcolumn(
        name = "Rack Group",
        type_ = "string",
        json_path = ".spec.identity.rackGroup"
    ),
    printcolumn(
        name = "Rack",
        type_ = "integer",
        json_path = ".spec.identity.rackIndex"
    ),
    printcolumn(
        name = "Profile",
        type_ = "string",
        json_path = ".spec.profileRef.name"
    ),
    printcolumn(
        name = "Assigned",
        type_ = "integer",
        json_path = ".status.assignedNodes"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SGPURackSpec {
    pub inventory_ref: InventoryRef,
    pub profile_ref: ProfileRef,
    pub identity: RackIdentity,
    #[schemars(length(min = 1, max = 1024))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["index"]))]
    pub nodes: Vec<RackNode>,
}

/// The exact inventory instance a rack was rendered for.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "size(self.uid) > 0", "message": "uid must not be empty"}]))]
pub struct InventoryRef {
    #[schemars(length(min = 1))]
    pub name: String,
    pub uid: String,
}

/// The exact profile revision a rack was rendered from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "size(self.uid) > 0", "message": "uid must not be empty"}]))]
pub struct ProfileRef {
    #[schemars(length(min = 1))]
    pub name: String,
    pub uid: String,
    #[schemars(range(min = 1))]
    pub generation: i64,
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub revision: String,
}

/// Where the rack sits in its inventory, and its fabric identity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RackIdentity {
    #[schemars(length(min = 1, max = 63))]
    #[schemars(extend("format" = "dns1123Label"))]
    pub rack_group: String,
    #[schemars(range(min = 0))]
    pub rack_index: i32,
    #[serde(rename = "fabricUUID")]
    #[schemars(extend("format" = "uuid"))]
    pub fabric_uuid: String,
    /// Always 0: one rack is one NVLink clique.
    #[serde(rename = "cliqueID")]
    #[schemars(range(min = 0, max = 0))]
    pub clique_id: i32,
}

/// One logical Node slot of a rack.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RackNode {
    #[schemars(range(min = 0, max = 1023))]
    pub index: i32,
    /// The Kubernetes Node bound to this slot; absent while unbound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_ref: Option<NodeRef>,
    #[schemars(length(min = 1, max = 64))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["index"]))]
    pub gpus: Vec<RackGpu>,
}

/// The exact identity (name and UID) of a Kubernetes Node.
#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "size(self.uid) > 0", "message": "uid must not be empty"}]))]
pub struct NodeRef {
    #[schemars(length(min = 1))]
    pub name: String,
    pub uid: String,
}

/// One rendered GPU with its stable identities.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RackGpu {
    #[schemars(range(min = 0, max = 63))]
    pub index: i32,
    #[schemars(regex(
        pattern = r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    ))]
    pub uuid: String,
    #[schemars(length(min = 1))]
    pub serial: String,
    #[schemars(range(min = 0))]
    pub minor_number: i32,
    #[schemars(regex(pattern = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"))]
    pub pci_address: String,
    #[schemars(regex(pattern = r"^pci[0-9a-f]{4}:[0-9a-f]{2}$"))]
    pub root_complex: String,
    // Both are always present (0 when the profile slot leaves them out), as
    // upstream renders them and its rack schema requires.
    #[schemars(range(min = 0))]
    pub numa_node: i32,
    #[schemars(range(min = 0))]
    pub host_processor_index: i32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SGPURackStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub assigned_nodes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,
}

impl SGPURackSpec {
    /// The slot with logical index `index`, if rendered.
    pub fn node_by_index(&self, index: i32) -> Option<&RackNode> {
        self.nodes.iter().find(|node| node.index == index)
    }

    /// The spec with every binding cleared: the template a fresh render yields.
    pub fn without_bindings(&self) -> SGPURackSpec {
        let mut template = self.clone();
        for node in &mut template.nodes {
            node.node_ref = None;
        }
        template
    }
}

impl RackNode {
    /// True when this slot is bound to exactly the Node `name`/`uid`.
    pub fn bound_to(&self, name: &str, uid: &str) -> bool {
        self.node_ref
            .as_ref()
            .is_some_and(|node_ref| node_ref.name == name && node_ref.uid == uid)
    }
}
