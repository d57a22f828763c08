//! The Mokka control plane as one entry point: the controller, and beside
//! it the admin server (`/healthz`, `/readyz`, `/metrics`, and the
//! node-agent API when its gate is on). `gpufleet mokka` builds a
//! [`ControlPlane`] from upstream's flags, the sandbox builds one in code;
//! both run it through [`run_control_plane`], so the sandbox exercises
//! exactly what a cluster runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use controller_kit::LeaderElectionConfig;
use controller_kit::serve::{AdminServer, ServeError};
use tokio_util::sync::CancellationToken;

use crate::controller::{ControllerError, MokkaController};
use crate::plan::options::Options;

/// How one replica runs.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    pub options: Options,
    pub election: LeaderElectionConfig,
    /// Where /healthz, /readyz and /metrics listen (None: not served).
    pub admin: Option<SocketAddr>,
    /// How long the admin server may drain at shutdown.
    pub shutdown_timeout: Duration,
}

/// Why the control plane stopped other than by its shutdown token.
#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error(transparent)]
    Controller(#[from] ControllerError),
    #[error("serving the admin address: {0}")]
    Serve(#[source] ServeError),
    #[error("the admin server stopped")]
    ServerStopped,
    #[error("the admin server task failed: {0}")]
    ServerTask(#[source] tokio::task::JoinError),
}

/// Runs `controller` (built from `plane.options`) and its admin server
/// until `shutdown`; the caller keeps the controller for its metrics
/// registry and readiness. Either one ending stops the other.
pub async fn run_control_plane(
    controller: Arc<MokkaController>,
    plane: ControlPlane,
    shutdown: CancellationToken,
) -> Result<(), ControlPlaneError> {
    let server_stop = CancellationToken::new();
    let mut server = plane.admin.map(|listen| {
        let admin = AdminServer::new(controller.readiness(), controller.registry());
        // The node-agent API shares the port of /healthz, /readyz and /metrics.
        let admin = if plane.options.features.node_agent_api {
            admin.merge(controller.node_api().router())
        } else {
            admin
        };
        tokio::spawn(admin.bind_and_serve(listen, server_stop.clone()))
    });
    tracing::info!(
        listen = ?plane.admin,
        lease = %format!("{}/{}", plane.election.namespace, plane.election.name),
        featureGates = %plane.options.features,
        "starting Mokka control plane"
    );
    let controller_run = Arc::clone(&controller).run(plane.election.clone(), shutdown.clone());
    let result = match server.as_mut() {
        Some(server) => tokio::select! {
            result = controller_run => result.map_err(ControlPlaneError::from),
            served = server => {
                shutdown.cancel();
                match served {
                    Ok(Ok(())) => Err(ControlPlaneError::ServerStopped),
                    Ok(Err(error)) => Err(ControlPlaneError::Serve(error)),
                    Err(error) => Err(ControlPlaneError::ServerTask(error)),
                }
            }
        },
        None => controller_run.await.map_err(ControlPlaneError::from),
    };
    server_stop.cancel();
    if let Some(mut server) = server
        && tokio::time::timeout(plane.shutdown_timeout, &mut server)
            .await
            .is_err()
    {
        tracing::warn!(timeout = ?plane.shutdown_timeout, "admin server did not drain in time");
        server.abort();
    }
    result
}
