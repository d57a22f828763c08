//! `gpufleet-gpuid`, `gpufleet-mokka` and `gpufleet-tfjob`: each controller
//! as a binary of its own, whose command line is that of `gpufleet
//! <controller>` and which links nothing else.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use mokka::fixtures::EXAMPLE_PROFILE_YAML;

const FULL: &str = env!("CARGO_BIN_EXE_gpufleet");
const GPUID: &str = env!("CARGO_BIN_EXE_gpufleet-gpuid");
const MOKKA: &str = env!("CARGO_BIN_EXE_gpufleet-mokka");
const TFJOB: &str = env!("CARGO_BIN_EXE_gpufleet-tfjob");

fn run(binary: &str, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(binary)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut input = child.stdin.take().expect("piped stdin");
    input.write_all(stdin.as_bytes()).expect("writing stdin");
    drop(input);
    child.wait_with_output().expect("the binary exits")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The same output, stderr and exit code from the controller's binary as
/// from `gpufleet <subcommand>`.
fn assert_same(binary: &str, subcommand: &str, args: &[&str], stdin: &str) -> Output {
    let own = run(binary, args, stdin);
    let full_args: Vec<&str> = std::iter::once(subcommand)
        .chain(args.iter().copied())
        .collect();
    let full = run(FULL, &full_args, stdin);
    assert_eq!(own.status.code(), full.status.code(), "{binary} {args:?}");
    assert_eq!(text(&own.stdout), text(&full.stdout), "{binary} {args:?}");
    // Messages name the binary that printed them: `gpufleet-gpuid: …` and
    // `Usage: gpufleet-gpuid run` for `gpufleet: …` and `gpufleet gpuid run`.
    let name = format!("gpufleet-{subcommand}");
    let own_stderr = text(&own.stderr)
        .replace(&format!("{name}: "), "gpufleet: ")
        .replace(&name, &format!("gpufleet {subcommand}"));
    assert_eq!(own_stderr, text(&full.stderr), "{binary} {args:?}");
    own
}

#[test]
fn each_controller_binary_runs_its_subcommand_as_gpufleet_does() {
    let capture = Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../gpuid/tests/fixtures/hardware/b200.xml"
    ));
    let capture = capture.to_str().expect("a UTF-8 path");
    let parsed = assert_same(GPUID, "gpuid", &["parse", capture], "");
    assert!(parsed.status.success(), "{}", text(&parsed.stderr));
    assert_eq!(
        text(&parsed.stdout).lines().count(),
        8,
        "one record per GPU"
    );

    let inventory = "---\napiVersion: mokka.nvidia.com/v1alpha1\nkind: SGPUInventory\nmetadata: {name: inv, uid: inv-uid}\nspec:\n  rackGroups:\n    - {id: compute, count: 2, profileRef: {name: example-a100}}\n";
    let manifests = format!("{EXAMPLE_PROFILE_YAML}{inventory}");
    let rendered = assert_same(MOKKA, "mokka", &["render", "-f", "-"], &manifests);
    assert!(rendered.status.success(), "{}", text(&rendered.stderr));
    assert!(text(&rendered.stdout).contains("kind: SGPURack"));

    let v1alpha1 = "apiVersion: kubeflow.org/v1alpha1\nkind: TFJob\nmetadata: {name: m}\nspec:\n  replicaSpecs:\n  - {tfReplicaType: MASTER, template: {spec: {containers: [{name: tensorflow, image: i}]}}}\n";
    let converted = assert_same(TFJOB, "tfjob", &["convert", "-"], v1alpha1);
    assert!(converted.status.success(), "{}", text(&converted.stderr));
    assert!(text(&converted.stdout).contains("apiVersion: kubeflow.org/v1"));

    // Bad input fails the same way, with the same message.
    let missing = assert_same(GPUID, "gpuid", &["parse", "/nonexistent/capture.xml"], "");
    assert!(!missing.status.success());
    // tf-operator's single-dash flags, and a value its rule refuses.
    let refused = assert_same(TFJOB, "tfjob", &["-qps", "not-a-number"], "");
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused.stderr));
}

#[test]
fn a_controller_binary_names_itself_in_usage_and_runs_no_other_command() {
    for (binary, name, sub) in [
        (GPUID, "gpufleet-gpuid", "run"),
        (MOKKA, "gpufleet-mokka", "render"),
        (TFJOB, "gpufleet-tfjob", "convert"),
    ] {
        let help = run(binary, &[sub, "--help"], "");
        assert!(help.status.success(), "{}", text(&help.stderr));
        let help = text(&help.stdout);
        assert!(
            help.contains(&format!("Usage: {name} {sub}")),
            "{name}: {help}"
        );
        // kube-sim is not a command of this binary.
        let refused = run(binary, &["sim", "serve"], "");
        assert_eq!(refused.status.code(), Some(2), "{name}");
        let stderr = text(&refused.stderr);
        assert!(
            stderr.contains("sim") && stderr.contains(&format!("Usage: {name}")),
            "{name}: {stderr}"
        );
    }
}

#[test]
fn each_controller_binary_leaves_the_other_commands_out() {
    // What the split is for: the code a controller maps is its own. The
    // full binary carries kube-sim, the sandbox and all three controllers.
    let size = |path: &str| std::fs::metadata(path).expect("the binary exists").len();
    for binary in [GPUID, MOKKA, TFJOB] {
        assert!(
            size(binary) * 10 < size(FULL) * 8,
            "{binary} is {} bytes, gpufleet {}",
            size(binary),
            size(FULL)
        );
    }
}
