//! Command-line interface.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "gpufleet",
    version,
    about = "GPU cluster control plane for Kubernetes"
)]
pub struct Cli {
    /// Log line format on stderr.
    #[arg(long, global = true, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level or filter (RUST_LOG syntax); RUST_LOG wins when set.
    #[arg(long, global = true, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// kube-sim, the embedded Kubernetes API server.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Print the CustomResourceDefinitions gpufleet owns, as YAML.
    Crds(CrdsArgs),
    /// GPU serial inventory (gpuid).
    #[command(subcommand)]
    Gpuid(GpuidCommand),
    /// Simulated-GPU racks (Mokka).
    #[command(subcommand)]
    Mokka(MokkaCommand),
}

#[derive(Debug, Subcommand)]
pub enum MokkaCommand {
    /// Print the SGPURacks the controller would create for the profiles and
    /// inventories in some manifests (or the errors it would report).
    Render(crate::commands::mokka_render::RenderArgs),
}

#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Which API's CRDs to print.
    #[arg(value_enum, default_value_t = CrdSet::All)]
    pub set: CrdSet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrdSet {
    All,
    Mokka,
}

#[derive(Debug, Subcommand)]
pub enum GpuidCommand {
    /// Print the GPU records an `nvidia-smi -q -x` capture yields, as NDJSON
    /// (for checking a node by hand).
    Parse(ParseArgs),
    /// Run the collector: watch device-plugin pods, exec nvidia-smi, label
    /// nodes and export changes, until SIGTERM. Every knob is a flag or env.
    Run(crate::gpuid_run::RunArgs),
}

#[derive(Debug, Args)]
pub struct ParseArgs {
    /// The capture file, or `-` for standard input.
    pub file: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Serve kube-sim on 127.0.0.1 until SIGINT or SIGTERM.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Port on 127.0.0.1; 0 picks a free one (see the kubeconfig for which).
    #[arg(long, default_value_t = 6443)]
    pub port: u16,
    /// Where to write a kubeconfig for this server.
    #[arg(long, default_value = "kube-sim.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Watch events kept per resource before old resourceVersions expire (410).
    #[arg(long, default_value_t = 10_000)]
    pub watch_history: usize,
}
