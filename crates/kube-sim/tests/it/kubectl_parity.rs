//! The real kubectl against kube-sim over loopback: apply/create with
//! validation on (OpenAPI v3), explain, and Table output for get and watch.
//!
//! kubectl comes from env `KUBECTL` or `<workspace>/.venv/bin/kubectl`; a
//! missing kubectl fails these tests with a message saying how to get it.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use kube_sim::KubeSim;
use serde_json::json;

use crate::support::{kubectl_path, sim};

/// kubectl bound to one kube-sim through a private kubeconfig and cache dir.
pub(crate) struct Kubectl {
    dir: tempfile::TempDir,
    binary: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    pub(crate) fn new(sim: &KubeSim) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
        Self {
            dir,
            binary: kubectl_path(),
            kubeconfig,
        }
    }

    /// kubectl for the cluster an existing kubeconfig file names.
    pub(crate) fn for_kubeconfig(kubeconfig: &std::path::Path) -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
            binary: kubectl_path(),
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }

    pub(crate) fn file(&self, name: &str, content: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.display().to_string()
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.binary);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env("HOME", self.dir.path())
            .kill_on_drop(true);
        cmd
    }

    pub(crate) async fn run(&self, args: &[&str]) -> Output {
        tokio::time::timeout(Duration::from_secs(60), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .unwrap_or_else(|e| panic!("kubectl {args:?} did not start: {e}"))
    }

    /// Runs kubectl and returns stdout, failing the test on a non-zero exit.
    pub(crate) async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        stdout
    }
}

fn header(output: &str) -> Vec<&str> {
    output
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

fn row<'a>(output: &'a str, name: &str) -> Vec<&'a str> {
    output
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name))
        .unwrap_or_else(|| panic!("no row {name} in:\n{output}"))
}

const GADGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.parity.gpufleet.dev
spec:
  group: parity.gpufleet.dev
  scope: Namespaced
  names:
    kind: Gadget
    plural: gadgets
    singular: gadget
    listKind: GadgetList
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Color
      type: string
      jsonPath: .spec.color
    - name: Phase
      type: string
      jsonPath: .status.phase
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        description: A Gadget is a test kind for kubectl parity.
        properties:
          spec:
            type: object
            description: What the gadget should look like.
            required: [size]
            properties:
              size:
                type: integer
                description: How many parts the gadget has.
              color:
                type: string
                description: The paint on the gadget.
          status:
            type: object
            properties:
              phase:
                type: string
"#;

const GADGETS: &str = r#"apiVersion: parity.gpufleet.dev/v1
kind: Gadget
metadata:
  name: small
spec:
  size: 2
  color: red
---
apiVersion: parity.gpufleet.dev/v1
kind: Gadget
metadata:
  name: large
spec:
  size: 40
  color: blue
"#;

async fn install_gadgets(kubectl: &Kubectl) {
    let crd = kubectl.file("crd.yaml", GADGET_CRD);
    let out = kubectl.ok(&["apply", "-f", &crd]).await;
    assert!(out.contains("gadgets.parity.gpufleet.dev created"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_a_crd_and_custom_resources_and_prints_their_columns() {
    let sim = sim().await;
    let kubectl = Kubectl::new(&sim);
    install_gadgets(&kubectl).await;
    let gadgets = kubectl.file("gadgets.yaml", GADGETS);
    let out = kubectl.ok(&["apply", "-f", &gadgets]).await;
    assert!(
        out.contains("gadget.parity.gpufleet.dev/small created"),
        "{out}"
    );
    assert!(
        out.contains("gadget.parity.gpufleet.dev/large created"),
        "{out}"
    );

    let out = kubectl.ok(&["get", "gadgets"]).await;
    assert_eq!(
        header(&out),
        ["NAME", "SIZE", "COLOR", "PHASE", "AGE"],
        "{out}"
    );
    // No status yet: the PHASE cell is empty, so the row has four words.
    let small = row(&out, "small");
    assert_eq!((&small[1..3], small.len()), (&["2", "red"][..], 4), "{out}");
    assert_eq!(&row(&out, "large")[1..3], ["40", "blue"], "{out}");

    // Re-applying a changed file patches (a merge patch for custom kinds).
    let changed = kubectl.file(
        "changed.yaml",
        &GADGETS.replace("color: red", "color: green"),
    );
    let out = kubectl.ok(&["apply", "-f", &changed]).await;
    assert!(
        out.contains("gadget.parity.gpufleet.dev/small configured"),
        "{out}"
    );
    assert!(
        out.contains("gadget.parity.gpufleet.dev/large unchanged"),
        "{out}"
    );
    let out = kubectl.ok(&["get", "gadget", "small"]).await;
    assert_eq!(&row(&out, "small")[1..3], ["2", "green"], "{out}");

    // create -f with validation on, then a merge patch like `kubectl edit` sends.
    let third = kubectl.file(
        "third.yaml",
        "apiVersion: parity.gpufleet.dev/v1\nkind: Gadget\nmetadata:\n  name: third\nspec:\n  size: 7\n",
    );
    let out = kubectl.ok(&["create", "-f", &third]).await;
    assert!(
        out.contains("gadget.parity.gpufleet.dev/third created"),
        "{out}"
    );
    kubectl
        .ok(&[
            "patch",
            "gadget",
            "third",
            "--type=merge",
            "-p",
            r#"{"spec":{"color":"teal"}}"#,
        ])
        .await;
    let out = kubectl.ok(&["get", "gadgets", "-o", "name"]).await;
    assert_eq!(out.lines().count(), 3, "{out}");
    let out = kubectl.ok(&["get", "gadget", "third"]).await;
    assert_eq!(&row(&out, "third")[1..3], ["7", "teal"], "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_shows_the_crd_schema() {
    let sim = sim().await;
    let kubectl = Kubectl::new(&sim);
    install_gadgets(&kubectl).await;
    let out = kubectl.ok(&["explain", "gadgets.spec"]).await;
    assert!(out.contains("Gadget"), "{out}");
    assert!(out.contains("What the gadget should look like."), "{out}");
    assert!(out.contains("size"), "{out}");
    assert!(out.contains("How many parts the gadget has."), "{out}");
    assert!(out.contains("color"), "{out}");
    // Built-in kinds are explained from k8s-openapi's schemas.
    let out = kubectl.ok(&["explain", "configmap.data"]).await;
    assert!(out.contains("ConfigMap"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_hash_changes_when_a_crd_arrives() {
    let sim = sim().await;
    let client = sim.client();
    let (code, before) = crate::support::raw(&client, "GET", "/openapi/v3", "", b"").await;
    assert_eq!(code, 200);
    let core = before["paths"]["api/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    assert!(core.starts_with("/openapi/v3/api/v1?hash="), "{core}");
    let kubectl = Kubectl::new(&sim);
    install_gadgets(&kubectl).await;
    let (_, after) = crate::support::raw(&client, "GET", "/openapi/v3", "", b"").await;
    let crd_url = after["paths"]["apis/apiextensions.k8s.io/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    let gadget_url = after["paths"]["apis/parity.gpufleet.dev/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        crd_url, before["paths"]["apis/apiextensions.k8s.io/v1"]["serverRelativeURL"],
        "documents that did not change keep their hash"
    );
    let (code, doc) = crate::support::raw(&client, "GET", &gadget_url, "", b"").await;
    assert_eq!(code, 200);
    let schema = &doc["components"]["schemas"]["dev.gpufleet.parity.v1.Gadget"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"],
        json!([{"group": "parity.gpufleet.dev", "version": "v1", "kind": "Gadget"}])
    );
    // A second CRD version changes this group-version's document and hash.
    kubectl
        .ok(&[
            "patch",
            "crd",
            "gadgets.parity.gpufleet.dev",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/versions/0/schema/openAPIV3Schema/description","value":"changed"}]"#,
        ])
        .await;
    let (_, later) = crate::support::raw(&client, "GET", "/openapi/v3", "", b"").await;
    assert_ne!(
        later["paths"]["apis/parity.gpufleet.dev/v1"]["serverRelativeURL"],
        json!(gadget_url)
    );
    // The v2 document carries the same schema, changed too.
    let (code, v2) = crate::support::raw(&client, "GET", "/openapi/v2", "", b"").await;
    assert_eq!(code, 200);
    assert_eq!(
        v2["definitions"]["dev.gpufleet.parity.v1.Gadget"]["description"],
        "changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_builtin_columns() {
    // No simulated kubelet: the pod must stay Pending for the row check.
    let sim = KubeSim::builder()
        .kubelet(kube_sim::KubeletConfig::disabled())
        .start()
        .await
        .unwrap();
    let client = sim.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "gpu-1", "labels": {"node-role.kubernetes.io/gpu": ""}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {
                "kubeletVersion": "v1.33.0", "architecture": "amd64", "bootID": "", "containerRuntimeVersion": "",
                "kernelVersion": "", "kubeProxyVersion": "", "machineID": "", "operatingSystem": "linux",
                "osImage": "", "systemUUID": ""
            }
        }
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(
        &PostParams::default(),
        &crate::support::configmap("settings", &[("a", "1"), ("b", "2")]),
    )
    .await
    .unwrap();

    let kubectl = Kubectl::new(&sim);
    let out = kubectl.ok(&["get", "pods"]).await;
    assert_eq!(
        header(&out),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
    assert_eq!(&row(&out, "web")[1..4], ["0/1", "Pending", "0"], "{out}");

    let out = kubectl.ok(&["get", "nodes"]).await;
    assert_eq!(
        header(&out),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{out}"
    );
    let gpu = row(&out, "gpu-1");
    assert_eq!(
        (gpu[1], gpu[2], gpu[4]),
        ("Ready", "gpu", "v1.33.0"),
        "{out}"
    );

    let out = kubectl.ok(&["get", "configmaps"]).await;
    assert_eq!(header(&out), ["NAME", "DATA", "AGE"], "{out}");
    assert_eq!(row(&out, "settings")[1], "2", "{out}");

    // Kinds without their own columns get NAME and AGE.
    let accounts: Api<ServiceAccount> = Api::default_namespaced(client.clone());
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let out = kubectl.ok(&["get", "serviceaccounts"]).await;
    assert_eq!(header(&out), ["NAME", "AGE"], "{out}");
    assert_eq!(row(&out, "robot").len(), 2, "{out}");
    let out = kubectl.ok(&["get", "namespaces"]).await;
    assert_eq!(header(&out), ["NAME", "STATUS", "AGE"], "{out}");
    assert_eq!(row(&out, "default")[1], "Active", "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_events_are_one_row_tables() {
    let sim = sim().await;
    let client = sim.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(
        &PostParams::default(),
        &crate::support::configmap("first", &[("a", "1")]),
    )
    .await
    .unwrap();

    // Raw watch with kubectl's Accept header.
    let request = http::Request::get("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
        )
        .body(kube::client::Body::empty())
        .unwrap();
    let response = client.send(request).await.unwrap();
    assert_eq!(
        response.headers()["content-type"],
        "application/json;as=Table;v=v1;g=meta.k8s.io"
    );
    let mut body = response.into_body();
    let mut buffer = Vec::new();
    let line = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let frame = http_body_util::BodyExt::frame(&mut body)
                .await
                .unwrap()
                .unwrap();
            if let Ok(data) = frame.into_data() {
                buffer.extend_from_slice(&data);
            }
            if let Some(pos) = buffer.iter().position(|b| *b == b'\n') {
                return buffer[..pos].to_vec();
            }
        }
    })
    .await
    .unwrap();
    let event: serde_json::Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(event["type"], "ADDED");
    assert_eq!(event["object"]["kind"], "Table");
    assert_eq!(event["object"]["rows"].as_array().unwrap().len(), 1);
    assert_eq!(event["object"]["rows"][0]["cells"][0], "first");
    assert_eq!(event["object"]["rows"][0]["cells"][1], 1);

    // kubectl get --watch prints the header once and a row per event.
    let kubectl = Kubectl::new(&sim);
    let mut child = kubectl
        .command(&["get", "configmaps", "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    cms.create(
        &PostParams::default(),
        &crate::support::configmap("second", &[]),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    child.start_kill().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(header(&stdout), ["NAME", "DATA", "AGE"], "{stdout}");
    assert_eq!(row(&stdout, "first")[1], "1", "{stdout}");
    assert_eq!(row(&stdout, "second")[1], "0", "{stdout}");
    assert_eq!(stdout.matches("NAME").count(), 1, "{stdout}");
}

/// Needs the store's server-side apply and strategic merge patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_and_client_side_apply_of_builtins() {
    let sim = sim().await;
    let kubectl = Kubectl::new(&sim);
    install_gadgets(&kubectl).await;
    let gadgets = kubectl.file("gadgets.yaml", GADGETS);
    let out = kubectl
        .ok(&["apply", "--server-side", "-f", &gadgets])
        .await;
    assert!(
        out.contains("gadget.parity.gpufleet.dev/small serverside-applied"),
        "{out}"
    );

    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n";
    let file = kubectl.file("cm.yaml", cm);
    let out = kubectl.ok(&["apply", "-f", &file]).await;
    assert!(out.contains("configmap/settings created"), "{out}");
    let changed = kubectl.file("cm2.yaml", &cm.replace("a: \"1\"", "b: \"2\""));
    // The second apply is a strategic merge patch computed by kubectl.
    let out = kubectl.ok(&["apply", "-f", &changed]).await;
    assert!(out.contains("configmap/settings configured"), "{out}");
    let out = kubectl
        .ok(&["get", "configmap", "settings", "-o", "jsonpath={.data}"])
        .await;
    assert_eq!(out, r#"{"b":"2"}"#);
    let out = kubectl.ok(&["apply", "--server-side", "-f", &file]).await;
    assert!(
        out.contains("configmap/settings serverside-applied"),
        "{out}"
    );
}

/// The issue's scenario end to end: a CRD, then a multi-document file of
/// custom resources (client-side apply), then `apply --server-side` of a
/// changed copy by a second manager, which conflicts with the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_side_manager_changing_a_field_sees_the_conflict() {
    let sim = sim().await;
    let kubectl = Kubectl::new(&sim);
    install_gadgets(&kubectl).await;
    let gadgets = kubectl.file("gadgets.yaml", GADGETS);
    let out = kubectl
        .ok(&[
            "apply",
            "--server-side",
            "--field-manager=platform",
            "-f",
            &gadgets,
        ])
        .await;
    assert!(
        out.contains("gadget.parity.gpufleet.dev/small serverside-applied"),
        "{out}"
    );
    let changed = kubectl.file(
        "changed.yaml",
        &GADGETS.replace("color: red", "color: green"),
    );
    let out = kubectl
        .run(&[
            "apply",
            "--server-side",
            "--field-manager=team-b",
            "-f",
            &changed,
        ])
        .await;
    assert!(
        !out.status.success(),
        "the second manager must not silently win"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("conflict")
            && stderr.contains("platform")
            && stderr.contains(".spec.color"),
        "{stderr}"
    );
    let color = kubectl
        .ok(&["get", "gadget", "small", "-o", "jsonpath={.spec.color}"])
        .await;
    assert_eq!(color, "red");
    // With --force-conflicts the second manager takes the field over.
    kubectl
        .ok(&[
            "apply",
            "--server-side",
            "--field-manager=team-b",
            "--force-conflicts",
            "-f",
            &changed,
        ])
        .await;
    let color = kubectl
        .ok(&["get", "gadget", "small", "-o", "jsonpath={.spec.color}"])
        .await;
    assert_eq!(color, "green");
}

#[tokio::test]
async fn kubectl_create_role_and_binding_generators_store_what_they_say() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let sim = sim().await;
    let kubectl = Kubectl::new(&sim);
    // These generator commands send protobuf bodies.
    kubectl
        .ok(&[
            "create",
            "clusterrole",
            "system:gpu-reader",
            "--verb=get,list",
            "--resource=nodes,pods",
            "--resource-name=gpu-1",
        ])
        .await;
    kubectl
        .ok(&[
            "create",
            "clusterrole",
            "gpu-aggregate",
            "--aggregation-rule=gpufleet.dev/aggregate-to-gpu=true",
        ])
        .await;
    kubectl
        .ok(&[
            "create",
            "role",
            "exec",
            "--verb=get,create",
            "--resource=pods/exec",
        ])
        .await;
    kubectl
        .ok(&[
            "create",
            "rolebinding",
            "exec",
            "--role=exec",
            "--serviceaccount=gpuid:collector",
        ])
        .await;
    kubectl
        .ok(&[
            "create",
            "clusterrolebinding",
            "readers",
            "--clusterrole=system:gpu-reader",
            "--user=alice",
            "--group=ops",
        ])
        .await;

    let client = sim.client();
    let reader = Api::<ClusterRole>::all(client.clone())
        .get("system:gpu-reader")
        .await
        .unwrap();
    let rules = reader.rules.unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(rules[0].verbs, ["get", "list"]);
    assert_eq!(rules[0].api_groups.as_deref(), Some(&[String::new()][..]));
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["nodes".to_string(), "pods".to_string()][..])
    );
    assert_eq!(
        rules[0].resource_names.as_deref(),
        Some(&["gpu-1".to_string()][..])
    );

    let aggregate = Api::<ClusterRole>::all(client.clone())
        .get("gpu-aggregate")
        .await
        .unwrap();
    let selectors = aggregate
        .aggregation_rule
        .and_then(|rule| rule.cluster_role_selectors)
        .unwrap();
    assert_eq!(
        selectors[0].match_labels.as_ref().unwrap()["gpufleet.dev/aggregate-to-gpu"],
        "true"
    );

    let exec = Api::<Role>::default_namespaced(client.clone())
        .get("exec")
        .await
        .unwrap();
    let rules = exec.rules.unwrap();
    assert_eq!(
        rules[0].resources.as_deref(),
        Some(&["pods/exec".to_string()][..])
    );
    assert_eq!(rules[0].verbs, ["get", "create"]);

    let binding = Api::<RoleBinding>::default_namespaced(client.clone())
        .get("exec")
        .await
        .unwrap();
    assert_eq!(
        (
            binding.role_ref.api_group.as_str(),
            binding.role_ref.kind.as_str(),
            binding.role_ref.name.as_str()
        ),
        ("rbac.authorization.k8s.io", "Role", "exec")
    );
    let subject = &binding.subjects.unwrap()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.namespace.as_deref(),
            subject.name.as_str()
        ),
        ("ServiceAccount", Some("gpuid"), "collector")
    );

    let readers = Api::<ClusterRoleBinding>::all(client)
        .get("readers")
        .await
        .unwrap();
    assert_eq!(readers.role_ref.name, "system:gpu-reader");
    let subjects: Vec<(String, String)> = readers
        .subjects
        .unwrap()
        .into_iter()
        .map(|s| (s.kind, s.name))
        .collect();
    assert_eq!(
        subjects,
        [
            ("User".to_string(), "alice".to_string()),
            ("Group".to_string(), "ops".to_string())
        ]
    );
    let listed = kubectl.ok(&["get", "clusterrolebindings"]).await;
    assert!(listed.contains("readers"), "{listed}");
}

/// kubectl sends `fieldValidation=Strict` by default: a typo in a manifest
/// is refused as on a real cluster, `--validate=warn` stores the object and
/// prints the server's warning, `--validate=false` says nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typo_in_a_manifest_is_refused_by_default_and_only_warned_about_when_asked() {
    let sim = sim().await;
    let kubectl = Kubectl::new(&sim);
    let manifest = |name: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  replica: 3\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx\n"
        )
    };
    let strict = kubectl.file("strict.yaml", &manifest("strict"));
    let out = kubectl.run(&["create", "-f", &strict]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the typo was accepted: {stderr}");
    assert!(
        stderr.contains(
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: unknown field \"spec.replica\""
        ),
        "{stderr}"
    );
    let absent = kubectl
        .run(&["get", "deployment", "strict", "-o", "name"])
        .await;
    assert!(!absent.status.success(), "a refused create was stored");

    let warn = kubectl.file("warn.yaml", &manifest("warn"));
    let out = kubectl
        .run(&["create", "--validate=warn", "-f", &warn])
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: unknown field \"spec.replica\""),
        "{stderr}"
    );
    kubectl
        .ok(&["get", "deployment", "warn", "-o", "name"])
        .await;

    let ignore = kubectl.file("ignore.yaml", &manifest("ignore"));
    let out = kubectl
        .run(&["create", "--validate=false", "-f", &ignore])
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("Warning"), "{stderr}");
}

/// Events a controller records through events.k8s.io/v1 (kube-runtime's
/// recorder) are where kubectl users look: `kubectl get events`,
/// `kubectl events --for` and `kubectl describe node`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_events_recorded_through_events_v1() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let sim = sim().await;
    let client = sim.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "gpu-node-7"}})).unwrap();
    let node = nodes.create(&PostParams::default(), &node).await.unwrap();
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: node.metadata.name.clone(),
        uid: node.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gpuid".into(),
            instance: None,
        },
    );
    recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "GpuInventoryChanged".into(),
                note: Some("4 GPUs added".into()),
                action: "Collect".into(),
                secondary: None,
            },
            &reference,
        )
        .await
        .unwrap();

    let kubectl = Kubectl::new(&sim);
    let listed = kubectl.ok(&["get", "events", "-A"]).await;
    assert!(listed.contains("GpuInventoryChanged"), "{listed}");
    assert!(listed.contains("4 GPUs added"), "{listed}");
    let described = kubectl.ok(&["describe", "node", "gpu-node-7"]).await;
    let events_section = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{described}"));
    assert!(
        events_section.contains("GpuInventoryChanged") && events_section.contains("4 GPUs added"),
        "{described}"
    );
    let for_node = kubectl
        .ok(&["events", "-A", "--for", "node/gpu-node-7"])
        .await;
    assert!(for_node.contains("GpuInventoryChanged"), "{for_node}");
}

/// `kubectl auth can-i --as` and `auth whoami` are answered from the stored
/// RBAC objects, with kube-apiserver's reason for an allowed request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_auth_can_i_answers_from_the_stored_rbac_objects() {
    let sim = sim().await;
    let kubectl = Kubectl::new(&sim);
    let rbac = kubectl.file(
        "rbac.yaml",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: collector\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get, list, watch]\n- apiGroups: [\"\"]\n  resources: [pods/exec]\n  verbs: [create]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: collector\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: collector\nsubjects:\n- kind: ServiceAccount\n  name: collector\n  namespace: tools\n",
    );
    kubectl.ok(&["apply", "-f", &rbac]).await;
    let sa = "--as=system:serviceaccount:tools:collector";
    let out = kubectl
        .ok(&[
            "auth",
            "can-i",
            "create",
            "pods",
            "--subresource=exec",
            "-n",
            "gpu-operator",
            sa,
        ])
        .await;
    assert_eq!(out.trim(), "yes");
    let denied = kubectl
        .run(&["auth", "can-i", "delete", "pods", "-n", "gpu-operator", sa])
        .await;
    assert!(!denied.status.success());
    assert_eq!(String::from_utf8_lossy(&denied.stdout).trim(), "no");
    let other = kubectl
        .run(&[
            "auth",
            "can-i",
            "get",
            "pods",
            "--as=system:serviceaccount:tools:someone-else",
        ])
        .await;
    assert_eq!(String::from_utf8_lossy(&other.stdout).trim(), "no");
    let admin = kubectl.ok(&["auth", "can-i", "delete", "nodes"]).await;
    assert_eq!(admin.trim(), "yes");
    let whoami = kubectl
        .ok(&[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ])
        .await;
    assert_eq!(whoami, "system:admin");
    let impersonated = kubectl
        .ok(&[
            "auth",
            "whoami",
            sa,
            "-o",
            "jsonpath={.status.userInfo.groups}",
        ])
        .await;
    assert!(
        impersonated.contains("system:serviceaccounts:tools"),
        "{impersonated}"
    );
}
