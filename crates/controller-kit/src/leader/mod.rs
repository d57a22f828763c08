//! Leader election on a Lease with client-go's semantics and defaults.
//!
//! * A replica acquires the lease when it is free (no holder) or expired: its holder
//!   has not renewed it within the lease duration, measured on *our* clock from when we
//!   last saw the record change (so clock skew between replicas does not matter).
//! * The leader renews every retry period. Its claim is good for the renew deadline
//!   from the start of its last successful renew: if no renew succeeds by then, or a
//!   read shows another holder, it steps down at once. A successor cannot take over
//!   before the lease duration has passed from that same renew, so the difference
//!   between the two is the margin that keeps two leaders apart.
//! * Every Lease call runs under a timeout (half the renew deadline, and never past the
//!   deadline itself). The call is dropped when it runs out, which also ends kube's own
//!   retries of 503s and 429s inside it: a server that hangs or keeps refusing cannot
//!   hold the leader past its deadline.
//! * When leadership is lost, the leader work's token is cancelled at once and the work
//!   gets half of the margin to return by itself; after that it is aborted, so it is
//!   gone with half of the margin to spare for timer and clock differences.
//! * On shutdown the leader keeps renewing while its work drains, and the lease is
//!   released only after the work has stopped, so a successor never overlaps a draining
//!   leader. With `release_on_cancel`, the holder is then cleared so a standby can take
//!   over at once instead of waiting out the lease.

pub mod lease_lock;
pub mod metrics;
#[cfg(test)]
mod timing_tests;

use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use parking_lot::Mutex;
use rand::Rng;
use tokio::task::{JoinError, JoinHandle};
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
    /// How long the leader keeps leading after the start of its last successful renew
    /// without another one; then it steps down (default 10 s).
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
        // The Lease stores a 32-bit count of seconds; the bound also keeps every deadline
        // computed from these durations far from the clock's range.
        if self.lease_duration.as_secs() > i32::MAX as u64 {
            return Err(ConfigError::invalid(
                "leader election lease duration",
                "must be at most 2147483647 seconds (the Lease stores a 32-bit count)",
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
    /// No renew succeeded within the renew deadline, or another replica holds the lease.
    LeadershipLost,
    /// The leader work returned on its own.
    LeaderWorkEnded,
}

/// What one GET-then-PUT round found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the lease now.
    Held,
    /// Another replica holds a lease that has not expired.
    HeldByOther,
    /// The round failed, lost a race or ran out of time: who holds the lease is unknown.
    Failed,
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

    /// The longest one Lease round (GET, then create or update) may take. Half the renew
    /// deadline: a call stuck on a dead connection still leaves room for a second attempt
    /// on a fresh one, while a slow but working server gets ample time.
    pub fn attempt_timeout(&self) -> Duration {
        self.config.renew_deadline / 2
    }

    /// How long leader work may take to return by itself once leadership is lost before
    /// it is aborted: half of the margin between renew deadline and lease duration. The
    /// other half is left for timer delays and clocks that run at different rates, so the
    /// work is gone before any successor can have taken the lease.
    pub fn stop_grace(&self) -> Duration {
        self.config
            .lease_duration
            .saturating_sub(self.config.renew_deadline)
            / 2
    }

    /// Campaigns until shutdown; while leading runs `leader_work` with a token that is
    /// cancelled when leadership ends, and waits for it to finish before releasing.
    ///
    /// On a lost lease the token fires no later than the renew deadline after the last
    /// successful renew, and work still running [`Self::stop_grace`] later is aborted. On
    /// shutdown the lease is kept renewed until the work has returned.
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
        let Some(mut last_renew) = self.acquire(shutdown, on_new_leader).await else {
            return ElectionOutcome::Cancelled;
        };
        tracing::info!(identity = %self.config.identity, lease = %self.lock.describe(), "acquired leadership");
        self.metrics.set_leading(&self.config.name, true);
        let leader_token = shutdown.child_token();
        let mut task = LeaderWorkTask(tokio::spawn(leader_work(leader_token.clone())));
        let work = &mut task.0;
        let outcome = self
            .keep_renewing(shutdown, work, on_new_leader, &mut last_renew)
            .await;

        // Stop the leader work before anyone else can take the lease.
        leader_token.cancel();
        match outcome {
            // Its handle was already awaited in `keep_renewing`.
            ElectionOutcome::LeaderWorkEnded => {}
            ElectionOutcome::Cancelled => {
                // Shutdown: we still hold the lease, so keep renewing it while the work
                // drains; the lease expiring meanwhile would let a successor overlap.
                let never = CancellationToken::new();
                let drained = self
                    .keep_renewing(&never, work, on_new_leader, &mut last_renew)
                    .await;
                if drained == ElectionOutcome::LeadershipLost {
                    self.stop_lost_work(work).await;
                }
            }
            ElectionOutcome::LeadershipLost => self.stop_lost_work(work).await,
        }
        self.metrics.set_leading(&self.config.name, false);
        tracing::info!(identity = %self.config.identity, ?outcome, "stopped leading");
        if self.config.release_on_cancel {
            self.release().await;
        }
        outcome
    }

    /// Tries every retry period (with jitter) until acquired or shut down. Returns when
    /// the successful round started, which is where the renew deadline counts from.
    async fn acquire(
        &self,
        shutdown: &CancellationToken,
        on_new_leader: &(dyn Fn(&str) + Send + Sync),
    ) -> Option<Instant> {
        loop {
            if shutdown.is_cancelled() {
                return None;
            }
            let started = Instant::now();
            let attempt = self
                .try_acquire_or_renew(started + self.attempt_timeout())
                .await;
            self.report_new_leader(on_new_leader);
            if attempt == Attempt::Held {
                return Some(started);
            }
            let jitter = rand::rng().random::<f64>()
                * JITTER_FACTOR
                * self.config.retry_period.as_secs_f64();
            let pause = self.config.retry_period + Duration::from_secs_f64(jitter);
            tokio::select! {
                () = shutdown.cancelled() => return None,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Renews every retry period until shutdown, the end of the work, or the loss of the
    /// lease. `last_renew` is when the last successful round started: the record it wrote
    /// is no older than that, so no other replica can see the lease expire before
    /// `last_renew` + lease duration, and we give up at `last_renew` + renew deadline.
    async fn keep_renewing(
        &self,
        shutdown: &CancellationToken,
        work: &mut JoinHandle<()>,
        on_new_leader: &(dyn Fn(&str) + Send + Sync),
        last_renew: &mut Instant,
    ) -> ElectionOutcome {
        loop {
            let deadline = *last_renew + self.config.renew_deadline;
            // Clamped for a caller that comes back late in a term (the shutdown drain
            // after a cancel amid failing renews): the deadline is never overslept.
            let next = (Instant::now() + self.config.retry_period).min(deadline);
            tokio::select! {
                () = shutdown.cancelled() => return ElectionOutcome::Cancelled,
                result = &mut *work => {
                    log_work_result(result);
                    return ElectionOutcome::LeaderWorkEnded;
                }
                () = tokio::time::sleep_until(next) => {}
            }
            loop {
                let started = Instant::now();
                if started >= deadline {
                    tracing::warn!(
                        identity = %self.config.identity,
                        renew_deadline = ?self.config.renew_deadline,
                        "lost leadership: no renew of the lease succeeded within the renew deadline"
                    );
                    return ElectionOutcome::LeadershipLost;
                }
                // Never past the deadline: the answer would come too late to keep leading.
                let until = (started + self.attempt_timeout()).min(deadline);
                match self.try_acquire_or_renew(until).await {
                    Attempt::Held => {
                        *last_renew = started;
                        break;
                    }
                    Attempt::HeldByOther => {
                        self.report_new_leader(on_new_leader);
                        tracing::warn!(
                            identity = %self.config.identity,
                            holder = ?self.observed_holder(),
                            "lost leadership: another replica holds the lease"
                        );
                        return ElectionOutcome::LeadershipLost;
                    }
                    Attempt::Failed => self.report_new_leader(on_new_leader),
                }
                let pause = (Instant::now() + self.config.retry_period).min(deadline);
                tokio::select! {
                    () = shutdown.cancelled() => return ElectionOutcome::Cancelled,
                    result = &mut *work => {
                        log_work_result(result);
                        return ElectionOutcome::LeaderWorkEnded;
                    }
                    () = tokio::time::sleep_until(pause) => {}
                }
            }
        }
    }

    /// Waits [`Self::stop_grace`] for the work of a lost leadership (its token is already
    /// cancelled) to return, then aborts it: dropping it also drops its API calls in
    /// flight, including the retries the client would otherwise go on sending.
    async fn stop_lost_work(&self, work: &mut JoinHandle<()>) {
        let grace = self.stop_grace();
        match tokio::time::timeout(grace, &mut *work).await {
            Ok(result) => log_work_result(result),
            Err(_) => {
                tracing::warn!(
                    ?grace,
                    "leader work did not stop within its grace after leadership was lost; aborting it"
                );
                work.abort();
                log_work_result((&mut *work).await);
            }
        }
    }

    /// One GET-then-PUT round, abandoned at `until`.
    async fn try_acquire_or_renew(&self, until: Instant) -> Attempt {
        match tokio::time::timeout_at(until, self.acquire_or_renew_round()).await {
            Ok(attempt) => attempt,
            Err(_) => {
                tracing::warn!(lease = %self.lock.describe(), "the leader election lease did not answer in time");
                Attempt::Failed
            }
        }
    }

    async fn acquire_or_renew_round(&self) -> Attempt {
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
                return Attempt::Failed;
            }
        };
        let Some((record, lease)) = current else {
            return match self.lock.create(&mine).await {
                Ok(lease) => {
                    self.remember(mine, lease);
                    Attempt::Held
                }
                Err(LeaseError::Conflict { .. }) => Attempt::Failed,
                Err(error) => {
                    tracing::warn!(%error, "creating the leader election lease failed");
                    Attempt::Failed
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
            return Attempt::HeldByOther;
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
                Attempt::Held
            }
            Err(LeaseError::Conflict { .. }) => Attempt::Failed,
            Err(error) => {
                tracing::warn!(%error, "updating the leader election lease failed");
                Attempt::Failed
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

    /// Clears the holder if it is still us, within one attempt timeout: a server that does
    /// not answer must not keep this replica from campaigning again.
    async fn release(&self) {
        if tokio::time::timeout(self.attempt_timeout(), self.release_round())
            .await
            .is_err()
        {
            tracing::warn!(lease = %self.lock.describe(), "releasing the lease timed out; it will expire instead");
        }
    }

    /// GET, check the holder is us, PUT with that resourceVersion.
    async fn release_round(&self) {
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

/// The leader work's task, aborted if the election run is dropped before it ends:
/// nothing renews the lease any more then, so the work must not go on by itself.
struct LeaderWorkTask(JoinHandle<()>);

impl Drop for LeaderWorkTask {
    fn drop(&mut self) {
        // A no-op for a task that has already finished.
        self.0.abort();
    }
}

/// Logs a panic of the leader work; an abort is ours and was logged when it was made.
fn log_work_result(result: Result<(), JoinError>) {
    if let Err(error) = result
        && error.is_panic()
    {
        tracing::error!(%error, "leader work panicked");
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
        let beyond_the_lease_field = LeaderElectionConfig {
            lease_duration: Duration::from_secs(u64::from(u32::MAX)),
            ..config()
        };
        assert!(beyond_the_lease_field.validate().is_err());
    }

    #[tokio::test]
    async fn lease_calls_get_half_the_renew_deadline_and_lost_work_half_the_margin() {
        // Building a client spawns its request buffer, so this runs on a runtime.
        let client = kube::Client::new(
            tower::service_fn(|_request: http::Request<kube::client::Body>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(kube::client::Body::from(
                    Vec::new(),
                )))
            }),
            "default",
        );
        let elector = LeaderElector::new(client, config(), &LeaderElectionMetrics::default())
            .expect("defaults are valid");
        assert_eq!(elector.attempt_timeout(), Duration::from_secs(5));
        assert_eq!(elector.stop_grace(), Duration::from_millis(2500));
    }
}
