//! `gpufleet tfjob`: the TFJob operator against the cluster of
//! `--kubeconfig` or `KUBECONFIG` (in-cluster config when neither is set),
//! serving `/healthz`, `/readyz` and `/metrics`. It installs nothing: the
//! CRD comes from `gpufleet crds tfjob`.
//!
//! This module is the process around the operator: the flags (in
//! `cli::tfjob`) become an [`OperatorConfig`](::tfjob::run::OperatorConfig)
//! and a client, and [`Operator`] builds and runs the operator from them,
//! exactly as `gpufleet sandbox` does with a configuration written in code.

use ::tfjob::run::Operator;
use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cli::tfjob::{RunArgs, TfjobArgs, TfjobCommand};

async fn client(args: &RunArgs) -> anyhow::Result<kube::Client> {
    let mut config = match args.kubeconfig.as_ref() {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster configuration: pass --kubeconfig or set KUBECONFIG")?,
    };
    if let Some(master) = args.master.as_deref().filter(|m| !m.is_empty()) {
        config.cluster_url = master
            .parse()
            .with_context(|| format!("--master {master:?} is not a URL"))?;
    }
    // The same client-go token bucket gpuid's collector uses.
    if args.qps > 0.0 {
        controller_kit::rate_limited_client(config, args.qps, args.burst)
            .context("building the Kubernetes client")
    } else {
        kube::Client::try_from(config).context("building the Kubernetes client")
    }
}

/// Runs the operator until SIGINT or SIGTERM.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.version {
        println!("gpufleet tfjob {}", env!("CARGO_PKG_VERSION"));
        return Ok(());
    }
    let config = args.operator_config()?;
    let client = client(&args).await?;
    tracing::info!(
        namespace = config.namespace.as_deref().unwrap_or("(all)"),
        workers = config.workers,
        leader_election = config.leader_election,
        lease = %format!("{}/{}", config.election.namespace, config.election.name),
        resync_period_seconds = args.resync_period.as_secs(),
        "starting the TFJob operator"
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(controller_kit::telemetry::cancel_on_signal(
        shutdown.clone(),
    ));
    Operator::new(client, config)
        .context("setting up the TFJob operator")?
        .run(shutdown)
        .await
        .context("running the TFJob operator")
}

pub async fn main(args: TfjobArgs) -> anyhow::Result<()> {
    match args.command {
        None => run(args.run).await,
        Some(TfjobCommand::Convert(args)) => convert(&args.file),
    }
}

/// `gpufleet tfjob convert FILE|-`: v1 YAML on stdout.
fn convert(file: &std::path::Path) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let input = if file == std::path::Path::new("-") {
        let mut input = String::new();
        std::io::stdin()
            .read_to_string(&mut input)
            .context("reading standard input")?;
        input
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let output = ::tfjob::api::v1alpha1::convert_yaml(&input)
        .with_context(|| format!("converting {}", file.display()))?;
    std::io::stdout()
        .write_all(output.as_bytes())
        .context("writing to stdout")
}
