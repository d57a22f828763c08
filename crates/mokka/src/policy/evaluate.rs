//! Policy evaluation: one value per input revision that holds every
//! policy's decision and an index of accepted layers, queried per GPU.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::merge::field_paths;
use super::target::{GroupBounds, GroupSelection, Scope, resolve_target, summaries};
use crate::MokkaError;
use crate::api::{
    RuntimeState, SGPUInventory, SGPURackProfile, SGPURuntimePolicy, SGPURuntimePolicyStatus,
};
use crate::text::go_quote;

/// The `Accepted` condition reason of a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Accepted,
    TargetNotFound,
    InvalidTarget,
    Conflicted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Accepted => "Accepted",
            Outcome::TargetNotFound => "TargetNotFound",
            Outcome::InvalidTarget => "InvalidTarget",
            Outcome::Conflicted => "Conflicted",
        }
    }
}

/// The condition type a policy's decision is reported under.
pub const CONDITION_ACCEPTED: &str = "Accepted";

/// What evaluation decided for one policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub name: String,
    pub uid: String,
    pub generation: Option<i64>,
    pub scope: Scope,
    pub outcome: Outcome,
    pub message: String,
    /// `field_paths` of the policy's runtime.
    pub fields: Vec<String>,
}

/// The GPU a runtime query is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GpuCoordinate<'a> {
    pub group: &'a str,
    pub rack: i32,
    pub node: i32,
    pub gpu: i32,
}

/// Everything one evaluation depends on.
#[derive(Clone, Copy, Debug)]
pub struct EvaluationInput<'a> {
    pub inventory_name: &'a str,
    /// `None` when the inventory does not exist.
    pub inventory: Option<&'a SGPUInventory>,
    /// Cached profiles by name; a group whose profile is absent has unknown
    /// Node and GPU counts.
    pub profiles: &'a BTreeMap<String, SGPURackProfile>,
    /// Every policy targeting `inventory_name`, in any order.
    pub policies: &'a [SGPURuntimePolicy],
}

/// An accepted policy's selection in one group.
#[derive(Clone, Debug)]
struct Layer {
    /// Position in the global layering order: scope, then oldest first.
    order: usize,
    selection: GroupSelection,
    /// Index into `Evaluation::accepted`.
    policy: usize,
}

/// The layers of one group, indexed so a query visits only the layers that
/// can select its rack.
#[derive(Clone, Debug, Default)]
struct GroupLayers {
    /// Layers that select every rack, in layering order.
    every_rack: Vec<Layer>,
    /// Layers that list racks, by rack index, in layering order.
    by_rack: HashMap<i32, Vec<Layer>>,
}

/// An accepted policy and what it sets (`None`: nothing).
#[derive(Clone, Debug)]
struct AcceptedPolicy {
    name: String,
    runtime: Option<RuntimeState>,
}

/// The result of evaluating an inventory's policies. Build it once per input
/// revision, then query it per GPU.
#[derive(Clone, Debug, Default)]
pub struct Evaluation {
    decisions: Vec<Decision>,
    accepted: Vec<AcceptedPolicy>,
    groups: HashMap<String, GroupLayers>,
}

struct Candidate<'a> {
    policy: &'a SGPURuntimePolicy,
    name: String,
    uid: String,
    created: Option<Time>,
    scope: Scope,
    fields: Vec<String>,
    resolved: Result<BTreeMap<String, GroupSelection>, (Outcome, String)>,
}

/// Why an inventory's policies cannot be evaluated: upstream's only
/// evaluation error, a policy runtime whose field paths cannot be listed.
#[derive(Debug, thiserror::Error)]
#[error("list the runtime fields of policy {}: {source}", go_quote(.policy))]
pub struct EvaluationError {
    pub policy: String,
    #[source]
    pub source: MokkaError,
}

impl Evaluation {
    /// Evaluates every policy of one inventory. Pure: the result does not
    /// depend on the order of `input.policies`. As upstream, it fails only
    /// when the runtime of a policy whose target resolves cannot be encoded
    /// to list its field paths; invalid and conflicting policies are
    /// decisions.
    pub fn new(input: EvaluationInput<'_>) -> Result<Evaluation, EvaluationError> {
        Self::with_field_paths(input, field_paths)
    }

    /// `new` with the field-path listing passed in, so its failure path is
    /// testable.
    pub(crate) fn with_field_paths(
        input: EvaluationInput<'_>,
        list_fields: impl Fn(&RuntimeState) -> Result<Vec<String>, MokkaError>,
    ) -> Result<Evaluation, EvaluationError> {
        let bounds = input
            .inventory
            .map(|inventory| group_bounds(inventory, input.profiles));

        let mut candidates: Vec<Candidate<'_>> = Vec::with_capacity(input.policies.len());
        for policy in input.policies {
            let target = &policy.spec.target_ref;
            let name = policy.metadata.name.clone().unwrap_or_default();
            // Upstream lists fields only for policies whose target resolves.
            let resolved = match &bounds {
                None => Err((
                    Outcome::TargetNotFound,
                    format!(
                        "SGPUInventory {} does not exist.",
                        go_quote(input.inventory_name)
                    ),
                )),
                Some(bounds) => resolve_target(input.inventory_name, target, bounds)
                    .map_err(|message| (Outcome::InvalidTarget, message)),
            };
            let fields = match (&resolved, policy.spec.runtime.as_ref()) {
                (Ok(_), Some(runtime)) => {
                    list_fields(runtime).map_err(|source| EvaluationError {
                        policy: name.clone(),
                        source,
                    })?
                }
                _ => Vec::new(),
            };
            candidates.push(Candidate {
                policy,
                uid: policy.metadata.uid.clone().unwrap_or_default(),
                created: policy.metadata.creation_timestamp.clone(),
                scope: Scope::of(target),
                fields,
                resolved,
                name,
            });
        }

        // Oldest first; UID (then name, for inputs without UIDs) breaks ties,
        // so the settlement is independent of list order.
        candidates
            .sort_by(|a, b| (&a.created, &a.uid, &a.name).cmp(&(&b.created, &b.uid, &b.name)));

        let mut decisions = Vec::with_capacity(candidates.len());
        // Accepted candidates so far, by scope: (candidate index).
        let mut accepted_by_scope: HashMap<Scope, Vec<usize>> = HashMap::new();
        let mut accepted_order: Vec<usize> = Vec::new();
        for (index, candidate) in candidates.iter().enumerate() {
            let (outcome, message) = match &candidate.resolved {
                Err((outcome, message)) => (*outcome, message.clone()),
                Ok(selection) => {
                    let winner = accepted_by_scope
                        .get(&candidate.scope)
                        .into_iter()
                        .flatten()
                        .find_map(|&other| {
                            let other = &candidates[other];
                            let shared = shared_fields(&candidate.fields, &other.fields);
                            if shared.is_empty() {
                                return None;
                            }
                            let other_selection = other.resolved.as_ref().ok()?;
                            let overlaps = selection.iter().any(|(group, mine)| {
                                other_selection
                                    .get(group)
                                    .is_some_and(|theirs| mine.overlaps(theirs))
                            });
                            overlaps.then(|| (other.name.clone(), shared))
                        });
                    match winner {
                        Some((winner, shared)) => (
                            Outcome::Conflicted,
                            format!(
                                "Policy {} takes precedence at {} scope and also sets {} for some of the same GPUs.",
                                go_quote(&winner),
                                candidate.scope,
                                shared.join(", ")
                            ),
                        ),
                        None => {
                            accepted_by_scope
                                .entry(candidate.scope)
                                .or_default()
                                .push(index);
                            accepted_order.push(index);
                            (
                                Outcome::Accepted,
                                format!("The policy applies at {} scope.", candidate.scope),
                            )
                        }
                    }
                }
            };
            decisions.push(Decision {
                name: candidate.name.clone(),
                uid: candidate.uid.clone(),
                generation: candidate.policy.metadata.generation,
                scope: candidate.scope,
                outcome,
                message,
                fields: candidate.fields.clone(),
            });
        }
        decisions.sort_by(|a, b| (&a.name, &a.uid).cmp(&(&b.name, &b.uid)));

        // Layering: broadest scope first, oldest first within a scope (the
        // sort is stable over the oldest-first acceptance order).
        accepted_order.sort_by_key(|&index| candidates[index].scope);
        let mut accepted = Vec::new();
        let mut groups: HashMap<String, GroupLayers> = HashMap::new();
        for (order, &index) in accepted_order.iter().enumerate() {
            let candidate = &candidates[index];
            let Ok(selection) = &candidate.resolved else {
                continue;
            };
            // A policy without runtime sets nothing, but it is applied (and
            // listed by `applied`) like any other, as upstream.
            let policy = accepted.len();
            accepted.push(AcceptedPolicy {
                name: candidate.name.clone(),
                runtime: candidate.policy.spec.runtime.clone(),
            });
            for (group, group_selection) in selection {
                let layers = groups.entry(group.clone()).or_default();
                let layer = Layer {
                    order,
                    selection: group_selection.clone(),
                    policy,
                };
                match &group_selection.racks {
                    super::target::AxisSelection::All => layers.every_rack.push(layer),
                    super::target::AxisSelection::Only(racks) => {
                        for rack in racks {
                            layers.by_rack.entry(*rack).or_default().push(layer.clone());
                        }
                    }
                }
            }
        }
        Ok(Evaluation {
            decisions,
            accepted,
            groups,
        })
    }

    /// One decision per policy, sorted by policy name.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// The decision for policy `name`.
    pub fn decision(&self, name: &str) -> Option<&Decision> {
        self.decisions.iter().find(|decision| decision.name == name)
    }

    /// Calls `visit` with the runtime of every accepted policy selecting the
    /// coordinate, broadest first (the order they layer in).
    fn for_each_applied<'s>(
        &'s self,
        coordinate: GpuCoordinate<'_>,
        mut visit: impl FnMut(&'s AcceptedPolicy),
    ) {
        let Some(layers) = self.groups.get(coordinate.group) else {
            return;
        };
        let listed: &[Layer] = layers
            .by_rack
            .get(&coordinate.rack)
            .map_or(&[], Vec::as_slice);
        let every: &[Layer] = &layers.every_rack;
        // Merge two lists already in layering order.
        let (mut i, mut j) = (0, 0);
        while i < every.len() || j < listed.len() {
            let take_every =
                j >= listed.len() || (i < every.len() && every[i].order < listed[j].order);
            let layer = if take_every {
                i += 1;
                &every[i - 1]
            } else {
                j += 1;
                &listed[j - 1]
            };
            if layer
                .selection
                .contains(coordinate.rack, coordinate.node, coordinate.gpu)
            {
                visit(&self.accepted[layer.policy]);
            }
        }
    }

    /// Names of the accepted policies that select the coordinate, broadest
    /// first, including accepted policies without a runtime (as upstream's
    /// `Applied`).
    pub fn applied(&self, coordinate: GpuCoordinate<'_>) -> Vec<&str> {
        let mut names = Vec::new();
        self.for_each_applied(coordinate, |policy| names.push(policy.name.as_str()));
        names
    }

    /// The effective runtime of one GPU: `defaults` overridden by every
    /// applied policy, broadest first.
    pub fn runtime(
        &self,
        defaults: Option<&RuntimeState>,
        coordinate: GpuCoordinate<'_>,
    ) -> RuntimeState {
        let mut state = defaults.cloned().unwrap_or_default();
        self.for_each_applied(coordinate, |policy| {
            if let Some(runtime) = &policy.runtime {
                state.apply_override(runtime);
            }
        });
        state
    }
}

fn group_bounds(
    inventory: &SGPUInventory,
    profiles: &BTreeMap<String, SGPURackProfile>,
) -> BTreeMap<String, GroupBounds> {
    inventory
        .spec
        .rack_groups
        .iter()
        .map(|group| {
            let nodes_and_gpus = profiles.get(&group.profile_ref.name).map(|profile| {
                (
                    profile.spec.rack.nodes_per_rack,
                    profile.spec.node.gpus.count,
                )
            });
            (
                group.id.clone(),
                GroupBounds {
                    racks: group.count,
                    nodes_and_gpus,
                },
            )
        })
        .collect()
}

fn shared_fields(a: &[String], b: &[String]) -> Vec<String> {
    // Both are sorted (field_paths sorts).
    let (mut i, mut j) = (0, 0);
    let mut shared = Vec::new();
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Equal => {
                shared.push(a[i].clone());
                i += 1;
                j += 1;
            }
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
        }
    }
    shared
}

/// The status a policy should have after `decision`. The `Accepted`
/// condition keeps `lastTransitionTime` from `previous` unless its status or
/// reason changes; `now` is the transition time otherwise.
pub fn policy_status(
    policy: &SGPURuntimePolicy,
    decision: &Decision,
    previous: Option<&SGPURuntimePolicyStatus>,
    now: &Time,
) -> SGPURuntimePolicyStatus {
    let [
        rack_groups_summary,
        rack_indexes_summary,
        node_indexes_summary,
        gpu_indexes_summary,
    ] = summaries(&policy.spec.target_ref);
    let status = if decision.outcome == Outcome::Accepted {
        "True"
    } else {
        "False"
    };
    let reason = decision.outcome.as_str();
    let previous_condition = previous
        .and_then(|previous| previous.conditions.as_ref())
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|condition| condition.type_ == CONDITION_ACCEPTED)
        });
    let last_transition_time = match previous_condition {
        Some(condition) if condition.status == status && condition.reason == reason => {
            condition.last_transition_time.clone()
        }
        _ => now.clone(),
    };
    SGPURuntimePolicyStatus {
        rack_groups_summary,
        rack_indexes_summary,
        node_indexes_summary,
        gpu_indexes_summary,
        conditions: Some(vec![Condition {
            type_: CONDITION_ACCEPTED.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message: decision.message.clone(),
            observed_generation: policy.metadata.generation,
            last_transition_time,
        }]),
    }
}
