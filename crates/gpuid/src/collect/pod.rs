//! Which device-plugin pods can be collected from (pure).

use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;
use kube::core::NamespaceResourceScope;
use serde::{Deserialize, Serialize};

/// Why a pod is not collected from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotReady {
    /// Being deleted: its answer may describe a node that is going away.
    Terminating,
    /// Not yet scheduled.
    NoNode,
    NotRunning,
    /// Some container is not ready (nvidia-smi may not be usable yet).
    ContainersNotReady,
}

/// A device-plugin pod as the collector caches it: the `v1` `pods` resource
/// read into what [`collectable`] and the collector read (metadata, the
/// node, the phase, how many containers and whether each is ready), so
/// serde skips the rest while it parses. A `k8s_openapi` `Pod` keeps its
/// spec and status structs inline even when emptied: about 5.9 KB a cached
/// pod at 500 pods (heaptrack, docs/benchmarks.md "gpuid's exec stream"),
/// for the life of the cache. Requests are unchanged (ordinary pod list and
/// watch).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct DevicePluginPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodPlacement>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodReadiness>,
}

/// What the collector reads of a pod's spec.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodPlacement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Only how many there are: a zero-sized element each, so no allocation.
    #[serde(default)]
    pub containers: Vec<AContainer>,
}

/// A container of the spec, of which only its existence is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct AContainer {}

/// What the collector reads of a pod's status.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReadiness {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerReadiness>>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct ContainerReadiness {
    #[serde(default)]
    pub ready: bool,
}

controller_kit::resource_view!(DevicePluginPod, Pod, NamespaceResourceScope);

/// A pod is collectable when it is bound to a node, Running, not being
/// deleted, and every container is ready (upstream's rule plus the
/// deletion check upstream lacked).
pub fn collectable(pod: &DevicePluginPod) -> Result<&str, NotReady> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Err(NotReady::Terminating);
    }
    let node = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.node_name.as_deref())
        .filter(|node| !node.is_empty())
        .ok_or(NotReady::NoNode)?;
    let status = pod.status.as_ref().ok_or(NotReady::NotRunning)?;
    if status.phase.as_deref() != Some("Running") {
        return Err(NotReady::NotRunning);
    }
    let wanted = pod.spec.as_ref().map_or(0, |spec| spec.containers.len());
    let statuses = status.container_statuses.as_deref().unwrap_or_default();
    if statuses.len() < wanted || statuses.iter().any(|status| !status.ready) {
        return Err(NotReady::ContainersNotReady);
    }
    Ok(node)
}

/// The cache's transform: the metadata the collector does not read
/// (managedFields, annotations) goes too.
pub fn slim(pod: &mut DevicePluginPod) {
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
}

/// `namespace/name`, the queue key and the record's source.
pub fn pod_key(pod: &DevicePluginPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> DevicePluginPod {
        serde_json::from_value(value).unwrap()
    }

    fn running(ready: bool) -> serde_json::Value {
        json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "c", "ready": ready, "restartCount": 0, "image": "i", "imageID": ""
            }]}
        })
    }

    #[test]
    fn a_whole_device_plugin_pod_decodes_into_what_the_collector_reads() {
        // A device-plugin pod as the API server sends it, with the fields
        // the cache does not keep.
        let whole = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "labels": {"app": "nvidia-device-plugin-daemonset"},
                "annotations": {"a": "b"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]
            },
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "device-plugin",
                "containers": [
                    {"name": "c", "image": "nvcr.io/nvidia/k8s-device-plugin", "env": [{"name": "X", "value": "1"}]},
                    {"name": "d"}
                ],
                "volumes": [{"name": "v", "hostPath": {"path": "/var/lib/kubelet"}}]
            },
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "c", "ready": true, "restartCount": 0, "image": "i", "imageID": ""},
                    {"name": "d", "ready": true, "restartCount": 0, "image": "i", "imageID": ""}
                ]
            }
        });
        let mut cached = pod(whole);
        slim(&mut cached);
        assert_eq!(collectable(&cached), Ok("n1"));
        assert_eq!(pod_key(&cached), "ns/p");
        assert_eq!(cached.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(cached.metadata.annotations, None);
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(
            cached.spec.as_ref().map(|spec| spec.containers.len()),
            Some(2)
        );
        // Addressed as the pods resource: list, watch and Events name it so.
        assert_eq!(
            DevicePluginPod::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        let reference = cached.object_ref(&());
        assert_eq!(reference.kind.as_deref(), Some("Pod"));
        assert_eq!(reference.api_version.as_deref(), Some("v1"));
        assert_eq!(reference.uid.as_deref(), Some("u-1"));
        // One of two containers not ready: not collectable.
        let mut one_unready = cached.clone();
        if let Some(statuses) = one_unready
            .status
            .as_mut()
            .and_then(|status| status.container_statuses.as_mut())
        {
            statuses[1].ready = false;
        }
        assert_eq!(collectable(&one_unready), Err(NotReady::ContainersNotReady));
        // Fewer statuses than containers: not yet collectable.
        let mut one_status = cached;
        if let Some(statuses) = one_status
            .status
            .as_mut()
            .and_then(|status| status.container_statuses.as_mut())
        {
            statuses.pop();
        }
        assert_eq!(collectable(&one_status), Err(NotReady::ContainersNotReady));
    }

    #[test]
    fn a_running_ready_pod_on_a_node_is_collectable() {
        assert_eq!(collectable(&pod(running(true))), Ok("n1"));
        assert_eq!(pod_key(&pod(running(true))), "ns/p");
    }

    #[test]
    fn unready_pending_unscheduled_and_terminating_pods_are_not() {
        assert_eq!(
            collectable(&pod(running(false))),
            Err(NotReady::ContainersNotReady)
        );
        let mut pending = running(true);
        pending["status"]["phase"] = json!("Pending");
        assert_eq!(collectable(&pod(pending)), Err(NotReady::NotRunning));
        let mut unscheduled = running(true);
        unscheduled["spec"]["nodeName"] = json!(null);
        assert_eq!(collectable(&pod(unscheduled)), Err(NotReady::NoNode));
        let mut terminating = running(true);
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(collectable(&pod(terminating)), Err(NotReady::Terminating));
        let mut missing_status = running(true);
        missing_status["status"]["containerStatuses"] = json!([]);
        assert_eq!(
            collectable(&pod(missing_status)),
            Err(NotReady::ContainersNotReady)
        );
    }
}
