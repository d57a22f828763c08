//! What the controllers need to know about the pods they own.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Neither finished nor being deleted: what a controller counts as one of
/// its replicas.
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase(pod), "Succeeded" | "Failed")
}

/// When the pod's `Ready` condition last turned True, if it is True.
pub fn ready_since(pod: &Pod) -> Option<Timestamp> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    Some(
        condition
            .last_transition_time
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH),
    )
}

pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Ready for at least `min_ready_seconds` at `now`.
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    match ready_since(pod) {
        None => false,
        Some(_) if min_ready_seconds <= 0 => true,
        Some(since) => since
            .checked_add(jiff::SignedDuration::from_secs(i64::from(
                min_ready_seconds,
            )))
            .is_ok_and(|t| t <= now),
    }
}

/// Which pods to give up first when there are too many, as the
/// ReplicaSet controller ranks them: unscheduled before scheduled, pending
/// before running, not ready before ready, then the newest first.
pub fn deletion_order(pods: &mut [&Pod]) {
    pods.sort_by_key(|pod| {
        let scheduled = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        let running = phase(pod) == "Running";
        let created = pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(Timestamp::UNIX_EPOCH);
        (
            scheduled,
            running,
            is_ready(pod),
            std::cmp::Reverse(created),
            pod.metadata.name.clone(),
        )
    });
}

pub fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}
