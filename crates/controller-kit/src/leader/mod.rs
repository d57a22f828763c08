//! Leader election on a Lease with client-go's semantics and defaults.
//!
//! * A replica acquires the lease when it is free (no holder) or expired: its holder
//!   has not renewed it within the lease duration, measured on *our* clock from when we
//!   last saw the record change (so clock skew between replicas does not matter).
//! * The leader renews every retry period and gives up when it cannot renew within the
//!   renew deadline.
//! * When leadership ends for any reason, the leader-lifetime work is stopped and
//!   drained *before* the lease is released, so a successor never overlaps a draining
//!   leader. With `release_on_cancel`, the holder is then cleared so a standby can take
//!   over at once instead of waiting out the lease.

pub mod lease_lock;
pub mod metrics;

use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use parking_lot::Mutex;
use rand::Rng;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::ConfigError;
pub use lease_lock::{LeaderElectionRecord, LeaseError, LeaseLock};
pub use metrics::LeaderElectionMetrics;

/// client-go's jitter factor for the acquire loop; renew deadline must exceed it × retry period.
const JITTER_FACTOR: f64 = 1.2;

/// Settings of one election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (default `<POD_NAME or hostname>_<uuid4>`).
    pub identity: String,
    /// How long a claim lasts without renewal (default 15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before giving up (default 10 s).
    pub renew_deadline: Duration,
    /// Pause between attempts (default 2 s).
    pub retry_period: Duration,
    /// Clear the holder when leadership ends, so a successor need not wait (default true).
    pub release_on_cancel: bool,
}

impl LeaderElectionConfig {
    /// An election on Lease `namespace/name` with client-go's default timing.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            release_on_cancel: true,
        }
    }

    /// Rejects settings under which two replicas could both believe they lead.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.namespace.is_empty() {
            return Err(ConfigError::invalid(
                "leader election lease namespace",
                "must not be empty",
            ));
        }
        if self.name.is_empty() {
            return Err(ConfigError::invalid(
                "leader election lease name",
                "must not be empty",
            ));
        }
        if self.identity.is_empty() {
            return Err(ConfigError::invalid(
                "leader election identity",
                "must not be empty",
            ));
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::invalid(
                "leader election retry period",
                "must be greater than zero",
            ));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::invalid(
                "leader election lease duration",
                "must be greater than the renew deadline",
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(ConfigError::invalid(
                "leader election renew deadline",
                "must be greater than 1.2 x the retry period",
            ));
        }
        if self.lease_duration.as_secs() == 0 || self.lease_duration.subsec_nanos() != 0 {
            return Err(ConfigError::invalid(
                "leader election lease duration",
                "must be a whole number of seconds (the Lease stores seconds)",
            ));
        }
        Ok(())
    }
}

/// `<POD_NAME or hostname>_<uuid4>`: unique even when two replicas share a host name.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .filter(|name| !name.trim().is_empty())
        .or_else(|| {
            std::env::var("HOSTNAME")
                .ok()
                .filter(|name| !name.trim().is_empty())
        })
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|name| name.trim().to_string())
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{}_{}", host.trim(), uuid::Uuid::new_v4())
}

/// Why an election run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionOutcome {
    /// Shutdown was requested (before or during leadership).
    Cancelled,
    /// The lease could not be renewed within the renew deadline.
    LeadershipLost,
    /// The leader work returned on its own.
    LeaderWorkEnded,
}

#[derive(Default)]
struct Observed {
    record: Option<LeaderElectionRecord>,
    /// When `record` last changed, on our clock.
    observed_at: Option<Instant>,
    lease: Option<Lease>,
    /// The holder last reported to the new-leader callback.
    reported_holder: Option<String>,
    /// The last non-empty holder, for the transitions metric.
    last_holder: Option<String>,
}

/// Runs one replica's side of an election.
pub struct LeaderElector {
    config: LeaderElectionConfig,
    lock: LeaseLock,
    metrics: LeaderElectionMetrics,
    observed: Mutex<Observed>,
}

impl LeaderElector {
    /// An elector for `config`; fails on an invalid configuration.
    pub fn new(
        client: kube::Client,
        config: LeaderElectionConfig,
        metrics: &LeaderElectionMetrics,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        metrics.init(&config.name);
        Ok(Self {
            lock: LeaseLock::new(client, &config.namespace, &config.name),
            config,
            metrics: metrics.clone(),
            observed: Mutex::new(Observed::default()),
        })
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// The settings in force.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// The holder seen in the last read of the lease (empty if free).
    pub fn observed_holder(&self) -> Option<String> {
        self.observed
            .lock()
            .record
            .as_ref()
            .map(|record| record.holder_identity.clone())
    }

    /// Campaigns until shutdown; while leading runs `leader_work` with a token that is
    /// cancelled when leadership ends, and waits for it to finish before releasing.
    ///
    /// `on_new_leader` is called with each newly observed holder (including ourselves).
    pub async fn run<W, F>(
        &self,
        shutdown: &CancellationToken,
        on_new_leader: &(dyn Fn(&str) + Send + Sync),
        leader_work: W,
    ) -> ElectionOutcome
    where
        W: FnOnce(CancellationToken) -> F,
        F: Future<Output = ()> + Send + 'static,
    {
        // Each campaign reports the current holder afresh: one seen while we still led was
        // (rightly) ignored by the readiness machine and must be reported again now.
        self.observed.lock().reported_holder = None;
        if !self.acquire(shutdown, on_new_leader).await {
            return ElectionOutcome::Cancelled;
        }
        tracing::info!(identity = %self.config.identity, lease = %self.lock.describe(), "acquired leadership");
        self.metrics.set_leading(&self.config.name, true);
        let leader_token = shutdown.child_token();
        let mut work = tokio::spawn(leader_work(leader_token.clone()));
        let outcome = self.keep_renewing(shutdown, &mut work, on_new_leader).await;

        // Stop and drain the leader work before anyone else can take the lease.
        leader_token.cancel();
        // When the work ended by itself its handle was already awaited in `keep_renewing`.
        if outcome != ElectionOutcome::LeaderWorkEnded
            && let Err(error) = (&mut work).await
        {
            tracing::error!(%error, "leader work panicked");
        }
        self.metrics.set_leading(&self.config.name, false);
        match outcome {
            ElectionOutcome::LeadershipLost => {
                tracing::warn!(identity = %self.config.identity, "lost leadership: the lease was not renewed in time");
            }
            _ => tracing::info!(identity = %self.config.identity, ?outcome, "stopped leading"),
        }
        if self.config.release_on_cancel {
            self.release().await;
        }
        outcome
    }

    /// Tries every retry period (with jitter) until acquired (true) or shut down (false).
    async fn acquire(
        &self,
        shutdown: &CancellationToken,
        on_new_leader: &(dyn Fn(&str) + Send + Sync),
    ) -> bool {
        loop {
            if shutdown.is_cancelled() {
                return false;
            }
            let acquired = self.try_acquire_or_renew().await;
            self.report_new_leader(on_new_leader);
            if acquired {
                return true;
            }
            let jitter = rand::rng().random::<f64>()
                * JITTER_FACTOR
                * self.config.retry_period.as_secs_f64();
            let pause = self.config.retry_period + Duration::from_secs_f64(jitter);
            tokio::select! {
                () = shutdown.cancelled() => return false,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    async fn keep_renewing(
        &self,
        shutdown: &CancellationToken,
        work: &mut tokio::task::JoinHandle<()>,
        on_new_leader: &(dyn Fn(&str) + Send + Sync),
    ) -> ElectionOutcome {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return ElectionOutcome::Cancelled,
                result = &mut *work => {
                    if let Err(error) = result {
                        tracing::error!(%error, "leader work panicked");
                    }
                    return ElectionOutcome::LeaderWorkEnded;
                }
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
            let deadline = Instant::now() + self.config.renew_deadline;
            let renewed = loop {
                if self.try_acquire_or_renew().await {
                    break true;
                }
                self.report_new_leader(on_new_leader);
                if Instant::now() + self.config.retry_period > deadline {
                    break false;
                }
                tokio::select! {
                    () = shutdown.cancelled() => return ElectionOutcome::Cancelled,
                    () = tokio::time::sleep(self.config.retry_period) => {}
                }
            };
            if !renewed {
                return ElectionOutcome::LeadershipLost;
            }
        }
    }

    /// One GET-then-PUT round. True when we hold the lease afterwards.
    async fn try_acquire_or_renew(&self) -> bool {
        let now = Timestamp::now();
        let mine = LeaderElectionRecord {
            holder_identity: self.config.identity.clone(),
            lease_duration: self.config.lease_duration,
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: 0,
        };
        let current = match self.lock.get().await {
            Ok(current) => current,
            Err(error) => {
                tracing::warn!(%error, "reading the leader election lease failed");
                return false;
            }
        };
        let Some((record, lease)) = current else {
            return match self.lock.create(&mine).await {
                Ok(lease) => {
                    self.remember(mine, lease);
                    true
                }
                Err(LeaseError::Conflict { .. }) => false,
                Err(error) => {
                    tracing::warn!(%error, "creating the leader election lease failed");
                    false
                }
            };
        };

        let held_by_other = {
            let mut observed = self.observed.lock();
            if observed.record.as_ref() != Some(&record) {
                observed.record = Some(record.clone());
                observed.observed_at = Some(Instant::now());
            }
            observed.lease = Some(lease.clone());
            let expires = observed.observed_at.map(|at| at + record.lease_duration);
            !record.holder_identity.is_empty()
                && record.holder_identity != self.config.identity
                && expires.is_some_and(|expires| expires > Instant::now())
        };
        if held_by_other {
            return false;
        }

        let next = if record.holder_identity == self.config.identity {
            LeaderElectionRecord {
                acquire_time: record.acquire_time,
                leader_transitions: record.leader_transitions,
                ..mine
            }
        } else {
            LeaderElectionRecord {
                leader_transitions: record.leader_transitions.saturating_add(1),
                ..mine
            }
        };
        match self.lock.update(&lease, &next).await {
            Ok(lease) => {
                self.remember(next, lease);
                true
            }
            Err(LeaseError::Conflict { .. }) => false,
            Err(error) => {
                tracing::warn!(%error, "updating the leader election lease failed");
                false
            }
        }
    }

    fn remember(&self, record: LeaderElectionRecord, lease: Lease) {
        let mut observed = self.observed.lock();
        observed.record = Some(record);
        observed.observed_at = Some(Instant::now());
        observed.lease = Some(lease);
    }

    fn report_new_leader(&self, on_new_leader: &(dyn Fn(&str) + Send + Sync)) {
        let holder = {
            let mut observed = self.observed.lock();
            let Some(holder) = observed
                .record
                .as_ref()
                .map(|record| record.holder_identity.clone())
            else {
                return;
            };
            if holder.is_empty() || observed.reported_holder.as_deref() == Some(holder.as_str()) {
                return;
            }
            observed.reported_holder = Some(holder.clone());
            if observed.last_holder.as_deref() != Some(holder.as_str()) {
                if observed.last_holder.is_some() {
                    self.metrics.transition(&self.config.name);
                }
                observed.last_holder = Some(holder.clone());
            }
            holder
        };
        tracing::info!(leader = %holder, "observed new leader");
        on_new_leader(&holder);
    }

    /// Clears the holder if it is still us (GET, check, PUT with that resourceVersion).
    async fn release(&self) {
        let (record, lease) = match self.lock.get().await {
            Ok(Some(current)) => current,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, "cannot read the lease to release it; it will expire instead");
                return;
            }
        };
        if record.holder_identity != self.config.identity {
            return;
        }
        let now = Timestamp::now();
        let released = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration: Duration::from_secs(1),
            acquire_time: Some(now),
            renew_time: Some(now),
            leader_transitions: record.leader_transitions,
        };
        match self.lock.update(&lease, &released).await {
            Ok(lease) => {
                tracing::info!(lease = %self.lock.describe(), "released leadership");
                self.remember(released, lease);
            }
            Err(error) => {
                tracing::warn!(%error, "releasing the lease failed; it will expire instead")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaderElectionConfig {
        LeaderElectionConfig::new("gpufleet-system", "mokka-leader")
    }

    #[test]
    fn defaults_are_client_go_timings_and_valid() {
        let config = config();
        assert_eq!(config.lease_duration, Duration::from_secs(15));
        assert_eq!(config.renew_deadline, Duration::from_secs(10));
        assert_eq!(config.retry_period, Duration::from_secs(2));
        assert!(config.release_on_cancel);
        assert!(config.validate().is_ok());
    }

    #[test]
    fn identity_is_host_underscore_uuid_and_unique() {
        let first = default_identity();
        let second = default_identity();
        assert_ne!(first, second);
        let (host, random) = first.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert!(uuid::Uuid::parse_str(random).is_ok(), "{first}");
    }

    #[test]
    fn validation_rejects_overlapping_timings_and_empty_names() {
        let lease_not_longer = LeaderElectionConfig {
            renew_deadline: Duration::from_secs(15),
            ..config()
        };
        assert!(
            lease_not_longer
                .validate()
                .unwrap_err()
                .to_string()
                .contains("renew deadline")
        );
        let renew_too_short = LeaderElectionConfig {
            renew_deadline: Duration::from_millis(2400),
            ..config()
        };
        assert!(renew_too_short.validate().is_err());
        let no_name = LeaderElectionConfig {
            name: String::new(),
            ..config()
        };
        assert_eq!(
            no_name.validate().unwrap_err().to_string(),
            "invalid leader election lease name: must not be empty"
        );
        let fractional = LeaderElectionConfig {
            lease_duration: Duration::from_millis(15_500),
            ..config()
        };
        assert!(fractional.validate().is_err());
    }
}
