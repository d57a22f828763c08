//! Structured logs on stderr (stdout is left to data such as NDJSON exports).

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

pub fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(from_env) if !from_env.is_empty() => EnvFilter::try_new(&from_env)
            .map_err(|e| anyhow::anyhow!("RUST_LOG={from_env:?} is not a valid log filter: {e}"))?,
        _ => EnvFilter::try_new(level)
            .map_err(|e| anyhow::anyhow!("--log-level {level:?} is not a valid log filter: {e}"))?,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let result = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}
