//! The status reconcilers, fed through the coalescer. Inputs come from the
//! caches and the latest rack result; nothing is listed. Inventory status
//! is compared with a live GET; rack status trusts the cache unless a write
//! of ours is still pending (the ABA guard).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::state::{Context, RackProjections};
use super::{ApiCall, INDEX_INVENTORY_UID, INDEX_NODE_UID, Queues, ReconcileError, StatusKey};
use crate::api::{
    InventoryCapacity, NodeRef, RackGroupStatus, RuntimePolicySummary, SGPUInventory, SGPURack,
    SGPURackStatus, SGPURuntimePolicy, SGPURuntimePolicyStatus,
};
use crate::plan::inventory::{Resolution, rack_groups_summary, requested_nodes};
use crate::plan::projection::{FIELD_MANAGER, ObservedNode, desired_for};
use crate::plan::rack::{is_owned_by, owner_matches_inventory_ref};
use crate::plan::status::{InventoryFacts, RackFacts, inventory_status, rack_status, usage};
use crate::policy::{CONDITION_ACCEPTED, Outcome as PolicyOutcome, policy_status};
use crate::text::go_quote;

fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_string()),
    }
}

pub(crate) async fn reconcile_status(
    context: &Arc<Context>,
    queues: &Arc<Queues>,
    key: &StatusKey,
) -> Result<(), ReconcileError> {
    match key {
        StatusKey::Inventory(name) => inventory(context, queues, name).await,
        StatusKey::Rack(name) => rack(context, name).await,
        StatusKey::RuntimePolicies(inventory) => runtime_policies(context, inventory).await,
    }
}

/// The summary of an inventory's policy decisions.
fn policy_summary(context: &Context, inventory: &str) -> Option<RuntimePolicySummary> {
    if !context.options.features.runtime_policies {
        // Policies are not watched: a count of zero would claim there are none.
        return None;
    }
    let evaluation = super::policies::evaluation(context, inventory);
    let evaluation = evaluation.as_ref().as_ref().ok()?;
    let count = |outcome: PolicyOutcome| {
        let n = evaluation
            .decisions()
            .iter()
            .filter(|decision| decision.outcome == outcome)
            .count();
        i32::try_from(n).unwrap_or(i32::MAX)
    };
    Some(RuntimePolicySummary {
        policies: i32::try_from(evaluation.decisions().len()).unwrap_or(i32::MAX),
        accepted: count(PolicyOutcome::Accepted),
        conflicted: count(PolicyOutcome::Conflicted),
        invalid_target: count(PolicyOutcome::InvalidTarget),
    })
}

/// Upstream's runtime-policy status reconcile: each decision becomes the
/// policy's status; converged policies cost no API call; a live GET guards
/// against writing over a newer spec; one failed write does not stop the
/// others, and the joined error retries the inventory.
async fn runtime_policies(context: &Context, inventory: &str) -> Result<(), ReconcileError> {
    let evaluation = super::policies::evaluation(context, inventory);
    let evaluation = match evaluation.as_ref() {
        Ok(evaluation) => evaluation,
        Err(error) => {
            return Err(ReconcileError::PolicyEvaluation {
                inventory: go_quote(inventory),
                message: error.to_string(),
            });
        }
    };
    let api: Api<SGPURuntimePolicy> = Api::all(context.client.clone());
    let mut errors = Vec::new();
    for decision in evaluation.decisions() {
        let Some(cached) = context.policies.get(&decision.name) else {
            continue;
        };
        if cached.metadata.uid.as_deref().unwrap_or_default() != decision.uid {
            continue;
        }
        let desired = policy_status(&cached, decision, cached.status.as_ref(), &now());
        if cached.status.as_ref() == Some(&desired) {
            continue;
        }
        if let Err(error) = write_policy_status(&api, &cached, decision).await {
            errors.push(format!(
                "update runtime policy {} status: {error}",
                go_quote(&decision.name)
            ));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ReconcileError::PolicyStatus { failures: errors })
    }
}

async fn write_policy_status(
    api: &Api<SGPURuntimePolicy>,
    cached: &SGPURuntimePolicy,
    decision: &crate::policy::Decision,
) -> Result<(), kube::Error> {
    let name = decision.name.as_str();
    // Retry on conflict, as upstream's RetryOnConflict (default backoff: 5 tries).
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(mut live) = api.get_opt(name).await? else {
            // The delete event re-evaluates the rest.
            return Ok(());
        };
        // A newer spec arrives as its own event; never report an old decision on it.
        if live.metadata.uid != cached.metadata.uid
            || live.metadata.generation != cached.metadata.generation
        {
            return Ok(());
        }
        let desired = policy_status(&live, decision, live.status.as_ref(), &now());
        if live.status.as_ref() == Some(&desired) {
            return Ok(());
        }
        let before = accepted_condition(live.status.as_ref());
        let after = accepted_condition(Some(&desired));
        live.status = Some(desired);
        live.metadata.managed_fields = None;
        match api.replace_status(name, &post_params(), &live).await {
            Ok(_) => {
                if before != after {
                    tracing::info!(
                        policy = name,
                        uid = %decision.uid,
                        inventory = %cached.spec.target_ref.name,
                        generation = decision.generation,
                        condition = CONDITION_ACCEPTED,
                        oldStatus = before.as_ref().map(|c| c.0.as_str()),
                        oldReason = before.as_ref().map(|c| c.1.as_str()),
                        status = after.as_ref().map(|c| c.0.as_str()),
                        reason = after.as_ref().map(|c| c.1.as_str()),
                        detail = %decision.message,
                        "Runtime policy condition changed"
                    );
                }
                return Ok(());
            }
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < 5 => {}
            Err(error) => return Err(error),
        }
    }
}

fn accepted_condition(status: Option<&SGPURuntimePolicyStatus>) -> Option<(String, String)> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|condition| condition.type_ == CONDITION_ACCEPTED)
        .map(|condition| (condition.status.clone(), condition.reason.clone()))
}

/// What a status pass needs to know of one bound slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct SlotCheck {
    /// The cached Node of the binding's name has the binding's UID.
    live: bool,
    /// ... and carries exactly the slot's projection, owned by us.
    projected: bool,
}

/// Checks every bound slot of `rack` against the Node cache, in slot order.
///
/// An inventory status visits every binding (100,000 at the scale target)
/// once per progress interval, so the cost per slot matters: each Node is
/// looked up once, the rack's memo is locked once, and the projection
/// answer (a JSON encoding of the desired annotation) is kept per (rack,
/// Node) resourceVersion pair.
fn check_slots<'r>(context: &Context, rack: &'r SGPURack) -> Vec<(i32, &'r NodeRef, SlotCheck)> {
    // Look the Nodes up first: no cache lock is taken under the memo's.
    let bound: Vec<(i32, &NodeRef, Option<Arc<crate::node_meta::NodeMeta>>)> = rack
        .spec
        .nodes
        .iter()
        .filter_map(|slot| {
            let bound = slot.node_ref.as_ref()?;
            let node = context
                .nodes
                .get(&bound.name)
                .filter(|node| node.metadata.uid.as_deref() == Some(bound.uid.as_str()));
            Some((slot.index, bound, node))
        })
        .collect();
    let rack_name = rack.metadata.name.as_deref().unwrap_or_default();
    let rack_version = rack
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default();
    let mut memo = context.projected_memo.lock();
    let kept = memo.entry(rack_name.to_string()).or_default();
    if kept.rack_version != rack_version {
        *kept = RackProjections {
            rack_version: rack_version.to_string(),
            slots: HashMap::new(),
        };
    }
    bound
        .into_iter()
        .map(|(index, bound, node)| {
            let Some(node) = node else {
                return (index, bound, SlotCheck::default());
            };
            let node_version = node
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or_default();
            let answer = match kept.slots.get(&index) {
                Some((at, answer))
                    if !rack_version.is_empty()
                        && !node_version.is_empty()
                        && at == node_version =>
                {
                    *answer
                }
                _ => {
                    let answer = desired_for(rack, index)
                        .is_some_and(|desired| ObservedNode::from_node(&node).matches(&desired));
                    kept.slots.insert(index, (node_version.to_string(), answer));
                    answer
                }
            };
            (
                index,
                bound,
                SlotCheck {
                    live: true,
                    projected: answer,
                },
            )
        })
        .collect()
}

fn rack_facts(context: &Context, rack: &SGPURack) -> RackFacts {
    let checks = check_slots(context, rack);
    let mut facts = RackFacts {
        assigned: checks.len(),
        metadata_conflict: context.rack_has_conflict(rack),
        ..RackFacts::default()
    };
    let rack_name = rack.metadata.name.as_deref().unwrap_or_default();
    // How often each Node UID is bound in this rack; other racks holding
    // the UID are scanned below (rare: a UID is normally bound once).
    let mut in_this_rack: HashMap<&str, usize> = HashMap::new();
    for (_, bound, _) in &checks {
        *in_this_rack.entry(bound.uid.as_str()).or_default() += 1;
    }
    for (_, bound, check) in &checks {
        if bound.uid.is_empty() || bound.name.is_empty() || !check.live {
            facts.invalid_bindings = true;
        }
        let elsewhere: usize = context
            .racks
            .by_index(INDEX_NODE_UID, &bound.uid)
            .iter()
            .filter(|other| other.metadata.name.as_deref() != Some(rack_name))
            .map(|other| {
                other
                    .spec
                    .nodes
                    .iter()
                    .filter(|slot| {
                        slot.node_ref
                            .as_ref()
                            .is_some_and(|node| node.uid == bound.uid)
                    })
                    .count()
            })
            .sum();
        if elsewhere + in_this_rack.get(bound.uid.as_str()).copied().unwrap_or(0) > 1 {
            facts.duplicate_bindings = true;
        }
        if check.projected {
            facts.projected += 1;
        }
    }
    facts
}

async fn rack(context: &Context, name: &str) -> Result<(), ReconcileError> {
    let Some(cached) = context.racks.get(name) else {
        return Ok(());
    };
    // A rack no inventory controls (a squatter, a forgery) is never written.
    if !owner_matches_inventory_ref(&cached) {
        return Ok(());
    }
    let facts = rack_facts(context, &cached);
    let desired = rack_status(
        cached.status.as_ref(),
        &facts,
        cached.metadata.generation,
        &now(),
    );
    let pending = context.pending_rack_status.lock().contains_key(name);
    if !pending {
        if cached.status.as_ref() == Some(&desired) {
            return Ok(());
        }
        // Nothing of ours is in flight, so the cached rack is the one to
        // write over: its resourceVersion is the precondition. A stale
        // cache answers 409 and the live path below takes over (upstream
        // reads the live rack before every write; this saves that read).
        match write_rack_status(context, name, &cached, desired).await {
            Ok(()) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(source) => return Err(failed_call(ApiCall::PatchRackStatus, name, source)),
        }
    }
    let api: Api<SGPURack> = Api::all(context.client.clone());
    let Some(live) = api
        .get_opt(name)
        .await
        .map_err(|source| failed_call(ApiCall::GetRack, name, source))?
    else {
        return Ok(());
    };
    if live.uid() != cached.uid() {
        return Ok(());
    }
    let desired = rack_status(
        live.status.as_ref(),
        &facts,
        live.metadata.generation,
        &now(),
    );
    if live.status.as_ref() == Some(&desired) {
        context.pending_rack_status.lock().remove(name);
        return Ok(());
    }
    write_rack_status(context, name, &live, desired)
        .await
        .map_err(|source| failed_call(ApiCall::PatchRackStatus, name, source))
}

/// A failed call about the object `name`.
fn failed_call(call: ApiCall, name: &str, source: kube::Error) -> ReconcileError {
    ReconcileError::Api {
        call,
        name: name.to_string(),
        source,
    }
}

/// Writes `desired` as the status of `over` (the cached or the live rack):
/// a JSON merge patch of the status subresource with `over`'s
/// resourceVersion as its precondition (a 409 if the rack changed since).
/// Fields `over`'s status has and `desired` lacks are sent as null, so the
/// result is exactly `desired`, as a replace would leave it. The answer,
/// the whole rack (thousands of fields at 100 Nodes), is not decoded: the
/// rack cache delivers the new version anyway. A written status is
/// pending until the cache shows it.
async fn write_rack_status(
    context: &Context,
    name: &str,
    over: &SGPURack,
    desired: SGPURackStatus,
) -> Result<(), kube::Error> {
    let mut status = serde_json::to_value(&desired).map_err(kube::Error::SerdeError)?;
    if let (Some(current), Some(fields)) = (over.status.as_ref(), status.as_object_mut()) {
        let current = serde_json::to_value(current).map_err(kube::Error::SerdeError)?;
        for key in current.as_object().into_iter().flat_map(|map| map.keys()) {
            fields.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    let body = serde_json::json!({
        "metadata": {"resourceVersion": over.metadata.resource_version},
        "status": status,
    });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let mut request = kube::core::Request::new(SGPURack::url_path(&(), None))
        .patch_subresource("status", name, &params, &Patch::Merge(&body))
        .map_err(kube::Error::BuildRequest)?;
    request.extensions_mut().insert("patch_status");
    context.client.request_text(request).await?;
    context
        .pending_rack_status
        .lock()
        .insert(name.to_string(), desired);
    Ok(())
}

/// The inventory's requested Nodes (total and per group), recounted only
/// when the catalog generation or the groups' selectors changed.
fn requested(
    context: &Context,
    name: &str,
    resolution: &Resolution,
) -> (usize, BTreeMap<String, usize>) {
    let selectors: Vec<(String, Option<LabelSelector>)> = resolution
        .groups
        .iter()
        .map(|group| (group.id.clone(), group.selector.clone()))
        .collect();
    let generation = context.catalog.lock().generation();
    if let Some((at, kept_selectors, counts)) = context.requested_memo.lock().get(name)
        && *at == generation
        && *kept_selectors == selectors
    {
        return counts.clone();
    }
    // The generation the counts are kept under is the snapshot's own.
    let (generation, nodes) = {
        let mut catalog = context.catalog.lock();
        (catalog.generation(), catalog.snapshot())
    };
    let counts = requested_nodes(resolution, &nodes);
    context
        .requested_memo
        .lock()
        .insert(name.to_string(), (generation, selectors, counts.clone()));
    counts
}

async fn inventory(context: &Context, _queues: &Queues, name: &str) -> Result<(), ReconcileError> {
    let Some(cached) = context.inventories.get(name) else {
        context.requested_memo.lock().remove(name);
        return Ok(());
    };
    let uid = cached.uid().unwrap_or_default();
    let cluster = context.cluster_plan();
    let Some(resolution) = cluster.resolution(name, &uid) else {
        return Ok(());
    };
    let result = context
        .results
        .lock()
        .get(name)
        .cloned()
        .filter(|r| r.uid == uid);
    let owned: Vec<Arc<SGPURack>> = context
        .racks
        .by_index(INDEX_INVENTORY_UID, &uid)
        .into_iter()
        .filter(|rack| is_owned_by(rack, name, &uid))
        .collect();
    let (requested, requested_per_group) = requested(context, name, resolution);

    let mut facts = InventoryFacts {
        rejection: resolution.rejection.clone(),
        issues: result
            .as_ref()
            .map(|r| r.issues.clone())
            .unwrap_or_else(|| resolution.issues.clone()),
        ownership_conflicts: result.as_ref().map_or(0, |r| r.conflicts.len()),
        racks_missing: result.as_ref().map_or(0, |r| r.racks_missing),
        ..InventoryFacts::default()
    };
    if result.is_none() && resolution.rejection.is_none() {
        // Not reconciled yet in this term: the racks are not known to be there.
        facts.racks_missing = resolution
            .groups
            .iter()
            .map(|g| g.count.max(0) as usize)
            .sum::<usize>()
            .saturating_sub(owned.len());
    }
    let mut allocated_per_group = std::collections::BTreeMap::<String, usize>::new();
    for rack in &owned {
        if context.rack_has_conflict(rack) {
            facts.metadata_conflict = true;
        }
        let mut allocated = 0;
        for (_, _, check) in check_slots(context, rack) {
            if check.live {
                allocated += 1;
                if check.projected {
                    facts.projected += 1;
                }
            }
        }
        facts.allocated += allocated;
        if allocated > 0 {
            *allocated_per_group
                .entry(rack.spec.identity.rack_group.clone())
                .or_default() += allocated;
        }
    }
    let mut pending_per_group = std::collections::BTreeMap::<String, usize>::new();
    if let Ok(allocation) = &cluster.allocation {
        for pending in allocation
            .pending
            .iter()
            .filter(|p| p.group.inventory_uid == uid)
        {
            facts.pending += 1;
            *pending_per_group
                .entry(pending.group.group.clone())
                .or_default() += 1;
        }
        facts.placement_conflicts = allocation
            .conflicts
            .iter()
            .filter(|conflict| conflict.groups.iter().any(|g| g.inventory_uid == uid))
            .count();
    }
    let capacity = if resolution.rejection.is_some() {
        InventoryCapacity::default()
    } else {
        resolution.capacity.to_status().unwrap_or_default()
    };
    let groups: Vec<RackGroupStatus> = cached
        .spec
        .rack_groups
        .iter()
        .map(|group| {
            let resolved = resolution
                .group(&group.id)
                .filter(|_| resolution.rejection.is_none());
            let group_capacity = resolved
                .map(|g| {
                    let nodes = i64::from(g.count) * i64::from(g.profile.nodes_per_rack());
                    InventoryCapacity {
                        racks: g.count,
                        nodes: i32::try_from(nodes).unwrap_or(i32::MAX),
                        gpus: i32::try_from(nodes * i64::from(g.profile.gpus_per_node()))
                            .unwrap_or(i32::MAX),
                    }
                })
                .unwrap_or_default();
            RackGroupStatus {
                id: group.id.clone(),
                profile_name: group.profile_ref.name.clone(),
                capacity: group_capacity,
                usage: usage(
                    requested_per_group.get(&group.id).copied().unwrap_or(0),
                    allocated_per_group.get(&group.id).copied().unwrap_or(0),
                    group_capacity.nodes,
                    pending_per_group.get(&group.id).copied().unwrap_or(0),
                ),
            }
        })
        .collect();
    let available: i32 = groups.iter().map(|g| g.usage.available_nodes).sum();
    let mut total_usage = usage(requested, facts.allocated, capacity.nodes, facts.pending);
    total_usage.available_nodes = available;

    let api: Api<SGPUInventory> = Api::all(context.client.clone());
    let Some(mut live_inventory) = api
        .get_opt(name)
        .await
        .map_err(|source| failed_call(ApiCall::GetInventory, name, source))?
    else {
        return Ok(());
    };
    if live_inventory.uid().as_deref() != Some(uid.as_str()) {
        return Err(ReconcileError::InventoryReplaced(name.to_string()));
    }
    let mut desired = inventory_status(
        live_inventory.status.as_ref(),
        &facts,
        rack_groups_summary(&cached),
        capacity,
        total_usage,
        groups,
        live_inventory.metadata.generation,
        &now(),
    );
    desired.runtime_policies = policy_summary(context, name);
    if live_inventory.status.as_ref() == Some(&desired) {
        return Ok(());
    }
    let reason_of = |status: Option<&crate::api::SGPUInventoryStatus>, kind: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|conditions| conditions.iter().find(|c| c.type_ == kind))
            .map(|c| c.reason.clone())
    };
    let old_programmed = reason_of(live_inventory.status.as_ref(), "Programmed");
    let old_requests = reason_of(live_inventory.status.as_ref(), "RequestsSatisfied");
    let new_programmed = reason_of(Some(&desired), "Programmed");
    let new_requests = reason_of(Some(&desired), "RequestsSatisfied");
    live_inventory.status = Some(desired);
    live_inventory.metadata.managed_fields = None;
    api.replace_status(name, &post_params(), &live_inventory)
        .await
        .map_err(|source| failed_call(ApiCall::UpdateInventoryStatus, name, source))?;
    let reference = live_inventory.object_ref(&());
    if new_programmed.as_deref() == Some("RackOwnershipConflict")
        && old_programmed != new_programmed
    {
        context
            .events
            .publish_or_log(
                &reference,
                EventType::Warning,
                "RackOwnershipConflict",
                "Reconcile",
                Some("A deterministic rack name is owned by another object.".to_string()),
            )
            .await;
    }
    if new_requests.as_deref() == Some("PendingNodes") && old_requests != new_requests {
        context
            .events
            .publish_or_log(
                &reference,
                EventType::Warning,
                "CapacityExhausted",
                "Allocate",
                Some(format!(
                    "{} requested Nodes are pending capacity.",
                    facts.pending
                )),
            )
            .await;
    }
    Ok(())
}
