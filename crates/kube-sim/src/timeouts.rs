//! Connection timeouts of the loopback listener, as kube-apiserver's Go
//! `http.Server` has them: a client gets `header_read` (32 s) to send a
//! request's headers, and a keep-alive connection may sit `idle` (90 s)
//! between requests. Without them a client that opens connections and never
//! finishes a request holds a file descriptor each for as long as it likes,
//! and a thousand of them lock every other client out.
//!
//! hyper has a header-read timer, but axum's `serve` gives no access to it,
//! and hyper starts it as soon as it waits for a request, so an idle
//! keep-alive connection would be cut after the header timeout instead of
//! the idle one. So the timers live here instead, in the connection's I/O:
//! [`TimedIo`] fails a read once the deadline of the phase the connection is
//! in has passed, and hyper closes the connection. The phase comes from the
//! request handling: [`PerConnection`] wraps the app so that a request counts
//! as in flight from the moment its headers are parsed until its response
//! body has been sent (or dropped). While a request is in flight no timer
//! runs: a watch may stay open for hours, a request body may trickle in.
//! After a `101 Switching Protocols` (exec, attach, port-forward) the
//! connection is no longer HTTP and never times out here.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// kube-apiserver's `ReadHeaderTimeout` ("just shy of
/// requestTimeoutUpperBound", secure_serving.go).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(32);
/// kube-apiserver's `IdleTimeout`, which matches Go's `http.DefaultTransport`
/// keep-alive timeout so that clients give up a connection first.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// How long a connection may take over its request headers, and stay idle
/// between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionTimeouts {
    pub header_read: Duration,
    pub idle: Duration,
}

impl Default for ConnectionTimeouts {
    fn default() -> Self {
        Self {
            header_read: DEFAULT_HEADER_READ_TIMEOUT,
            idle: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// What the request handling tells the connection's I/O.
#[derive(Debug, Default)]
struct ConnState {
    /// Requests whose headers were read and whose response is not done.
    in_flight: AtomicUsize,
    /// Responses finished so far: a change means the connection just went
    /// back to waiting for a request, and its idle timer starts.
    finished: AtomicU64,
    /// The connection switched protocols and is no longer HTTP.
    upgraded: AtomicBool,
    /// The task that last read the connection while a request was in
    /// flight. hyper does not read again by itself once a response is sent
    /// (its last read was already waiting on the socket), so the end of a
    /// response wakes it, and the read that follows starts the idle timer.
    reader: parking_lot::Mutex<Option<std::task::Waker>>,
}

/// A listener whose connections carry the timeouts.
pub struct Timed<L> {
    inner: L,
    timeouts: ConnectionTimeouts,
}

impl<L> Timed<L> {
    pub fn new(inner: L, timeouts: ConnectionTimeouts) -> Self {
        Self { inner, timeouts }
    }
}

impl<L: Listener> Listener for Timed<L> {
    type Io = TimedIo<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = self.inner.accept().await;
        (TimedIo::new(io, self.timeouts), addr)
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A request is in flight, or the connection was upgraded: no timer.
    Busy,
    /// Waiting for the first byte of the next request.
    Idle,
    /// Some of a request's headers have come, not all.
    Headers,
}

/// A connection's I/O with the timers of [`ConnectionTimeouts`]; writes pass
/// through untouched.
pub struct TimedIo<I> {
    inner: I,
    state: Arc<ConnState>,
    timeouts: ConnectionTimeouts,
    phase: Phase,
    /// The value of `state.finished` the current phase started from.
    seen_finished: u64,
    deadline: Pin<Box<Sleep>>,
}

impl<I> TimedIo<I> {
    fn new(inner: I, timeouts: ConnectionTimeouts) -> Self {
        // The first request's headers are timed from the accept, as Go
        // times them from the start of its first read: a client that
        // connects and sends nothing is cut after the header timeout.
        Self {
            inner,
            state: Arc::default(),
            timeouts,
            phase: Phase::Headers,
            seen_finished: 0,
            deadline: Box::pin(tokio::time::sleep(timeouts.header_read)),
        }
    }

    fn arm(&mut self, phase: Phase, after: Duration) {
        self.phase = phase;
        self.deadline.as_mut().reset(Instant::now() + after);
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for TimedIo<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.state.upgraded.load(Ordering::Acquire)
            || this.state.in_flight.load(Ordering::Acquire) > 0
        {
            this.phase = Phase::Busy;
            let mut reader = this.state.reader.lock();
            if !reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *reader = Some(cx.waker().clone());
            }
            drop(reader);
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let finished = this.state.finished.load(Ordering::Acquire);
        if this.phase == Phase::Busy || finished != this.seen_finished {
            // A response has just been sent: the keep-alive idle time
            // starts now.
            this.seen_finished = finished;
            let idle = this.timeouts.idle;
            this.arm(Phase::Idle, idle);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.phase == Phase::Idle && buf.filled().len() > before {
                    // The next request has begun: its headers get the
                    // header timeout from their first byte.
                    let header_read = this.timeouts.header_read;
                    this.arm(Phase::Headers, header_read);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    let what = match this.phase {
                        Phase::Idle => "the connection was idle for longer than the idle timeout",
                        _ => "the request headers did not arrive within the header-read timeout",
                    };
                    tracing::debug!(phase = ?this.phase, "closing a kube-sim connection: {what}");
                    Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, what)))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for TimedIo<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The make-service for `axum::serve`: gives each connection's requests
/// the handle of that connection's timers.
#[derive(Clone)]
pub struct PerConnection {
    app: axum::Router,
}

impl PerConnection {
    pub fn new(app: axum::Router) -> Self {
        Self { app }
    }
}

impl<'a, L> tower::Service<IncomingStream<'a, Timed<L>>> for PerConnection
where
    L: Listener,
{
    type Response = Tracked;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Tracked, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, stream: IncomingStream<'a, Timed<L>>) -> Self::Future {
        std::future::ready(Ok(Tracked {
            app: self.app.clone(),
            state: stream.io().state.clone(),
        }))
    }
}

/// The app for one connection, keeping its in-flight count.
#[derive(Clone)]
pub struct Tracked {
    app: axum::Router,
    state: Arc<ConnState>,
}

impl tower::Service<Request> for Tracked {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::<Request>::poll_ready(&mut self.app, cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // Counted at once: hyper calls the service as soon as the headers
        // are parsed, before it reads anything more from the connection.
        let guard = InFlight::new(self.state.clone());
        let answer = tower::Service::call(&mut self.app, request);
        Box::pin(async move {
            let response = answer.await?;
            if response.status() == axum::http::StatusCode::SWITCHING_PROTOCOLS {
                guard.state.upgraded.store(true, Ordering::Release);
            }
            Ok(response.map(|body| {
                Body::new(UntilSent {
                    body,
                    _guard: guard,
                })
            }))
        })
    }
}

/// One request in flight; dropped when its response body is done.
struct InFlight {
    state: Arc<ConnState>,
}

impl InFlight {
    fn new(state: Arc<ConnState>) -> Self {
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        Self { state }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // `finished` first: the reader that sees no request in flight must
        // also see that a response ended, so it starts the idle timer.
        self.state.finished.fetch_add(1, Ordering::AcqRel);
        if self.state.in_flight.fetch_sub(1, Ordering::AcqRel) == 1
            && let Some(reader) = self.state.reader.lock().take()
        {
            reader.wake();
        }
    }
}

/// A response body that keeps its request in flight until hyper has sent
/// it all and dropped it.
struct UntilSent {
    body: Body,
    _guard: InFlight,
}

impl HttpBody for UntilSent {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}
