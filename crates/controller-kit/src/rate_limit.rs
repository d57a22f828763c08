//! A Kubernetes client throttled like client-go's, by a QPS and a burst:
//! every controller's `--qps`/`--burst` (gpuid's `QPS`/`BURST`, the
//! `--kube-api-qps`/`--kube-api-burst` of Mokka, the TFJob operator's
//! `--qps`/`--burst`) means the same thing through it.
//!
//! client-go gives every REST client a token bucket (`rest.Config.QPS` and
//! `Burst`). kube has no such limiter, and controller-kit's work-queue
//! rate limiter paces reconciles, not API requests, so this module adds one
//! as a tower layer inside the kube client: every request (GET, PATCH, the
//! start of each watch) takes one token; a bucket holds at most `BURST`
//! tokens and refills at `QPS` per second.
//!
//! Streams that upgrade the connection (`pods/exec`, `pods/attach`,
//! `pods/portforward`) take no token: client-go's SPDY and WebSocket
//! executors build their own round tripper from the `rest.Config` and never
//! pass through the REST client's limiter, so a Go collector's execs are not
//! throttled either.
//!
//! Event writes take their tokens from a second bucket of the same size:
//! controller-runtime's event recorder (what training-operator and most Go
//! operators record Events with) builds a clientset of its own from the
//! manager's `rest.Config`, so its Events never wait behind the controller's
//! reads and writes, nor they behind its Events.
//!
//! The token is reserved when the request is made, in the order requests
//! are made, and the request waits for it in its own future: a throttled
//! GET never holds back an exec queued behind it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use kube::client::Body;
use parking_lot::Mutex;
use tokio::time::Instant;
use tower::buffer::Buffer;
use tower::util::BoxService;
use tower::{BoxError, Layer, Service, ServiceExt};

/// A token bucket: `qps` tokens per second, at most `burst` stored.
///
/// A request always takes its token; when the bucket is empty the balance
/// goes negative and the request waits until it is repaid (the
/// reservation semantics of golang.org/x/time/rate, which client-go's
/// limiter is built on), so waiters are served in order and the long-run
/// rate never exceeds `qps`.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

#[derive(Debug)]
struct BucketState {
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    /// A full bucket. `qps <= 0` or non-finite means unlimited.
    pub fn new(qps: f64, burst: u32) -> TokenBucket {
        // client-go treats a burst below 1 as 1 so that any request can pass.
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps,
            burst,
            state: Mutex::new(BucketState {
                tokens: burst,
                refilled_at: Instant::now(),
            }),
        }
    }

    fn unlimited(&self) -> bool {
        !(self.qps.is_finite() && self.qps > 0.0)
    }

    /// Takes one token and returns how long the caller must wait before
    /// using it (zero when one was available).
    pub fn reserve(&self) -> Duration {
        self.reserve_at(Instant::now())
    }

    fn reserve_at(&self, now: Instant) -> Duration {
        if self.unlimited() {
            return Duration::ZERO;
        }
        let mut state = self.state.lock();
        let elapsed = now.saturating_duration_since(state.refilled_at);
        state.tokens = (state.tokens + elapsed.as_secs_f64() * self.qps).min(self.burst);
        state.refilled_at = now;
        state.tokens -= 1.0;
        if state.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-state.tokens / self.qps)
        }
    }
}

/// The tower layer; all services it builds share its two buckets.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    buckets: Arc<Buckets>,
}

/// The client's bucket, and the one its Event writes take from.
#[derive(Debug)]
struct Buckets {
    requests: TokenBucket,
    event_writes: TokenBucket,
}

impl RateLimitLayer {
    pub fn new(qps: f64, burst: u32) -> RateLimitLayer {
        RateLimitLayer {
            buckets: Arc::new(Buckets {
                requests: TokenBucket::new(qps, burst),
                event_writes: TokenBucket::new(qps, burst),
            }),
        }
    }
}

/// Which bucket a request takes its token from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket {
    /// Connection upgrades for streams: none.
    None,
    EventWrites,
    Requests,
}

fn bucket_of<B>(request: &http::Request<B>) -> Bucket {
    let path = request.uri().path();
    if ["/exec", "/attach", "/portforward"]
        .iter()
        .any(|stream| path.ends_with(stream))
    {
        return Bucket::None;
    }
    let writes = matches!(
        *request.method(),
        http::Method::POST | http::Method::PATCH | http::Method::PUT
    );
    if writes && is_events_path(path) {
        Bucket::EventWrites
    } else {
        Bucket::Requests
    }
}

/// `/api/v1/namespaces/{ns}/events[/{name}]` or the same under
/// `/apis/events.k8s.io/v1`.
fn is_events_path(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let namespaced = match segments.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", "events.k8s.io", "v1", rest @ ..] => rest,
        _ => return false,
    };
    matches!(namespaced, ["namespaces", _, "events", ..])
}

impl<S> Layer<S> for RateLimitLayer
where
    S: Service<http::Request<Body>> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + Send + Sync,
    S::Response: Send + 'static,
{
    type Service = RateLimited<S::Response>;

    fn layer(&self, inner: S) -> Self::Service {
        // The request waits for its token inside its own future, so it needs
        // a handle on the inner service it can take along: a buffer, which
        // kube's client puts in front of its stack too (and, like it, must be
        // made inside a Tokio runtime).
        RateLimited {
            inner: Buffer::new(BoxService::new(inner.map_err(Into::into)), 1024),
            buckets: Arc::clone(&self.buckets),
        }
    }
}

/// The inner service behind its buffer.
type Inner<Response> = Buffer<
    http::Request<Body>,
    <BoxService<http::Request<Body>, Response, BoxError> as Service<http::Request<Body>>>::Future,
>;

/// A service whose requests wait for their token before they are sent.
pub struct RateLimited<Response> {
    inner: Inner<Response>,
    buckets: Arc<Buckets>,
}

impl<Response> Service<http::Request<Body>> for RateLimited<Response>
where
    Response: Send + 'static,
{
    type Response = Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Back-pressure comes from the buffer, once the token is due.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let delay = match bucket_of(&request) {
            Bucket::None => Duration::ZERO,
            Bucket::EventWrites => self.buckets.event_writes.reserve(),
            Bucket::Requests => self.buckets.requests.reserve(),
        };
        let mut inner = self.inner.clone();
        Box::pin(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            inner.ready().await?.call(request).await
        })
    }
}

/// A kube client for `config` whose requests are limited to `qps` per
/// second with bursts of `burst`.
pub fn rate_limited_client(
    config: kube::Config,
    qps: f64,
    burst: u32,
) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder.with_layer(&RateLimitLayer::new(qps, burst)).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_full_bucket_lets_burst_requests_through_then_paces_at_qps() {
        let bucket = TokenBucket::new(10.0, 3);
        let start = Instant::now();
        let waits: Vec<Duration> = (0..6).map(|_| bucket.reserve_at(start)).collect();
        assert_eq!(&waits[..3], &[Duration::ZERO; 3]);
        // Each further request waits one more tenth of a second.
        for (n, wait) in waits[3..].iter().enumerate() {
            let expected = Duration::from_millis(100 * (n as u64 + 1));
            assert!(wait.abs_diff(expected) < MS, "{n}: {wait:?}");
        }
    }

    #[test]
    fn tokens_refill_at_qps_up_to_burst_only() {
        let bucket = TokenBucket::new(10.0, 2);
        let start = Instant::now();
        bucket.reserve_at(start);
        bucket.reserve_at(start);
        // 150 ms refill 1.5 tokens: one request passes, the next waits 50 ms.
        let later = start + Duration::from_millis(150);
        assert_eq!(bucket.reserve_at(later), Duration::ZERO);
        assert!(bucket.reserve_at(later).abs_diff(Duration::from_millis(50)) < MS);
        // A long pause stores no more than the burst.
        let much_later = later + Duration::from_secs(60);
        assert_eq!(bucket.reserve_at(much_later), Duration::ZERO);
        assert_eq!(bucket.reserve_at(much_later), Duration::ZERO);
        assert!(bucket.reserve_at(much_later) > Duration::ZERO);
    }

    #[test]
    fn zero_or_negative_qps_means_unlimited() {
        for qps in [0.0, -1.0, f64::NAN] {
            let bucket = TokenBucket::new(qps, 1);
            let now = Instant::now();
            assert!((0..1000).all(|_| bucket.reserve_at(now).is_zero()));
        }
    }

    /// A service answering with the instant it was called.
    #[derive(Clone)]
    struct Clock;

    impl Service<http::Request<Body>> for Clock {
        type Response = Instant;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Instant, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<Body>) -> Self::Future {
            std::future::ready(Ok(Instant::now()))
        }
    }

    fn request(path: &str) -> http::Request<Body> {
        http::Request::get(path)
            .body(Body::from(Vec::new()))
            .expect("a valid request line")
    }

    const GET_POD: &str = "/api/v1/namespaces/gpu-operator/pods/plugin-0";
    const EXEC: &str =
        "/api/v1/namespaces/gpu-operator/pods/plugin-0/exec?command=nvidia-smi&stdout=true";

    #[tokio::test]
    async fn the_layer_holds_requests_beyond_the_burst_until_their_token_is_due() {
        // 20 per second after a burst of 2: request n (from 0) cannot
        // start before (n - 1) * 50 ms. Only lower bounds are asserted, so a
        // loaded machine cannot make this fail.
        let mut service = RateLimitLayer::new(20.0, 2).layer(Clock);
        let start = Instant::now();
        let mut offsets = Vec::new();
        for _ in 0..5 {
            let at = service
                .ready()
                .await
                .expect("ready")
                .call(request(GET_POD))
                .await
                .expect("answered");
            offsets.push(at - start);
        }
        for (n, offset) in offsets.iter().enumerate().skip(2) {
            let earliest = Duration::from_millis(50 * (n as u64 - 1)) - MS;
            assert!(*offset >= earliest, "request {n} at {offsets:?}");
        }
        assert!(offsets.windows(2).all(|pair| pair[0] <= pair[1]));
    }

    #[tokio::test(start_paused = true)]
    async fn an_exec_takes_no_token_and_does_not_wait_behind_throttled_requests() {
        // 1 per second, burst 1: the first GET empties the bucket, so the
        // next two GETs wait 1 s and 2 s. Execs made after them go at once
        // and leave the bucket as it was.
        let mut service = RateLimitLayer::new(1.0, 1).layer(Clock);
        let start = Instant::now();
        let gets: Vec<_> = (0..3).map(|_| service.call(request(GET_POD))).collect();
        let execs: Vec<_> = (0..5).map(|_| service.call(request(EXEC))).collect();
        let exec_times = futures::future::try_join_all(execs)
            .await
            .expect("execs answered");
        assert!(
            exec_times.iter().all(|at| *at - start < MS),
            "execs waited: {:?}",
            exec_times.iter().map(|at| *at - start).collect::<Vec<_>>()
        );
        let get_times = futures::future::try_join_all(gets)
            .await
            .expect("gets answered");
        let waits: Vec<Duration> = get_times.iter().map(|at| *at - start).collect();
        assert!(waits[0] < MS, "{waits:?}");
        assert!(waits[1] >= Duration::from_secs(1) - MS, "{waits:?}");
        // The execs took nothing: the third GET waits two periods, not seven.
        assert!(waits[2] >= Duration::from_secs(2) - MS, "{waits:?}");
        assert!(waits[2] < Duration::from_secs(3), "{waits:?}");
    }

    #[test]
    fn streams_take_no_token_and_event_writes_take_theirs_from_their_own_bucket() {
        let of = |method: &str, path: &str| {
            bucket_of(
                &http::Request::builder()
                    .method(method)
                    .uri(path)
                    .body(())
                    .expect("a valid request line"),
            )
        };
        assert_eq!(of("GET", EXEC), Bucket::None);
        assert_eq!(
            of("POST", "/api/v1/namespaces/a/pods/b/attach?stdout=true"),
            Bucket::None
        );
        assert_eq!(
            of("POST", "/api/v1/namespaces/a/pods/b/portforward?ports=80"),
            Bucket::None
        );
        assert_eq!(
            of("POST", "/api/v1/namespaces/a/events"),
            Bucket::EventWrites
        );
        assert_eq!(
            of("PATCH", "/apis/events.k8s.io/v1/namespaces/a/events/e.1"),
            Bucket::EventWrites
        );
        // Reading Events, and everything else, is the client's own traffic.
        assert_eq!(of("GET", "/api/v1/namespaces/a/events"), Bucket::Requests);
        assert_eq!(of("GET", GET_POD), Bucket::Requests);
        assert_eq!(
            of("POST", "/api/v1/namespaces/events/pods"),
            Bucket::Requests
        );
        assert_eq!(
            of("POST", "/apis/example.com/v1/namespaces/a/events"),
            Bucket::Requests
        );
        assert_eq!(
            of("GET", "/api/v1/namespaces/exec/pods?watch=true"),
            Bucket::Requests
        );
    }

    #[tokio::test(start_paused = true)]
    async fn event_writes_and_other_requests_do_not_wait_for_each_other() {
        // 1 per second, burst 1 in each bucket: a GET and an Event each
        // find a full bucket; a second of each waits one period, not two.
        let mut service = RateLimitLayer::new(1.0, 1).layer(Clock);
        let event = || {
            http::Request::post("/apis/events.k8s.io/v1/namespaces/a/events")
                .body(Body::from(Vec::new()))
                .expect("a valid request line")
        };
        let start = Instant::now();
        let calls = vec![
            service.call(request(GET_POD)),
            service.call(event()),
            service.call(request(GET_POD)),
            service.call(event()),
        ];
        let times = futures::future::try_join_all(calls)
            .await
            .expect("answered");
        let waits: Vec<Duration> = times.iter().map(|at| *at - start).collect();
        assert!(waits[0] < MS && waits[1] < MS, "{waits:?}");
        for wait in &waits[2..] {
            assert!(
                *wait >= Duration::from_secs(1) - MS && *wait < Duration::from_secs(2),
                "{waits:?}"
            );
        }
    }
}
