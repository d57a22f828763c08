//! HTTPS for the loopback listener (`KubeSimBuilder::tls`): a CA made
//! at the first start (kept in the data directory with `--data-dir`, so
//! clients keep trusting a restarted server; credentials.rs), a serving
//! certificate it signs for `localhost`,
//! `127.0.0.1` and `::1`, and a listener that completes TLS handshakes off
//! the accept loop so one slow or plain-HTTP client never holds up others.
//! rustls on ring, the tree's one crypto provider.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, pki_types};
use tokio_rustls::server::TlsStream;
use tokio_util::sync::CancellationToken;

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot generate the TLS certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot build the TLS server configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The generated CA and the serving certificate and key.
pub struct ServingCertificates {
    /// The CA certificate in PEM, for a kubeconfig's `certificate-authority-data`.
    pub ca_pem: String,
    pub ca_der: Vec<u8>,
    certificate: pki_types::CertificateDer<'static>,
    key: Vec<u8>,
    /// When the CA and serving certificate stop being valid.
    not_after: jiff::Timestamp,
}

/// [`ServingCertificates`] as a data directory keeps them: DER in base64.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct StoredCertificates {
    ca_pem: String,
    ca_der: String,
    certificate_der: String,
    key_der: String,
    not_after: i64,
}

impl std::fmt::Debug for ServingCertificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the private key.
        f.debug_struct("ServingCertificates")
            .field("ca_pem", &self.ca_pem)
            .finish_non_exhaustive()
    }
}

/// The validity window: from a day ago (clock skew between processes is
/// nil on one machine, but a day costs nothing) to a year ahead, at
/// midnight UTC of that day, which it returns.
fn validity(params: &mut CertificateParams) -> jiff::Timestamp {
    let now = jiff::Timestamp::now();
    let midnight = |t: jiff::Timestamp| t.to_zoned(jiff::tz::TimeZone::UTC).date();
    let date = |d: jiff::civil::Date| {
        rcgen::date_time_ymd(i32::from(d.year()), d.month() as u8, d.day() as u8)
    };
    let last = midnight(now + jiff::SignedDuration::from_hours(24 * 365));
    params.not_before = date(midnight(now - jiff::SignedDuration::from_hours(24)));
    params.not_after = date(last);
    last.to_zoned(jiff::tz::TimeZone::UTC)
        .map(|z| z.timestamp())
        .unwrap_or(now)
}

impl ServingCertificates {
    /// A new CA (ECDSA P-256) and a serving certificate it signed.
    pub fn generate() -> Result<Self, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let mut ca_name = DistinguishedName::new();
        ca_name.push(DnType::CommonName, "kube-sim CA");
        ca_params.distinguished_name = ca_name;
        let not_after = validity(&mut ca_params);
        let ca = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ])?;
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "kube-sim");
        params.distinguished_name = name;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut params);
        let certificate = params.signed_by(&key, &issuer)?;
        Ok(Self {
            ca_pem: ca.pem(),
            ca_der: ca.der().to_vec(),
            certificate: certificate.der().clone(),
            key: key.serialize_der(),
            not_after,
        })
    }

    /// Whether they stay valid for at least `margin` from now.
    pub(crate) fn valid_for(&self, margin: jiff::SignedDuration) -> bool {
        jiff::Timestamp::now()
            .checked_add(margin)
            .is_ok_and(|then| then < self.not_after)
    }

    pub(crate) fn to_stored(&self) -> StoredCertificates {
        use base64::Engine;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        StoredCertificates {
            ca_pem: self.ca_pem.clone(),
            ca_der: b64(&self.ca_der),
            certificate_der: b64(self.certificate.as_ref()),
            key_der: b64(&self.key),
            not_after: self.not_after.as_second(),
        }
    }

    /// Back from a data directory; `None` when a field does not decode.
    pub(crate) fn from_stored(stored: &StoredCertificates) -> Option<Self> {
        use base64::Engine;
        let decode = |text: &str| base64::engine::general_purpose::STANDARD.decode(text).ok();
        Some(Self {
            ca_pem: stored.ca_pem.clone(),
            ca_der: decode(&stored.ca_der)?,
            certificate: pki_types::CertificateDer::from(decode(&stored.certificate_der)?),
            key: decode(&stored.key_der)?,
            not_after: jiff::Timestamp::from_second(stored.not_after).ok()?,
        })
    }

    /// A rustls server configuration on ring, HTTP/1.1 only (kube-sim's
    /// server speaks HTTP/1.1).
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key =
            pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(self.key.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![self.certificate.clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// Connections whose TLS handshake succeeded, for `axum::serve`.
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    /// Accepts on `listener` until `shutdown`; each handshake runs on its
    /// own task, and a failed one (plain HTTP, a client that distrusts the
    /// CA) only closes that connection.
    pub fn spawn(
        listener: TcpListener,
        config: rustls::ServerConfig,
        shutdown: CancellationToken,
    ) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (sender, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Out of file descriptors and the like: wait, go on.
                        tracing::debug!(error = %e, "kube-sim TLS accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if let Err(e) = stream.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY on a kube-sim connection");
                }
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = sender.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        }
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accept loop ended (shutdown): nothing more will come, and
            // the graceful shutdown stops the server.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_certificates_build_a_server_configuration() {
        let certificates = ServingCertificates::generate().unwrap();
        assert!(
            certificates
                .ca_pem
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
        let config = certificates.server_config().unwrap();
        assert_eq!(config.alpn_protocols, vec![b"http/1.1".to_vec()]);
    }
}
