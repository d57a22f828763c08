//! controller-kit: the runtime every gpufleet controller stands on.
//!
//! * [`queue`]: client-go style work queue ([`WorkQueue`]) with rate limiters and metrics.
//! * [`coalescer`]: per-key status coalescing in front of a queue ([`Coalescer`]).
//! * [`caches`]: process-lifetime reflector stores with transforms, indexes and handlers ([`Caches`]).
//! * [`leader`]: Lease leader election with client-go semantics ([`LeaderElector`], [`LeaseLock`]).
//! * [`controller`]: queue-driven controllers that run only while leading ([`Controller`]),
//!   and the one worker loop under every leadership term ([`RunningWork`], [`WorkerPool`]).
//! * [`manager`]: caches + election + leader-lifetime work for one replica ([`Manager`],
//!   [`Replica`]).
//! * [`readiness`]: the stopped/waiting/standby/leader state machine ([`Readiness`]).
//! * [`serve`]: `/healthz`, `/readyz`, `/metrics` and controller routes ([`serve::AdminServer`]).
//! * [`telemetry`]: logging on stderr and signal handling; [`events`]: Kubernetes Events;
//!   [`event_notes`]: notes naming every object of one Event.

pub mod caches;
pub mod coalescer;
pub mod controller;
pub mod error;
pub mod event_notes;
pub mod events;
pub mod go_duration;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod queue;
pub mod rate_limit;
pub mod readiness;
mod resource_view;
pub mod serve;
pub mod telemetry;

pub use caches::{CachedStore, Caches, ObjectEvent, StoreOptions};
pub use coalescer::{Coalescer, CoalescerConfig};
pub use controller::{
    Action, Controller, Enqueue, ReconcileFailure, Retry, RunningWork, WorkerPool, record_uid,
};
pub use error::ConfigError;
pub use events::EventSink;
/// For [`resource_view!`]: the kube its expansion names.
#[doc(hidden)]
pub use kube as __kube;
pub use leader::{LeaderElectionConfig, LeaderElector, LeaseLock};
pub use manager::{Manager, ManagerConfig, ManagerError, Replica};
pub use metrics::{MetricsRegistry, ReconcileMetrics};
pub use queue::{RateLimiter, RateLimiterConfig, WorkQueue, WorkQueueMetrics};
pub use rate_limit::{RateLimitLayer, TokenBucket, rate_limited_client};
pub use readiness::{Readiness, ReplicaRole};
