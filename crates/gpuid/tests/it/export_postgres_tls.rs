//! Every libpq sslmode of the postgres exporter against the local server
//! (TLS on, with the certificate named by its `ssl_cert_file`). Whether a
//! session is encrypted is read from the server's side (`pg_stat_ssl`).
//!
//! Two loopback proxies stand in for servers configured differently: one
//! answers the TLS request with "no" (a server with `ssl = off`), one
//! turns plain sessions away as a `hostssl`-only pg_hba.conf does.

use std::path::PathBuf;

use gpuid::config::{
    ExporterConfig, PostgresConnection, PostgresExporterConfig, PostgresTable, Secret, SslMode,
};
use gpuid::export::{Exporter, FailureClass, Health, PostgresExporter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::export_support::{batch, fresh_schema, h100_batch, postgres_client, postgres_url};

/// SSLRequest: length 8, then the request code 80877103.
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

struct Server {
    port: u16,
    user: String,
    dbname: String,
    /// The certificate the server presents; self-signed, valid for `localhost`.
    certificate: PathBuf,
}

/// The test server's address and certificate, or a failure saying what is wrong.
async fn server() -> Server {
    let url = postgres_url();
    let config: tokio_postgres::Config = url.parse().unwrap_or_else(|error| {
        panic!("GPUFLEET_TEST_POSTGRES_URL={url} is not a PostgreSQL URL: {error}")
    });
    let client = postgres_client().await;
    let ssl: String = client.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    assert_eq!(
        ssl, "on",
        "the TLS tests need a PostgreSQL server with ssl = on at {url}"
    );
    let file: String = client
        .query_one("SHOW ssl_cert_file", &[])
        .await
        .unwrap()
        .get(0);
    let certificate = PathBuf::from(file);
    assert!(
        certificate.is_file(),
        "the server's certificate {} must be readable by the tests",
        certificate.display()
    );
    Server {
        port: config.get_ports().first().copied().unwrap_or(5432),
        user: config.get_user().unwrap_or("postgres").to_owned(),
        dbname: config.get_dbname().unwrap_or("test").to_owned(),
        certificate,
    }
}

fn unrelated_ca() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tls/unrelated-ca.pem"
    )
    .to_owned()
}

impl Server {
    fn params(
        &self,
        host: &str,
        port: u16,
        sslmode: SslMode,
        root: Option<String>,
    ) -> PostgresConnection {
        PostgresConnection::Params {
            host: host.to_owned(),
            port,
            dbname: self.dbname.clone(),
            user: self.user.clone(),
            // Trust authentication: never asked for.
            password: Secret::new("unused"),
            sslmode,
            sslrootcert: root,
        }
    }

    fn certificate(&self) -> Option<String> {
        Some(self.certificate.display().to_string())
    }
}

/// An exporter that never migrates: these tests only connect, so they
/// leave nothing behind in the database.
fn exporter(connection: PostgresConnection) -> PostgresExporter {
    exporter_in(connection, None)
}

fn exporter_in(connection: PostgresConnection, schema: Option<String>) -> PostgresExporter {
    PostgresExporter::new(&PostgresExporterConfig {
        connection,
        auto_migrate: schema.is_some(),
        table: PostgresTable {
            schema,
            name: "gpu".to_owned(),
        },
    })
    .unwrap()
}

async fn encrypted(exporter: &PostgresExporter) -> bool {
    match exporter.session_security().await {
        Ok(session) => {
            assert_eq!(
                session.encrypted,
                session.tls_version.is_some(),
                "{session:?}"
            );
            session.encrypted
        }
        Err(error) => panic!("connecting failed: {error}"),
    }
}

/// The reason an exporter is unhealthy, failing if it is healthy.
async fn unhealthy_reason(exporter: &PostgresExporter) -> String {
    match exporter.health().await {
        Health::Unhealthy { reason } => reason,
        Health::Healthy => panic!("expected the connection to be refused"),
    }
}

#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers the TLS request with "N", like a server with `ssl = off`.
    SaysNoToTls,
    /// Ends plain sessions with a FATAL error, like `hostssl` in pg_hba.conf.
    HostsslOnly,
    /// Accepts the TLS request, then hangs up: a broken TLS set-up.
    HangsUpAfterYes,
}

/// A loopback proxy to the real server that behaves as `behaviour`.
async fn proxy(upstream_port: u16, behaviour: Behaviour) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut first = [0u8; 8];
                if inbound.read_exact(&mut first).await.is_err() {
                    return;
                }
                let is_tls_request = first == SSL_REQUEST;
                let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", upstream_port)).await
                else {
                    return;
                };
                match (behaviour, is_tls_request) {
                    (Behaviour::SaysNoToTls, true) => {
                        if inbound.write_all(b"N").await.is_err() {
                            return;
                        }
                    }
                    (Behaviour::HangsUpAfterYes, true) => {
                        let _ = inbound.write_all(b"S").await;
                        return;
                    }
                    (Behaviour::HostsslOnly, false) => {
                        let _ = inbound
                            .write_all(&fatal(
                                "28000",
                                "no pg_hba.conf entry for this host: encryption required",
                            ))
                            .await;
                        return;
                    }
                    _ => {
                        if outbound.write_all(&first).await.is_err() {
                            return;
                        }
                    }
                }
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    port
}

/// An ErrorResponse message with severity FATAL.
fn fatal(code: &str, message: &str) -> Vec<u8> {
    let mut fields = Vec::new();
    for (tag, value) in [
        (b'S', "FATAL"),
        (b'V', "FATAL"),
        (b'C', code),
        (b'M', message),
    ] {
        fields.push(tag);
        fields.extend_from_slice(value.as_bytes());
        fields.push(0);
    }
    fields.push(0);
    let mut out = vec![b'E'];
    out.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(&fields);
    out
}

#[tokio::test]
async fn require_encrypts_the_session_without_checking_the_certificate_and_exports() {
    let server = server().await;
    let schema = fresh_schema("tls");
    let exporter = exporter_in(
        server.params("127.0.0.1", server.port, SslMode::Require, None),
        Some(schema.clone()),
    );
    let session = exporter.session_security().await.unwrap();
    assert!(session.encrypted, "{session:?}");
    assert!(
        session
            .tls_version
            .as_deref()
            .is_some_and(|v| v.starts_with("TLSv1.")),
        "{session:?}"
    );
    let (records, events) = h100_batch();
    exporter
        .export(&batch(records.clone(), events))
        .await
        .unwrap();
    assert!(exporter.health().await.is_healthy());
    let db = postgres_client().await;
    let rows: i64 = db
        .query_one(
            &format!("SELECT count(*) FROM \"{schema}\".\"gpu_inventory\""),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, records.len() as i64);
    db.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .await
        .unwrap();
}

#[tokio::test]
async fn disable_keeps_the_session_plain() {
    let server = server().await;
    let exporter = exporter(server.params("127.0.0.1", server.port, SslMode::Disable, None));
    assert!(!encrypted(&exporter).await);
}

#[tokio::test]
async fn the_default_configuration_connects_encrypted() {
    let server = server().await;
    let port = server.port.to_string();
    let vars = [
        ("CLUSTER_NAME", "prod"),
        ("EXPORTER_TYPE", "postgres"),
        ("POSTGRES_HOST", "127.0.0.1"),
        ("POSTGRES_PORT", port.as_str()),
        ("POSTGRES_DB", server.dbname.as_str()),
        ("POSTGRES_USER", server.user.as_str()),
        ("POSTGRES_PASSWORD", "unused"),
    ];
    let config = crate::export_support::config_from_vars(&vars);
    let ExporterConfig::Postgres(pg) = config.exporter else {
        panic!("not postgres")
    };
    let exporter = PostgresExporter::new(&pg).unwrap();
    assert_eq!(exporter.sslmode(), SslMode::Require, "upstream's default");
    assert!(encrypted(&exporter).await);
}

#[tokio::test]
async fn verify_full_accepts_the_certificate_when_the_host_is_the_name_in_it() {
    let server = server().await;
    let exporter = exporter(server.params(
        "localhost",
        server.port,
        SslMode::VerifyFull,
        server.certificate(),
    ));
    assert!(encrypted(&exporter).await);
}

#[tokio::test]
async fn verify_full_refuses_a_host_the_certificate_does_not_name() {
    let server = server().await;
    let exporter = exporter(server.params(
        "127.0.0.1",
        server.port,
        SslMode::VerifyFull,
        server.certificate(),
    ));
    let reason = unhealthy_reason(&exporter).await;
    assert!(
        reason.contains("certificate not valid for name \"127.0.0.1\""),
        "{reason}"
    );
    assert!(
        reason.contains("sslmode=verify-full needs the host name"),
        "{reason}"
    );
}

#[tokio::test]
async fn verify_ca_accepts_a_trusted_chain_whatever_the_host_name() {
    let server = server().await;
    let exporter = exporter(server.params(
        "127.0.0.1",
        server.port,
        SslMode::VerifyCa,
        server.certificate(),
    ));
    assert!(encrypted(&exporter).await);
}

#[tokio::test]
async fn verify_ca_without_a_trusted_root_fails_with_a_certificate_error_and_keeps_the_batch() {
    let server = server().await;
    let exporter = exporter(server.params(
        "127.0.0.1",
        server.port,
        SslMode::VerifyCa,
        Some(unrelated_ca()),
    ));
    let reason = unhealthy_reason(&exporter).await;
    assert!(
        reason.contains("invalid peer certificate: UnknownIssuer"),
        "{reason}"
    );
    assert!(
        reason.contains("unrelated-ca.pem"),
        "names the roots used: {reason}"
    );
    assert!(reason.contains("set POSTGRES_SSLROOTCERT"), "{reason}");
    let (records, events) = h100_batch();
    let error = exporter.export(&batch(records, events)).await.unwrap_err();
    assert!(
        matches!(error.class, FailureClass::Transient { .. }),
        "the pipeline keeps the batch until the trust is fixed: {error}"
    );
}

#[tokio::test]
async fn require_with_a_root_certificate_checks_the_chain_as_verify_ca_does() {
    let server = server().await;
    let untrusted = exporter(server.params(
        "127.0.0.1",
        server.port,
        SslMode::Require,
        Some(unrelated_ca()),
    ));
    let reason = unhealthy_reason(&untrusted).await;
    assert!(reason.contains("UnknownIssuer"), "{reason}");
    let trusted = exporter(server.params(
        "127.0.0.1",
        server.port,
        SslMode::Require,
        server.certificate(),
    ));
    assert!(encrypted(&trusted).await);
}

#[tokio::test]
async fn prefer_uses_tls_when_offered_and_goes_plain_when_the_server_refuses_it() {
    let server = server().await;
    let direct = exporter(server.params("127.0.0.1", server.port, SslMode::Prefer, None));
    assert!(encrypted(&direct).await);
    let no_tls = proxy(server.port, Behaviour::SaysNoToTls).await;
    let refused = exporter(server.params("127.0.0.1", no_tls, SslMode::Prefer, None));
    assert!(!encrypted(&refused).await);
}

#[tokio::test]
async fn prefer_goes_plain_when_the_tls_handshake_fails_and_require_does_not() {
    let server = server().await;
    let broken = proxy(server.port, Behaviour::HangsUpAfterYes).await;
    let prefer = exporter(server.params("127.0.0.1", broken, SslMode::Prefer, None));
    assert!(!encrypted(&prefer).await);
    let require = exporter(server.params("127.0.0.1", broken, SslMode::Require, None));
    let reason = unhealthy_reason(&require).await;
    assert!(reason.contains("TLS handshake"), "{reason}");
}

#[tokio::test]
async fn require_fails_against_a_server_that_refuses_tls() {
    let server = server().await;
    let no_tls = proxy(server.port, Behaviour::SaysNoToTls).await;
    let exporter = exporter(server.params("127.0.0.1", no_tls, SslMode::Require, None));
    let reason = unhealthy_reason(&exporter).await;
    assert!(reason.contains("server does not support TLS"), "{reason}");
}

#[tokio::test]
async fn allow_starts_plain_and_switches_to_tls_when_the_server_demands_it() {
    let server = server().await;
    let direct = exporter(server.params("127.0.0.1", server.port, SslMode::Allow, None));
    assert!(!encrypted(&direct).await);
    let tls_only = proxy(server.port, Behaviour::HostsslOnly).await;
    let demanding = exporter(server.params("127.0.0.1", tls_only, SslMode::Allow, None));
    assert!(encrypted(&demanding).await);
    // The proxy really refuses plain sessions.
    let plain = exporter(server.params("127.0.0.1", tls_only, SslMode::Disable, None));
    let reason = unhealthy_reason(&plain).await;
    assert!(reason.contains("encryption required"), "{reason}");
}

#[tokio::test]
async fn a_url_carries_verify_full_and_its_root_certificate() {
    let server = server().await;
    let root: String = server.certificate.display().to_string().replace('%', "%25");
    let url = format!(
        "postgres://{}@localhost:{}/{}?sslmode=verify-full&sslrootcert={root}&connect_timeout=5",
        server.user, server.port, server.dbname
    );
    let good = exporter(PostgresConnection::Dsn(Secret::new(url.clone())));
    assert_eq!(good.sslmode(), SslMode::VerifyFull);
    assert!(encrypted(&good).await);
    let wrong_host = exporter(PostgresConnection::Dsn(Secret::new(
        url.replace("@localhost:", "@127.0.0.1:"),
    )));
    let reason = unhealthy_reason(&wrong_host).await;
    assert!(reason.contains("not valid for name"), "{reason}");
    let untrusted = exporter(PostgresConnection::Dsn(Secret::new(
        url.replace(&root, &unrelated_ca()),
    )));
    let reason = unhealthy_reason(&untrusted).await;
    assert!(
        reason.contains("UnknownIssuer") && reason.contains("sslrootcert in POSTGRES_DSN"),
        "{reason}"
    );
    // A URL without sslmode gets libpq's default.
    let default = exporter(PostgresConnection::Dsn(Secret::new(format!(
        "postgres://{}@127.0.0.1:{}/{}",
        server.user, server.port, server.dbname
    ))));
    assert_eq!(default.sslmode(), SslMode::Prefer);
    assert!(encrypted(&default).await);
}

#[tokio::test]
async fn a_unix_socket_ignores_sslmode_as_libpq_does() {
    let server = server().await;
    let client = postgres_client().await;
    let directories: String = client
        .query_one("SHOW unix_socket_directories", &[])
        .await
        .unwrap()
        .get(0);
    let directory = directories
        .split(',')
        .map(str::trim)
        .find(|dir| !dir.is_empty())
        .unwrap_or_else(|| panic!("the test server listens on no Unix socket"))
        .to_owned();
    let exporter = exporter(server.params(
        &directory,
        server.port,
        SslMode::VerifyFull,
        Some(unrelated_ca()),
    ));
    assert!(!encrypted(&exporter).await);
}
