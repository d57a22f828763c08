//! The collector end to end, on kube-sim or (GPUFLEET_TEST_CLUSTER=real) on
//! the real control plane with deploy/gpuid's RBAC: device-plugin pods on
//! GPU nodes whose nvidia-smi serves the fixture captures.

use std::time::Duration;

use controller_kit::{LeaderElectionConfig, ReplicaRole};
use gpuid::collect::{Election, PodResult};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use super::collect_support::*;

async fn exported(fleet: &Fleet, node: &str) -> String {
    eventually(&format!("{node}'s export to be recorded"), || async {
        fleet.annotation(node, "inventory-hash").await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collects_every_node_labels_it_and_a_restart_exports_nothing_new() {
    let fleet = Fleet::start().await;
    for (node, fixture) in [
        ("gpu-h100", "hardware/h100.xml"),
        ("gpu-gb200", "hardware/gb200.xml"),
    ] {
        fleet.add_node(node).await;
        fleet.answer(node, Answer::Xml(capture(fixture, node)));
        fleet.add_plugin_pod(&format!("plugin-{node}"), node).await;
    }
    let replica = Replica::start(&fleet, settings(4), Election::Disabled).await;
    let h100_hash = exported(&fleet, "gpu-h100").await;
    exported(&fleet, "gpu-gb200").await;

    let records = replica.buffer.records();
    assert_eq!(records.len(), 12, "8 H100 + 4 GB200 records");
    let node_of = |uuid_prefix: &str| {
        records
            .iter()
            .filter(|r| r["uuid"].as_str().unwrap().starts_with(uuid_prefix))
            .map(|r| r["node_name"].as_str().unwrap().to_owned())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(node_of("GPU-gpu-h100-"), ["gpu-h100".to_owned()].into());
    for record in &records {
        assert_eq!(record["cluster"], "test-cluster");
        assert_eq!(record["machine_id"], record["node_name"]);
        assert_eq!(record["collector_version"], "test");
        assert!(
            record["source_pod"]
                .as_str()
                .unwrap()
                .starts_with("gpu-operator/plugin-")
        );
        assert!(
            record["node_uid"]
                .as_str()
                .is_some_and(|uid| !uid.is_empty())
        );
    }
    let events = replica.buffer.events();
    assert_eq!(events.len(), 12);
    assert!(events.iter().all(|(kind, _)| kind == "gpu_added"));

    let labels = fleet.node_labels("gpu-gb200").await;
    assert_eq!(labels[&format!("{PREFIX}/gpu-count")], "4");
    assert!(
        labels.contains_key(&format!("{PREFIX}/chassis-serial")),
        "{labels:?}"
    );
    assert_eq!(
        fleet.node_labels("gpu-h100").await[&format!("{PREFIX}/gpu-count")],
        "8"
    );
    let inventory = fleet.annotation("gpu-h100", "inventory").await.unwrap();
    assert_eq!(
        serde_json::from_str::<Vec<serde_json::Value>>(&inventory)
            .unwrap()
            .len(),
        8
    );

    let (status, body) = replica.readyz().await;
    assert_eq!(status, 200, "{body}");
    let execs_before = fleet.exec_count();
    replica.stop().await;

    // A new process: no memory, same Nodes. It collects again (it cannot
    // know the pods were seen) but exports nothing and writes no new hash.
    let restarted = Replica::start(&fleet, settings(4), Election::Disabled).await;
    eventually("both pods to be re-collected", || async {
        (restarted.runtime_metrics.pods_with(PodResult::Unchanged) == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        restarted.buffer.lines().is_empty(),
        "{:?}",
        restarted.buffer.lines()
    );
    assert_eq!(
        fleet.annotation("gpu-h100", "inventory-hash").await,
        Some(h100_hash)
    );
    assert_eq!(fleet.exec_count(), execs_before + 2);
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_capture_exports_exactly_the_change_and_stale_labels_go() {
    let fleet = Fleet::start().await;
    let node = "gpu-1";
    let full = capture("hardware/h100.xml", node);
    fleet.add_node(node).await;
    fleet.answer(node, Answer::Xml(full.clone()));
    fleet.add_plugin_pod("plugin-a", node).await;
    let replica = Replica::start(&fleet, settings(2), Election::Disabled).await;
    let first_hash = exported(&fleet, node).await;
    let labels_before = fleet.node_labels(node).await;
    let lines_before = replica.buffer.lines().len();

    // The node comes back with one GPU fewer; the device plugin restarts.
    fleet.answer(node, Answer::Xml(without_last_gpu(&full)));
    fleet.delete_pod("plugin-a").await;
    fleet.add_plugin_pod("plugin-b", node).await;
    eventually("the new inventory to be recorded", || async {
        fleet
            .annotation(node, "inventory-hash")
            .await
            .filter(|hash| *hash != first_hash)
    })
    .await;

    let new_lines = &replica.buffer.lines()[lines_before..];
    let events: Vec<_> = new_lines.iter().filter(|l| l["kind"] != "gpu").collect();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["kind"], "gpu_removed");
    let removed_key = events[0]["gpu_key"].as_str().unwrap();
    assert!(removed_key.starts_with("GPU-gpu-1-"));
    assert_eq!(
        new_lines.len(),
        1 + 7,
        "the removal plus the node's 7 current records"
    );

    let labels_after = fleet.node_labels(node).await;
    assert_eq!(labels_after[&format!("{PREFIX}/gpu-count")], "7");
    let gone: Vec<_> = labels_before
        .keys()
        .filter(|key| !labels_after.contains_key(*key))
        .collect();
    assert_eq!(
        gone.len(),
        1,
        "exactly the removed GPU's serial label: {gone:?}"
    );
    assert!(gone[0].ends_with(".serial"));
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_exports_its_gpus_as_removed_and_the_other_node_is_untouched() {
    let fleet = Fleet::start().await;
    for node in ["gone-1", "kept-1"] {
        fleet.add_node(node).await;
        fleet.answer(node, Answer::Xml(capture("hardware/h100.xml", node)));
        fleet.add_plugin_pod(&format!("plugin-{node}"), node).await;
    }
    let replica = Replica::start(&fleet, settings(2), Election::Disabled).await;
    exported(&fleet, "gone-1").await;
    exported(&fleet, "kept-1").await;
    let added = replica.buffer.events();
    assert_eq!(added.len(), 16, "8 GPUs added on each node: {added:?}");
    let (_, metrics) = replica.admin_get("/metrics").await;
    assert!(
        metrics.contains(r#"gpuid_node_gpus{node="gone-1"} 8"#),
        "{metrics}"
    );

    // The node leaves the cluster, and its device-plugin pod with it.
    Api::<k8s_openapi::api::core::v1::Node>::all(fleet.client.clone())
        .delete("gone-1", &Default::default())
        .await
        .unwrap();
    fleet.delete_pod("plugin-gone-1").await;
    let removed = eventually(
        "the deleted node's GPUs to be exported as removed",
        || async {
            let removed: Vec<String> = replica
                .buffer
                .events()
                .into_iter()
                .filter(|(kind, _)| kind == "gpu_removed")
                .map(|(_, key)| key)
                .collect();
            (removed.len() >= 8).then_some(removed)
        },
    )
    .await;
    assert_eq!(removed.len(), 8, "{removed:?}");
    assert!(
        removed.iter().all(|key| key.starts_with("GPU-gone-1-")),
        "{removed:?}"
    );
    let (_, metrics) = replica.admin_get("/metrics").await;
    assert!(!metrics.contains(r#"node="gone-1""#), "{metrics}");
    assert!(
        metrics.contains(r#"gpuid_node_gpus{node="kept-1"} 8"#),
        "{metrics}"
    );
    assert_eq!(
        fleet.execs_on("kept-1"),
        1,
        "the other node is not collected again"
    );
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_hanging_and_oversized_outputs_are_counted_errors() {
    let fleet = Fleet::start().await;
    let cases = [
        (
            "bad-xml",
            Answer::Xml(b"<nvidia_smi_log><gpu id=\"0\"><uuid>".to_vec()),
        ),
        ("hangs", Answer::Hang),
        ("too-big", Answer::Xml(vec![b' '; 4 * 1024 * 1024 + 1])),
        ("good", Answer::Xml(capture("hardware/a100.xml", "good"))),
    ];
    for (node, answer) in cases {
        fleet.add_node(node).await;
        fleet.answer(node, answer);
        fleet.add_plugin_pod(&format!("plugin-{node}"), node).await;
    }
    let mut settings = settings(4);
    settings.timeout = Duration::from_millis(500);
    let replica = Replica::start(&fleet, settings, Election::Disabled).await;
    let metrics = replica.runtime_metrics.clone();
    eventually("each failure to be counted", || async {
        (metrics.exec_errors_with("parse") >= 1
            && metrics.exec_errors_with("timeout") >= 1
            && metrics.exec_errors_with("output_too_large") >= 1)
            .then_some(())
    })
    .await;
    exported(&fleet, "good").await;
    assert_eq!(
        replica.buffer.records().len(),
        1,
        "only the good node's A100"
    );
    for node in ["bad-xml", "hangs", "too-big"] {
        assert_eq!(
            fleet.annotation(node, "inventory-hash").await,
            None,
            "{node}"
        );
    }
    assert!(metrics.pods_with(PodResult::Error) >= 3);
    replica.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_serves_readiness_but_never_execs_or_writes() {
    let fleet = Fleet::start().await;
    fleet.add_node("gpu-1").await;
    fleet.answer("gpu-1", Answer::Xml(capture("hardware/a100.xml", "f")));
    fleet.add_plugin_pod("plugin-1", "gpu-1").await;
    // Another replica holds the Lease.
    let leases: Api<Lease> = Api::namespaced(fleet.client.clone(), LEASE_NAMESPACE);
    let now = jiff::Timestamp::now().to_string();
    let lease = serde_json::from_value(json!({
        "metadata": {"name": "gpuid-leader"},
        "spec": {"holderIdentity": "other-replica", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
    }))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut election = LeaderElectionConfig::new(LEASE_NAMESPACE, "gpuid-leader");
    election.retry_period = Duration::from_millis(200);
    election.renew_deadline = Duration::from_millis(500);
    // Long enough that the silent holder does not expire during the test.
    election.lease_duration = Duration::from_secs(3600);
    let replica = Replica::start(&fleet, settings(2), Election::Lease(election)).await;
    eventually("the replica to be a standby", || async {
        (replica.readiness.snapshot().role == ReplicaRole::Standby).then_some(())
    })
    .await;
    let (status, body) = replica.readyz().await;
    assert_eq!(status, 200, "a standby is ready: {body}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fleet.exec_count(), 0);
    assert!(fleet.node_labels("gpu-1").await.is_empty());
    assert!(replica.buffer.lines().is_empty());
    replica.stop().await;
}

async fn start_postgres(fleet: &Fleet, config: &gpuid::config::PostgresExporterConfig) -> Replica {
    let exporter = gpuid::export::PostgresExporter::new(config).unwrap();
    let pipeline = gpuid::export::ExportPipeline::start(exporter, quick_batches());
    Replica::start_with_sink(
        fleet,
        settings(4),
        Election::Disabled,
        std::sync::Arc::new(pipeline),
        Buffer::default(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collection_lands_in_postgres_once_and_a_restart_adds_no_rows() {
    use gpuid::config::{PostgresConnection, PostgresExporterConfig, PostgresTable, Secret};

    let db = crate::export_support::postgres_client().await;
    let schema = crate::export_support::fresh_schema("collect");
    let config = PostgresExporterConfig {
        connection: PostgresConnection::Dsn(Secret::new(crate::export_support::postgres_url())),
        table: PostgresTable {
            schema: Some(schema.clone()),
            name: "gpu".to_owned(),
        },
        auto_migrate: true,
    };
    let fleet = Fleet::start().await;
    for (node, fixture) in [
        ("pg-h100", "hardware/h100.xml"),
        ("pg-gb200", "hardware/gb200.xml"),
    ] {
        fleet.add_node(node).await;
        fleet.answer(node, Answer::Xml(capture(fixture, node)));
        fleet.add_plugin_pod(&format!("plugin-{node}"), node).await;
    }
    let count = |sql: String| {
        let db = &db;
        async move { db.query_one(&sql, &[]).await.unwrap().get::<_, i64>(0) }
    };
    let replica = start_postgres(&fleet, &config).await;
    exported(&fleet, "pg-h100").await;
    exported(&fleet, "pg-gb200").await;
    let inventory = format!("SELECT count(*) FROM \"{schema}\".gpu_inventory");
    let events = format!("SELECT count(*) FROM \"{schema}\".gpu_events");
    assert_eq!(count(inventory.clone()).await, 12);
    assert_eq!(count(events.clone()).await, 12);
    replica.stop().await;

    let restarted = start_postgres(&fleet, &config).await;
    eventually("both pods to be re-collected", || async {
        (restarted.runtime_metrics.pods_with(PodResult::Unchanged) == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count(inventory).await, 12);
    assert_eq!(
        count(events).await,
        12,
        "no duplicate events after a restart"
    );
    restarted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_inventory_is_re_exported_on_the_heartbeat_without_events() {
    let fleet = Fleet::start().await;
    fleet.add_node("gpu-1").await;
    fleet.answer("gpu-1", Answer::Xml(capture("hardware/a100.xml", "hb")));
    fleet.add_plugin_pod("plugin-1", "gpu-1").await;
    let mut settings = settings(1);
    settings.heartbeat = Duration::from_secs(1);
    let replica = Replica::start(&fleet, settings, Election::Disabled).await;
    let first_hash = exported(&fleet, "gpu-1").await;
    let first_at = fleet.annotation("gpu-1", "exported-at").await.unwrap();
    eventually("a heartbeat export", || async {
        fleet
            .annotation("gpu-1", "exported-at")
            .await
            .filter(|at| *at != first_at)
    })
    .await;
    assert!(
        replica.buffer.records().len() >= 2,
        "the record went out again"
    );
    assert_eq!(replica.buffer.events().len(), 1, "only the first gpu_added");
    assert_eq!(
        fleet.annotation("gpu-1", "inventory-hash").await,
        Some(first_hash)
    );
    replica.stop().await;
}

/// Upstream's `gpuid.github.com/` labels through the collector: written by
/// default (the sorted serials of an H100 node as gpu-0..gpu-7); with
/// `upstream_labels` off (UPSTREAM_NODE_LABELS=false) none is written and
/// one that someone else set stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_node_labels_are_written_by_default_and_left_alone_with_the_knob_off() {
    let fleet = Fleet::start().await;
    for node in ["gpu-upstream-on", "gpu-upstream-off"] {
        fleet.add_node(node).await;
        fleet.answer(node, Answer::Xml(capture("hardware/h100.xml", node)));
    }
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(fleet.client.clone());
    let foreign = json!({"metadata": {"labels": {"gpuid.github.com/chassis": "set-by-upstream"}}});
    nodes
        .patch(
            "gpu-upstream-off",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&foreign),
        )
        .await
        .unwrap();
    let upstream_labels = |labels: std::collections::BTreeMap<String, String>| {
        labels
            .into_iter()
            .filter(|(key, _)| key.starts_with("gpuid.github.com/"))
            .collect::<std::collections::BTreeMap<_, _>>()
    };

    fleet
        .add_plugin_pod("plugin-upstream-on", "gpu-upstream-on")
        .await;
    let replica = Replica::start(&fleet, settings(2), Election::Disabled).await;
    exported(&fleet, "gpu-upstream-on").await;
    let records = replica.buffer.records();
    let mut serials: Vec<String> = records
        .iter()
        .filter_map(|r| r["serial"].as_str().map(str::to_owned))
        .collect();
    serials.sort();
    let want: std::collections::BTreeMap<String, String> = serials
        .into_iter()
        .enumerate()
        .map(|(j, serial)| (format!("gpuid.github.com/gpu-{j}"), serial))
        .collect();
    assert_eq!(want.len(), 8);
    let on = fleet
        .node("gpu-upstream-on")
        .await
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(upstream_labels(on), want);
    replica.stop().await;

    let mut off = settings(2);
    off.upstream_labels = false;
    fleet
        .add_plugin_pod("plugin-upstream-off", "gpu-upstream-off")
        .await;
    let _replica = Replica::start(&fleet, off, Election::Disabled).await;
    exported(&fleet, "gpu-upstream-off").await;
    let labels = fleet
        .node("gpu-upstream-off")
        .await
        .metadata
        .labels
        .unwrap_or_default();
    assert_eq!(
        labels
            .get(&format!("{PREFIX}/gpu-count"))
            .map(String::as_str),
        Some("8"),
        "our labels are written: {labels:?}"
    );
    assert_eq!(
        upstream_labels(labels),
        [(
            "gpuid.github.com/chassis".to_owned(),
            "set-by-upstream".to_owned()
        )]
        .into(),
        "with the knob off gpuid.github.com/ keys are neither written nor removed"
    );
}
