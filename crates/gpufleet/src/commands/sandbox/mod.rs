//! `gpufleet sandbox`: the whole GPU control plane on one machine, with no
//! cluster and no GPU. kube-sim (with its kubelet and scheduler) is the
//! cluster; the fleet is simulated Nodes, a GB300 NVL72 rack profile and an
//! inventory; Mokka, gpuid and the TFJob operator run in this process
//! through the same functions their own subcommands run, against the API
//! over a kube client, with no shortcut around it.
//!
//! Rooms: [`cluster`] (kube-sim and CRDs), [`fleet`] (what is seeded),
//! [`controllers`] (the three controllers), [`device_plugin`] with the pure
//! [`nvidia_smi`] renderer, [`progress`] (what is printed), [`demo`] (the
//! scripted checks) and [`metrics`] (the three controllers' metrics on the
//! fleet view's `/metrics`). The watch caches, each Node's assignment and
//! the fleet view itself are in `crate::fleet_view`, which `gpufleet mokka
//! --ui` serves too.

pub mod cluster;
pub mod controllers;
pub mod demo;
pub mod device_plugin;
pub mod fleet;
pub mod metrics;
pub mod nvidia_smi;
pub mod progress;

use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cli::sandbox::SandboxArgs;
use crate::fleet_view::live::Live;
use crate::fleet_view::model::Mode;
use crate::fleet_view::{server as ui, state};

/// How long start-up may take before the sandbox gives up: generous, as
/// a busy 2-core CI machine runs it beside every other test.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(240);
/// What start-up may take for `nodes` Nodes: [`STARTUP_TIMEOUT`] and 20 ms
/// more per Node, since gpuid inventories each Node through exec before
/// the fleet counts as ready.
fn startup_timeout(nodes: usize) -> Duration {
    STARTUP_TIMEOUT
        + Duration::from_millis(20).saturating_mul(u32::try_from(nodes).unwrap_or(u32::MAX))
}

/// How long the controllers get to stop at shutdown.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Runs the sandbox until Ctrl-C (or the demo's end). Ok(false): a demo
/// check failed.
pub async fn run(args: SandboxArgs) -> anyhow::Result<bool> {
    let started = Instant::now();
    let nodes = usize::try_from(args.nodes).unwrap_or(usize::MAX);
    let gpuid = controllers::gpuid_config(&args)?;
    let sim = cluster::start(args.api_port, nodes).await?;
    progress::step(format!(
        "kube-sim serving at {} (kubelet and scheduler on)",
        sim.url()
    ));
    let client = sim.client();
    let crds = cluster::install_crds(&client).await?;
    progress::step(format!("installed {crds} CRDs (Mokka and TFJob)"));
    crate::sim::write_kubeconfig(&args.kubeconfig, &sim.kubeconfig())?;

    let shutdown = CancellationToken::new();
    tokio::spawn(controller_kit::telemetry::cancel_on_signal(
        shutdown.clone(),
    ));
    let state = state::FleetState::new(&client, true)?;
    let mut tasks: JoinSet<(&'static str, anyhow::Result<()>)> = JoinSet::new();
    {
        let state = state.clone();
        let stop = shutdown.clone();
        tasks.spawn(async move { ("watch caches", state.run(stop).await) });
    }
    state.synced().await;
    device_plugin::register_exec(&sim, state.clone());
    // exec needs the loopback listener; everything else uses the in-process client.
    let exec_client = sim
        .http_client()
        .context("building the loopback client for exec")?;
    let registries = controllers::spawn(
        &mut tasks,
        &client,
        exec_client.clone(),
        gpuid.clone(),
        &shutdown,
    )?;
    progress::step("Mokka, gpuid and the TFJob operator running in-process".to_string());

    fleet::seed(&client, nodes).await?;
    progress::step(format!(
        "created {nodes} eligible Nodes, SGPURackProfile {} ({} Nodes x {} GPUs) and SGPUInventory {} ({} racks)",
        fleet::PROFILE_NAME,
        fleet::NODES_PER_RACK,
        fleet::GPUS_PER_NODE,
        fleet::INVENTORY_NAME,
        fleet::racks_for(nodes)
    ));
    {
        let (client, state, stop) = (client.clone(), state.clone(), shutdown.clone());
        tasks.spawn(async move {
            device_plugin::run_daemonset(client, state, stop).await;
            ("device plugin", Ok(()))
        });
    }
    let ui = ui::bind(args.ui_port).await?;
    let ui_url = format!("http://{}/", ui.local_addr);
    let live = Live::start(state.clone(), Mode::Sandbox, shutdown.clone());
    {
        let (live, stop) = (live.clone(), shutdown.clone());
        tasks.spawn(async move {
            (
                "fleet view",
                ui.serve(live, Some(metrics::source(registries)), stop)
                    .await,
            )
        });
    }

    let watch = progress::Startup {
        state: &state,
        nodes,
        keys: gpuid.node_keys(),
    };
    let outcome = tokio::select! {
        ready = tokio::time::timeout(startup_timeout(nodes), watch.wait_until_ready()) => match ready {
            Ok(()) => None,
            Err(_) => Some(Err(anyhow::anyhow!(
                "the fleet was not ready within {} s: {}",
                startup_timeout(nodes).as_secs(),
                watch.describe()
            ))),
        },
        () = shutdown.cancelled() => Some(Ok(true)),
        failed = next_failure(&mut tasks, &shutdown) => Some(Err(failed)),
    };
    let outcome = match outcome {
        Some(done) => done,
        None => {
            progress::summary(&state, &args.kubeconfig, &ui_url, started.elapsed());
            if args.exit_after_demo {
                let context = demo::Context {
                    client: client.clone(),
                    exec_client: exec_client.clone(),
                    state: state.clone(),
                    keys: gpuid.node_keys(),
                    postgres: args.postgres.clone(),
                    postgres_table: args.postgres_table.clone(),
                    cluster: args.cluster_name.clone(),
                };
                tokio::select! {
                    passed = demo::run(&context) => Ok(passed),
                    () = shutdown.cancelled() => Ok(false),
                    failed = next_failure(&mut tasks, &shutdown) => Err(failed),
                }
            } else {
                progress::step("running; Ctrl-C stops the sandbox".to_string());
                {
                    let (live, stop) = (live.clone(), shutdown.clone());
                    tasks.spawn(async move {
                        progress::report_changes(live, stop).await;
                        ("progress", Ok(()))
                    });
                }
                tokio::select! {
                    () = shutdown.cancelled() => Ok(true),
                    failed = next_failure(&mut tasks, &shutdown) => Err(failed),
                }
            }
        }
    };
    progress::step("stopping".to_string());
    shutdown.cancel();
    let stopped = tokio::time::timeout(STOP_TIMEOUT, async {
        while let Some(joined) = tasks.join_next().await {
            if let Ok((name, Err(error))) = joined {
                tracing::warn!(
                    task = name,
                    error = format!("{error:#}"),
                    "stopped with an error"
                );
            }
        }
    })
    .await;
    if stopped.is_err() {
        tracing::warn!("some sandbox tasks did not stop in time; aborting them");
        tasks.abort_all();
    }
    sim.shutdown().await;
    outcome
}

/// The first task that ends before shutdown: every task runs until
/// shutdown, so one that ends earlier has failed. Once shutdown has begun,
/// tasks ending is expected and this waits forever (the shutdown branch of
/// the caller's select wins).
async fn next_failure(
    tasks: &mut JoinSet<(&'static str, anyhow::Result<()>)>,
    shutdown: &CancellationToken,
) -> anyhow::Error {
    let failure = match tasks.join_next().await {
        Some(Ok((name, Err(error)))) => error.context(format!("{name} failed")),
        Some(Ok((name, Ok(())))) => anyhow::anyhow!("{name} stopped unexpectedly"),
        Some(Err(error)) => anyhow::anyhow!("a sandbox task panicked or was cancelled: {error}"),
        None => return std::future::pending().await,
    };
    if shutdown.is_cancelled() {
        tracing::debug!(
            error = format!("{failure:#}"),
            "a sandbox task ended during shutdown"
        );
        return std::future::pending().await;
    }
    failure
}
