//! deploy/kustomize: the base (the CRDs and the three controllers) and its
//! overlays apply with `kubectl apply -k --validate=strict` to kube-sim, and
//! the base's copies of deploy/{crds,mokka,gpuid,tfjob} are the same files.

use std::path::{Path, PathBuf};

use crate::support::SimServer;

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(path)
}

fn arg(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[test]
fn the_kustomize_base_holds_exactly_the_manifests_of_deploy() {
    for component in ["crds", "mokka", "gpuid", "tfjob"] {
        let source = deploy(component);
        let copy = deploy(&format!("kustomize/base/{component}"));
        let mut files: Vec<PathBuf> = std::fs::read_dir(&source)
            .unwrap_or_else(|e| panic!("{}: {e}", source.display()))
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has manifests", source.display());
        let kustomization = std::fs::read_to_string(copy.join("kustomization.yaml"))
            .unwrap_or_else(|e| panic!("{}: {e}", copy.display()));
        for file in files {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let copied = std::fs::read(copy.join(&name))
                .unwrap_or_else(|e| panic!("deploy/kustomize/base/{component}/{name}: {e}"));
            assert!(
                copied == std::fs::read(&file).unwrap(),
                "deploy/kustomize/base/{component}/{name} differs from deploy/{component}/{name}: copy it again"
            );
            assert!(
                kustomization.contains(&format!("- {name}")),
                "deploy/kustomize/base/{component}/kustomization.yaml does not list {name}"
            );
        }
    }
}

#[test]
fn the_base_applies_strictly_and_a_second_apply_changes_nothing() {
    let sim = SimServer::start();
    // The GPU operator owns this namespace in a real cluster.
    sim.kubectl_ok(&["create", "namespace", "gpu-operator"]);
    let base = arg(&deploy("kustomize/base"));
    let applied = sim.kubectl_ok(&["apply", "--validate=strict", "-k", &base]);
    for created in [
        "customresourcedefinition.apiextensions.k8s.io/sgpuinventories.mokka.nvidia.com created",
        "customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org created",
        "deployment.apps/mokka-control-plane created",
        "deployment.apps/gpuid created",
        "deployment.apps/tf-job-operator created",
    ] {
        assert!(
            applied.contains(created),
            "{created} missing from:\n{applied}"
        );
    }
    let again = sim.kubectl_ok(&["apply", "-k", &base]);
    assert!(
        again.lines().all(|line| line.ends_with(" unchanged")),
        "{again}"
    );
}

#[test]
fn the_overlays_apply_strictly_with_their_changes() {
    let sim = SimServer::start();
    sim.kubectl_ok(&["create", "namespace", "gpu-operator"]);
    let production = arg(&deploy("kustomize/overlays/production"));
    sim.kubectl_ok(&["apply", "--validate=strict", "-k", &production]);
    let mokka = sim.kubectl_ok(&[
        "get",
        "deployment",
        "mokka-control-plane",
        "-n",
        "mokka-system",
        "-o",
        "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(mokka, "2 ghcr.io/gpufleet/gpufleet:0.1.0");
    let cluster = sim.kubectl_ok(&[
        "get",
        "deployment",
        "gpuid",
        "-n",
        "gpuid",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].env[?(@.name==\"CLUSTER_NAME\")].value}",
    ]);
    assert_eq!(cluster, "production-east");

    let other = SimServer::start();
    other.kubectl_ok(&["create", "namespace", "gpu-operator"]);
    let without = arg(&deploy("kustomize/overlays/without-tfjob"));
    let applied = other.kubectl_ok(&["apply", "--validate=strict", "-k", &without]);
    assert!(
        applied.contains("deployment.apps/gpuid created"),
        "{applied}"
    );
    assert!(
        applied
            .contains("customresourcedefinition.apiextensions.k8s.io/tfjobs.kubeflow.org created"),
        "{applied}"
    );
    assert!(!applied.contains("tf-job-operator"), "{applied}");
}
