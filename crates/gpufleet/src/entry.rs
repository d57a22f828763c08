//! What every gpufleet binary does before and after its command runs:
//! allocator tuning, argument parsing, logging, the async runtime and the
//! exit code. Which commands a binary can run is the `dispatch` it passes
//! in, so a single-controller binary links only its own.

use std::future::Future;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use crate::allocator::Allocator;
use crate::{cli, commands, sim};

/// Which binary is running: `gpufleet` itself, or a single-controller
/// binary whose command line is that subcommand's (`gpufleet-gpuid run` is
/// `gpufleet gpuid run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binary {
    Full,
    Controller {
        /// The binary's name, as usage lines and errors show it.
        name: &'static str,
        /// The `gpufleet` subcommand it carries.
        subcommand: &'static str,
        /// The allocator its `#[global_allocator]` declares.
        allocator: Allocator,
        /// The async runtime's worker threads; `None` is one per core.
        worker_threads: Option<usize>,
    },
}

impl Binary {
    fn name(self) -> &'static str {
        match self {
            Binary::Full => "gpufleet",
            Binary::Controller { name, .. } => name,
        }
    }

    /// `gpufleet`'s arguments for this binary's command line: a
    /// single-controller binary's subcommand goes in after the program.
    fn gpufleet_args(self, args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
        match self {
            Binary::Full => args,
            Binary::Controller { subcommand, .. } => {
                let mut args = args.into_iter();
                let mut full: Vec<std::ffi::OsString> = args.next().into_iter().collect();
                full.push(subcommand.into());
                full.extend(args);
                full
            }
        }
    }

    fn command(self) -> clap::Command {
        let command = cli::Cli::command();
        match self {
            Binary::Full => command,
            // Usage lines name the binary alone, not `<binary> <subcommand>`.
            Binary::Controller {
                name, subcommand, ..
            } => {
                let mut command = command.bin_name(name);
                command.build();
                let full = format!("{name} {subcommand}");
                command.mut_subcommand(subcommand, |sub| usage_renamed(sub, &full, name))
            }
        }
    }
}

/// `command` and its subcommands with `from` replaced by `to` in their usage
/// lines (clap derives them from the parent's name once, when built).
fn usage_renamed(mut command: clap::Command, from: &str, to: &str) -> clap::Command {
    let usage = command.render_usage().to_string();
    let usage = usage
        .strip_prefix("Usage: ")
        .unwrap_or(&usage)
        .replace(from, to);
    command
        .override_usage(usage)
        .mut_subcommands(|sub| usage_renamed(sub, from, to))
}

/// A command a single-controller binary was not built with. Its command line
/// always starts with its own subcommand, so this is unreachable from
/// arguments; it stays an error rather than a panic.
fn not_in_this_binary(binary: &'static str) -> anyhow::Error {
    anyhow::anyhow!("{binary} runs only its own controller's commands; use gpufleet for the rest")
}

/// Parses the command line, sets up logging and the runtime, runs the
/// command through `dispatch` and turns its result into the exit code.
pub fn run<F, Fut>(binary: Binary, dispatch: F) -> ExitCode
where
    F: FnOnce(cli::Command) -> Fut,
    Fut: Future<Output = anyhow::Result<ExitCode>>,
{
    let (allocator, worker_threads) = match binary {
        Binary::Full => (Allocator::Mimalloc, None),
        Binary::Controller {
            allocator,
            worker_threads,
            ..
        } => (allocator, worker_threads),
    };
    crate::allocator::tune_for_controllers(allocator, binary != Binary::Full);
    let args = binary.gpufleet_args(std::env::args_os().collect());
    // `gpufleet tfjob` takes tf-operator's Go-style `-flag` spelling too.
    let args = cli::tfjob::single_dash_to_double(args);
    let matches = binary.command().get_matches_from(args);
    let cli = match cli::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // `gpufleet mokka` takes upstream's log flags and variables, `gpufleet
    // tfjob` tf-operator's `-json-log-format`. Mokka's rules stay with its
    // command (`commands::mokka::log_settings`) rather than in `cli`: they
    // read upstream's environment variables, not only the parsed flags.
    let (log_format, log_level) = match &cli.command {
        cli::Command::Mokka(args) if args.command.is_none() => {
            match commands::mokka::log_settings(&matches, |name| std::env::var(name).ok()) {
                Ok(settings) => settings,
                Err(e) => {
                    eprintln!("{}: invalid configuration: {e}", binary.name());
                    return ExitCode::from(2);
                }
            }
        }
        cli::Command::Tfjob(tfjob) => match tfjob.run.json_log_format {
            Some(true) => (cli::LogFormat::Json, cli.log_level),
            Some(false) => (cli::LogFormat::Text, cli.log_level),
            None => (cli.log_format, cli.log_level),
        },
        // Three controllers' info lines would bury the sandbox's progress;
        // an explicit --log-level or LOG_LEVEL still wins.
        cli::Command::Sandbox(_)
            if matches.value_source("log_level")
                == Some(clap::parser::ValueSource::DefaultValue) =>
        {
            (cli.log_format, controller_kit::telemetry::LogLevel::Warn)
        }
        _ => (cli.log_format, cli.log_level),
    };
    if let Err(e) = crate::logging::init(log_format, log_level) {
        eprintln!("{}: {e:#}", binary.name());
        return ExitCode::from(2);
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = worker_threads {
        runtime.worker_threads(threads.max(1));
    }
    let runtime = match runtime.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start the async runtime: {e}", binary.name());
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "{} failed", binary.name());
            eprintln!("{}: {e:#}", binary.name());
            ExitCode::FAILURE
        }
    }
}

fn success_or_failure(passed: bool) -> ExitCode {
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Every subcommand: `gpufleet`'s dispatch.
pub async fn any_command(command: cli::Command) -> anyhow::Result<ExitCode> {
    match command {
        cli::Command::Sim(cli::SimCommand::Serve(args)) => {
            sim::serve(args).await.map(|()| ExitCode::SUCCESS)
        }
        cli::Command::Sim(cli::SimCommand::Diff(args)) => {
            sim::diff(args).await.map(success_or_failure)
        }
        cli::Command::Crds(args) => commands::print_crds(args.set).map(|()| ExitCode::SUCCESS),
        cli::Command::Sandbox(args) => commands::sandbox::run(*args).await.map(success_or_failure),
        command @ cli::Command::Gpuid(_) => gpuid_command(command).await,
        command @ cli::Command::Tfjob(_) => tfjob_command(command).await,
        command @ cli::Command::Mokka(_) => mokka_command(command).await,
    }
}

/// `gpuid run` and `gpuid parse`: `gpufleet-gpuid`'s dispatch.
pub async fn gpuid_command(command: cli::Command) -> anyhow::Result<ExitCode> {
    match command {
        cli::Command::Gpuid(cli::GpuidCommand::Parse(args)) => Ok(commands::gpuid::parse(&args)),
        cli::Command::Gpuid(cli::GpuidCommand::Run(args)) => Ok(commands::gpuid::run(args).await),
        _ => Err(not_in_this_binary("gpufleet-gpuid")),
    }
}

/// The TFJob operator and `tfjob convert`: `gpufleet-tfjob`'s dispatch.
pub async fn tfjob_command(command: cli::Command) -> anyhow::Result<ExitCode> {
    match command {
        cli::Command::Tfjob(args) => commands::tfjob::main(*args)
            .await
            .map(|()| ExitCode::SUCCESS),
        _ => Err(not_in_this_binary("gpufleet-tfjob")),
    }
}

/// The Mokka control plane, `mokka render` and `mokka node-view`:
/// `gpufleet-mokka`'s dispatch.
pub async fn mokka_command(command: cli::Command) -> anyhow::Result<ExitCode> {
    let cli::Command::Mokka(args) = command else {
        return Err(not_in_this_binary("gpufleet-mokka"));
    };
    match *args {
        cli::mokka::MokkaArgs {
            command: Some(cli::mokka::MokkaCommand::Render(render)),
            ..
        } => commands::mokka_render::run(&render),
        cli::mokka::MokkaArgs {
            command: Some(cli::mokka::MokkaCommand::NodeView(view)),
            ..
        } => commands::mokka_node_view::run(&view).await,
        cli::mokka::MokkaArgs { run, .. } => {
            commands::mokka::run(run).await.map(|()| ExitCode::SUCCESS)
        }
    }
}
