//! JSON POST of each batch to `HTTP_ENDPOINT`.
//!
//! Body: `{"id": <batch id>, "sealed_at": …, "records": [...], "events":
//! [...]}`. Headers: `Content-Type: application/json`, `User-Agent`,
//! `Idempotency-Key` (the batch id, the same on every retry of the batch so
//! a receiver can drop duplicates), `X-Records-Count`, `X-Events-Count`,
//! `Authorization: Bearer <HTTP_AUTH_TOKEN>` when set, and every
//! `HTTP_HEADERS` entry. 2xx is success; 408, 429 and 5xx are retried
//! (honouring `Retry-After`); any other status is permanent.

use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue, RETRY_AFTER, USER_AGENT};
use http::{Method, Request, Uri};
use http_body_util::Full;
use jiff::Timestamp;

use super::any::BuildError;
use super::client::{HttpsClient, SendError, https_client, send};
use super::error::{FailureClass, classify_status, parse_retry_after};
use super::{Batch, ExportError, Exporter, Health};
use crate::config::HttpExporterConfig;

const NAME: &str = "http";
const USER_AGENT_VALUE: &str = concat!("gpufleet-gpuid/", env!("CARGO_PKG_VERSION"));

pub struct HttpExporter {
    client: HttpsClient,
    endpoint: Uri,
    timeout: Duration,
    /// Authorization first (if any), then the user's extra headers. Values
    /// are marked sensitive so hyper never logs them.
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl HttpExporter {
    pub fn new(config: &HttpExporterConfig) -> Result<HttpExporter, BuildError> {
        let invalid = |what: String| BuildError::Invalid {
            exporter: NAME,
            problem: what,
        };
        let endpoint: Uri = config
            .endpoint
            .parse()
            .map_err(|error| invalid(format!("HTTP_ENDPOINT is not a URL: {error}")))?;
        let mut headers = Vec::new();
        if let Some(token) = &config.auth_token {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                .map_err(|_| invalid("HTTP_AUTH_TOKEN is not a valid header value".to_owned()))?;
            value.set_sensitive(true);
            headers.push((AUTHORIZATION, value));
        }
        for header in &config.headers {
            let name = HeaderName::from_bytes(header.name.as_bytes()).map_err(|_| {
                invalid(format!(
                    "HTTP_HEADERS: {} is not a header name",
                    header.name
                ))
            })?;
            let mut value = HeaderValue::from_str(header.value.expose()).map_err(|_| {
                invalid(format!(
                    "HTTP_HEADERS: the value of {} is not a valid header value",
                    header.name
                ))
            })?;
            value.set_sensitive(true);
            headers.push((name, value));
        }
        let client = https_client().map_err(invalid)?;
        Ok(HttpExporter {
            client,
            endpoint,
            timeout: config.timeout,
            headers,
        })
    }

    fn request(
        &self,
        method: Method,
        body: Bytes,
        extra: &[(HeaderName, String)],
    ) -> Result<Request<Full<Bytes>>, http::Error> {
        let mut builder = Request::builder()
            .method(method)
            .uri(self.endpoint.clone())
            .header(USER_AGENT, USER_AGENT_VALUE);
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        for (name, value) in extra {
            builder = builder.header(name, value);
        }
        builder.body(Full::new(body))
    }
}

impl Exporter for HttpExporter {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn export(&self, batch: &Batch) -> Result<(), ExportError> {
        let body = serde_json::to_vec(batch)
            .map_err(|error| ExportError::permanent(NAME, format!("encoding batch: {error}")))?;
        let extra = [
            (CONTENT_TYPE, "application/json".to_owned()),
            (
                HeaderName::from_static("idempotency-key"),
                batch.id.to_string(),
            ),
            (
                HeaderName::from_static("x-records-count"),
                batch.records.len().to_string(),
            ),
            (
                HeaderName::from_static("x-events-count"),
                batch.events.len().to_string(),
            ),
        ];
        let request = self
            .request(Method::POST, Bytes::from(body), &extra)
            .map_err(|error| ExportError::permanent(NAME, format!("building request: {error}")))?;
        let answer =
            send(&self.client, request, self.timeout)
                .await
                .map_err(|error| match error {
                    SendError::Timeout(_) | SendError::Transport(_) => {
                        ExportError::transient(NAME, format!("POST {}: {error}", self.endpoint))
                    }
                })?;
        let retry_after = answer
            .headers
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, Timestamp::now()));
        match classify_status(answer.status, retry_after) {
            None => Ok(()),
            Some(class) => Err(ExportError {
                exporter: NAME,
                class,
                message: format!(
                    "HTTP request failed with status {}{}",
                    answer.status,
                    excerpt_suffix(&answer.body_excerpt)
                ),
            }),
        }
    }

    async fn health(&self) -> Health {
        let request = match self.request(Method::HEAD, Bytes::new(), &[]) {
            Ok(request) => request,
            Err(error) => return Health::unhealthy(format!("building request: {error}")),
        };
        match send(
            &self.client,
            request,
            self.timeout.min(Duration::from_secs(5)),
        )
        .await
        {
            Err(error) => Health::unhealthy(format!("HEAD {}: {error}", self.endpoint)),
            // 405: the receiver is up but only takes POST, which is fine.
            Ok(answer) if answer.status == 405 => Health::Healthy,
            Ok(answer) => match classify_status(answer.status, None) {
                None => Health::Healthy,
                Some(_) if answer.status < 400 => Health::Healthy,
                Some(FailureClass::Permanent | FailureClass::Transient { .. }) => {
                    Health::unhealthy(format!("HEAD {} answered {}", self.endpoint, answer.status))
                }
            },
        }
    }
}

fn excerpt_suffix(excerpt: &str) -> String {
    let excerpt = excerpt.trim();
    if excerpt.is_empty() {
        String::new()
    } else {
        format!(": {excerpt}")
    }
}
