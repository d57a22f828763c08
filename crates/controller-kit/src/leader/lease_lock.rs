//! A resource lock on a `coordination.k8s.io/v1` Lease, with optimistic concurrency:
//! GET the Lease, then PUT it back carrying the resourceVersion that was read. A 409
//! means another replica wrote in between, so it holds the lock and we do not.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

/// The holder record stored in the Lease spec (client-go's `LeaderElectionRecord`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionRecord {
    /// Who holds the lease; empty when it is free.
    pub holder_identity: String,
    /// How long the holder's claim lasts without renewal.
    pub lease_duration: Duration,
    /// When the current holder acquired it.
    pub acquire_time: Option<Timestamp>,
    /// When the current holder last renewed it.
    pub renew_time: Option<Timestamp>,
    /// How many times the holder changed.
    pub leader_transitions: i32,
}

impl LeaderElectionRecord {
    fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let spec = spec.cloned().unwrap_or_default();
        Self {
            holder_identity: spec.holder_identity.unwrap_or_default(),
            lease_duration: Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
            ),
            acquire_time: spec.acquire_time.map(|time| time.0),
            renew_time: spec.renew_time.map(|time| time.0),
            leader_transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    fn to_spec(&self) -> LeaseSpec {
        let seconds = i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX);
        LeaseSpec {
            holder_identity: (!self.holder_identity.is_empty())
                .then(|| self.holder_identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.leader_transitions),
            ..LeaseSpec::default()
        }
    }
}

/// A Lease operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another replica changed the Lease since we read it (HTTP 409).
    #[error("lease {namespace}/{name} was changed by another replica (conflict)")]
    Conflict {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
    },
    /// Any other API failure.
    #[error("{operation} lease {namespace}/{name} failed: {source}")]
    Api {
        /// What we tried (get, create, update).
        operation: &'static str,
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// The lock on one Lease.
#[derive(Clone)]
pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
}

impl LeaseLock {
    /// The lock on Lease `namespace/name`.
    pub fn new(client: kube::Client, namespace: &str, name: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }

    /// `namespace/name`, for logs and the metrics' `name` label.
    pub fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn error(&self, operation: &'static str, source: kube::Error) -> LeaseError {
        match &source {
            kube::Error::Api(status) if status.is_conflict() || status.is_already_exists() => {
                LeaseError::Conflict {
                    namespace: self.namespace.clone(),
                    name: self.name.clone(),
                }
            }
            _ => LeaseError::Api {
                operation,
                namespace: self.namespace.clone(),
                name: self.name.clone(),
                source,
            },
        }
    }

    /// Reads the Lease; `None` if it does not exist.
    pub async fn get(&self) -> Result<Option<(LeaderElectionRecord, Lease)>, LeaseError> {
        let lease = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(|error| self.error("get", error))?;
        Ok(lease.map(|lease| (LeaderElectionRecord::from_spec(lease.spec.as_ref()), lease)))
    }

    /// Creates the Lease holding `record`; a conflict means another replica created it first.
    pub async fn create(&self, record: &LeaderElectionRecord) -> Result<Lease, LeaseError> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(record.to_spec()),
        };
        self.api
            .create(&PostParams::default(), &lease)
            .await
            .map_err(|error| self.error("create", error))
    }

    /// Replaces the Lease read as `current` with `record`, guarded by its resourceVersion.
    pub async fn update(
        &self,
        current: &Lease,
        record: &LeaderElectionRecord,
    ) -> Result<Lease, LeaseError> {
        let mut lease = current.clone();
        lease.spec = Some(record.to_spec());
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
            .map_err(|error| self.error("update", error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_through_the_lease_spec() {
        let record = LeaderElectionRecord {
            holder_identity: "host_1234".into(),
            lease_duration: Duration::from_secs(15),
            acquire_time: Some(Timestamp::from_second(1_700_000_000).unwrap()),
            renew_time: Some(Timestamp::from_second(1_700_000_010).unwrap()),
            leader_transitions: 3,
        };
        let spec = record.to_spec();
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(LeaderElectionRecord::from_spec(Some(&spec)), record);
    }

    #[test]
    fn an_empty_holder_is_stored_as_absent() {
        let record = LeaderElectionRecord {
            holder_identity: String::new(),
            lease_duration: Duration::from_secs(1),
            acquire_time: None,
            renew_time: None,
            leader_transitions: 0,
        };
        assert_eq!(record.to_spec().holder_identity, None);
        assert_eq!(LeaderElectionRecord::from_spec(None).holder_identity, "");
    }
}
