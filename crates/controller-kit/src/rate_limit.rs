//! A Kubernetes client throttled like client-go's, by a QPS and a burst:
//! every controller's `--qps`/`--burst` (gpuid's `QPS`/`BURST`, the
//! `--kube-api-qps`/`--kube-api-burst` of Mokka, the TFJob operator's
//! `--qps`/`--burst`) means the same thing through it.
//!
//! client-go gives every client a token bucket (`rest.Config.QPS` and
//! `Burst`). kube has no such limiter, and controller-kit's work-queue
//! rate limiter paces reconciles, not API requests, so this module adds one
//! as a tower layer inside the kube client: every request (exec, GET, PATCH, the start of each watch) takes
//! one token; a bucket holds at most `BURST` tokens and refills at `QPS`
//! per second. kube's client serialises calls through a buffer, so waiting
//! in `poll_ready` queues later requests behind the one being throttled,
//! as client-go's limiter does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

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

/// The tower layer; all services it builds share one bucket.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    pub fn new(qps: f64, burst: u32) -> RateLimitLayer {
        RateLimitLayer {
            bucket: Arc::new(TokenBucket::new(qps, burst)),
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimited<S>;

    fn layer(&self, inner: S) -> RateLimited<S> {
        RateLimited {
            inner,
            bucket: Arc::clone(&self.bucket),
            reserved: false,
            wait: None,
        }
    }
}

/// A service that is ready only once the bucket granted the next request.
pub struct RateLimited<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    /// A token is held for the next `call`.
    reserved: bool,
    wait: Option<Pin<Box<Sleep>>>,
}

impl<S, Request> Service<Request> for RateLimited<S>
where
    S: Service<Request>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.reserved {
            self.reserved = true;
            let delay = self.bucket.reserve();
            if !delay.is_zero() {
                self.wait = Some(Box::pin(tokio::time::sleep(delay)));
            }
        }
        if let Some(wait) = self.wait.as_mut() {
            if wait.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.wait = None;
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        // The token is spent; the next request reserves its own.
        self.reserved = false;
        self.inner.call(request)
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

    impl Service<()> for Clock {
        type Response = Instant;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<Instant, Self::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            std::future::ready(Ok(Instant::now()))
        }
    }

    #[tokio::test]
    async fn the_layer_holds_requests_beyond_the_burst_until_their_token_is_due() {
        use tower::ServiceExt;
        // 20 per second after a burst of 2: request n (from 0) cannot
        // start before (n - 1) * 50 ms. Only lower bounds are asserted, so a
        // loaded machine cannot make this fail.
        let mut service = RateLimitLayer::new(20.0, 2).layer(Clock);
        let start = Instant::now();
        let mut offsets = Vec::new();
        for _ in 0..5 {
            let at = service.ready().await.unwrap().call(()).await.unwrap();
            offsets.push(at - start);
        }
        for (n, offset) in offsets.iter().enumerate().skip(2) {
            let earliest = Duration::from_millis(50 * (n as u64 - 1)) - MS;
            assert!(*offset >= earliest, "request {n} at {offsets:?}");
        }
        assert!(offsets.windows(2).all(|pair| pair[0] <= pair[1]));
    }
}
