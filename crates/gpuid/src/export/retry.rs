//! Exponential backoff with jitter, honouring the server's `Retry-After`.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay before the first retry (before jitter).
    pub initial_backoff: Duration,
    /// Ceiling of the exponential delay (before jitter).
    pub max_backoff: Duration,
    /// Transient failures of one batch tolerated before it is dropped and
    /// counted; `None` retries until the backend recovers, which together
    /// with the bounded queue means an outage loses nothing (the queue
    /// fills and `submit` applies backpressure instead).
    pub max_attempts: Option<u32>,
    /// Upper bound on a server's `Retry-After`, so a misconfigured proxy
    /// cannot park the exporter for a day.
    pub max_retry_after: Duration,
}

/// The defaults of the `EXPORT_*` retry knobs.
impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        crate::export::PipelineConfig::default().retry
    }
}

/// Delay before retry number `retry` (1 for the first retry).
///
/// The exponential step `initial * 2^(retry-1)`, capped at `max_backoff`,
/// is jittered into `[step/2, step)` ("equal jitter": replicas that failed
/// together spread out, yet never retry sooner than half the step).
/// `jitter` is a sample from `[0, 1)`, passed in so the function is pure.
/// A server's `Retry-After` is a floor (capped at `max_retry_after`).
pub fn backoff_delay(
    policy: &RetryPolicy,
    retry: u32,
    retry_after: Option<Duration>,
    jitter: f64,
) -> Duration {
    let exponent = retry.saturating_sub(1).min(32);
    let step = policy
        .initial_backoff
        .saturating_mul(1u32 << exponent.min(31))
        .min(policy.max_backoff);
    let jitter = jitter.clamp(0.0, 1.0);
    let half = step / 2;
    let jittered = half + half.mul_f64(jitter);
    match retry_after {
        Some(hint) => jittered.max(hint.min(policy.max_retry_after)),
        None => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            max_attempts: None,
            max_retry_after: Duration::from_secs(10),
        }
    }

    #[test]
    fn delays_double_per_retry_within_the_jitter_band_and_stop_at_the_cap() {
        let p = policy();
        for (retry, step_ms) in [(1, 100), (2, 200), (3, 400), (4, 800), (5, 1600), (6, 2000)] {
            let low = backoff_delay(&p, retry, None, 0.0);
            let high = backoff_delay(&p, retry, None, 0.999);
            assert_eq!(low, Duration::from_millis(step_ms / 2), "retry {retry}");
            assert!(high < Duration::from_millis(step_ms), "retry {retry}");
            assert!(high > low);
        }
        assert_eq!(
            backoff_delay(&p, 1000, None, 0.0),
            Duration::from_secs(1),
            "huge retry counts neither overflow nor exceed the cap"
        );
    }

    #[test]
    fn retry_after_is_a_floor_capped_by_policy() {
        let p = policy();
        assert_eq!(
            backoff_delay(&p, 1, Some(Duration::from_secs(3)), 0.5),
            Duration::from_secs(3)
        );
        assert_eq!(
            backoff_delay(&p, 1, Some(Duration::from_secs(3600)), 0.5),
            Duration::from_secs(10)
        );
        // A hint shorter than the backoff does not shorten it.
        assert_eq!(
            backoff_delay(&p, 5, Some(Duration::ZERO), 0.0),
            Duration::from_millis(800)
        );
    }
}
