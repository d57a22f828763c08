//! Process wiring: caches for the whole process, leader election, and leader-lifetime
//! work over the warm caches.
//!
//! 1. The caches start and must sync before the replica campaigns.
//! 2. The replica campaigns for the Lease. While another replica leads it is a
//!    ready standby: it serves reads from its caches and makes no mutating call.
//! 3. On promotion every controller attaches to the warm caches (replaying every cached
//!    object), starts its workers, and only then is the replica leader-ready.
//! 4. On demotion or shutdown the controllers detach, their queues shut down and their
//!    workers drain (bounded by the drain timeout) *before* the Lease is released. On
//!    shutdown the Lease is renewed while they drain. A replica that lost the Lease is
//!    told at the renew deadline and its workers are aborted if they have not returned
//!    by half-way to the lease duration (see [`crate::leader`]), whatever the drain
//!    timeout says.
//! 5. A replica that loses leadership without being shut down campaigns again as a
//!    standby; its caches keep running throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::caches::{CacheError, Caches};
use crate::controller::{LeaderWork, RunningWork};
use crate::error::ConfigError;
use crate::leader::{ElectionOutcome, LeaderElectionConfig, LeaderElectionMetrics, LeaderElector};
use crate::metrics::MetricsRegistry;
use crate::queue::WorkQueueMetrics;
use crate::readiness::Readiness;

/// Settings of a [`Manager`].
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    /// The election this replica takes part in.
    pub election: LeaderElectionConfig,
    /// Longest wait for workers to finish on shutdown (default 20 s, inside Kubernetes'
    /// default 30 s termination grace period). After a lost Lease the elector's shorter
    /// grace applies instead: a replica that no longer leads must not keep writing.
    pub drain_timeout: Duration,
    /// Campaign for the Lease (default true). Off, the replica leads from the start
    /// and touches no Lease: for a single replica (`--leader-elect=false`).
    pub leader_election: bool,
}

impl ManagerConfig {
    /// Defaults around `election`.
    pub fn new(election: LeaderElectionConfig) -> Self {
        Self {
            election,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            leader_election: true,
        }
    }
}

/// The manager could not run.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The caches ended before every store synced.
    #[error("controller caches stopped before synchronization")]
    CachesStoppedBeforeSync,
    /// The caches could not start.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A setting is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// Leader work refused to start because the caches are not ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("controller caches are not ready")]
pub struct CacheNotReady;

/// How long [`ManagerConfig::new`] lets workers drain.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs caches, election and leader-lifetime controllers for one replica.
pub struct Manager {
    client: kube::Client,
    config: ManagerConfig,
    replica: Replica,
}

impl Manager {
    /// A manager whose queue and election metrics are registered in `metrics`.
    pub fn new(
        client: kube::Client,
        config: ManagerConfig,
        metrics: &MetricsRegistry,
    ) -> Result<Self, ConfigError> {
        config.election.validate()?;
        Ok(Self {
            client,
            config,
            replica: Replica::new(metrics),
        })
    }

    /// The process-lifetime caches; add stores before `run`.
    pub fn caches(&self) -> &Caches {
        self.replica.caches()
    }

    /// The replica's readiness (serve it on `/readyz`).
    pub fn readiness(&self) -> Readiness {
        self.replica.readiness()
    }

    /// This replica's election identity.
    pub fn identity(&self) -> &str {
        &self.config.election.identity
    }

    /// Adds leader-lifetime work (typically a [`crate::controller::Controller`]).
    pub fn add(&mut self, work: impl LeaderWork + 'static) -> &mut Self {
        self.replica.add(work);
        self
    }

    /// Runs until `shutdown` is cancelled. Returns an error only when the caches cannot
    /// run or stop before syncing.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ManagerError> {
        self.replica.run(self.client, &self.config, shutdown).await
    }
}

/// What a [`Manager`] runs, for a controller that builds its caches and leader work
/// before it knows its election settings, or drives leadership terms itself (tests):
/// the caches, the readiness, the leader-lifetime work and the metrics of its queues
/// and election. Its methods take `&self`, so it can live inside a shared controller.
pub struct Replica {
    caches: Caches,
    readiness: Readiness,
    work: Vec<Arc<dyn LeaderWork>>,
    queue_metrics: WorkQueueMetrics,
    election_metrics: LeaderElectionMetrics,
    /// Set while a term runs: a second term at once would double every write.
    term_running: Arc<AtomicBool>,
}

impl Replica {
    /// A replica whose queue and election metrics are registered in `metrics`.
    pub fn new(metrics: &MetricsRegistry) -> Self {
        let readiness = Readiness::new();
        let (queue_metrics, election_metrics) = {
            let mut registry = metrics.write();
            (
                WorkQueueMetrics::register(&mut registry),
                LeaderElectionMetrics::register(&mut registry),
            )
        };
        Self {
            caches: Caches::with_readiness(readiness.clone()),
            readiness,
            work: Vec::new(),
            queue_metrics,
            election_metrics,
            term_running: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The process-lifetime caches; add stores before `run`.
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    /// The replica's readiness (serve it on `/readyz`).
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// Adds leader-lifetime work.
    pub fn add(&mut self, work: impl LeaderWork + 'static) -> &mut Self {
        self.work.push(Arc::new(work));
        self
    }

    /// Caches, then the campaign (or, with `leader_election` off, leadership at once),
    /// until `shutdown` is cancelled. Returns an error only when the election settings
    /// are invalid or the caches cannot run or stop before syncing.
    pub async fn run(
        &self,
        client: kube::Client,
        config: &ManagerConfig,
        shutdown: CancellationToken,
    ) -> Result<(), ManagerError> {
        let elector = LeaderElector::new(client, config.election.clone(), &self.election_metrics)?;
        // The caches outlive the election so a draining leader and a standby keep reading.
        let caches_stop = CancellationToken::new();
        let mut cache_task = {
            let caches = self.caches.clone();
            let stop = caches_stop.clone();
            tokio::spawn(async move { caches.run(stop).await })
        };
        let synced = tokio::select! {
            () = self.caches.caches_synced() => true,
            result = &mut cache_task => {
                self.readiness.stopped();
                flatten_cache_result(result)?;
                return if shutdown.is_cancelled() { Ok(()) } else { Err(ManagerError::CachesStoppedBeforeSync) };
            }
            () = shutdown.cancelled() => false,
        };
        if synced && config.leader_election {
            self.campaign(&elector, config.drain_timeout, &shutdown)
                .await;
        } else if synced {
            self.lifetime(config.drain_timeout)
                .run(shutdown.child_token())
                .await;
            self.readiness.stopped_leading();
        }
        self.readiness.stopped();
        caches_stop.cancel();
        flatten_cache_result(cache_task.await)?;
        Ok(())
    }

    /// One leadership term without an election: refuses before the caches are ready;
    /// otherwise starts every leader work, runs until `leader_token` is cancelled and
    /// then stops them, draining workers for at most `drain_timeout`.
    pub async fn lead(
        &self,
        leader_token: CancellationToken,
        drain_timeout: Duration,
    ) -> Result<(), CacheNotReady> {
        self.lifetime(drain_timeout).lead(leader_token).await
    }

    /// What one leadership term runs.
    fn lifetime(&self, drain_timeout: Duration) -> LeaderLifetime {
        LeaderLifetime {
            caches: self.caches.clone(),
            readiness: self.readiness.clone(),
            work: self.work.clone(),
            queue_metrics: self.queue_metrics.clone(),
            drain_timeout,
            term_running: Arc::clone(&self.term_running),
        }
    }

    async fn campaign(
        &self,
        elector: &LeaderElector,
        drain_timeout: Duration,
        shutdown: &CancellationToken,
    ) {
        let identity = elector.identity().to_string();
        let readiness = self.readiness.clone();
        let on_new_leader = move |holder: &str| readiness.observed_leader(holder, &identity);
        loop {
            self.readiness.campaigning();
            let lifetime = self.lifetime(drain_timeout);
            let outcome = elector
                .run(shutdown, &on_new_leader, move |leader_token| {
                    lifetime.run(leader_token)
                })
                .await;
            self.readiness.stopped_leading();
            if outcome == ElectionOutcome::Cancelled || shutdown.is_cancelled() {
                return;
            }
            tracing::warn!(?outcome, "leadership ended; campaigning again as a standby");
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(elector.config().retry_period) => {}
            }
        }
    }
}

fn flatten_cache_result(
    result: Result<Result<(), CacheError>, tokio::task::JoinError>,
) -> Result<(), ManagerError> {
    match result {
        Ok(result) => Ok(result?),
        Err(error) => {
            tracing::error!(%error, "cache task panicked");
            Err(ManagerError::CachesStoppedBeforeSync)
        }
    }
}

/// What one leadership term runs.
struct LeaderLifetime {
    caches: Caches,
    readiness: Readiness,
    work: Vec<Arc<dyn LeaderWork>>,
    queue_metrics: WorkQueueMetrics,
    drain_timeout: Duration,
    term_running: Arc<AtomicBool>,
}

impl LeaderLifetime {
    async fn run(self, leader_token: CancellationToken) {
        self.readiness.became_leader();
        if let Err(error) = self.lead(leader_token).await {
            tracing::error!(%error, "not starting leader work");
        }
    }

    async fn lead(&self, leader_token: CancellationToken) -> Result<(), CacheNotReady> {
        if !self.caches.cache_ready() {
            return Err(CacheNotReady);
        }
        if self.term_running.swap(true, Ordering::SeqCst) {
            tracing::error!("leader work is already running in this process");
            return Ok(());
        }
        let mut term = Term {
            readiness: self.readiness.clone(),
            term_running: Arc::clone(&self.term_running),
            running: Vec::with_capacity(self.work.len()),
        };
        for work in &self.work {
            match work.start(leader_token.clone(), &self.queue_metrics) {
                Ok(started) => term.running.push(started),
                Err(error) => {
                    tracing::error!(work = work.name(), %error, "leader work failed to start; stepping down");
                    term.stop(self.drain_timeout).await;
                    return Ok(());
                }
            }
        }
        self.readiness.set_leader_ready(true);
        tracing::info!(controllers = term.running.len(), "leader work running");
        leader_token.cancelled().await;
        term.stop(self.drain_timeout).await;
        Ok(())
    }
}

/// The work of one term. Dropping it (the elector aborts a term that outlives a lost
/// Lease) detaches, shuts down and aborts whatever still runs, and clears leader
/// readiness, so the next term starts from nothing.
struct Term {
    readiness: Readiness,
    term_running: Arc<AtomicBool>,
    running: Vec<RunningWork>,
}

impl Term {
    /// Leader readiness off, every handler detached (reverse order), then the workers
    /// drained, each set bounded by `drain_timeout`.
    async fn stop(&mut self, drain_timeout: Duration) {
        self.readiness.set_leader_ready(false);
        for work in self.running.iter_mut().rev() {
            work.detach_handlers();
        }
        let drains = self.running.drain(..).map(|work| work.drain(drain_timeout));
        futures::future::join_all(drains).await;
        tracing::info!("leader work drained");
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        self.readiness.set_leader_ready(false);
        self.running.clear();
        self.term_running.store(false, Ordering::SeqCst);
    }
}
