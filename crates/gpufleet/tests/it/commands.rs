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
    assert!(stderr.contains("standard input: "), "{stderr}");
    let missing = gpufleet(&["gpuid", "parse", "/nonexistent/capture.xml"]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot open /nonexistent/capture.xml")
    );
}

/// `gpufleet gpuid parse -` with `input` on stdin.
fn parse_stdin(args: &[&str], input: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["gpuid", "parse"])
        .args(args)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// The H100 capture with its first `<module_id>` made unreadable and one
/// `<gpu>` element cut out, so the parser has two warnings.
fn h100_with_two_warnings() -> Vec<u8> {
    let xml =
        std::fs::read_to_string(workspace().join("crates/gpuid/tests/fixtures/hardware/h100.xml"))
            .unwrap();
    let module = xml.find("<module_id>").expect("a module_id");
    let end = module + xml[module..].find("</module_id>").unwrap();
    let xml = format!("{}<module_id>seven{}", &xml[..module], &xml[end..]);
    let last_gpu = xml.rfind("<gpu id=").unwrap();
    let after = last_gpu + xml[last_gpu..].find("</gpu>").unwrap() + "</gpu>".len();
    format!("{}{}", &xml[..last_gpu], &xml[after..]).into_bytes()
}

#[test]
fn gpuid_parse_prints_the_parsers_warnings_on_stderr_and_fails_with_strict() {
    let input = h100_with_two_warnings();
    let lenient = parse_stdin(&[], &input);
    assert!(
        lenient.status.success(),
        "{}",
        String::from_utf8_lossy(&lenient.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&lenient.stdout).lines().count(), 7);
    let stderr = String::from_utf8_lossy(&lenient.stderr).into_owned();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("warning:"))
        .collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("<module_id> in GPU #0 is \"seven\"")),
        "{stderr}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("<attached_gpus>") && w.contains("7 <gpu> elements")),
        "{stderr}"
    );

    let strict = parse_stdin(&["--strict"], &input);
    assert_eq!(
        strict.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&strict.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&strict.stdout).lines().count(), 7);
    let clean =
        std::fs::read(workspace().join("crates/gpuid/tests/fixtures/hardware/h100.xml")).unwrap();
    let strict_clean = parse_stdin(&["--strict"], &clean);
    assert!(strict_clean.status.success());
    assert!(
        strict_clean.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&strict_clean.stderr)
    );
}

#[test]
fn gpuid_parse_prints_an_error_once_and_quotes_nvidia_smis_failure_text() {
    let out = parse_stdin(
        &[],
        b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.trim_end(),
        "gpufleet gpuid parse: standard input: nvidia-smi reported: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
        "exactly one line"
    );
}

#[test]
fn gpuid_parse_rejects_a_nul_byte_or_invalid_utf8_anywhere() {
    let clean =
        std::fs::read(workspace().join("crates/gpuid/tests/fixtures/hardware/h100.xml")).unwrap();
    // Inside telemetry the parser skips, far from any field it keeps.
    let skipped = clean
        .windows(b"<fan_speed>".len())
        .position(|w| w == b"<fan_speed>")
        .expect("fan_speed")
        + b"<fan_speed>".len();
    for (byte, wanted) in [
        (0u8, "control character (byte 0x00)"),
        (0xff, "not valid UTF-8"),
    ] {
        let mut input = clean.clone();
        input[skipped] = byte;
        let out = parse_stdin(&[], &input);
        assert_eq!(out.status.code(), Some(1), "byte {byte:#x}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(wanted), "{stderr}");
        assert!(stderr.contains(&format!("at byte {skipped}")), "{stderr}");
    }
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
