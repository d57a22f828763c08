//! Structured logs on stderr (stdout is left to data such as NDJSON exports),
//! set up by controller-kit so every subcommand logs alike.

use controller_kit::telemetry::{LogFormat, LogLevel};

pub fn init(format: LogFormat, level: LogLevel) -> anyhow::Result<()> {
    controller_kit::telemetry::init_logging(format, level).map_err(anyhow::Error::from)
}
