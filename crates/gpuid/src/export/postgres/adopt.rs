//! Adopting the table upstream gpuid created under the `POSTGRES_TABLE`
//! name: one row per export, columns `cluster, node, machine, source,
//! chassis, gpu, read_time`.
//!
//! Our schema puts a view under that name, so a base table there would make
//! the view's migration fail. Inside the migration transaction the table is
//! renamed to `<table>_upstream` (kept whole, as the export history), the
//! migrations create the inventory table and the view, and then each GPU of
//! the history becomes one inventory row: the latest sighting's node,
//! machine, source and chassis, `first_seen`/`last_seen` from the earliest
//! and latest `read_time`. Reading the view under the old name therefore
//! answers every GPU upstream exported, with upstream's columns.
//!
//! The adopted rows are keyed `upstream-serial/<serial>` (upstream knew no
//! UUID); the first export of a GPU with that board serial replaces its
//! adopted row and keeps its `first_seen` (see `rows::batch_statement`).

use super::{ExportError, NAME, PostgresNames, classify, quote};

/// The columns upstream's table has and the carried rows are built from.
pub const UPSTREAM_COLUMNS: [&str; 7] = [
    "cluster",
    "node",
    "machine",
    "source",
    "chassis",
    "gpu",
    "read_time",
];

/// The key prefix of a GPU adopted from upstream's table.
pub const ADOPTED_KEY_PREFIX: &str = "upstream-serial/";

/// What is under the `POSTGRES_TABLE` name before migrating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExistingRelation {
    /// Nothing: the migrations create the view.
    Absent,
    /// Our view (or another kind of relation the view's migration decides on).
    NotATable,
    /// A base table with these columns.
    Table { columns: Vec<String> },
}

/// Whether a base table under the name can be adopted; the error says what
/// it lacks. Pure, so the decision is tested without a server.
pub fn check_upstream_columns(view: &str, columns: &[String]) -> Result<(), String> {
    let missing: Vec<&str> = UPSTREAM_COLUMNS
        .iter()
        .copied()
        .filter(|wanted| !columns.iter().any(|column| column == wanted))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{view} is an existing table, but not one upstream gpuid created (no column {}): gpuid neither adopts nor replaces it; set POSTGRES_TABLE to another name or move the table",
            missing.join(", ")
        ))
    }
}

/// Builds each GPU of upstream's history into one inventory row. A board
/// serial upstream could not read (`N/A`, empty) is no identity, so those
/// rows are told apart by machine as well. Absent chassis spellings become
/// NULL, as our own records have them (the view shows `unknown`).
pub fn carry_rows_sql(names: &PostgresNames) -> String {
    format!(
        r#"INSERT INTO {inventory} (cluster, gpu_key, serial, chassis_serial, node_name, node_uid,
    machine_id, source_pod, record, first_seen, last_seen)
SELECT latest.cluster, latest.gpu_key, latest.serial, latest.chassis, latest.node, '',
    latest.machine, latest.source,
    jsonb_build_object('adopted_from', $1::text, 'cluster', latest.cluster, 'node', latest.node,
        'machine', latest.machine, 'source', latest.source, 'chassis', latest.chassis,
        'gpu', latest.gpu, 'upstream_rows', span.upstream_rows),
    span.first_seen, span.last_seen
FROM (
    SELECT DISTINCT ON (cluster, gpu_key) *
    FROM (
        SELECT cluster::text, node::text, machine::text, source::text, gpu::text, read_time,
            NULLIF(NULLIF(NULLIF(btrim(chassis::text), ''), 'N/A'), 'unknown') AS chassis,
            NULLIF(NULLIF(btrim(gpu::text), ''), 'N/A') AS serial,
            CASE WHEN NULLIF(NULLIF(btrim(gpu::text), ''), 'N/A') IS NULL
                THEN machine::text || '/upstream-gpu/' || gpu::text
                ELSE '{prefix}' || btrim(gpu::text) END AS gpu_key
        FROM {upstream}
    ) keyed
    ORDER BY cluster, gpu_key, read_time DESC
) latest
JOIN (
    SELECT cluster::text, gpu_key, min(read_time) AS first_seen, max(read_time) AS last_seen,
        count(*) AS upstream_rows
    FROM (
        SELECT cluster, read_time,
            CASE WHEN NULLIF(NULLIF(btrim(gpu::text), ''), 'N/A') IS NULL
                THEN machine::text || '/upstream-gpu/' || gpu::text
                ELSE '{prefix}' || btrim(gpu::text) END AS gpu_key
        FROM {upstream}
    ) keyed
    GROUP BY cluster, gpu_key
) span ON span.cluster = latest.cluster AND span.gpu_key = latest.gpu_key
ON CONFLICT (cluster, gpu_key) DO NOTHING"#,
        inventory = names.inventory,
        upstream = names.upstream,
        prefix = ADOPTED_KEY_PREFIX,
    )
}

pub(super) async fn existing_relation(
    transaction: &tokio_postgres::Transaction<'_>,
    names: &PostgresNames,
) -> Result<ExistingRelation, ExportError> {
    let row = transaction
        .query_opt(
            "SELECT c.relkind::text,
                    ARRAY(SELECT a.attname::text FROM pg_attribute a
                          WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
             FROM pg_class c WHERE c.oid = to_regclass($1)",
            &[&names.view],
        )
        .await
        .map_err(|e| classify(e, "looking at the POSTGRES_TABLE relation"))?;
    Ok(match row {
        None => ExistingRelation::Absent,
        Some(row) => {
            let kind: String = row.get(0);
            // Ordinary and partitioned tables; views, materialised views and
            // the rest are left to the view's migration.
            if kind == "r" || kind == "p" {
                ExistingRelation::Table {
                    columns: row.get(1),
                }
            } else {
                ExistingRelation::NotATable
            }
        }
    })
}

/// Renames upstream's table aside when one is under the name; returns
/// whether it did (its rows are then carried after the migrations).
pub(super) async fn set_aside(
    transaction: &tokio_postgres::Transaction<'_>,
    names: &PostgresNames,
) -> Result<bool, ExportError> {
    let ExistingRelation::Table { columns } = existing_relation(transaction, names).await? else {
        return Ok(false);
    };
    check_upstream_columns(&names.view, &columns)
        .map_err(|problem| ExportError::permanent(NAME, problem))?;
    let taken: bool = transaction
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&names.upstream])
        .await
        .map_err(|e| classify(e, "looking for the set-aside name"))?
        .get(0);
    if taken {
        return Err(ExportError::permanent(
            NAME,
            format!(
                "{} is upstream gpuid's table and would be kept as {}, but that name is taken: rename or drop one of them",
                names.view, names.upstream
            ),
        ));
    }
    transaction
        .batch_execute(&format!(
            "ALTER TABLE {} RENAME TO {}",
            names.view,
            quote(&names.upstream_name)
        ))
        .await
        .map_err(|e| classify(e, "setting upstream gpuid's table aside"))?;
    tracing::info!(
        table = %names.view,
        kept_as = %names.upstream,
        "adopting upstream gpuid's table: its rows are kept and carried into the inventory"
    );
    Ok(true)
}

pub(super) async fn carry_rows(
    transaction: &tokio_postgres::Transaction<'_>,
    names: &PostgresNames,
) -> Result<u64, ExportError> {
    let carried = transaction
        .execute(&carry_rows_sql(names), &[&names.upstream])
        .await
        .map_err(|e| classify(e, "carrying upstream gpuid's rows into the inventory"))?;
    tracing::info!(table = %names.view, gpus = carried, "carried upstream gpuid's rows");
    Ok(carried)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PostgresTable;

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn a_table_with_upstreams_columns_is_adopted_and_any_other_table_is_refused() {
        let upstream = strings(&[
            "id",
            "cluster",
            "node",
            "machine",
            "source",
            "chassis",
            "gpu",
            "read_time",
            "created_at",
        ]);
        assert_eq!(check_upstream_columns("\"gpu\"", &upstream), Ok(()));
        let foreign = strings(&["id", "cluster", "gpu", "price"]);
        let problem = check_upstream_columns("\"gpu\"", &foreign).unwrap_err();
        assert!(
            problem.contains("no column node, machine, source, chassis, read_time"),
            "{problem}"
        );
        assert!(problem.contains("POSTGRES_TABLE"), "{problem}");
    }

    #[test]
    fn the_carry_reads_the_set_aside_table_into_the_inventory() {
        let names = PostgresNames::new(&PostgresTable {
            schema: Some("inv".into()),
            name: "gpu".into(),
        })
        .unwrap();
        assert_eq!(names.upstream, r#""inv"."gpu_upstream""#);
        let sql = carry_rows_sql(&names);
        assert!(
            sql.starts_with(r#"INSERT INTO "inv"."gpu_inventory""#),
            "{sql}"
        );
        assert!(sql.contains(r#"FROM "inv"."gpu_upstream""#), "{sql}");
        assert!(!sql.contains('{'), "every placeholder is filled: {sql}");
    }
}
