//! `gpufleet sim serve --exec-rules FILE`, driven with kubectl: answers by
//! rule, the first match in file order, exit 127 for anything else, SIGHUP
//! re-reads the file (a broken file keeps the rules in force), and a
//! broken file at start stops the server with a message naming the rule.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::kubectl_path;

struct Served {
    child: Child,
    kubeconfig: std::path::PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, rules: &Path) -> Served {
    let kubeconfig = dir.join("kubeconfig");
    let child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["sim", "serve", "--port", "0", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--exec-rules")
        .arg(rules)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gpufleet starts");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "no kubeconfig within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    Served { child, kubeconfig }
}

fn kubectl(served: &Served, args: &[&str]) -> Output {
    Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&served.kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .output()
        .expect("kubectl runs")
}

fn exec(served: &Served, pod: &str, container: &str, command: &[&str]) -> Output {
    let mut args = vec!["exec", pod, "-c", container, "--"];
    args.extend_from_slice(command);
    kubectl(served, &args)
}

fn apply_pods(served: &Served) {
    let manifest = r#"
apiVersion: v1
kind: Node
metadata: {name: gpu-node-1}
---
apiVersion: v1
kind: Pod
metadata:
  name: plugin
  labels: {app: nvidia-device-plugin-daemonset}
spec:
  nodeName: gpu-node-1
  containers:
  - {name: nvidia-device-plugin, image: x}
  - {name: toolkit, image: x}
---
apiVersion: v1
kind: Pod
metadata:
  name: broken
  labels: {app: nvidia-device-plugin-daemonset, health: broken}
spec:
  nodeName: gpu-node-1
  containers:
  - {name: nvidia-device-plugin, image: x}
"#;
    let mut child = Command::new(kubectl_path())
        .arg("--kubeconfig")
        .arg(&served.kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), manifest.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ready = kubectl(
        served,
        &[
            "wait",
            "--for=condition=Ready",
            "pod/plugin",
            "pod/broken",
            "--timeout=30s",
        ],
    );
    assert!(
        ready.status.success(),
        "{}",
        String::from_utf8_lossy(&ready.stderr)
    );
}

const SMI: &[&str] = &["nvidia-smi", "-q", "-x"];

#[test]
fn exec_rules_answer_in_file_order_and_are_re_read_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("captures")).unwrap();
    std::fs::write(
        dir.path().join("captures/one.xml"),
        "<nvidia_smi_log>one</nvidia_smi_log>",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("captures/two.xml"),
        "<nvidia_smi_log>two</nvidia_smi_log>",
    )
    .unwrap();
    let rules = dir.path().join("rules.yaml");
    let first = "\
- podSelector: health=broken
  command: [nvidia-smi, -q, -x]
  stderr: 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'
  exitCode: 9
- podSelector: app=nvidia-device-plugin-daemonset
  container: nvidia-device-plugin
  command: [nvidia-smi, -q, -x]
  stdoutFile: captures/one.xml
";
    std::fs::write(&rules, first).unwrap();
    // Started from another directory: stdoutFile is relative to the file.
    let served = serve(dir.path(), &rules);
    apply_pods(&served);

    let answer = exec(&served, "plugin", "nvidia-device-plugin", SMI);
    assert!(
        answer.status.success(),
        "{}",
        String::from_utf8_lossy(&answer.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&answer.stdout),
        "<nvidia_smi_log>one</nvidia_smi_log>"
    );
    let failed = exec(&served, "broken", "nvidia-device-plugin", SMI);
    assert_eq!(failed.status.code(), Some(9));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("NVIDIA-SMI has failed"));
    let other_container = exec(&served, "plugin", "toolkit", SMI);
    assert_eq!(other_container.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&other_container.stderr).contains("nvidia-smi: command not found")
    );
    let other_argv = exec(&served, "plugin", "nvidia-device-plugin", &["nvidia-smi"]);
    assert_eq!(other_argv.status.code(), Some(127));

    // SIGHUP re-reads the rules and the capture they name.
    std::fs::write(
        &rules,
        first.replace("captures/one.xml", "captures/two.xml"),
    )
    .unwrap();
    let hup = |served: &Served| {
        let sent = Command::new("kill")
            .args(["-HUP", &served.child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    };
    hup(&served);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = exec(&served, "plugin", "nvidia-device-plugin", SMI);
        if String::from_utf8_lossy(&answer.stdout) == "<nvidia_smi_log>two</nvidia_smi_log>" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the rules: {answer:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A file that no longer loads keeps the rules in force.
    std::fs::write(&rules, "- podSelector: 'a in ('\n  command: [x]\n").unwrap();
    hup(&served);
    std::thread::sleep(Duration::from_millis(500));
    let kept = exec(&served, "plugin", "nvidia-device-plugin", SMI);
    assert_eq!(
        String::from_utf8_lossy(&kept.stdout),
        "<nvidia_smi_log>two</nvidia_smi_log>"
    );
    assert!(served.child.id() > 0);
}

#[test]
fn a_broken_exec_rules_file_stops_sim_serve_at_start_naming_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(
        &rules,
        "- podSelector: app=x\n  command: [nvidia-smi]\n  stdoutFile: missing.xml\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["sim", "serve", "--port", "0", "--kubeconfig"])
        .arg(dir.path().join("kubeconfig"))
        .arg("--exec-rules")
        .arg(&rules)
        .output()
        .expect("gpufleet runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rule 1: stdoutFile missing.xml"),
        "{stderr}"
    );
    assert!(
        !dir.path().join("kubeconfig").exists(),
        "nothing was served"
    );
}
