//! `gpufleet sandbox` arguments; `commands::sandbox` runs the sandbox from
//! them.

use std::path::PathBuf;

use clap::Args;

/// The most Nodes a sandbox can have: Mokka accepts an inventory of at
/// most 100,000 Nodes, counted in whole racks, and the sandbox's racks hold
/// 18 (5,555 racks).
pub const MAX_NODES: i64 = mokka::limits::MAX_INVENTORY_NODES / 18 * 18;

/// `gpufleet sandbox` flags.
#[derive(Debug, Clone, Args)]
pub struct SandboxArgs {
    /// Simulated GPU Nodes (each 4 GPUs), 1 to 99990; racks of 18 Nodes
    /// are added to hold them all. 99990 is the largest fleet of whole
    /// 18-Node racks within Mokka's inventory limit of 100000 Nodes.
    /// Start-up grows with the count (gpuid inventories every Node through
    /// exec); docs/sandbox.md has timings.
    #[arg(long, default_value_t = 72, value_parser = clap::value_parser!(u32).range(1..=MAX_NODES))]
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(flatten)]
        sandbox: SandboxArgs,
    }

    #[test]
    fn nodes_go_up_to_the_largest_fleet_mokka_accepts_in_whole_racks() {
        let parse = |n: &str| Probe::try_parse_from(["sandbox", "--nodes", n]);
        let most = MAX_NODES.to_string();
        let one_more = (MAX_NODES + 1).to_string();
        assert_eq!(
            parse(&most).map(|p| i64::from(p.sandbox.nodes)).ok(),
            Some(MAX_NODES)
        );
        assert!(parse(&one_more).is_err());
        assert!(parse("0").is_err());
    }
}
