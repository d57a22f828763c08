//! Structured logging on stderr and process signals.
//!
//! Logs go to stderr so that stdout stays free for data (gpuid's stdout exporter).

use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (`plain` is upstream Mokka's name for them).
    #[default]
    #[value(alias = "plain")]
    Text,
    /// One JSON object per line.
    Json,
}

/// A log level as users write it: `error`, `warn` (or `warning`, which
/// upstream gpuid accepts), `info`, `debug` or `trace`, case-insensitive and
/// trimmed. The one parser for `--log-level` and `LOG_LEVEL` everywhere, so
/// no spelling is accepted by one reader and misread by another (a bare
/// `warning` handed to `EnvFilter` is a *target* name and silences every
/// other line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// Only errors.
    Error,
    /// Warnings and errors.
    Warn,
    /// The default.
    Info,
    /// Per-object detail.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// What [`LogLevel::parse`] accepts, for help texts and error messages.
    pub const ACCEPTED: &'static str = "error, warn (or warning), info, debug or trace";

    /// `None` for anything that is not one of [`LogLevel::ACCEPTED`].
    pub fn parse(raw: &str) -> Option<LogLevel> {
        Some(match raw.trim().to_ascii_lowercase().as_str() {
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "trace" => LogLevel::Trace,
            _ => return None,
        })
    }

    /// The canonical name, which is also a valid `EnvFilter` directive.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for LogLevel {
    type Err = String;
    fn from_str(raw: &str) -> Result<LogLevel, String> {
        LogLevel::parse(raw)
            .ok_or_else(|| format!("unknown log level {raw:?} (use {})", LogLevel::ACCEPTED))
    }
}

/// The logging flags every gpufleet subcommand shares; flatten into a clap parser.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Default log level: error, warn (or warning), info, debug or trace; RUST_LOG directives refine it.
    #[arg(long, default_value = "info", env = "LOG_LEVEL")]
    pub log_level: LogLevel,
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
pub fn log_filter(level: LogLevel, rust_log: Option<&str>) -> Result<EnvFilter, TelemetryError> {
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
pub fn init_logging(format: LogFormat, level: LogLevel) -> Result<(), TelemetryError> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = log_filter(level, rust_log.as_deref())?;
    // Colour codes only for a person at a terminal: in a file, a pipe or a
    // log collector they are noise around every level and field name.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
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
    init_logging(args.log_format, args.log_level)
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
        let filter = log_filter(LogLevel::Info, Some("controller_kit=debug")).unwrap();
        assert_eq!(filter.to_string(), "controller_kit=debug,info");
        let plain = log_filter(LogLevel::Warn, None).unwrap();
        assert_eq!(plain.to_string(), "warn");
        let blank = log_filter(LogLevel::Warn, Some("  ")).unwrap();
        assert_eq!(blank.to_string(), "warn");
    }

    #[test]
    fn an_invalid_rust_log_names_the_filter() {
        let error = log_filter(LogLevel::Info, Some("loud[")).unwrap_err();
        assert!(error.to_string().contains("loud["), "{error}");
    }

    #[test]
    fn warning_is_warn_and_levels_ignore_case_and_blanks() {
        assert_eq!(LogLevel::parse("warning"), Some(LogLevel::Warn));
        assert_eq!(LogLevel::parse(" WARNING "), Some(LogLevel::Warn));
        assert_eq!(LogLevel::parse("Debug"), Some(LogLevel::Debug));
        assert_eq!(LogLevel::parse("trace"), Some(LogLevel::Trace));
        for bad in ["", "loud", "warn,kube=debug", "5"] {
            assert_eq!(LogLevel::parse(bad), None, "{bad:?}");
        }
        let error = "loud".parse::<LogLevel>().unwrap_err();
        assert!(error.contains(LogLevel::ACCEPTED), "{error}");
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
        assert_eq!(cli.log.log_level, LogLevel::Debug);
        let warning = Cli::try_parse_from(["x", "--log-level", "warning"]).unwrap();
        assert_eq!(warning.log.log_level, LogLevel::Warn);
        assert!(Cli::try_parse_from(["x", "--log-level", "loud"]).is_err());
        assert!(Cli::try_parse_from(["x", "--log-format", "yaml"]).is_err());
    }
}
