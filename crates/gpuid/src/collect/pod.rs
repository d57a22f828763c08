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

/// What the pod cache keeps of a device-plugin pod: its metadata without
/// managedFields and annotations, the node it is bound to, its phase, and
/// each container's name and readiness; everything [`collectable`] and the
/// collector read, and nothing else. A device-plugin pod's spec and status
/// (volumes, tolerations, images, conditions, addresses) are several KiB
/// that the collector never reads, held for every pod for the life of the
/// cache.
pub fn slim(pod: &mut Pod) {
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
    pod.metadata.managed_fields = None;
    pod.metadata.annotations = None;
    pod.spec = pod.spec.take().map(|spec| PodSpec {
        node_name: spec.node_name,
        containers: spec
            .containers
            .into_iter()
            .map(|container| Container {
                name: container.name,
                ..Container::default()
            })
            .collect(),
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|status| PodStatus {
        phase: status.phase,
        container_statuses: status.container_statuses.map(|statuses| {
            statuses
                .into_iter()
                .map(|status| ContainerStatus {
                    name: status.name,
                    ready: status.ready,
                    ..ContainerStatus::default()
                })
                .collect()
        }),
        ..PodStatus::default()
    });
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
    fn a_slimmed_pod_is_collectable_exactly_when_the_whole_pod_is() {
        let mut cases = vec![running(true), running(false)];
        let mut two_containers = running(true);
        two_containers["spec"]["containers"] = json!([{"name": "c"}, {"name": "d"}]);
        cases.push(two_containers);
        let mut pending = running(true);
        pending["status"]["phase"] = json!("Pending");
        cases.push(pending);
        let mut terminating = running(true);
        terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        cases.push(terminating);
        let mut unscheduled = running(true);
        unscheduled["spec"]["nodeName"] = json!("");
        cases.push(unscheduled);
        for case in cases {
            let mut full = pod(case.clone());
            // What a real device-plugin pod carries besides.
            full.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
            if let Some(spec) = full.spec.as_mut() {
                spec.service_account_name = Some("device-plugin".into());
                spec.containers[0].image = Some("nvcr.io/nvidia/k8s-device-plugin".into());
            }
            let mut slimmed = full.clone();
            slim(&mut slimmed);
            assert_eq!(collectable(&slimmed), collectable(&full), "{case}");
            assert_eq!(pod_key(&slimmed), pod_key(&full));
            assert_eq!(slimmed.metadata.annotations, None);
            let spec = slimmed.spec.as_ref().unwrap();
            assert_eq!(spec.service_account_name, None);
            assert_eq!(spec.containers[0].image, None);
        }
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
