//! The three controllers, started in-process through the entry points
//! their own subcommands run, each given a configuration written here
//! instead of parsed from flags, and keeping a handle on each one's
//! metrics registry:
//! * TFJob: `tfjob::run::Operator` (`new` from an `OperatorConfig`, then
//!   `run`), as `gpufleet tfjob`;
//! * gpuid: `gpuid::collect::serve::run_with_client`, where `gpufleet
//!   gpuid run` ends too;
//! * Mokka: `mokka::run::run_control_plane` with a `ControlPlane`, as
//!   `gpufleet mokka`.
//!
//! So the sandbox depends on the controller crates and kube-sim, never on
//! another subcommand's module.

use std::collections::BTreeMap;

use std::sync::Arc;

use anyhow::Context;
use controller_kit::{LeaderElectionConfig, MetricsRegistry};
use gpuid::collect::CollectorSettings;
use gpuid::collect::node_state::NodeKeys;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::fleet::DEVICE_PLUGIN_NAMESPACE;
use crate::cli::sandbox::SandboxArgs;

/// How often gpuid re-runs nvidia-smi on a pod whose cache entry did not
/// change: a runtime policy changes what nvidia-smi prints without
/// touching the pod, as on real hardware, so only a resync notices it.
/// Every 5 s keeps a policy's effect visible within seconds while 72 idle
/// Nodes cost about 15 execs a second.
pub const GPUID_RESYNC_SECONDS: u64 = 5;
/// Idle execs per second the resync may cost, whatever the fleet's size:
/// each exec is a TLS connection and an nvidia-smi rendering, so at 5 s an
/// idle 10,000-Node sandbox would spend its CPU on 2,000 execs a second.
/// Larger fleets resync less often instead (10,000 Nodes: every 11 min;
/// the fleet view reads policies itself and shows their effect at once).
pub const GPUID_IDLE_EXECS_PER_SECOND: u64 = 15;

/// gpuid's resync period for a sandbox of `nodes` Nodes.
pub fn gpuid_resync(nodes: u64) -> std::time::Duration {
    std::time::Duration::from_secs(
        GPUID_RESYNC_SECONDS.max(nodes.div_ceil(GPUID_IDLE_EXECS_PER_SECOND)),
    )
}

/// gpuid's validated configuration for the sandbox.
#[derive(Debug, Clone)]
pub struct Gpuid {
    pub config: gpuid::config::Config,
    pub settings: CollectorSettings,
}

impl Gpuid {
    /// The Node label and annotation keys this collector writes.
    pub fn node_keys(&self) -> NodeKeys {
        NodeKeys::new(&self.settings.label_prefix, &self.settings.exporter)
    }
}

/// gpuid configured as a user would with flags: the device-plugin
/// namespace, the sandbox's cluster name, and stdout or PostgreSQL. The
/// process environment is not read, so a stray `EXPORTER_TYPE` cannot
/// change what the demo checks.
pub fn gpuid_config(args: &SandboxArgs) -> anyhow::Result<Gpuid> {
    let resync = format!("{}s", gpuid_resync(u64::from(args.nodes)).as_secs());
    let mut flags: BTreeMap<String, String> = [
        ("cluster-name", args.cluster_name.as_str()),
        ("namespace", DEVICE_PLUGIN_NAMESPACE),
        ("resync", resync.as_str()),
        ("timeout", "20s"),
    ]
    .into_iter()
    .map(|(flag, value)| (flag.to_string(), value.to_string()))
    .collect();
    if let Some(url) = &args.postgres {
        flags.insert("exporter-type".into(), "postgres".into());
        flags.insert("postgres-dsn".into(), url.clone());
        flags.insert("postgres-table".into(), args.postgres_table.clone());
        flags.insert("postgres-auto-migrate".into(), "true".into());
    }
    let no_env = |_: &str| None;
    let config =
        gpuid::config::Config::from_sources(&flags, no_env, |path| std::fs::read_to_string(path))
            .map_err(|errors| {
            let problems: Vec<String> = errors.errors.iter().map(ToString::to_string).collect();
            anyhow::anyhow!(
                "invalid gpuid configuration (--postgres, --postgres-table, --cluster-name): {}",
                problems.join("; ")
            )
        })?;
    let settings = CollectorSettings::from_config(&config)
        .with_knobs(&flags, no_env)
        .map_err(|errors| {
            let problems: Vec<String> = errors.iter().map(ToString::to_string).collect();
            anyhow::anyhow!("invalid gpuid settings: {}", problems.join("; "))
        })?;
    Ok(Gpuid { config, settings })
}

type Tasks = JoinSet<(&'static str, anyhow::Result<()>)>;

/// The three controllers' metrics, for the sandbox's aggregated /metrics.
#[derive(Clone, Debug)]
pub struct Registries {
    pub mokka: MetricsRegistry,
    pub gpuid: MetricsRegistry,
    pub tfjob: MetricsRegistry,
}

/// Starts Mokka and the TFJob operator on `client` and gpuid on
/// `exec_client` (exec needs a socket), until `shutdown`.
pub fn spawn(
    tasks: &mut Tasks,
    client: &kube::Client,
    exec_client: kube::Client,
    gpuid: Gpuid,
    shutdown: &CancellationToken,
) -> anyhow::Result<Registries> {
    let plane = mokka::run::ControlPlane {
        options: mokka::plan::options::Options::default(),
        election: LeaderElectionConfig::new("default", "control-plane.mokka.nvidia.com"),
        admin: None,
        shutdown_timeout: std::time::Duration::from_secs(5),
    };
    let controller = Arc::new(
        mokka::controller::MokkaController::new(client.clone(), plane.options)
            .context("setting up the Mokka controller")?,
    );
    let mokka_registry = controller.registry();
    {
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let result = mokka::run::run_control_plane(controller, plane, stop)
                .await
                .map_err(anyhow::Error::from);
            ("Mokka", result)
        });
    }
    let mut config = tfjob::run::OperatorConfig::new("default");
    // One replica: no Lease to wait for. No admin addresses: its metrics
    // are served on the fleet view's /metrics through its registry.
    config.leader_election = false;
    let operator = tfjob::run::Operator::new(client.clone(), config)
        .context("setting up the TFJob operator")?;
    let tfjob_registry = operator.registry();
    {
        let stop = shutdown.clone();
        tasks.spawn(async move {
            let result = operator
                .run(stop)
                .await
                .context("running the TFJob operator");
            ("TFJob operator", result)
        });
    }
    let gpuid_registry = MetricsRegistry::new();
    {
        let (stop, registry) = (shutdown.clone(), gpuid_registry.clone());
        tasks.spawn(async move {
            let result = gpuid::collect::serve::run_with_client(
                exec_client,
                gpuid.config,
                gpuid.settings,
                None,
                registry,
                stop,
            )
            .await
            .context("gpuid collector");
            ("gpuid", result)
        });
    }
    Ok(Registries {
        mokka: mokka_registry,
        gpuid: gpuid_registry,
        tfjob: tfjob_registry,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpuids_idle_resync_costs_at_most_a_fixed_exec_rate_at_any_fleet_size() {
        assert_eq!(gpuid_resync(72).as_secs(), GPUID_RESYNC_SECONDS);
        for nodes in [2_000u64, 10_000, 100_000] {
            let per_second = nodes as f64 / gpuid_resync(nodes).as_secs_f64();
            assert!(
                per_second <= GPUID_IDLE_EXECS_PER_SECOND as f64,
                "{nodes} Nodes: {per_second} execs/s"
            );
        }
    }
}
