//! The collector into S3 (moto_server, GPUFLEET_TEST_S3_ENDPOINT) end to
//! end, and the QPS/BURST-limited client against kube-sim.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller_kit::rate_limited_client;
use gpuid::collect::{Election, PodResult};
use gpuid::config::{S3ExporterConfig, Secret};
use gpuid::export::{ExportPipeline, S3Credentials, S3Exporter, S3Format, S3Settings};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;

use super::collect_support::*;
use crate::export_s3::{call, create_bucket, list_keys};
use crate::export_support::s3_endpoint;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collection_lands_in_s3_as_ndjson_once_and_a_restart_writes_no_object() {
    let endpoint = s3_endpoint();
    let bucket = create_bucket(&endpoint).await;
    let exporter = || {
        S3Exporter::new(S3Settings {
            config: S3ExporterConfig {
                bucket: bucket.clone(),
                prefix: "inventory".to_owned(),
                region: "us-east-1".to_owned(),
                partition_pattern: "year=%Y/month=%m/day=%d/hour=%H".to_owned(),
                endpoint: Some(endpoint.clone()),
                force_path_style: true,
                format: S3Format::Ndjson,
            },
            replica: "gpuid-0".to_owned(),
            credentials: Some(S3Credentials {
                access_key_id: "testing".to_owned(),
                secret_access_key: Secret::new("testing"),
                session_token: None,
            }),
        })
        .unwrap()
    };
    let fleet = Fleet::start().await;
    for (node, fixture) in [
        ("s3-h100", "hardware/h100.xml"),
        ("s3-gb200", "hardware/gb200.xml"),
    ] {
        fleet.add_node(node).await;
        fleet.answer(node, Answer::Xml(capture(fixture, node)));
        fleet.add_plugin_pod(&format!("plugin-{node}"), node).await;
    }
    let start = |pipeline: ExportPipeline<S3Exporter>| {
        Replica::start_with_sink(
            &fleet,
            settings(4),
            Election::Disabled,
            Arc::new(pipeline),
            Buffer::default(),
        )
    };
    let replica = start(ExportPipeline::start(exporter(), quick_batches())).await;
    for node in ["s3-h100", "s3-gb200"] {
        eventually(&format!("{node}'s export to be recorded"), || async {
            fleet.annotation(node, "inventory-hash").await
        })
        .await;
    }
    replica.stop().await;

    let keys = list_keys(&endpoint, &bucket).await;
    let mut uuids = Vec::new();
    let mut events = 0;
    for key in &keys {
        assert!(key.starts_with("inventory/year="), "{key}");
        let (status, body) = call("GET", &format!("{endpoint}/{bucket}/{key}")).await;
        assert_eq!(status, 200, "{key}: {body}");
        for line in body.lines() {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            if key.ends_with("-events.ndjson") {
                assert_eq!(value["kind"], "gpu_added", "{line}");
                events += 1;
            } else {
                assert_eq!(value["cluster"], "test-cluster");
                uuids.push(value["uuid"].as_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(uuids.len(), 12, "8 H100 + 4 GB200 records once: {keys:?}");
    assert_eq!(uuids.iter().collect::<BTreeSet<_>>().len(), 12);
    assert_eq!(events, 12);

    let restarted = start(ExportPipeline::start(exporter(), quick_batches())).await;
    eventually("both pods to be re-collected", || async {
        (restarted.runtime_metrics.pods_with(PodResult::Unchanged) == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    restarted.stop().await;
    assert_eq!(list_keys(&endpoint, &bucket).await, keys, "no new object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_limited_client_paces_requests_to_kube_sim_and_still_execs() {
    let fleet = Fleet::start().await;
    fleet.add_node("gpu-1").await;
    fleet.answer("gpu-1", Answer::Xml(capture("hardware/a100.xml", "qps")));
    fleet.add_plugin_pod("plugin-1", "gpu-1").await;
    let config = kube::Config::new(fleet.sim().url().parse().unwrap());
    // 4 per second after a burst of 2: 10 requests need at least 2 s.
    let client = rate_limited_client(config, 4.0, 2).unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let started = Instant::now();
    for _ in 0..10 {
        namespaces.get("default").await.unwrap();
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1990),
        "10 requests at QPS 4, BURST 2 took {elapsed:?}"
    );
    // The layer passes the WebSocket upgrade of an exec through.
    let pods: Api<Pod> = Api::namespaced(client, NAMESPACE);
    let report = gpuid::collect::exec::run_nvidia_smi(
        &pods,
        "plugin-1",
        CONTAINER,
        Duration::from_secs(10),
        gpuid::smi::Limits::DEFAULT,
    )
    .await
    .unwrap()
    .unwrap();
    assert!(!report.gpus.is_empty());
    assert!(
        report.gpus.iter().all(|gpu| gpu
            .uuid
            .as_deref()
            .is_some_and(|uuid| uuid.contains("GPU-qps-"))),
        "{:?}",
        report.gpus
    );
}
