//! Client-side rate limiting for `--qps` / `--burst`, client-go's token
//! bucket: `burst` requests at once, then `qps` per second. kube-rs has
//! none, and users of tf-operator rely on these flags to keep a large
//! operator from flooding the API server.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// The bucket, pure: the clock is passed in.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now`; `burst` is at least 1.
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes one token at `now` and says how long the request must wait
    /// for it (zero while the burst lasts).
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// Layer for kube's client stack.
#[derive(Clone, Debug)]
pub struct ClientRateLimitLayer {
    qps: f64,
    burst: u32,
}

impl ClientRateLimitLayer {
    pub fn new(qps: f64, burst: u32) -> Self {
        Self { qps, burst }
    }
}

impl<S> Layer<S> for ClientRateLimitLayer {
    type Service = ClientRateLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientRateLimit {
            inner,
            bucket: TokenBucket::new(self.qps, self.burst, Instant::now()),
            wait: None,
            reserved: false,
        }
    }
}

/// Waits for a token in `poll_ready`, so it works under kube's buffer
/// (which polls readiness before each call) with a service that cannot be
/// cloned.
pub struct ClientRateLimit<S> {
    inner: S,
    bucket: TokenBucket,
    wait: Option<Pin<Box<Sleep>>>,
    /// A token is taken for the next call.
    reserved: bool,
}

impl<S, Request> Service<Request> for ClientRateLimit<S>
where
    S: Service<Request>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.reserved {
            self.reserved = true;
            let wait = self.bucket.reserve(Instant::now());
            if !wait.is_zero() {
                self.wait = Some(Box::pin(tokio::time::sleep(wait)));
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
        self.reserved = false;
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_burst_goes_at_once_then_qps_paces_and_an_idle_bucket_refills() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(5.0, 10, start);
        for _ in 0..10 {
            assert_eq!(bucket.reserve(start), Duration::ZERO);
        }
        assert_eq!(bucket.reserve(start), Duration::from_millis(200));
        assert_eq!(bucket.reserve(start), Duration::from_millis(400));
        // Two seconds idle: ten tokens back, capped at the burst.
        let later = start + Duration::from_secs(10);
        for _ in 0..10 {
            assert_eq!(bucket.reserve(later), Duration::ZERO);
        }
        assert!(bucket.reserve(later) > Duration::ZERO);
    }
}
