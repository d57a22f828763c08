//! The whole collector process: Kubernetes client, exporter and pipeline,
//! admin server, leader election, until SIGINT/SIGTERM.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use controller_kit::MetricsRegistry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::run::{CollectorRuntime, Election, RunError};
use super::settings::CollectorSettings;
use crate::config::Config;
use crate::export::{AnyExporter, ExportContext, ExportPipeline, PipelineConfig};

/// How long queued records may take to leave at shutdown.
const EXPORT_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot build the Kubernetes client: {0}")]
    Client(String),
    #[error(transparent)]
    Exporter(#[from] crate::export::BuildError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Run(#[from] RunError),
}

impl ServeError {
    /// Upstream's convention: set-up failures exit 2, runtime failures 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Run(RunError::Manager(_)) => 1,
            _ => 2,
        }
    }
}

async fn client(config: &Config) -> Result<kube::Client, ServeError> {
    let kube_config = match &config.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|error| ServeError::Client(format!("{path}: {error}")))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .map_err(|error| ServeError::Client(format!("{path}: {error}")))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|error| ServeError::Client(error.to_string()))?,
    };
    // QPS and BURST as client-go applies them: one token bucket per client.
    controller_kit::rate_limited_client(kube_config, f64::from(config.qps), config.burst)
        .map_err(|error| ServeError::Client(error.to_string()))
}

/// Runs the collector with the given configuration until a signal arrives.
pub async fn run_until_signal(
    config: Config,
    settings: CollectorSettings,
) -> Result<(), ServeError> {
    let shutdown = CancellationToken::new();
    tokio::spawn(controller_kit::telemetry::cancel_on_signal(
        shutdown.clone(),
    ));
    run(config, settings, shutdown).await
}

/// Runs the collector until `shutdown` is cancelled, with the client
/// and admin address the configuration names.
pub async fn run(
    config: Config,
    settings: CollectorSettings,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let client = client(&config).await?;
    let admin = SocketAddr::from((Ipv4Addr::UNSPECIFIED, config.server_port));
    run_with_client(
        client,
        config,
        settings,
        Some(admin),
        MetricsRegistry::new(),
        shutdown,
    )
    .await
}

/// The collector on a given client: `gpufleet gpuid run` and `gpufleet
/// sandbox` both come here, so the sandbox runs exactly the collector a
/// cluster runs. `admin` is where /healthz, /readyz and /metrics listen
/// (None: not served); the collector's metrics go into `registry`.
pub async fn run_with_client(
    client: kube::Client,
    config: Config,
    settings: CollectorSettings,
    admin: Option<SocketAddr>,
    registry: MetricsRegistry,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let exporter = AnyExporter::from_config(
        &config.exporter,
        // The S3 exporter signs with the standard AWS variables.
        ExportContext::from_lookup(
            config
                .leader_election
                .pod_name
                .clone()
                .unwrap_or_else(|| "gpuid".to_owned()),
            |name| std::env::var(name).ok(),
        ),
    )?;
    let pipeline = ExportPipeline::start(exporter, PipelineConfig::from_config(&config));
    let runtime = CollectorRuntime::new(
        client,
        settings,
        Election::from_config(&config.leader_election),
        Arc::new(pipeline.clone()),
        registry,
    )?;
    let admin = match admin {
        Some(address) => {
            let listener = TcpListener::bind(address)
                .await
                .map_err(|source| ServeError::Bind { address, source })?;
            let router = runtime.admin_router();
            let admin_shutdown = shutdown.clone();
            tracing::info!(%address, "gpuid admin server listening");
            Some(tokio::spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(admin_shutdown.cancelled_owned())
                    .await
            }))
        }
        None => None,
    };
    tracing::info!(
        exporter = config.exporter.kind().as_str(),
        "gpuid collector starting"
    );
    let result = runtime.run(shutdown.clone()).await;
    shutdown.cancel();
    let report = pipeline.shutdown(EXPORT_GRACE).await;
    if !report.drained {
        tracing::warn!(
            pending_items = report.pending_items,
            "export queue not drained at shutdown; those nodes keep their old hash and are exported again after the restart"
        );
    }
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    result.map_err(ServeError::from)
}
