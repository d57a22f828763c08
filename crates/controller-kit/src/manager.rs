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
            drain_timeout: Duration::from_secs(20),
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

/// Runs caches, election and leader-lifetime controllers for one replica.
pub struct Manager {
    client: kube::Client,
    config: ManagerConfig,
    caches: Caches,
    readiness: Readiness,
    work: Vec<Arc<dyn LeaderWork>>,
    queue_metrics: WorkQueueMetrics,
    election_metrics: LeaderElectionMetrics,
}

impl Manager {
    /// A manager whose queue and election metrics are registered in `metrics`.
    pub fn new(
        client: kube::Client,
        config: ManagerConfig,
        metrics: &MetricsRegistry,
    ) -> Result<Self, ConfigError> {
        config.election.validate()?;
        let readiness = Readiness::new();
        let (queue_metrics, election_metrics) = {
            let mut registry = metrics.write();
            (
                WorkQueueMetrics::register(&mut registry),
                LeaderElectionMetrics::register(&mut registry),
            )
        };
        Ok(Self {
            client,
            config,
            caches: Caches::with_readiness(readiness.clone()),
            readiness,
            work: Vec::new(),
            queue_metrics,
            election_metrics,
        })
    }

    /// The process-lifetime caches; add stores before `run`.
    pub fn caches(&self) -> &Caches {
        &self.caches
    }

    /// The replica's readiness (serve it on `/readyz`).
    pub fn readiness(&self) -> Readiness {
        self.readiness.clone()
    }

    /// This replica's election identity.
    pub fn identity(&self) -> &str {
        &self.config.election.identity
    }

    /// Adds leader-lifetime work (typically a [`crate::controller::Controller`]).
    pub fn add(&mut self, work: impl LeaderWork + 'static) -> &mut Self {
        self.work.push(Arc::new(work));
        self
    }

    /// Runs until `shutdown` is cancelled. Returns an error only when the caches cannot
    /// run or stop before syncing.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), ManagerError> {
        let elector = LeaderElector::new(
            self.client.clone(),
            self.config.election.clone(),
            &self.election_metrics,
        )?;
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
        if synced && self.config.leader_election {
            self.campaign(&elector, &shutdown).await;
        } else if synced {
            self.lead_without_election(&shutdown).await;
        }
        self.readiness.stopped();
        caches_stop.cancel();
        flatten_cache_result(cache_task.await)?;
        Ok(())
    }

    /// What one leadership term runs.
    fn lifetime(&self) -> LeaderLifetime {
        LeaderLifetime {
            caches: self.caches.clone(),
            readiness: self.readiness.clone(),
            work: self.work.clone(),
            queue_metrics: self.queue_metrics.clone(),
            drain_timeout: self.config.drain_timeout,
        }
    }

    /// Leader work for the whole life of the process, no Lease involved.
    async fn lead_without_election(&self, shutdown: &CancellationToken) {
        self.lifetime().run(shutdown.child_token()).await;
        self.readiness.stopped_leading();
    }

    async fn campaign(&self, elector: &LeaderElector, shutdown: &CancellationToken) {
        let identity = elector.identity().to_string();
        let readiness = self.readiness.clone();
        let on_new_leader = move |holder: &str| readiness.observed_leader(holder, &identity);
        loop {
            self.readiness.campaigning();
            let lifetime = self.lifetime();
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
}

impl LeaderLifetime {
    async fn run(self, leader_token: CancellationToken) {
        self.readiness.became_leader();
        if !self.caches.cache_ready() {
            tracing::error!(error = %CacheNotReady, "not starting leader work");
            return;
        }
        let mut running: Vec<RunningWork> = Vec::with_capacity(self.work.len());
        for work in &self.work {
            match work.start(leader_token.clone(), &self.queue_metrics) {
                Ok(started) => running.push(started),
                Err(error) => {
                    tracing::error!(work = work.name(), %error, "leader work failed to start; stepping down");
                    self.stop(running).await;
                    return;
                }
            }
        }
        self.readiness.set_leader_ready(true);
        tracing::info!(controllers = running.len(), "leader work running");
        leader_token.cancelled().await;
        self.stop(running).await;
    }

    async fn stop(&self, mut running: Vec<RunningWork>) {
        self.readiness.set_leader_ready(false);
        for work in running.iter_mut().rev() {
            work.detach_handlers();
        }
        let drains = running
            .into_iter()
            .map(|work| work.drain(self.drain_timeout));
        futures::future::join_all(drains).await;
        tracing::info!("leader work drained");
    }
}
