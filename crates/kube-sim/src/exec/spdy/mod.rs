//! Exec over SPDY/3.1, the transport client-go's `NewSPDYExecutor` and
//! kubectl (with `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`) still use.
//!
//! The client upgrades with `Upgrade: SPDY/3.1` and the stream protocols
//! it speaks in `X-Stream-Protocol-Version`; kube-sim answers 101 with
//! `v4.channel.k8s.io`. The client then opens one SPDY stream per channel,
//! named by its `streamType` header (`error`, `stdin`, `stdout`, `stderr`,
//! `resize`). As the kubelet does, the command starts once every stream
//! the options call for exists; stdout and stderr end with FIN, then the
//! error stream carries the exit Status (v4: a `meta.k8s.io/v1 Status`,
//! `Success` or `NonZeroExitCode` with an `ExitCode` cause) and its FIN.

mod frame;
pub(super) mod portforward;
mod session;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use super::ExecHandlers;
use super::endpoint::Prepared;
use crate::error::ApiError;

/// Why reading the next frame failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    #[error(transparent)]
    Protocol(#[from] frame::SpdyError),
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
}

/// The next whole frame from `reader`, `None` when the peer hung up.
/// Cancel-safe: bytes read stay in `buf` for the next call.
pub(super) async fn read_frame<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    codec: &mut frame::Codec,
    buf: &mut bytes::BytesMut,
) -> Result<Option<frame::Frame>, ReadError> {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(frame) = codec.decode(buf)? {
            return Ok(Some(frame));
        }
        if reader.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// The `Upgrade` token of the handshake.
pub(super) const UPGRADE: &str = "SPDY/3.1";
/// The stream-protocol negotiation headers (client offers, server picks).
const PROTOCOL_HEADER: &str = "X-Stream-Protocol-Version";
const ACCEPTED_HEADER: &str = "X-Accepted-Stream-Protocol-Versions";
/// The one stream protocol served over SPDY: the exit Status as JSON on the
/// error stream, and terminal resizing. client-go and kubectl offer it
/// first; the older ones report exit codes as bare text.
const V4: &str = "v4.channel.k8s.io";

/// Answers the upgrade and runs the exec on the upgraded connection.
pub(super) fn upgrade(
    request: Request,
    prepared: Prepared,
    handlers: ExecHandlers,
    shutdown: CancellationToken,
) -> Response {
    negotiate_and_upgrade(request, V4, move |io| {
        session::serve(io, prepared, handlers, shutdown)
    })
}

/// The kubelet's handshake for one served stream protocol: with no offer
/// in `X-Stream-Protocol-Version` a 400, with none that is `protocol` a 403
/// naming both sides; else 101 `Upgrade: SPDY/3.1` naming `protocol`, and
/// `session` runs on the upgraded connection.
pub(super) fn negotiate_and_upgrade<F, Fut>(
    mut request: Request,
    protocol: &'static str,
    session: F,
) -> Response
where
    F: FnOnce(TokioIo<hyper::upgrade::Upgraded>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let offered: Vec<String> = request
        .headers()
        .get_all(PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    if offered.is_empty() {
        return ApiError::bad_request(format!("unable to upgrade: {PROTOCOL_HEADER} is required"))
            .into_response();
    }
    if !offered.iter().any(|p| p == protocol) {
        let mut response = ApiError::forbidden(format!(
            "unable to upgrade: unable to negotiate protocol: client supports [{}], server accepts [{protocol}]",
            offered.join(" ")
        ))
        .into_response();
        response
            .headers_mut()
            .insert(ACCEPTED_HEADER, HeaderValue::from_static(protocol));
        return response;
    }
    let on_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => session(TokioIo::new(upgraded)).await,
            Err(e) => tracing::debug!(error = %e, protocol, "SPDY upgrade failed"),
        }
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static(UPGRADE));
    headers.insert(PROTOCOL_HEADER, HeaderValue::from_static(protocol));
    response
}
