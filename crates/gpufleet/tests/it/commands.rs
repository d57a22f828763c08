//! One-shot commands: `gpufleet crds` and `gpufleet gpuid parse`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn gpufleet(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .output()
        .expect("gpufleet runs")
}

fn workspace() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn crds_mokka_prints_the_checked_in_crds() {
    let out = gpufleet(&["crds", "mokka"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let checked_in =
        std::fs::read_to_string(workspace().join("deploy/crds/mokka.nvidia.com.yaml")).unwrap();
    assert_eq!(
        printed, checked_in,
        "regenerate with: gpufleet crds mokka > deploy/crds/mokka.nvidia.com.yaml"
    );
    for kind in [
        "SGPURackProfile",
        "SGPUInventory",
        "SGPURack",
        "SGPURuntimePolicy",
    ] {
        assert!(printed.contains(&format!("kind: {kind}")), "{kind} missing");
    }
}

#[test]
fn crds_tfjob_prints_the_checked_in_crd() {
    let out = gpufleet(&["crds", "tfjob"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let checked_in =
        std::fs::read_to_string(workspace().join("deploy/crds/kubeflow.org.yaml")).unwrap();
    assert_eq!(
        printed, checked_in,
        "regenerate with: gpufleet crds tfjob > deploy/crds/kubeflow.org.yaml"
    );
    assert!(printed.contains("name: tfjobs.kubeflow.org"));
}

#[test]
fn crds_all_prints_the_mokka_and_the_tfjob_crds() {
    let out = gpufleet(&["crds", "all"]);
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    assert!(printed.contains("kind: SGPURack\n"));
    assert!(printed.contains("name: tfjobs.kubeflow.org"));
}

#[test]
fn gpuid_parse_prints_one_record_per_gpu() {
    let capture = workspace().join("crates/gpuid/tests/fixtures/hardware/b200.xml");
    let out = gpufleet(&["gpuid", "parse", capture.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let records: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 8);
    assert!(
        records
            .iter()
            .all(|r| r["uuid"].as_str().is_some_and(|u| u.starts_with("GPU-")))
    );
}

#[test]
fn gpuid_parse_reads_stdin_and_rejects_garbage_with_a_message() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["gpuid", "parse", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"<nvidia_smi_log><gpu")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("parsing nvidia-smi XML from standard input"),
        "{stderr}"
    );
    let missing = gpufleet(&["gpuid", "parse", "/nonexistent/capture.xml"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("opening /nonexistent/capture.xml"));
}

#[test]
fn tfjob_convert_turns_a_v1alpha1_manifest_from_stdin_into_v1_and_names_the_field_it_cannot_convert()
 {
    let convert = |input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["tfjob", "convert", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let v1alpha1 = "apiVersion: kubeflow.org/v1alpha1\nkind: TFJob\nmetadata: {name: m}\nspec:\n  replicaSpecs:\n  - {tfReplicaType: MASTER, template: {spec: {containers: [{name: tensorflow, image: i}]}}}\n";
    let out = convert(v1alpha1);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v1: serde_json::Value =
        serde_saphyr::from_str(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(v1["apiVersion"], "kubeflow.org/v1");
    assert_eq!(v1["spec"]["tfReplicaSpecs"]["Master"]["replicas"], 1);

    let out = convert(&v1alpha1.replace("spec:\n", "spec:\n  tfImage: tf:1.3\n"));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("spec.tfImage"), "{stderr}");
}
