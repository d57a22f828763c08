//! The quick start in crates/gpuid/README.md, run as written: every
//! `<!-- quickstart: NAME -->` block is taken from the README and run with
//! bash in a scratch directory that looks like the repository root, with
//! the built `gpufleet` and the venv's `kubectl` on the PATH. The
//! long-running blocks (kube-sim, the two gpuid runs) are started in their
//! own process groups and stopped with SIGTERM, as Ctrl-C would. Then the
//! test checks stdout, the PostgreSQL rows and the Node labels itself.
//!
//! Needs PostgreSQL at postgres://postgres@127.0.0.1:5432/test (the README
//! names that server; scripts/test.sh starts it) and psql.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::kubectl_path;

const WAIT: Duration = Duration::from_secs(60);
const README_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shell block after `<!-- quickstart: NAME -->`.
fn block(readme: &str, name: &str) -> String {
    let marker = format!("<!-- quickstart: {name} -->");
    let after = readme
        .split_once(&marker)
        .unwrap_or_else(|| panic!("the README has no {marker}"))
        .1;
    let start = after
        .find("```sh\n")
        .expect("a ```sh block after the marker")
        + 6;
    let body = &after[start..];
    body[..body.find("\n```").expect("the block's end")].to_owned()
}

/// The scratch "repository root": `crates` points at the real one.
struct Scratch {
    dir: tempfile::TempDir,
    path: String,
}

impl Scratch {
    fn new() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(repository().join("crates"), dir.path().join("crates")).unwrap();
        let gpufleet = Path::new(env!("CARGO_BIN_EXE_gpufleet"));
        let kubectl = kubectl_path();
        let path = std::env::join_paths(
            [
                gpufleet.parent().unwrap().to_path_buf(),
                kubectl.parent().unwrap().to_path_buf(),
            ]
            .into_iter()
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
        )
        .unwrap()
        .into_string()
        .unwrap();
        Scratch { dir, path }
    }

    fn bash(&self, script: &str) -> Command {
        let mut command = Command::new("bash");
        command
            .args(["-euo", "pipefail", "-c", script])
            .current_dir(self.dir.path())
            .env("PATH", &self.path)
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG")
            .env_remove("LOG_LEVEL");
        command
    }

    /// Runs a block to its end; fails the test with its output otherwise.
    fn run(&self, name: &str, script: &str) -> Output {
        let out = self.bash(script).output().expect("bash runs");
        assert!(
            out.status.success(),
            "quick start step {name} failed ({}):\n{script}\nstdout:\n{}\nstderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Starts a long-running block in its own process group.
    fn spawn(&self, script: &str) -> Group {
        let child = self
            .bash(script)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("bash starts");
        Group(child)
    }
}

/// A process group stopped with SIGTERM (Ctrl-C's job) when dropped.
struct Group(Child);

impl Group {
    fn lines(&mut self) -> mpsc::Receiver<String> {
        let (tx, rx) = mpsc::channel();
        let stdout = self.0.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        rx
    }

    fn stop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn postgres() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(README_URL, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|error| {
            panic!("the quick start uses PostgreSQL at {README_URL} (scripts/test.sh starts it): {error}")
        });
    tokio::spawn(connection);
    client
}

fn h100_uuids() -> Vec<String> {
    let xml =
        std::fs::read_to_string(repository().join("crates/gpuid/tests/fixtures/hardware/h100.xml"))
            .unwrap();
    let mut uuids: Vec<String> = xml
        .split("<uuid>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</uuid>").map(|(uuid, _)| uuid.to_owned()))
        .collect();
    uuids.sort();
    uuids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gpuid_quick_start_in_the_readme_works_as_written() {
    let readme = std::fs::read_to_string(repository().join("crates/gpuid/README.md")).unwrap();
    let want = h100_uuids();
    assert_eq!(want.len(), 8);
    let db = postgres().await;
    // The README's table lives in the schema `quickstart`; start empty.
    db.batch_execute("DROP SCHEMA IF EXISTS quickstart CASCADE")
        .await
        .unwrap();
    let scratch = Scratch::new();

    scratch.run("files", &block(&readme, "files"));
    let mut server = scratch.spawn(&block(&readme, "serve"));
    let kubeconfig = scratch.dir.path().join("gpuid-quickstart/kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !kubeconfig.exists() {
        if let Ok(Some(status)) = server.0.try_wait() {
            panic!("gpufleet sim serve exited: {status}");
        }
        assert!(Instant::now() < deadline, "no kubeconfig within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    scratch.run("cluster", &block(&readme, "cluster"));

    // Stdout: every GPU once as a `gpu` line, then one gpu_added each.
    let mut stdout_run = scratch.spawn(&block(&readme, "run-stdout"));
    let lines = stdout_run.lines();
    let (mut records, mut added) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + WAIT;
    while records.len() < 8 || added.len() < 8 {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(left) else {
            stdout_run.stop();
            let mut stderr = String::new();
            if let Some(mut pipe) = stdout_run.0.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
            }
            panic!(
                "the stdout run printed {} records and {} events within {WAIT:?}; stderr:\n{stderr}",
                records.len(),
                added.len()
            );
        };
        let value: Value = serde_json::from_str(&line)
            .unwrap_or_else(|error| panic!("not an NDJSON line ({error}): {line}"));
        match value["kind"].as_str() {
            Some("gpu") => records.push(value),
            Some("gpu_added") => added.push(value),
            other => panic!("unexpected kind {other:?}: {line}"),
        }
    }
    let mut uuids: Vec<String> = records
        .iter()
        .map(|r| r["uuid"].as_str().unwrap_or_default().to_owned())
        .collect();
    uuids.sort();
    assert_eq!(uuids, want);
    for record in &records {
        assert_eq!(record["cluster"], "quickstart");
        assert_eq!(record["node_name"], "gpu-node-1");
        assert_eq!(record["machine_id"], "i-0123456789abcdef0");
    }

    // The Node's labels, read with the README's command, once the labels
    // (written with the export record) are there.
    let deadline = Instant::now() + WAIT;
    let labels: serde_json::Map<String, Value> = loop {
        let out = scratch.run("labels", &block(&readme, "labels"));
        let labels: serde_json::Map<String, Value> =
            serde_json::from_slice(&out.stdout).unwrap_or_default();
        if labels.contains_key("gpuid.github.com/gpu-7") {
            break labels;
        }
        assert!(
            Instant::now() < deadline,
            "labels after {WAIT:?}: {labels:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    stdout_run.stop();
    assert_eq!(labels["gpuid.gpufleet.dev/gpu-count"], "8");
    let mut serials: Vec<&str> = records
        .iter()
        .filter_map(|r| r["serial"].as_str())
        .collect();
    serials.sort_unstable();
    for (j, serial) in serials.iter().enumerate() {
        assert_eq!(
            labels[&format!("gpuid.github.com/gpu-{j}")],
            *serial,
            "{labels:?}"
        );
    }
    let module_labels = labels
        .keys()
        .filter(|key| key.starts_with("gpuid.gpufleet.dev/module-") && key.ends_with(".serial"))
        .count();
    assert_eq!(module_labels, 8, "{labels:?}");

    // PostgreSQL: the whole inventory, although stdout already had it.
    let mut postgres_run = scratch.spawn(&block(&readme, "run-postgres"));
    let deadline = Instant::now() + WAIT;
    loop {
        let rows = db
            .query(
                "SELECT gpu_uuid FROM quickstart.gpu_inventory WHERE cluster = 'quickstart' ORDER BY gpu_uuid",
                &[],
            )
            .await
            .map(|rows| rows.iter().map(|row| row.get::<_, String>(0)).collect::<Vec<_>>())
            .unwrap_or_default();
        if rows == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "PostgreSQL rows after {WAIT:?}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    postgres_run.stop();
    let query = scratch.run("query", &block(&readme, "query"));
    let printed = String::from_utf8_lossy(&query.stdout);
    assert!(printed.contains("(8 rows)"), "{printed}");
    assert!(printed.contains(&want[0]), "{printed}");

    server.stop();
    db.batch_execute("DROP SCHEMA quickstart CASCADE")
        .await
        .unwrap();
}
