//! `gpufleet`: one binary for the GPU cluster control loops and kube-sim.

mod cli;
mod commands;
mod gpuid_run;
mod logging;
mod sim;

use clap::Parser;

fn main() -> std::process::ExitCode {
    // `gpufleet tfjob` takes tf-operator's Go-style `-flag` spelling too.
    let args = commands::tfjob::single_dash_to_double(std::env::args_os().collect());
    let cli = cli::Cli::parse_from(args);
    let log_format = match &cli.command {
        cli::Command::Tfjob(tfjob) => match tfjob.run.json_log_format {
            Some(true) => cli::LogFormat::Json,
            Some(false) => cli::LogFormat::Text,
            None => cli.log_format,
        },
        _ => cli.log_format,
    };
    if let Err(e) = logging::init(log_format, &cli.log_level) {
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
                commands::gpuid_parse(&args.file)
            }
            cli::Command::Gpuid(cli::GpuidCommand::Run(args)) => {
                return Ok(gpuid_run::run(args).await);
            }
            cli::Command::Tfjob(args) => commands::tfjob::main(*args).await,
            cli::Command::Mokka(cli::MokkaCommand::Render(args)) => {
                return commands::mokka_render::run(&args);
            }
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
