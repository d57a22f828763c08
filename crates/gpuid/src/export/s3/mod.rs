//! S3 (or any S3-compatible store): one object per batch for its records
//! and one for its events.
//!
//! Key: `[S3_PREFIX/]<S3_PARTITION_PATTERN>/<replica>-<batch id>-records.<ext>`
//! (and `-events`). The partition comes from the batch's sealing time (UTC)
//! and the batch id from its content, so a retry rewrites the same object
//! instead of adding a duplicate, two replicas never write the same key
//! (the replica name is in it), and two different batches never share one
//! (upstream's millisecond keys could overwrite each other, defect 8).
//!
//! Formats (`S3Format`): CSV with a header row (upstream's seven columns
//! first, in upstream's order, then ours) or NDJSON (full records).
//!
//! Requests are SigV4-presigned by `rusty-s3` and sent through the shared
//! hyper client; credentials are static (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, optional `AWS_SESSION_TOKEN`).

mod format;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use jiff::Timestamp;
use rusty_s3::actions::{HeadBucket, PutObject};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

pub use format::{S3Format, render_partition};

use super::any::BuildError;
use super::client::{HttpsClient, SendError, https_client, send};
use super::error::{classify_status, parse_retry_after};
use super::{Batch, ExportError, Exporter, Health};
use crate::config::{S3ExporterConfig, Secret};

const NAME: &str = "s3";
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Presigned URLs are used at once; a short life limits replay.
const SIGNATURE_LIFETIME: Duration = Duration::from_secs(300);

/// Everything the s3 exporter needs beyond `S3ExporterConfig`.
#[derive(Debug, Clone)]
pub struct S3Settings {
    /// Includes the body format (`S3_FORMAT`).
    pub config: S3ExporterConfig,
    /// This replica's identity (pod name), part of every key.
    pub replica: String,
    /// `None` sends unsigned requests (anonymous buckets, test servers).
    pub credentials: Option<S3Credentials>,
}

#[derive(Debug, Clone)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: Secret,
    pub session_token: Option<Secret>,
}

impl S3Credentials {
    /// The static part of the AWS chain: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
    pub fn from_lookup(env: impl Fn(&str) -> Option<String>) -> Option<S3Credentials> {
        let non_blank = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        Some(S3Credentials {
            access_key_id: non_blank("AWS_ACCESS_KEY_ID")?,
            secret_access_key: Secret::new(non_blank("AWS_SECRET_ACCESS_KEY")?),
            session_token: non_blank("AWS_SESSION_TOKEN").map(Secret::new),
        })
    }
}

pub struct S3Exporter {
    client: HttpsClient,
    bucket: Bucket,
    credentials: Option<Credentials>,
    prefix: String,
    partition_pattern: String,
    format: S3Format,
    replica: String,
}

impl S3Exporter {
    pub fn new(settings: S3Settings) -> Result<S3Exporter, BuildError> {
        let invalid = |problem: String| BuildError::Invalid {
            exporter: NAME,
            problem,
        };
        let config = &settings.config;
        let endpoint = match &config.endpoint {
            Some(endpoint) => endpoint.clone(),
            None => format!("https://s3.{}.amazonaws.com", config.region),
        };
        let endpoint = endpoint
            .parse()
            .map_err(|error| invalid(format!("S3_ENDPOINT {endpoint:?} is not a URL: {error}")))?;
        let style = if config.force_path_style {
            UrlStyle::Path
        } else {
            UrlStyle::VirtualHost
        };
        let bucket = Bucket::new(endpoint, style, config.bucket.clone(), config.region.clone())
            .map_err(|error| {
                invalid(format!(
                    "S3 bucket {:?} at this endpoint: {error} (S3_FORCE_PATH_STYLE=true is needed for IP addresses and most S3-compatible servers)",
                    config.bucket
                ))
            })?;
        let credentials = settings.credentials.map(|c| match c.session_token {
            Some(token) => Credentials::new_with_token(
                c.access_key_id,
                c.secret_access_key.expose(),
                token.expose(),
            ),
            None => Credentials::new(c.access_key_id, c.secret_access_key.expose()),
        });
        let replica = format::key_safe(&settings.replica);
        if replica.is_empty() {
            return Err(invalid(
                "the replica name (pod name) is required for S3 keys".to_owned(),
            ));
        }
        Ok(S3Exporter {
            client: https_client().map_err(invalid)?,
            bucket,
            credentials,
            prefix: config.prefix.clone(),
            partition_pattern: config.partition_pattern.clone(),
            format: config.format,
            replica,
        })
    }

    /// The key of one part (`records` or `events`) of `batch`.
    pub fn key_for(&self, batch: &Batch, part: &str) -> String {
        object_key(
            &self.prefix,
            &self.partition_pattern,
            &self.replica,
            batch,
            part,
            self.format,
        )
    }

    async fn put(&self, key: &str, body: String, count: usize) -> Result<(), ExportError> {
        let count = count.to_string();
        let mut action = PutObject::new(&self.bucket, self.credentials.as_ref(), key);
        // Signed, because S3 refuses unsigned x-amz-* headers on presigned
        // requests; the same values are sent below.
        let metadata = [
            ("content-type", self.format.content_type()),
            ("x-amz-meta-source", "gpuid"),
            ("x-amz-meta-format", self.format.as_str()),
            ("x-amz-meta-count", count.as_str()),
        ];
        for (name, value) in metadata {
            action.headers_mut().insert(name, value);
        }
        let url = action.sign(SIGNATURE_LIFETIME);
        let mut request = Request::builder().method(Method::PUT).uri(url.as_str());
        for (name, value) in metadata {
            request = request.header(name, value);
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|error| ExportError::permanent(NAME, format!("building request: {error}")))?;
        let answer =
            send(&self.client, request, REQUEST_TIMEOUT)
                .await
                .map_err(|error| match error {
                    SendError::Timeout(_) | SendError::Transport(_) => {
                        ExportError::transient(NAME, format!("PUT {key}: {error}"))
                    }
                })?;
        let retry_after = answer
            .headers
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| parse_retry_after(value, Timestamp::now()));
        match classify_status(answer.status, retry_after) {
            None => Ok(()),
            Some(class) => Err(ExportError {
                exporter: NAME,
                class,
                message: format!(
                    "PUT {key} failed with status {}: {}",
                    answer.status,
                    answer.body_excerpt.trim()
                ),
            }),
        }
    }
}

/// `[prefix/]<partition>/<replica>-<batch id>-<part>.<ext>`.
pub fn object_key(
    prefix: &str,
    partition_pattern: &str,
    replica: &str,
    batch: &Batch,
    part: &str,
    format: S3Format,
) -> String {
    let partition = render_partition(partition_pattern, batch.sealed_at);
    let name = format!("{replica}-{}-{part}.{}", batch.id, format.extension());
    [prefix, partition.trim_matches('/'), &name]
        .into_iter()
        .filter(|segment| !segment.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

impl Exporter for S3Exporter {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn export(&self, batch: &Batch) -> Result<(), ExportError> {
        if !batch.records.is_empty() {
            let body = self.format.records(&batch.records);
            self.put(&self.key_for(batch, "records"), body, batch.records.len())
                .await?;
        }
        if !batch.events.is_empty() {
            let body = self.format.events(&batch.events);
            self.put(&self.key_for(batch, "events"), body, batch.events.len())
                .await?;
        }
        Ok(())
    }

    async fn health(&self) -> Health {
        let url = HeadBucket::new(&self.bucket, self.credentials.as_ref()).sign(SIGNATURE_LIFETIME);
        let request = match Request::builder()
            .method(Method::HEAD)
            .uri(url.as_str())
            .body(Full::new(Bytes::new()))
        {
            Ok(request) => request,
            Err(error) => return Health::unhealthy(format!("building request: {error}")),
        };
        match send(&self.client, request, Duration::from_secs(5)).await {
            Err(error) => Health::unhealthy(format!("HEAD bucket {}: {error}", self.bucket.name())),
            Ok(answer) if (200..300).contains(&answer.status) => Health::Healthy,
            Ok(answer) => Health::unhealthy(format!(
                "HEAD bucket {} answered {}{}",
                self.bucket.name(),
                answer.status,
                if answer.status == 404 {
                    " (no such bucket)"
                } else {
                    ""
                }
            )),
        }
    }
}
