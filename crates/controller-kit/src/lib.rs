//! controller-kit: the runtime every gpufleet controller stands on.
//!
//! * [`queue`]: client-go style work queue with rate limiters and metrics.

pub mod coalescer;
pub mod error;
pub mod queue;

pub use error::ConfigError;
pub use queue::{RateLimiter, RateLimiterConfig, WorkQueue, WorkQueueMetrics};
pub mod caches;
pub mod events;
pub mod metrics;
pub mod readiness;
pub mod serve;
pub mod telemetry;
