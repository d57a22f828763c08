//! Which device-plugin pods can be collected from (pure).

use k8s_openapi::api::core::v1::Pod;

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

/// A pod is collectable when it is bound to a node, Running, not being
/// deleted, and every container is ready (upstream's rule plus the
/// deletion check upstream lacked).
pub fn collectable(pod: &Pod) -> Result<&str, NotReady> {
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

/// `namespace/name`, the queue key and the record's source.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
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
