//! The exporter selected by `EXPORTER_TYPE`, built from the validated
//! configuration.

use super::s3::{S3Credentials, S3Settings};
use super::{
    Batch, ExportError, Exporter, Health, HttpExporter, PostgresExporter, S3Exporter,
    StdoutExporter,
};
use crate::config::ExporterConfig;

/// Why an exporter could not be built. Only configuration problems: no
/// backend is contacted at build time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("failed to initialize {exporter} exporter: {problem}")]
    Invalid {
        exporter: &'static str,
        problem: String,
    },
}

/// What the exporters need besides `ExporterConfig`, supplied by the binary.
#[derive(Debug, Clone, Default)]
pub struct ExportContext {
    /// This replica's identity (the pod name), used in S3 keys.
    pub replica: String,
    pub s3_credentials: Option<S3Credentials>,
}

impl ExportContext {
    /// What the binary passes: this replica's name and the static AWS
    /// credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_SESSION_TOKEN`) read through `env`.
    pub fn from_lookup(
        replica: impl Into<String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> ExportContext {
        ExportContext {
            replica: replica.into(),
            s3_credentials: S3Credentials::from_lookup(env),
        }
    }
}

pub enum AnyExporter {
    Stdout(StdoutExporter),
    Http(HttpExporter),
    Postgres(PostgresExporter),
    S3(S3Exporter),
}

impl AnyExporter {
    pub fn from_config(
        config: &ExporterConfig,
        context: ExportContext,
    ) -> Result<AnyExporter, BuildError> {
        Ok(match config {
            ExporterConfig::Stdout => AnyExporter::Stdout(StdoutExporter::stdout()),
            ExporterConfig::Http(http) => AnyExporter::Http(HttpExporter::new(http)?),
            ExporterConfig::Postgres(postgres) => {
                AnyExporter::Postgres(PostgresExporter::new(postgres)?)
            }
            ExporterConfig::S3(s3) => AnyExporter::S3(S3Exporter::new(S3Settings {
                config: s3.clone(),
                replica: context.replica,
                credentials: context.s3_credentials,
            })?),
        })
    }
}

impl Exporter for AnyExporter {
    fn name(&self) -> &'static str {
        match self {
            AnyExporter::Stdout(exporter) => exporter.name(),
            AnyExporter::Http(exporter) => exporter.name(),
            AnyExporter::Postgres(exporter) => exporter.name(),
            AnyExporter::S3(exporter) => exporter.name(),
        }
    }

    async fn export(&self, batch: &Batch) -> Result<(), ExportError> {
        match self {
            AnyExporter::Stdout(exporter) => exporter.export(batch).await,
            AnyExporter::Http(exporter) => exporter.export(batch).await,
            AnyExporter::Postgres(exporter) => exporter.export(batch).await,
            AnyExporter::S3(exporter) => exporter.export(batch).await,
        }
    }

    async fn health(&self) -> Health {
        match self {
            AnyExporter::Stdout(exporter) => exporter.health().await,
            AnyExporter::Http(exporter) => exporter.health().await,
            AnyExporter::Postgres(exporter) => exporter.health().await,
            AnyExporter::S3(exporter) => exporter.health().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_takes_the_static_aws_credentials_from_the_lookup() {
        let env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("AKIDEXAMPLE".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("secret".to_owned()),
            _ => None,
        };
        let context = ExportContext::from_lookup("gpuid-0", env);
        assert_eq!(context.replica, "gpuid-0");
        let credentials = context
            .s3_credentials
            .unwrap_or_else(|| panic!("no credentials"));
        assert_eq!(credentials.access_key_id, "AKIDEXAMPLE");
        assert_eq!(credentials.secret_access_key.expose(), "secret");
        assert!(credentials.session_token.is_none());
        assert!(
            ExportContext::from_lookup("gpuid-0", |_| None)
                .s3_credentials
                .is_none()
        );
    }
}
