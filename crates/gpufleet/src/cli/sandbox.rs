//! `gpufleet sandbox` arguments; `commands::sandbox` runs the sandbox from
//! them.

use std::path::PathBuf;

use clap::Args;

/// `gpufleet sandbox` flags.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Simulated GPU Nodes (each 4 GPUs), 1 to 100000; racks of 18 Nodes
    /// are added to hold them all. Start-up grows with the count (gpuid
    /// inventories every Node through exec); docs/sandbox.md has timings.
    #[arg(long, default_value_t = 72, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub nodes: u32,
    /// Where to write the kubeconfig of the sandbox's API server.
    #[arg(long, default_value = "sandbox.kubeconfig")]
    pub kubeconfig: PathBuf,
    /// Port of the fleet view on 127.0.0.1; 0 picks a free one (printed).
    #[arg(long, default_value_t = 8080)]
    pub ui_port: u16,
    /// Port of the API server on 127.0.0.1; 0 (the default) picks a free
    /// one (the kubeconfig names it).
    #[arg(long, default_value_t = 0)]
    pub api_port: u16,
    /// Run the scripted demo, print each check, and exit: 0 only if every
    /// check held.
    #[arg(long)]
    pub exit_after_demo: bool,
    /// Export gpuid's records to this PostgreSQL (a postgres:// URL; add
    /// `?sslmode=disable` for a server without TLS) instead of stdout. The
    /// tables are created when missing.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// Table name of the PostgreSQL export (gpuid's POSTGRES_TABLE).
    #[arg(long, default_value = "gpu", requires = "postgres")]
    pub postgres_table: String,
    /// Cluster name on every gpuid record.
    #[arg(long, default_value = "sandbox")]
    pub cluster_name: String,
}
