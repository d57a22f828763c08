//! The admin HTTP server: `/healthz`, `/readyz`, `/metrics` and routes a controller adds.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::{MetricsRegistry, OPENMETRICS_CONTENT_TYPE};
use crate::readiness::Readiness;

/// The admin server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address is unusable.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address asked for.
        address: SocketAddr,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("admin server failed: {0}")]
    Serve(#[source] std::io::Error),
}

#[derive(Clone)]
struct AdminState {
    readiness: Readiness,
    metrics: MetricsRegistry,
}

/// One axum server for health, readiness, metrics and controller routes.
pub struct AdminServer {
    state: AdminState,
    extra: Router,
}

impl AdminServer {
    /// A server reporting `readiness` and encoding `metrics`.
    pub fn new(readiness: Readiness, metrics: MetricsRegistry) -> Self {
        Self {
            state: AdminState { readiness, metrics },
            extra: Router::new(),
        }
    }

    /// Adds a controller route (for example a read API).
    pub fn route(mut self, path: &str, handler: MethodRouter) -> Self {
        self.extra = self.extra.route(path, handler);
        self
    }

    /// Adds every route of `router`.
    pub fn merge(mut self, router: Router) -> Self {
        self.extra = self.extra.merge(router);
        self
    }

    /// The complete router (usable in-process, without a socket).
    pub fn router(&self) -> Router {
        Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics))
            .with_state(self.state.clone())
            .merge(self.extra.clone())
    }

    /// Binds `address` and serves until `shutdown` is cancelled.
    pub async fn bind_and_serve(
        self,
        address: SocketAddr,
        shutdown: CancellationToken,
    ) -> Result<(), ServeError> {
        let listener = TcpListener::bind(address)
            .await
            .map_err(|source| ServeError::Bind { address, source })?;
        self.serve(listener, shutdown).await
    }

    /// Serves on `listener` until `shutdown` is cancelled, finishing requests in progress.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), ServeError> {
        if let Ok(address) = listener.local_addr() {
            tracing::info!(%address, "admin server listening");
        }
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
            .map_err(ServeError::Serve)
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AdminState>) -> Response {
    let snapshot = state.readiness.snapshot();
    let status = if snapshot.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let verdict = if snapshot.is_ready() {
        "ready"
    } else {
        "not ready"
    };
    (status, format!("{verdict}: {}\n", snapshot.reason())).into_response()
}

async fn metrics(State(state): State<AdminState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)], text).into_response(),
        Err(error) => {
            tracing::error!(%error, "encoding metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "encoding metrics failed\n",
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    async fn get_path(router: Router, path: &str) -> (StatusCode, String, Option<String>) {
        let request = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let response = router.oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|value| value.to_str().unwrap().to_string());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            String::from_utf8(body.to_vec()).unwrap(),
            content_type,
        )
    }

    #[tokio::test]
    async fn readyz_follows_the_state_machine_with_a_reason() {
        let readiness = Readiness::new();
        let server = AdminServer::new(readiness.clone(), MetricsRegistry::new());
        let (status, body, _) = get_path(server.router(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready: caches are not synced\n");

        readiness.set_cache_ready(true);
        readiness.campaigning();
        readiness.observed_leader("other", "me");
        let (status, body, _) = get_path(server.router(), "/readyz").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "ready: standby with synced caches\n");

        readiness.became_leader();
        let (status, body, _) = get_path(server.router(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready: leader starting its workers\n");
    }

    #[tokio::test]
    async fn healthz_answers_ok_and_metrics_are_openmetrics_text() {
        let registry = MetricsRegistry::new();
        let counter: Counter = Counter::default();
        registry.register("demo_things", "Things", counter.clone());
        counter.inc();
        let server = AdminServer::new(Readiness::new(), registry);
        let (status, body, _) = get_path(server.router(), "/healthz").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
        let (status, body, content_type) = get_path(server.router(), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
        assert!(body.contains("demo_things_total 1"), "{body}");
        assert!(body.ends_with("# EOF\n"), "{body}");
    }

    #[tokio::test]
    async fn controller_routes_are_served_next_to_the_admin_routes() {
        let server = AdminServer::new(Readiness::new(), MetricsRegistry::new())
            .route("/v1/assignments", get(|| async { "[]" }));
        let (status, body, _) = get_path(server.router(), "/v1/assignments").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "[]"));
    }

    #[tokio::test]
    async fn serve_stops_when_shutdown_is_cancelled() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let shutdown = CancellationToken::new();
        let server = AdminServer::new(Readiness::new(), MetricsRegistry::new());
        let running = tokio::spawn(server.serve(listener, shutdown.clone()));
        shutdown.cancel();
        let result = tokio::time::timeout(std::time::Duration::from_secs(5), running).await;
        assert!(matches!(result, Ok(Ok(Ok(())))));
    }
}
