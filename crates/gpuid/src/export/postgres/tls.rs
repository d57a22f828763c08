//! TLS to PostgreSQL with libpq's `sslmode` semantics, on rustls + ring.
//!
//! tokio-postgres itself knows only `disable`, `prefer` and `require` and
//! leaves certificate checks to the connector, so the modes are built here:
//!
//! | sslmode | attempts | certificate check |
//! |---|---|---|
//! | `disable` | plain | — |
//! | `allow` | plain, then TLS if that fails | none |
//! | `prefer` | TLS (plain if the server refuses TLS), then plain if that fails | none |
//! | `require` | TLS only | none; with a root certificate, as `verify-ca` (libpq) |
//! | `verify-ca` | TLS only | chain to a trusted root |
//! | `verify-full` | TLS only | chain and host name |
//!
//! Roots: the `sslrootcert` file when given (it replaces the system store,
//! as in libpq), else the system's store through rustls-native-certs
//! (`SSL_CERT_FILE` / `SSL_CERT_DIR` are honoured). That crate is already in
//! the tree through hyper-rustls, which the http and s3 exporters use with
//! the same store, so an operator configures trust once for the image.

use std::fmt;
use std::sync::Arc;

use deadpool_postgres::Connect;
use futures::future::BoxFuture;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres::{Client, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::config::SslMode;

/// Where the trusted roots come from, named as the user configured them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RootCertFile {
    pub path: String,
    /// `POSTGRES_SSLROOTCERT` or `sslrootcert in POSTGRES_DSN`.
    pub source: &'static str,
}

/// How the certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Nothing,
    Chain,
    ChainAndName,
}

fn check_for(mode: SslMode, has_root_file: bool) -> Check {
    match mode {
        SslMode::Disable | SslMode::Allow | SslMode::Prefer => Check::Nothing,
        SslMode::Require if has_root_file => Check::Chain,
        SslMode::Require => Check::Nothing,
        SslMode::VerifyCa => Check::Chain,
        SslMode::VerifyFull => Check::ChainAndName,
    }
}

/// A pool connector implementing `mode`.
pub(super) struct PgConnect {
    mode: SslMode,
    tls: MakeRustlsConnect,
}

impl PgConnect {
    /// Loads the roots the mode needs; fails on an unreadable or empty
    /// root file, or on an empty system store when a check needs one.
    pub fn new(mode: SslMode, root_file: Option<&RootCertFile>) -> Result<PgConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let check = check_for(mode, root_file.is_some());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|error| format!("TLS configuration: {error}"))?;
        let config = match check {
            Check::Nothing => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(EncryptOnly {
                    provider: Arc::clone(&provider),
                }))
                .with_no_client_auth(),
            Check::Chain | Check::ChainAndName => {
                let roots = Arc::new(roots(root_file, mode)?);
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(roots, Arc::clone(&provider))
                        .build()
                        .map_err(|error| format!("certificate verifier: {error}"))?;
                if check == Check::ChainAndName {
                    builder.with_webpki_verifier(webpki).with_no_client_auth()
                } else {
                    builder
                        .dangerous()
                        .with_custom_certificate_verifier(Arc::new(ChainOnly { webpki }))
                        .with_no_client_auth()
                }
            }
        };
        Ok(PgConnect {
            mode,
            tls: MakeRustlsConnect::new(config),
        })
    }
}

fn roots(root_file: Option<&RootCertFile>, mode: SslMode) -> Result<RootCertStore, String> {
    let mut store = RootCertStore::empty();
    match root_file {
        Some(file) => {
            let bytes = std::fs::read(&file.path).map_err(|error| {
                format!(
                    "{} {:?}: cannot read the file: {error}",
                    file.source, file.path
                )
            })?;
            let mut count = 0usize;
            for cert in CertificateDer::pem_slice_iter(&bytes) {
                let cert = cert.map_err(|error| {
                    format!(
                        "{} {:?}: not a PEM certificate file: {error}",
                        file.source, file.path
                    )
                })?;
                store.add(cert).map_err(|error| {
                    format!(
                        "{} {:?}: unusable certificate: {error}",
                        file.source, file.path
                    )
                })?;
                count += 1;
            }
            if count == 0 {
                return Err(format!(
                    "{} {:?}: no certificate in the file",
                    file.source, file.path
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::debug!(%error, "skipped part of the system certificate store");
            }
            let (added, _ignored) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(format!(
                    "sslmode={} needs trusted CA certificates and the system store has none: set POSTGRES_SSLROOTCERT (or sslrootcert in POSTGRES_DSN) to the CA file",
                    mode.as_str()
                ));
            }
        }
    }
    Ok(store)
}

/// Encrypts without authenticating the server (libpq's `require`,
/// `prefer` and `allow`). The handshake signatures are still checked, so
/// the session key belongs to whoever holds the certificate's key.
struct EncryptOnly {
    provider: Arc<CryptoProvider>,
}

impl fmt::Debug for EncryptOnly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EncryptOnly")
    }
}

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted root; the name may differ.
/// rustls checks the name after the chain, so a name error means the chain
/// was good.
#[derive(Debug)]
struct ChainOnly {
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

type Connected = (Client, JoinHandle<()>);

async fn plain(config: &tokio_postgres::Config) -> Result<Connected, tokio_postgres::Error> {
    let mut config = config.clone();
    config.ssl_mode(PgSslMode::Disable);
    let (client, connection) = config.connect(NoTls).await?;
    Ok((client, spawn_connection(connection)))
}

async fn encrypted(
    config: &tokio_postgres::Config,
    tls: MakeRustlsConnect,
    mode: PgSslMode,
) -> Result<Connected, tokio_postgres::Error> {
    let mut config = config.clone();
    config.ssl_mode(mode);
    let (client, connection) = config.connect(tls).await?;
    Ok((client, spawn_connection(connection)))
}

fn spawn_connection<F>(connection: F) -> JoinHandle<()>
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "PostgreSQL connection closed with an error");
        }
    })
}

impl Connect for PgConnect {
    fn connect(
        &self,
        pg_config: &tokio_postgres::Config,
    ) -> BoxFuture<'_, Result<Connected, tokio_postgres::Error>> {
        let config = pg_config.clone();
        Box::pin(async move {
            // libpq ignores sslmode on Unix-domain sockets: there is no
            // network to protect and no host name to check.
            let unix_only = !config.get_hosts().is_empty()
                && config
                    .get_hosts()
                    .iter()
                    .all(|host| !matches!(host, tokio_postgres::config::Host::Tcp(_)));
            if unix_only {
                return plain(&config).await;
            }
            match self.mode {
                SslMode::Disable => plain(&config).await,
                // libpq: plain first; TLS only if the server turned plain down
                // (pg_hba `hostssl`). The last error is the telling one.
                SslMode::Allow => match plain(&config).await {
                    Ok(connected) => Ok(connected),
                    Err(first) => {
                        tracing::debug!(error = %first, "plain PostgreSQL connection failed; trying TLS (sslmode=allow)");
                        encrypted(&config, self.tls.clone(), PgSslMode::Require).await
                    }
                },
                // tokio-postgres already goes plain when the server answers
                // the TLS request with "no"; a failed handshake falls back too.
                SslMode::Prefer => {
                    match encrypted(&config, self.tls.clone(), PgSslMode::Prefer).await {
                        Ok(connected) => Ok(connected),
                        Err(first) => {
                            tracing::debug!(error = %first, "TLS PostgreSQL connection failed; trying plain (sslmode=prefer)");
                            plain(&config).await
                        }
                    }
                }
                SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                    encrypted(&config, self.tls.clone(), PgSslMode::Require).await
                }
            }
        })
    }
}

/// What to change, for a connection error caused by the certificate
/// (`None` for other errors). rustls names the failed check in `error`.
pub(super) fn certificate_hint(
    mode: SslMode,
    root_file: Option<&RootCertFile>,
    error: &str,
) -> Option<String> {
    if !error.contains("invalid peer certificate") {
        return None;
    }
    if error.contains("not valid for name") {
        return Some(format!(
            "sslmode={} needs the host name gpuid connects to in the server's certificate: connect by that name, or use sslmode=verify-ca",
            mode.as_str()
        ));
    }
    let roots = match root_file {
        Some(file) => format!("the CA certificates in {} {:?}", file.source, file.path),
        None => "the system's CA certificates".to_owned(),
    };
    Some(format!(
        "under sslmode={} the server's certificate must be signed by {roots}: set POSTGRES_SSLROOTCERT (or sslrootcert in POSTGRES_DSN) to the CA file that signed it",
        mode.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_checks_the_chain_only_when_a_root_file_is_given_as_libpq_does() {
        assert_eq!(check_for(SslMode::Require, false), Check::Nothing);
        assert_eq!(check_for(SslMode::Require, true), Check::Chain);
        assert_eq!(check_for(SslMode::Prefer, true), Check::Nothing);
        assert_eq!(check_for(SslMode::Allow, true), Check::Nothing);
        assert_eq!(check_for(SslMode::VerifyCa, false), Check::Chain);
        assert_eq!(check_for(SslMode::VerifyFull, true), Check::ChainAndName);
    }

    #[test]
    fn certificate_errors_get_a_hint_saying_which_setting_to_change() {
        let file = RootCertFile {
            path: "/ca.pem".into(),
            source: "POSTGRES_SSLROOTCERT",
        };
        let untrusted = certificate_hint(
            SslMode::VerifyCa,
            Some(&file),
            "invalid peer certificate: UnknownIssuer",
        )
        .unwrap_or_default();
        assert!(
            untrusted.contains("POSTGRES_SSLROOTCERT \"/ca.pem\""),
            "{untrusted}"
        );
        let system = certificate_hint(
            SslMode::VerifyFull,
            None,
            "invalid peer certificate: Expired",
        )
        .unwrap_or_default();
        assert!(system.contains("the system's CA certificates"), "{system}");
        let name = certificate_hint(
            SslMode::VerifyFull,
            Some(&file),
            "invalid peer certificate: certificate not valid for name \"10.0.0.1\"",
        )
        .unwrap_or_default();
        assert!(name.contains("use sslmode=verify-ca"), "{name}");
        assert_eq!(
            certificate_hint(SslMode::Require, None, "connection refused"),
            None
        );
    }

    #[test]
    fn an_unreadable_or_empty_root_file_is_an_error_naming_its_source() {
        let missing = RootCertFile {
            path: "/nonexistent/root.pem".into(),
            source: "POSTGRES_SSLROOTCERT",
        };
        let error = PgConnect::new(SslMode::VerifyFull, Some(&missing))
            .err()
            .unwrap_or_default();
        assert!(
            error.starts_with("POSTGRES_SSLROOTCERT \"/nonexistent/root.pem\": cannot read"),
            "{error}"
        );
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "no pem here\n").unwrap();
        let empty = RootCertFile {
            path: empty.display().to_string(),
            source: "sslrootcert in POSTGRES_DSN",
        };
        let error = PgConnect::new(SslMode::VerifyCa, Some(&empty))
            .err()
            .unwrap_or_default();
        assert!(
            error.contains("sslrootcert in POSTGRES_DSN") && error.contains("no certificate"),
            "{error}"
        );
        // Modes that never check the chain do not read the file at all.
        assert!(PgConnect::new(SslMode::Prefer, Some(&missing)).is_ok());
    }
}
