//! The sandbox's `/metrics` aggregates the three controllers, and every
//! metric the Grafana dashboards in deploy/grafana name is one of them:
//! the test runs `gpufleet sandbox`, makes the TFJob counters move (a job
//! that succeeds, one that is restarted, one that fails), scrapes the page
//! and checks each dashboard's every metric name.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tfjob::api::object::TFJobObject;

use crate::support::{RunningSandbox, http_get};

const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    // Aggregation operators: `sum by (x) (…)` has no parenthesis right after the name.
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
];

/// The metric names a PromQL expression reads: identifiers that are not
/// functions, keywords, label names or grouping labels.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut skip_group = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            // Label matchers, ranges and strings hold no metric names.
            '{' | '[' | '"' => {
                let close = match c {
                    '{' => '}',
                    '[' => ']',
                    _ => '"',
                };
                i += 1;
                while i < chars.len() && chars[i] != close {
                    i += 1;
                }
                i += 1;
            }
            '(' if skip_group => {
                while i < chars.len() && chars[i] != ')' {
                    i += 1;
                }
                skip_group = false;
                i += 1;
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next] == ' ' {
                    next += 1;
                }
                let is_function = chars.get(next) == Some(&'(');
                if KEYWORDS.contains(&word.as_str()) {
                    skip_group = matches!(word.as_str(), "by" | "without" | "on" | "ignoring");
                } else if !is_function {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

#[test]
fn promql_names_are_found_without_functions_labels_or_groupings() {
    assert_eq!(
        metric_names(
            "histogram_quantile(0.99, sum by (le, controller) (rate(mokka_reconcile_duration_seconds_bucket{a=\"b\"}[5m])))"
        ),
        BTreeSet::from(["mokka_reconcile_duration_seconds_bucket".to_string()])
    );
    assert_eq!(
        metric_names("time() - max by (exporter) (gpuid_last_successful_export_timestamp_seconds)"),
        BTreeSet::from(["gpuid_last_successful_export_timestamp_seconds".to_string()])
    );
    assert_eq!(
        metric_names("count(gpuid_node_gpus > 0)"),
        BTreeSet::from(["gpuid_node_gpus".to_string()])
    );
}

fn dashboards() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/grafana");
    let mut found: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("dashboard readable");
            let value: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
            (path.display().to_string(), value)
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

/// Every dashboard's expressions, checked for shape on the way.
fn dashboard_metrics() -> BTreeSet<(String, String)> {
    let boards = dashboards();
    assert_eq!(boards.len(), 3, "Mokka, gpuid and TFJob dashboards");
    let mut wanted = BTreeSet::new();
    for (file, board) in &boards {
        assert!(
            board["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{file}: title"
        );
        let panels = board["panels"]
            .as_array()
            .unwrap_or_else(|| panic!("{file}: panels"));
        let mut ids = BTreeSet::new();
        for panel in panels {
            assert!(
                ids.insert(panel["id"].as_i64()),
                "{file}: duplicate panel id"
            );
            assert_eq!(
                panel["datasource"]["uid"], "${datasource}",
                "{file}: {}",
                panel["title"]
            );
            let targets = panel["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("{file}: targets"));
            assert!(
                !targets.is_empty(),
                "{file}: {} has no query",
                panel["title"]
            );
            for target in targets {
                let expr = target["expr"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{file}: expr"));
                let names = metric_names(expr);
                assert!(!names.is_empty(), "{file}: {expr} names no metric");
                for name in names {
                    wanted.insert((file.clone(), name));
                }
            }
        }
    }
    wanted
}

fn job(name: &str, restart_policy: &str, exit_codes: &str) -> TFJobObject {
    serde_json::from_value(json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"tfReplicaSpecs": {"Worker": {
            "replicas": 1,
            "restartPolicy": restart_policy,
            "template": {
                "metadata": {"annotations": {
                    "kube-sim.gpufleet.dev/run-seconds": "1",
                    "kube-sim.gpufleet.dev/exit-code": exit_codes,
                }},
                "spec": {"containers": [{
                    "name": "tensorflow",
                    "image": "tensorflow/tensorflow:2.17.0-gpu",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }]},
            },
        }}},
    }))
    .expect("a TFJob")
}

fn sample_names(page: &str) -> BTreeSet<String> {
    page.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_a_dashboard_names_is_on_the_sandboxs_aggregated_metrics_page() {
    let wanted = dashboard_metrics();
    let port = crate::support::free_port();
    let mut sandbox = RunningSandbox::start(&["--nodes", "18", "--ui-port", &port.to_string()]);
    let client = sandbox.client().await;
    let jobs: Api<TFJobObject> = Api::namespaced(client, "default");
    for job in [
        job("metrics-succeeds", "Never", "0"),
        job("metrics-restarts", "ExitCode", "137"),
        job("metrics-fails", "Never", "1"),
    ] {
        jobs.create(&PostParams::default(), &job)
            .await
            .expect("TFJob created");
    }

    let deadline = Instant::now() + Duration::from_secs(180);
    let missing = loop {
        let page = tokio::task::spawn_blocking(move || http_get(port, "/metrics"))
            .await
            .expect("the scrape task");
        let (status, body) = page.expect("the fleet view answers /metrics");
        assert_eq!(status, 200);
        assert!(body.ends_with("# EOF\n"), "one OpenMetrics page");
        let names = sample_names(&body);
        let missing: Vec<&(String, String)> = wanted
            .iter()
            .filter(|(_, name)| !names.contains(name))
            .collect();
        if missing.is_empty() {
            for component in ["mokka", "gpuid", "tfjob"] {
                assert!(
                    body.contains(&format!("component=\"{component}\"")),
                    "no {component} samples"
                );
            }
            break missing.len();
        }
        if Instant::now() >= deadline {
            panic!("metrics named by a dashboard but not exported: {missing:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(missing, 0);
    // Ctrl-C, as the README says; the fleet-view test covers SIGTERM.
    let status = sandbox.process.interrupt().await;
    assert!(
        status.success(),
        "the sandbox stops cleanly on Ctrl-C (SIGINT): {status}"
    );
}
