//! `gpufleet gpuid` arguments. Every gpuid knob is an optional `--flag`
//! generated from `gpuid::config::KNOBS` (plus the collector's own knobs),
//! so the CLI can never drift from the configuration; `commands::gpuid`
//! turns the flags given, with the environment, into the collector's
//! configuration.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use gpuid::collect::COLLECTOR_KNOBS;
use gpuid::config::{KNOBS, Knob};

/// Knobs served by a global gpufleet flag instead (same env variable).
const GLOBAL_FLAGS: &[&str] = &["log-level"];

fn run_knobs() -> impl Iterator<Item = &'static Knob> {
    KNOBS
        .iter()
        .chain(COLLECTOR_KNOBS.iter())
        .filter(|knob| !GLOBAL_FLAGS.contains(&knob.flag))
}

/// The flags given on the command line, by flag name (without `--`).
#[derive(Debug, Default)]
pub struct RunArgs {
    pub flags: BTreeMap<String, String>,
}

impl FromArgMatches for RunArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut flags = BTreeMap::new();
        for knob in run_knobs() {
            if let Some(value) = matches.get_one::<String>(knob.flag) {
                flags.insert(knob.flag.to_owned(), value.clone());
            }
        }
        Ok(RunArgs { flags })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = RunArgs::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for RunArgs {
    fn augment_args(command: Command) -> Command {
        run_knobs().fold(command, |command, knob| {
            let mut help = format!("{} [env: {}]", knob.help, knob.env);
            if let Some(default) = knob.default {
                help.push_str(&format!(" [default: {default}]"));
            }
            command.arg(
                Arg::new(knob.flag)
                    .long(knob.flag)
                    .value_name("VALUE")
                    .help(help)
                    .hide_env_values(knob.secret),
            )
        })
    }

    fn augment_args_for_update(command: Command) -> Command {
        RunArgs::augment_args(command)
    }
}

/// `gpufleet gpuid parse` arguments.
#[derive(Debug, clap::Args)]
pub struct ParseArgs {
    /// The capture file, or `-` for standard input.
    pub file: PathBuf,
    /// Exit with status 3 when the parser has warnings (a value it could
    /// not read, fewer <gpu> elements than <attached_gpus>); the records
    /// are printed all the same.
    #[arg(long)]
    pub strict: bool,
}
