//! The rack reconciler: one full reconcile per inventory, as upstream does,
//! under the inventory's lock. It asks `plan::inventory` what to write and
//! writes it: rack creates with our field manager and no prior read,
//! updates with the cached resourceVersion (optimistic concurrency, re-read
//! and retried on 409), deletions with UID and resourceVersion
//! preconditions, and the inventory cleanup finalizer.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::state::{Context, RackResult};
use super::{INDEX_INVENTORY_UID, Queues, ReconcileError};
use crate::allocate::GroupKey;
use crate::api::{SGPUInventory, SGPURack};
use crate::plan::event_notes;
use crate::plan::inventory::{
    ExactBinding, IssueKind, OwnershipConflict, PlanScope, ProfileIssue, RackPlanInput, RackWrite,
    Release, plan_inventory,
};
use crate::plan::projection::FIELD_MANAGER;
use crate::plan::rack::{
    FINALIZER_INVENTORY_CLEANUP, FINALIZER_RACK_CLEANUP, LABEL_INVENTORY, controller_owner,
    is_label_value, is_owned_by, merge_rack, spec_exclusively_ours,
};
use controller_kit::error::is_status;

/// Optimistic-concurrency retries: 5 attempts, 10 ms apart.
const CONFLICT_RETRIES: usize = 5;
const CONFLICT_BACKOFF: Duration = Duration::from_millis(10);

/// Rack writes of one reconcile in flight at once. A new inventory of
/// 1,000 racks is 1,000 creates of large objects; one at a time they took
/// half a minute at the scale target while the Nodes of the racks already
/// written waited for their projection.
const RACK_WRITES_IN_FLIGHT: usize = 8;

/// Rack writes that need the reconcile to run again.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RackError {
    #[error("owned rack is missing from the informer cache")]
    RackCacheStale,
    #[error("rack {0:?} spec is not exclusively controller-owned")]
    Ownership(String),
    #[error("rack {rack:?}: {source}")]
    Api {
        rack: String,
        #[source]
        source: kube::Error,
    },
    #[error("inventory {inventory:?}: {source}")]
    Inventory {
        inventory: String,
        #[source]
        source: kube::Error,
    },
    #[error("optimistic concurrency: inventory {0:?} kept changing")]
    InventoryContended(String),
    #[error("optimistic concurrency: rack {0:?} kept changing")]
    Contended(String),
}

fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_string()),
    }
}

/// The full inventory reconcile (the inventories queue).
pub(crate) async fn reconcile_inventory(
    context: &Arc<Context>,
    queues: &Arc<Queues>,
    name: &str,
    cancel: &CancellationToken,
) -> Result<(), ReconcileError> {
    reconcile(context, queues, name, None, &PlanScope::Inventory, cancel).await
}

/// The single-group reconcile (the groups queue): Node and binding changes
/// of one rack group. It indexes the allocation's bindings once and renders
/// and writes only the racks whose bindings changed.
pub(crate) async fn reconcile_group(
    context: &Arc<Context>,
    queues: &Arc<Queues>,
    key: &GroupKey,
    cancel: &CancellationToken,
) -> Result<(), ReconcileError> {
    reconcile(
        context,
        queues,
        &key.inventory_name,
        Some(&key.inventory_uid),
        &PlanScope::Group(key.group.clone()),
        cancel,
    )
    .await
}

async fn reconcile(
    context: &Arc<Context>,
    queues: &Arc<Queues>,
    name: &str,
    expected_uid: Option<&str>,
    scope: &PlanScope,
    cancel: &CancellationToken,
) -> Result<(), ReconcileError> {
    let lock = context.inventory_lock(name);
    let _guard = lock.lock().await;
    if cancel.is_cancelled() {
        return Ok(());
    }
    let full = *scope == PlanScope::Inventory;
    let Some(inventory) = context.inventories.get(name) else {
        if full {
            context.results.lock().remove(name);
        }
        return Ok(());
    };
    let uid = inventory.metadata.uid.clone().unwrap_or_default();
    controller_kit::record_uid(&uid);
    if expected_uid.is_some_and(|expected| expected != uid) {
        // The group belonged to an earlier instance of this name.
        return Ok(());
    }
    let cluster = context.cluster_plan();
    let owned: Vec<Arc<SGPURack>> = context
        .racks
        .by_index(INDEX_INVENTORY_UID, &uid)
        .into_iter()
        .filter(|rack| is_owned_by(rack, name, &uid))
        .filter(|rack| scope.covers(&rack.spec.identity.rack_group))
        .collect();
    let racks = context.racks.clone();
    let rack_named = move |rack: &str| racks.get(rack);
    let acknowledged = |binding: &ExactBinding| context.acknowledged(binding);
    let mut plan = plan_inventory(&RackPlanInput {
        inventory: &inventory,
        cluster: &cluster,
        rack_named: &rack_named,
        owned,
        acknowledged: &acknowledged,
        scope: scope.clone(),
    });
    context
        .metrics
        .racks_visited(scope_label(scope), plan.visited);
    if plan.needs_full_reconcile {
        queues.inventory(name);
        return Ok(());
    }

    // Claims let a foreign rack's events reach the inventory that wants the name.
    if full && let Some(resolution) = cluster.resolution(name, &uid) {
        let mut claims = context.claims.lock();
        claims.retain(|_, claimant| claimant != name);
        for group in &resolution.groups {
            for index in 0..group.count.max(0) {
                claims.insert(
                    crate::identity::rack_name(name, &uid, &group.id, index as u32),
                    name.to_string(),
                );
            }
        }
    }

    let releasing: HashSet<ExactBinding> = plan
        .writes
        .iter()
        .flat_map(|write| match write {
            RackWrite::Update { released, .. } | RackWrite::Delete { released, .. } => released
                .iter()
                .map(|release| release.binding.clone())
                .collect(),
            RackWrite::Create(_) => Vec::new(),
        })
        .collect();
    let group = match scope {
        PlanScope::Inventory => None,
        PlanScope::Group(group) => Some(group.as_str()),
    };
    for node in context.update_cleanups(&uid, group, &plan.cleanups, &releasing) {
        queues.project(&node);
    }

    let mut outcome: Result<(), ReconcileError> = Ok(());
    if plan.needs_finalizer
        && let Err(error) = add_inventory_finalizer(context, &inventory).await
    {
        outcome = Err(error.into());
    }
    if outcome.is_ok() {
        // The writes touch distinct racks, so they run side by side; their
        // results are taken in plan order, so conflicts and issues are
        // reported in the same order as by one-at-a-time writes.
        let results: Vec<Result<(), WriteFailure>> = stream::iter(std::mem::take(&mut plan.writes))
            .take_while(|_| std::future::ready(!cancel.is_cancelled()))
            .map(|write| execute(context, &inventory, write))
            .buffered(RACK_WRITES_IN_FLIGHT)
            .collect()
            .await;
        for result in results {
            match result {
                Ok(()) => {}
                Err(WriteFailure::Conflict(conflict)) => plan.conflicts.push(conflict),
                Err(WriteFailure::Invalid(issue)) => plan.issues.push(issue),
                Err(WriteFailure::Retry(error)) => {
                    outcome = Err(error.into());
                }
            }
        }
    }
    if !full {
        if !plan.conflicts.is_empty() || !plan.issues.is_empty() {
            // Conflicts and issues are the full reconcile's to report.
            queues.inventory(name);
        }
        queues.inventory_status(name);
        return outcome;
    }
    if outcome.is_ok() && plan.release_finalizer {
        outcome = release_inventory_finalizer(context, &inventory)
            .await
            .map_err(Into::into);
    }

    let metric_labels = super::metrics::Metrics::label("inventory", name);
    if let Ok(allocation) = &cluster.allocation {
        let bound = allocation
            .bindings
            .iter()
            .filter(|b| b.group.inventory_uid == uid)
            .count();
        let pending = allocation
            .pending
            .iter()
            .filter(|p| p.group.inventory_uid == uid)
            .count();
        context
            .metrics
            .bound
            .get_or_create(&metric_labels)
            .set(bound as i64);
        context
            .metrics
            .pending
            .get_or_create(&metric_labels)
            .set(pending as i64);
    }
    context
        .metrics
        .released
        .get_or_create(&metric_labels)
        .set(plan.cleanups.len() as i64);
    if let Some(resolution) = cluster.resolution(name, &uid) {
        context
            .metrics
            .capacity
            .get_or_create(&metric_labels)
            .set(resolution.capacity.nodes);
    }
    context.results.lock().insert(
        name.to_string(),
        RackResult {
            uid,
            issues: plan.issues.clone(),
            conflicts: plan.conflicts.clone(),
            racks_missing: plan.racks_missing,
        },
    );
    queues.inventory_status(name);
    outcome
}

fn scope_label(scope: &PlanScope) -> &'static str {
    match scope {
        PlanScope::Inventory => "inventory",
        PlanScope::Group(_) => "group",
    }
}

enum WriteFailure {
    Conflict(OwnershipConflict),
    Invalid(ProfileIssue),
    Retry(RackError),
}

impl From<RackError> for WriteFailure {
    fn from(error: RackError) -> Self {
        Self::Retry(error)
    }
}

fn rack_ref(rack: &SGPURack) -> ObjectReference {
    rack.object_ref(&())
}

async fn execute(
    context: &Context,
    inventory: &SGPUInventory,
    write: RackWrite,
) -> Result<(), WriteFailure> {
    let api: Api<SGPURack> = Api::all(context.client.clone());
    match write {
        RackWrite::Create(rack) => {
            let rack_name = rack.name_any();
            match api.create(&post_params(), &rack).await {
                Ok(created) => {
                    context.metrics.rack_write("create");
                    tracing::info!(
                        inventory = %inventory.name_any(),
                        rack = %rack_name,
                        uid = created.metadata.uid.as_deref().unwrap_or_default(),
                        rackGroup = %created.spec.identity.rack_group,
                        rackIndex = created.spec.identity.rack_index,
                        profileRevision = %created.spec.profile_ref.revision,
                        "Created rack"
                    );
                    context
                        .events
                        .publish_or_log(
                            &inventory.object_ref(&()),
                            EventType::Normal,
                            "RackCreated",
                            "Create",
                            Some(format!("Created rack {rack_name}")),
                        )
                        .await;
                    log_bound(context, &created, &ExactBinding::all_of(&created)).await;
                    Ok(())
                }
                Err(error) if is_status(&error, 422) => Err(WriteFailure::Invalid(ProfileIssue {
                    group: rack.spec.identity.rack_group.clone(),
                    profile: rack.spec.profile_ref.name.clone(),
                    kind: IssueKind::Invalid,
                    message: format!("rack {rack_name:?} was rejected by API validation"),
                })),
                Err(error) if is_status(&error, 409) => {
                    let live = api
                        .get_opt(&rack_name)
                        .await
                        .map_err(|source| RackError::Api {
                            rack: rack_name.clone(),
                            source,
                        })?;
                    match live {
                        Some(live)
                            if is_owned_by(
                                &live,
                                &inventory.name_any(),
                                inventory.uid().as_deref().unwrap_or_default(),
                            ) =>
                        {
                            Err(RackError::RackCacheStale.into())
                        }
                        Some(live) => {
                            let conflict = OwnershipConflict {
                                rack_name: rack_name.clone(),
                                group: rack.spec.identity.rack_group.clone(),
                                owner_uid: controller_owner(&live)
                                    .map(|o| o.uid.clone())
                                    .unwrap_or_default(),
                            };
                            warn_conflict(context, inventory, &conflict).await;
                            Err(WriteFailure::Conflict(conflict))
                        }
                        None => Err(RackError::RackCacheStale.into()),
                    }
                }
                Err(source) => Err(RackError::Api {
                    rack: rack_name,
                    source,
                }
                .into()),
            }
        }
        RackWrite::Update {
            desired,
            rerendered,
            bound,
            released,
        } => {
            let rack_name = desired.name_any();
            if !spec_exclusively_ours(&desired) {
                let conflict = OwnershipConflict {
                    rack_name: rack_name.clone(),
                    group: desired.spec.identity.rack_group.clone(),
                    owner_uid: inventory.uid().unwrap_or_default(),
                };
                tracing::warn!(rack = %rack_name, "rack spec is not exclusively controller-owned");
                return Err(WriteFailure::Conflict(conflict));
            }
            let written = replace_with_retry(&api, *desired).await?;
            context.metrics.rack_write("update");
            let uid = written.metadata.uid.as_deref().unwrap_or_default();
            if rerendered {
                tracing::info!(
                    inventory = %inventory.name_any(),
                    rack = %rack_name,
                    uid,
                    profileRevision = %written.spec.profile_ref.revision,
                    "Re-rendered rack"
                );
                context
                    .events
                    .publish_or_log(
                        &rack_ref(&written),
                        EventType::Normal,
                        "RackReRendered",
                        "Update",
                        Some(format!(
                            "Re-rendered from profile revision {}",
                            written.spec.profile_ref.revision
                        )),
                    )
                    .await;
            } else {
                tracing::info!(
                    inventory = %inventory.name_any(),
                    rack = %rack_name,
                    uid,
                    "Updated rack"
                );
            }
            log_bound(context, &written, &bound).await;
            log_released(context, &written, &released).await;
            context.released(released.iter().map(|release| &release.binding));
            Ok(())
        }
        RackWrite::Delete {
            rack,
            reason,
            released,
        } => {
            let rack_name = rack.name_any();
            let mut current = (*rack).clone();
            if current
                .finalizers()
                .iter()
                .any(|f| f == FINALIZER_RACK_CLEANUP)
            {
                current.metadata.finalizers = Some(
                    current
                        .finalizers()
                        .iter()
                        .filter(|f| *f != FINALIZER_RACK_CLEANUP)
                        .cloned()
                        .collect(),
                );
                current.metadata.managed_fields = None;
                current.status = None;
                current = match api.replace(&rack_name, &post_params(), &current).await {
                    Ok(updated) => updated,
                    Err(error) if is_status(&error, 404) => {
                        context.released(released.iter().map(|release| &release.binding));
                        return Ok(());
                    }
                    Err(error) if is_status(&error, 409) => {
                        return Err(RackError::Contended(rack_name).into());
                    }
                    Err(source) => {
                        return Err(RackError::Api {
                            rack: rack_name,
                            source,
                        }
                        .into());
                    }
                };
            }
            if current.metadata.deletion_timestamp.is_none() {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: current.uid(),
                        resource_version: current.resource_version(),
                    }),
                    ..DeleteParams::default()
                };
                match api.delete(&rack_name, &params).await {
                    Ok(_) => {}
                    Err(error) if is_status(&error, 404) => {}
                    Err(error) if is_status(&error, 409) => {
                        return Err(RackError::Contended(rack_name).into());
                    }
                    Err(source) => {
                        return Err(RackError::Api {
                            rack: rack_name,
                            source,
                        }
                        .into());
                    }
                }
            }
            context.metrics.rack_write("delete");
            log_released(context, &rack, &released).await;
            context.released(released.iter().map(|release| &release.binding));
            tracing::info!(
                inventory = %inventory.name_any(),
                rack = %rack_name,
                uid = rack.metadata.uid.as_deref().unwrap_or_default(),
                reason = reason.as_str(),
                "Deleted rack"
            );
            context
                .events
                .publish_or_log(
                    &inventory.object_ref(&()),
                    EventType::Normal,
                    "RackDeleted",
                    "Delete",
                    Some(format!("Deleted rack {rack_name}")),
                )
                .await;
            Ok(())
        }
    }
}

/// Replaces a rack; on 409 re-reads it and, if it is still the same
/// object with our spec ownership, merges our fields onto it and retries.
async fn replace_with_retry(api: &Api<SGPURack>, desired: SGPURack) -> Result<SGPURack, RackError> {
    let rack_name = desired.name_any();
    let uid = desired.uid();
    let mut attempt = desired.clone();
    for _ in 0..CONFLICT_RETRIES {
        // The cache keeps only a summary of each rack's managedFields
        // (`plan::rack::compact_managed_fields`); sent back in a PUT they
        // would replace the server's. Without them the server keeps
        // tracking the fields itself.
        attempt.metadata.managed_fields = None;
        match api.replace(&rack_name, &post_params(), &attempt).await {
            Ok(written) => return Ok(written),
            Err(error) if is_status(&error, 409) => {
                tokio::time::sleep(CONFLICT_BACKOFF).await;
                let live = api
                    .get_opt(&rack_name)
                    .await
                    .map_err(|source| RackError::Api {
                        rack: rack_name.clone(),
                        source,
                    })?
                    .ok_or(RackError::RackCacheStale)?;
                if live.uid() != uid {
                    return Err(RackError::RackCacheStale);
                }
                if !spec_exclusively_ours(&live) {
                    return Err(RackError::Ownership(rack_name));
                }
                attempt = merge_rack(&live, &desired);
            }
            Err(source) => {
                return Err(RackError::Api {
                    rack: rack_name,
                    source,
                });
            }
        }
    }
    Err(RackError::Contended(rack_name))
}

/// Logs each binding (upstream's message, one line per binding) and
/// publishes one `NodeBound` Event for the whole write, more when its
/// Nodes do not fit one note (see `plan::event_notes` for why not one per
/// Node).
async fn log_bound(context: &Context, rack: &SGPURack, bindings: &[ExactBinding]) {
    if bindings.is_empty() {
        return;
    }
    for binding in bindings {
        tracing::info!(
            inventory = %binding.inventory_name,
            rack = %binding.rack_name,
            rackGroup = %binding.group,
            rackIndex = binding.rack_index,
            nodeIndex = binding.node_index,
            node = %binding.node.name,
            nodeUID = %binding.node.uid,
            "Assigned Node to logical rack Node"
        );
    }
    let listed: Vec<(&str, i32)> = bindings
        .iter()
        .map(|binding| (binding.node.name.as_str(), binding.node_index))
        .collect();
    for note in event_notes::bound_notes(&listed) {
        context
            .events
            .publish_or_log_by_note(
                &rack_ref(rack),
                EventType::Normal,
                "NodeBound",
                "Bind",
                note,
            )
            .await;
    }
}

/// Like [`log_bound`] for releases: a log line each, one `NodeReleased`
/// Event for the write.
async fn log_released(context: &Context, rack: &SGPURack, releases: &[Release]) {
    if releases.is_empty() {
        return;
    }
    for release in releases {
        let binding = &release.binding;
        tracing::info!(
            inventory = %binding.inventory_name,
            rack = %binding.rack_name,
            rackGroup = %binding.group,
            rackIndex = binding.rack_index,
            nodeIndex = binding.node_index,
            node = %binding.node.name,
            nodeUID = %binding.node.uid,
            reason = release.reason.as_str(),
            "Released Node from logical rack Node"
        );
    }
    let listed: Vec<(&str, i32, &str)> = releases
        .iter()
        .map(|release| {
            (
                release.binding.node.name.as_str(),
                release.binding.node_index,
                release.reason.as_str(),
            )
        })
        .collect();
    for note in event_notes::released_notes(&listed) {
        context
            .events
            .publish_or_log_by_note(
                &rack_ref(rack),
                EventType::Normal,
                "NodeReleased",
                "Release",
                note,
            )
            .await;
    }
}

async fn warn_conflict(context: &Context, inventory: &SGPUInventory, conflict: &OwnershipConflict) {
    tracing::warn!(rack = %conflict.rack_name, group = %conflict.group, "rack name is owned by another object");
    context
        .events
        .publish_or_log(
            &inventory.object_ref(&()),
            EventType::Warning,
            "RackOwnershipConflict",
            "Create",
            Some(format!(
                "Rack {} exists and is not owned by this inventory",
                conflict.rack_name
            )),
        )
        .await;
}

async fn add_inventory_finalizer(
    context: &Context,
    inventory: &SGPUInventory,
) -> Result<(), RackError> {
    update_inventory_finalizers(context, inventory, |finalizers| {
        if !finalizers.iter().any(|f| f == FINALIZER_INVENTORY_CLEANUP) {
            finalizers.push(FINALIZER_INVENTORY_CLEANUP.to_string());
        }
    })
    .await
}

/// Removes the inventory finalizer once no owned rack is alive, checked
/// with a live List (the cache may lag behind our own deletes).
async fn release_inventory_finalizer(
    context: &Context,
    inventory: &SGPUInventory,
) -> Result<(), RackError> {
    let name = inventory.name_any();
    let uid = inventory.uid().unwrap_or_default();
    let racks: Api<SGPURack> = Api::all(context.client.clone());
    let params = if is_label_value(&name) {
        ListParams::default().labels(&format!("{LABEL_INVENTORY}={name}"))
    } else {
        ListParams::default()
    };
    let live = racks
        .list(&params)
        .await
        .map_err(|source| RackError::Inventory {
            inventory: name.clone(),
            source,
        })?;
    if live.items.iter().any(|rack| is_owned_by(rack, &name, &uid)) {
        return Err(RackError::RackCacheStale);
    }
    update_inventory_finalizers(context, inventory, |finalizers| {
        finalizers.retain(|f| f != FINALIZER_INVENTORY_CLEANUP);
    })
    .await?;
    tracing::info!(inventory = %name, uid, "Released inventory cleanup finalizer");
    Ok(())
}

async fn update_inventory_finalizers(
    context: &Context,
    inventory: &SGPUInventory,
    change: impl Fn(&mut Vec<String>),
) -> Result<(), RackError> {
    let api: Api<SGPUInventory> = Api::all(context.client.clone());
    let name = inventory.name_any();
    let error = |source| RackError::Inventory {
        inventory: name.clone(),
        source,
    };
    let mut current = inventory.clone();
    for _ in 0..CONFLICT_RETRIES {
        if current.uid() != inventory.uid() {
            return Ok(());
        }
        let mut finalizers = current.finalizers().to_vec();
        change(&mut finalizers);
        if finalizers == current.finalizers() {
            return Ok(());
        }
        current.metadata.finalizers = Some(finalizers);
        current.metadata.managed_fields = None;
        match api.replace(&name, &post_params(), &current).await {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 409) => {
                tokio::time::sleep(CONFLICT_BACKOFF).await;
                match api.get_opt(&name).await.map_err(error)? {
                    Some(live) => current = live,
                    None => return Ok(()),
                }
            }
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(e) => return Err(error(e)),
        }
    }
    Err(RackError::InventoryContended(name))
}
