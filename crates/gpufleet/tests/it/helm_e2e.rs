//! The Helm charts under deploy/helm. On kube-sim, `helm template`'s output
//! applies with `kubectl apply --validate=strict`; on the real lane
//! (GPUFLEET_TEST_CLUSTER=real) `helm install` creates the release's objects
//! under RBAC authorization and `helm uninstall` removes them.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube_sim::lane::Lane;

use crate::support::{SimServer, kubectl_path};

/// The Helm that scripts/real-cluster.sh builds (scripts/test.sh exports it).
fn helm_path() -> PathBuf {
    let helm = std::env::var_os("HELM").map(PathBuf::from);
    match helm {
        Some(path) if path.exists() => path,
        _ => panic!(
            "HELM is not set to a Helm binary: run scripts/test.sh, or `scripts/real-cluster.sh build` and `eval \"$(scripts/real-cluster.sh env)\"`"
        ),
    }
}

fn chart(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/helm")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn run_ok(command: &mut Command) -> String {
    let out = command.output().expect("the command runs");
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Helm and kubectl against the real lane's cluster-admin kubeconfig.
struct RealLaneTools {
    helm: PathBuf,
    kubeconfig: String,
}

impl RealLaneTools {
    fn new(helm: PathBuf, admin_kubeconfig: &Path) -> Self {
        RealLaneTools {
            helm,
            kubeconfig: admin_kubeconfig.to_string_lossy().into_owned(),
        }
    }

    fn helm(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.helm);
        command.args(args).args(["--kubeconfig", &self.kubeconfig]);
        command
    }

    fn kubectl(&self, args: &[&str]) -> Command {
        let mut command = Command::new(kubectl_path());
        command.args(args).args(["--kubeconfig", &self.kubeconfig]);
        command
    }

    /// `kubectl auth can-i VERB RESOURCE… -n NS --as SUBJECT`: "yes" or "no"
    /// as the API server's authorizer decides.
    fn can_i(&self, subject: &str, verb_resource: &[&str], namespace: &str) -> String {
        let mut args = vec!["auth", "can-i"];
        args.extend_from_slice(verb_resource);
        args.extend_from_slice(&["-n", namespace, "--as", subject]);
        let out = self.kubectl(&args).output().expect("kubectl runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

#[test]
fn the_gpuid_chart_renders_applies_installs_and_uninstalls() {
    let helm = helm_path();
    match Lane::from_env().unwrap() {
        Lane::Sim => {
            let sim = SimServer::start();
            sim.kubectl_ok(&["create", "namespace", "gpu-operator"]);
            sim.kubectl_ok(&["create", "namespace", "gpuid"]);
            let rendered = run_ok(Command::new(&helm).args([
                "template",
                "gpuid",
                &chart("gpuid"),
                "--namespace",
                "gpuid",
                "--set",
                "workers=4",
            ]));
            let file = sim.dir.path().join("gpuid-chart.yaml");
            std::fs::write(&file, rendered).unwrap();
            let applied =
                sim.kubectl_ok(&["apply", "--validate=strict", "-f", &file.to_string_lossy()]);
            assert!(
                applied.contains("deployment.apps/gpuid created"),
                "{applied}"
            );
            assert!(
                applied.contains("role.rbac.authorization.k8s.io/gpuid-device-plugin-exec created"),
                "{applied}"
            );
            let env = sim.kubectl_ok(&[
                "get",
                "deployment",
                "gpuid",
                "-n",
                "gpuid",
                "-o",
                "jsonpath={.spec.template.spec.serviceAccountName} {.spec.template.spec.containers[0].env[?(@.name==\"WORKERS\")].value} {.spec.template.spec.containers[0].env[?(@.name==\"LEASE_NAMESPACE\")].value}",
            ]);
            assert_eq!(env, "gpuid 4 gpuid");
        }
        Lane::Real(cluster) => {
            let tools = RealLaneTools::new(helm, &cluster.admin_kubeconfig);
            let namespace = "gpuid-chart";
            let helm_cmd = |args: &[&str]| tools.helm(args);
            let kubectl = |args: &[&str]| tools.kubectl(args);
            // Left over from an interrupted run.
            let _ = helm_cmd(&["uninstall", "gpuid-chart", "-n", namespace]).output();
            let installed = run_ok(&mut helm_cmd(&[
                "install",
                "gpuid-chart",
                &chart("gpuid"),
                "--namespace",
                namespace,
                "--create-namespace",
                "--set",
                "replicas=1",
            ]));
            assert!(installed.contains("STATUS: deployed"), "{installed}");
            let account = run_ok(&mut kubectl(&[
                "get",
                "deployment",
                "gpuid-chart",
                "-n",
                namespace,
                "-o",
                "jsonpath={.spec.template.spec.serviceAccountName}",
            ]));
            assert_eq!(account, "gpuid-chart");
            // The ServiceAccount may exec in the device-plugin namespace and
            // nowhere else, as the API server's authorizer sees it.
            let subject = format!("system:serviceaccount:{namespace}:gpuid-chart");
            let can = |verb_resource: &[&str], ns: &str| tools.can_i(&subject, verb_resource, ns);
            assert_eq!(
                can(&["create", "pods", "--subresource=exec"], "gpu-operator"),
                "yes"
            );
            assert_eq!(
                can(&["create", "pods", "--subresource=exec"], "default"),
                "no"
            );
            assert_eq!(can(&["patch", "nodes"], "default"), "yes");
            assert_eq!(can(&["delete", "nodes"], "default"), "no");
            run_ok(&mut helm_cmd(&[
                "uninstall",
                "gpuid-chart",
                "-n",
                namespace,
                "--wait",
            ]));
            let left = run_ok(&mut kubectl(&[
                "get",
                "clusterrole",
                "--ignore-not-found",
                "gpuid-chart-nodes",
            ]));
            assert!(left.trim().is_empty(), "{left}");
            let _ = kubectl(&["delete", "namespace", namespace, "--wait=false"]).output();
        }
    }
}

#[test]
fn the_tfjob_chart_renders_applies_installs_and_grants_the_operator_only_what_it_needs() {
    let helm = helm_path();
    match Lane::from_env().unwrap() {
        Lane::Sim => {
            let sim = SimServer::start();
            sim.kubectl_ok(&["create", "namespace", "kubeflow"]);
            let rendered = run_ok(Command::new(&helm).args([
                "template",
                "tfjob",
                &chart("tfjob"),
                "--namespace",
                "kubeflow",
                "--set",
                "defaultCleanPodPolicy=None",
            ]));
            let file = sim.dir.path().join("tfjob-chart.yaml");
            std::fs::write(&file, rendered).unwrap();
            let applied =
                sim.kubectl_ok(&["apply", "--validate=strict", "-f", &file.to_string_lossy()]);
            assert!(
                applied.contains("deployment.apps/tfjob created"),
                "{applied}"
            );
            assert!(
                applied.contains("clusterrole.rbac.authorization.k8s.io/tfjob-operator created"),
                "{applied}"
            );
            let args = sim.kubectl_ok(&[
                "get",
                "deployment",
                "tfjob",
                "-n",
                "kubeflow",
                "-o",
                "jsonpath={.spec.template.spec.containers[0].args}",
            ]);
            assert!(
                args.contains("--default-clean-pod-policy=None")
                    && args.contains("--leader-election-id=tf-operator"),
                "{args}"
            );
        }
        Lane::Real(cluster) => {
            let tools = RealLaneTools::new(helm, &cluster.admin_kubeconfig);
            let namespace = "tfjob-chart";
            let helm_cmd = |args: &[&str]| tools.helm(args);
            let kubectl = |args: &[&str]| tools.kubectl(args);
            // Left over from an interrupted run.
            let _ = helm_cmd(&["uninstall", "tfjob-chart", "-n", namespace]).output();
            let installed = run_ok(&mut helm_cmd(&[
                "install",
                "tfjob-chart",
                &chart("tfjob"),
                "--namespace",
                namespace,
                "--create-namespace",
                "--set",
                "replicas=1",
            ]));
            assert!(installed.contains("STATUS: deployed"), "{installed}");
            let subject = format!("system:serviceaccount:{namespace}:tfjob-chart");
            let can = |verb_resource: &[&str], ns: &str| tools.can_i(&subject, verb_resource, ns);
            assert_eq!(can(&["create", "pods"], "team-a"), "yes");
            // A finished job's children of one replica type go in one request.
            assert_eq!(can(&["deletecollection", "pods"], "team-a"), "yes");
            assert_eq!(can(&["deletecollection", "services"], "team-a"), "yes");
            assert_eq!(
                can(
                    &["patch", "tfjobs.kubeflow.org", "--subresource=status"],
                    "team-a"
                ),
                "yes"
            );
            assert_eq!(can(&["delete", "tfjobs.kubeflow.org"], "team-a"), "yes");
            assert_eq!(can(&["create", "tfjobs.kubeflow.org"], "team-a"), "no");
            assert_eq!(
                can(&["update", "leases.coordination.k8s.io"], namespace),
                "yes"
            );
            assert_eq!(
                can(&["update", "leases.coordination.k8s.io"], "team-a"),
                "no"
            );
            assert_eq!(can(&["get", "secrets"], "team-a"), "no");
            assert_eq!(can(&["patch", "nodes"], "default"), "no");
            run_ok(&mut helm_cmd(&[
                "uninstall",
                "tfjob-chart",
                "-n",
                namespace,
                "--wait",
            ]));
            let left = run_ok(&mut kubectl(&[
                "get",
                "clusterrole",
                "--ignore-not-found",
                "tfjob-chart-operator",
            ]));
            assert!(left.trim().is_empty(), "{left}");
            let _ = kubectl(&["delete", "namespace", namespace, "--wait=false"]).output();
        }
    }
}

/// The ClusterRoleBinding whose fixed name makes one Mokka control plane per
/// cluster (deploy/mokka and the chart both create it).
const MOKKA_SINGLETON_BINDING: &str = "mokka-control-plane.mokka.nvidia.com";

/// The example SGPURack without its finalizer and owner reference (its
/// inventory does not exist here), for server-side dry-run creates.
fn mokka_example_rack() -> String {
    mokka::fixtures::EXAMPLE_RACK_YAML
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            !line.starts_with("finalizers:") && !line.starts_with("ownerReferences:")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A server-side dry-run create of the example rack (as `impersonate`, or
/// cluster-admin): it passes through admission and stores nothing.
fn dry_run_create_rack(tools: &RealLaneTools, impersonate: Option<&str>) -> std::process::Output {
    let mut args = vec!["create", "--dry-run=server", "-f", "-"];
    if let Some(user) = impersonate {
        args.extend_from_slice(&["--as", user]);
    }
    let mut child = tools
        .kubectl(&args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(mokka_example_rack().as_bytes()).unwrap();
    }
    child.wait_with_output().unwrap()
}

/// Polls until cluster-admin's rack create is allowed (or denied): an
/// admission policy takes effect, and stops acting once deleted, when the
/// API server's informer has seen it. Returns the last stderr.
fn admin_rack_create_until(tools: &RealLaneTools, allowed: bool) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let out = dry_run_create_rack(tools, None);
        if out.status.success() == allowed {
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "cluster-admin's SGPURack create never became allowed={allowed}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// Lifts deploy/mokka's copy of the singleton binding out of the real lane's
/// cluster for one test and puts it back when dropped (also on a failed
/// assertion), together with the chart releases the test installed: the
/// Mokka tests that run after this one use deploy/mokka's ServiceAccount.
struct SingletonBindingLifted<'a> {
    tools: &'a RealLaneTools,
    saved: serde_json::Value,
    releases: Vec<(&'static str, &'static str)>,
}

impl<'a> SingletonBindingLifted<'a> {
    fn lift(tools: &'a RealLaneTools, releases: Vec<(&'static str, &'static str)>) -> Self {
        let json = run_ok(&mut tools.kubectl(&[
            "get",
            "clusterrolebinding",
            MOKKA_SINGLETON_BINDING,
            "-o",
            "json",
        ]));
        let mut saved: serde_json::Value = serde_json::from_str(&json).unwrap();
        let metadata = saved["metadata"].as_object_mut().unwrap();
        for server_field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
        ] {
            metadata.remove(server_field);
        }
        run_ok(&mut tools.kubectl(&["delete", "clusterrolebinding", MOKKA_SINGLETON_BINDING]));
        SingletonBindingLifted {
            tools,
            saved,
            releases,
        }
    }
}

impl Drop for SingletonBindingLifted<'_> {
    fn drop(&mut self) {
        for (release, namespace) in &self.releases {
            let _ = self
                .tools
                .helm(&["uninstall", release, "-n", namespace, "--wait"])
                .output();
        }
        let _ = self
            .tools
            .kubectl(&[
                "delete",
                "clusterrolebinding",
                MOKKA_SINGLETON_BINDING,
                "--ignore-not-found",
            ])
            .output();
        let mut restore = self.tools.kubectl(&["create", "-f", "-"]);
        restore
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null());
        if let Ok(mut child) = restore.spawn() {
            if let Some(mut stdin) = child.stdin.take() {
                use std::io::Write;
                let _ = stdin.write_all(self.saved.to_string().as_bytes());
            }
            let _ = child.wait();
        }
    }
}

#[test]
fn the_mokka_chart_installs_once_per_cluster_and_only_its_controller_writes_racks() {
    let helm = helm_path();
    match Lane::from_env().unwrap() {
        Lane::Sim => {
            let sim = SimServer::start();
            sim.kubectl_ok(&["create", "namespace", "mokka-system"]);
            let rendered = run_ok(Command::new(&helm).args([
                "template",
                "mokka",
                &chart("mokka"),
                "--namespace",
                "mokka-system",
                "--set",
                "workers=4",
            ]));
            let file = sim.dir.path().join("mokka-chart.yaml");
            std::fs::write(&file, rendered).unwrap();
            let applied =
                sim.kubectl_ok(&["apply", "--validate=strict", "-f", &file.to_string_lossy()]);
            for created in [
                "serviceaccount/mokka-control-plane",
                "clusterrole.rbac.authorization.k8s.io/mokka-control-plane",
                "clusterrolebinding.rbac.authorization.k8s.io/mokka-control-plane.mokka.nvidia.com",
                "deployment.apps/mokka-control-plane",
                "poddisruptionbudget.policy/mokka-control-plane",
                "validatingadmissionpolicy.admissionregistration.k8s.io/mokka-sgpurack-writes.mokka.nvidia.com",
                "validatingadmissionpolicybinding.admissionregistration.k8s.io/mokka-sgpurack-writes.mokka.nvidia.com",
            ] {
                assert!(
                    applied.contains(&format!("{created} created")),
                    "{created} missing from:\n{applied}"
                );
            }
            let args = sim.kubectl_ok(&[
                "get",
                "deployment",
                "mokka-control-plane",
                "-n",
                "mokka-system",
                "-o",
                "jsonpath={.spec.template.spec.serviceAccountName} {.spec.template.spec.containers[0].args}",
            ]);
            assert!(
                args.starts_with("mokka-control-plane ") && args.contains("--workers=4"),
                "{args}"
            );
            let rule = sim.kubectl_ok(&[
                "get",
                "validatingadmissionpolicy",
                "mokka-sgpurack-writes.mokka.nvidia.com",
                "-o",
                "jsonpath={.spec.validations[0].expression}",
            ]);
            assert_eq!(
                rule,
                "request.userInfo.username == 'system:serviceaccount:mokka-system:mokka-control-plane'"
            );
        }
        Lane::Real(cluster) => {
            let tools = RealLaneTools::new(helm, &cluster.admin_kubeconfig);
            let (release, namespace) = ("mokka-chart", "mokka-chart");
            let (second_release, second_namespace) = ("mokka-chart-2", "mokka-chart-2");
            let install = |release: &str, namespace: &str| {
                tools
                    .helm(&[
                        "install",
                        release,
                        &chart("mokka"),
                        "--namespace",
                        namespace,
                        "--create-namespace",
                    ])
                    .output()
                    .expect("helm runs")
            };

            // real-cluster.sh applied deploy/mokka: the chart refuses to
            // install beside it.
            let beside_plain_install = install(release, namespace);
            assert!(!beside_plain_install.status.success());
            let refusal = String::from_utf8_lossy(&beside_plain_install.stderr);
            assert!(
                refusal.contains(
                    "Mokka control plane is already installed: ClusterRoleBinding mokka-control-plane.mokka.nvidia.com exists without Helm ownership"
                ),
                "{refusal}"
            );

            let _lifted = SingletonBindingLifted::lift(
                &tools,
                vec![(release, namespace), (second_release, second_namespace)],
            );
            let installed = install(release, namespace);
            assert!(
                installed.status.success(),
                "{}",
                String::from_utf8_lossy(&installed.stderr)
            );

            // A second release is refused, naming the first.
            let second = install(second_release, second_namespace);
            assert!(!second.status.success());
            let refusal = String::from_utf8_lossy(&second.stderr);
            assert!(
                refusal.contains(
                    "Mokka control plane is already installed by Helm release mokka-chart/mokka-chart"
                ),
                "{refusal}"
            );

            // Least privilege, as the API server's authorizer sees it.
            let subject = format!("system:serviceaccount:{namespace}:{release}-control-plane");
            let can = |verb_resource: &[&str], ns: &str| tools.can_i(&subject, verb_resource, ns);
            assert_eq!(can(&["patch", "nodes"], "default"), "yes");
            assert_eq!(can(&["delete", "nodes"], "default"), "no");
            assert_eq!(
                can(&["create", "sgpuracks.mokka.nvidia.com"], "default"),
                "yes"
            );
            assert_eq!(
                can(
                    &[
                        "update",
                        "sgpuinventories.mokka.nvidia.com",
                        "--subresource=status"
                    ],
                    "default"
                ),
                "yes"
            );
            assert_eq!(
                can(&["create", "sgpuinventories.mokka.nvidia.com"], "default"),
                "no"
            );
            assert_eq!(
                can(&["update", "leases.coordination.k8s.io"], namespace),
                "yes"
            );
            assert_eq!(
                can(&["update", "leases.coordination.k8s.io"], "default"),
                "no"
            );
            assert_eq!(can(&["get", "secrets"], namespace), "no");

            // The admission policy: even cluster-admin cannot write a rack;
            // the release's ServiceAccount can. Server-side dry runs pass
            // through admission and store nothing. A policy takes effect
            // (and stops, once deleted) when the API server's informer has
            // seen it, so the checks poll.
            let denial = admin_rack_create_until(&tools, false);
            assert!(
                denial.contains("SGPURack writes are restricted to the Mokka controller"),
                "{denial}"
            );
            let by_controller = dry_run_create_rack(&tools, Some(&subject));
            assert!(
                by_controller.status.success(),
                "{}",
                String::from_utf8_lossy(&by_controller.stderr)
            );

            run_ok(&mut tools.helm(&["uninstall", release, "-n", namespace, "--wait"]));
            let left = run_ok(&mut tools.kubectl(&[
                "get",
                &format!("clusterrolebinding/{MOKKA_SINGLETON_BINDING}"),
                "validatingadmissionpolicy/mokka-chart-sgpurack-writes.mokka.nvidia.com",
                "--ignore-not-found",
            ]));
            assert!(left.trim().is_empty(), "{left}");
            // The Mokka tests after this one write racks as deploy/mokka's
            // ServiceAccount: the deleted policy must have stopped acting.
            admin_rack_create_until(&tools, true);
            let _ = tools
                .kubectl(&["delete", "namespace", namespace, "--wait=false"])
                .output();
        }
    }
}

/// The umbrella chart: the CRDs and the three controllers in one release,
/// each under its own name prefix; `<name>.enabled=false` leaves one out.
#[test]
fn the_gpufleet_umbrella_chart_installs_the_crds_and_any_of_the_three_controllers() {
    let helm = helm_path();
    let deployments = [
        "gpufleet-mokka-control-plane",
        "gpufleet-gpuid",
        "gpufleet-tfjob",
    ];
    match Lane::from_env().unwrap() {
        Lane::Sim => {
            let sim = SimServer::start();
            sim.kubectl_ok(&["create", "namespace", "gpu-operator"]);
            sim.kubectl_ok(&["create", "namespace", "gpufleet"]);
            let rendered = run_ok(Command::new(&helm).args([
                "template",
                "gpufleet",
                &chart("gpufleet"),
                "--namespace",
                "gpufleet",
                "--include-crds",
                "--set",
                "gpuid.clusterName=sandbox-east",
            ]));
            let file = sim.dir.path().join("gpufleet-chart.yaml");
            std::fs::write(&file, rendered).unwrap();
            let applied =
                sim.kubectl_ok(&["apply", "--validate=strict", "-f", &file.to_string_lossy()]);
            for created in [
                "customresourcedefinition.apiextensions.k8s.io/sgpuracks.mokka.nvidia.com created",
                "customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org created",
                "deployment.apps/gpufleet-mokka-control-plane created",
                "deployment.apps/gpufleet-gpuid created",
                "deployment.apps/gpufleet-tfjob created",
                "poddisruptionbudget.policy/gpufleet-mokka-control-plane created",
                "validatingadmissionpolicy.admissionregistration.k8s.io/gpufleet-mokka-sgpurack-writes.mokka.nvidia.com created",
            ] {
                assert!(
                    applied.contains(created),
                    "{created} missing from:\n{applied}"
                );
            }
            let cluster = sim.kubectl_ok(&[
                "get",
                "deployment",
                "gpufleet-gpuid",
                "-n",
                "gpufleet",
                "-o",
                "jsonpath={.spec.template.spec.serviceAccountName} {.spec.template.spec.containers[0].env[?(@.name==\"CLUSTER_NAME\")].value}",
            ]);
            assert_eq!(cluster, "gpufleet-gpuid sandbox-east");
            let without_tfjob = run_ok(Command::new(&helm).args([
                "template",
                "gpufleet",
                &chart("gpufleet"),
                "--namespace",
                "gpufleet",
                "--set",
                "tfjob.enabled=false",
            ]));
            assert!(without_tfjob.contains("name: gpufleet-mokka-control-plane"));
            assert!(
                !without_tfjob.contains("name: gpufleet-tfjob"),
                "{without_tfjob}"
            );
        }
        Lane::Real(cluster) => {
            let tools = RealLaneTools::new(helm, &cluster.admin_kubeconfig);
            let namespace = "gpufleet-chart";
            let helm_cmd = |args: &[&str]| tools.helm(args);
            let kubectl = |args: &[&str]| tools.kubectl(args);
            // Left over from an interrupted run.
            let _ = helm_cmd(&["uninstall", "gpufleet-chart", "-n", namespace]).output();
            // The lane runs deploy/mokka for the Mokka tests, so Mokka's
            // singleton guard refuses a second control plane from the
            // umbrella too; with deploy/mokka's binding lifted for this test
            // the whole release goes in.
            let refused = helm_cmd(&[
                "install",
                "gpufleet-chart",
                &chart("gpufleet"),
                "--namespace",
                namespace,
                "--create-namespace",
                "--dry-run=server",
            ])
            .output()
            .expect("helm runs");
            let refusal = String::from_utf8_lossy(&refused.stderr);
            assert!(
                !refused.status.success()
                    && refusal.contains("Mokka control plane is already installed"),
                "the umbrella must refuse a second Mokka: {refusal}"
            );
            let _lifted = SingletonBindingLifted::lift(&tools, vec![("gpufleet-chart", namespace)]);
            let installed = run_ok(&mut helm_cmd(&[
                "install",
                "gpufleet-chart",
                &chart("gpufleet"),
                "--namespace",
                namespace,
                "--create-namespace",
                "--set",
                "gpuid.replicas=1",
            ]));
            assert!(installed.contains("STATUS: deployed"), "{installed}");
            let names = run_ok(&mut kubectl(&[
                "get",
                "deployments",
                "-n",
                namespace,
                "-o",
                "jsonpath={.items[*].metadata.name}",
            ]));
            for deployment in &deployments {
                assert!(names.contains(deployment), "{deployment} not in {names}");
            }
            // Mokka's admission policy came with it.
            let denial = admin_rack_create_until(&tools, false);
            assert!(
                denial.contains("SGPURack writes are restricted to the Mokka controller"),
                "{denial}"
            );
            let crds = run_ok(&mut kubectl(&[
                "get",
                "crd",
                "sgpuracks.mokka.nvidia.com",
                "tfjobs.kubeflow.org",
                "-o",
                "name",
            ]));
            assert_eq!(crds.lines().count(), 2, "{crds}");
            run_ok(&mut helm_cmd(&[
                "uninstall",
                "gpufleet-chart",
                "-n",
                namespace,
                "--wait",
            ]));
            admin_rack_create_until(&tools, true);
            let _ = kubectl(&["delete", "namespace", namespace, "--wait=false"]).output();
        }
    }
}
