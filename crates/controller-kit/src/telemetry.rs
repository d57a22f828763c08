//! Structured logging on stderr and process signals.
//!
//! Logs go to stderr so that stdout stays free for data (gpuid's stdout exporter).

use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The logging flags every gpufleet subcommand shares; flatten into a clap parser.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Default log level (error, warn, info, debug, trace); RUST_LOG directives refine it.
    #[arg(long, default_value = "info", env = "LOG_LEVEL")]
    pub log_level: String,
}

/// Logging could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The level or RUST_LOG is not a valid filter.
    #[error("invalid log filter {filter:?} (from --log-level and RUST_LOG): {source}")]
    InvalidFilter {
        /// The filter text that failed to parse.
        filter: String,
        /// The parser's complaint.
        source: tracing_subscriber::filter::ParseError,
    },
    /// A global subscriber was installed already.
    #[error("a global log subscriber is already installed: {0}")]
    AlreadyInstalled(String),
}

/// The filter built from `--log-level` and, when set, `RUST_LOG` (whose directives win).
pub fn log_filter(level: &str, rust_log: Option<&str>) -> Result<EnvFilter, TelemetryError> {
    let filter = match rust_log
        .map(str::trim)
        .filter(|directives| !directives.is_empty())
    {
        // Later directives override earlier ones for the same target.
        Some(directives) => format!("{level},{directives}"),
        None => level.to_string(),
    };
    EnvFilter::try_new(&filter).map_err(|source| TelemetryError::InvalidFilter { filter, source })
}

/// Installs the global subscriber: `format` lines on stderr, filtered by level and RUST_LOG.
pub fn init_logging(format: LogFormat, level: &str) -> Result<(), TelemetryError> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = log_filter(level, rust_log.as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
    installed.map_err(|error| TelemetryError::AlreadyInstalled(error.to_string()))
}

/// Installs logging from parsed [`LogArgs`].
pub fn init_logging_from_args(args: &LogArgs) -> Result<(), TelemetryError> {
    init_logging(args.log_format, &args.log_level)
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM; returns once it is cancelled either way.
pub async fn cancel_on_signal(shutdown: CancellationToken) {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the process");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        result = interrupt => {
            if let Err(error) = result {
                tracing::warn!(%error, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
            tracing::info!("SIGINT received, shutting down");
        }
        () = terminate => tracing::info!("SIGTERM received, shutting down"),
        () = shutdown.cancelled() => return,
    }
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_refines_the_level_flag() {
        let filter = log_filter("info", Some("controller_kit=debug")).unwrap();
        assert_eq!(filter.to_string(), "controller_kit=debug,info");
        let plain = log_filter("warn", None).unwrap();
        assert_eq!(plain.to_string(), "warn");
        let blank = log_filter("warn", Some("  ")).unwrap();
        assert_eq!(blank.to_string(), "warn");
    }

    #[test]
    fn an_invalid_level_names_the_filter() {
        let error = log_filter("loud[", None).unwrap_err();
        assert!(error.to_string().contains("\"loud[\""), "{error}");
    }

    #[test]
    fn log_args_parse_format_and_level() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            log: LogArgs,
        }
        let cli =
            Cli::try_parse_from(["x", "--log-format", "json", "--log-level", "debug"]).unwrap();
        assert_eq!(cli.log.log_format, LogFormat::Json);
        assert_eq!(cli.log.log_level, "debug");
        assert!(Cli::try_parse_from(["x", "--log-format", "yaml"]).is_err());
    }
}
