//! The fleet view's HTTP server. `/` is a small page (markup, style and
//! script, no data); `/api/fleet` the whole model as JSON; `/events` a
//! server-sent event stream of deltas (`event: delta`, only the records
//! that changed, numbered) and `event: resync` when a page fell too far
//! behind; `/metrics` whatever OpenMetrics page the caller hands in.
//! Every answer is gzip-compressed when the client accepts it, the event
//! stream too (flushed after each event).

use std::convert::Infallible;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use flate2::Compression;
use flate2::write::GzEncoder;
use tokio::net::TcpListener;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use super::html;
use super::live::Live;
use super::model::Mode;

/// A comment line on an otherwise quiet event stream, so proxies and the
/// browser keep the connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

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

/// Renders the OpenMetrics page `/metrics` serves. The caller decides
/// whose metrics those are (the sandbox: its three controllers), so this
/// module does not depend on any command.
pub type MetricsSource = Arc<dyn Fn() -> Result<String, std::fmt::Error> + Send + Sync>;

#[derive(Clone)]
struct Shared {
    live: Arc<Live>,
    mode: Mode,
    /// What `/metrics` serves (None: no `/metrics`).
    metrics: Option<MetricsSource>,
    stop: CancellationToken,
}

impl UiServer {
    /// Serves `live`'s model until `stop`.
    pub async fn serve(
        self,
        live: Arc<Live>,
        metrics: Option<MetricsSource>,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let router = router(Shared {
            mode: live.mode(),
            live,
            metrics,
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
        .route("/favicon.svg", get(favicon))
        .route("/favicon.ico", get(favicon))
        .route("/api/fleet", get(fleet_json))
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .with_state(shared)
}

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|coding| {
            let mut parts = coding.trim().split(';');
            let name = parts.next().unwrap_or_default().trim();
            // `gzip;q=0` refuses it.
            let refused = parts.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// `body` with `content_type`, gzip-compressed when the client accepts it.
fn compressed(headers: &HeaderMap, content_type: &'static str, body: Vec<u8>) -> Response {
    let mut builder = Response::builder()
        .header(header::CONTENT_TYPE, content_type)
        .header(header::VARY, "accept-encoding")
        .header(header::CACHE_CONTROL, "no-store");
    let body = if accepts_gzip(headers) {
        let mut encoder = GzEncoder::new(Vec::with_capacity(body.len() / 4), Compression::fast());
        match encoder.write_all(&body).and_then(|()| encoder.finish()) {
            Ok(gzipped) => {
                builder = builder.header(header::CONTENT_ENCODING, "gzip");
                gzipped
            }
            Err(_) => body,
        }
    } else {
        body
    };
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn page(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    compressed(
        &headers,
        "text/html; charset=utf-8",
        html::page(shared.mode).into_bytes(),
    )
}

async fn favicon(headers: HeaderMap) -> Response {
    compressed(&headers, "image/svg+xml", html::FAVICON.as_bytes().to_vec())
}

async fn fleet_json(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    // Off the async workers: at 100,000 Nodes the model is 67 MB of JSON
    // and compressing it takes over a second.
    let answer = tokio::task::spawn_blocking(move || match shared.live.snapshot() {
        Ok(json) => compressed(&headers, "application/json", json),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    })
    .await;
    answer.unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn metrics(State(shared): State<Shared>) -> Response {
    let Some(metrics) = &shared.metrics else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match metrics() {
        Ok(page) => (
            [(
                header::CONTENT_TYPE,
                controller_kit::metrics::OPENMETRICS_CONTENT_TYPE,
            )],
            page,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Frames for one page's event stream, compressed as one gzip stream
/// flushed after each event (so each event reaches the page at once).
struct Framer {
    gzip: Option<GzEncoder<Vec<u8>>>,
}

impl Framer {
    fn frame(&mut self, text: &str) -> Bytes {
        match &mut self.gzip {
            None => Bytes::from(text.to_string()),
            Some(encoder) => {
                if encoder
                    .write_all(text.as_bytes())
                    .and_then(|()| encoder.flush())
                    .is_err()
                {
                    return Bytes::new();
                }
                Bytes::from(std::mem::take(encoder.get_mut()))
            }
        }
    }
}

async fn events(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let gzip = accepts_gzip(&headers);
    let mut updates = shared.live.subscribe();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(8);
    tokio::spawn(async move {
        let mut framer = Framer {
            gzip: gzip.then(|| GzEncoder::new(Vec::new(), Compression::fast())),
        };
        // Tells the page it is connected before any change happens.
        let mut next = ": connected\n\nevent: hello\ndata: {}\n\n".to_string();
        loop {
            if sender.send(Ok(framer.frame(&next))).await.is_err() {
                return;
            }
            next = tokio::select! {
                () = shared.stop.cancelled() => return,
                update = updates.recv() => match update {
                    Ok(update) => format!("event: delta\ndata: {}\n\n", update.json),
                    Err(RecvError::Lagged(_)) => "event: resync\ndata: {}\n\n".to_string(),
                    Err(RecvError::Closed) => return,
                },
                () = tokio::time::sleep(KEEP_ALIVE) => ": keep-alive\n\n".to_string(),
            };
        }
    });
    let mut response = Response::new(Body::from_stream(
        tokio_stream::wrappers::ReceiverStream::new(receiver),
    ));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    if gzip {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_used_only_when_the_client_accepts_it() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::ACCEPT_ENCODING,
                HeaderValue::from_str(value).unwrap(),
            );
            accepts_gzip(&headers)
        };
        assert!(with("gzip, deflate, br, zstd"));
        assert!(with("br;q=1.0, GZIP;q=0.5"));
        assert!(!with("br, deflate"));
        assert!(!with("gzip;q=0"));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn each_event_of_a_gzipped_stream_decodes_as_soon_as_it_is_sent() {
        use std::io::Read;
        let mut framer = Framer {
            gzip: Some(GzEncoder::new(Vec::new(), Compression::fast())),
        };
        let mut wire = Vec::new();
        wire.extend_from_slice(&framer.frame("event: hello\ndata: {}\n\n"));
        wire.extend_from_slice(&framer.frame("event: delta\ndata: {\"seq\":1}\n\n"));
        // The stream is not finished, so read what has been flushed so far.
        let mut decoder = flate2::read::GzDecoder::new(&wire[..]);
        let mut text = String::new();
        let _ = decoder.read_to_string(&mut text);
        assert_eq!(
            text,
            "event: hello\ndata: {}\n\nevent: delta\ndata: {\"seq\":1}\n\n"
        );
    }
}
