//! The pure planner: from a snapshot (the job, the pods and Services that
//! may be its children, the time) to the actions to take and the status the
//! job should have. No I/O, no clock, no randomness: every input is a
//! parameter, so upstream's behaviour, one sentence per test, is plain unit
//! tests.
//!
//! Actions are idempotent by construction: children have deterministic
//! names, so re-running a plan on a stale snapshot ends in `AlreadyExists`
//! or `NotFound`, which the reconciler treats as success.

pub mod child_events;
pub mod children;
pub mod conditions;
pub mod deletions;
pub mod failures;
pub mod gang;
pub mod indexes;
pub mod names;
pub mod tf_config;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

use crate::api::defaults::{self, EffectiveSpec, SuccessPolicy};
use crate::api::validate::validate;
use crate::api::{
    BackoffStatus, CONTAINER_NAME, CleanPodPolicy, JobStatus, MANAGED_BY_OPERATOR, ReplicaStatus,
    ReplicaType, RestartPolicy, TFJob, TFJobObject,
};
use conditions as cond;
use failures::{Backoff, ExitCodeSet, FailedPod};

/// Operator-wide settings the planner needs.
#[derive(Clone, Debug)]
pub struct PlanConfig {
    /// `CUSTOM_CLUSTER_DOMAIN`: appended to `TF_CONFIG` addresses.
    pub cluster_domain: Option<String>,
    /// `cleanPodPolicy` of jobs that set none. `None`, as training-operator
    /// v1.7+ defaults it: pods of workers still running when the job ends
    /// keep running, and with them the logs users read afterwards
    /// (tf-operator's `Running` is one flag away).
    pub default_clean_pod_policy: CleanPodPolicy,
    /// Exit codes an `ExitCode` replica retries (default 128 and above).
    pub retryable_exit_codes: ExitCodeSet,
    /// Pacing of pod re-creation after counted failures.
    pub backoff: Backoff,
    /// Gang scheduling with PodGroups (Volcano or scheduler-plugins);
    /// None: off.
    pub gang: Option<gang::GangConfig>,
}

impl Default for PlanConfig {
    fn default() -> Self {
        Self {
            cluster_domain: None,
            default_clean_pod_policy: CleanPodPolicy::None,
            retryable_exit_codes: ExitCodeSet::default(),
            backoff: Backoff::default(),
            gang: None,
        }
    }
}

/// Exit code reported when the tensorflow container has no terminated
/// state (upstream's sentinel 0xbeef).
pub const NO_EXIT_CODE: i32 = 0xbeef;

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
    /// Several deletes of one kind and replica type as one
    /// DeleteCollection (see [`deletions`]): `selector` matches exactly
    /// the children `names` in the snapshot the plan was made from.
    DeleteChildren {
        kind: deletions::ChildKind,
        selector: String,
        names: Vec<String>,
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
    /// Gang scheduling: the job's PodGroup, before any pod.
    CreatePodGroup(Box<serde_json::Value>),
    /// A merge patch of the PodGroup's `spec` (the job changed), only for
    /// the group of this UID.
    UpdatePodGroup {
        name: String,
        uid: Option<String>,
        spec: Box<serde_json::Value>,
    },
    DeletePodGroup {
        name: String,
        uid: Option<String>,
    },
    /// `ttlSecondsAfterFinished` expired: delete the job (background
    /// propagation; the garbage collector takes the children), only the
    /// job of this UID.
    DeleteJob {
        name: String,
        uid: Option<String>,
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
    /// Whether the jobs_* metrics count this Event's reason: false for a
    /// second Event about a transition already counted (the extra note of
    /// an ExitCode failure), so each job is counted once.
    pub counted: bool,
    /// For an Event that may be listed with others of its reason in one
    /// Event (`ExitedWithCode`): how it reads in the list.
    pub listed_as: Option<String>,
}

impl PlannedEvent {
    fn normal(reason: &str, message: String) -> Self {
        Self {
            type_: EventType::Normal,
            reason: reason.to_string(),
            message,
            dedup_key: None,
            counted: true,
            listed_as: None,
        }
    }
    fn warning(reason: &str, message: String) -> Self {
        Self {
            type_: EventType::Warning,
            reason: reason.to_string(),
            message,
            dedup_key: None,
            counted: true,
            listed_as: None,
        }
    }
    fn keyed(mut self, key: String) -> Self {
        self.dedup_key = Some(key);
        self
    }
    fn listed_as(mut self, item: String) -> Self {
        self.listed_as = Some(item);
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
    /// When to look at the job again with no change to wake it: the
    /// earliest of the deadline, the TTL expiry and the end of the
    /// re-creation backoff. `None`: only a change wakes it.
    pub requeue_after: Option<Duration>,
}

impl Plan {
    fn unchanged(status: JobStatus) -> Self {
        Plan {
            actions: Vec::new(),
            events: Vec::new(),
            status,
            status_changed: false,
            requeue_after: None,
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
    plan_with_gang(
        object,
        pods,
        services,
        &gang::GangSnapshot::default(),
        now,
        config,
    )
}

/// [`plan`] with what gang scheduling reads: the job's PodGroup as
/// observed and the cluster's PriorityClasses (ignored when gang
/// scheduling is off).
pub fn plan_with_gang(
    object: &TFJobObject,
    pods: &[&Pod],
    services: &[&Service],
    gang: &gang::GangSnapshot,
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
    if is_managed_elsewhere(&job) {
        // Another controller (e.g. MultiKueue) owns it: no child, no status.
        return Plan::unchanged(object.status());
    }
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
        wake_at: None,
        pod_group: gang.pod_group.as_ref(),
        priority_classes: &gang.priority_classes,
    };
    planner.run(pods, services);
    let old = job.status.clone().unwrap_or_default();
    let requeue_after = planner.requeue_after();
    let mut plan = finish(planner.actions, planner.events, old, planner.status);
    plan.requeue_after = requeue_after;
    plan
}

/// `runPolicy.managedBy` names a controller other than this operator.
fn is_managed_elsewhere(job: &TFJob) -> bool {
    job.spec
        .run_policy
        .as_ref()
        .and_then(|run| run.managed_by.as_deref())
        .is_some_and(|manager| !manager.is_empty() && manager != MANAGED_BY_OPERATOR)
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
        requeue_after: None,
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
    /// The earliest instant something is due without a change.
    wake_at: Option<jiff::Timestamp>,
    pod_group: Option<&'a gang::ObservedPodGroup>,
    priority_classes: &'a BTreeMap<String, i32>,
}

/// What one replica type's pods say, before anything is decided.
#[derive(Default)]
struct Observed<'p> {
    /// Counts of this pass (succeeded from the remembered indices).
    counts: ReplicaStatus,
    /// Indices that succeeded, now or in an earlier pass.
    succeeded: BTreeSet<i32>,
    /// Slots below `replicas` with no pod and no success: to create.
    missing: Vec<i32>,
    /// Failed pods to delete so they are re-created (retries).
    retries: Vec<&'p Pod>,
    /// Whether a pod of this type is being retried (for Restarting).
    restarting: bool,
    /// Whether a pod failed for good under `restartPolicy: ExitCode` (a
    /// permanent exit code), which upstream reports in its own words.
    failed_by_exit_code: bool,
    /// Pods above `replicas` (scale-down).
    surplus: Vec<&'p Pod>,
}

/// The one decision of a pass, taken after every pod has been observed.
enum Verdict {
    Failed {
        reason: &'static str,
        message: String,
        /// A second Event's note: a replica that failed under
        /// `restartPolicy: ExitCode` gets training-operator's "is failing"
        /// condition and Event, then also its "has failed" Event.
        also_noted: Option<String>,
    },
    Succeeded,
    /// Neither: create, restart, report Running or Restarting.
    Going,
}

fn phase_of(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn add_duration(t: &Time, seconds: i64) -> jiff::Timestamp {
    t.0.checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(jiff::Timestamp::MAX)
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

    /// Asks to be woken at `at` (the earliest such request wins).
    fn wake_at(&mut self, at: jiff::Timestamp) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }

    fn requeue_after(&self) -> Option<Duration> {
        let at = self.wake_at?;
        let wait = at.duration_since(self.now.0);
        // Due already: look again at once (a zero delay), not never.
        Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
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
        if self.spec.suspend {
            self.suspend(&pods, &services);
            return;
        }
        self.resume_if_suspended();
        if self.status.start_time.is_none() {
            self.status.start_time = Some(self.now.clone());
        }

        let types: Vec<ReplicaType> = self.spec.replicas.keys().cloned().collect();
        let mut observed: BTreeMap<ReplicaType, Observed<'_>> = BTreeMap::new();
        for rtype in &types {
            let seen = self.observe(rtype, &pods);
            observed.insert(rtype.clone(), seen);
        }
        self.count_failures(&pods);
        self.status.replica_statuses = observed
            .iter()
            .map(|(rtype, seen)| (rtype.canonical().to_string(), seen.counts.clone()))
            .collect();

        match self.decide(&observed) {
            Verdict::Failed {
                reason,
                message,
                also_noted,
            } => {
                let changed = self.transition(cond::FAILED, reason, message, EventType::Normal);
                if let (true, Some(note)) = (changed, also_noted) {
                    self.events.push(PlannedEvent {
                        type_: EventType::Normal,
                        reason: reason.to_string(),
                        message: note,
                        dedup_key: None,
                        counted: false,
                        listed_as: None,
                    });
                }
                self.finished(&pods, &services);
            }
            Verdict::Succeeded => {
                let message = cond::succeeded_message(self.namespace(), &name);
                self.transition(
                    cond::SUCCEEDED,
                    cond::REASON_SUCCEEDED,
                    message,
                    EventType::Normal,
                );
                self.finished(&pods, &services);
            }
            Verdict::Going => {
                self.act(&observed);
                for rtype in &types {
                    self.reconcile_services(rtype, &services);
                }
                self.report_progress(&observed);
            }
        }
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

    /// Finished job: delete per cleanPodPolicy (and the Services of the
    /// pods it deletes or that are gone), fold active into succeeded,
    /// apply the TTL.
    fn finished(&mut self, pods: &[Claimed<'_, Pod>], services: &[Claimed<'_, Service>]) {
        let policy = self.spec.clean_pod_policy;
        let mut kept_pods: BTreeSet<String> = BTreeSet::new();
        for pod in pods {
            let name = pod.object.metadata.name.clone().unwrap_or_default();
            let phase = phase_of(pod.object);
            let delete = match policy {
                CleanPodPolicy::All => true,
                CleanPodPolicy::Running => matches!(phase, "Running" | "Pending" | ""),
                CleanPodPolicy::None => false,
            };
            if !delete {
                kept_pods.insert(name);
                continue;
            }
            if pod.object.metadata.deletion_timestamp.is_none() {
                self.actions.push(ChildAction::DeletePod {
                    name,
                    uid: pod.object.metadata.uid.clone(),
                });
            }
        }
        // By label, not only by pod name: a Service whose pod vanished
        // earlier goes too (upstream left those behind, #1191).
        if policy != CleanPodPolicy::None {
            for service in services {
                let name = service.object.metadata.name.clone().unwrap_or_default();
                if !kept_pods.contains(&name) {
                    self.actions.push(ChildAction::DeleteService {
                        name,
                        uid: service.object.metadata.uid.clone(),
                    });
                }
            }
        }
        if cond::has_true(&self.status, cond::SUCCEEDED) {
            for status in self.status.replica_statuses.values_mut() {
                status.succeeded += status.active;
                status.active = 0;
            }
        }
        if self.delete_pod_group() {
            // training-operator's note before it deletes a finished job's
            // group; it repeats it on every pass of the finished job, ours
            // once, while the group is still there to delete.
            self.events.push(PlannedEvent::normal(
                "JobTerminated",
                "Job has been terminated. Deleting PodGroup".to_string(),
            ));
        }
        self.ttl();
    }

    /// A finished or suspended job holds no gang reservation. Whether
    /// there was a group to delete.
    fn delete_pod_group(&mut self) -> bool {
        if let (Some(_), Some(group)) = (&self.config.gang, self.pod_group) {
            self.actions.push(ChildAction::DeletePodGroup {
                name: self.name().to_string(),
                uid: group.uid.clone(),
            });
            true
        } else {
            false
        }
    }

    /// `ttlSecondsAfterFinished`: delete the job once it expired, else be
    /// woken exactly then (upstream re-queued in a hot loop, #965).
    fn ttl(&mut self) {
        let (Some(ttl), Some(completed)) = (
            self.spec.ttl_seconds_after_finished,
            self.status.completion_time.clone(),
        ) else {
            return;
        };
        let expires = add_duration(&completed, i64::from(ttl.max(0)));
        if self.now.0 >= expires {
            self.actions.push(ChildAction::DeleteJob {
                name: self.name().to_string(),
                uid: self.job.metadata.uid.clone(),
            });
        } else {
            self.wake_at(expires);
        }
    }

    /// `runPolicy.suspend`: every pod and Service goes whatever the
    /// cleanPodPolicy, nothing is created, the deadline clock stops.
    fn suspend(&mut self, pods: &[Claimed<'_, Pod>], services: &[Claimed<'_, Service>]) {
        for pod in pods {
            if pod.object.metadata.deletion_timestamp.is_none() {
                self.actions.push(ChildAction::DeletePod {
                    name: pod.object.metadata.name.clone().unwrap_or_default(),
                    uid: pod.object.metadata.uid.clone(),
                });
            }
        }
        for service in services {
            self.actions.push(ChildAction::DeleteService {
                name: service.object.metadata.name.clone().unwrap_or_default(),
                uid: service.object.metadata.uid.clone(),
            });
        }
        for status in self.status.replica_statuses.values_mut() {
            status.active = 0;
        }
        self.delete_pod_group();
        let message = cond::suspended_message(self.name());
        if cond::has_true(&self.status, cond::RUNNING) {
            cond::set_with_status(
                &mut self.status,
                cond::RUNNING,
                cond::FALSE,
                cond::REASON_SUSPENDED,
                &message,
                self.now.clone(),
            );
        }
        self.transition(
            cond::SUSPENDED,
            cond::REASON_SUSPENDED,
            message,
            EventType::Normal,
        );
    }

    /// Resuming restarts the deadline clock (startTime = now), as
    /// training-operator does.
    fn resume_if_suspended(&mut self) {
        if !cond::has_true(&self.status, cond::SUSPENDED) {
            return;
        }
        let message = cond::resumed_message(self.name());
        if cond::set_with_status(
            &mut self.status,
            cond::SUSPENDED,
            cond::FALSE,
            cond::REASON_RESUMED,
            &message,
            self.now.clone(),
        ) {
            self.events
                .push(PlannedEvent::normal(cond::REASON_RESUMED, message));
        }
        self.status.start_time = Some(self.now.clone());
    }

    /// One replica type, observing only: which slots lack a pod, which pods are
    /// retried, succeeded, failed, surplus.
    fn observe<'p>(&mut self, rtype: &ReplicaType, pods: &[Claimed<'p, Pod>]) -> Observed<'p> {
        let Some(replica) = self.spec.replicas.get(rtype) else {
            return Observed::default();
        };
        let lower = rtype.lower();
        let mine: Vec<&Claimed<'p, Pod>> = pods.iter().filter(|p| p.rtype == lower).collect();
        let highest = mine
            .iter()
            .filter_map(|p| p.index)
            .max()
            .map_or(0, |i| i + 1);
        let slots = replica.replicas.max(highest);
        let (selector, label_selector) = names::replica_selector(self.name(), rtype);
        let mut seen = Observed {
            counts: ReplicaStatus {
                selector: Some(selector),
                label_selector: Some(label_selector),
                ..ReplicaStatus::default()
            },
            succeeded: self
                .status
                .replica_statuses
                .get(rtype.canonical())
                .and_then(|s| s.succeeded_indexes.as_deref())
                .map(indexes::parse)
                .unwrap_or_default(),
            ..Observed::default()
        };
        for index in 0..slots {
            let Some(pod) = mine
                .iter()
                .find(|p| p.index == Some(index))
                .map(|p| p.object)
            else {
                if index < replica.replicas && !seen.succeeded.contains(&index) {
                    seen.missing.push(index);
                }
                continue;
            };
            let pod_name = pod.metadata.name.clone().unwrap_or_default();
            let deleting = pod.metadata.deletion_timestamp.is_some();
            if index >= replica.replicas && !deleting {
                seen.surplus.push(pod);
            }
            let phase = phase_of(pod);
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
                let listed = format!("{}.{pod_name} ({exit_code})", self.namespace());
                self.events.push(
                    PlannedEvent::normal(child_events::EXITED_WITH_CODE, message)
                        .keyed(key)
                        .listed_as(listed),
                );
            }
            match phase {
                "Running" => seen.counts.active += 1,
                "Succeeded" if index < replica.replicas => {
                    seen.succeeded.insert(index);
                }
                "Failed" => match failures::failed_pod(
                    pod,
                    replica.restart_policy,
                    exit_code,
                    &self.config.retryable_exit_codes,
                ) {
                    // The pod goes and comes back under the same name on a
                    // later pass; it is neither active nor failed meanwhile.
                    FailedPod::Retry { .. } => {
                        seen.restarting = true;
                        if !deleting && index < replica.replicas {
                            seen.retries.push(pod);
                        }
                    }
                    FailedPod::Permanent => {
                        seen.counts.failed += 1;
                        seen.failed_by_exit_code |=
                            replica.restart_policy == RestartPolicy::ExitCode;
                    }
                },
                _ => {}
            }
        }
        seen.succeeded.retain(|&i| i < replica.replicas);
        seen.counts.succeeded = i32::try_from(seen.succeeded.len()).unwrap_or(i32::MAX);
        seen.counts.succeeded_indexes = indexes::format(&seen.succeeded);
        seen
    }

    /// Counts failures towards `backoffLimit`: each live pod contributes
    /// its container restarts plus one if it failed for its own reasons;
    /// what a pod UID contributed before is not counted again, and a pod
    /// that is gone keeps its failures counted.
    fn count_failures(&mut self, pods: &[Claimed<'_, Pod>]) {
        let mut backoff = self.status.backoff.clone().unwrap_or_default();
        let mut live = BTreeMap::new();
        let mut counted_now = false;
        for pod in pods {
            let Some(uid) = pod.object.metadata.uid.clone() else {
                continue;
            };
            let rtype = self
                .spec
                .replicas
                .keys()
                .find(|t| t.lower() == pod.rtype)
                .cloned();
            let Some(replica) = rtype.and_then(|t| self.spec.replicas.get(&t)) else {
                continue;
            };
            let mut contribution = failures::container_restarts(pod.object);
            if phase_of(pod.object) == "Failed" {
                let (_, exit_code) = tensorflow_exit(pod.object);
                let outcome = failures::failed_pod(
                    pod.object,
                    replica.restart_policy,
                    exit_code,
                    &self.config.retryable_exit_codes,
                );
                if outcome != (FailedPod::Retry { counted: false }) {
                    contribution += 1;
                }
            }
            let before = backoff.pods.get(&uid).copied().unwrap_or(0);
            if contribution > before {
                backoff.failures = backoff.failures.saturating_add(contribution - before);
                counted_now = true;
            }
            if contribution.max(before) > 0 {
                live.insert(uid, contribution.max(before));
            }
        }
        backoff.pods = live;
        if counted_now {
            backoff.last_failure_time = Some(self.now.clone());
        }
        self.status.backoff = (backoff != BackoffStatus::default()).then_some(backoff);
    }

    /// Success and failure decided in one pass, in this precedence: the
    /// deadline, the backoff limit, a replica that failed for good, then
    /// success. Failure wins unless the job already succeeded (upstream
    /// appended both conditions).
    fn decide(&mut self, observed: &BTreeMap<ReplicaType, Observed<'_>>) -> Verdict {
        let name = self.name().to_string();
        let namespace = self.namespace().to_string();
        if let (Some(deadline), Some(start)) = (
            self.spec.active_deadline_seconds,
            self.status.start_time.clone(),
        ) {
            let due = add_duration(&start, deadline.max(0));
            if self.now.0 >= due {
                return Verdict::Failed {
                    reason: cond::REASON_FAILED,
                    message: cond::deadline_message(&name),
                    also_noted: None,
                };
            }
            self.wake_at(due);
        }
        if let Some(limit) = self.spec.backoff_limit {
            let failures = self.status.backoff.as_ref().map_or(0, |b| b.failures);
            if failures > limit.max(0) {
                return Verdict::Failed {
                    reason: cond::REASON_FAILED,
                    message: cond::backoff_limit_message(&name),
                    also_noted: None,
                };
            }
        }
        if let Some(timeout) = self.scheduling_timeout() {
            return timeout;
        }
        // A retry elsewhere never hides this (upstream's Restarting mask).
        if let Some((rtype, seen)) = observed
            .iter()
            .find(|(rtype, seen)| rtype.is_known() && seen.counts.failed > 0)
        {
            let failed =
                cond::failed_message(&namespace, &name, seen.counts.failed, rtype.canonical());
            let (message, also_noted) = if seen.failed_by_exit_code {
                (
                    cond::exit_code_failed_message(&name, rtype.canonical()),
                    Some(failed),
                )
            } else {
                (failed, None)
            };
            return Verdict::Failed {
                reason: cond::REASON_FAILED,
                message,
                also_noted,
            };
        }
        if self.is_successful(observed) {
            return Verdict::Succeeded;
        }
        Verdict::Going
    }

    /// `schedulingPolicy.scheduleTimeoutSeconds` with gang scheduling: a
    /// PodGroup not admitted that long after its creation fails the job (so a
    /// job whose gang can never be placed does not wait forever); until then
    /// the plan wakes at it.
    fn scheduling_timeout(&mut self) -> Option<Verdict> {
        let gang = self.config.gang.as_ref()?;
        // Coscheduling has the timeout itself: it is the scheduler's wait
        // at Permit, after which it releases the group and tries again.
        if gang.scheduler() != gang::GangScheduler::Volcano {
            return None;
        }
        let group = self.pod_group?;
        if group.is_admitted() {
            return None;
        }
        let seconds = self
            .job
            .spec
            .run_policy
            .as_ref()
            .and_then(|run| run.scheduling_policy.as_ref())
            .and_then(|policy| policy.schedule_timeout_seconds)?;
        let due = group
            .created?
            .checked_add(jiff::SignedDuration::from_secs(i64::from(seconds.max(0))))
            .unwrap_or(jiff::Timestamp::MAX);
        if self.now.0 >= due {
            return Some(Verdict::Failed {
                reason: cond::REASON_FAILED,
                message: cond::scheduling_timeout_message(self.name(), seconds),
                also_noted: None,
            });
        }
        self.wake_at(due);
        None
    }

    /// Upstream's success rule: the Chief (or Master) decides when there is
    /// one; otherwise every worker, or worker 0 unless `AllWorkers`. PS and
    /// Evaluator replicas never block success.
    fn is_successful(&self, observed: &BTreeMap<ReplicaType, Observed<'_>>) -> bool {
        let done = |rtype: &ReplicaType| {
            let replicas = self.spec.replicas.get(rtype).map_or(0, |r| r.replicas);
            observed
                .get(rtype)
                .is_some_and(|seen| seen.counts.succeeded >= replicas)
        };
        if self.spec.has_chief() {
            return observed.keys().filter(|t| t.is_chief()).any(done);
        }
        let Some(workers) = observed.get(&ReplicaType::Worker) else {
            return false;
        };
        let worker0_completed = workers.succeeded.contains(&0);
        done(&ReplicaType::Worker)
            || (worker0_completed && self.spec.success_policy != SuccessPolicy::AllWorkers)
    }

    /// A going job: retries deleted, surplus deleted, missing pods created
    /// once the re-creation backoff has passed.
    fn act(&mut self, observed: &BTreeMap<ReplicaType, Observed<'_>>) {
        for seen in observed.values() {
            for pod in seen.retries.iter().chain(seen.surplus.iter()) {
                self.actions.push(ChildAction::DeletePod {
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    uid: pod.metadata.uid.clone(),
                });
            }
        }
        if let Some(config) = self.config.gang.clone()
            && !self.sync_pod_group(config.scheduler())
        {
            return;
        }
        if observed.values().all(|seen| seen.missing.is_empty()) {
            return;
        }
        if let Some(backoff) = self.status.backoff.clone()
            && let Some(last) = backoff.last_failure_time.as_ref()
        {
            let delay = self.config.backoff.delay(backoff.failures);
            let ready_at = last
                .0
                .checked_add(jiff::SignedDuration::try_from(delay).unwrap_or_default())
                .unwrap_or(jiff::Timestamp::MAX);
            if self.now.0 < ready_at {
                self.wake_at(ready_at);
                return;
            }
        }
        for (rtype, seen) in observed {
            for &index in &seen.missing {
                self.create_pod(rtype, index);
            }
        }
    }

    /// The PodGroup first (created, or updated when the job changed), with
    /// a warning for each PriorityClass the job names that does not exist;
    /// true when the pods may be created.
    fn sync_pod_group(&mut self, scheduler: gang::GangScheduler) -> bool {
        let uid = self.uid().to_string();
        let generation = self.job.metadata.generation.unwrap_or_default();
        for (class, named_by) in
            gang::missing_priority_classes(self.job, self.spec, self.priority_classes)
        {
            let message = format!(
                "PriorityClass {class} named by {named_by} does not exist: it counts as priority 0 \
                 for the PodGroup's minResources, and the API server refuses pods naming it until it is created"
            );
            self.events.push(
                PlannedEvent::warning("PriorityClassNotFound", message)
                    .keyed(format!("{uid}/priority-class/{class}/{generation}")),
            );
        }
        let desired = gang::pod_group_spec(self.job, self.spec, scheduler, self.priority_classes);
        let Some(group) = self.pod_group else {
            let group = gang::pod_group(self.job, self.spec, scheduler, self.priority_classes);
            self.actions
                .push(ChildAction::CreatePodGroup(Box::new(group)));
            return false;
        };
        if let Some(spec) = gang::spec_update(&group.spec, &desired) {
            self.actions.push(ChildAction::UpdatePodGroup {
                name: self.name().to_string(),
                uid: group.uid.clone(),
                spec: Box::new(spec),
            });
        }
        group.allows_pods(scheduler)
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
        let mut pod = pod;
        if let Some(gang) = self.config.gang.clone() {
            self.join_gang(&mut pod, rtype, &gang);
        }
        self.actions.push(ChildAction::CreatePod(Box::new(pod)));
    }

    /// Marks a pod as a member of the job's gang: Volcano's annotations or
    /// coscheduling's label, and the gang scheduler's name unless the
    /// template names another scheduler, which is kept with a warning
    /// (training-operator's rule; tf-operator dropped the scheduler of
    /// every pod then).
    fn join_gang(&mut self, pod: &mut Pod, rtype: &ReplicaType, gang: &gang::GangConfig) {
        let name = self.name().to_string();
        match gang.scheduler() {
            gang::GangScheduler::Volcano => {
                let annotations = pod
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                annotations.insert(gang::GROUP_NAME_ANNOTATION.to_string(), name);
                annotations.insert(gang::TASK_SPEC_ANNOTATION.to_string(), rtype.lower());
            }
            gang::GangScheduler::SchedulerPlugins => {
                pod.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(gang::POD_GROUP_LABEL.to_string(), name);
            }
        }
        let Some(spec) = pod.spec.as_mut() else {
            return;
        };
        match spec.scheduler_name.as_deref() {
            None | Some("") => spec.scheduler_name = Some(gang.scheduler_name.clone()),
            Some(own) if own == gang.scheduler_name => {}
            Some(_) => {
                let key = format!("{}/template-scheduler-name/{rtype}", self.uid());
                // One per replica type, not one per pod of this pass.
                if self
                    .events
                    .iter()
                    .any(|e| e.dedup_key.as_ref() == Some(&key))
                {
                    return;
                }
                self.events.push(
                    PlannedEvent::warning(
                        "SettedPodTemplateSchedulerName",
                        "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten"
                            .to_string(),
                    )
                    .keyed(key),
                );
            }
        }
    }

    /// One Service per index below `replicas`, none above (as upstream).
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

    /// Restarting while a replica is being retried, else Running when the
    /// replica that decides success runs (the Chief or Master when there is
    /// one, else the workers, as in `is_successful`).
    fn report_progress(&mut self, observed: &BTreeMap<ReplicaType, Observed<'_>>) {
        let name = self.name().to_string();
        if let Some((rtype, _)) = observed.iter().find(|(_, seen)| seen.restarting) {
            let message = cond::restarting_message(&name, rtype.canonical());
            self.transition(
                cond::RESTARTING,
                cond::REASON_RESTARTING,
                message,
                EventType::Warning,
            );
            return;
        }
        let deciding_runs = if self.spec.has_chief() {
            observed
                .iter()
                .any(|(rtype, seen)| rtype.is_chief() && seen.counts.active > 0)
        } else {
            observed
                .get(&ReplicaType::Worker)
                .is_some_and(|seen| seen.counts.active > 0)
        };
        if deciding_runs {
            let message = cond::running_message(self.namespace(), &name);
            cond::set(
                &mut self.status,
                cond::RUNNING,
                cond::REASON_RUNNING,
                &message,
                self.now.clone(),
            );
        }
    }

    /// Sets a condition; on an actual transition emits its event and, for
    /// terminal conditions, the completion time.
    /// Sets a condition and plans its Event; whether it changed anything.
    fn transition(&mut self, type_: &str, reason: &str, message: String, event: EventType) -> bool {
        if !cond::set(&mut self.status, type_, reason, &message, self.now.clone()) {
            return false;
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
            counted: true,
            listed_as: None,
        });
        true
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
