//! The manifests in `deploy/` apply with kubectl to `gpufleet sim serve`
//! (kubectl validates them against the server's OpenAPI schemas first), and
//! what the server stores is what they say.

use std::path::Path;

use crate::support::SimServer;

fn deploy_dir(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn the_gpuid_rbac_and_deployment_apply_with_kubectl_and_are_stored_as_written() {
    let sim = SimServer::start();
    // The GPU operator owns this namespace in a real cluster.
    sim.kubectl_ok(&["create", "namespace", "gpu-operator"]);
    let applied = sim.kubectl_ok(&["apply", "--validate=strict", "-f", &deploy_dir("gpuid")]);
    for created in [
        "namespace/gpuid",
        "serviceaccount/gpuid",
        "clusterrole.rbac.authorization.k8s.io/gpuid-nodes",
        "clusterrolebinding.rbac.authorization.k8s.io/gpuid-nodes",
        "role.rbac.authorization.k8s.io/gpuid-device-plugin-exec",
        "rolebinding.rbac.authorization.k8s.io/gpuid-device-plugin-exec",
        "deployment.apps/gpuid",
    ] {
        assert!(
            applied.contains(&format!("{created} created")),
            "{created} missing from:\n{applied}"
        );
    }
    let node_verbs = sim.kubectl_ok(&[
        "get",
        "clusterrole",
        "gpuid-nodes",
        "-o",
        "jsonpath={.rules[0].verbs}",
    ]);
    assert_eq!(node_verbs, r#"["get","list","patch"]"#);
    let exec_rule = sim.kubectl_ok(&[
        "get",
        "role",
        "gpuid-device-plugin-exec",
        "-n",
        "gpu-operator",
        "-o",
        "jsonpath={.rules[1].resources} {.rules[1].verbs}",
    ]);
    assert_eq!(exec_rule, r#"["pods/exec"] ["get","create"]"#);
    let subject = sim.kubectl_ok(&[
        "get",
        "clusterrolebinding",
        "gpuid-nodes",
        "-o",
        "jsonpath={.subjects[0].namespace}/{.subjects[0].name}",
    ]);
    assert_eq!(subject, "gpuid/gpuid");
    let account = sim.kubectl_ok(&[
        "get",
        "deploy",
        "gpuid",
        "-n",
        "gpuid",
        "-o",
        "jsonpath={.spec.template.spec.serviceAccountName}",
    ]);
    assert_eq!(account, "gpuid");

    // A second apply changes nothing, as against a real cluster.
    let again = sim.kubectl_ok(&["apply", "-f", &deploy_dir("gpuid")]);
    assert!(
        again.lines().all(|line| line.ends_with(" unchanged")),
        "{again}"
    );
}

/// `kubectl apply -f -` with `manifest` on stdin: the path a manifest takes
/// (the generator commands, `kubectl create clusterrole` and the like, are
/// covered by kube-sim's own kubectl tests).
fn apply_stdin(sim: &SimServer, manifest: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = sim
        .kubectl()
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(manifest.as_bytes())
        .expect("manifest written");
    child.wait_with_output().expect("kubectl finishes")
}

fn cluster_role(name: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {name}
rules:
  - apiGroups: [\"\"]
    resources: [\"nodes\"]
    verbs: [\"get\"]
"
    )
}

#[test]
fn rbac_names_may_carry_colons_but_not_percent_signs() {
    let sim = SimServer::start();
    let ok = apply_stdin(&sim, &cluster_role("system:gpuid:reader"));
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let stored = sim.kubectl_ok(&[
        "get",
        "clusterrole",
        "system:gpuid:reader",
        "-o",
        "jsonpath={.rules[0].verbs}",
    ]);
    assert_eq!(stored, r#"["get"]"#);
    let bad = apply_stdin(&sim, &cluster_role("bad%name"));
    assert!(!bad.status.success());
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("may not contain '%'"), "{stderr}");
}
