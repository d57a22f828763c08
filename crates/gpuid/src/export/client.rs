//! The HTTP client shared by the http and s3 exporters: hyper-util on
//! rustls with the `ring` provider (kube's stack, one provider in the tree).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub(crate) type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Response bodies are read for error messages only; a misbehaving server
/// cannot make us buffer more than this.
const MAX_ERROR_BODY: usize = 512;

/// Fails only if rustls rejects its own default protocol versions.
pub(crate) fn https_client() -> Result<HttpsClient, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(Arc::clone(&provider))
    {
        Ok(builder) => builder,
        Err(error) => {
            // Plain http:// still works; https:// then fails per request
            // with a certificate error.
            tracing::warn!(%error, "no system CA certificates; https endpoints will be rejected");
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|error| format!("TLS configuration: {error}"))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    let connector = builder
        .https_or_http()
        .enable_http1()
        .wrap_connector(plain_connector());
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(60))
        .build(connector))
}

fn plain_connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.enforce_http(false);
    connector.set_connect_timeout(Some(Duration::from_secs(10)));
    connector.set_nodelay(true);
    connector
}

/// Outcome of one request: a status, headers and at most
/// [`MAX_ERROR_BODY`] bytes of body (lossy UTF-8), or a transport error.
pub(crate) struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body_excerpt: String,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SendError {
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Transport(String),
}

pub(crate) async fn send(
    client: &HttpsClient,
    request: Request<Full<Bytes>>,
    timeout: Duration,
) -> Result<Answer, SendError> {
    let exchange = async {
        let response: Response<hyper::body::Incoming> = client
            .request(request)
            .await
            .map_err(|error| SendError::Transport(error_chain(&error)))?;
        let (parts, body) = response.into_parts();
        // Drain the body so the connection can be reused.
        let bytes = body
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        let excerpt = &bytes[..bytes.len().min(MAX_ERROR_BODY)];
        Ok(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body_excerpt: String::from_utf8_lossy(excerpt).into_owned(),
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(result) => result,
        Err(_) => Err(SendError::Timeout(timeout)),
    }
}

/// hyper's errors say little at the top level ("client error (Connect)");
/// the causes say what happened ("Connection refused").
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
