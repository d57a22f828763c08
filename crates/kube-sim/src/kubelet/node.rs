//! What a simulated kubelet reports for its Node, pure: Ready conditions,
//! capacity and allocatable with defaults, addresses and node info.

use serde_json::{Map, Value, json};

use super::SIMULATED;

/// Capacity a simulated node reports for resources its creator left out.
pub const DEFAULT_CAPACITY: [(&str, &str); 4] = [
    ("cpu", "32"),
    ("memory", "256Gi"),
    ("pods", "110"),
    ("ephemeral-storage", "1Ti"),
];

/// True unless the node opts out with the label or annotation
/// `kube-sim.gpufleet.dev/simulated: "false"`.
pub fn is_simulated(metadata: &Value) -> bool {
    let opted_out = |field: &str| {
        metadata
            .get(field)
            .and_then(|m| m.get(SIMULATED))
            .and_then(Value::as_str)
            .is_some_and(|v| v.eq_ignore_ascii_case("false"))
    };
    !(opted_out("labels") || opted_out("annotations"))
}

/// The conditions a healthy kubelet posts: (type, status, reason, message).
const CONDITIONS: [(&str, &str, &str, &str); 4] = [
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    (
        "DiskPressure",
        "False",
        "KubeletHasNoDiskPressure",
        "kubelet has no disk pressure",
    ),
    (
        "PIDPressure",
        "False",
        "KubeletHasSufficientPID",
        "kubelet has sufficient PID available",
    ),
    (
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    ),
];

fn object(value: Option<&Value>) -> Map<String, Value> {
    value
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// The node status the kubelet wants, or None when the stored one already
/// says it. What the creator set (capacity, allocatable, addresses) wins
/// over defaults; conditions keep their transition times while unchanged.
pub fn desired_status(node: &Value, internal_ip: &str, now: &str) -> Option<Value> {
    let current = node.get("status").cloned().unwrap_or_else(|| json!({}));
    let mut status = object(Some(&current));
    let mut capacity = object(current.get("capacity"));
    for (resource, amount) in DEFAULT_CAPACITY {
        capacity
            .entry(resource.to_string())
            .or_insert_with(|| json!(amount));
    }
    let mut allocatable = capacity.clone();
    allocatable.extend(object(current.get("allocatable")));
    status.insert("capacity".into(), Value::Object(capacity));
    status.insert("allocatable".into(), Value::Object(allocatable));

    let existing: Vec<Value> = current
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut conditions: Vec<Value> = existing
        .iter()
        .filter(|c| {
            let t = c.get("type").and_then(Value::as_str).unwrap_or_default();
            !CONDITIONS.iter().any(|(owned, ..)| *owned == t)
        })
        .cloned()
        .collect();
    for (type_, want, reason, message) in CONDITIONS {
        let previous = existing
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
            .filter(|c| {
                c.get("status").and_then(Value::as_str) == Some(want)
                    && c.get("reason").and_then(Value::as_str) == Some(reason)
            });
        conditions.push(match previous {
            Some(same) => same.clone(),
            None => json!({
                "type": type_,
                "status": want,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }),
        });
    }
    status.insert("conditions".into(), Value::Array(conditions));

    let has_addresses = current
        .get("addresses")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !has_addresses {
        let name = node
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        status.insert(
            "addresses".into(),
            json!([
                {"type": "InternalIP", "address": internal_ip},
                {"type": "Hostname", "address": name},
            ]),
        );
    }
    if current.get("nodeInfo").is_none() {
        status.insert(
            "nodeInfo".into(),
            json!({
                "machineID": "kube-sim",
                "systemUUID": "kube-sim",
                "bootID": "kube-sim",
                "kernelVersion": "6.8.0-kube-sim",
                "osImage": "kube-sim simulated node",
                "containerRuntimeVersion": "kube-sim://1.0.0",
                "kubeletVersion": format!("v1.{}.0-kube-sim", crate::http::discovery::SERVER_VERSION_MINOR),
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            }),
        );
    }
    if current.get("daemonEndpoints").is_none() {
        status.insert(
            "daemonEndpoints".into(),
            json!({"kubeletEndpoint": {"Port": 10250}}),
        );
    }
    let status = Value::Object(status);
    (status != current).then_some(status)
}

/// The existing InternalIP of a node, if its creator or an earlier pass set one.
pub fn internal_ip(node: &Value) -> Option<String> {
    node.pointer("/status/addresses")
        .and_then(Value::as_array)?
        .iter()
        .find(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
        .and_then(|a| a.get("address"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_node_gets_defaults_ready_conditions_and_an_address() {
        let node = json!({"metadata": {"name": "n1"}});
        let status = desired_status(&node, "172.18.0.2", "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(status["capacity"]["cpu"], "32");
        assert_eq!(status["allocatable"]["memory"], "256Gi");
        assert_eq!(status["allocatable"]["pods"], "110");
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["reason"], "KubeletReady");
        assert_eq!(status["addresses"][0]["address"], "172.18.0.2");
        assert_eq!(status["addresses"][1]["address"], "n1");
    }

    #[test]
    fn creator_capacity_and_extended_resources_are_kept_and_allocatable_follows() {
        let node = json!({"metadata": {"name": "gpu"}, "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "96"},
            "allocatable": {"cpu": "94"}
        }});
        let status = desired_status(&node, "10.0.0.1", "t").unwrap();
        assert_eq!(status["capacity"]["nvidia.com/gpu"], "8");
        assert_eq!(status["capacity"]["cpu"], "96");
        assert_eq!(status["allocatable"]["nvidia.com/gpu"], "8");
        assert_eq!(status["allocatable"]["cpu"], "94");
        assert_eq!(status["capacity"]["memory"], "256Gi");
    }

    #[test]
    fn a_node_already_reported_needs_no_write() {
        let node = json!({"metadata": {"name": "n1"}});
        let status = desired_status(&node, "172.18.0.2", "t1").unwrap();
        let reported = json!({"metadata": {"name": "n1"}, "status": status});
        assert_eq!(desired_status(&reported, "172.18.0.9", "t2"), None);
        assert_eq!(internal_ip(&reported).as_deref(), Some("172.18.0.2"));
    }

    #[test]
    fn not_ready_is_corrected_and_its_transition_time_moves() {
        let node = json!({"metadata": {"name": "n"}, "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "lastTransitionTime": "old"}
        ]}});
        let status = desired_status(&node, "ip", "new").unwrap();
        let ready = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(ready["status"], "True");
        assert_eq!(ready["lastTransitionTime"], "new");
    }

    #[test]
    fn nodes_opt_out_by_label_or_annotation() {
        assert!(is_simulated(&json!({"name": "n"})));
        assert!(!is_simulated(&json!({"labels": {SIMULATED: "false"}})));
        assert!(!is_simulated(&json!({"annotations": {SIMULATED: "False"}})));
        assert!(is_simulated(&json!({"annotations": {SIMULATED: "true"}})));
    }
}
