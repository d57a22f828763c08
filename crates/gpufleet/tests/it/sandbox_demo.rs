//! `gpufleet sandbox --exit-after-demo` as CI and a new user run it: the
//! binary starts kube-sim, the fleet and the three controllers, runs the
//! five demo steps and exits 0 only if every check held. The tests read
//! what the demo cannot read back itself: gpuid's NDJSON on stdout, and
//! the rows in PostgreSQL with `--postgres`.

use std::collections::BTreeSet;
use std::process::{Command, Output};

const DEMO_STEPS: [&str; 5] = [
    "demo [1/5] racks render; every Node is bound and projected",
    "demo [2/5] gpuid exports one record per GPU",
    "demo [3/5] a TFJob (chief + 2 PS + 4 workers on nvidia.com/gpu)",
    "demo [4/5] a runtime policy fails one GPU",
    "demo [5/5] a Node is deleted",
];

fn run_demo(extra: &[&str]) -> (Output, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args([
            "sandbox",
            "--exit-after-demo",
            "--ui-port",
            "0",
            "--kubeconfig",
        ])
        .arg(dir.path().join("sandbox.kubeconfig"))
        .args(extra)
        .current_dir(dir.path())
        .output()
        .expect("gpufleet sandbox runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "gpufleet sandbox --exit-after-demo failed ({}):\n{stderr}",
        output.status
    );
    for step in DEMO_STEPS {
        assert!(
            stderr.contains(step),
            "step {step:?} not printed:\n{stderr}"
        );
    }
    assert!(stderr.contains("demo: 5/5 steps passed"), "{stderr}");
    assert!(!stderr.contains("FAILED"), "{stderr}");
    (output, stdout, stderr)
}

fn lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not NDJSON: {line:?}: {e}"))
        })
        .collect()
}

/// The GPU the demo's policy failed, from its printed check.
fn failed_gpu(stderr: &str) -> String {
    let line = stderr
        .lines()
        .find(|line| line.contains("sets deviceState Failed"))
        .unwrap_or_else(|| panic!("no policy line:\n{stderr}"));
    let start = line.find("GPU-").expect("a GPU UUID in the policy line");
    line[start..start + 40].to_string()
}

#[test]
fn the_default_sandbox_demo_passes_and_gpuid_prints_every_gpu_and_the_lost_one() {
    let (_, stdout, stderr) = run_demo(&[]);
    assert!(
        stderr.contains("4 SGPURacks rendered (72 Node slots)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("72 Nodes inventoried by gpuid (288 GPUs)"),
        "{stderr}"
    );
    assert!(stderr.contains("export KUBECONFIG="), "{stderr}");
    let records = lines(&stdout);
    let gpus: BTreeSet<&str> = records
        .iter()
        .filter(|r| r["kind"] == "gpu")
        .filter_map(|r| r["uuid"].as_str())
        .collect();
    assert_eq!(gpus.len(), 288, "one record per rendered GPU");
    let lost = failed_gpu(&stderr);
    let changed = records
        .iter()
        .find(|r| r["kind"] == "gpu_changed" && r["gpu_key"] == lost.as_str())
        .unwrap_or_else(|| panic!("no gpu_changed line for {lost}"));
    assert_eq!(
        changed["changed_fields"],
        serde_json::json!(["fb_memory_total_mib"])
    );
    assert!(changed["after"]["fb_memory_total_mib"].is_null());
    assert!(changed["before"]["fb_memory_total_mib"].is_u64());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_postgres_every_gpu_is_a_row_and_the_lost_gpu_an_event() {
    let url = crate::support::postgres_url();
    let client = crate::support::postgres().await;
    let suffix = std::process::id();
    let table = format!("sandbox_{suffix}");
    let cluster = format!("sandbox-test-{suffix}");
    let args: Vec<String> = [
        "--nodes",
        "18",
        "--postgres",
        &url,
        "--postgres-table",
        &table,
        "--cluster-name",
        &cluster,
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let (stdout, stderr) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_, stdout, stderr) = run_demo(&args);
        (stdout, stderr)
    })
    .await
    .expect("the demo thread");
    assert!(
        stdout.trim().is_empty(),
        "nothing on stdout with --postgres: {stdout}"
    );
    assert!(stderr.contains("PostgreSQL sandbox_"), "{stderr}");
    let inventory = client
        .query(
            &format!(
                "SELECT gpu_uuid, serial, module_id FROM \"{table}_inventory\" WHERE cluster = $1"
            ),
            &[&cluster],
        )
        .await
        .expect("the inventory table exists");
    assert_eq!(inventory.len(), 18 * 4, "one row per GPU of the one rack");
    let modules: BTreeSet<i32> = inventory.iter().map(|row| row.get::<_, i32>(2)).collect();
    assert_eq!(modules, BTreeSet::from([1, 2, 3, 4]));
    let lost = failed_gpu(&stderr);
    let events = client
        .query(
            &format!("SELECT changed_fields FROM \"{table}_events\" WHERE cluster = $1 AND gpu_key = $2 AND kind = 'gpu_changed'"),
            &[&cluster, &lost],
        )
        .await
        .expect("the events table exists");
    assert_eq!(events.len(), 1, "one change event for the lost GPU");
    let fields: Vec<String> = events[0].get(0);
    assert_eq!(fields, vec!["fb_memory_total_mib".to_string()]);
    for suffix in ["", "_inventory", "_events"] {
        let _ = client
            .batch_execute(&format!("DROP VIEW IF EXISTS \"{table}{suffix}\" CASCADE; DROP TABLE IF EXISTS \"{table}{suffix}\" CASCADE"))
            .await;
    }
}
