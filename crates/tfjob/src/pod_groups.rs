//! The I/O of gang scheduling: the cache of the chosen scheduler's
//! PodGroups and of the cluster's PriorityClasses, what the planner is
//! shown of them, and the PodGroup writes the planner asks for.

use controller_kit::CachedStore;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use serde_json::{Value, json};

use crate::api::{PodGroupApi, PodGroupObject, SchedulerPlugins, Volcano};
use crate::plan::gang::{GangScheduler, GangSnapshot, ObservedPodGroup};
use crate::plan::names;
use controller_kit::error::is_status;

/// The cached PodGroups of the gang scheduler in use.
#[derive(Clone)]
pub enum PodGroupStore {
    Volcano(CachedStore<PodGroupObject<Volcano>>),
    SchedulerPlugins(CachedStore<PodGroupObject<SchedulerPlugins>>),
}

fn observe<A: PodGroupApi>(
    store: &CachedStore<PodGroupObject<A>>,
    namespace: &str,
    name: &str,
    job_uid: &str,
) -> Option<ObservedPodGroup> {
    store
        .get_namespaced(namespace, name)
        // The job's group is the one it controls; a group of the same
        // name that belongs to something else is not touched.
        .filter(|group| {
            names::controller_of(group.metadata.owner_references.as_ref())
                .is_some_and(|owner| owner.uid == job_uid)
        })
        .map(|group| ObservedPodGroup {
            uid: group.metadata.uid.clone(),
            phase: group.phase(),
            created: group.metadata.creation_timestamp.as_ref().map(|t| t.0),
            spec: group.spec.clone(),
        })
}

impl PodGroupStore {
    /// The group `namespace/name` if the job of `job_uid` controls it.
    pub fn observe(&self, namespace: &str, name: &str, job_uid: &str) -> Option<ObservedPodGroup> {
        match self {
            PodGroupStore::Volcano(store) => observe(store, namespace, name, job_uid),
            PodGroupStore::SchedulerPlugins(store) => observe(store, namespace, name, job_uid),
        }
    }
}

/// What the planner sees for gang scheduling; empty when it is off.
pub fn snapshot(
    groups: Option<&PodGroupStore>,
    priority_classes: Option<&CachedStore<PriorityClass>>,
    namespace: &str,
    name: &str,
    job_uid: &str,
) -> GangSnapshot {
    GangSnapshot {
        pod_group: groups.and_then(|groups| groups.observe(namespace, name, job_uid)),
        priority_classes: priority_classes
            .map(|classes| {
                classes
                    .state()
                    .iter()
                    .filter_map(|class| Some((class.metadata.name.clone()?, class.value)))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// Whether a job's spec names the PriorityClass `class` in a pod
/// template or its scheduling policy (its PodGroup may then change when
/// the class does).
pub fn names_priority_class(spec: &Value, class: &str) -> bool {
    let policy = spec
        .pointer("/runPolicy/schedulingPolicy/priorityClass")
        .and_then(Value::as_str);
    policy == Some(class)
        || spec
            .get("tfReplicaSpecs")
            .and_then(Value::as_object)
            .is_some_and(|replicas| {
                replicas.values().any(|replica| {
                    replica
                        .pointer("/template/spec/priorityClassName")
                        .and_then(Value::as_str)
                        == Some(class)
                })
            })
}

/// A PodGroup write failed.
#[derive(Debug, thiserror::Error)]
#[error("{what} {name}: {source}")]
pub struct PodGroupError {
    pub what: &'static str,
    pub name: String,
    #[source]
    pub source: kube::Error,
}

/// The PodGroup writes, for the API of one scheduler.
struct Writer<A: PodGroupApi> {
    api: Api<PodGroupObject<A>>,
}

impl<A: PodGroupApi> Writer<A> {
    /// Creates the group; one that exists already was created by an
    /// earlier pass. True when this call created it.
    async fn create(&self, group: Value) -> Result<bool, PodGroupError> {
        let name = group["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let error = |source| PodGroupError {
            what: "creating podgroup",
            name: name.clone(),
            source,
        };
        let group: PodGroupObject<A> =
            serde_json::from_value(group).map_err(|e| error(kube::Error::SerdeError(e)))?;
        match self.api.create(&PostParams::default(), &group).await {
            Ok(_) => Ok(true),
            Err(source) if is_status(&source, 409) => Ok(false),
            Err(source) => Err(error(source)),
        }
    }

    /// Merge-patches the group's spec; the UID in the patch makes it apply
    /// only to the group the plan saw.
    async fn update(
        &self,
        name: &str,
        uid: Option<String>,
        spec: Value,
    ) -> Result<(), PodGroupError> {
        let mut patch = json!({ "spec": spec });
        if let Some(uid) = uid {
            patch["metadata"] = json!({ "uid": uid });
        }
        match self
            .api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            // Gone, or replaced by a group of another UID: the next pass
            // sees what is there.
            Err(source) if is_status(&source, 404) || is_status(&source, 409) => Ok(()),
            Err(source) => Err(PodGroupError {
                what: "updating podgroup",
                name: name.to_string(),
                source,
            }),
        }
    }

    /// Deletes the group of `uid`; true when this call deleted it.
    async fn delete(&self, name: &str, uid: Option<String>) -> Result<bool, PodGroupError> {
        let params = DeleteParams {
            preconditions: uid.map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(name, &params).await {
            Ok(_) => Ok(true),
            Err(source) if is_status(&source, 404) || is_status(&source, 409) => Ok(false),
            Err(source) => Err(PodGroupError {
                what: "deleting podgroup",
                name: name.to_string(),
                source,
            }),
        }
    }
}

/// A PodGroup write of the plan.
pub enum PodGroupWrite {
    Create(Value),
    Update {
        name: String,
        uid: Option<String>,
        spec: Value,
    },
    Delete {
        name: String,
        uid: Option<String>,
    },
}

/// Performs `write` against `scheduler`'s PodGroup API in `namespace`.
/// True when it changed something (created or deleted a group).
pub async fn execute(
    client: &kube::Client,
    scheduler: GangScheduler,
    namespace: &str,
    write: PodGroupWrite,
) -> Result<bool, PodGroupError> {
    match scheduler {
        GangScheduler::Volcano => {
            run(
                Writer::<Volcano> {
                    api: Api::namespaced(client.clone(), namespace),
                },
                write,
            )
            .await
        }
        GangScheduler::SchedulerPlugins => {
            let api = Api::namespaced(client.clone(), namespace);
            run(Writer::<SchedulerPlugins> { api }, write).await
        }
    }
}

async fn run<A: PodGroupApi>(
    writer: Writer<A>,
    write: PodGroupWrite,
) -> Result<bool, PodGroupError> {
    match write {
        PodGroupWrite::Create(group) => writer.create(group).await,
        PodGroupWrite::Update { name, uid, spec } => {
            writer.update(&name, uid, spec).await.map(|()| false)
        }
        PodGroupWrite::Delete { name, uid } => writer.delete(&name, uid).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_names_a_priority_class_in_a_template_or_its_scheduling_policy() {
        let spec = json!({
            "runPolicy": {"schedulingPolicy": {"priorityClass": "batch"}},
            "tfReplicaSpecs": {"Worker": {"template": {"spec": {"priorityClassName": "high"}}}},
        });
        assert!(names_priority_class(&spec, "batch"));
        assert!(names_priority_class(&spec, "high"));
        assert!(!names_priority_class(&spec, "low"));
        assert!(!names_priority_class(&json!({}), "high"));
    }
}
