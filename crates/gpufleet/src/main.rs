//! `gpufleet`: one binary for the GPU cluster control loops and kube-sim.

mod allocator;
mod cli;
mod commands;
mod exec_rules;
mod fleet_view;
mod logging;
mod sim;

use clap::{CommandFactory, FromArgMatches};

fn main() -> std::process::ExitCode {
    allocator::tune_for_controllers();
    // `gpufleet tfjob` takes tf-operator's Go-style `-flag` spelling too.
    let args = cli::tfjob::single_dash_to_double(std::env::args_os().collect());
    let matches = cli::Cli::command().get_matches_from(args);
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
                    eprintln!("gpufleet: invalid configuration: {e}");
                    return std::process::ExitCode::from(2);
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
    if let Err(e) = logging::init(log_format, log_level) {
        eprintln!("gpufleet: {e:#}");
        return std::process::ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gpufleet: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            cli::Command::Sim(cli::SimCommand::Serve(args)) => sim::serve(args).await,
            cli::Command::Sim(cli::SimCommand::Diff(args)) => {
                return sim::diff(args).await.map(|agrees| {
                    if agrees {
                        std::process::ExitCode::SUCCESS
                    } else {
                        std::process::ExitCode::FAILURE
                    }
                });
            }
            cli::Command::Crds(args) => commands::print_crds(args.set),
            cli::Command::Gpuid(cli::GpuidCommand::Parse(args)) => {
                return Ok(commands::gpuid::parse(&args));
            }
            cli::Command::Gpuid(cli::GpuidCommand::Run(args)) => {
                return Ok(commands::gpuid::run(args).await);
            }
            cli::Command::Tfjob(args) => commands::tfjob::main(*args).await,
            cli::Command::Sandbox(args) => {
                return commands::sandbox::run(*args).await.map(|passed| {
                    if passed {
                        std::process::ExitCode::SUCCESS
                    } else {
                        std::process::ExitCode::FAILURE
                    }
                });
            }
            cli::Command::Mokka(args) => match *args {
                cli::mokka::MokkaArgs {
                    command: Some(cli::mokka::MokkaCommand::Render(render)),
                    ..
                } => return commands::mokka_render::run(&render),
                cli::mokka::MokkaArgs {
                    command: Some(cli::mokka::MokkaCommand::NodeView(view)),
                    ..
                } => return commands::mokka_node_view::run(&view).await,
                cli::mokka::MokkaArgs { run, .. } => commands::mokka::run(run).await,
            },
        }
        .map(|()| std::process::ExitCode::SUCCESS)
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "gpufleet failed");
            eprintln!("gpufleet: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
