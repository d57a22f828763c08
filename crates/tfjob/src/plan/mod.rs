//! The pure planner: from a snapshot (the job, the pods and Services that
//! may be its children, the time) to the actions to take and the status
//! the job should have. No I/O, no clock, no randomness: every input is a
//! parameter, so the behaviour sentences of report 4 are plain tests.
//!
//! Actions are idempotent by construction: children have deterministic
//! names, so re-running a plan on a stale snapshot ends in `AlreadyExists`
//! or `NotFound`, which the reconciler treats as success.

pub mod children;
pub mod conditions;
pub mod names;
pub mod tf_config;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

use crate::api::defaults::{self, EffectiveSpec, SuccessPolicy};
use crate::api::validate::validate;
use crate::api::{
    CONTAINER_NAME, CleanPodPolicy, JobStatus, ReplicaStatus, ReplicaType, RestartPolicy, TFJob,
    TFJobObject,
};
use conditions as cond;

/// Operator-wide settings the planner needs.
#[derive(Clone, Debug)]
pub struct PlanConfig {
    /// `CUSTOM_CLUSTER_DOMAIN`: appended to `TF_CONFIG` addresses.
    pub cluster_domain: Option<String>,
    /// `cleanPodPolicy` of jobs that set none (`Running`: tf-operator parity).
    pub default_clean_pod_policy: CleanPodPolicy,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            cluster_domain: None,
            default_clean_pod_policy: CleanPodPolicy::Running,
        }
    }
}

/// Exit code reported when the tensorflow container has no terminated
/// state (upstream's sentinel 0xbeef).
pub const NO_EXIT_CODE: i32 = 0xbeef;

/// Whether an `ExitCode` replica that exited with `code` is retried: the
/// signal range, 128 and above (training-operator's rule, which the report
/// recommends; issue 16 makes the set configurable).
pub fn is_retryable_exit_code(code: i32) -> bool {
    code >= 128
}

/// A child to create, delete, adopt or release.
#[derive(Clone, Debug, PartialEq)]
pub enum ChildAction {
    CreatePod(Box<Pod>),
    /// Delete with a UID precondition, so a re-created pod of the same name
    /// is never hit.
    DeletePod {
        name: String,
        uid: Option<String>,
    },
    CreateService(Box<Service>),
    DeleteService {
        name: String,
        uid: Option<String>,
    },
    /// Replace the child's owner references (adoption adds the job as
    /// controller, release removes it).
    SetPodOwners {
        name: String,
        uid: Option<String>,
        owners: Vec<OwnerReference>,
    },
    SetServiceOwners {
        name: String,
        uid: Option<String>,
        owners: Vec<OwnerReference>,
    },
}

/// Severity of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// A Kubernetes Event about the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub type_: EventType,
    pub reason: String,
    pub message: String,
    /// Events with a key are emitted once per key (per operator process);
    /// events without one follow a status transition, which happens once.
    pub dedup_key: Option<String>,
}

impl PlannedEvent {
    fn normal(reason: &str, message: String) -> Self {
        Self {
            type_: EventType::Normal,
            reason: reason.to_string(),
            message,
            dedup_key: None,
        }
    }
    fn warning(reason: &str, message: String) -> Self {
        Self {
            type_: EventType::Warning,
            reason: reason.to_string(),
            message,
            dedup_key: None,
        }
    }
    fn keyed(mut self, key: String) -> Self {
        self.dedup_key = Some(key);
        self
    }
}

/// What to do for one job.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub actions: Vec<ChildAction>,
    pub events: Vec<PlannedEvent>,
    /// The status the job should have.
    pub status: JobStatus,
    /// Whether `status` differs from the observed one (write only then).
    pub status_changed: bool,
}

impl Plan {
    fn unchanged(status: JobStatus) -> Self {
        Plan {
            actions: Vec::new(),
            events: Vec::new(),
            status,
            status_changed: false,
        }
    }
}

/// Plans one pass for `object`. `pods` and `services` are every candidate
/// child: those owned by the job's UID and orphans carrying its labels;
/// anything else in the slices is ignored.
pub fn plan(
    object: &TFJobObject,
    pods: &[&Pod],
    services: &[&Service],
    now: jiff::Timestamp,
    config: &PlanConfig,
) -> Plan {
    let now = Time(now);
    if object.metadata.deletion_timestamp.is_some() {
        // The garbage collector removes the children; nothing to decide.
        return Plan::unchanged(object.status());
    }
    let job = match object.decode() {
        Ok(job) => job,
        Err(problem) => return invalid(object, &problem, now),
    };
    if let Err(error) = validate(&job) {
        return invalid(object, &error.message, now);
    }
    let spec = defaults::apply(&job, config.default_clean_pod_policy);
    let mut planner = Planner {
        job: &job,
        spec: &spec,
        config,
        now,
        actions: Vec::new(),
        events: Vec::new(),
        status: job.status.clone().unwrap_or_default(),
        restarting: BTreeSet::new(),
    };
    planner.run(pods, services);
    let old = job.status.clone().unwrap_or_default();
    finish(planner.actions, planner.events, old, planner.status)
}

/// Completes a plan: the status counts as changed when anything but the
/// bookkeeping fields differs; `lastReconcileTime` is then refreshed.
fn finish(
    actions: Vec<ChildAction>,
    events: Vec<PlannedEvent>,
    old: JobStatus,
    mut status: JobStatus,
) -> Plan {
    let status_changed = status != old;
    if !status_changed {
        status.last_reconcile_time = old.last_reconcile_time.clone();
    }
    Plan {
        actions,
        events,
        status,
        status_changed,
    }
}

/// The invalid-spec path: Failed/InvalidTFJobSpec with the specific
/// problem, a Warning event on the transition, and no child at all.
fn invalid(object: &TFJobObject, problem: &str, now: Time) -> Plan {
    let old = object.status();
    let mut status = old.clone();
    let message = cond::invalid_spec_message(problem);
    let mut events = Vec::new();
    if cond::set(
        &mut status,
        cond::FAILED,
        cond::REASON_INVALID_SPEC,
        &message,
        now.clone(),
    ) {
        events.push(PlannedEvent::warning(cond::REASON_INVALID_SPEC, message));
        if status.completion_time.is_none() {
            status.completion_time = Some(now.clone());
        }
        status.observed_generation = object.metadata.generation;
        status.last_reconcile_time = Some(now);
    }
    finish(Vec::new(), events, old, status)
}

/// A claimed child: its replica type label (lower case) and index.
struct Claimed<'a, T> {
    object: &'a T,
    rtype: String,
    index: Option<i32>,
}

struct Planner<'a> {
    job: &'a TFJob,
    spec: &'a EffectiveSpec,
    config: &'a PlanConfig,
    now: Time,
    actions: Vec<ChildAction>,
    events: Vec<PlannedEvent>,
    status: JobStatus,
    /// Replica types with a pod restarted (ExitCode) in this pass.
    restarting: BTreeSet<ReplicaType>,
}

impl Planner<'_> {
    fn name(&self) -> &str {
        self.job.metadata.name.as_deref().unwrap_or_default()
    }
    fn namespace(&self) -> &str {
        self.job.metadata.namespace.as_deref().unwrap_or_default()
    }
    fn uid(&self) -> &str {
        self.job.metadata.uid.as_deref().unwrap_or_default()
    }

    fn run(&mut self, pods: &[&Pod], services: &[&Service]) {
        let uid = self.uid().to_string();
        let generation = self.job.metadata.generation.unwrap_or_default();
        for field in &self.spec.deprecated {
            let message = format!(
                "{} is deprecated and was used because {} is not set; move it there",
                field.path, field.replacement
            );
            self.events.push(
                PlannedEvent::warning("DeprecatedField", message)
                    .keyed(format!("{uid}/deprecated/{}/{generation}", field.path)),
            );
        }
        let pods = self.claim(pods, |p| &p.metadata, true);
        let services = self.claim(services, |s| &s.metadata, false);

        let name = self.name().to_string();
        if !self
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == cond::CREATED)
        {
            let message = cond::created_message(&name);
            cond::set(
                &mut self.status,
                cond::CREATED,
                cond::REASON_CREATED,
                &message,
                self.now.clone(),
            );
        }
        self.status.observed_generation = self.job.metadata.generation;

        if cond::is_finished(&self.status) {
            self.finished(&pods, &services);
            return;
        }
        let types: Vec<ReplicaType> = self.spec.replicas.keys().cloned().collect();
        let mut statuses = BTreeMap::new();
        let mut worker0_completed = !self.spec.replicas.contains_key(&ReplicaType::Worker);
        for rtype in &types {
            let (replica_status, worker0) = self.reconcile_pods(rtype, &pods);
            if *rtype == ReplicaType::Worker {
                worker0_completed = worker0;
            }
            statuses.insert(rtype.clone(), replica_status);
            self.reconcile_services(rtype, &services);
        }
        self.status.replica_statuses = statuses
            .iter()
            .map(|(rtype, status)| (rtype.canonical().to_string(), status.clone()))
            .collect();
        self.update_job_status(&statuses, worker0_completed);
    }

    /// Keeps children controlled by this job (releasing those whose labels
    /// no longer match) and adopts orphans whose labels match.
    fn claim<'p, T>(
        &mut self,
        objects: &[&'p T],
        meta: impl Fn(&T) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
        is_pod: bool,
    ) -> Vec<Claimed<'p, T>> {
        let uid = self.uid().to_string();
        let name = self.name().to_string();
        let mut claimed = Vec::new();
        for &object in objects {
            let metadata = meta(object);
            let labels = metadata.labels.clone().unwrap_or_default();
            let matches = names::matches_job(&labels, &name)
                && metadata.namespace.as_deref() == self.job.metadata.namespace.as_deref();
            let owners = metadata.owner_references.clone().unwrap_or_default();
            let controller = names::controller_of(metadata.owner_references.as_ref());
            let child_name = metadata.name.clone().unwrap_or_default();
            match controller {
                Some(owner) if owner.uid == uid => {
                    if !matches {
                        let owners = owners.into_iter().filter(|o| o.uid != uid).collect();
                        self.actions
                            .push(set_owners(is_pod, child_name, metadata, owners));
                        continue;
                    }
                }
                Some(_) => continue,
                None => {
                    if !matches {
                        continue;
                    }
                    let mut owners = owners;
                    owners.push(names::owner_reference(self.job));
                    self.actions
                        .push(set_owners(is_pod, child_name, metadata, owners));
                }
            }
            claimed.push(Claimed {
                object,
                rtype: names::replica_type_of(&labels)
                    .unwrap_or_default()
                    .to_ascii_lowercase(),
                index: names::replica_index_of(&labels),
            });
        }
        claimed
    }

    /// Finished job: delete per cleanPodPolicy, fold active into succeeded.
    fn finished(&mut self, pods: &[Claimed<'_, Pod>], services: &[Claimed<'_, Service>]) {
        for pod in pods {
            let phase = pod
                .object
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or("Pending");
            let delete = match self.spec.clean_pod_policy {
                CleanPodPolicy::All => true,
                CleanPodPolicy::Running => phase == "Running" || phase == "Pending",
                CleanPodPolicy::None => false,
            };
            if !delete || pod.object.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = pod.object.metadata.name.clone().unwrap_or_default();
            self.actions.push(ChildAction::DeletePod {
                name: name.clone(),
                uid: pod.object.metadata.uid.clone(),
            });
            if let Some(service) = services
                .iter()
                .find(|s| s.object.metadata.name.as_deref() == Some(name.as_str()))
            {
                self.actions.push(ChildAction::DeleteService {
                    name,
                    uid: service.object.metadata.uid.clone(),
                });
            }
        }
        if cond::has_true(&self.status, cond::SUCCEEDED) {
            for status in self.status.replica_statuses.values_mut() {
                status.succeeded += status.active;
                status.active = 0;
            }
        }
    }

    /// Report 2.10 for one replica type: create missing pods, delete pods
    /// beyond `replicas`, restart retryable ExitCode failures, count.
    /// Returns the counts and whether worker 0 completed (for Worker).
    fn reconcile_pods(
        &mut self,
        rtype: &ReplicaType,
        pods: &[Claimed<'_, Pod>],
    ) -> (ReplicaStatus, bool) {
        let Some(replica) = self.spec.replicas.get(rtype) else {
            return (ReplicaStatus::default(), false);
        };
        let lower = rtype.lower();
        let mine: Vec<&Claimed<'_, Pod>> = pods.iter().filter(|p| p.rtype == lower).collect();
        let highest = mine
            .iter()
            .filter_map(|p| p.index)
            .max()
            .map_or(0, |i| i + 1);
        let slots = replica.replicas.max(highest);
        let (selector, label_selector) = names::replica_selector(self.name(), rtype);
        let mut counts = ReplicaStatus {
            selector: Some(selector),
            label_selector: Some(label_selector),
            ..ReplicaStatus::default()
        };
        let mut worker0_completed = false;
        for index in 0..slots {
            let in_slot: Vec<&Pod> = mine
                .iter()
                .filter(|p| p.index == Some(index))
                .map(|p| p.object)
                .collect();
            let Some(pod) = in_slot.first().copied() else {
                if index < replica.replicas {
                    self.create_pod(rtype, index);
                }
                continue;
            };
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let deleting = pod.metadata.deletion_timestamp.is_some();
            if index >= replica.replicas && !deleting {
                self.actions.push(ChildAction::DeletePod {
                    name: pod_name.clone(),
                    uid: pod.metadata.uid.clone(),
                });
            }
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .unwrap_or_default();
            let (terminated, exit_code) = tensorflow_exit(pod);
            if let Some(restarts) = terminated {
                let message = format!(
                    "Pod: {}.{} exited with code {exit_code}",
                    self.namespace(),
                    pod_name
                );
                let key = format!(
                    "{}/exit/{}/{restarts}",
                    self.uid(),
                    pod.metadata.uid.as_deref().unwrap_or(&pod_name)
                );
                self.events
                    .push(PlannedEvent::normal("ExitedWithCode", message).keyed(key));
            }
            if *rtype == ReplicaType::Worker
                && index == 0
                && phase == "Succeeded"
                && terminated.is_some()
                && exit_code == 0
            {
                worker0_completed = true;
            }
            if replica.restart_policy == RestartPolicy::ExitCode
                && phase == "Failed"
                && is_retryable_exit_code(exit_code)
            {
                // The pod goes and comes back under the same name on a
                // later pass; it is neither active nor failed meanwhile.
                if !deleting {
                    self.actions.push(ChildAction::DeletePod {
                        name: pod_name,
                        uid: pod.metadata.uid.clone(),
                    });
                }
                self.restarting.insert(rtype.clone());
                continue;
            }
            match phase {
                "Running" => counts.active += 1,
                "Succeeded" => counts.succeeded += 1,
                "Failed" => counts.failed += 1,
                _ => {}
            }
        }
        (counts, worker0_completed)
    }

    fn create_pod(&mut self, rtype: &ReplicaType, index: i32) {
        let (pod, template_restart_policy) = children::build_pod(
            self.job,
            self.spec,
            rtype,
            index,
            self.config.cluster_domain.as_deref(),
        );
        if template_restart_policy {
            let key = format!("{}/template-restart-policy/{rtype}", self.uid());
            self.events.push(
                PlannedEvent::warning(
                    "SettedPodTemplateRestartPolicy",
                    "Restart policy in pod template will be overwritten by restart policy in replica spec"
                        .to_string(),
                )
                .keyed(key),
            );
        }
        self.actions.push(ChildAction::CreatePod(Box::new(pod)));
    }

    /// Report 2.9: one Service per index below `replicas`, none above.
    fn reconcile_services(&mut self, rtype: &ReplicaType, services: &[Claimed<'_, Service>]) {
        let Some(replica) = self.spec.replicas.get(rtype) else {
            return;
        };
        let lower = rtype.lower();
        let mine: Vec<&Claimed<'_, Service>> =
            services.iter().filter(|s| s.rtype == lower).collect();
        for index in 0..replica.replicas {
            if !mine.iter().any(|s| s.index == Some(index)) {
                let service = children::build_service(self.job, self.spec, rtype, index);
                self.actions
                    .push(ChildAction::CreateService(Box::new(service)));
            }
        }
        for service in mine {
            if service.index.is_some_and(|i| i >= replica.replicas) {
                self.actions.push(ChildAction::DeleteService {
                    name: service.object.metadata.name.clone().unwrap_or_default(),
                    uid: service.object.metadata.uid.clone(),
                });
            }
        }
    }

    /// Report 2.11: Running / Succeeded / Failed from the counts.
    fn update_job_status(
        &mut self,
        statuses: &BTreeMap<ReplicaType, ReplicaStatus>,
        worker0_completed: bool,
    ) {
        if self.status.start_time.is_none() {
            self.status.start_time = Some(self.now.clone());
        }
        let name = self.name().to_string();
        let namespace = self.namespace().to_string();
        let has_chief = self.spec.has_chief();
        for (rtype, counts) in statuses {
            if !rtype.is_known() {
                continue;
            }
            let replicas = self.spec.replicas.get(rtype).map_or(0, |r| r.replicas);
            let expected = replicas - counts.succeeded;
            let running = counts.active;
            if has_chief {
                if rtype.is_chief() {
                    if running > 0 {
                        self.running(&namespace, &name);
                    }
                    if expected == 0 {
                        self.succeeded(&namespace, &name);
                    }
                }
            } else if *rtype == ReplicaType::Worker {
                if expected == 0
                    || (worker0_completed && self.spec.success_policy != SuccessPolicy::AllWorkers)
                {
                    self.succeeded(&namespace, &name);
                } else if running > 0 {
                    self.running(&namespace, &name);
                }
            }
            if counts.failed > 0 {
                let message =
                    cond::failed_message(&namespace, &name, counts.failed, rtype.canonical());
                self.transition(
                    cond::FAILED,
                    cond::REASON_FAILED,
                    message,
                    EventType::Normal,
                );
            }
        }
        // Like training-operator, a restart in this pass stays visible even
        // if another replica reported Running earlier in the pass.
        let restarting: Vec<ReplicaType> = self.restarting.iter().cloned().collect();
        if !cond::is_finished(&self.status) {
            for rtype in restarting {
                let message = cond::restarting_message(&name, rtype.canonical());
                self.transition(
                    cond::RESTARTING,
                    cond::REASON_RESTARTING,
                    message,
                    EventType::Warning,
                );
            }
        }
    }

    fn running(&mut self, namespace: &str, name: &str) {
        if self.restarting.is_empty() {
            let message = cond::running_message(namespace, name);
            cond::set(
                &mut self.status,
                cond::RUNNING,
                cond::REASON_RUNNING,
                &message,
                self.now.clone(),
            );
        }
    }

    fn succeeded(&mut self, namespace: &str, name: &str) {
        let message = cond::succeeded_message(namespace, name);
        self.transition(
            cond::SUCCEEDED,
            cond::REASON_SUCCEEDED,
            message,
            EventType::Normal,
        );
    }

    /// Sets a condition; on an actual transition emits its event and, for
    /// terminal conditions, the completion time.
    fn transition(&mut self, type_: &str, reason: &str, message: String, event: EventType) {
        if !cond::set(&mut self.status, type_, reason, &message, self.now.clone()) {
            return;
        }
        if (type_ == cond::SUCCEEDED || type_ == cond::FAILED)
            && self.status.completion_time.is_none()
        {
            self.status.completion_time = Some(self.now.clone());
        }
        self.events.push(PlannedEvent {
            type_: event,
            reason: reason.to_string(),
            message,
            dedup_key: None,
        });
    }
}

fn set_owners(
    is_pod: bool,
    name: String,
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    owners: Vec<OwnerReference>,
) -> ChildAction {
    let uid = metadata.uid.clone();
    if is_pod {
        ChildAction::SetPodOwners { name, uid, owners }
    } else {
        ChildAction::SetServiceOwners { name, uid, owners }
    }
}

/// The tensorflow container's termination: `(Some(restart count), code)`
/// when it is terminated, else `(None, NO_EXIT_CODE)`.
fn tensorflow_exit(pod: &Pod) -> (Option<i32>, i32) {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    for status in statuses.into_iter().flatten() {
        if status.name != CONTAINER_NAME {
            continue;
        }
        if let Some(terminated) = status.state.as_ref().and_then(|s| s.terminated.as_ref()) {
            return (Some(status.restart_count), terminated.exit_code);
        }
    }
    (None, NO_EXIT_CODE)
}

#[cfg(test)]
mod tests;
