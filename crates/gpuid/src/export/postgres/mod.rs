//! PostgreSQL: a current-state table keyed by (cluster, GPU key) with
//! first_seen/last_seen, an append-only events table, and upstream's table
//! name as a view with upstream's columns. A table upstream gpuid filled
//! under that name is adopted while migrating (see `adopt`).
//!
//! With `POSTGRES_TABLE=inv.gpu`: `"inv"."gpu_inventory"`,
//! `"inv"."gpu_events"`, the view `"inv"."gpu"` and `"inv"."schema_migrations"`.
//! Every identifier is validated (`[A-Za-z_][A-Za-z0-9_]*`) and quoted;
//! every value is a bind parameter.
//!
//! One batch is one statement (a data-modifying CTE over `UNNEST` arrays),
//! so it is one round trip and atomic; re-exporting it changes nothing:
//! records upsert by key, events insert with `ON CONFLICT DO NOTHING`.
//!
//! Start-up never connects: a database that is down makes the exporter
//! unhealthy (readiness) and exports retry until it is back. Upstream
//! crash-looped instead.

mod adopt;
mod migrations;
mod rows;
mod tls;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::Mutex as AsyncMutex;

pub use migrations::MIGRATIONS;

use super::any::BuildError;
use super::{Batch, ExportError, Exporter, Health};
use crate::config::{
    PostgresConnection, PostgresExporterConfig, PostgresTable, SslMode, split_postgres_url,
};
use tls::{PgConnect, RootCertFile};

const NAME: &str = "postgres";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The configuration's rule, re-checked for tables built by hand (tests,
/// embedders); `gpufleet gpuid run` refuses a longer name at start.
const MAX_TABLE_NAME: usize = crate::config::MAX_POSTGRES_TABLE_NAME;

/// The quoted names derived from `POSTGRES_TABLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresNames {
    /// The bare table name, used as the migration scope.
    pub scope: String,
    pub schema: Option<String>,
    pub view: String,
    pub inventory: String,
    pub events: String,
    pub migrations: String,
    /// Where a table upstream gpuid created under the name is kept once
    /// adopted (qualified and quoted), and its bare name.
    pub upstream: String,
    pub upstream_name: String,
}

impl PostgresNames {
    pub fn new(table: &PostgresTable) -> Result<PostgresNames, BuildError> {
        if table.name.len() > MAX_TABLE_NAME {
            return Err(BuildError::Invalid {
                exporter: NAME,
                problem: format!(
                    "POSTGRES_TABLE name {:?} is longer than {MAX_TABLE_NAME} characters (derived table and index names must fit in 63)",
                    table.name
                ),
            });
        }
        let qualify = |name: &str| match &table.schema {
            Some(schema) => format!("{}.{}", quote(schema), quote(name)),
            None => quote(name),
        };
        Ok(PostgresNames {
            scope: table.name.clone(),
            schema: table.schema.clone(),
            view: qualify(&table.name),
            inventory: qualify(&format!("{}_inventory", table.name)),
            events: qualify(&format!("{}_events", table.name)),
            migrations: qualify("schema_migrations"),
            upstream: qualify(&format!("{}_upstream", table.name)),
            upstream_name: format!("{}_upstream", table.name),
        })
    }

    /// A migration's SQL with this configuration's names filled in.
    pub fn render(&self, sql: &str) -> String {
        sql.replace(
            "{inventory_node_index}",
            &quote(&format!("{}_inventory_node_idx", self.scope)),
        )
        .replace(
            "{inventory_last_seen_index}",
            &quote(&format!("{}_inventory_last_seen_idx", self.scope)),
        )
        .replace(
            "{events_gpu_index}",
            &quote(&format!("{}_events_gpu_idx", self.scope)),
        )
        .replace("{inventory}", &self.inventory)
        .replace("{events}", &self.events)
        .replace("{view}", &self.view)
    }
}

/// Identifiers reaching here are already `[A-Za-z_][A-Za-z0-9_]*`;
/// doubling quotes anyway keeps this safe on its own.
fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// How the session to the server is protected, as the server sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSecurity {
    /// `pg_stat_ssl.ssl` of this backend.
    pub encrypted: bool,
    /// For example `TLSv1.3`; `None` on a plain session.
    pub tls_version: Option<String>,
}

pub struct PostgresExporter {
    pool: Pool,
    sslmode: SslMode,
    /// For the hint on certificate errors.
    root_file: Option<RootCertFile>,
    names: PostgresNames,
    auto_migrate: bool,
    upsert_sql: String,
    /// Set once the migrations ran (or were found applied).
    migrated: AsyncMutex<bool>,
}

impl PostgresExporter {
    /// Validates the settings and prepares a pool; does not connect.
    pub fn new(config: &PostgresExporterConfig) -> Result<PostgresExporter, BuildError> {
        let (mut pg_config, sslmode, root_file) = pg_config(&config.connection)?;
        pg_config.connect_timeout(CONNECT_TIMEOUT);
        pg_config.application_name("gpuid");
        let connect =
            PgConnect::new(sslmode, root_file.as_ref()).map_err(|problem| BuildError::Invalid {
                exporter: NAME,
                problem,
            })?;
        let manager = Manager::from_connect(
            pg_config,
            connect,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(4)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|error| BuildError::Invalid {
                exporter: NAME,
                problem: format!("connection pool: {error}"),
            })?;
        let names = PostgresNames::new(&config.table)?;
        Ok(PostgresExporter {
            pool,
            sslmode,
            root_file,
            upsert_sql: rows::batch_statement(&names),
            names,
            auto_migrate: config.auto_migrate,
            migrated: AsyncMutex::new(false),
        })
    }

    pub fn names(&self) -> &PostgresNames {
        &self.names
    }

    /// The effective sslmode (a URL without one gets libpq's `prefer`).
    pub fn sslmode(&self) -> SslMode {
        self.sslmode
    }

    /// Whether the pooled session is encrypted, from the server's side
    /// (`pg_stat_ssl`); logged at start-up and used by the TLS tests.
    pub async fn session_security(&self) -> Result<SessionSecurity, ExportError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await
            .map_err(|e| classify(e, "reading pg_stat_ssl"))?;
        Ok(SessionSecurity {
            encrypted: row.get(0),
            tls_version: row.get(1),
        })
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, ExportError> {
        self.pool.get().await.map_err(|error| {
            // deadpool's message hides the cause ("error performing TLS
            // handshake"); the chain says which check failed.
            let mut message = error_chain(&error);
            if let Some(hint) =
                tls::certificate_hint(self.sslmode, self.root_file.as_ref(), &message)
            {
                message = format!("{message} ({hint})");
            }
            ExportError::transient(
                NAME,
                format!("connecting (sslmode={}): {message}", self.sslmode.as_str()),
            )
        })
    }

    /// Applies pending migrations (auto-migrate) or checks they were
    /// applied; remembered once it succeeded.
    pub async fn ensure_schema(&self) -> Result<(), ExportError> {
        let mut migrated = self.migrated.lock().await;
        if *migrated {
            return Ok(());
        }
        let mut client = self.client().await?;
        if self.auto_migrate {
            self.migrate(&mut client).await?;
        } else {
            let applied = applied_version(&client, &self.names).await?;
            let latest = MIGRATIONS.last().map_or(0, |(version, _, _)| *version);
            if applied < latest {
                // Transient: batches wait in the queue until an operator
                // applies the schema, instead of being dropped.
                return Err(ExportError::transient(
                    NAME,
                    format!(
                        "schema of {} is at version {applied}, this gpuid needs {latest}: set POSTGRES_AUTO_MIGRATE=true or apply the migrations",
                        self.names.view
                    ),
                ));
            }
        }
        *migrated = true;
        drop(client);
        drop(migrated);
        // Once per process: operators see whether the session is encrypted.
        match self.session_security().await {
            Ok(session) => tracing::info!(
                table = %self.names.view,
                sslmode = self.sslmode.as_str(),
                encrypted = session.encrypted,
                tls_version = session.tls_version.as_deref().unwrap_or("none"),
                "PostgreSQL exporter connected"
            ),
            Err(error) => tracing::debug!(%error, "could not read pg_stat_ssl"),
        }
        Ok(())
    }

    async fn migrate(&self, client: &mut deadpool_postgres::Object) -> Result<(), ExportError> {
        let names = &self.names;
        let transaction = client
            .transaction()
            .await
            .map_err(|e| classify(e, "starting migration"))?;
        // Serialises replicas migrating at the same time; released at commit.
        transaction
            .execute(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                &[&format!("gpuid-migrations:{}", names.migrations)],
            )
            .await
            .map_err(|e| classify(e, "taking the migration lock"))?;
        if let Some(schema) = &names.schema {
            transaction
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {}", quote(schema)))
                .await
                .map_err(|e| classify(e, "creating the schema"))?;
        }
        transaction
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS {} (
                    scope text NOT NULL,
                    version integer NOT NULL,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now(),
                    PRIMARY KEY (scope, version))",
                names.migrations
            ))
            .await
            .map_err(|e| classify(e, "creating schema_migrations"))?;
        let rows = transaction
            .query(
                &format!("SELECT version FROM {} WHERE scope = $1", names.migrations),
                &[&names.scope],
            )
            .await
            .map_err(|e| classify(e, "reading schema_migrations"))?;
        let applied: Vec<i32> = rows.iter().map(|row| row.get(0)).collect();
        // Before the view's migration needs the name.
        let adopting = adopt::set_aside(&transaction, names).await?;
        for (version, name, sql) in MIGRATIONS {
            if applied.contains(version) {
                continue;
            }
            transaction
                .batch_execute(&names.render(sql))
                .await
                .map_err(|e| classify(e, &format!("migration {version} ({name})")))?;
            transaction
                .execute(
                    &format!(
                        "INSERT INTO {} (scope, version, name) VALUES ($1, $2, $3)",
                        names.migrations
                    ),
                    &[&names.scope, version, name],
                )
                .await
                .map_err(|e| classify(e, "recording a migration"))?;
            tracing::info!(table = %names.view, version, name, "applied PostgreSQL migration");
        }
        if adopting {
            adopt::carry_rows(&transaction, names).await?;
        }
        transaction
            .commit()
            .await
            .map_err(|e| classify(e, "committing migrations"))
    }
}

async fn applied_version(
    client: &deadpool_postgres::Object,
    names: &PostgresNames,
) -> Result<i32, ExportError> {
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&names.migrations])
        .await
        .map_err(|e| classify(e, "looking for schema_migrations"))?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let version: Option<i32> = client
        .query_one(
            &format!(
                "SELECT max(version) FROM {} WHERE scope = $1",
                names.migrations
            ),
            &[&names.scope],
        )
        .await
        .map_err(|e| classify(e, "reading schema_migrations"))?
        .get(0);
    Ok(version.unwrap_or(0))
}

impl Exporter for PostgresExporter {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn export(&self, batch: &Batch) -> Result<(), ExportError> {
        self.ensure_schema().await?;
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&self.upsert_sql)
            .await
            .map_err(|e| classify(e, "preparing the batch statement"))?;
        let columns = rows::Columns::from_batch(batch);
        client
            .query_one(&statement, &columns.params())
            .await
            .map_err(|e| classify(e, "writing the batch"))?;
        Ok(())
    }

    async fn health(&self) -> Health {
        let check = async {
            let client = self.client().await?;
            client
                .simple_query("SELECT 1")
                .await
                .map_err(|e| classify(e, "ping"))?;
            drop(client);
            self.ensure_schema().await
        };
        match check.await {
            Ok(()) => Health::Healthy,
            Err(error) => Health::unhealthy(error.message),
        }
    }
}

/// The client configuration without TLS settings (the connector applies
/// them), the sslmode and the root-certificate file.
fn pg_config(
    connection: &PostgresConnection,
) -> Result<(tokio_postgres::Config, SslMode, Option<RootCertFile>), BuildError> {
    let invalid = |problem: String| BuildError::Invalid {
        exporter: NAME,
        problem,
    };
    match connection {
        PostgresConnection::Dsn(dsn) => {
            let parts = split_postgres_url(dsn.expose())
                .map_err(|problem| invalid(format!("POSTGRES_DSN: {problem}")))?;
            let config = parts
                .url
                .expose()
                .parse::<tokio_postgres::Config>()
                // The parser's message may quote the URL, which holds the password.
                .map_err(|_| {
                    invalid("POSTGRES_DSN is not a URL the PostgreSQL client accepts".to_owned())
                })?;
            let root = parts.sslrootcert.map(|path| RootCertFile {
                path,
                source: "sslrootcert in POSTGRES_DSN",
            });
            // libpq's default when the URL does not say.
            Ok((config, parts.sslmode.unwrap_or(SslMode::Prefer), root))
        }
        PostgresConnection::Params {
            host,
            port,
            dbname,
            user,
            password,
            sslmode,
            sslrootcert,
        } => {
            let mut config = tokio_postgres::Config::new();
            config
                .host(host)
                .port(*port)
                .dbname(dbname)
                .user(user)
                .password(password.expose());
            let root = sslrootcert.as_ref().map(|path| RootCertFile {
                path: path.clone(),
                source: "POSTGRES_SSLROOTCERT",
            });
            Ok((config, *sslmode, root))
        }
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message
}

/// Connection problems, resource shortages, operator intervention,
/// serialisation conflicts and lock timeouts may pass; syntax, constraint,
/// permission and missing-object errors will not.
fn classify(error: tokio_postgres::Error, doing: &str) -> ExportError {
    let transient = match error.code() {
        None => true,
        Some(code) => {
            let code = code.code();
            ["08", "53", "57", "58", "40"]
                .iter()
                .any(|class| code.starts_with(class))
                || code == "55P03"
        }
    };
    let detail = match error.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut message = error.to_string();
            if let Some(source) = std::error::Error::source(&error) {
                message = format!("{message}: {source}");
            }
            message
        }
    };
    let message = format!("{doing}: {detail}");
    if transient {
        ExportError::transient(NAME, message)
    } else {
        ExportError::permanent(NAME, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(schema: Option<&str>, name: &str) -> PostgresTable {
        PostgresTable {
            schema: schema.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    #[test]
    fn names_derive_from_postgres_table_quoted_and_schema_qualified() {
        let names = PostgresNames::new(&table(Some("inv"), "gpu")).unwrap();
        assert_eq!(names.view, r#""inv"."gpu""#);
        assert_eq!(names.inventory, r#""inv"."gpu_inventory""#);
        assert_eq!(names.events, r#""inv"."gpu_events""#);
        assert_eq!(names.migrations, r#""inv"."schema_migrations""#);
        let plain = PostgresNames::new(&table(None, "serials")).unwrap();
        assert_eq!(plain.inventory, r#""serials_inventory""#);
        let sql = plain.render(MIGRATIONS[0].2);
        assert!(sql.contains(
            r#"CREATE INDEX IF NOT EXISTS "serials_inventory_node_idx" ON "serials_inventory""#
        ));
        assert!(!sql.contains('{'), "every placeholder is filled: {sql}");
        assert!(!plain.render(MIGRATIONS[1].2).contains('{'));
    }

    #[test]
    fn table_names_too_long_for_derived_identifiers_are_refused() {
        assert!(PostgresNames::new(&table(None, &"g".repeat(MAX_TABLE_NAME))).is_ok());
        let error = PostgresNames::new(&table(None, &"g".repeat(MAX_TABLE_NAME + 1))).unwrap_err();
        assert!(error.to_string().contains("63"), "{error}");
    }

    #[test]
    fn migrations_are_numbered_from_one_without_gaps() {
        for (position, (version, _, _)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version as usize, position + 1);
        }
    }
}
