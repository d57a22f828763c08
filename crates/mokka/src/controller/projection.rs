//! The projection reconciler, keyed by Node name: first the requested
//! cleanups of that Node's released bindings, then the projection of its
//! one current binding. Every write is a non-forced server-side apply by
//! `mokka-controller` of a minimal Node with its UID, so a value another
//! manager owns is reported as a conflict, never overwritten.

use std::sync::Arc;

use crate::node_meta::NodeMeta;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::state::{Context, OutcomeState};
use super::{ApiCall, INDEX_NODE_NAME, INDEX_NODE_UID, Queues, ReconcileError};
use crate::api::{ANNOTATION_SGPU_ASSIGNMENT, LABEL_GPU_CLIQUE, LABEL_SGPU_ASSIGNED};
use crate::identity::fabric_uuid;
use crate::plan::inventory::ExactBinding;
use crate::plan::projection::{
    ASSIGNED_VALUE, Assignment, CleanupDecision, FIELD_MANAGER, ObservedNode, ProjectDecision,
    cleanup_retains, clique_value, decide_cleanup, decide_project, desired_for, names_binding,
    released_keys, verify_applied,
};
use crate::plan::rack::owner_matches_inventory_ref;
use controller_kit::error::is_status;

fn apply_params() -> PatchParams {
    // Never forced: a key another manager owns must stay theirs.
    PatchParams::apply(FIELD_MANAGER)
}

pub(crate) async fn reconcile_node(
    context: &Arc<Context>,
    queues: &Arc<Queues>,
    name: &str,
    cancel: &CancellationToken,
) -> Result<(), ReconcileError> {
    let node: Option<NodeMeta> = match context.nodes.get(name) {
        Some(node) => Some((*node).clone()),
        None => context.live_nodes.get(name, cancel).await?,
    };
    let mut observed = node.as_ref().map(ObservedNode::from_node);
    if let Some(observed) = &observed {
        controller_kit::record_uid(&observed.uid);
    }
    let api: Api<NodeMeta> = Api::all(context.client.clone());

    // Cleanups first: a binding's metadata must be gone before its slot is cleared.
    let requests: Vec<ExactBinding> = context
        .cleanup
        .lock()
        .requested
        .get(name)
        .map(|requests| requests.keys().cloned().collect())
        .unwrap_or_default();
    for binding in requests {
        let clique = clique_value(
            &fabric_uuid(&binding.inventory_uid, &binding.group, binding.rack_index),
            0,
        );
        let decision = decide_cleanup(
            observed.as_ref(),
            &binding.node.uid,
            |assignment: &Assignment| names_binding(assignment, &binding),
            &clique,
        );
        match decision {
            CleanupDecision::AlreadyClean => acknowledge(context, queues, &binding),
            CleanupDecision::Blocked(message) => {
                block(context, &binding, observed.as_ref(), &message);
            }
            CleanupDecision::Relinquish { keep_annotation } => {
                let Some(current) = observed.as_ref() else {
                    continue;
                };
                if context.cleanup.lock().blocked.get(&binding) == Some(current) {
                    continue;
                }
                let mut metadata = json!({"name": name, "uid": binding.node.uid});
                if keep_annotation && let Some(annotation) = &current.annotation {
                    metadata["annotations"] = json!({ ANNOTATION_SGPU_ASSIGNMENT: annotation });
                }
                let body = json!({"apiVersion": "v1", "kind": "Node", "metadata": metadata});
                context.metrics.node_patches.inc();
                match api.patch(name, &apply_params(), &Patch::Apply(&body)).await {
                    Ok(response) => {
                        let response = ObservedNode::from_node(&response);
                        if cleanup_retains(&response, &released_keys(keep_annotation))
                            || keep_annotation
                        {
                            block(
                                context,
                                &binding,
                                Some(&response),
                                "cleanup left co-owned projection fields",
                            );
                        } else {
                            acknowledge(context, queues, &binding);
                        }
                        observed = Some(response);
                    }
                    Err(error)
                        if is_status(&error, 404)
                            || is_status(&error, 409)
                                && !node_exists(&api, name, &binding.node.uid).await =>
                    {
                        acknowledge(context, queues, &binding);
                    }
                    Err(source) => {
                        context.set_outcome(&binding, OutcomeState::Error, "ProjectionError");
                        return Err(ReconcileError::Api {
                            call: ApiCall::ApplyNode,
                            name: name.to_string(),
                            source,
                        });
                    }
                }
            }
        }
    }

    // Then the current binding.
    let bindings = current_bindings(context, name);
    let Some(observed) = observed else {
        for binding in &bindings {
            context.set_outcome(binding, OutcomeState::Absent, "ExactNodeAbsent");
            queues.rack_status(&binding.rack_name);
        }
        return Ok(());
    };
    let (exact, replaced): (Vec<ExactBinding>, Vec<ExactBinding>) = bindings
        .into_iter()
        .partition(|binding| binding.node.uid == observed.uid);
    for binding in &replaced {
        context.set_outcome(binding, OutcomeState::Absent, "ExactNodeAbsent");
        queues.rack_status(&binding.rack_name);
    }
    let bound_anywhere = context
        .racks
        .by_index(INDEX_NODE_UID, &observed.uid)
        .iter()
        .map(|rack| {
            rack.spec
                .nodes
                .iter()
                .filter(|slot| {
                    slot.node_ref
                        .as_ref()
                        .is_some_and(|n| n.uid == observed.uid)
                })
                .count()
        })
        .sum::<usize>();
    if exact.len() > 1 || bound_anywhere > 1 {
        for binding in &exact {
            context.set_outcome(binding, OutcomeState::Conflict, "DuplicateBinding");
            queues.rack_status(&binding.rack_name);
        }
        return Ok(());
    }
    let Some(binding) = exact.into_iter().next() else {
        return remove_stale_projection(context, &api, &observed).await;
    };
    let Some(rack) = context.racks.get(&binding.rack_name) else {
        return Ok(());
    };
    let Some(desired) = desired_for(&rack, binding.node_index) else {
        return Ok(());
    };
    queues.rack_status(&binding.rack_name);
    queues.inventory_status(&binding.inventory_name);
    match decide_project(&observed, &desired) {
        ProjectDecision::UpToDate => {
            context.set_outcome(&binding, OutcomeState::Projected, "Projected");
            Ok(())
        }
        ProjectDecision::Conflict(message) => {
            tracing::warn!(node = %name, %message, "Node metadata conflict");
            context.metrics.projection_conflicts.inc();
            context.set_outcome(&binding, OutcomeState::Conflict, "NodeMetadataConflict");
            Ok(())
        }
        ProjectDecision::Apply => {
            let body = json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": observed.uid,
                    "labels": { LABEL_SGPU_ASSIGNED: ASSIGNED_VALUE, LABEL_GPU_CLIQUE: desired.clique },
                    "annotations": { ANNOTATION_SGPU_ASSIGNMENT: desired.annotation },
                }
            });
            context.metrics.node_patches.inc();
            match api.patch(name, &apply_params(), &Patch::Apply(&body)).await {
                Ok(response) => {
                    let response = ObservedNode::from_node(&response);
                    match verify_applied(&response, name, &observed.uid, &desired) {
                        Ok(()) => {
                            context.set_outcome(&binding, OutcomeState::Projected, "Projected")
                        }
                        Err(message) => {
                            tracing::warn!(node = %name, %message, "Node metadata conflict");
                            context.metrics.projection_conflicts.inc();
                            context.set_outcome(
                                &binding,
                                OutcomeState::Conflict,
                                "NodeMetadataConflict",
                            );
                        }
                    }
                    Ok(())
                }
                Err(error) if is_status(&error, 409) => {
                    tracing::warn!(node = %name, %error, "Node metadata conflict");
                    context.metrics.projection_conflicts.inc();
                    context.set_outcome(&binding, OutcomeState::Conflict, "NodeMetadataConflict");
                    Ok(())
                }
                Err(source) => {
                    context.set_outcome(&binding, OutcomeState::Error, "ProjectionError");
                    Err(ReconcileError::Api {
                        call: ApiCall::ApplyNode,
                        name: name.to_string(),
                        source,
                    })
                }
            }
        }
    }
}

async fn node_exists(api: &Api<NodeMeta>, name: &str, uid: &str) -> bool {
    matches!(api.get_opt(name).await, Ok(Some(node)) if node.metadata.uid.as_deref() == Some(uid))
}

/// The bindings of this Node name that should be projected: in racks
/// controlled by the inventory they name, that inventory cached with that
/// UID and not deleting, the rack not deleting, and no cleanup requested or
/// acknowledged for the binding (a stale apply never recreates cleaned
/// metadata).
fn current_bindings(context: &Context, name: &str) -> Vec<ExactBinding> {
    let book = context.cleanup.lock();
    let mut bindings = Vec::new();
    for rack in context.racks.by_index(INDEX_NODE_NAME, name) {
        if rack.metadata.deletion_timestamp.is_some() || !owner_matches_inventory_ref(&rack) {
            continue;
        }
        let inventory_live = context
            .inventories
            .get(&rack.spec.inventory_ref.name)
            .is_some_and(|inventory| {
                inventory.metadata.uid.as_deref() == Some(rack.spec.inventory_ref.uid.as_str())
                    && inventory.metadata.deletion_timestamp.is_none()
            });
        if !inventory_live {
            continue;
        }
        let slots = rack
            .spec
            .nodes
            .iter()
            .filter(|slot| slot.node_ref.as_ref().is_some_and(|node| node.name == name));
        for binding in slots.filter_map(|slot| ExactBinding::of(&rack, slot.index)) {
            if !book.is_requested(&binding) && !book.acknowledged.contains(&binding) {
                bindings.push(binding);
            }
        }
    }
    bindings
}

/// A Node that carries our projection for a binding no cached rack holds
/// (for example after a restart, or a rack deleted while we were down):
/// relinquish our keys.
async fn remove_stale_projection(
    context: &Context,
    api: &Api<NodeMeta>,
    observed: &ObservedNode,
) -> Result<(), ReconcileError> {
    let ours = [
        crate::plan::projection::ProjectionKey::AssignedLabel,
        crate::plan::projection::ProjectionKey::CliqueLabel,
        crate::plan::projection::ProjectionKey::AssignmentAnnotation,
    ]
    .iter()
    .any(|key| observed.ownership.ours(*key));
    if !ours {
        return Ok(());
    }
    if let Some(annotation) = &observed.annotation
        && let Ok(assignment) = Assignment::decode(annotation)
        && let Some(rack) = context.racks.get(&assignment.rack.name)
        && rack.metadata.uid.as_deref() == Some(assignment.rack.uid.as_str())
        && rack
            .spec
            .node_by_index(assignment.node_index)
            .is_some_and(|slot| {
                slot.node_ref
                    .as_ref()
                    .is_some_and(|n| n.uid == observed.uid)
            })
    {
        // Still bound (a cleanup or a conflict owns this case).
        return Ok(());
    }
    let body = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": observed.name, "uid": observed.uid}});
    context.metrics.node_patches.inc();
    match api
        .patch(&observed.name, &apply_params(), &Patch::Apply(&body))
        .await
    {
        Ok(_) => {
            tracing::info!(node = %observed.name, "Removed stale Node projection");
            Ok(())
        }
        Err(error) if is_status(&error, 404) || is_status(&error, 409) => Ok(()),
        Err(source) => Err(ReconcileError::Api {
            call: ApiCall::ApplyNode,
            name: observed.name.clone(),
            source,
        }),
    }
}

fn acknowledge(context: &Context, queues: &Queues, binding: &ExactBinding) {
    {
        let mut book = context.cleanup.lock();
        if let Some(requests) = book.requested.get_mut(&binding.node.name) {
            requests.remove(binding);
            if requests.is_empty() {
                book.requested.remove(&binding.node.name);
            }
        }
        book.blocked.remove(binding);
        // Kept only while the exact binding is still in the rack cache.
        let still_bound = context
            .racks
            .get(&binding.rack_name)
            .and_then(|rack| ExactBinding::of(&rack, binding.node_index))
            .as_ref()
            == Some(binding);
        if still_bound {
            book.acknowledged.insert(binding.clone());
        }
    }
    context.set_outcome(binding, OutcomeState::Cleaned, "Cleaned");
    // The rack's group reconcile clears the slot (or retires the rack).
    queues.group(crate::allocate::GroupKey::new(
        &binding.inventory_name,
        &binding.inventory_uid,
        &binding.group,
    ));
    queues.rack_status(&binding.rack_name);
    queues.inventory_status(&binding.inventory_name);
}

fn block(
    context: &Context,
    binding: &ExactBinding,
    observed: Option<&ObservedNode>,
    message: &str,
) {
    let mut book = context.cleanup.lock();
    if let Some(observed) = observed
        && book.blocked.get(binding) != Some(observed)
    {
        tracing::warn!(node = %binding.node.name, %message, "projection cleanup blocked");
        book.blocked.insert(binding.clone(), observed.clone());
    }
    drop(book);
    context.set_outcome(binding, OutcomeState::Conflict, "NodeMetadataConflict");
}
