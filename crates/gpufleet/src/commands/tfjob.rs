//! `gpufleet tfjob`: the TFJob operator against the cluster of
//! `--kubeconfig` or `KUBECONFIG` (in-cluster config when neither is set),
//! serving `/healthz`, `/readyz` and `/metrics`. It installs nothing: the
//! CRD comes from `gpufleet crds tfjob`.

use std::net::SocketAddr;
use std::path::PathBuf;

use ::tfjob::api::CleanPodPolicy;
use ::tfjob::run::{Operator, OperatorConfig};
use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TfjobArgs {
    #[command(subcommand)]
    pub command: Option<TfjobCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum TfjobCommand {
    /// Turn v1alpha1 TFJob manifests into kubeflow.org/v1 YAML.
    Convert(ConvertArgs),
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The manifest file, or `-` for standard input.
    pub file: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CleanPodPolicyArg {
    All,
    Running,
    None,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig file; without it KUBECONFIG, then the in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Reconcile workers.
    #[arg(long, default_value_t = 1)]
    pub threadiness: usize,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8443")]
    pub admin_address: SocketAddr,
    /// cleanPodPolicy of jobs that set none (Running: tf-operator parity,
    /// None: training-operator parity).
    #[arg(long, value_enum, default_value_t = CleanPodPolicyArg::Running)]
    pub default_clean_pod_policy: CleanPodPolicyArg,
    /// Namespace of the leader-election Lease `tf-operator`.
    #[arg(long, env = "KUBEFLOW_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// DNS suffix appended to TF_CONFIG addresses after `.svc`.
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN")]
    pub cluster_domain: Option<String>,
}

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
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
    kube::Client::try_from(config).context("building the Kubernetes client")
}

/// Runs the operator until SIGINT or SIGTERM.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let client = client(args.kubeconfig.as_ref()).await?;
    let mut config = OperatorConfig::new(args.lease_namespace.clone());
    config.namespace = args.namespace.clone();
    config.workers = args.threadiness.max(1);
    config.plan.cluster_domain = args.cluster_domain.clone().filter(|d| !d.is_empty());
    config.plan.default_clean_pod_policy = match args.default_clean_pod_policy {
        CleanPodPolicyArg::All => CleanPodPolicy::All,
        CleanPodPolicyArg::Running => CleanPodPolicy::Running,
        CleanPodPolicyArg::None => CleanPodPolicy::None,
    };
    let operator = Operator::new(client, config).context("setting up the TFJob operator")?;
    let shutdown = CancellationToken::new();
    tokio::spawn(controller_kit::telemetry::cancel_on_signal(
        shutdown.clone(),
    ));
    let admin = operator.admin_server();
    let admin_task = tokio::spawn(admin.bind_and_serve(args.admin_address, shutdown.clone()));
    let result = operator.run(shutdown.clone()).await;
    shutdown.cancel();
    match admin_task.await {
        Ok(Err(error)) => return Err(error).context("serving /healthz and /metrics"),
        Err(error) => return Err(error).context("the admin server task"),
        Ok(Ok(())) => {}
    }
    result.context("running the TFJob operator")
}

/// `gpufleet tfjob [convert FILE]`.
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
