//! Deleting several children of one replica type in one request.
//!
//! When a job finishes, cleanPodPolicy deletes its running pods and their
//! Services; upstream sends one DELETE per child. A job's parameter
//! servers (which never exit on their own) and its workers still running
//! when the chief succeeds are usually several per replica type, so the
//! deletes of one type and kind go as one DeleteCollection whose label
//! selector names exactly those children: `group-name`, `job-name`,
//! `replica-type` and `replica-index in (...)`.
//!
//! A DeleteCollection carries no UID precondition, so it is used only when
//! the selector matches, in the snapshot the plan was made from, exactly the
//! children the plan deletes (every child of the operator's label set is
//! in that snapshot: its caches watch `group-name=kubeflow.org`). Anything
//! else matching it (an orphan carrying the same index, a child another
//! controller owns, one already terminating), a child without the short
//! labels (adopted with legacy labels only), or a single delete keeps the
//! per-child DELETE with its UID precondition.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::ChildAction;
use super::names::{
    GROUP_NAME, LABEL_GROUP_NAME, LABEL_JOB_NAME, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE,
    job_label_value,
};

/// Which kind of child a batch deletes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChildKind {
    Pod,
    Service,
}

/// One child the plan deletes: name and UID as the snapshot shows them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Doomed {
    name: String,
    uid: Option<String>,
}

/// Replaces the per-child deletes of `actions` by one
/// [`ChildAction::DeleteChildren`] per (kind, replica type) wherever that
/// is exact for the snapshot (`pods` and `services`, the plan's input);
/// every other action is kept as it is, in its order.
pub fn batch_deletions(
    actions: Vec<ChildAction>,
    job: &str,
    pods: &[&ObjectMeta],
    services: &[&ObjectMeta],
) -> Vec<ChildAction> {
    let job_label = job_label_value(job);
    // (kind, replica type) → index → the child deleted there.
    let mut groups: BTreeMap<(ChildKind, String), BTreeMap<String, Doomed>> = BTreeMap::new();
    // Position of each action → the group its delete joined, if any.
    let mut group_at: Vec<Option<(ChildKind, String)>> = vec![None; actions.len()];
    for (position, action) in actions.iter().enumerate() {
        let (kind, name, uid, snapshot) = match action {
            ChildAction::DeletePod { name, uid } => (ChildKind::Pod, name, uid, pods),
            ChildAction::DeleteService { name, uid } => (ChildKind::Service, name, uid, services),
            _ => continue,
        };
        let Some(meta) = snapshot
            .iter()
            .find(|meta| meta.name.as_ref() == Some(name) && meta.uid == *uid)
        else {
            continue;
        };
        let Some((rtype, index)) = short_labels(meta, &job_label) else {
            continue;
        };
        let slot = groups.entry((kind, rtype.clone())).or_default();
        if slot.contains_key(&index) {
            continue;
        }
        slot.insert(
            index,
            Doomed {
                name: name.clone(),
                uid: uid.clone(),
            },
        );
        group_at[position] = Some((kind, rtype));
    }
    let mut batches: BTreeMap<(ChildKind, String), (String, Vec<String>)> = BTreeMap::new();
    for ((kind, rtype), members) in &groups {
        if members.len() < 2 {
            continue;
        }
        let snapshot = match kind {
            ChildKind::Pod => pods,
            ChildKind::Service => services,
        };
        let matching: BTreeSet<Doomed> = snapshot
            .iter()
            .filter(|meta| {
                short_labels(meta, &job_label)
                    .is_some_and(|(t, index)| t == *rtype && members.contains_key(&index))
            })
            .map(|meta| Doomed {
                name: meta.name.clone().unwrap_or_default(),
                uid: meta.uid.clone(),
            })
            .collect();
        let doomed: BTreeSet<Doomed> = members.values().cloned().collect();
        if matching != doomed {
            continue;
        }
        let indexes: Vec<&str> = members.keys().map(String::as_str).collect();
        let selector = format!(
            "{LABEL_GROUP_NAME}={GROUP_NAME},{LABEL_JOB_NAME}={job_label},{LABEL_REPLICA_TYPE}={rtype},{LABEL_REPLICA_INDEX} in ({})",
            indexes.join(",")
        );
        let names = members.values().map(|d| d.name.clone()).collect();
        batches.insert((*kind, rtype.clone()), (selector, names));
    }
    let mut emitted: BTreeSet<(ChildKind, String)> = BTreeSet::new();
    let mut out = Vec::with_capacity(actions.len());
    for (action, key) in actions.into_iter().zip(group_at) {
        match key.and_then(|key| batches.get(&key).map(|batch| (key, batch))) {
            Some((key, (selector, names))) => {
                if emitted.insert(key.clone()) {
                    out.push(ChildAction::DeleteChildren {
                        kind: key.0,
                        selector: selector.clone(),
                        names: names.clone(),
                    });
                }
            }
            None => out.push(action),
        }
    }
    out
}

/// Drops the deletes of children an earlier pass already deleted (by UID)
/// while the snapshot, a cache behind the server, still shows them alive:
/// sending them again would only repeat the write and its event.
pub fn without_requested(
    actions: Vec<ChildAction>,
    requested: &HashSet<String>,
) -> Vec<ChildAction> {
    actions
        .into_iter()
        .filter(|action| match action {
            ChildAction::DeletePod { uid: Some(uid), .. }
            | ChildAction::DeleteService { uid: Some(uid), .. } => !requested.contains(uid),
            _ => true,
        })
        .collect()
}

/// Of the children deleted earlier (`requested`, UIDs), those the snapshot
/// still shows alive: present and without a deletionTimestamp. The others
/// are seen gone or terminating and need remembering no longer.
pub fn still_shown_alive(requested: &HashSet<String>, children: &[&ObjectMeta]) -> HashSet<String> {
    children
        .iter()
        .filter(|meta| meta.deletion_timestamp.is_none())
        .filter_map(|meta| meta.uid.clone())
        .filter(|uid| requested.contains(uid))
        .collect()
}

/// The replica type and index of a child labelled with the short label set
/// of job `job_label`, the labels the batch selector uses.
fn short_labels(meta: &ObjectMeta, job_label: &str) -> Option<(String, String)> {
    let labels = meta.labels.as_ref()?;
    if labels.get(LABEL_GROUP_NAME).map(String::as_str) != Some(GROUP_NAME)
        || labels.get(LABEL_JOB_NAME).map(String::as_str) != Some(job_label)
    {
        return None;
    }
    let rtype = labels.get(LABEL_REPLICA_TYPE)?;
    let index = labels.get(LABEL_REPLICA_INDEX)?;
    Some((rtype.clone(), index.clone()))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::api::ReplicaType;
    use crate::plan::names::replica_labels;

    fn child(job: &str, rtype: &ReplicaType, index: i32, uid: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(format!("{job}-{}-{index}", rtype.lower())),
            uid: Some(uid.to_string()),
            labels: Some(replica_labels(job, rtype, index, false)),
            ..ObjectMeta::default()
        }
    }

    fn delete_pod(meta: &ObjectMeta) -> ChildAction {
        ChildAction::DeletePod {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        }
    }

    fn delete_service(meta: &ObjectMeta) -> ChildAction {
        ChildAction::DeleteService {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
        }
    }

    #[test]
    fn two_parameter_servers_and_their_services_go_in_one_request_each() {
        let ps = ReplicaType::PS;
        let worker = ReplicaType::Worker;
        let pods = [
            child("job", &ps, 0, "p0"),
            child("job", &ps, 1, "p1"),
            child("job", &worker, 3, "w3"),
        ];
        let services = [
            child("job", &ps, 0, "s0"),
            child("job", &ps, 1, "s1"),
            child("job", &worker, 3, "sw3"),
        ];
        let actions = vec![
            delete_pod(&pods[0]),
            delete_pod(&pods[1]),
            delete_pod(&pods[2]),
            delete_service(&services[0]),
            delete_service(&services[1]),
            delete_service(&services[2]),
        ];
        let pod_refs: Vec<&ObjectMeta> = pods.iter().collect();
        let service_refs: Vec<&ObjectMeta> = services.iter().collect();
        let batched = batch_deletions(actions, "job", &pod_refs, &service_refs);
        assert_eq!(
            batched,
            vec![
                ChildAction::DeleteChildren {
                    kind: ChildKind::Pod,
                    selector: "group-name=kubeflow.org,job-name=job,replica-type=ps,replica-index in (0,1)".into(),
                    names: vec!["job-ps-0".into(), "job-ps-1".into()],
                },
                // A lone delete keeps its UID precondition.
                delete_pod(&pods[2]),
                ChildAction::DeleteChildren {
                    kind: ChildKind::Service,
                    selector: "group-name=kubeflow.org,job-name=job,replica-type=ps,replica-index in (0,1)".into(),
                    names: vec!["job-ps-0".into(), "job-ps-1".into()],
                },
                delete_service(&services[2]),
            ]
        );
    }

    #[test]
    fn anything_else_the_selector_would_match_keeps_the_deletes_one_by_one() {
        let worker = ReplicaType::Worker;
        let doomed = [
            child("job", &worker, 0, "w0"),
            child("job", &worker, 1, "w1"),
        ];
        // An orphan of another name carrying index 1 of the same job.
        let mut stray = child("job", &worker, 1, "stray");
        stray.name = Some("stray-worker".into());
        let pods: Vec<&ObjectMeta> = doomed.iter().chain([&stray]).collect();
        let actions = vec![delete_pod(&doomed[0]), delete_pod(&doomed[1])];
        let batched = batch_deletions(actions.clone(), "job", &pods, &[]);
        assert_eq!(batched, actions);
    }

    #[test]
    fn children_without_the_short_labels_or_unknown_to_the_snapshot_are_deleted_one_by_one() {
        let worker = ReplicaType::Worker;
        let mut legacy = child("job", &worker, 0, "w0");
        legacy.labels = Some(BTreeMap::from([
            ("group-name".to_string(), "kubeflow.org".to_string()),
            ("tf-job-name".to_string(), "job".to_string()),
            ("tf-replica-type".to_string(), "worker".to_string()),
            ("tf-replica-index".to_string(), "0".to_string()),
        ]));
        let labelled = child("job", &worker, 1, "w1");
        let unknown = child("job", &worker, 2, "w2");
        let pods: Vec<&ObjectMeta> = vec![&legacy, &labelled];
        let actions = vec![
            delete_pod(&legacy),
            delete_pod(&labelled),
            delete_pod(&unknown),
        ];
        let batched = batch_deletions(actions.clone(), "job", &pods, &[]);
        assert_eq!(batched, actions);
    }

    #[test]
    fn deletes_sent_before_are_not_sent_again_until_the_snapshot_shows_them() {
        let ps = ReplicaType::PS;
        let alive = child("job", &ps, 0, "p0");
        let mut terminating = child("job", &ps, 1, "p1");
        terminating.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let requested: HashSet<String> = ["p0", "p1", "gone"].map(String::from).into();
        // p1 shows its deletion and "gone" is gone: only p0 is remembered.
        let kept = still_shown_alive(&requested, &[&alive, &terminating]);
        assert_eq!(kept, HashSet::from(["p0".to_string()]));
        let other = child("job", &ps, 2, "p2");
        let actions = vec![delete_pod(&alive), delete_pod(&other)];
        assert_eq!(without_requested(actions, &kept), vec![delete_pod(&other)]);
    }

    #[test]
    fn other_actions_keep_their_place() {
        let ps = ReplicaType::PS;
        let pods = [child("job", &ps, 0, "p0"), child("job", &ps, 1, "p1")];
        let pod_refs: Vec<&ObjectMeta> = pods.iter().collect();
        let job_delete = ChildAction::DeleteJob {
            name: "job".into(),
            uid: Some("j".into()),
        };
        let actions = vec![
            delete_pod(&pods[0]),
            job_delete.clone(),
            delete_pod(&pods[1]),
        ];
        let batched = batch_deletions(actions, "job", &pod_refs, &[]);
        assert_eq!(batched.len(), 2);
        assert!(matches!(
            &batched[0],
            ChildAction::DeleteChildren { kind: ChildKind::Pod, names, .. } if names.len() == 2
        ));
        assert_eq!(batched[1], job_delete);
    }
}
