//! The fleet view at `http://127.0.0.1:PORT/`: `/` is the server-rendered
//! page, `/api/fleet` the same model as JSON, `/events` a server-sent
//! event stream that pushes a fresh rendering whenever a watched object
//! changes (the watch caches feed it; the page swaps it in without a reload),
//! `/metrics` the three controllers' metrics in one OpenMetrics page.

pub mod html;
pub mod view;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Json};
use axum::routing::get;
use futures::Stream;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::controllers::Registries;
use super::state::FleetState;
use view::FleetView;

/// Changes closer together than this are sent as one update.
const COALESCE: Duration = Duration::from_millis(250);

/// A bound, not yet serving, listener (so the port is known first).
pub struct UiServer {
    listener: TcpListener,
    pub local_addr: SocketAddr,
}

/// Binds 127.0.0.1:`port` (0: a free port).
pub async fn bind(port: u16) -> anyhow::Result<UiServer> {
    bind_address(SocketAddr::from(([127, 0, 0, 1], port))).await
}

/// Binds `address` (`gpufleet mokka --ui`).
pub async fn bind_address(address: SocketAddr) -> anyhow::Result<UiServer> {
    let listener = TcpListener::bind(address)
        .await
        .with_context(|| format!("cannot listen on {address} for the fleet view"))?;
    let local_addr = listener
        .local_addr()
        .context("reading the fleet view's address")?;
    Ok(UiServer {
        listener,
        local_addr,
    })
}

#[derive(Clone)]
struct Shared {
    state: FleetState,
    /// The controllers whose metrics `/metrics` serves (None: no `/metrics`).
    registries: Option<Registries>,
    stop: CancellationToken,
}

impl UiServer {
    /// Serves until `stop`.
    pub async fn serve(
        self,
        state: FleetState,
        registries: Option<Registries>,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let router = router(Shared {
            state,
            registries,
            stop: stop.clone(),
        });
        axum::serve(self.listener, router)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
            .context("serving the fleet view")
    }
}

fn router(shared: Shared) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/fleet", get(fleet_json))
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

async fn page(State(shared): State<Shared>) -> impl IntoResponse {
    Html(html::page(&FleetView::of(&shared.state)))
}

async fn fleet_json(State(shared): State<Shared>) -> impl IntoResponse {
    Json(FleetView::of(&shared.state))
}

async fn metrics(State(shared): State<Shared>) -> axum::response::Response {
    let Some(registries) = &shared.registries else {
        return axum::http::StatusCode::NOT_FOUND.into_response();
    };
    match super::metrics::encode(registries) {
        Ok(page) => (
            [(
                axum::http::header::CONTENT_TYPE,
                controller_kit::metrics::OPENMETRICS_CONTENT_TYPE,
            )],
            page,
        )
            .into_response(),
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn events(
    State(shared): State<Shared>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let mut changes = shared.state.subscribe();
    let stream = async_stream(move |sender| async move {
        let mut last: Option<FleetView> = None;
        loop {
            let view = FleetView::of(&shared.state);
            if last.as_ref() != Some(&view) {
                let event = Event::default().event("fleet").data(html::main(&view));
                if sender.send(Ok(event)).await.is_err() {
                    return;
                }
                last = Some(view);
            }
            tokio::select! {
                () = shared.stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
            tokio::time::sleep(COALESCE).await;
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// A stream fed by a task through a small channel; the task ends when the
/// client goes away (the send fails).
fn async_stream<T, F, Fut>(produce: F) -> impl Stream<Item = T>
where
    T: Send + 'static,
    F: FnOnce(tokio::sync::mpsc::Sender<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    tokio::spawn(produce(sender));
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}
