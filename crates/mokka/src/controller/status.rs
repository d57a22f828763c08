//! The status reconcilers (upstream 3.9), fed through the coalescer. Inputs
//! come from the caches and the latest rack result; nothing is listed.
//! Inventory status is compared with a live GET; rack status trusts the
//! cache unless a write of ours is still pending (the ABA guard).

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::state::Context;
use super::{BoxError, INDEX_INVENTORY_UID, INDEX_NODE_UID, Queues, StatusKey};
use crate::api::{
    InventoryCapacity, NodeRef, RackGroupStatus, RuntimePolicySummary, SGPUInventory, SGPURack,
    SGPURuntimePolicy, SGPURuntimePolicyStatus,
};
use crate::plan::inventory::{ExactBinding, rack_groups_summary, requested_nodes};
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
) -> Result<(), BoxError> {
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

/// Upstream's runtime-policy status reconcile (3.11): each decision becomes
/// the policy's status; converged policies cost no API call; a live GET
/// guards against writing over a newer spec; one failed write does not stop
/// the others, and the joined error retries the inventory.
async fn runtime_policies(context: &Context, inventory: &str) -> Result<(), BoxError> {
    let evaluation = super::policies::evaluation(context, inventory);
    let evaluation = match evaluation.as_ref() {
        Ok(evaluation) => evaluation,
        Err(error) => {
            return Err(format!(
                "evaluate runtime policies of SGPUInventory {}: {error}",
                go_quote(inventory)
            )
            .into());
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
        Err(errors.join("; ").into())
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

/// Whether the cached Node with this binding's name and UID carries
/// exactly its projection, owned by us.
/// Whether the Node bound at `rack`'s slot `node_index` carries its projection.
fn projected(context: &Context, rack: &SGPURack, node_index: i32, bound: &NodeRef) -> bool {
    let Some(node) = context.nodes.get(&bound.name) else {
        return false;
    };
    if node.metadata.uid.as_deref() != Some(bound.uid.as_str()) {
        return false;
    }
    // Rendering the desired annotation costs a JSON encoding; an inventory
    // status visits every binding (100,000 at the scale target) once per
    // progress interval, so the answer is kept per (rack, Node) version.
    let versions = (
        rack.metadata.resource_version.clone().unwrap_or_default(),
        node.metadata.resource_version.clone().unwrap_or_default(),
    );
    let key = (rack.metadata.name.clone().unwrap_or_default(), node_index);
    if !versions.0.is_empty()
        && !versions.1.is_empty()
        && let Some((at, answer)) = context.projected_memo.lock().get(&key)
        && *at == versions
    {
        return *answer;
    }
    let answer = desired_for(rack, node_index)
        .is_some_and(|desired| ObservedNode::from_node(&node).matches(&desired));
    context
        .projected_memo
        .lock()
        .insert(key, (versions, answer));
    answer
}

fn live(context: &Context, bound: &NodeRef) -> bool {
    context
        .nodes
        .get(&bound.name)
        .is_some_and(|node| node.metadata.uid.as_deref() == Some(bound.uid.as_str()))
}

fn rack_facts(context: &Context, rack: &SGPURack) -> RackFacts {
    let bindings = ExactBinding::all_of(rack);
    let mut facts = RackFacts {
        assigned: bindings.len(),
        metadata_conflict: context.rack_has_conflict(rack),
        ..RackFacts::default()
    };
    let mut seen = HashSet::new();
    for binding in &bindings {
        if binding.node.uid.is_empty()
            || binding.node.name.is_empty()
            || !live(context, &binding.node)
        {
            facts.invalid_bindings = true;
        }
        let elsewhere: usize = context
            .racks
            .by_index(INDEX_NODE_UID, &binding.node.uid)
            .iter()
            .map(|other| {
                other
                    .spec
                    .nodes
                    .iter()
                    .filter(|slot| {
                        slot.node_ref
                            .as_ref()
                            .is_some_and(|node| node.uid == binding.node.uid)
                    })
                    .count()
            })
            .sum();
        if elsewhere > 1 || !seen.insert(binding.node.uid.clone()) {
            facts.duplicate_bindings = true;
        }
        if projected(context, rack, binding.node_index, &binding.node) {
            facts.projected += 1;
        }
    }
    facts
}

async fn rack(context: &Context, name: &str) -> Result<(), BoxError> {
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
    if !pending && cached.status.as_ref() == Some(&desired) {
        return Ok(());
    }
    let api: Api<SGPURack> = Api::all(context.client.clone());
    let Some(mut live) = api.get_opt(name).await? else {
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
    live.status = Some(desired.clone());
    live.metadata.managed_fields = None;
    api.replace_status(name, &post_params(), &live).await?;
    context
        .pending_rack_status
        .lock()
        .insert(name.to_string(), desired);
    Ok(())
}

async fn inventory(context: &Context, _queues: &Queues, name: &str) -> Result<(), BoxError> {
    let Some(cached) = context.inventories.get(name) else {
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
    let nodes = context.catalog.lock().snapshot();
    let (requested, requested_per_group) = requested_nodes(resolution, &nodes);

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
        for slot in &rack.spec.nodes {
            let Some(bound) = &slot.node_ref else {
                continue;
            };
            if live(context, bound) {
                allocated += 1;
                if projected(context, rack, slot.index, bound) {
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
    let Some(mut live_inventory) = api.get_opt(name).await? else {
        return Ok(());
    };
    if live_inventory.uid().as_deref() != Some(uid.as_str()) {
        return Err(format!("inventory {name:?} was replaced; retrying status").into());
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
        .await?;
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
