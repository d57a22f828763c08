//! Which destination an exporter writes to, as a stable key (pure).
//!
//! The collector remembers "already exported" on each Node. That memory is
//! only true for the destination that received the inventory: after
//! switching from stdout to PostgreSQL the database has nothing, whatever
//! the Node says. So the state is kept per exporter identity, the type plus
//! the destination, and a destination gpuid has not written to yet starts
//! from nothing and receives the full inventory once.
//!
//! What counts as the destination (credentials, timeouts and TLS settings
//! do not: changing them reaches the same data):
//!
//! | type | destination |
//! |---|---|
//! | stdout | the process's standard output (one identity) |
//! | http | the endpoint URL |
//! | postgres | host, port, database and `[schema.]table` |
//! | s3 | endpoint (AWS when unset), bucket, prefix and body format |
//!
//! The key is `<type>-<first 10 hex digits of SHA-256(destination)>`: short
//! enough for an annotation name, free of secrets (a URL may hold a
//! password), and different for different destinations.

use sha2::{Digest, Sha256};

use super::{ExporterConfig, ExporterKind, PostgresConnection, PostgresExporterConfig};

/// An exporter's type and destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExporterIdentity {
    pub kind: ExporterKind,
    /// The destination as text without credentials, for people (it is
    /// written next to the state so `kubectl describe node` tells whose
    /// state it is).
    pub destination: String,
    /// What the key is computed from: the destination in full (may hold
    /// secrets, so it is never shown).
    hashed: String,
}

impl ExporterIdentity {
    /// The identity of the configured exporter.
    pub fn of(exporter: &ExporterConfig) -> ExporterIdentity {
        match exporter {
            ExporterConfig::Stdout => {
                ExporterIdentity::new(ExporterKind::Stdout, "stdout", "stdout")
            }
            ExporterConfig::Http(http) => ExporterIdentity::new(
                ExporterKind::Http,
                &without_credentials(&http.endpoint),
                http.endpoint.trim(),
            ),
            ExporterConfig::Postgres(postgres) => {
                let destination = postgres_destination(postgres);
                ExporterIdentity::new(ExporterKind::Postgres, &destination, &destination)
            }
            ExporterConfig::S3(s3) => {
                let endpoint = s3
                    .endpoint
                    .as_deref()
                    .map(|endpoint| endpoint.trim().trim_end_matches('/').to_owned())
                    .unwrap_or_else(|| "aws".to_owned());
                let destination = format!(
                    "s3://{}/{} endpoint={endpoint} format={}",
                    s3.bucket,
                    s3.prefix,
                    s3.format.as_str()
                );
                ExporterIdentity::new(ExporterKind::S3, &destination, &destination)
            }
        }
    }

    fn new(kind: ExporterKind, destination: &str, hashed: &str) -> ExporterIdentity {
        ExporterIdentity {
            kind,
            destination: destination.to_owned(),
            hashed: hashed.to_owned(),
        }
    }

    /// `<type>-<10 hex digits>`, for example `postgres-3f1c9a0b7e`: a valid
    /// annotation name part, the same for the same destination in every
    /// replica and release.
    pub fn key(&self) -> String {
        let digest = Sha256::new()
            .chain_update(self.kind.as_str())
            .chain_update([0])
            .chain_update(&self.hashed)
            .finalize();
        let hex: String = digest.iter().take(5).map(|b| format!("{b:02x}")).collect();
        format!("{}-{hex}", self.kind.as_str())
    }
}

/// `scheme://host[:port]/path` of a URL: user info and query dropped.
fn without_credentials(url: &str) -> String {
    let url = url.trim();
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(slash) => rest.split_at(slash),
        None => (rest, ""),
    };
    let host = authority.rsplit('@').next().unwrap_or_default();
    format!("{scheme}://{host}{path}")
}

/// `postgres://host:port/db table=[schema.]name`, from the URL or the
/// separate parameters alike (so switching between the two spellings of
/// the same database is no new destination).
fn postgres_destination(postgres: &PostgresExporterConfig) -> String {
    let (host, port, dbname) = match &postgres.connection {
        PostgresConnection::Params {
            host, port, dbname, ..
        } => (host.trim().to_ascii_lowercase(), *port, dbname.clone()),
        PostgresConnection::Dsn(dsn) => url_host_port_db(dsn.expose()),
    };
    let table = match &postgres.table.schema {
        Some(schema) => format!("{schema}.{}", postgres.table.name),
        None => postgres.table.name.clone(),
    };
    format!("postgres://{host}:{port}/{dbname} table={table}")
}

/// Host, port (5432 when absent) and database of a `postgres://` URL.
fn url_host_port_db(url: &str) -> (String, u16, String) {
    let url = url.trim();
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, dbname) = rest.split_once('/').unwrap_or((rest, ""));
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let (host, port) = match host_port.rsplit_once(':') {
        // `[::1]:5432` splits after the bracket; a bare `[::1]` does not parse as a port.
        Some((host, port)) if !port.contains(']') => match port.parse::<u16>() {
            Ok(port) => (host, port),
            Err(_) => (host_port, 5432),
        },
        _ => (host_port, 5432),
    };
    (host.to_ascii_lowercase(), port, dbname.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        HttpExporterConfig, PostgresTable, S3ExporterConfig, S3Format, Secret, SslMode,
    };

    fn postgres(connection: PostgresConnection, table: &str) -> ExporterConfig {
        ExporterConfig::Postgres(PostgresExporterConfig {
            connection,
            table: PostgresTable {
                schema: None,
                name: table.to_owned(),
            },
            auto_migrate: false,
        })
    }

    fn params(host: &str, password: &str) -> PostgresConnection {
        PostgresConnection::Params {
            host: host.to_owned(),
            port: 5432,
            dbname: "inv".to_owned(),
            user: "gpuid".to_owned(),
            password: Secret::new(password),
            sslmode: SslMode::Require,
            sslrootcert: None,
        }
    }

    fn s3(bucket: &str, prefix: &str) -> ExporterConfig {
        ExporterConfig::S3(S3ExporterConfig {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
            region: "us-east-1".to_owned(),
            partition_pattern: "year=%Y".to_owned(),
            endpoint: Some("http://127.0.0.1:5000/".to_owned()),
            force_path_style: true,
            format: S3Format::Csv,
        })
    }

    fn key(exporter: &ExporterConfig) -> String {
        ExporterIdentity::of(exporter).key()
    }

    #[test]
    fn each_type_and_each_destination_has_its_own_key() {
        let keys = [
            key(&ExporterConfig::Stdout),
            key(&postgres(params("db", "pw"), "gpu")),
            key(&postgres(params("other-db", "pw"), "gpu")),
            key(&postgres(params("db", "pw"), "serials")),
            key(&s3("inventory", "")),
            key(&s3("inventory", "cluster-a")),
            key(&s3("archive", "")),
        ];
        let mut unique = keys.to_vec();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "{keys:?}");
        for key in &keys {
            let (kind, hex) = key.rsplit_once('-').unwrap();
            assert!(["stdout", "postgres", "s3"].contains(&kind), "{key}");
            assert_eq!(hex.len(), 10, "{key}");
            assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{key}");
        }
    }

    #[test]
    fn credentials_are_not_part_of_the_destination() {
        assert_eq!(
            key(&postgres(params("db", "old"), "gpu")),
            key(&postgres(params("DB", "new"), "gpu"))
        );
        let url = postgres(
            PostgresConnection::Dsn(Secret::new(
                "postgres://gpuid:s3cret@db:5432/inv?sslmode=require",
            )),
            "gpu",
        );
        assert_eq!(
            key(&url),
            key(&postgres(params("db", "pw"), "gpu")),
            "a URL and the separate parameters for one database are one destination"
        );
        let identity = ExporterIdentity::of(&url);
        assert_eq!(identity.destination, "postgres://db:5432/inv table=gpu");
        assert!(!identity.destination.contains("s3cret"));
        let http = ExporterIdentity::of(&ExporterConfig::Http(HttpExporterConfig {
            endpoint: "https://user:token@collector.example/ingest?key=abc".to_owned(),
            timeout: std::time::Duration::from_secs(1),
            auth_token: None,
            headers: Vec::new(),
        }));
        assert_eq!(http.destination, "https://collector.example/ingest");
    }
}
