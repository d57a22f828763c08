//! Rate limiters deciding how long a failed key waits before its next attempt.
//!
//! The names and the default combination follow client-go's `workqueue` package so
//! Kubernetes engineers recognise them: a per-key exponential backoff combined (by
//! taking the longer wait) with one token bucket shared by every key.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::error::ConfigError;

/// Decides the delay before a key is retried.
pub trait RateLimiter<K>: Send + Sync {
    /// The delay before `key` may be processed again; records one more failure.
    fn when(&self, key: &K) -> Duration;
    /// Forgets the failure history of `key` (call after a success).
    fn forget(&self, key: &K);
    /// How many failures of `key` are currently remembered.
    fn num_requeues(&self, key: &K) -> u32;
}

/// Per-key exponential backoff: `base * 2^failures`, capped at `max`.
#[derive(Debug)]
pub struct ExponentialFailureRateLimiter<K> {
    base_delay: Duration,
    max_delay: Duration,
    failures: Mutex<HashMap<K, u32>>,
}

impl<K: Eq + Hash + Clone> ExponentialFailureRateLimiter<K> {
    /// A limiter whose first delay is `base_delay` and which never waits longer than `max_delay`.
    pub fn new(base_delay: Duration, max_delay: Duration) -> Self {
        Self {
            base_delay,
            max_delay,
            failures: Mutex::new(HashMap::new()),
        }
    }
}

/// `base * 2^exponent`, saturating at `max` (and never overflowing for huge exponents).
pub fn exponential_delay(base: Duration, max: Duration, exponent: u32) -> Duration {
    let factor = 2f64.powi(i32::try_from(exponent).unwrap_or(i32::MAX));
    let nanos = base.as_nanos() as f64 * factor;
    if !nanos.is_finite() || nanos >= max.as_nanos() as f64 {
        return max;
    }
    Duration::from_nanos(nanos as u64)
}

impl<K: Eq + Hash + Clone + Send + Sync> RateLimiter<K> for ExponentialFailureRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        let mut failures = self.failures.lock();
        let count = failures.entry(key.clone()).or_insert(0);
        let exponent = *count;
        *count = count.saturating_add(1);
        exponential_delay(self.base_delay, self.max_delay, exponent)
    }

    fn forget(&self, key: &K) {
        self.failures.lock().remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.lock().get(key).copied().unwrap_or(0)
    }
}

/// One token bucket shared by every key: `qps` tokens per second, at most `burst` stored.
///
/// Like golang.org/x/time/rate's `Reserve`, a request always takes a token; when the
/// bucket is empty the balance goes negative and the caller waits until it is repaid.
#[derive(Debug)]
pub struct TokenBucketRateLimiter {
    qps: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last_refill: Instant,
}

impl TokenBucketRateLimiter {
    /// A full bucket of `burst` tokens refilled at `qps` per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst: f64::from(burst),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(burst),
                last_refill: Instant::now(),
            }),
        }
    }

    fn reserve(&self) -> Duration {
        let mut bucket = self.bucket.lock();
        let now = Instant::now();
        let elapsed = now
            .saturating_duration_since(bucket.last_refill)
            .as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.qps).min(self.burst);
        bucket.last_refill = now;
        bucket.tokens -= 1.0;
        if bucket.tokens >= 0.0 || self.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-bucket.tokens / self.qps)
        }
    }
}

impl<K> RateLimiter<K> for TokenBucketRateLimiter {
    fn when(&self, _key: &K) -> Duration {
        self.reserve()
    }

    fn forget(&self, _key: &K) {}

    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

/// Combines limiters: the longest delay wins, and the highest requeue count is reported.
pub struct MaxOfRateLimiter<K> {
    limiters: Vec<Arc<dyn RateLimiter<K>>>,
}

impl<K> MaxOfRateLimiter<K> {
    /// Combines `limiters`; every one of them records each failure.
    pub fn new(limiters: Vec<Arc<dyn RateLimiter<K>>>) -> Self {
        Self { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOfRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        // Every limiter must see the failure (the bucket spends a token, the backoff
        // counts), so no short-circuiting here.
        self.limiters
            .iter()
            .map(|limiter| limiter.when(key))
            .max()
            .unwrap_or(Duration::ZERO)
    }

    fn forget(&self, key: &K) {
        for limiter in &self.limiters {
            limiter.forget(key);
        }
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.limiters
            .iter()
            .map(|limiter| limiter.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
}

/// Settings of the default controller limiter (client-go's `DefaultControllerRateLimiter`).
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimiterConfig {
    /// First per-key retry delay (default 5 ms); doubles on every failure.
    pub base_delay: Duration,
    /// Longest per-key retry delay (default 1000 s).
    pub max_delay: Duration,
    /// Overall retry rate across all keys, per second (default 10).
    pub qps: f64,
    /// Retries allowed at once before the overall rate applies (default 100).
    pub burst: u32,
}

impl Default for RateLimiterConfig {
    fn default() -> Self {
        Self {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100,
        }
    }
}

impl RateLimiterConfig {
    /// Rejects settings that would make retries never happen or never wait.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.base_delay.is_zero() {
            return Err(ConfigError::invalid(
                "rate limiter base delay",
                "must be greater than zero",
            ));
        }
        if self.max_delay < self.base_delay {
            return Err(ConfigError::invalid(
                "rate limiter max delay",
                "must not be shorter than the base delay",
            ));
        }
        if !(self.qps.is_finite() && self.qps > 0.0) {
            return Err(ConfigError::invalid(
                "rate limiter qps",
                "must be a positive number",
            ));
        }
        if self.burst == 0 {
            return Err(ConfigError::invalid(
                "rate limiter burst",
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// Builds the combined per-key backoff and overall token bucket.
    pub fn build<K>(&self) -> Arc<dyn RateLimiter<K>>
    where
        K: Eq + Hash + Clone + Send + Sync + 'static,
    {
        Arc::new(MaxOfRateLimiter::new(vec![
            Arc::new(ExponentialFailureRateLimiter::new(
                self.base_delay,
                self.max_delay,
            )),
            Arc::new(TokenBucketRateLimiter::new(self.qps, self.burst)),
        ]))
    }
}

/// client-go's default controller limiter: 5 ms doubling to 1000 s per key, 10 qps burst 100 overall.
pub fn default_controller_rate_limiter<K>() -> Arc<dyn RateLimiter<K>>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
{
    RateLimiterConfig::default().build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_key_backoff_starts_at_5ms_doubles_and_caps_at_1000s() {
        let limiter =
            ExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000));
        let delays: Vec<Duration> = (0..20).map(|_| limiter.when(&"a")).collect();
        let mut expected = Duration::from_millis(5);
        for (attempt, delay) in delays.iter().enumerate() {
            let capped = expected.min(Duration::from_secs(1000));
            assert_eq!(*delay, capped, "attempt {attempt}");
            expected *= 2;
        }
        // 5ms * 2^18 = 1310.72 s is past the cap.
        assert_eq!(delays[18], Duration::from_secs(1000));
        assert_eq!(delays[17], Duration::from_millis(5 * (1 << 17)));
        assert_eq!(limiter.num_requeues(&"a"), 20);
    }

    #[test]
    fn backoff_is_per_key_and_forget_resets_it() {
        let limiter =
            ExponentialFailureRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000));
        limiter.when(&"a");
        limiter.when(&"a");
        assert_eq!(limiter.when(&"b"), Duration::from_millis(5));
        assert_eq!(limiter.when(&"a"), Duration::from_millis(20));
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a"), Duration::from_millis(5));
    }

    #[test]
    fn huge_exponents_saturate_instead_of_overflowing() {
        let max = Duration::from_secs(1000);
        assert_eq!(
            exponential_delay(Duration::from_millis(5), max, u32::MAX),
            max
        );
        assert_eq!(exponential_delay(Duration::from_millis(5), max, 2000), max);
    }

    #[tokio::test(start_paused = true)]
    async fn token_bucket_allows_the_burst_then_spaces_requests_at_qps() {
        let bucket = TokenBucketRateLimiter::new(10.0, 100);
        for _ in 0..100 {
            assert_eq!(RateLimiter::<&str>::when(&bucket, &"k"), Duration::ZERO);
        }
        let first_over = RateLimiter::<&str>::when(&bucket, &"k");
        let second_over = RateLimiter::<&str>::when(&bucket, &"k");
        assert_eq!(first_over, Duration::from_millis(100));
        assert_eq!(second_over, Duration::from_millis(200));
        // After one second ten tokens are repaid: the debt of two is gone and eight remain.
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..8 {
            assert_eq!(RateLimiter::<&str>::when(&bucket, &"k"), Duration::ZERO);
        }
        assert!(RateLimiter::<&str>::when(&bucket, &"k") > Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn default_limiter_takes_the_longer_of_backoff_and_bucket() {
        let limiter = default_controller_rate_limiter::<String>();
        let key = "rack-a".to_string();
        assert_eq!(limiter.when(&key), Duration::from_millis(5));
        assert_eq!(limiter.when(&key), Duration::from_millis(10));
        assert_eq!(limiter.num_requeues(&key), 2);
        // Exhaust the shared bucket with other keys: now the bucket dominates for a fresh key.
        for i in 0..200 {
            limiter.when(&format!("other-{i}"));
        }
        assert!(limiter.when(&"fresh".to_string()) > Duration::from_secs(10));
        limiter.forget(&key);
        assert_eq!(limiter.num_requeues(&key), 0);
    }

    #[test]
    fn config_validation_rejects_unusable_values() {
        assert!(RateLimiterConfig::default().validate().is_ok());
        let zero_qps = RateLimiterConfig {
            qps: 0.0,
            ..Default::default()
        };
        assert!(zero_qps.validate().is_err());
        let zero_burst = RateLimiterConfig {
            burst: 0,
            ..Default::default()
        };
        assert!(zero_burst.validate().is_err());
        let inverted = RateLimiterConfig {
            max_delay: Duration::from_millis(1),
            ..Default::default()
        };
        assert!(inverted.validate().is_err());
    }
}
