//! `gpufleet gpuid run`: the collector. The flags (`cli::gpuid`, one per
//! gpuid knob) and the environment become gpuid's `Config` and
//! `CollectorSettings`, a flag beating its variable; the collector then
//! runs through `gpuid::collect::serve`, which ends in the same
//! `run_with_client` the sandbox calls.
//!
//! `gpufleet gpuid parse`: one capture by hand, records on stdout, the
//! parser's warnings and errors on stderr, each once.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use gpuid::collect::CollectorSettings;
use gpuid::collect::settings::check_collector_knobs;
use gpuid::config::{Config, KNOBS};

use crate::cli::gpuid::{ParseArgs, RunArgs};

/// Exit status of a capture that parsed with warnings under `--strict`
/// (1 is a rejected capture, 2 a usage error).
const EXIT_WARNINGS: u8 = 3;

/// Parses the capture: records as NDJSON on stdout; each warning, and the
/// error if the capture is rejected, printed once on stderr.
pub fn parse(args: &ParseArgs) -> ExitCode {
    let (source, report) = if args.file == Path::new("-") {
        (
            "standard input".to_owned(),
            gpuid::smi::parse_reader(std::io::stdin().lock(), gpuid::smi::Limits::DEFAULT),
        )
    } else {
        let source = args.file.display().to_string();
        match std::fs::File::open(&args.file) {
            Ok(file) => {
                let parsed = gpuid::smi::parse_reader(file, gpuid::smi::Limits::DEFAULT);
                (source, parsed)
            }
            Err(error) => {
                eprintln!("gpufleet gpuid parse: cannot open {source}: {error}");
                return ExitCode::FAILURE;
            }
        }
    };
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            eprintln!("gpufleet gpuid parse: {source}: {error}");
            return ExitCode::FAILURE;
        }
    };
    for warning in &report.warnings {
        eprintln!("gpufleet gpuid parse: warning: {source}: {warning}");
    }
    if let Err(error) = std::io::stdout().write_all(report.to_ndjson().as_bytes()) {
        eprintln!("gpufleet gpuid parse: writing to stdout: {error}");
        return ExitCode::FAILURE;
    }
    if args.strict && !report.warnings.is_empty() {
        eprintln!(
            "gpufleet gpuid parse: {source}: {} warning(s) and --strict",
            report.warnings.len()
        );
        return ExitCode::from(EXIT_WARNINGS);
    }
    ExitCode::SUCCESS
}

/// Validates the configuration (every problem printed, exit 2) and runs
/// the collector until SIGINT/SIGTERM.
pub async fn run(args: RunArgs) -> ExitCode {
    let env = |name: &str| std::env::var(name).ok();
    let core_flags: BTreeMap<String, String> = args
        .flags
        .iter()
        .filter(|(flag, _)| KNOBS.iter().any(|knob| knob.flag == flag.as_str()))
        .map(|(flag, value)| (flag.clone(), value.clone()))
        .collect();
    let config = Config::from_sources(&core_flags, env, |path| std::fs::read_to_string(path));
    let settings = config
        .as_ref()
        .ok()
        .map(|config| CollectorSettings::from_config(config).with_knobs(&args.flags, env));
    let mut problems: Vec<String> = Vec::new();
    if let Err(errors) = &config {
        problems.extend(errors.errors.iter().map(ToString::to_string));
        // The collector's knobs too, so one run lists every problem.
        problems.extend(
            check_collector_knobs(&args.flags, env)
                .iter()
                .map(ToString::to_string),
        );
    }
    if let Some(Err(errors)) = &settings {
        problems.extend(errors.iter().map(ToString::to_string));
    }
    let (Ok(config), Some(Ok(settings))) = (config, settings) else {
        eprintln!("gpufleet gpuid run: invalid configuration:");
        for problem in problems {
            eprintln!("  - {problem}");
        }
        return ExitCode::from(2);
    };
    match gpuid::collect::serve::run_until_signal(config, settings).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "gpuid collector failed");
            eprintln!("gpufleet gpuid run: {error}");
            ExitCode::from(error.exit_code())
        }
    }
}
