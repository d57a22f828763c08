//! A Node as Mokka caches it: its metadata alone.
//!
//! Mokka reads only a Node's metadata (name, UID, timestamps, labels, its
//! own annotation and managedFields). Decoding into `k8s_openapi`'s `Node`
//! and emptying spec and status still leaves their structs inline, about
//! 1.2 KiB of every cached Node, and materializes the whole status (images,
//! conditions, addresses) of every listed Node before the transform drops
//! it. `NodeMeta` is the same API resource read into metadata only: serde
//! skips spec and status while parsing, so they are never allocated.
//!
//! Requests stay ordinary Node requests (full objects on the wire), which
//! every API server answers; the metadata-only representation
//! (`as=PartialObjectMetadata`) is not asked for.

use k8s_openapi::api::core::v1::Node;
use kube::api::ObjectMeta;
use kube::core::ClusterResourceScope;
use serde::{Deserialize, Serialize};

use crate::plan::projection::KeyOwnership;

/// The metadata of a Node; the `Resource` of `v1` `nodes`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct NodeMeta {
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Who owns the projected keys, summarised by the cache's transform
    /// (`controller::nodes::transform_node`), which then drops
    /// managedFields; `None` for a Node as the server sent it.
    #[serde(skip)]
    pub ownership: Option<KeyOwnership>,
}

impl NodeMeta {
    /// Who owns the projected keys: the cache's summary, or read from the
    /// managedFields of a Node as the server sent it.
    pub fn key_ownership(&self) -> KeyOwnership {
        self.ownership.unwrap_or_else(|| {
            KeyOwnership::from_managed_fields(
                self.metadata.managed_fields.as_deref().unwrap_or_default(),
            )
        })
    }
}

impl From<Node> for NodeMeta {
    fn from(node: Node) -> Self {
        Self {
            metadata: node.metadata,
            ownership: None,
        }
    }
}

controller_kit::resource_view!(NodeMeta, Node, ClusterResourceScope);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn a_whole_node_decodes_into_its_metadata_and_addresses_the_nodes_resource() {
        let json = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1", "uid": "u-1", "labels": {"pool": "a"}},
            "spec": {"providerID": "kwok://gpu-1", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"images": [{"names": ["x"], "sizeBytes": 1}], "capacity": {"nvidia.com/gpu": "8"}}
        });
        let node: NodeMeta = serde_json::from_value(json).unwrap();
        assert_eq!(node.metadata.name.as_deref(), Some("gpu-1"));
        assert_eq!(
            node.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("pool"))
                .map(String::as_str),
            Some("a")
        );
        assert_eq!(NodeMeta::url_path(&(), None), "/api/v1/nodes");
        assert_eq!(NodeMeta::api_version(&()), "v1");
        assert_eq!(NodeMeta::kind(&()), "Node");
        assert!(!NodeMeta::metadata_api());
    }
}
