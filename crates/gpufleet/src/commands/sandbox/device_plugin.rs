//! The NVIDIA device plugin of each simulated GPU Node: one pod per Node
//! that Mokka assigned (as the GPU operator's DaemonSet runs one per GPU
//! Node), with upstream gpuid's label, and the answer of its
//! `nvidia-smi -q -x`, computed at exec time from the Node's current
//! assignment and effective runtime.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use controller_kit::caches::ObjectEvent;
use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube_sim::exec::{ExecMatcher, ExecOutput, ExecRequest};
use tokio_util::sync::CancellationToken;

use super::fleet::DEVICE_PLUGIN_NAMESPACE;
use super::nvidia_smi;
use crate::fleet_view::state::{FleetState, current_assignment, is_assigned};

/// Upstream gpuid's default `LABEL_SELECTOR` is `app=<this>`.
pub const APP_LABEL: &str = "nvidia-device-plugin-daemonset";
/// Upstream gpuid's default `CONTAINER`.
pub const CONTAINER: &str = "nvidia-device-plugin";
const IMAGE: &str = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0";
const POD_PREFIX: &str = "nvidia-device-plugin-";

pub fn pod_name(node: &str) -> String {
    format!("{POD_PREFIX}{node}")
}

fn device_plugin_pod(node: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(node)),
            namespace: Some(DEVICE_PLUGIN_NAMESPACE.to_string()),
            labels: Some([("app".to_string(), APP_LABEL.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.to_string()),
            containers: vec![Container {
                name: CONTAINER.to_string(),
                image: Some(IMAGE.to_string()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Nodes that should run the plugin: those Mokka projected as assigned
/// (`mokka.nvidia.com/sgpu-assigned=true`), like a DaemonSet whose
/// nodeSelector is that label.
fn assigned_nodes(nodes: &[Arc<Node>]) -> BTreeSet<String> {
    nodes
        .iter()
        .filter(|node| node.metadata.deletion_timestamp.is_none() && is_assigned(node))
        .filter_map(|node| node.metadata.name.clone())
        .collect()
}

/// Whether `pod` is one of the plugin's own pods, not being deleted.
fn is_plugin_pod(pod: &Pod) -> bool {
    pod.metadata.namespace.as_deref() == Some(DEVICE_PLUGIN_NAMESPACE)
        && pod.metadata.deletion_timestamp.is_none()
        && pod
            .metadata
            .labels
            .as_ref()
            .and_then(|labels| labels.get("app"))
            .is_some_and(|app| app == APP_LABEL)
}

/// What the DaemonSet controller would do now: pods to create (by Node)
/// and pods to delete (by pod name). Pure.
pub fn plan(nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> (Vec<String>, Vec<String>) {
    let wanted = assigned_nodes(nodes);
    let mut running: BTreeMap<String, String> = BTreeMap::new();
    for pod in pods {
        let ours = is_plugin_pod(pod);
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
        if let (true, Some(node), Some(name)) = (ours, node, pod.metadata.name.clone()) {
            running.insert(node, name);
        }
    }
    let create = wanted
        .iter()
        .filter(|node| !running.contains_key(*node))
        .cloned()
        .collect();
    let delete = running
        .iter()
        .filter(|(node, _)| !wanted.contains(*node))
        .map(|(_, pod)| pod.clone())
        .collect();
    (create, delete)
}

/// A counter that moves only when what [`plan`] reads changes: which Nodes
/// are assigned, and which plugin pods exist on which Node. Every other
/// change (gpuid's annotations on each resync, TFJob pods, status) leaves
/// it still, so an idle fleet does not re-plan its 10,000 Nodes.
fn membership_changes(state: &FleetState) -> tokio::sync::watch::Receiver<u64> {
    let (sender, receiver) = tokio::sync::watch::channel(0u64);
    let assigned = Arc::new(parking_lot::Mutex::new(BTreeSet::<String>::new()));
    {
        let sender = sender.clone();
        state.nodes.attach(Arc::new(move |event| {
            let node = event.object();
            let Some(name) = node.metadata.name.clone() else {
                return;
            };
            let member = matches!(event, ObjectEvent::Applied(_))
                && node.metadata.deletion_timestamp.is_none()
                && is_assigned(node);
            let mut assigned = assigned.lock();
            let moved = if member {
                assigned.insert(name)
            } else {
                assigned.remove(&name)
            };
            if moved {
                sender.send_modify(|count| *count += 1);
            }
        }));
    }
    let placed = Arc::new(parking_lot::Mutex::new(BTreeMap::<String, String>::new()));
    state.pods.attach(Arc::new(move |event| {
        let pod = event.object();
        let Some(name) = pod.metadata.name.clone() else {
            return;
        };
        let node = pod.spec.as_ref().and_then(|spec| spec.node_name.clone());
        let mut placed = placed.lock();
        let moved = match (
            matches!(event, ObjectEvent::Applied(_)) && is_plugin_pod(pod),
            node,
        ) {
            (true, Some(node)) => placed.insert(name, node.clone()).as_ref() != Some(&node),
            _ => placed.remove(&name).is_some(),
        };
        if moved {
            sender.send_modify(|count| *count += 1);
        }
    }));
    receiver
}

/// Keeps one device-plugin pod on every assigned Node until `cancel`.
pub async fn run_daemonset(client: kube::Client, state: FleetState, cancel: CancellationToken) {
    let api: Api<Pod> = Api::namespaced(client, DEVICE_PLUGIN_NAMESPACE);
    let mut changes = membership_changes(&state);
    loop {
        let (create, delete) = plan(&state.nodes.state(), &state.pods.state());
        for node in create {
            match api
                .create(&PostParams::default(), &device_plugin_pod(&node))
                .await
            {
                Ok(_) => {}
                // Already there: the cache had not seen it yet.
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => tracing::warn!(%error, %node, "cannot create the device-plugin pod"),
            }
        }
        for pod in delete {
            match api.delete(&pod, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => tracing::warn!(%error, %pod, "cannot delete the device-plugin pod"),
            }
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        // Let a burst of changes (72 projections) settle into one pass.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// nvidia-smi's own timestamp format, in UTC.
fn smi_timestamp() -> String {
    jiff::Timestamp::now()
        .strftime("%a %b %e %H:%M:%S %Y")
        .to_string()
}

/// What `nvidia-smi -q -x` prints in the device-plugin pod on `node`.
fn answer(state: &FleetState, request: &ExecRequest) -> ExecOutput {
    let Some(node) = request.node_name() else {
        return ExecOutput::stdout("No devices were found\n").with_exit_code(6);
    };
    match current_assignment(state, node) {
        Ok(Some((assignment, profile))) => {
            ExecOutput::stdout(nvidia_smi::render(&assignment, &profile, &smi_timestamp()))
        }
        // nvidia-smi's answer on a machine without GPUs (exit 6).
        Ok(None) => ExecOutput::stdout("No devices were found\n").with_exit_code(6),
        Err(error) => ExecOutput::failure(
            255,
            format!("Unable to determine the device handles: {error}\n"),
        ),
    }
}

/// Registers the exec answer for every device-plugin pod.
pub fn register_exec(sim: &kube_sim::KubeSim, state: FleetState) {
    sim.exec_handlers().register(
        ExecMatcher::any()
            .labels([("app", APP_LABEL)])
            .command(["nvidia-smi", "-q", "-x"]),
        move |request: ExecRequest| {
            let output = answer(&state, &request);
            async move { output }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, assigned: bool) -> Arc<Node> {
        let mut labels = BTreeMap::new();
        if assigned {
            labels.insert(
                mokka::api::LABEL_SGPU_ASSIGNED.to_string(),
                "true".to_string(),
            );
        }
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn a_plugin_pod_runs_on_each_assigned_node_and_nowhere_else() {
        let nodes = [node("a", true), node("b", false), node("c", true)];
        let existing = [
            Arc::new(device_plugin_pod("a")),
            Arc::new(device_plugin_pod("b")),
            Arc::new(device_plugin_pod("gone")),
        ];
        let (create, delete) = plan(&nodes, &existing);
        assert_eq!(create, vec!["c".to_string()]);
        assert_eq!(
            delete,
            vec![pod_name("b"), pod_name("gone")],
            "pods of unassigned and deleted Nodes go"
        );
        let pod = device_plugin_pod("c");
        assert_eq!(pod.metadata.labels.unwrap()["app"], APP_LABEL);
        assert_eq!(pod.spec.unwrap().containers[0].name, CONTAINER);
    }
}
