//! Running `nvidia-smi -q -x` in a device-plugin container: argv without a
//! shell, a deadline and an output cap, and the document parsed as its
//! frames arrive.
//!
//! The exec is gpuid's own WebSocket client rather than kube's
//! `Api::exec`, for memory (issue #29, docs/benchmarks.md "gpuid's exec
//! stream"). With kube's, every exec in flight held tungstenite's default
//! 128 KiB read buffer (kube offers no setting for it), a pipe between its
//! WebSocket task and the reader, and the whole ~212 KB document until it was
//! parsed: about 450 KB an exec, at 16 workers the largest part of the
//! collector's heap. Here the upgrade goes through the same `kube::Client`
//! (its TLS, authentication and headers), the socket has a small read
//! buffer, and each stdout frame goes straight into the streaming parser and
//! is dropped: an exec holds a frame and one XML event.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures::StreamExt;
use http::header::{
    CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL,
    SEC_WEBSOCKET_VERSION, UPGRADE,
};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::Api;
use kube::api::AttachParams;
use kube::client::{Body, UpgradeConnectionError};
use tokio::io::{AsyncBufRead, AsyncRead, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::client::generate_key;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Message, Role, WebSocketConfig};

use crate::smi::{DocumentCheck, Limits, ParseError, SmiReport, parse_async};

/// The command, as an argv: no shell is needed in the target image.
pub const NVIDIA_SMI_ARGV: [&str; 3] = ["nvidia-smi", "-q", "-x"];

/// The subprotocols offered, preferred first; both carry the exit status as
/// a `Status` on the error channel.
const PROTOCOLS: &str = "v5.channel.k8s.io, v4.channel.k8s.io";
const ACCEPTED_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// The socket's read buffer. A frame larger than this (kube-sim and the
/// kubelet send up to 32 KiB) still arrives whole; the buffer only bounds
/// what is read ahead of the frame being decoded.
const READ_BUFFER_BYTES: usize = 8 * 1024;

/// The stream channels of `channel.k8s.io`: the first byte of each frame.
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;

/// stderr is only kept for error messages; nvidia-smi prints benign warnings there.
const STDERR_KEEP: usize = 4096;

/// A `Status` on the error channel is a few hundred bytes; more is not one.
const STATUS_KEEP: usize = 64 * 1024;

/// An error answer to the upgrade is a `Status`; more of it is not read.
const ERROR_BODY_KEEP: usize = 64 * 1024;

/// Why an exec produced no usable output. `reason()` is the metric label.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("exec in {pod} did not finish within {timeout:?}")]
    Timeout { pod: String, timeout: Duration },
    #[error("exec in {pod} printed more than {limit} bytes; output rejected")]
    OutputTooLarge { pod: String, limit: usize },
    #[error("exec in {pod} failed ({message}); stderr: {stderr:?}")]
    Failed {
        pod: String,
        message: String,
        stderr: String,
    },
    #[error("cannot start exec in {pod}: {source}")]
    Connect {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("exec stream of {pod} broke: {message}")]
    Stream { pod: String, message: String },
}

impl ExecError {
    pub fn reason(&self) -> &'static str {
        match self {
            ExecError::Timeout { .. } => "timeout",
            ExecError::OutputTooLarge { .. } => "output_too_large",
            ExecError::Failed { .. } => "exit_code",
            ExecError::Connect { .. } => "connect",
            ExecError::Stream { .. } => "stream",
        }
    }
}

/// Runs nvidia-smi in `container` of pod `name` and parses what it prints.
/// The outer error is the exec's (it failed, timed out, printed too much);
/// the inner result is the document's, exactly what
/// [`crate::smi::parse_with_limits`] gives for the whole output, with
/// `limits.max_input_bytes` as the output cap.
pub async fn run_nvidia_smi(
    pods: &Api<Pod>,
    name: &str,
    container: &str,
    timeout: Duration,
    limits: Limits,
) -> Result<Result<SmiReport, ParseError>, ExecError> {
    match tokio::time::timeout(timeout, exec(pods, name, container, limits)).await {
        Ok(result) => result,
        Err(_) => Err(ExecError::Timeout {
            pod: name.to_owned(),
            timeout,
        }),
    }
}

async fn exec(
    pods: &Api<Pod>,
    name: &str,
    container: &str,
    limits: Limits,
) -> Result<Result<SmiReport, ParseError>, ExecError> {
    let connect_error = |source: kube::Error| ExecError::Connect {
        pod: name.to_owned(),
        source,
    };
    let params = AttachParams::default()
        .container(container)
        .stdin(false)
        .stdout(true)
        .stderr(true);
    let request = kube::core::Request::new(pods.resource_url())
        .exec(name, NVIDIA_SMI_ARGV, &params)
        .map_err(|error| connect_error(kube::Error::BuildRequest(error)))?;
    let key = generate_key();
    let request = upgrade_request(request, &key).map_err(connect_error)?;
    let response = pods
        .clone()
        .into_client()
        .send(request)
        .await
        .map_err(connect_error)?;
    let response = refused(response).await.map_err(connect_error)?;
    verify_upgrade(&response, &key)
        .map_err(|error| connect_error(kube::Error::UpgradeConnection(error)))?;
    let upgraded = hyper::upgrade::on(response).await.map_err(|error| {
        connect_error(kube::Error::UpgradeConnection(
            UpgradeConnectionError::GetPendingUpgrade(error),
        ))
    })?;
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES);
    let socket =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, Some(config)).await;

    let mut output = ExecOutput::new(socket, limits);
    let parsed = parse_async(&mut output, limits).await;
    // The rest still goes through the check (a bad byte after a parse error
    // is the error the whole document reports) and the exit status follows
    // stdout.
    output.drain().await;
    output.outcome(name, parsed)
}

/// The exec request as a WebSocket upgrade offering both subprotocols.
fn upgrade_request(request: Request<Vec<u8>>, key: &str) -> Result<Request<Body>, kube::Error> {
    let (mut parts, body) = request.into_parts();
    let headers = &mut parts.headers;
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
    headers.insert(SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(PROTOCOLS));
    let key = HeaderValue::from_str(key).map_err(|error| kube::Error::HttpError(error.into()))?;
    headers.insert(SEC_WEBSOCKET_KEY, key);
    Ok(Request::from_parts(parts, Body::from(body)))
}

/// A 4xx or 5xx answer to the upgrade as kube's `Error::Api`, from the
/// `Status` in its body (or one made of its text), as `Api::exec` reports it.
async fn refused(response: Response<Body>) -> Result<Response<Body>, kube::Error> {
    let code = response.status();
    if !(code.is_client_error() || code.is_server_error()) {
        return Ok(response);
    }
    let body = http_body_util::Limited::new(response.into_body(), ERROR_BODY_KEEP)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let status = match serde_json::from_slice::<kube::core::Status>(&body) {
        Ok(status) => status,
        Err(_) => kube::core::Status::failure(
            String::from_utf8_lossy(&body).trim(),
            "Failed to parse error data",
        )
        .with_code(code.as_u16()),
    };
    Err(kube::Error::Api(status.boxed()))
}

/// RFC 6455's checks of the answer, and a subprotocol we offered.
fn verify_upgrade(response: &Response<Body>, key: &str) -> Result<(), UpgradeConnectionError> {
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(UpgradeConnectionError::ProtocolSwitch(response.status()));
    }
    let headers = response.headers();
    let header_is = |name, expected: &str| {
        headers
            .get(name)
            .and_then(|value: &HeaderValue| value.to_str().ok())
            .is_some_and(|value| value.eq_ignore_ascii_case(expected))
    };
    if !header_is(UPGRADE, "websocket") {
        return Err(UpgradeConnectionError::MissingUpgradeWebSocketHeader);
    }
    if !header_is(CONNECTION, "Upgrade") {
        return Err(UpgradeConnectionError::MissingConnectionUpgradeHeader);
    }
    let accept = derive_accept_key(key.as_bytes());
    if headers.get(SEC_WEBSOCKET_ACCEPT).map(HeaderValue::as_bytes) != Some(accept.as_bytes()) {
        return Err(UpgradeConnectionError::SecWebSocketAcceptKeyMismatch);
    }
    let protocol = headers
        .get(SEC_WEBSOCKET_PROTOCOL)
        .and_then(|value| value.to_str().ok());
    if !protocol.is_some_and(|protocol| ACCEPTED_PROTOCOLS.contains(&protocol)) {
        return Err(UpgradeConnectionError::SecWebSocketProtocolMismatch);
    }
    Ok(())
}

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// The exec's frames, sorted by channel: stdout is read by the parser
/// (through [`AsyncBufRead`], a frame at a time, after the document check),
/// stderr's head and the status are kept.
struct ExecOutput {
    socket: Socket,
    check: DocumentCheck,
    /// The output cap (`Limits::max_input_bytes`).
    limit: usize,
    /// What the parser has not read yet of the last stdout frame.
    unread: Bytes,
    /// False after the first bad or excess byte: the parser then sees the
    /// end of the document, and the check's verdict decides.
    feeding: bool,
    stderr: Vec<u8>,
    status: Vec<u8>,
    /// The server closed the stream (or the socket ended).
    closed: bool,
    broken: Option<String>,
}

impl ExecOutput {
    fn new(socket: Socket, limits: Limits) -> Self {
        ExecOutput {
            socket,
            check: DocumentCheck::new(limits),
            limit: limits.max_input_bytes,
            unread: Bytes::new(),
            feeding: true,
            stderr: Vec::new(),
            status: Vec::new(),
            closed: false,
            broken: None,
        }
    }

    fn take(&mut self, message: Message) {
        match message {
            Message::Binary(frame) => self.route(frame),
            Message::Close(_) => self.closed = true,
            // Pings are answered by tungstenite; text frames carry no channel.
            Message::Text(_) | Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
    }

    fn route(&mut self, mut frame: Bytes) {
        if frame.is_empty() {
            return;
        }
        let channel = frame.get_u8();
        match channel {
            STDOUT => {
                let clean = self.check.accept(&frame);
                if clean && self.feeding {
                    self.unread = frame;
                } else {
                    self.feeding = false;
                }
            }
            STDERR => keep_head(&mut self.stderr, &frame, STDERR_KEEP),
            ERROR => keep_head(&mut self.status, &frame, STATUS_KEEP),
            // stdin, resize and v5's close frames are not ours to read.
            _ => {}
        }
    }

    fn end_with(&mut self, error: impl std::fmt::Display) {
        self.broken = Some(error.to_string());
        self.closed = true;
    }

    /// Reads to the end of the stream (stdout still checked, not parsed),
    /// or until the output is over its cap.
    async fn drain(&mut self) {
        self.feeding = false;
        self.unread = Bytes::new();
        while !self.closed && !self.check.too_large() {
            match self.socket.next().await {
                Some(Ok(message)) => self.take(message),
                Some(Err(error)) => self.end_with(error),
                None => self.closed = true,
            }
        }
    }

    /// The exec's result, in the order the whole output would give it: too
    /// much output, a broken stream, a failed command, then the document.
    fn outcome(
        self,
        pod: &str,
        parsed: Result<SmiReport, ParseError>,
    ) -> Result<Result<SmiReport, ParseError>, ExecError> {
        if self.check.too_large() {
            return Err(ExecError::OutputTooLarge {
                pod: pod.to_owned(),
                limit: self.limit,
            });
        }
        if let Some(message) = self.broken {
            return Err(ExecError::Stream {
                pod: pod.to_owned(),
                message,
            });
        }
        if !self.status.is_empty() {
            let status: Status =
                serde_json::from_slice(&self.status).map_err(|error| ExecError::Stream {
                    pod: pod.to_owned(),
                    message: format!("the exit status is not a Status: {error}"),
                })?;
            if status.status.as_deref() == Some("Failure") {
                return Err(ExecError::Failed {
                    pod: pod.to_owned(),
                    message: status.message.unwrap_or_else(|| "non-zero exit".into()),
                    stderr: String::from_utf8_lossy(&self.stderr).into_owned(),
                });
            }
        }
        Ok(self.check.verdict(parsed))
    }
}

fn keep_head(kept: &mut Vec<u8>, bytes: &[u8], keep: usize) {
    let room = keep.saturating_sub(kept.len());
    kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

impl AsyncBufRead for ExecOutput {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        while this.unread.is_empty() && this.feeding && !this.closed {
            match ready!(this.socket.poll_next_unpin(cx)) {
                Some(Ok(message)) => this.take(message),
                Some(Err(error)) => {
                    let message = error.to_string();
                    this.end_with(&message);
                    return Poll::Ready(Err(io::Error::other(message)));
                }
                None => this.closed = true,
            }
        }
        Poll::Ready(Ok(&this.unread))
    }

    fn consume(self: Pin<&mut Self>, amount: usize) {
        let this = self.get_mut();
        this.unread.advance(amount.min(this.unread.len()));
    }
}

impl AsyncRead for ExecOutput {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let available = ready!(self.as_mut().poll_fill_buf(cx))?;
        let count = available.len().min(buffer.remaining());
        buffer.put_slice(&available[..count]);
        self.consume(count);
        Poll::Ready(Ok(()))
    }
}
