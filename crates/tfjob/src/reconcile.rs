//! The reconciler: observe (caches), decide ([`crate::plan::plan`]), act.
//!
//! Acting is idempotent: creates of deterministic names that find the
//! child already there (`AlreadyExists`) and deletes that find it gone
//! (`NotFound`, or a UID precondition failing because a new pod of the
//! same name exists) count as success, so a restart or a stale cache never
//! duplicates or loses a child. Status goes through the status subresource
//! and only when the planner says it changed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use controller_kit::{Action, CachedStore, ReconcileFailure, Retry};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::runtime::events::EventType as KubeEventType;
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::api::{API_VERSION, JobStatus, KIND, TFJobObject};
use crate::events::EventQueue;
use crate::plan::child_events::{self, Change, Child, ChildChanges};
use crate::plan::{self, ChildAction, EventType, PlanConfig, PlannedEvent, conditions, names};
use crate::pod_groups::{self, PodGroupStore, PodGroupWrite};
use controller_kit::error::is_status;

/// Child writes of one pass in flight at once; bounded so one big job
/// does not flood the API server.
const CHILD_WRITES_IN_FLIGHT: usize = 16;

/// Index of pods and Services by the UID of their controlling TFJob.
pub const INDEX_OWNER: &str = "tfjob-owner";
/// Index of pods and Services by `{namespace}/{job-name label}`, to find
/// orphans to adopt.
pub const INDEX_JOB_LABEL: &str = "tfjob-name";

/// How long a pass that met a conflict waits before it runs again. The
/// job's or child's watch event usually queues it sooner; this only covers
/// a conflict on an object no event will bring.
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);

/// Why one pass failed. Each variant names what failed; the worker loop
/// counts it under [`ReconcileFailure::metric_label`] and retries it as
/// [`ReconcileFailure::retry`] says:
///
/// * a key that names no job (`invalid_key`) is never retried;
/// * a write the API server rejected as invalid (422 or 400, `invalid_spec`:
///   the job's pod or Service template cannot be created as written) waits
///   for the job to change, with its `FailedCreatePod`-style Warning Event
///   on the job. Upstream's operator retries these with backoff forever,
///   filling the log with the same refusal; an edit of the job queues it
///   again here;
/// * a conflict (`conflict`) runs again after [`CONFLICT_RETRY`];
/// * everything else (the API server unavailable, throttling, a timeout, a
///   refused quota) backs off through the queue's rate limiter, as upstream
///   does for every error, labelled by the call that failed (`create_pod`,
///   `patch_status`, ...).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("invalid tfjob key {0:?}: either namespace or name is missing")]
    InvalidKey(String),
    #[error(transparent)]
    PodGroup(#[from] pod_groups::PodGroupError),
    #[error("{call} {name}: {source}")]
    Api {
        call: ApiCall,
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// The API call of a failed write, by verb and resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiCall {
    CreatePod,
    DeletePod,
    ClaimPod,
    CreateService,
    DeleteService,
    ClaimService,
    DeleteJob,
    PatchJobStatus,
}

impl ApiCall {
    /// The metric label of a transient failure of this call.
    pub fn label(self) -> &'static str {
        match self {
            ApiCall::CreatePod => "create_pod",
            ApiCall::DeletePod => "delete_pod",
            ApiCall::ClaimPod => "patch_pod_owners",
            ApiCall::CreateService => "create_service",
            ApiCall::DeleteService => "delete_service",
            ApiCall::ClaimService => "patch_service_owners",
            ApiCall::DeleteJob => "delete_tfjob",
            ApiCall::PatchJobStatus => "patch_status",
        }
    }

    fn doing(self) -> &'static str {
        match self {
            ApiCall::CreatePod => "creating pod",
            ApiCall::DeletePod => "deleting pod",
            ApiCall::ClaimPod => "claiming pod",
            ApiCall::CreateService => "creating service",
            ApiCall::DeleteService => "deleting service",
            ApiCall::ClaimService => "claiming service",
            ApiCall::DeleteJob => "deleting tfjob",
            ApiCall::PatchJobStatus => "writing status of tfjob",
        }
    }
}

impl std::fmt::Display for ApiCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.doing())
    }
}

/// The API server's answer, when the failure is one.
fn answer_of(error: &ReconcileError) -> Option<&kube::Error> {
    match error {
        ReconcileError::InvalidKey(_) => None,
        ReconcileError::PodGroup(error) => Some(&error.source),
        ReconcileError::Api { source, .. } => Some(source),
    }
}

/// A write the server refused as invalid: retrying the same body fails the same way.
fn rejected(error: &kube::Error) -> bool {
    is_status(error, 422) || is_status(error, 400)
}

impl ReconcileFailure for ReconcileError {
    fn metric_label(&self) -> &'static str {
        match (self, answer_of(self)) {
            (ReconcileError::InvalidKey(_), _) => "invalid_key",
            (_, Some(answer)) if is_status(answer, 409) => "conflict",
            (_, Some(answer)) if rejected(answer) => "invalid_spec",
            (ReconcileError::PodGroup(_), _) => "podgroup_write",
            (ReconcileError::Api { call, .. }, _) => call.label(),
        }
    }

    fn retry(&self) -> Retry {
        match (self, answer_of(self)) {
            (ReconcileError::InvalidKey(_), _) => Retry::AwaitChange,
            (_, Some(answer)) if is_status(answer, 409) => Retry::After(CONFLICT_RETRY),
            (_, Some(answer)) if rejected(answer) => Retry::AwaitChange,
            _ => Retry::Backoff,
        }
    }
}

/// The status this process last wrote for a job, with the resourceVersion
/// the cache held when it did and the one the write produced. Until the
/// cache has seen the write, planning from it would redo the write and
/// repeat its events.
struct WrittenStatus {
    cached_resource_version: Option<String>,
    written_resource_version: Option<String>,
    status: JobStatus,
}

impl WrittenStatus {
    /// Whether a cached object at `cached` predates the write. Resource
    /// versions are opaque to clients, but every server in use (etcd,
    /// kube-sim) issues increasing integers; when they do not parse, only
    /// the exact version seen before the write counts as stale.
    fn is_newer_than(&self, cached: Option<&String>) -> bool {
        let number = |rv: Option<&String>| rv.and_then(|rv| rv.parse::<u64>().ok());
        match (
            number(cached),
            number(self.written_resource_version.as_ref()),
        ) {
            (Some(cached), Some(written)) => cached < written,
            _ => self.cached_resource_version.as_ref() == cached,
        }
    }
}

/// Shared state of the reconciler.
pub struct Context {
    pub client: kube::Client,
    pub jobs: CachedStore<TFJobObject>,
    pub pods: CachedStore<Pod>,
    pub services: CachedStore<Service>,
    /// The gang scheduler's PodGroups, when gang scheduling is on.
    pub pod_groups: Option<PodGroupStore>,
    /// PriorityClasses, when gang scheduling is on.
    pub priority_classes: Option<CachedStore<k8s_openapi::api::scheduling::v1::PriorityClass>>,
    pub config: PlanConfig,
    /// Events are queued here and written in the background.
    pub events: EventQueue,
    pub metrics: crate::metrics::Metrics,
    emitted: Mutex<HashSet<String>>,
    written: Mutex<HashMap<String, WrittenStatus>>,
    /// Job key → UIDs of children this operator deleted that the caches
    /// may still show alive (see `plan::deletions::without_requested`).
    deleted: Mutex<HashMap<String, HashSet<String>>>,
}

/// The caches the reconciler reads.
pub struct Stores {
    pub jobs: CachedStore<TFJobObject>,
    pub pods: CachedStore<Pod>,
    pub services: CachedStore<Service>,
    /// The gang scheduler's PodGroups, when gang scheduling is on.
    pub pod_groups: Option<PodGroupStore>,
    /// PriorityClasses, when gang scheduling is on.
    pub priority_classes: Option<CachedStore<k8s_openapi::api::scheduling::v1::PriorityClass>>,
}

impl Context {
    pub fn new(
        client: kube::Client,
        stores: Stores,
        config: PlanConfig,
        events: EventQueue,
        metrics: crate::metrics::Metrics,
    ) -> Self {
        Self {
            client,
            jobs: stores.jobs,
            pods: stores.pods,
            services: stores.services,
            pod_groups: stores.pod_groups,
            priority_classes: stores.priority_classes,
            config,
            events,
            metrics,
            emitted: Mutex::new(HashSet::new()),
            written: Mutex::new(HashMap::new()),
            deleted: Mutex::new(HashMap::new()),
        }
    }

    /// Drops what this process remembers of a deleted job.
    pub fn forget(&self, uid: &str) {
        self.written.lock().remove(uid);
        let prefix = format!("{uid}/");
        self.emitted.lock().retain(|key| !key.starts_with(&prefix));
    }
}

/// The index values of a child: its controlling TFJob's UID.
pub fn owner_index(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<String> {
    names::controller_of(meta.owner_references.as_ref())
        .filter(|owner| owner.kind == KIND && owner.api_version.starts_with("kubeflow.org/"))
        .map(|owner| vec![owner.uid.clone()])
        .unwrap_or_default()
}

/// The index values of a child: `{namespace}/{job name from its labels}`.
pub fn job_label_index(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<String> {
    let labels = meta.labels.as_ref();
    let job = labels.and_then(|l| {
        l.get(names::LABEL_JOB_NAME)
            .or_else(|| l.get("tf-job-name"))
    });
    match (meta.namespace.as_deref(), job) {
        (Some(namespace), Some(job)) => vec![format!("{namespace}/{job}")],
        _ => Vec::new(),
    }
}

/// The queue key of the job a child belongs to: its controller if that is
/// a TFJob, else the job its labels name (a candidate for adoption).
pub fn child_key(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    let namespace = meta.namespace.as_deref()?;
    match names::controller_of(meta.owner_references.as_ref()) {
        Some(owner) if owner.kind == KIND => Some(format!("{namespace}/{}", owner.name)),
        Some(_) => None,
        None => job_label_index(meta).into_iter().next(),
    }
}

/// One pass for the job `namespace/name`. It runs inside the worker
/// loop's `reconcile{controller, key, uid}` span, so its log lines carry
/// the job's key and, once read, its UID.
pub async fn reconcile(ctx: Arc<Context>, key: String) -> Result<Action, ReconcileError> {
    let started = std::time::Instant::now();
    let result = reconcile_job(&ctx, key).await;
    ctx.metrics.observe_reconcile(started.elapsed());
    result
}

async fn reconcile_job(ctx: &Context, key: String) -> Result<Action, ReconcileError> {
    let Some((namespace, name)) = key
        .split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
    else {
        return Err(ReconcileError::InvalidKey(key));
    };
    let Some(cached) = ctx.jobs.get_namespaced(namespace, name) else {
        ctx.deleted.lock().remove(&key);
        return Ok(Action::AwaitChange);
    };
    let mut object = (*cached).clone();
    let uid = object.metadata.uid.clone().unwrap_or_default();
    controller_kit::record_uid(&uid);
    {
        let mut written = ctx.written.lock();
        match written.get(&uid) {
            Some(w) if w.is_newer_than(object.metadata.resource_version.as_ref()) => {
                object.status = serde_json::to_value(&w.status).unwrap_or(Value::Null);
            }
            Some(_) => {
                written.remove(&uid);
            }
            None => {}
        }
    }
    let pods = candidates(&ctx.pods, &uid, &key, |p: &Pod| &p.metadata);
    let services = candidates(&ctx.services, &uid, &key, |s: &Service| &s.metadata);
    let pod_refs: Vec<&Pod> = pods.iter().map(Arc::as_ref).collect();
    let service_refs: Vec<&Service> = services.iter().map(Arc::as_ref).collect();
    let old_status = object.status();
    let now = jiff::Timestamp::now();
    let gang = pod_groups::snapshot(
        ctx.pod_groups.as_ref(),
        ctx.priority_classes.as_ref(),
        namespace,
        name,
        &uid,
    );
    let plan = plan::plan_with_gang(&object, &pod_refs, &service_refs, &gang, now, &ctx.config);

    // Status first: the failures it counts (by pod UID) are on record
    // before the pods that showed them are deleted, so neither a failed
    // delete nor an operator restart loses or repeats a count.
    if plan.status_changed {
        let written_resource_version =
            write_status(ctx, namespace, name, &old_status, &plan.status).await?;
        ctx.written.lock().insert(
            uid.clone(),
            WrittenStatus {
                cached_resource_version: cached.metadata.resource_version.clone(),
                written_resource_version,
                status: plan.status.clone(),
            },
        );
        record_transitions(ctx, namespace, &object, &old_status, &plan.status, now);
        let state = |status: &JobStatus| status.conditions.last().map(|c| c.type_.clone());
        if state(&old_status) != state(&plan.status) {
            let last = plan.status.conditions.last();
            tracing::info!(
                state = last.map_or("", |c| c.type_.as_str()),
                reason = last.and_then(|c| c.reason.as_deref()).unwrap_or_default(),
                "job state changed"
            );
        }
    }

    // The events of the transitions just written, then the child actions
    // (and their own events): a reader sees TFJobSucceeded before the
    // cleanup's SuccessfulDeletePod.
    let reference = job_reference(&object);
    let events = plan
        .events
        .into_iter()
        .filter(|event| first_time(ctx, event))
        .collect();
    for event in child_events::list_exits(events) {
        publish_planned(ctx, &reference, namespace, event);
    }
    // The actions of one pass touch distinct children (a retried pod is
    // deleted here and re-created by a later pass, once the cache shows it
    // gone), so they run side by side: a new job's 22 creates would
    // otherwise wait on each other's round trips.
    let pod_metas: Vec<_> = pods.iter().map(|pod| &pod.metadata).collect();
    let service_metas: Vec<_> = services.iter().map(|service| &service.metadata).collect();
    let requested = {
        let mut deleted = ctx.deleted.lock();
        let children: Vec<_> = pod_metas.iter().chain(&service_metas).copied().collect();
        let kept = deleted
            .get(&key)
            .map(|uids| plan::deletions::still_shown_alive(uids, &children))
            .unwrap_or_default();
        if kept.is_empty() {
            deleted.remove(&key);
        } else {
            deleted.insert(key.clone(), kept.clone());
        }
        kept
    };
    let actions = plan::deletions::without_requested(plan.actions, &requested);
    let actions = plan::deletions::batch_deletions(actions, name, &pod_metas, &service_metas);
    let changed = Mutex::new(ChildChanges::default());
    let failures: Vec<ReconcileError> = stream::iter(actions)
        .map(|action| execute(ctx, &key, namespace, &reference, &changed, action))
        .buffer_unordered(CHILD_WRITES_IN_FLIGHT)
        .filter_map(|result| async move { result.err() })
        .collect()
        .await;
    // One Event per reason for the whole pass, naming every child.
    for (reason, note) in changed.into_inner().events() {
        event(ctx, &reference, KubeEventType::Normal, &reason, note);
    }
    for error in &failures {
        tracing::warn!(%error, "child action failed");
    }
    let first_error = failures.into_iter().next();
    match (first_error, plan.requeue_after) {
        (Some(error), _) => Err(error),
        (None, Some(after)) => Ok(Action::RequeueAfter(after)),
        (None, None) => Ok(Action::AwaitChange),
    }
}

/// Metrics that follow status transitions: created (first Created
/// condition) and the time from creation to the first Running.
fn record_transitions(
    ctx: &Context,
    namespace: &str,
    object: &TFJobObject,
    old: &JobStatus,
    new: &JobStatus,
    now: jiff::Timestamp,
) {
    let has = |status: &JobStatus, type_: &str| status.conditions.iter().any(|c| c.type_ == type_);
    if has(new, conditions::CREATED) && !has(old, conditions::CREATED) {
        ctx.metrics.jobs_created.inc(namespace);
    }
    if has(new, conditions::RUNNING)
        && !has(old, conditions::RUNNING)
        && let Some(created) = object.metadata.creation_timestamp.as_ref()
    {
        let seconds = now.duration_since(created.0).as_secs_f64().max(0.0);
        ctx.metrics.time_to_running.observe(seconds);
    }
}

/// Children owned by `uid`, plus orphans whose labels name the job.
fn candidates<K: controller_kit::caches::CachedObject>(
    store: &CachedStore<K>,
    uid: &str,
    key: &str,
    meta: impl Fn(&K) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<Arc<K>> {
    let mut out = store.by_index(INDEX_OWNER, uid);
    out.extend(
        store
            .by_index(INDEX_JOB_LABEL, key)
            .into_iter()
            .filter(|o| names::controller_of(meta(o).owner_references.as_ref()).is_none()),
    );
    out
}

fn job_reference(object: &TFJobObject) -> ObjectReference {
    ObjectReference {
        api_version: Some(API_VERSION.to_string()),
        kind: Some(KIND.to_string()),
        name: object.metadata.name.clone(),
        namespace: object.metadata.namespace.clone(),
        uid: object.metadata.uid.clone(),
        resource_version: object.metadata.resource_version.clone(),
        ..ObjectReference::default()
    }
}

/// How one kind of child is named in events, messages and metrics.
struct ChildKind {
    /// In the pass's Events (`SuccessfulCreatePod`, "Created pods: …").
    child: Child,
    /// `Pod`, `Service`: in the Warning reasons (`FailedCreatePod`).
    title: &'static str,
    creating: ApiCall,
    deleting: ApiCall,
}

const POD: ChildKind = ChildKind {
    child: Child::Pod,
    title: "Pod",
    creating: ApiCall::CreatePod,
    deleting: ApiCall::DeletePod,
};
const SERVICE: ChildKind = ChildKind {
    child: Child::Service,
    title: "Service",
    creating: ApiCall::CreateService,
    deleting: ApiCall::DeleteService,
};

/// Delete parameters: a UID precondition (only the child the snapshot
/// saw) and the propagation.
fn delete_params(uid: Option<String>, propagation: Option<PropagationPolicy>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        propagation_policy: propagation,
        ..DeleteParams::default()
    }
}

/// Creates a child of a deterministic name; one that exists already was
/// created by an earlier pass. A create is noted in `changed` for the
/// pass's Event.
async fn create_child<K>(
    ctx: &Context,
    reference: &ObjectReference,
    changed: &Mutex<ChildChanges>,
    api: &Api<K>,
    kind: &ChildKind,
    child: &K,
) -> Result<bool, ReconcileError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = child.meta().name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), child).await {
        Ok(_) => {
            changed.lock().record(Change::Created, kind.child, name);
            Ok(true)
        }
        Err(error) if is_status(&error, 409) => Ok(false),
        Err(source) => Err(child_write_failed(
            ctx,
            reference,
            kind,
            ChildWrite::Create,
            name,
            source,
        )),
    }
}

/// Deletes the child of `uid`; gone already, or the name now belonging to
/// a newer child, counts as done. A delete is noted in `changed`.
async fn delete_child<K>(
    ctx: &Context,
    reference: &ObjectReference,
    changed: &Mutex<ChildChanges>,
    api: &Api<K>,
    kind: &ChildKind,
    name: String,
    uid: Option<String>,
) -> Result<bool, ReconcileError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(&name, &delete_params(uid, None)).await {
        Ok(_) => {
            changed.lock().record(Change::Deleted, kind.child, name);
            Ok(true)
        }
        Err(error) if is_status(&error, 404) || is_status(&error, 409) => Ok(false),
        Err(source) => Err(child_write_failed(
            ctx,
            reference,
            kind,
            ChildWrite::Delete,
            name,
            source,
        )),
    }
}

/// A write of a child the server refused.
#[derive(Clone, Copy)]
enum ChildWrite {
    Create,
    Delete,
}

/// Records the Warning event of a refused child write (`FailedCreatePod`,
/// `FailedDeleteService`, ...) and returns the pass's failure for it.
fn child_write_failed(
    ctx: &Context,
    reference: &ObjectReference,
    kind: &ChildKind,
    write: ChildWrite,
    name: String,
    source: kube::Error,
) -> ReconcileError {
    let (verb, doing, call) = match write {
        ChildWrite::Create => ("Create", "creating", kind.creating),
        ChildWrite::Delete => ("Delete", "deleting", kind.deleting),
    };
    let reason = format!("Failed{verb}{}", kind.title);
    let message = format!("Error {doing}: {source}");
    event(ctx, reference, KubeEventType::Warning, &reason, message);
    ReconcileError::Api { call, name, source }
}

/// Deletes the children `selector` matches in one DeleteCollection, each
/// noted in `changed` as the per-child path notes them; returns how many
/// it deleted and the UIDs the answer gave for them.
async fn delete_children<K>(
    ctx: &Context,
    reference: &ObjectReference,
    changed: &Mutex<ChildChanges>,
    api: &Api<K>,
    kind: &ChildKind,
    selector: &str,
    names: Vec<String>,
) -> Result<(usize, Vec<String>), ReconcileError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = ListParams::default().labels(selector);
    match api.delete_collection(&DeleteParams::default(), &list).await {
        Ok(answer) => {
            // The answer lists what went; a server may answer with a bare
            // Status instead, and then the planned names are what went.
            let (deleted, uids): (Vec<String>, Vec<String>) = match answer.left() {
                Some(items) => items
                    .items
                    .iter()
                    .map(|item| {
                        let meta = item.meta();
                        (
                            meta.name.clone().unwrap_or_default(),
                            meta.uid.clone().unwrap_or_default(),
                        )
                    })
                    .unzip(),
                None => (names, Vec::new()),
            };
            let count = deleted.len();
            let mut changed = changed.lock();
            for name in deleted {
                changed.record(Change::Deleted, kind.child, name);
            }
            Ok((count, uids))
        }
        Err(source) => Err(child_write_failed(
            ctx,
            reference,
            kind,
            ChildWrite::Delete,
            selector.to_string(),
            source,
        )),
    }
}

/// Replaces a child's owner references (adoption or release).
async fn set_child_owners<K>(
    api: &Api<K>,
    call: ApiCall,
    name: String,
    uid: Option<String>,
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
) -> Result<(), ReconcileError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = owners_patch(uid, owners);
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_status(&error, 404) || is_status(&error, 409) => Ok(()),
        Err(source) => Err(ReconcileError::Api { call, name, source }),
    }
}

/// Notes that children of `job` were deleted (by UID).
fn remember_deleted(ctx: &Context, job: &str, uids: impl IntoIterator<Item = String>) {
    ctx.deleted
        .lock()
        .entry(job.to_string())
        .or_default()
        .extend(uids);
}

async fn execute(
    ctx: &Context,
    job: &str,
    namespace: &str,
    reference: &ObjectReference,
    changed: &Mutex<ChildChanges>,
    action: ChildAction,
) -> Result<(), ReconcileError> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), namespace);
    match action {
        ChildAction::CreatePod(pod) => {
            let created = create_child(ctx, reference, changed, &pods, &POD, &pod).await;
            match created {
                Ok(true) => ctx.metrics.created_pods.inc(),
                Err(_) => ctx.metrics.failed_pods.inc(),
                Ok(false) => 0,
            };
            created.map(drop)
        }
        ChildAction::CreateService(service) => {
            let created =
                create_child(ctx, reference, changed, &services, &SERVICE, &service).await;
            match created {
                Ok(true) => ctx.metrics.created_services.inc(),
                Err(_) => ctx.metrics.failed_services.inc(),
                Ok(false) => 0,
            };
            created.map(drop)
        }
        ChildAction::DeletePod { name, uid } => {
            let deleted =
                delete_child(ctx, reference, changed, &pods, &POD, name, uid.clone()).await?;
            if deleted {
                ctx.metrics.deleted_pods.inc();
                remember_deleted(ctx, job, uid);
            }
            Ok(())
        }
        ChildAction::DeleteService { name, uid } => {
            if delete_child(
                ctx,
                reference,
                changed,
                &services,
                &SERVICE,
                name,
                uid.clone(),
            )
            .await?
            {
                remember_deleted(ctx, job, uid);
            }
            Ok(())
        }
        ChildAction::DeleteChildren {
            kind,
            selector,
            names,
        } => match kind {
            plan::deletions::ChildKind::Pod => {
                let (count, uids) =
                    delete_children(ctx, reference, changed, &pods, &POD, &selector, names).await?;
                ctx.metrics.deleted_pods.inc_by(count as u64);
                remember_deleted(ctx, job, uids);
                Ok(())
            }
            plan::deletions::ChildKind::Service => {
                let (_, uids) = delete_children(
                    ctx, reference, changed, &services, &SERVICE, &selector, names,
                )
                .await?;
                remember_deleted(ctx, job, uids);
                Ok(())
            }
        },
        ChildAction::SetPodOwners { name, uid, owners } => {
            set_child_owners(&pods, ApiCall::ClaimPod, name, uid, &owners).await
        }
        ChildAction::SetServiceOwners { name, uid, owners } => {
            set_child_owners(&services, ApiCall::ClaimService, name, uid, &owners).await
        }
        ChildAction::CreatePodGroup(group) => {
            if pod_group_write(ctx, namespace, PodGroupWrite::Create(*group)).await? {
                ctx.metrics.created_pod_groups.inc();
            }
            Ok(())
        }
        ChildAction::UpdatePodGroup { name, uid, spec } => {
            let write = PodGroupWrite::Update {
                name,
                uid,
                spec: *spec,
            };
            pod_group_write(ctx, namespace, write).await.map(drop)
        }
        ChildAction::DeletePodGroup { name, uid } => {
            let write = PodGroupWrite::Delete {
                name: name.clone(),
                uid,
            };
            match pod_group_write(ctx, namespace, write).await {
                Ok(true) => {
                    ctx.metrics.deleted_pod_groups.inc();
                    let message = format!("Deleted PodGroup: {name}");
                    event(
                        ctx,
                        reference,
                        KubeEventType::Normal,
                        "SuccessfulDeletePodGroup",
                        message,
                    );
                    Ok(())
                }
                Ok(false) => Ok(()),
                Err(error) => {
                    let message = format!("Error deleting: {error}");
                    event(
                        ctx,
                        reference,
                        KubeEventType::Warning,
                        "FailedDeletePodGroup",
                        message,
                    );
                    Err(error)
                }
            }
        }
        ChildAction::DeleteJob { name, uid } => {
            let jobs: Api<TFJobObject> = Api::namespaced(ctx.client.clone(), namespace);
            let params = delete_params(uid, Some(PropagationPolicy::Background));
            match jobs.delete(&name, &params).await {
                Ok(_) => {
                    ctx.metrics.jobs_deleted.inc(namespace);
                    let message = format!("Deleted job: {name}");
                    event(
                        ctx,
                        reference,
                        KubeEventType::Normal,
                        "SuccessfulDeleteJob",
                        message,
                    );
                    Ok(())
                }
                Err(error) if is_status(&error, 404) || is_status(&error, 409) => Ok(()),
                Err(source) => {
                    let message = format!("Error deleting: {source}");
                    event(
                        ctx,
                        reference,
                        KubeEventType::Warning,
                        "FailedDeleteJob",
                        message,
                    );
                    Err(ReconcileError::Api {
                        call: ApiCall::DeleteJob,
                        name,
                        source,
                    })
                }
            }
        }
    }
}

/// A PodGroup write against the configured gang scheduler's API (the
/// planner only asks for one when gang scheduling is on).
async fn pod_group_write(
    ctx: &Context,
    namespace: &str,
    write: PodGroupWrite,
) -> Result<bool, ReconcileError> {
    let Some(gang) = ctx.config.gang.as_ref() else {
        return Ok(false);
    };
    pod_groups::execute(&ctx.client, gang.scheduler(), namespace, write)
        .await
        .map_err(ReconcileError::from)
}

/// Owner references replaced as a whole; the UID makes the patch apply to
/// exactly the child the snapshot saw.
fn owners_patch(
    uid: Option<String>,
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
) -> Value {
    let mut metadata = json!({ "ownerReferences": owners });
    if let Some(uid) = uid {
        metadata["uid"] = Value::String(uid);
    }
    json!({ "metadata": metadata })
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: keys that
/// disappeared are nulled (a replica type gone, a pod no longer in the
/// backoff record), objects are diffed key by key, everything else is
/// replaced.
fn merge_patch(old: &Value, new: &Value) -> Value {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = serde_json::Map::new();
            for (key, old_value) in old {
                match new.get(key) {
                    None => {
                        patch.insert(key.clone(), Value::Null);
                    }
                    Some(new_value) if new_value != old_value => {
                        patch.insert(key.clone(), merge_patch(old_value, new_value));
                    }
                    Some(_) => {}
                }
            }
            for (key, new_value) in new {
                if !old.contains_key(key) {
                    patch.insert(key.clone(), new_value.clone());
                }
            }
            Value::Object(patch)
        }
        _ => new.clone(),
    }
}

/// Merge-patches the status from `old` to `new`.
async fn write_status(
    ctx: &Context,
    namespace: &str,
    name: &str,
    old: &JobStatus,
    new: &JobStatus,
) -> Result<Option<String>, ReconcileError> {
    let old = serde_json::to_value(old).unwrap_or(Value::Null);
    let status = merge_patch(&old, &serde_json::to_value(new).unwrap_or(Value::Null));
    let api: Api<TFJobObject> = Api::namespaced(ctx.client.clone(), namespace);
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({ "status": status })),
    )
    .await
    .map(|job| job.metadata.resource_version)
    .map_err(|source| ReconcileError::Api {
        call: ApiCall::PatchJobStatus,
        name: name.to_string(),
        source,
    })
}

/// Whether an Event is due: one with a key only the first time this
/// process plans it.
fn first_time(ctx: &Context, planned: &PlannedEvent) -> bool {
    match &planned.dedup_key {
        Some(key) => ctx.emitted.lock().insert(key.clone()),
        None => true,
    }
}

fn publish_planned(
    ctx: &Context,
    reference: &ObjectReference,
    namespace: &str,
    planned: PlannedEvent,
) {
    match planned.reason.as_str() {
        _ if !planned.counted => {}
        conditions::REASON_SUCCEEDED => ctx.metrics.jobs_successful.inc(namespace),
        conditions::REASON_FAILED => ctx.metrics.jobs_failed.inc(namespace),
        conditions::REASON_RESTARTING => ctx.metrics.jobs_restarted.inc(namespace),
        _ => {}
    }
    let type_ = match planned.type_ {
        EventType::Normal => KubeEventType::Normal,
        EventType::Warning => KubeEventType::Warning,
    };
    event(ctx, reference, type_, &planned.reason, planned.message);
}

/// Queues an Event; the pass does not wait for it to be written.
fn event(
    ctx: &Context,
    reference: &ObjectReference,
    type_: KubeEventType,
    reason: &str,
    message: String,
) {
    ctx.events.publish(reference, type_, reason, message);
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

    use super::*;

    fn answer(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("refused", "Refused")
                .with_code(code)
                .boxed(),
        )
    }

    fn failed(call: ApiCall, code: u16) -> ReconcileError {
        ReconcileError::Api {
            call,
            name: "job-worker-0".to_string(),
            source: answer(code),
        }
    }

    #[test]
    fn each_failure_of_a_pass_has_its_label_and_retry() {
        let cases = [
            (
                ReconcileError::InvalidKey("no-slash".to_string()),
                "invalid_key",
                Retry::AwaitChange,
            ),
            (
                failed(ApiCall::PatchJobStatus, 409),
                "conflict",
                Retry::After(CONFLICT_RETRY),
            ),
            (
                failed(ApiCall::CreatePod, 422),
                "invalid_spec",
                Retry::AwaitChange,
            ),
            (
                failed(ApiCall::CreateService, 400),
                "invalid_spec",
                Retry::AwaitChange,
            ),
            (
                failed(ApiCall::CreatePod, 500),
                "create_pod",
                Retry::Backoff,
            ),
            (
                failed(ApiCall::CreatePod, 403),
                "create_pod",
                Retry::Backoff,
            ),
            (
                failed(ApiCall::DeletePod, 503),
                "delete_pod",
                Retry::Backoff,
            ),
            (
                failed(ApiCall::ClaimService, 429),
                "patch_service_owners",
                Retry::Backoff,
            ),
            (
                failed(ApiCall::PatchJobStatus, 500),
                "patch_status",
                Retry::Backoff,
            ),
            (
                ReconcileError::PodGroup(pod_groups::PodGroupError {
                    what: "creating podgroup",
                    name: "job".to_string(),
                    source: answer(500),
                }),
                "podgroup_write",
                Retry::Backoff,
            ),
            (
                ReconcileError::PodGroup(pod_groups::PodGroupError {
                    what: "updating podgroup",
                    name: "job".to_string(),
                    source: answer(409),
                }),
                "conflict",
                Retry::After(CONFLICT_RETRY),
            ),
        ];
        for (error, label, retry) in cases {
            assert_eq!(
                (error.metric_label(), error.retry()),
                (label, retry),
                "{error}"
            );
        }
    }

    #[test]
    fn a_failed_write_says_what_it_was_doing_to_which_object() {
        let message = failed(ApiCall::CreatePod, 500).to_string();
        assert!(
            message.starts_with("creating pod job-worker-0: ApiError: refused"),
            "{message}"
        );
    }

    fn meta(owner: Option<(&str, &str)>, job_label: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some("child".into()),
            namespace: Some("ns".into()),
            labels: job_label.map(|job| {
                [
                    ("group-name".to_string(), "kubeflow.org".to_string()),
                    ("job-name".to_string(), job.to_string()),
                ]
                .into()
            }),
            owner_references: owner.map(|(kind, name)| {
                vec![OwnerReference {
                    api_version: "kubeflow.org/v1".into(),
                    kind: kind.into(),
                    name: name.into(),
                    uid: format!("uid-{name}"),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]
            }),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_status_patch_nulls_what_disappeared_and_carries_only_what_changed() {
        let old = json!({
            "replicaStatuses": {"PS": {"active": 1}, "Worker": {"active": 2}},
            "backoff": {"failures": 2, "pods": {"a": 1, "b": 1}},
            "startTime": "2026-01-01T00:00:00Z",
        });
        let new = json!({
            "replicaStatuses": {"Worker": {"active": 2, "succeeded": 1}},
            "backoff": {"failures": 2, "pods": {"b": 1}},
            "startTime": "2026-01-01T00:00:00Z",
            "completionTime": "2026-01-01T00:01:00Z",
        });
        assert_eq!(
            merge_patch(&old, &new),
            json!({
                "replicaStatuses": {"PS": null, "Worker": {"succeeded": 1}},
                "backoff": {"pods": {"a": null}},
                "completionTime": "2026-01-01T00:01:00Z",
            })
        );
        let mut applied = old.clone();
        json_patch::merge(&mut applied, &merge_patch(&old, &new));
        assert_eq!(applied, new);
    }

    #[test]
    fn a_cached_job_older_than_our_status_write_is_planned_from_the_written_status() {
        let written = WrittenStatus {
            cached_resource_version: Some("10".into()),
            written_resource_version: Some("12".into()),
            status: JobStatus::default(),
        };
        // 11: someone else's update that arrived before our write.
        assert!(written.is_newer_than(Some(&"10".to_string())));
        assert!(written.is_newer_than(Some(&"11".to_string())));
        assert!(!written.is_newer_than(Some(&"12".to_string())));
        assert!(!written.is_newer_than(Some(&"13".to_string())));
        let opaque = WrittenStatus {
            cached_resource_version: Some("a".into()),
            written_resource_version: Some("c".into()),
            status: JobStatus::default(),
        };
        assert!(opaque.is_newer_than(Some(&"a".to_string())));
        assert!(!opaque.is_newer_than(Some(&"b".to_string())));
    }

    #[test]
    fn a_pod_owned_by_a_tfjob_enqueues_exactly_the_jobs_key() {
        assert_eq!(
            child_key(&meta(Some(("TFJob", "mnist")), Some("mnist"))),
            Some("ns/mnist".to_string())
        );
        assert_eq!(
            owner_index(&meta(Some(("TFJob", "mnist")), None)),
            ["uid-mnist"]
        );
    }

    #[test]
    fn an_orphan_enqueues_the_job_its_labels_name_and_a_child_of_another_controller_nothing() {
        assert_eq!(
            child_key(&meta(None, Some("mnist"))),
            Some("ns/mnist".to_string())
        );
        assert_eq!(
            child_key(&meta(Some(("Job", "batch")), Some("mnist"))),
            None
        );
        assert!(owner_index(&meta(Some(("Job", "batch")), None)).is_empty());
        assert_eq!(job_label_index(&meta(None, Some("mnist"))), ["ns/mnist"]);
    }
}
