//! Controller options (the fields of upstream's `Options` struct) and their
//! validation.

use std::time::Duration;

use thiserror::Error;

use super::features::FeatureGates;

/// Worker concurrency, status coalescing and the live Node GET bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// Workers per queue.
    pub workers: usize,
    /// Quiet period before a status update.
    pub status_debounce: Duration,
    /// Longest staleness of status while changes continue (0: `max(1 s, debounce)`).
    pub status_progress_interval: Duration,
    /// Bound of the exact GET of a Node that left the filtered cache (0: the default).
    pub live_node_get_timeout: Duration,
    /// What gpufleet adds beyond upstream, switched by `--feature-gates`.
    pub features: FeatureGates,
}

/// The default live Node GET bound.
pub const DEFAULT_LIVE_NODE_GET_TIMEOUT: Duration = Duration::from_secs(2);

impl Default for Options {
    fn default() -> Self {
        Self {
            workers: 2,
            status_debounce: Duration::from_millis(100),
            status_progress_interval: Duration::from_secs(1),
            live_node_get_timeout: DEFAULT_LIVE_NODE_GET_TIMEOUT,
            features: FeatureGates::default(),
        }
    }
}

/// Options upstream refuses, with upstream's messages.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error("workers and live Node GET timeout must be positive and status intervals non-negative")]
    NotPositive,
    #[error("status progress interval must not be shorter than status debounce")]
    ProgressShorterThanDebounce,
}

impl Options {
    /// The progress interval in force.
    pub fn effective_progress_interval(&self) -> Duration {
        if self.status_progress_interval.is_zero() {
            self.status_debounce.max(Duration::from_secs(1))
        } else {
            self.status_progress_interval
        }
    }

    /// The live GET bound in force.
    pub fn effective_live_node_get_timeout(&self) -> Duration {
        if self.live_node_get_timeout.is_zero() {
            DEFAULT_LIVE_NODE_GET_TIMEOUT
        } else {
            self.live_node_get_timeout
        }
    }

    /// Upstream's rules (durations cannot be negative here).
    pub fn validate(&self) -> Result<(), OptionsError> {
        if self.workers == 0 {
            return Err(OptionsError::NotPositive);
        }
        if !self.status_debounce.is_zero()
            && self.effective_progress_interval() < self.status_debounce
        {
            return Err(OptionsError::ProgressShorterThanDebounce);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_values() {
        let options = Options::default();
        assert_eq!(options.workers, 2);
        assert_eq!(options.status_debounce, Duration::from_millis(100));
        assert_eq!(options.status_progress_interval, Duration::from_secs(1));
        assert_eq!(options.live_node_get_timeout, Duration::from_secs(2));
        assert_eq!(options.validate(), Ok(()));
    }

    #[test]
    fn config_validation_rejects_zero_workers_and_progress_shorter_than_debounce() {
        let zero = Options {
            workers: 0,
            ..Options::default()
        };
        assert_eq!(
            zero.validate().unwrap_err().to_string(),
            "workers and live Node GET timeout must be positive and status intervals non-negative"
        );
        let short = Options {
            status_debounce: Duration::from_secs(2),
            status_progress_interval: Duration::from_secs(1),
            ..Options::default()
        };
        assert_eq!(
            short.validate().unwrap_err().to_string(),
            "status progress interval must not be shorter than status debounce"
        );
        let zero_progress = Options {
            status_debounce: Duration::from_secs(3),
            status_progress_interval: Duration::ZERO,
            ..Options::default()
        };
        assert_eq!(
            zero_progress.effective_progress_interval(),
            Duration::from_secs(3)
        );
        assert_eq!(zero_progress.validate(), Ok(()));
    }
}
