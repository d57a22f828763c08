//! The postgres exporter against the real server (GPUFLEET_TEST_POSTGRES_URL,
//! default postgres://postgres@127.0.0.1:5432/test). Each test works in its
//! own schema, so they run in parallel; a missing server fails the test.

use std::net::SocketAddr;
use std::time::Duration;

use gpuid::config::{PostgresConnection, PostgresExporterConfig, PostgresTable, Secret};
use gpuid::export::{ExportPipeline, Exporter, MIGRATIONS, PostgresExporter};
use gpuid::inventory::diff;

use crate::export_support::{
    CuttableProxy, batch, eventually, fast_pipeline, fresh_schema, h100_batch, postgres_client,
    postgres_url, records,
};

fn exporter_config(url: &str, schema: &str, auto_migrate: bool) -> PostgresExporterConfig {
    PostgresExporterConfig {
        connection: PostgresConnection::Dsn(Secret::new(url)),
        table: PostgresTable {
            schema: Some(schema.to_owned()),
            name: "gpu".to_owned(),
        },
        auto_migrate,
    }
}

/// The test URL pointed at another address (a proxy or a closed port).
fn url_via(addr: SocketAddr) -> String {
    let url = postgres_url();
    let rest = url
        .split_once('@')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let path = rest.split_once('/').map(|(_, path)| path).unwrap_or("test");
    let user = url
        .trim_start_matches("postgres://")
        .trim_start_matches("postgresql://")
        .split_once('@')
        .map(|(user, _)| user)
        .unwrap_or("postgres");
    format!("postgres://{user}@{addr}/{path}")
}

fn server_addr() -> SocketAddr {
    let url = postgres_url();
    let rest = url.split_once('@').map(|(_, rest)| rest).unwrap_or(&url);
    let host_port = rest.split('/').next().unwrap_or("127.0.0.1:5432");
    let host_port = if host_port.contains(':') {
        host_port.to_owned()
    } else {
        format!("{host_port}:5432")
    };
    host_port
        .parse()
        .unwrap_or_else(|_| "127.0.0.1:5432".parse().unwrap())
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

#[tokio::test]
async fn a_batch_lands_in_the_inventory_and_events_tables_and_re_exporting_adds_nothing() {
    let db = postgres_client().await;
    let schema = fresh_schema("e2e");
    let exporter = PostgresExporter::new(&exporter_config(&postgres_url(), &schema, true)).unwrap();
    let (records, events) = h100_batch();
    let batch = batch(records.clone(), events.clone());
    exporter.export(&batch).await.unwrap();
    exporter.export(&batch).await.unwrap();

    let inventory = format!("SELECT count(*) FROM \"{schema}\".gpu_inventory");
    let events_sql = format!("SELECT count(*) FROM \"{schema}\".gpu_events");
    assert_eq!(count(&db, &inventory).await, records.len() as i64);
    assert_eq!(count(&db, &events_sql).await, events.len() as i64);

    let row = db
        .query_one(
            &format!(
                "SELECT gpu_uuid, serial, node_name, machine_id, record->>'pci_bus_id', first_seen = last_seen
                 FROM \"{schema}\".gpu_inventory WHERE gpu_key = $1"
            ),
            &[&records[0].gpu_key()],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<String>>(0), records[0].gpu.uuid);
    assert_eq!(row.get::<_, Option<String>>(1), records[0].gpu.serial);
    assert_eq!(row.get::<_, String>(2), "h100-1");
    assert_eq!(row.get::<_, String>(3), "i-h100-1");
    assert_eq!(row.get::<_, Option<String>>(4), records[0].gpu.pci_bus_id);
    assert!(row.get::<_, bool>(5));
    let kinds: Vec<String> = db
        .query(
            &format!("SELECT DISTINCT kind FROM \"{schema}\".gpu_events"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(kinds, ["gpu_added"]);
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_later_observation_moves_last_seen_and_the_node_while_first_seen_stays() {
    let db = postgres_client().await;
    let schema = fresh_schema("moves");
    let exporter = PostgresExporter::new(&exporter_config(&postgres_url(), &schema, true)).unwrap();
    let before = records("hardware/h100.xml", "h100-1", "2026-08-21T08:00:00Z");
    let after = records("hardware/h100.xml", "h100-2", "2026-08-22T08:00:00Z");
    let moves = diff(&before, &after, "2026-08-22T08:00:00Z".parse().unwrap());
    assert_eq!(moves.len(), before.len());
    exporter
        .export(&batch(before.clone(), Vec::new()))
        .await
        .unwrap();
    exporter
        .export(&batch(after.clone(), moves.clone()))
        .await
        .unwrap();
    // A stale observation arriving late does not roll the row back.
    exporter
        .export(&batch(before[..1].to_vec(), Vec::new()))
        .await
        .unwrap();

    let row = db
        .query_one(
            &format!(
                "SELECT node_name, first_seen::text, last_seen::text, (SELECT count(*) FROM \"{schema}\".gpu_inventory)
                 FROM \"{schema}\".gpu_inventory WHERE gpu_key = $1"
            ),
            &[&before[0].gpu_key()],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "h100-2");
    assert!(row.get::<_, String>(1).starts_with("2026-08-21 08:00:00"));
    assert!(row.get::<_, String>(2).starts_with("2026-08-22 08:00:00"));
    assert_eq!(row.get::<_, i64>(3), before.len() as i64);
    let moved: i64 = db
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".gpu_events WHERE kind = 'gpu_moved' AND changed_fields @> ARRAY['node_name']"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(moved, moves.len() as i64);
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_view_named_postgres_table_answers_upstreams_columns() {
    let db = postgres_client().await;
    let schema = fresh_schema("view");
    let exporter = PostgresExporter::new(&exporter_config(&postgres_url(), &schema, true)).unwrap();
    let (records, _) = h100_batch();
    exporter
        .export(&batch(records.clone(), Vec::new()))
        .await
        .unwrap();

    // Upstream's own query shape, on upstream's table name.
    let rows = db
        .query(
            &format!(
                "SELECT id, cluster, node, machine, source, chassis, gpu, read_time, created_at
                 FROM \"{schema}\".gpu WHERE cluster = $1 ORDER BY gpu"
            ),
            &[&"prod"],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), records.len());
    let mut serials: Vec<String> = records
        .iter()
        .map(|r| r.gpu.serial.clone().unwrap())
        .collect();
    serials.sort();
    let gpus: Vec<String> = rows.iter().map(|row| row.get("gpu")).collect();
    assert_eq!(gpus, serials);
    for row in &rows {
        assert_eq!(row.get::<_, String>("node"), "h100-1");
        assert_eq!(row.get::<_, String>("machine"), "i-h100-1");
        assert_eq!(
            row.get::<_, String>("source"),
            "gpu-operator/nvidia-device-plugin-abc"
        );
        // The H100 capture has no chassis serial; upstream's README promised `unknown`.
        assert_eq!(row.get::<_, String>("chassis"), "unknown");
        assert!(row.get::<_, i64>("id") > 0);
    }
    let columns: Vec<String> = db
        .query(
            "SELECT column_name::text FROM information_schema.columns
             WHERE table_schema = $1 AND table_name = 'gpu' ORDER BY ordinal_position",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(
        columns,
        [
            "id",
            "cluster",
            "node",
            "machine",
            "source",
            "chassis",
            "gpu",
            "read_time",
            "created_at"
        ]
    );
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn migrations_are_recorded_once_and_rerunning_them_changes_nothing() {
    let db = postgres_client().await;
    let schema = fresh_schema("migrate");
    let config = exporter_config(&postgres_url(), &schema, true);
    // Two replicas starting together, then a restart.
    let first = PostgresExporter::new(&config).unwrap();
    let second = PostgresExporter::new(&config).unwrap();
    let (a, b) = tokio::join!(first.ensure_schema(), second.ensure_schema());
    a.unwrap();
    b.unwrap();
    PostgresExporter::new(&config)
        .unwrap()
        .ensure_schema()
        .await
        .unwrap();

    let versions: Vec<i32> = db
        .query(
            &format!("SELECT version FROM \"{schema}\".schema_migrations WHERE scope = 'gpu' ORDER BY version"),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let expected: Vec<i32> = MIGRATIONS.iter().map(|(version, _, _)| *version).collect();
    assert_eq!(versions, expected);
    assert!(first.health().await.is_healthy());
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

/// The longest name the configuration accepts gets every derived table and
/// index under its full name: the server would silently truncate a longer
/// one to 63 characters (and two truncated names could collide).
#[tokio::test]
async fn the_longest_accepted_table_name_migrates_with_every_derived_name_intact() {
    let db = postgres_client().await;
    let schema = fresh_schema("longname");
    let name = "t".repeat(gpuid::config::MAX_POSTGRES_TABLE_NAME);
    let mut config = exporter_config(&postgres_url(), &schema, true);
    config.table.name = name.clone();
    let exporter = PostgresExporter::new(&config).unwrap();
    let (records, events) = h100_batch();
    exporter
        .export(&batch(records.clone(), events))
        .await
        .unwrap();
    let relations: Vec<String> = db
        .query(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY c.relname",
            &[&schema],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    for suffix in [
        "",
        "_inventory",
        "_events",
        "_inventory_node_idx",
        "_inventory_last_seen_idx",
        "_events_gpu_idx",
    ] {
        let wanted = format!("{name}{suffix}");
        assert!(
            relations.contains(&wanted),
            "{wanted} ({} characters) missing from {relations:?}",
            wanted.len()
        );
    }
    let inventory = format!("SELECT count(*) FROM \"{schema}\".\"{name}_inventory\"");
    assert_eq!(count(&db, &inventory).await, records.len() as i64);
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn without_auto_migrate_an_unmigrated_database_is_unhealthy_and_nothing_is_created() {
    let db = postgres_client().await;
    let schema = fresh_schema("nomigrate");
    let exporter =
        PostgresExporter::new(&exporter_config(&postgres_url(), &schema, false)).unwrap();
    let health = exporter.health().await;
    assert!(!health.is_healthy());
    assert!(
        format!("{health:?}").contains("POSTGRES_AUTO_MIGRATE"),
        "{health:?}"
    );
    let (records, events) = h100_batch();
    let error = exporter.export(&batch(records, events)).await.unwrap_err();
    assert!(
        !error.is_permanent(),
        "kept for retry until the schema exists: {error}"
    );
    let exists: bool = db
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&schema],
        )
        .await
        .unwrap()
        .get(0);
    assert!(!exists);
}

#[tokio::test]
async fn a_database_that_is_down_at_start_is_unhealthy_and_recovers_when_it_comes_back() {
    let db = postgres_client().await;
    let schema = fresh_schema("down");
    let proxy = CuttableProxy::start(server_addr()).await;
    proxy.cut();
    // Building does not connect, so a down database is not a crash.
    let exporter =
        PostgresExporter::new(&exporter_config(&url_via(proxy.addr), &schema, true)).unwrap();
    assert!(!exporter.health().await.is_healthy());
    proxy.restore().await;
    eventually(
        Duration::from_secs(10),
        "health after the database returns",
        || async { exporter.health().await.is_healthy().then_some(()) },
    )
    .await;
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_outage_mid_stream_then_recovery_loses_nothing_and_duplicates_nothing() {
    let db = postgres_client().await;
    let schema = fresh_schema("outage");
    let proxy = CuttableProxy::start(server_addr()).await;
    let exporter =
        PostgresExporter::new(&exporter_config(&url_via(proxy.addr), &schema, true)).unwrap();
    let pipeline = ExportPipeline::start(exporter, fast_pipeline());

    let first = records("hardware/h100.xml", "h100-1", "2026-08-21T08:00:00Z");
    let first_events = diff(&[], &first, "2026-08-21T08:00:00Z".parse().unwrap());
    pipeline
        .submit(first.clone(), first_events.clone())
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the first batch", || async {
        (pipeline.stats().batches_exported == 1).then_some(())
    })
    .await;

    proxy.cut();
    // The scrubbed captures reuse UUIDs across models; give these their own.
    let mut second = records("hardware/a100.xml", "a100-1", "2026-08-21T09:00:00Z");
    for (index, record) in second.iter_mut().enumerate() {
        record.gpu.uuid = Some(format!("GPU-a100a100-0000-0000-0000-{index:012}"));
    }
    let second_events = diff(&[], &second, "2026-08-21T09:00:00Z".parse().unwrap());
    pipeline
        .submit(second.clone(), second_events.clone())
        .await
        .unwrap();
    eventually(
        Duration::from_secs(10),
        "failed attempts during the outage",
        || async { (pipeline.stats().retries >= 3).then_some(()) },
    )
    .await;
    assert!(!pipeline.health().await.is_healthy());
    let inventory = format!("SELECT count(*) FROM \"{schema}\".gpu_inventory");
    assert_eq!(
        count(&db, &inventory).await,
        first.len() as i64,
        "nothing new got through the cut"
    );

    proxy.restore().await;
    eventually(
        Duration::from_secs(15),
        "the queued batch after recovery",
        || async { (pipeline.stats().batches_exported == 2).then_some(()) },
    )
    .await;
    assert_eq!(
        count(&db, &inventory).await,
        (first.len() + second.len()) as i64
    );
    let events_sql = format!("SELECT count(*) FROM \"{schema}\".gpu_events");
    assert_eq!(
        count(&db, &events_sql).await,
        (first_events.len() + second_events.len()) as i64
    );
    // Re-submitting everything (as after a restart) duplicates nothing.
    pipeline
        .submit(first.clone(), first_events.clone())
        .await
        .unwrap();
    pipeline.flush();
    eventually(
        Duration::from_secs(10),
        "the re-submitted batch",
        || async { (pipeline.stats().batches_exported == 3).then_some(()) },
    )
    .await;
    assert_eq!(
        count(&db, &inventory).await,
        (first.len() + second.len()) as i64
    );
    assert_eq!(
        count(&db, &events_sql).await,
        (first_events.len() + second_events.len()) as i64
    );
    let stats = pipeline.stats();
    assert_eq!(stats.dropped_items, 0);
    assert!(pipeline.health().await.is_healthy());
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_url_the_client_cannot_use_fails_at_build_time_without_echoing_it() {
    let build = |url: &str| {
        let config = PostgresExporterConfig {
            connection: PostgresConnection::Dsn(Secret::new(url)),
            table: PostgresTable {
                schema: None,
                name: "gpu".into(),
            },
            auto_migrate: false,
        };
        PostgresExporter::new(&config)
            .err()
            .map(|error| error.to_string())
            .unwrap_or_default()
    };
    let unknown = build("postgres://u:hunter2@db.example/inv?sslmode=require&no_such_option=1");
    assert!(
        unknown.contains("POSTGRES_DSN is not a URL the PostgreSQL client accepts"),
        "{unknown}"
    );
    let bad_mode = build("postgres://u:hunter2@db.example/inv?sslmode=on");
    assert!(
        bad_mode.contains("POSTGRES_DSN: sslmode=\"on\""),
        "{bad_mode}"
    );
    for error in [unknown, bad_mode] {
        assert!(
            !error.contains("hunter2"),
            "secrets stay out of messages: {error}"
        );
    }
}

/// A database of its own, so the table can carry upstream's default name
/// `gpu` in `public` as upstream left it; dropped by [`UpstreamDatabase::drop_now`].
struct UpstreamDatabase {
    admin: tokio_postgres::Client,
    name: String,
    client: tokio_postgres::Client,
}

impl UpstreamDatabase {
    async fn create(test: &str) -> UpstreamDatabase {
        let admin = postgres_client().await;
        let name = fresh_schema(test);
        admin
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .unwrap();
        let mut config: tokio_postgres::Config = postgres_url().parse().unwrap();
        config.dbname(&name);
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(connection);
        UpstreamDatabase {
            admin,
            name,
            client,
        }
    }

    /// Only the variables upstream gpuid v0.8.3 reads, as its postgres
    /// overlay sets them (sslmode aside: the test server speaks plain TCP).
    fn upstream_variables(&self) -> Vec<(&'static str, String)> {
        let config: tokio_postgres::Config = postgres_url().parse().unwrap();
        let host = match config.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
            _ => "127.0.0.1".to_owned(),
        };
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let password = config
            .get_password()
            .map(|password| String::from_utf8_lossy(password).into_owned())
            // The test server trusts loopback; upstream requires a value.
            .unwrap_or_else(|| "unused".to_owned());
        vec![
            ("EXPORTER_TYPE", "postgres".to_owned()),
            ("CLUSTER_NAME", "prod".to_owned()),
            ("POSTGRES_HOST", host),
            ("POSTGRES_PORT", port.to_string()),
            ("POSTGRES_DB", self.name.clone()),
            (
                "POSTGRES_USER",
                config.get_user().unwrap_or("postgres").to_owned(),
            ),
            ("POSTGRES_PASSWORD", password),
            ("POSTGRES_SSLMODE", "disable".to_owned()),
        ]
    }

    fn exporter_config(&self) -> PostgresExporterConfig {
        let variables = self.upstream_variables();
        let borrowed: Vec<(&str, &str)> = variables
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        match crate::export_support::config_from_vars(&borrowed).exporter {
            gpuid::config::ExporterConfig::Postgres(config) => config,
            other => panic!("not postgres: {other:?}"),
        }
    }

    async fn drop_now(self) {
        self.admin
            .batch_execute(&format!("DROP DATABASE \"{}\" WITH (FORCE)", self.name))
            .await
            .unwrap();
    }
}

/// Upstream gpuid's table as its auto-migrate creates it: one row per
/// export, unique over every column and the read time, four indexes.
const UPSTREAM_DDL: &str = "
CREATE TABLE IF NOT EXISTS gpu (
    id          BIGSERIAL PRIMARY KEY,
    cluster     VARCHAR(255) NOT NULL,
    node        VARCHAR(255) NOT NULL,
    machine     VARCHAR(255) NOT NULL,
    source      VARCHAR(255) NOT NULL,
    chassis     VARCHAR(255) NOT NULL,
    gpu         VARCHAR(255) NOT NULL,
    read_time   TIMESTAMPTZ NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT NOW(),
    UNIQUE (cluster, node, machine, source, chassis, gpu, read_time)
);
CREATE INDEX IF NOT EXISTS idx_gpu_cluster ON gpu (cluster);
CREATE INDEX IF NOT EXISTS idx_gpu_node ON gpu (node);
CREATE INDEX IF NOT EXISTS idx_gpu_read_time ON gpu (read_time);
CREATE INDEX IF NOT EXISTS idx_gpu_created_at ON gpu (created_at);
";

fn epoch(at: &str) -> i64 {
    at.parse::<jiff::Timestamp>().unwrap().as_second()
}

#[tokio::test]
async fn upstreams_filled_table_is_adopted_with_only_upstreams_variables_rows_survive_and_new_gpus_export()
 {
    let database = UpstreamDatabase::create("adopt").await;
    let db = &database.client;
    db.batch_execute(UPSTREAM_DDL).await.unwrap();
    let (records, events) = h100_batch();
    let h100_serial = records[0].gpu.serial.clone().unwrap();
    // A GB200 node upstream exported twice (two GPUs share a board serial,
    // so two serials), and one H100 board that gpuid will see again.
    let upstream_rows = [
        (
            "gb200-old",
            "i-gb200",
            "1821225190819",
            "1761025346615",
            "2026-07-01T00:00:00Z",
        ),
        (
            "gb200-old",
            "i-gb200",
            "1821225190819",
            "1761125340953",
            "2026-07-01T00:00:00Z",
        ),
        (
            "gb200-old",
            "i-gb200",
            "1821225190819",
            "1761025346615",
            "2026-07-02T00:00:00Z",
        ),
        (
            "gb200-old",
            "i-gb200",
            "1821225190819",
            "1761125340953",
            "2026-07-02T00:00:00Z",
        ),
        (
            "h100-0",
            "i-h100-0",
            "N/A",
            h100_serial.as_str(),
            "2026-08-01T00:00:00Z",
        ),
    ];
    for (node, machine, chassis, gpu, at) in upstream_rows {
        db.execute(
            "INSERT INTO gpu (cluster, node, machine, source, chassis, gpu, read_time, created_at)
             VALUES ('prod', $1, $2, 'gpu-operator/nvidia-device-plugin-old', $3, $4, $5::text::timestamptz, $5::text::timestamptz)",
            &[&node, &machine, &chassis, &gpu, &at],
        )
        .await
        .unwrap();
    }

    let config = database.exporter_config();
    assert!(config.auto_migrate, "on without POSTGRES_AUTO_MIGRATE");
    assert_eq!(config.table.name, "gpu");
    let exporter = PostgresExporter::new(&config).unwrap();
    exporter
        .export(&batch(records.clone(), events))
        .await
        .unwrap();

    // The name is our view now; upstream's table is kept whole beside it.
    let kind: String = db
        .query_one(
            "SELECT relkind::text FROM pg_class WHERE oid = 'gpu'::regclass",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(kind, "v");
    assert_eq!(count(db, "SELECT count(*) FROM gpu_upstream").await, 5);

    // Upstream's query on upstream's name: every GPU it exported, plus the
    // new ones, each once (the H100 board seen again is one row).
    let rows = db
        .query(
            "SELECT cluster, node, machine, source, chassis, gpu,
                    extract(epoch FROM read_time)::bigint AS read_time,
                    extract(epoch FROM created_at)::bigint AS created_at
             FROM gpu WHERE cluster = 'prod' ORDER BY gpu",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2 + records.len(), "{rows:?}");
    for serial in ["1761025346615", "1761125340953"] {
        let row = rows
            .iter()
            .find(|row| row.get::<_, String>("gpu") == serial)
            .unwrap_or_else(|| panic!("upstream's GPU {serial} is gone"));
        assert_eq!(row.get::<_, String>("node"), "gb200-old");
        assert_eq!(row.get::<_, String>("machine"), "i-gb200");
        assert_eq!(
            row.get::<_, String>("source"),
            "gpu-operator/nvidia-device-plugin-old"
        );
        assert_eq!(row.get::<_, String>("chassis"), "1821225190819");
        assert_eq!(
            row.get::<_, i64>("created_at"),
            epoch("2026-07-01T00:00:00Z")
        );
        assert_eq!(
            row.get::<_, i64>("read_time"),
            epoch("2026-07-02T00:00:00Z")
        );
    }
    let seen_again = rows
        .iter()
        .find(|row| row.get::<_, String>("gpu") == h100_serial)
        .unwrap();
    assert_eq!(seen_again.get::<_, String>("node"), "h100-1");
    assert_eq!(
        seen_again.get::<_, i64>("created_at"),
        epoch("2026-08-01T00:00:00Z"),
        "first seen by upstream"
    );
    assert_eq!(
        seen_again.get::<_, i64>("read_time"),
        epoch("2026-08-21T08:00:00Z")
    );
    for record in &records {
        let serial = record.gpu.serial.clone().unwrap();
        assert!(
            rows.iter().any(|row| row.get::<_, String>("gpu") == serial
                && row.get::<_, String>("node") == "h100-1"),
            "new GPU {serial} exported"
        );
    }

    // A restart finds everything applied and adopts nothing twice.
    drop(exporter);
    let restarted = PostgresExporter::new(&database.exporter_config()).unwrap();
    restarted.ensure_schema().await.unwrap();
    assert_eq!(
        count(db, "SELECT count(*) FROM gpu").await,
        rows.len() as i64
    );
    drop(restarted);
    database.drop_now().await;
}

#[tokio::test]
async fn a_table_under_the_name_that_upstream_did_not_create_is_refused_and_left_alone() {
    let database = UpstreamDatabase::create("foreign").await;
    let db = &database.client;
    db.batch_execute("CREATE TABLE gpu (id bigint, cluster text, gpu text, price numeric); INSERT INTO gpu VALUES (1, 'prod', 'x', 9)")
        .await
        .unwrap();
    let exporter = PostgresExporter::new(&database.exporter_config()).unwrap();
    let (records, events) = h100_batch();
    let error = exporter.export(&batch(records, events)).await.unwrap_err();
    assert!(error.is_permanent(), "{error}");
    assert!(
        error.to_string().contains("not one upstream gpuid created")
            && error.to_string().contains("POSTGRES_TABLE"),
        "{error}"
    );
    assert_eq!(
        count(db, "SELECT count(*) FROM gpu WHERE price = 9").await,
        1
    );
    let created: i64 = count(
        db,
        "SELECT count(*) FROM pg_class WHERE relname IN ('gpu_inventory', 'gpu_upstream', 'schema_migrations')",
    )
    .await;
    assert_eq!(created, 0, "the failed migration left nothing behind");
    drop(exporter);
    database.drop_now().await;
}
