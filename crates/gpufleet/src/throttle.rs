//! Client-side request throttling (client-go's `--kube-api-qps` /
//! `--kube-api-burst`): a token bucket in front of the kube client's
//! service stack. kube-rs has none of its own.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// Adds a [`Throttle`] with `qps` tokens per second and room for `burst`.
#[derive(Clone, Copy, Debug)]
pub struct ThrottleLayer {
    pub qps: f64,
    pub burst: u32,
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            qps: self.qps.max(f64::MIN_POSITIVE),
            burst: f64::from(self.burst.max(1)),
            tokens: f64::from(self.burst.max(1)),
            last: Instant::now(),
            sleep: None,
            reserved: false,
        }
    }
}

/// Waits in `poll_ready` until a token is available, then takes it for the
/// next `call`.
pub struct Throttle<S> {
    inner: S,
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    reserved: bool,
}

impl<S, Request> Service<Request> for Throttle<S>
where
    S: Service<Request>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.reserved {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let now = Instant::now();
            let elapsed = now.duration_since(self.last).as_secs_f64();
            self.last = now;
            self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                self.reserved = true;
            } else {
                let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.qps);
                self.sleep = Some(Box::pin(tokio::time::sleep(wait)));
            }
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
    use tower::ServiceExt;

    #[tokio::test]
    async fn requests_beyond_the_burst_wait_for_the_rate() {
        let service =
            tower::service_fn(|n: u32| async move { Ok::<u32, std::convert::Infallible>(n) });
        let mut throttled = ThrottleLayer {
            qps: 50.0,
            burst: 2,
        }
        .layer(service);
        let start = Instant::now();
        for n in 0..6 {
            let answer = throttled.ready().await.unwrap().call(n).await.unwrap();
            assert_eq!(answer, n);
        }
        // Two at once from the burst, then four more at 50 per second (80 ms);
        // the upper bound only guards against no refill at all.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(75) && elapsed < Duration::from_secs(5),
            "{elapsed:?}"
        );
    }
}
