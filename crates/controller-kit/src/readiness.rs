//! The replica's readiness state machine.
//!
//! A replica moves stopped → waiting (campaigning) → standby (someone else leads) or
//! leader. It is ready when its caches are ready and it is either a standby, or the
//! leader with its workers running. A standby is ready on purpose: it serves reads
//! from warm caches and can take over at once.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

/// Where the replica stands in leader election.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaRole {
    /// Not running (before start, after shutdown).
    Stopped,
    /// Campaigning; no leader observed yet.
    Waiting,
    /// Another replica leads; this one serves reads.
    Standby,
    /// This replica leads.
    Leader,
}

impl ReplicaRole {
    /// A lowercase name for logs and the `/readyz` body.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stopped => "stopped",
            Self::Waiting => "waiting",
            Self::Standby => "standby",
            Self::Leader => "leader",
        }
    }
}

/// A snapshot of everything readiness depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadinessSnapshot {
    /// The replica's role.
    pub role: ReplicaRole,
    /// Every cache has synced and is running.
    pub cache_ready: bool,
    /// Leader work is attached and its workers run.
    pub leader_ready: bool,
}

impl ReadinessSnapshot {
    /// Whether the replica should receive traffic.
    pub fn is_ready(&self) -> bool {
        self.cache_ready
            && match self.role {
                ReplicaRole::Standby => true,
                ReplicaRole::Leader => self.leader_ready,
                ReplicaRole::Stopped | ReplicaRole::Waiting => false,
            }
    }

    /// A short, human reason for the `/readyz` body.
    pub fn reason(&self) -> &'static str {
        if !self.cache_ready {
            return "caches are not synced";
        }
        match self.role {
            ReplicaRole::Stopped => "the replica is stopped",
            ReplicaRole::Waiting => "waiting for leader election",
            ReplicaRole::Standby => "standby with synced caches",
            ReplicaRole::Leader if self.leader_ready => "leader with running workers",
            ReplicaRole::Leader => "leader starting its workers",
        }
    }
}

/// Shared, observable readiness. Cheap to clone; all clones see the same state.
#[derive(Clone, Debug)]
pub struct Readiness {
    inner: Arc<Mutex<ReadinessSnapshot>>,
    changes: watch::Sender<ReadinessSnapshot>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self::new()
    }
}

impl Readiness {
    /// A stopped replica with nothing ready.
    pub fn new() -> Self {
        let initial = ReadinessSnapshot {
            role: ReplicaRole::Stopped,
            cache_ready: false,
            leader_ready: false,
        };
        Self {
            inner: Arc::new(Mutex::new(initial)),
            changes: watch::channel(initial).0,
        }
    }

    /// The current state.
    pub fn snapshot(&self) -> ReadinessSnapshot {
        *self.inner.lock()
    }

    /// Whether the replica is ready now.
    pub fn is_ready(&self) -> bool {
        self.snapshot().is_ready()
    }

    /// Subscribes to every change (for tests and for waiting on a state).
    pub fn subscribe(&self) -> watch::Receiver<ReadinessSnapshot> {
        self.changes.subscribe()
    }

    /// Waits until `predicate` holds for the current state.
    pub async fn wait_for(&self, predicate: impl Fn(&ReadinessSnapshot) -> bool) {
        let mut receiver = self.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = receiver.wait_for(|snapshot| predicate(snapshot)).await;
    }

    fn update(&self, change: impl FnOnce(&mut ReadinessSnapshot)) {
        let mut inner = self.inner.lock();
        change(&mut inner);
        let snapshot = *inner;
        // Publish under the lock so subscribers see changes in order.
        self.changes.send_replace(snapshot);
    }

    /// The replica starts campaigning.
    pub fn campaigning(&self) {
        self.update(|state| state.role = ReplicaRole::Waiting);
    }

    /// Election observed `leader` holding the lease; `own_identity` is this replica's.
    ///
    /// Only a waiting replica becomes standby: a late observation of a previous leader
    /// never downgrades a replica that has become leader.
    pub fn observed_leader(&self, leader: &str, own_identity: &str) {
        if leader.is_empty() || leader == own_identity {
            return;
        }
        self.update(|state| {
            if state.role == ReplicaRole::Waiting {
                state.role = ReplicaRole::Standby;
            }
        });
    }

    /// This replica acquired the lease.
    pub fn became_leader(&self) {
        self.update(|state| state.role = ReplicaRole::Leader);
    }

    /// This replica lost or released the lease and campaigns again.
    pub fn stopped_leading(&self) {
        self.update(|state| {
            state.leader_ready = false;
            if state.role == ReplicaRole::Leader {
                state.role = ReplicaRole::Waiting;
            }
        });
    }

    /// Leader work is attached and running (`true`) or detached (`false`).
    pub fn set_leader_ready(&self, ready: bool) {
        self.update(|state| state.leader_ready = ready);
    }

    /// Caches synced and run (`true`) or stopped (`false`).
    pub fn set_cache_ready(&self, ready: bool) {
        self.update(|state| state.cache_ready = ready);
    }

    /// The replica shut down.
    pub fn stopped(&self) {
        self.update(|state| {
            state.role = ReplicaRole::Stopped;
            state.leader_ready = false;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_replica_is_stopped_and_not_ready() {
        let readiness = Readiness::new();
        assert_eq!(readiness.snapshot().role, ReplicaRole::Stopped);
        assert!(!readiness.is_ready());
    }

    #[test]
    fn a_standby_with_ready_caches_is_ready() {
        let readiness = Readiness::new();
        readiness.set_cache_ready(true);
        readiness.campaigning();
        assert!(!readiness.is_ready(), "waiting is not ready");
        readiness.observed_leader("other", "me");
        assert_eq!(readiness.snapshot().role, ReplicaRole::Standby);
        assert!(readiness.is_ready());
        readiness.set_cache_ready(false);
        assert!(
            !readiness.is_ready(),
            "a standby without caches is not ready"
        );
        assert_eq!(readiness.snapshot().reason(), "caches are not synced");
    }

    #[test]
    fn a_leader_is_ready_only_once_its_workers_run() {
        let readiness = Readiness::new();
        readiness.set_cache_ready(true);
        readiness.campaigning();
        readiness.became_leader();
        assert!(!readiness.is_ready());
        assert_eq!(readiness.snapshot().reason(), "leader starting its workers");
        readiness.set_leader_ready(true);
        assert!(readiness.is_ready());
        readiness.stopped_leading();
        assert_eq!(readiness.snapshot().role, ReplicaRole::Waiting);
        assert!(!readiness.is_ready());
    }

    #[test]
    fn a_late_observation_of_the_old_leader_never_downgrades_a_leader() {
        let readiness = Readiness::new();
        readiness.set_cache_ready(true);
        readiness.campaigning();
        readiness.became_leader();
        readiness.set_leader_ready(true);
        readiness.observed_leader("old-leader", "me");
        assert_eq!(readiness.snapshot().role, ReplicaRole::Leader);
        assert!(readiness.is_ready());
    }

    #[test]
    fn observing_itself_or_nobody_leaves_a_waiting_replica_waiting() {
        let readiness = Readiness::new();
        readiness.campaigning();
        readiness.observed_leader("me", "me");
        readiness.observed_leader("", "me");
        assert_eq!(readiness.snapshot().role, ReplicaRole::Waiting);
    }

    #[test]
    fn a_stopped_replica_is_not_ready_even_with_caches() {
        let readiness = Readiness::new();
        readiness.set_cache_ready(true);
        readiness.campaigning();
        readiness.observed_leader("other", "me");
        readiness.stopped();
        assert!(!readiness.is_ready());
        assert_eq!(readiness.snapshot().reason(), "the replica is stopped");
    }
}
