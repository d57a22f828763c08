//! gpuid configuration, compatible with upstream's environment variables.
//!
//! Upstream read core knobs strictly and exporter knobs leniently (a typo
//! silently became the default). Here every knob goes through one parser:
//! a malformed value always fails, naming the variable (or flag) and the
//! rule, and all problems are reported together. Messages keep upstream's
//! wording where upstream had one.
//!
//! Precedence: `--flag` beats the environment beats the default. For string
//! knobs a variable set to the empty string counts as set (upstream), so
//! `NAMESPACE=""` fails rather than defaulting; for typed knobs empty means
//! default (also upstream).

mod exporters;
mod identity;
pub mod knobs;
mod pipeline;
mod secret;
mod selector;
mod source;
pub mod values;

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::Duration;

pub use exporters::{
    DEFAULT_POSTGRES_TABLE, HttpExporterConfig, HttpHeader, LONGEST_DERIVED_SUFFIX,
    MAX_POSTGRES_TABLE_NAME, PostgresConnection, PostgresExporterConfig, PostgresTable,
    PostgresUrlParts, S3ExporterConfig, S3Format, SslMode, split_postgres_url,
};
pub use identity::ExporterIdentity;
pub use knobs::{KNOBS, Knob, KnobGroup};
pub use pipeline::ExportPipelineSettings;
pub use secret::Secret;
pub use source::{ConfigError, ConfigErrors};

use exporters::to_duration;
use source::Parser;
use values::{format_go_duration as go, is_dns_label, parse_bool, parse_float, parse_go_int};

const SECOND: i128 = 1_000_000_000;
const MAX_WORKERS: i64 = 100;
const MAX_TIMEOUT: i128 = 600 * SECOND;

/// Which backend receives records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExporterKind {
    Stdout,
    Http,
    Postgres,
    S3,
}

impl ExporterKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ExporterKind::Stdout => "stdout",
            ExporterKind::Http => "http",
            ExporterKind::Postgres => "postgres",
            ExporterKind::S3 => "s3",
        }
    }

    fn parse(raw: &str) -> Option<ExporterKind> {
        Some(match raw.trim() {
            "stdout" => ExporterKind::Stdout,
            "http" => ExporterKind::Http,
            "postgres" => ExporterKind::Postgres,
            "s3" => ExporterKind::S3,
            _ => return None,
        })
    }
}

/// The selected exporter with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExporterConfig {
    Stdout,
    Http(HttpExporterConfig),
    Postgres(PostgresExporterConfig),
    S3(S3ExporterConfig),
}

impl ExporterConfig {
    pub fn kind(&self) -> ExporterKind {
        match self {
            ExporterConfig::Stdout => ExporterKind::Stdout,
            ExporterConfig::Http(_) => ExporterKind::Http,
            ExporterConfig::Postgres(_) => ExporterKind::Postgres,
            ExporterConfig::S3(_) => ExporterKind::S3,
        }
    }
}

/// The same parser as the global `--log-level` flag (`LOG_LEVEL` feeds
/// both), so the two can never disagree on a spelling.
pub use controller_kit::telemetry::LogLevel;

/// Lease-based leader election (client-go semantics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    pub enabled: bool,
    pub lease_namespace: String,
    pub lease_name: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Required when enabled; the identity is `<pod name>_<random uuid>`.
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub exporter: ExporterConfig,
    pub cluster_name: String,
    /// One or more namespaces, in the order given, without duplicates.
    pub namespaces: Vec<String>,
    /// A syntactically valid Kubernetes label selector.
    pub label_selector: String,
    pub container: String,
    pub workers: u32,
    pub timeout: Duration,
    /// `Duration::ZERO` disables periodic resync.
    pub resync: Duration,
    pub qps: f32,
    pub burst: u32,
    pub kubeconfig: Option<String>,
    pub log_level: LogLevel,
    pub server_port: u16,
    pub leader_election: LeaderElectionConfig,
    /// Batching, retries and queue of the export pipeline (`EXPORT_*`).
    pub export_pipeline: ExportPipelineSettings,
}

impl Config {
    /// Reads every knob through `env` (for example `|name| std::env::var(name).ok()`)
    /// and resolves `*_FILE` secrets with `read_file` (for example
    /// `|path| std::fs::read_to_string(path)`).
    pub fn from_lookup(
        env: impl Fn(&str) -> Option<String>,
        read_file: impl Fn(&Path) -> io::Result<String>,
    ) -> Result<Config, ConfigErrors> {
        Config::from_sources(&BTreeMap::new(), env, read_file)
    }

    /// Like [`Config::from_lookup`], with command-line flags that win over
    /// the environment. `flags` maps a knob's flag name (`workers` or
    /// `--workers`, see [`KNOBS`]) to the value given; unknown names are
    /// errors.
    pub fn from_sources(
        flags: &BTreeMap<String, String>,
        env: impl Fn(&str) -> Option<String>,
        read_file: impl Fn(&Path) -> io::Result<String>,
    ) -> Result<Config, ConfigErrors> {
        let mut parser = Parser::new(flags, &env, &read_file);
        let config = parse(&mut parser);
        if parser.errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigErrors {
                errors: parser.errors,
            })
        }
    }
}

/// Reads and validates every knob, in upstream's validation order, then the
/// exporter knobs. Problems go to `parser.errors`; the returned value is only
/// meaningful when there are none.
fn parse(parser: &mut Parser<'_>) -> Config {
    let exporter_kind = exporter_kind(parser);
    let cluster_name = required_string(
        parser,
        &knobs::CLUSTER_NAME,
        "cluster name must be specified",
    );
    let container = required_string(parser, &knobs::CONTAINER, "container must be specified");
    let namespaces = namespaces(parser);
    let label_selector = label_selector(parser);
    let workers = workers(parser);
    let timeout = timeout(parser);
    let (qps, burst) = rate_limits(parser);
    let resync = parser.duration(&knobs::RESYNC, 0);
    if resync < 0 {
        parser.violation(
            &knobs::RESYNC,
            format!(
                "resync period must be >= 0 (0 disables periodic resync): got {}",
                go(resync)
            ),
        );
    }
    let server_port = server_port(parser);
    let kubeconfig = parser
        .non_blank(&knobs::KUBECONFIG)
        .map(|setting| setting.value.trim().to_owned());
    let log_level = parser.typed(
        &knobs::LOG_LEVEL,
        "log level",
        &format!("unknown log level (use {})", LogLevel::ACCEPTED),
        LogLevel::parse,
        LogLevel::Info,
    );
    let leader_election = leader_election(parser);

    let http = exporters::http(parser, exporter_kind == Some(ExporterKind::Http));
    let postgres = exporters::postgres(parser, exporter_kind == Some(ExporterKind::Postgres));
    let s3 = exporters::s3(parser, exporter_kind == Some(ExporterKind::S3));
    let export_pipeline = pipeline::export_pipeline(parser);
    let exporter = match exporter_kind {
        Some(ExporterKind::Http) => ExporterConfig::Http(http),
        Some(ExporterKind::Postgres) => ExporterConfig::Postgres(postgres),
        Some(ExporterKind::S3) => ExporterConfig::S3(s3),
        Some(ExporterKind::Stdout) | None => ExporterConfig::Stdout,
    };

    Config {
        exporter,
        cluster_name: cluster_name.trim().to_owned(),
        namespaces,
        label_selector: label_selector.trim().to_owned(),
        container: container.trim().to_owned(),
        workers,
        timeout: to_duration(timeout),
        resync: to_duration(resync),
        qps,
        burst,
        kubeconfig,
        log_level,
        server_port,
        leader_election,
        export_pipeline,
    }
}

fn required_string(parser: &mut Parser<'_>, knob: &Knob, message: &str) -> String {
    let value = parser.string(knob);
    if value.trim().is_empty() {
        parser.fail(knob, message);
    }
    value
}

fn label_selector(parser: &mut Parser<'_>) -> String {
    let knob = &knobs::LABEL_SELECTOR;
    let value = required_string(parser, knob, "label selector must be specified");
    if !value.trim().is_empty()
        && let Err(problem) = selector::check_label_selector(&value)
    {
        parser.violation(knob, format!("invalid label selector: {problem}"));
    }
    value
}

fn exporter_kind(parser: &mut Parser<'_>) -> Option<ExporterKind> {
    let knob = &knobs::EXPORTER_TYPE;
    let value = parser.string(knob);
    if value.trim().is_empty() {
        parser.fail(knob, "invalid exporter type");
        return None;
    }
    let kind = ExporterKind::parse(&value);
    if kind.is_none() {
        parser.violation(
            knob,
            format!(
                "unknown exporter type: {} (use stdout, http, postgres or s3)",
                value.trim()
            ),
        );
    }
    kind
}

fn namespaces(parser: &mut Parser<'_>) -> Vec<String> {
    let knob = &knobs::NAMESPACE;
    let value = parser.string(knob);
    if value.trim().is_empty() {
        parser.fail(knob, "namespace must be specified");
        return Vec::new();
    }
    let mut namespaces: Vec<String> = Vec::new();
    for entry in value.split(',').map(str::trim) {
        if entry.is_empty() {
            parser.violation(
                knob,
                "empty namespace name in the list (use ns-a,ns-b)".to_owned(),
            );
        } else if !is_dns_label(entry) {
            parser.violation(knob,
                format!(
                    "{entry:?} is not a valid namespace name (lowercase letters, digits and '-', at most 63 characters)"
                ),
            );
        } else if !namespaces.iter().any(|known| known == entry) {
            namespaces.push(entry.to_owned());
        }
    }
    namespaces
}

fn integer(parser: &mut Parser<'_>, knob: &Knob, default: i64) -> i64 {
    parser.typed(knob, "integer", "not an integer", parse_go_int, default)
}

fn workers(parser: &mut Parser<'_>) -> u32 {
    let workers = integer(parser, &knobs::WORKERS, 16);
    if workers <= 0 {
        parser.violation(
            &knobs::WORKERS,
            format!("workers must be > 0: got {workers}"),
        );
    } else if workers > MAX_WORKERS {
        parser.violation(
            &knobs::WORKERS,
            format!("workers should not exceed 100 to prevent API server overload: got {workers}"),
        );
    }
    u32::try_from(workers.clamp(1, MAX_WORKERS)).unwrap_or(1)
}

fn timeout(parser: &mut Parser<'_>) -> i128 {
    let timeout = parser.duration(&knobs::TIMEOUT, 30 * SECOND);
    if timeout <= 0 {
        parser.violation(
            &knobs::TIMEOUT,
            format!("timeout must be > 0: got {}", go(timeout)),
        );
    } else if timeout > MAX_TIMEOUT {
        parser.violation(
            &knobs::TIMEOUT,
            format!(
                "timeout should not exceed 10 minutes to prevent resource leaks: got {}",
                go(timeout)
            ),
        );
    }
    timeout
}

fn rate_limits(parser: &mut Parser<'_>) -> (f32, u32) {
    let qps = parser.typed(&knobs::QPS, "float", "not a number", parse_float, 50.0);
    let qps_valid = qps > 0.0;
    if !qps_valid {
        parser.violation(&knobs::QPS, format!("qps must be > 0: got {qps}"));
    }
    let burst = integer(parser, &knobs::BURST, 100);
    if burst <= 0 {
        parser.violation(&knobs::BURST, format!("burst must be > 0: got {burst}"));
    } else if qps_valid && (burst as f64) < f64::from(qps) {
        parser.violation(
            &knobs::BURST,
            format!("burst ({burst}) should be >= QPS ({qps}) for proper rate limiting"),
        );
    }
    (qps, u32::try_from(burst).unwrap_or(u32::MAX).max(1))
}

fn server_port(parser: &mut Parser<'_>) -> u16 {
    let port = integer(parser, &knobs::SERVER_PORT, 8080);
    match u16::try_from(port) {
        Ok(port) if port >= 1000 => port,
        _ => {
            parser.violation(
                &knobs::SERVER_PORT,
                "server port must be a valid integer between 1000 and 65535".to_owned(),
            );
            8080
        }
    }
}

fn leader_election(parser: &mut Parser<'_>) -> LeaderElectionConfig {
    let enabled = parser.typed(
        &knobs::LEADER_ELECTION,
        "boolean",
        "not a boolean (use true or false)",
        parse_bool,
        false,
    );
    let lease_namespace = parser.string(&knobs::LEASE_NAMESPACE).trim().to_owned();
    let lease_name = parser.string(&knobs::LEASE_NAME).trim().to_owned();
    let lease = parser.duration(&knobs::LEASE_DURATION, 15 * SECOND);
    let renew = parser.duration(&knobs::LEASE_RENEW_DEADLINE, 10 * SECOND);
    let retry = parser.duration(&knobs::LEASE_RETRY_PERIOD, 2 * SECOND);
    let pod_name = parser
        .non_blank(&knobs::POD_NAME)
        .map(|s| s.value.trim().to_owned());
    let pod_namespace = parser
        .non_blank(&knobs::POD_NAMESPACE)
        .map(|s| s.value.trim().to_owned());
    if enabled {
        if lease_namespace.is_empty() {
            parser.fail(
                &knobs::LEASE_NAMESPACE,
                "lease namespace must be specified when leader election is enabled",
            );
        }
        if lease_name.is_empty() {
            parser.fail(
                &knobs::LEASE_NAME,
                "lease name must be specified when leader election is enabled",
            );
        }
        if !(lease > renew && renew > retry && retry > 0) {
            parser.fail(&knobs::LEASE_DURATION, format!(
                "lease duration > renew deadline > retry period must hold: got lease={} renew={} retry={}",
                go(lease),
                go(renew),
                go(retry)
            ));
        }
        if pod_name.is_none() {
            parser.fail(
                &knobs::POD_NAME,
                "POD_NAME must be set (downward API) when leader election is enabled",
            );
        }
    } else {
        for (knob, value) in [
            (&knobs::LEASE_DURATION, lease),
            (&knobs::LEASE_RENEW_DEADLINE, renew),
            (&knobs::LEASE_RETRY_PERIOD, retry),
        ] {
            if value <= 0 {
                parser.violation(knob, format!("must be > 0: got {}", go(value)));
            }
        }
    }
    LeaderElectionConfig {
        enabled,
        lease_namespace,
        lease_name,
        lease_duration: to_duration(lease),
        renew_deadline: to_duration(renew),
        retry_period: to_duration(retry),
        pod_name,
        pod_namespace,
    }
}

#[cfg(test)]
mod tests;
