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

/// `program ARGS --kubeconfig KUBECONFIG`.
fn on_cluster(program: &Path, args: &[&str], kubeconfig: &str) -> Command {
    let mut command = Command::new(program);
    command.args(args).args(["--kubeconfig", kubeconfig]);
    command
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
            let kubeconfig = cluster.admin_kubeconfig.to_string_lossy().into_owned();
            let namespace = "gpuid-chart";
            let helm_cmd = |args: &[&str]| on_cluster(&helm, args, &kubeconfig);
            let kubectl = |args: &[&str]| on_cluster(&kubectl_path(), args, &kubeconfig);
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
            let can = |verb_resource: &[&str], ns: &str| {
                let mut args = vec!["auth", "can-i"];
                args.extend_from_slice(verb_resource);
                args.extend_from_slice(&["-n", ns, "--as", &subject]);
                String::from_utf8_lossy(&kubectl(&args).output().unwrap().stdout)
                    .trim()
                    .to_owned()
            };
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
            let kubeconfig = cluster.admin_kubeconfig.to_string_lossy().into_owned();
            let namespace = "tfjob-chart";
            let helm_cmd = |args: &[&str]| on_cluster(&helm, args, &kubeconfig);
            let kubectl = |args: &[&str]| on_cluster(&kubectl_path(), args, &kubeconfig);
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
            let can = |verb_resource: &[&str], ns: &str| {
                let mut args = vec!["auth", "can-i"];
                args.extend_from_slice(verb_resource);
                args.extend_from_slice(&["-n", ns, "--as", &subject]);
                String::from_utf8_lossy(&kubectl(&args).output().unwrap().stdout)
                    .trim()
                    .to_owned()
            };
            assert_eq!(can(&["create", "pods"], "team-a"), "yes");
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
            // kube-sim serves neither policy/v1 nor admissionregistration.k8s.io/v1,
            // so Mokka's PodDisruptionBudget and SGPURack admission policy are
            // left out here; the real lane below installs them.
            let not_on_kube_sim = [
                "kind: PodDisruptionBudget",
                "kind: ValidatingAdmissionPolicy",
                "kind: ValidatingAdmissionPolicyBinding",
            ];
            let (kept, left_out): (Vec<&str>, Vec<&str>) =
                rendered.split("\n---").partition(|doc| {
                    !not_on_kube_sim
                        .iter()
                        .any(|kind| doc.lines().any(|l| l == *kind))
                });
            assert_eq!(
                left_out.len(),
                3,
                "only Mokka's PDB and admission policy are left out"
            );
            let file = sim.dir.path().join("gpufleet-chart.yaml");
            std::fs::write(&file, kept.join("\n---")).unwrap();
            let applied =
                sim.kubectl_ok(&["apply", "--validate=strict", "-f", &file.to_string_lossy()]);
            for created in [
                "customresourcedefinition.apiextensions.k8s.io/sgpuracks.mokka.nvidia.com created",
                "customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org created",
                "deployment.apps/gpufleet-mokka-control-plane created",
                "deployment.apps/gpufleet-gpuid created",
                "deployment.apps/gpufleet-tfjob created",
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
            let kubeconfig = cluster.admin_kubeconfig.to_string_lossy().into_owned();
            let namespace = "gpufleet-chart";
            let helm_cmd = |args: &[&str]| on_cluster(&helm, args, &kubeconfig);
            let kubectl = |args: &[&str]| on_cluster(&kubectl_path(), args, &kubeconfig);
            // Left over from an interrupted run.
            let _ = helm_cmd(&["uninstall", "gpufleet-chart", "-n", namespace]).output();
            // The lane runs deploy/mokka for the Mokka tests, so Mokka's
            // singleton guard refuses a second control plane from the
            // umbrella too; the release goes in with the other two.
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
            let installed = run_ok(&mut helm_cmd(&[
                "install",
                "gpufleet-chart",
                &chart("gpufleet"),
                "--namespace",
                namespace,
                "--create-namespace",
                "--set",
                "mokka.enabled=false",
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
            for deployment in &deployments[1..] {
                assert!(names.contains(deployment), "{deployment} not in {names}");
            }
            assert!(!names.contains(deployments[0]), "{names}");
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
            let _ = kubectl(&["delete", "namespace", namespace, "--wait=false"]).output();
        }
    }
}
