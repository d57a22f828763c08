//! The Python `kubernetes` client against kube-sim over loopback: it
//! percent-encodes names in paths (`system%3Aprobe%3Areader`), sends JSON
//! with its own defaults, and must see what a real server would answer.
//!
//! The interpreter is env `PYTHON` or `<workspace>/.venv/bin/python`
//! (scripts/test.sh installs the client there); a missing client fails the
//! test with a message saying how to get it.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::sim;

fn python() -> PathBuf {
    if let Ok(path) = std::env::var("PYTHON") {
        return PathBuf::from(path);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    assert!(
        path.exists(),
        "python not found: set PYTHON or run scripts/test.sh, which creates .venv with the `kubernetes` client ({})",
        path.display()
    );
    path
}

/// Runs `script` with the kubeconfig of `sim` as its argument and returns
/// its stdout lines, failing the test when it fails.
async fn run_python(sim: &kube_sim::KubeSim, script: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
    let path = dir.path().join("probe.py");
    std::fs::write(&path, script).unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(python())
            .arg(&path)
            .arg(&kubeconfig)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python client finished within a minute")
    .expect("python starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python client failed:\n{stdout}\n{stderr}"
    );
    stdout.lines().map(str::to_string).collect()
}

const SCRIPT: &str = r#"
import sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
rbac = client.RbacAuthorizationV1Api()
core = client.CoreV1Api()

role = client.V1Role(
    metadata=client.V1ObjectMeta(name="system:probe:reader"),
    rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get"])],
)
rbac.create_namespaced_role("default", role)
read = rbac.read_namespaced_role("system:probe:reader", "default")
print("role", read.metadata.name, read.rules[0].verbs)
rbac.delete_namespaced_role("system:probe:reader", "default")
try:
    rbac.read_namespaced_role("system:probe:reader", "default")
    print("still there")
except ApiException as e:
    print("after delete", e.status)

cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="dry"), data={"k": "v"})
core.create_namespaced_config_map("default", cm, dry_run="All")
try:
    core.read_namespaced_config_map("dry", "default")
    print("dry run stored")
except ApiException as e:
    print("dry run", e.status)
try:
    core.create_namespaced_config_map("default", cm, dry_run="all")
    print("lowercase dry run accepted")
except ApiException as e:
    print("lowercase dry run", e.status)

pod = client.V1Pod(
    metadata=client.V1ObjectMeta(name="web"),
    spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="nginx")]),
)
core.create_namespaced_pod("default", pod)
found = core.list_namespaced_pod("default", field_selector="spec.restartPolicy=Always")
print("defaulted", [p.metadata.name for p in found.items], found.items[0].spec.dns_policy)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_reads_names_with_colons_dry_runs_and_defaulted_fields() {
    let sim = sim().await;
    let lines = run_python(&sim, SCRIPT).await;
    assert_eq!(
        lines,
        [
            "role system:probe:reader ['get']",
            "after delete 404",
            "dry run 404",
            "lowercase dry run 422",
            "defaulted ['web'] ClusterFirst",
        ]
    );
}

/// The Python client over kube-sim's HTTPS with the kubeconfig's token and
/// CA, then the same configuration without the token and with a wrong one.
const SECURE_SCRIPT: &str = r#"
import copy, sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
base = client.Configuration.get_default_copy()
print("scheme", base.host.split(":")[0])
core = client.CoreV1Api(client.ApiClient(base))
print("with the token", sorted(n.metadata.name for n in core.list_namespace().items)[:1])
for name, token in (("without a token", None), ("with a wrong token", "wrong")):
    other = copy.deepcopy(base)
    # The kubeconfig loader's hook would put the real token back.
    other.refresh_api_key_hook = None
    other.api_key = {} if token is None else {"BearerToken": token}
    other.api_key_prefix = {"BearerToken": "Bearer"}
    try:
        client.CoreV1Api(client.ApiClient(other)).list_namespace()
        print(name, "allowed")
    except ApiException as e:
        print(name, e.status, e.reason)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_uses_the_token_and_ca_of_a_secured_kube_sim_and_gets_401_without() {
    let sim = kube_sim::KubeSim::builder()
        .tls()
        .require_token()
        .start()
        .await
        .expect("kube-sim starts");
    let lines = run_python(&sim, SECURE_SCRIPT).await;
    assert_eq!(
        lines,
        [
            "scheme https",
            "with the token ['default']",
            "without a token 401 Unauthorized",
            "with a wrong token 401 Unauthorized",
        ]
    );
}
