//! Runtime-policy evaluation in the running controller.
//!
//! Upstream evaluates every policy of an inventory on every runtime query.
//! Here an inventory's [`Evaluation`] is computed once per input revision —
//! the inventory's UID and generation, the revision of the policies that
//! target it, and the UID and generation of each profile it references —
//! and reused by every query and status pass until one of them changes.
//! Only caches are read, so standbys evaluate exactly like the leader.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::state::Context;
use crate::api::{SGPURackProfile, SGPURuntimePolicy};
use crate::policy::{Evaluation, EvaluationError, EvaluationInput};

/// Policy store index: `spec.targetRef.name`, upstream's
/// `mokkaRuntimePolicyByTarget` (conflicts are settled per inventory).
pub(crate) const INDEX_POLICY_TARGET: &str = "policy-target";

/// An object's (UID, generation): what identifies one revision of its spec.
type Revision = (String, Option<i64>);

/// What an inventory's evaluation depends on. Equal keys mean equal inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct EvaluationKey {
    /// (UID, generation) of the cached inventory; `None` when absent.
    inventory: Option<Revision>,
    /// Bumped by every relevant change of a policy targeting the inventory.
    policies: u64,
    /// Per referenced profile name: (UID, generation), `None` when absent.
    profiles: Vec<(String, Option<Revision>)>,
}

/// The result of one evaluation, shared by every reader of its revision.
pub type EvaluationResult = Result<Evaluation, EvaluationError>;

/// Evaluations per inventory name and the per-inventory policy revisions.
#[derive(Default)]
pub(crate) struct PolicyEvaluations {
    revisions: Mutex<HashMap<String, u64>>,
    cache: Mutex<HashMap<String, (EvaluationKey, Arc<EvaluationResult>)>>,
    /// How many evaluations were computed (not served from the cache).
    computed: AtomicU64,
    /// Policy fingerprints by name, to tell relevant changes from status writes.
    seen: Mutex<HashMap<String, (u64, String)>>,
}

impl PolicyEvaluations {
    /// Records a policy event; returns the inventories whose evaluation
    /// inputs changed (old and new target when retargeted), or nothing for
    /// a change that cannot alter any decision (status, labels).
    pub fn observe(&self, policy: &SGPURuntimePolicy, deleted: bool) -> Vec<String> {
        let name = policy.metadata.name.clone().unwrap_or_default();
        let target = policy.spec.target_ref.name.clone();
        let fingerprint = policy_fingerprint(policy);
        let previous = {
            let mut seen = self.seen.lock();
            if deleted {
                seen.remove(&name)
            } else {
                seen.insert(name, (fingerprint, target.clone()))
            }
        };
        let mut changed = Vec::new();
        match previous {
            Some((old, _)) if !deleted && old == fingerprint => {}
            Some((_, old_target)) => {
                changed.push(old_target);
                changed.push(target);
            }
            None => changed.push(target),
        }
        changed.sort();
        changed.dedup();
        let mut revisions = self.revisions.lock();
        for inventory in &changed {
            *revisions.entry(inventory.clone()).or_default() += 1;
        }
        changed
    }

    fn revision(&self, inventory: &str) -> u64 {
        self.revisions.lock().get(inventory).copied().unwrap_or(0)
    }

    /// Evaluations computed so far (a repeated query at one revision adds none).
    pub fn computed(&self) -> u64 {
        self.computed.load(Ordering::SeqCst)
    }
}

/// Everything about a policy that a decision can depend on: identity, age,
/// generation and spec (target and runtime). Status writes leave it alone.
fn policy_fingerprint(policy: &SGPURuntimePolicy) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    policy.metadata.uid.hash(&mut hasher);
    policy.metadata.generation.hash(&mut hasher);
    policy
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|time| time.0.as_nanosecond())
        .hash(&mut hasher);
    // The spec has floats nowhere that matter for hashing; its JSON is canonical
    // for one struct (field order is fixed), so it identifies the spec.
    serde_json::to_string(&policy.spec)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

/// The profile names an inventory's groups reference, sorted and unique.
fn referenced_profiles(context: &Context, inventory: &str) -> Vec<String> {
    let mut names: Vec<String> = context
        .inventories
        .get(inventory)
        .map(|inventory| {
            inventory
                .spec
                .rack_groups
                .iter()
                .map(|group| group.profile_ref.name.clone())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.dedup();
    names
}

fn key_of(context: &Context, inventory: &str) -> EvaluationKey {
    let cached = context.inventories.get(inventory);
    EvaluationKey {
        inventory: cached.as_ref().map(|inventory| {
            (
                inventory.metadata.uid.clone().unwrap_or_default(),
                inventory.metadata.generation,
            )
        }),
        policies: context.evaluations.revision(inventory),
        profiles: referenced_profiles(context, inventory)
            .into_iter()
            .map(|name| {
                let profile = context.profiles.get(&name).map(|profile| {
                    (
                        profile.metadata.uid.clone().unwrap_or_default(),
                        profile.metadata.generation,
                    )
                });
                (name, profile)
            })
            .collect(),
    }
}

/// The evaluation of `inventory`'s policies at the caches' current
/// revision: a lookup unless an input changed since the last call.
pub(crate) fn evaluation(context: &Context, inventory: &str) -> Arc<EvaluationResult> {
    let key = key_of(context, inventory);
    if let Some((cached_key, result)) = context.evaluations.cache.lock().get(inventory)
        && *cached_key == key
    {
        return Arc::clone(result);
    }
    // Inputs are read after the key, so they are at least as new as it; a
    // newer input changes the key of the next call, which evaluates again.
    let cached_inventory = context.inventories.get(inventory);
    let profiles: BTreeMap<String, SGPURackProfile> = referenced_profiles(context, inventory)
        .into_iter()
        .filter_map(|name| {
            let profile = context.profiles.get(&name)?;
            Some((name, (*profile).clone()))
        })
        .collect();
    let policies: Vec<SGPURuntimePolicy> = context
        .policies
        .by_index(INDEX_POLICY_TARGET, inventory)
        .into_iter()
        .map(|policy| (*policy).clone())
        .collect();
    let result = Arc::new(Evaluation::new(EvaluationInput {
        inventory_name: inventory,
        inventory: cached_inventory.as_deref(),
        profiles: &profiles,
        policies: &policies,
    }));
    context.evaluations.computed.fetch_add(1, Ordering::SeqCst);
    // Once per input revision, not per query: a converged cluster logs nothing.
    if let Ok(evaluation) = result.as_ref() {
        for decision in evaluation.decisions() {
            tracing::debug!(
                inventory,
                policy = %decision.name,
                uid = %decision.uid,
                generation = decision.generation,
                scope = decision.scope.as_str(),
                outcome = decision.outcome.as_str(),
                detail = %decision.message,
                "Runtime policy decided"
            );
        }
    }
    let mut cache = context.evaluations.cache.lock();
    if cached_inventory.is_none() && policies.is_empty() {
        // Nothing to remember for a name nobody uses any more.
        cache.remove(inventory);
    } else {
        cache.insert(inventory.to_string(), (key, Arc::clone(&result)));
    }
    result
}
