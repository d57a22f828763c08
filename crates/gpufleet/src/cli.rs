//! Command-line interface: the argument types of every subcommand, global
//! flags here and each controller's in its own module below. Nothing here
//! imports a `commands` module: the arguments are parsed first, then
//! `main.rs` hands them to the command that runs them.

pub mod gpuid;
pub mod mokka;
pub mod sandbox;
pub mod tfjob;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
pub use controller_kit::telemetry::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "gpufleet",
    version,
    about = "GPU cluster control plane for Kubernetes"
)]
pub struct Cli {
    /// Log line format on stderr. Text lines are coloured only when stderr
    /// is a terminal.
    #[arg(long, global = true, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log level: error, warn (or warning), info, debug or trace
    /// (case-insensitive). For per-module filters set RUST_LOG, whose
    /// directives refine this level.
    #[arg(
        long,
        global = true,
        env = "LOG_LEVEL",
        default_value = "info",
        value_name = "LEVEL"
    )]
    pub log_level: controller_kit::telemetry::LogLevel,
    #[command(subcommand)]
    pub command: Command,
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
    Tfjob(Box<self::tfjob::TfjobArgs>),
    /// The Mokka simulated-GPU control plane (upstream's control-plane
    /// flags), or `mokka render`.
    Mokka(Box<self::mokka::MokkaArgs>),
    /// The whole control plane on one machine: kube-sim with a simulated
    /// GB300 NVL72 fleet, Mokka, gpuid and the TFJob operator in-process,
    /// and a live fleet view in the browser. Ctrl-C stops it.
    Sandbox(Box<self::sandbox::SandboxArgs>),
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
    Parse(self::gpuid::ParseArgs),
    /// Run the collector: watch device-plugin pods, exec nvidia-smi, label
    /// nodes and export changes, until SIGTERM. Every knob is a flag or env.
    Run(self::gpuid::RunArgs),
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Serve kube-sim on 127.0.0.1 until SIGINT or SIGTERM, by default over
    /// HTTPS with a random admin token (both in the kubeconfig).
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
    /// A YAML list of exec answers ({podSelector, container, command,
    /// stdoutFile, stderr, exitCode}), first match wins, paths relative to
    /// the file; re-read on SIGHUP. Without it every exec is "command not
    /// found".
    #[arg(long, value_name = "FILE")]
    pub exec_rules: Option<PathBuf>,
    /// Keep the store on disk in DIR (created when missing): a restart
    /// resumes with the same objects, CRDs and resourceVersion, and every
    /// acknowledged write survives kill -9. A directory holding anything
    /// else is refused.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Serve HTTPS with a CA generated at start and written into the
    /// kubeconfig. This is the default; the flag exists so that scripts can
    /// say so.
    #[arg(long, conflicts_with_all = ["no_tls", "insecure_no_auth"])]
    pub tls: bool,
    /// Serve plain HTTP instead of HTTPS. The token is still required, but
    /// kubectl and other client-go tools send a kubeconfig's token only
    /// over HTTPS, so only kube-rs, the Python client and curl can use it.
    #[arg(long)]
    pub no_tls: bool,
    /// Accept every request without a token, over plain HTTP, as kube-sim
    /// did before it was secured (the Host check stays on). For tools that
    /// can do neither TLS nor tokens; anyone on this machine can then use
    /// the server.
    #[arg(long, conflicts_with_all = ["no_tls", "authorization"])]
    pub insecure_no_auth: bool,
    /// How requests are authorized: `always-allow` (every authenticated
    /// client may do everything) or `rbac` (ServiceAccount tokens from
    /// TokenRequest get what the stored Roles and bindings grant, and the
    /// real 403 otherwise; the kubeconfig's admin token stays allowed
    /// everything).
    #[arg(long, value_enum, default_value_t = AuthorizationMode::AlwaysAllow)]
    pub authorization: AuthorizationMode,
}

/// `gpufleet sim serve --authorization`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthorizationMode {
    AlwaysAllow,
    Rbac,
}
