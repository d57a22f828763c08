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
    /// The Kubeflow TFJob operator (kubeflow.org/v1), or `tfjob convert`.
    Tfjob(Box<crate::commands::tfjob::TfjobArgs>),
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
    Tfjob,
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
    /// Replay the differential corpus against kube-sim and a real
    /// kube-apiserver and print the agreement table; exits 1 when any
    /// scenario differs without a written reason or fails to run.
    Diff(DiffArgs),
}

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// Kubeconfig of the real API server to compare with (admin rights: the
    /// corpus creates namespaces and CRDs). Without it the corpus is only
    /// replayed against kube-sim, to check that it runs.
    #[arg(long, env = "GPUFLEET_DIFF_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// A corpus directory instead of the one built in.
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Only scenarios whose name contains this text.
    #[arg(long)]
    pub filter: Option<String>,
    /// Output: the table, or the results as JSON.
    #[arg(short = 'o', long, value_enum, default_value_t = DiffOutput::Table)]
    pub output: DiffOutput,
    /// One line per scenario, without the differences.
    #[arg(long)]
    pub brief: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DiffOutput {
    Table,
    Json,
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
