//! The Node side of the caches: the server-side eligibility selector, the
//! transform that keeps only what Mokka reads, and the live GET bounded by
//! `LiveNodeGetTimeout` and a semaphore (upstream's option and limit, so a
//! slow API server cannot pile up GETs).

use std::time::Duration;

use crate::node_meta::NodeMeta;
use kube::Api;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::api::{ANNOTATION_SGPU_ASSIGNMENT, LABEL_SGPU_NODE};
use crate::plan::projection::KeyOwnership;

/// The server-side label selector of the Node watch: only eligible Nodes
/// are ever listed or watched.
pub fn node_selector() -> String {
    format!("{LABEL_SGPU_NODE}=true")
}

/// Keeps name, uid, resourceVersion, creation and deletion timestamps,
/// labels, the assignment annotation, and in place of managedFields who
/// owns the three projected keys ([`KeyOwnership`]). Spec and status are
/// never decoded ([`NodeMeta`]), so Node spec or status updates cost only
/// this transform.
pub fn transform_node(node: &mut NodeMeta) {
    let meta = &mut node.metadata;
    meta.annotations = meta.annotations.take().and_then(|annotations| {
        let kept: std::collections::BTreeMap<String, String> = annotations
            .into_iter()
            .filter(|(key, _)| key == ANNOTATION_SGPU_ASSIGNMENT)
            .collect();
        (!kept.is_empty()).then_some(kept)
    });
    let entries = meta.managed_fields.take().unwrap_or_default();
    node.ownership = Some(KeyOwnership::from_managed_fields(&entries));
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.generation = None;
}

/// Why a live Node lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum LiveNodeError {
    #[error("live GET of Node {name:?} timed out after {timeout:?}")]
    Timeout { name: String, timeout: Duration },
    #[error("live GET of Node {name:?} was cancelled")]
    Cancelled { name: String },
    #[error("live GET of Node {name:?}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// Exact GETs of Nodes that are not in the filtered cache, bounded in time
/// and concurrency.
pub struct LiveNodes {
    api: Api<NodeMeta>,
    slots: Semaphore,
    timeout: Duration,
}

impl LiveNodes {
    pub fn new(client: kube::Client, workers: usize, timeout: Duration) -> Self {
        Self {
            api: Api::all(client),
            slots: Semaphore::new(workers.max(1)),
            timeout,
        }
    }

    /// `GET nodes/<name>` under `min(cancel, timeout)`, waiting for a slot
    /// within the same deadline. `Ok(None)` when the Node does not exist.
    /// The deadline holds even if the client ignored it: the request future
    /// is dropped when it fires.
    pub async fn get(
        &self,
        name: &str,
        cancel: &CancellationToken,
    ) -> Result<Option<NodeMeta>, LiveNodeError> {
        let work = async {
            let _slot = self.slots.acquire().await;
            self.api.get_opt(name).await
        };
        tokio::select! {
            () = cancel.cancelled() => Err(LiveNodeError::Cancelled { name: name.to_string() }),
            result = tokio::time::timeout(self.timeout, work) => match result {
                Err(_) => Err(LiveNodeError::Timeout { name: name.to_string(), timeout: self.timeout }),
                Ok(Err(source)) => Err(LiveNodeError::Api { name: name.to_string(), source }),
                Ok(Ok(node)) => Ok(node.map(|mut node| { transform_node(&mut node); node })),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::projection::{ObservedNode, ProjectionKey};
    use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
    use kube::api::ObjectMeta;

    #[test]
    fn a_cached_node_keeps_who_owns_the_projected_keys_and_no_managed_fields() {
        // As the API server sends a projected Node: our apply owns the
        // labels and the annotation, kubectl owns the clique label too, and
        // the kubelet's status entry owns nothing of the metadata.
        let node: NodeMeta = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n", "uid": "u",
                "labels": {"nvidia.com/gpu.clique": "fab.0"},
                "managedFields": [
                    {"manager": crate::plan::projection::FIELD_MANAGER, "operation": "Apply",
                     "apiVersion": "v1", "fieldsType": "FieldsV1", "time": "2026-12-07T00:00:00Z",
                     "fieldsV1": {"f:metadata": {
                        "f:labels": {"f:mokka.nvidia.com/sgpu-assigned": {}, "f:nvidia.com/gpu.clique": {}},
                        "f:annotations": {"f:mokka.nvidia.com/sgpu-assignment": {}}}}},
                    {"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                     "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.clique": {}}}}},
                    {"manager": "kubelet", "operation": "Update", "subresource": "status",
                     "apiVersion": "v1", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:metadata": {"f:labels": {"f:mokka.nvidia.com/sgpu-assigned": {}}}}}
                ]
            }
        }))
        .unwrap();
        let as_sent = ObservedNode::from_node(&node);
        let mut cached = node.clone();
        transform_node(&mut cached);
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(ObservedNode::from_node(&cached), as_sent);
        let ownership = cached.key_ownership();
        assert!(ProjectionKey::ALL.iter().all(|key| ownership.ours(*key)));
        assert!(ownership.foreign(ProjectionKey::CliqueLabel));
        assert!(!ownership.foreign(ProjectionKey::AssignedLabel));
        assert!(!ownership.foreign(ProjectionKey::AssignmentAnnotation));
    }

    #[test]
    fn compact_node_transform_drops_foreign_annotations() {
        let node = Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                uid: Some("u".into()),
                annotations: Some(
                    [
                        ("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string()),
                        (ANNOTATION_SGPU_ASSIGNMENT.to_string(), "{}".to_string()),
                    ]
                    .into_iter()
                    .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some("kwok://n".into()),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus::default()),
        };
        // As the watch decodes it: metadata only.
        let mut node: NodeMeta =
            serde_json::from_value(serde_json::to_value(&node).unwrap()).unwrap();
        transform_node(&mut node);
        assert_eq!(
            node.metadata
                .annotations
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            [ANNOTATION_SGPU_ASSIGNMENT]
        );
        assert_eq!(node.metadata.uid.as_deref(), Some("u"));
    }

    #[test]
    fn the_server_side_node_selector_is_the_eligibility_label() {
        assert_eq!(node_selector(), "mokka.nvidia.com/sgpu-node=true");
    }
}
