//! The s3 exporter against moto_server (GPUFLEET_TEST_S3_ENDPOINT, started
//! by scripts/test.sh). Buckets are created per test; reads go through
//! plain unsigned HTTP so they do not share code with the exporter.

use bytes::Bytes;
use gpuid::config::{S3ExporterConfig, Secret};
use gpuid::export::{Exporter, S3Credentials, S3Exporter, S3Format, S3Settings};
use gpuid::record::GpuRecord;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use crate::export_support::{batch, h100_batch, s3_endpoint};

type Plain = Client<HttpConnector, Full<Bytes>>;

fn plain() -> Plain {
    Client::builder(TokioExecutor::new()).build_http()
}

pub(crate) async fn call(method: &str, url: &str) -> (u16, String) {
    // moto refuses anonymous reads but accepts any credentials, so a
    // syntactically valid header is enough.
    let request = http::Request::builder()
        .method(method)
        .uri(url)
        .header(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=testing/20260821/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0",
        )
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = plain().request(request).await.unwrap_or_else(|error| {
        panic!(
            "moto_server at {url} does not answer ({error}): run the tests through scripts/test.sh"
        )
    });
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

pub(crate) async fn create_bucket(endpoint: &str) -> String {
    let bucket = format!("gpuid-{}", uuid::Uuid::new_v4().simple());
    let (status, body) = call("PUT", &format!("{endpoint}/{bucket}")).await;
    assert_eq!(status, 200, "creating bucket {bucket}: {body}");
    bucket
}

pub(crate) async fn list_keys(endpoint: &str, bucket: &str) -> Vec<String> {
    let (status, body) = call("GET", &format!("{endpoint}/{bucket}?list-type=2")).await;
    assert_eq!(status, 200, "{body}");
    let mut keys: Vec<String> = body
        .split("<Key>")
        .skip(1)
        .filter_map(|rest| rest.split_once("</Key>").map(|(key, _)| key.to_owned()))
        .collect();
    keys.sort();
    keys
}

fn settings(endpoint: &str, bucket: &str, format: S3Format, replica: &str) -> S3Settings {
    S3Settings {
        config: S3ExporterConfig {
            bucket: bucket.to_owned(),
            prefix: "serial-numbers".to_owned(),
            region: "us-east-1".to_owned(),
            partition_pattern: "year=%Y/month=%m/day=%d/hour=%H".to_owned(),
            endpoint: Some(endpoint.to_owned()),
            force_path_style: true,
            format,
        },
        replica: replica.to_owned(),
        credentials: Some(S3Credentials {
            access_key_id: "testing".to_owned(),
            secret_access_key: Secret::new("testing"),
            session_token: None,
        }),
    }
}

#[tokio::test]
async fn a_batch_becomes_csv_objects_with_a_header_under_upstreams_partition() {
    let endpoint = s3_endpoint();
    let bucket = create_bucket(&endpoint).await;
    let exporter = S3Exporter::new(settings(&endpoint, &bucket, S3Format::Csv, "gpuid-0")).unwrap();
    assert!(exporter.health().await.is_healthy());
    let (records, events) = h100_batch();
    let batch = batch(records.clone(), events.clone());
    exporter.export(&batch).await.unwrap();

    let keys = list_keys(&endpoint, &bucket).await;
    let prefix = "serial-numbers/year=2026/month=08/day=21/hour=08/gpuid-0-";
    assert_eq!(
        keys,
        [
            format!("{prefix}{}-events.csv", batch.id),
            format!("{prefix}{}-records.csv", batch.id),
        ]
    );
    let (status, csv) = call("GET", &format!("{endpoint}/{bucket}/{}", keys[1])).await;
    assert_eq!(status, 200);
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("cluster,node,machine,source,chassis,gpu,time,gpu_key,uuid"));
    assert_eq!(lines.len(), records.len() + 1);
    let first: &GpuRecord = &records[0];
    let expected_start = format!(
        "prod,h100-1,i-h100-1,gpu-operator/nvidia-device-plugin-abc,,{},2026-08-21T08:00:00Z,{}",
        first.gpu.serial.clone().unwrap(),
        first.gpu_key()
    );
    assert!(
        lines[1..]
            .iter()
            .any(|line| line.starts_with(&expected_start)),
        "{csv}"
    );
    let (_, events_csv) = call("GET", &format!("{endpoint}/{bucket}/{}", keys[0])).await;
    assert_eq!(events_csv.lines().count(), events.len() + 1);
    assert!(
        events_csv
            .lines()
            .nth(1)
            .unwrap()
            .contains(",gpu_added,prod,")
    );
}

#[tokio::test]
async fn ndjson_objects_hold_full_records() {
    let endpoint = s3_endpoint();
    let bucket = create_bucket(&endpoint).await;
    let exporter =
        S3Exporter::new(settings(&endpoint, &bucket, S3Format::Ndjson, "gpuid-1")).unwrap();
    let (records, _) = h100_batch();
    let batch = batch(records.clone(), Vec::new());
    exporter.export(&batch).await.unwrap();
    let keys = list_keys(&endpoint, &bucket).await;
    assert_eq!(keys.len(), 1, "no events, no events object");
    assert!(keys[0].ends_with(&format!("gpuid-1-{}-records.ndjson", batch.id)));
    let (_, body) = call("GET", &format!("{endpoint}/{bucket}/{}", keys[0])).await;
    let parsed: Vec<GpuRecord> = body
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(parsed, records);
}

#[tokio::test]
async fn keys_never_collide_across_replicas_and_retries_rewrite_the_same_key() {
    let endpoint = s3_endpoint();
    let bucket = create_bucket(&endpoint).await;
    let replica_a =
        S3Exporter::new(settings(&endpoint, &bucket, S3Format::Csv, "gpuid-a")).unwrap();
    let replica_b =
        S3Exporter::new(settings(&endpoint, &bucket, S3Format::Csv, "gpuid-b")).unwrap();
    let (records, _) = h100_batch();
    let same = batch(records.clone(), Vec::new());
    let other = batch(records[..2].to_vec(), Vec::new());
    replica_a.export(&same).await.unwrap();
    replica_a.export(&same).await.unwrap(); // a retry
    replica_b.export(&same).await.unwrap(); // same content from another replica, same second
    replica_a.export(&other).await.unwrap();
    let keys = list_keys(&endpoint, &bucket).await;
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(
        keys.iter()
            .any(|k| k.contains("gpuid-a-") && k.contains(&same.id.to_string()))
    );
    assert!(
        keys.iter()
            .any(|k| k.contains("gpuid-b-") && k.contains(&same.id.to_string()))
    );
    assert!(keys.iter().any(|k| k.contains(&other.id.to_string())));
}

#[tokio::test]
async fn a_missing_bucket_is_unhealthy_and_its_writes_are_permanent_failures() {
    let endpoint = s3_endpoint();
    let exporter = S3Exporter::new(settings(
        &endpoint,
        "gpuid-no-such-bucket",
        S3Format::Csv,
        "gpuid-0",
    ))
    .unwrap();
    let health = exporter.health().await;
    assert!(!health.is_healthy());
    assert!(format!("{health:?}").contains("404"), "{health:?}");
    let (records, _) = h100_batch();
    let error = exporter
        .export(&batch(records, Vec::new()))
        .await
        .unwrap_err();
    assert!(error.is_permanent(), "{error}");
}

// ---- S3_FORMAT from the configuration to the object body ----

/// The s3 exporter as the binary builds it: from environment variables.
fn exporter_from_env(endpoint: &str, bucket: &str, format: &str) -> gpuid::export::AnyExporter {
    let vars = [
        ("CLUSTER_NAME", "prod"),
        ("EXPORTER_TYPE", "s3"),
        ("S3_BUCKET", bucket),
        ("S3_ENDPOINT", endpoint),
        ("S3_FORCE_PATH_STYLE", "true"),
        ("S3_PREFIX", "/inventory/"),
        ("S3_FORMAT", format),
    ];
    let config = crate::export_support::config_from_vars(&vars);
    gpuid::export::AnyExporter::from_config(
        &config.exporter,
        gpuid::export::ExportContext {
            replica: "gpuid-cfg".to_owned(),
            s3_credentials: Some(S3Credentials {
                access_key_id: "testing".to_owned(),
                secret_access_key: Secret::new("testing"),
                session_token: None,
            }),
        },
    )
    .unwrap()
}

/// RFC 4180 rows (quoted fields, doubled quotes, line breaks inside quotes).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(
        field.is_empty() && row.is_empty(),
        "the body ends with a line break"
    );
    rows
}

/// The CSV row a record must become: upstream's seven columns, then ours.
fn expected_csv_row(record: &GpuRecord) -> Vec<String> {
    let text = |value: &Option<String>| value.clone().unwrap_or_default();
    let number = |value: Option<u32>| value.map(|n| n.to_string()).unwrap_or_default();
    vec![
        record.cluster.clone(),
        record.node_name.clone(),
        record.machine_id.clone(),
        record.source_pod.clone(),
        text(&record.gpu.chassis_serial),
        record
            .gpu
            .serial
            .clone()
            .unwrap_or_else(|| record.gpu_key()),
        record
            .observed_at
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string(),
        record.gpu_key(),
        text(&record.gpu.uuid),
        text(&record.gpu.serial),
        text(&record.gpu.pci_bus_id),
        text(&record.gpu.product_name),
        number(record.gpu.module_id),
        number(record.gpu.slot_number),
        number(record.gpu.tray_index),
        number(record.gpu.host_id),
        record.node_uid.clone(),
        text(&record.gpu.driver_version),
    ]
}

#[tokio::test]
async fn s3_format_csv_from_the_environment_writes_a_header_and_one_row_per_record() {
    let endpoint = s3_endpoint();
    let bucket = create_bucket(&endpoint).await;
    let exporter = exporter_from_env(&endpoint, &bucket, "csv");
    // GB200: shared board serials, chassis, slot, tray and module ids set.
    let records =
        crate::export_support::records("hardware/gb200.xml", "gb200-1", "2026-08-21T08:00:00Z");
    let batch = batch(records.clone(), Vec::new());
    exporter.export(&batch).await.unwrap();
    let keys = list_keys(&endpoint, &bucket).await;
    assert_eq!(
        keys,
        [format!(
            "inventory/year=2026/month=08/day=21/hour=08/gpuid-cfg-{}-records.csv",
            batch.id
        )]
    );
    let (status, body) = call("GET", &format!("{endpoint}/{bucket}/{}", keys[0])).await;
    assert_eq!(status, 200, "{body}");
    let rows = parse_csv(&body);
    assert_eq!(
        rows[0],
        [
            "cluster",
            "node",
            "machine",
            "source",
            "chassis",
            "gpu",
            "time",
            "gpu_key",
            "uuid",
            "serial",
            "pci_bus_id",
            "product_name",
            "module_id",
            "slot_number",
            "tray_index",
            "host_id",
            "node_uid",
            "driver_version"
        ]
    );
    let expected: Vec<Vec<String>> = records.iter().map(expected_csv_row).collect();
    assert_eq!(rows[1..], expected[..]);
    assert_eq!(rows.len(), 5, "header plus the four GB200 GPUs");
}

#[tokio::test]
async fn s3_format_ndjson_from_the_environment_writes_records_and_events_that_parse_back() {
    let endpoint = s3_endpoint();
    let bucket = create_bucket(&endpoint).await;
    let exporter = exporter_from_env(&endpoint, &bucket, "NDJSON");
    let (records, events) = h100_batch();
    let batch = batch(records.clone(), events.clone());
    exporter.export(&batch).await.unwrap();
    let keys = list_keys(&endpoint, &bucket).await;
    let prefix = "inventory/year=2026/month=08/day=21/hour=08/gpuid-cfg-";
    assert_eq!(
        keys,
        [
            format!("{prefix}{}-events.ndjson", batch.id),
            format!("{prefix}{}-records.ndjson", batch.id),
        ]
    );
    let (_, body) = call("GET", &format!("{endpoint}/{bucket}/{}", keys[1])).await;
    let parsed: Vec<GpuRecord> = body
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(parsed, records);
    let (_, body) = call("GET", &format!("{endpoint}/{bucket}/{}", keys[0])).await;
    let parsed: Vec<gpuid::inventory::ChangeEvent> = body
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(parsed, events);
}
