//! Capacity limits per inventory, and the cluster-wide admission that keeps
//! every inventory together within 100,000 Nodes or racks and 64 rack groups.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use thiserror::Error;

use crate::api::SGPUInventory;
use crate::text::go_quote;

/// Most logical Nodes, and also most racks, per inventory and cluster-wide.
pub const MAX_INVENTORY_NODES: i64 = 100_000;
/// Most rack groups per inventory and cluster-wide.
pub const MAX_RACK_GROUPS: usize = 64;

/// The condition reason of every capacity rejection.
pub const CAPACITY_EXCEEDED: &str = "CapacityExceeded";

/// Why a capacity is not accepted.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum CapacityError {
    #[error("desired Nodes {0} exceed supported maximum 100000")]
    TooManyNodes(i64),
    #[error("desired racks {0} exceed supported maximum 100000")]
    TooManyRacks(i64),
    #[error("declared capacity exceeds int32 status bounds")]
    StatusBounds,
    #[error("rack group {} Node capacity overflows int64", go_quote(.0))]
    GroupNodeOverflow(String),
    #[error("rack group {} GPU capacity overflows int64", go_quote(.0))]
    GroupGpuOverflow(String),
    #[error("aggregate rack capacity overflows int64")]
    AggregateRackOverflow,
    #[error("aggregate Node capacity overflows int64")]
    AggregateNodeOverflow,
    #[error("aggregate GPU capacity overflows int64")]
    AggregateGpuOverflow,
}

/// Racks, logical Nodes and GPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    pub racks: i64,
    pub nodes: i64,
    pub gpus: i64,
}

impl Capacity {
    /// The status form; `None` when a figure exceeds int32.
    pub fn to_status(self) -> Option<crate::api::InventoryCapacity> {
        Some(crate::api::InventoryCapacity {
            racks: i32::try_from(self.racks).ok()?,
            nodes: i32::try_from(self.nodes).ok()?,
            gpus: i32::try_from(self.gpus).ok()?,
        })
    }
}

/// A resolved rack group: its count and its profile's dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupShape {
    pub id: String,
    pub racks: i64,
    pub nodes_per_rack: i64,
    pub gpus_per_node: i64,
}

/// The check that runs before any profile lookup: the declared racks of an
/// inventory (sum of `count`) must not exceed 100,000.
pub fn check_declared_racks(inventory: &SGPUInventory) -> Result<i64, CapacityError> {
    let racks = inventory
        .spec
        .rack_groups
        .iter()
        .try_fold(0i64, |sum, group| sum.checked_add(i64::from(group.count)))
        .ok_or(CapacityError::AggregateRackOverflow)?;
    if racks > MAX_INVENTORY_NODES {
        return Err(CapacityError::TooManyRacks(racks));
    }
    Ok(racks)
}

/// The capacity of one resolved group, checked against the limits.
pub fn group_capacity(group: &GroupShape) -> Result<Capacity, CapacityError> {
    let nodes = group
        .racks
        .checked_mul(group.nodes_per_rack)
        .ok_or_else(|| CapacityError::GroupNodeOverflow(group.id.clone()))?;
    let gpus = nodes
        .checked_mul(group.gpus_per_node)
        .ok_or_else(|| CapacityError::GroupGpuOverflow(group.id.clone()))?;
    let capacity = Capacity {
        racks: group.racks,
        nodes,
        gpus,
    };
    check_limits(capacity)?;
    Ok(capacity)
}

/// The capacity of an inventory's resolved groups: each group and the total
/// within the limits, and the total within int32 status bounds.
pub fn inventory_capacity(groups: &[GroupShape]) -> Result<Capacity, CapacityError> {
    let mut total = Capacity::default();
    for group in groups {
        let capacity = group_capacity(group)?;
        total = add(total, capacity)?;
    }
    check_limits(total)?;
    if total.to_status().is_none() {
        return Err(CapacityError::StatusBounds);
    }
    Ok(total)
}

fn check_limits(capacity: Capacity) -> Result<(), CapacityError> {
    if capacity.nodes > MAX_INVENTORY_NODES {
        return Err(CapacityError::TooManyNodes(capacity.nodes));
    }
    if capacity.racks > MAX_INVENTORY_NODES {
        return Err(CapacityError::TooManyRacks(capacity.racks));
    }
    Ok(())
}

fn add(a: Capacity, b: Capacity) -> Result<Capacity, CapacityError> {
    Ok(Capacity {
        racks: a
            .racks
            .checked_add(b.racks)
            .ok_or(CapacityError::AggregateRackOverflow)?,
        nodes: a
            .nodes
            .checked_add(b.nodes)
            .ok_or(CapacityError::AggregateNodeOverflow)?,
        gpus: a
            .gpus
            .checked_add(b.gpus)
            .ok_or(CapacityError::AggregateGpuOverflow)?,
    })
}

/// One inventory as cluster-wide admission sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdmissionCandidate {
    pub name: String,
    pub uid: String,
    pub created: Option<Time>,
    /// Being deleted: it takes no budget and is not admitted, but the racks
    /// it still holds stay charged until they are released.
    pub deleting: bool,
    /// Declared rack groups, counted before profile resolution so a broken
    /// profile reference cannot escape the budget.
    pub declared_groups: usize,
    /// Resolved capacity plus the durable capacity of groups whose profile
    /// currently fails. `None` when the inventory is not materializable
    /// (invalid, over its own limits, or with no resolved group): it is
    /// charged only for what it holds.
    pub target: Option<Capacity>,
    /// Capacity its existing racks hold now; charged until released.
    pub held: Capacity,
}

/// What admission decided for one inventory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmissionOutcome {
    /// Admitted, and its growth fits what is held now: it may reconcile.
    Ready,
    /// Admitted, but its growth does not fit until others release capacity
    /// (or an older inventory's growth is still waiting).
    Pending,
    /// Not materializable; fits the group budget and is charged nothing new.
    NotMaterializable,
    /// Deleting or without a UID: outside admission; its held racks stay
    /// charged.
    Skipped,
    /// Outside the aggregate limits: `Accepted=False`, `CapacityExceeded`,
    /// and its racks are retired.
    Rejected { message: String },
}

/// Admission outcomes, oldest inventory first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    pub decisions: Vec<(String, String, AdmissionOutcome)>,
}

impl Admission {
    /// The outcome for the exact inventory `name`/`uid`.
    pub fn outcome(&self, name: &str, uid: &str) -> Option<&AdmissionOutcome> {
        self.decisions
            .iter()
            .find(|(n, u, _)| n == name && u == uid)
            .map(|(_, _, outcome)| outcome)
    }
}

/// The rejection message of cluster-wide admission.
pub fn aggregate_rejection_message(name: &str) -> String {
    format!(
        "inventory {} is outside the aggregate limit of 100000 Nodes or racks and 64 rack groups; \
         Inventories are admitted whole by oldest-first fit",
        go_quote(name)
    )
}

/// Cluster-wide admission, as upstream's capacity admission:
///
/// 1. Inventories are taken oldest first by (creationTimestamp, name, uid).
///    Deleting ones and ones without UID are skipped.
/// 2. Rack-group budget: an inventory is admitted to it when its declared
///    groups (1..=64) fit next to the groups of those admitted before it;
///    one that does not fit is rejected and later ones may still fit.
/// 3. Capacity: the running total starts from the racks held by every
///    inventory that is not a materializable candidate (rejected by the
///    group budget, deleting, not materializable). Each materializable
///    candidate is admitted whole when its target fits next to that and
///    every candidate admitted before it (100,000 Nodes and racks, int32
///    GPUs), else rejected.
/// 4. Readiness: in the same order, an admitted inventory whose growth over
///    what it holds is zero is `Ready`; otherwise its growth must fit next
///    to everything held now plus the growth of those before it. The first
///    growth that does not fit makes it and every later growing inventory
///    `Pending`, so readiness never overtakes admission order.
pub fn admit(candidates: &[AdmissionCandidate]) -> Admission {
    let mut ordered: Vec<&AdmissionCandidate> = candidates.iter().collect();
    ordered.sort_by(|a, b| (&a.created, &a.name, &a.uid).cmp(&(&b.created, &b.name, &b.uid)));

    let live = candidates
        .iter()
        .fold(Capacity::default(), |sum, c| saturating_add(sum, c.held));

    // Steps 1 and 2: the group budget, before any profile is looked at.
    let mut groups_used = 0usize;
    let mut outcomes: Vec<Option<AdmissionOutcome>> = Vec::with_capacity(ordered.len());
    for candidate in &ordered {
        let outcome = if candidate.deleting || candidate.uid.is_empty() {
            Some(AdmissionOutcome::Skipped)
        } else if candidate.declared_groups == 0
            || candidate.declared_groups > MAX_RACK_GROUPS
            || groups_used + candidate.declared_groups > MAX_RACK_GROUPS
        {
            Some(rejection(candidate))
        } else {
            groups_used += candidate.declared_groups;
            candidate
                .target
                .is_none()
                .then_some(AdmissionOutcome::NotMaterializable)
        };
        outcomes.push(outcome);
    }

    // Step 3: what non-candidates hold is fixed; candidates are admitted
    // whole against it.
    let candidate_held = ordered
        .iter()
        .zip(&outcomes)
        .filter(|(_, outcome)| outcome.is_none())
        .fold(Capacity::default(), |sum, (c, _)| {
            saturating_add(sum, c.held)
        });
    let mut target_total = Capacity {
        racks: live.racks.saturating_sub(candidate_held.racks),
        nodes: live.nodes.saturating_sub(candidate_held.nodes),
        gpus: live.gpus.saturating_sub(candidate_held.gpus),
    };
    let mut admitted = vec![false; ordered.len()];
    for (index, candidate) in ordered.iter().enumerate() {
        if outcomes[index].is_some() {
            continue;
        }
        let Some(target) = candidate.target else {
            continue;
        };
        let next = saturating_add(target_total, target);
        if within_supported_capacity(next) {
            target_total = next;
            admitted[index] = true;
        } else {
            outcomes[index] = Some(rejection(candidate));
        }
    }

    // Step 4: readiness in admission order.
    let mut live_peak = live;
    let mut growth_blocked = false;
    for (index, candidate) in ordered.iter().enumerate() {
        if !admitted[index] {
            continue;
        }
        let target = candidate.target.unwrap_or_default();
        let growth = Capacity {
            racks: (target.racks - candidate.held.racks).max(0),
            nodes: (target.nodes - candidate.held.nodes).max(0),
            gpus: (target.gpus - candidate.held.gpus).max(0),
        };
        let ready = if growth == Capacity::default() {
            true
        } else if growth_blocked {
            false
        } else {
            let next = saturating_add(live_peak, growth);
            if within_supported_capacity(next) {
                live_peak = next;
                true
            } else {
                growth_blocked = true;
                false
            }
        };
        outcomes[index] = Some(if ready {
            AdmissionOutcome::Ready
        } else {
            AdmissionOutcome::Pending
        });
    }

    let decisions = ordered
        .into_iter()
        .zip(outcomes)
        .map(|(candidate, outcome)| {
            (
                candidate.name.clone(),
                candidate.uid.clone(),
                outcome.unwrap_or(AdmissionOutcome::Skipped),
            )
        })
        .collect();
    Admission { decisions }
}

fn rejection(candidate: &AdmissionCandidate) -> AdmissionOutcome {
    AdmissionOutcome::Rejected {
        message: aggregate_rejection_message(&candidate.name),
    }
}

/// Upstream's supported-capacity rule for aggregate sums: 100,000 Nodes and
/// racks, every figure within int32 status bounds.
fn within_supported_capacity(capacity: Capacity) -> bool {
    capacity.nodes <= MAX_INVENTORY_NODES
        && capacity.racks <= MAX_INVENTORY_NODES
        && capacity.to_status().is_some()
}

fn saturating_add(a: Capacity, b: Capacity) -> Capacity {
    Capacity {
        racks: a.racks.saturating_add(b.racks),
        nodes: a.nodes.saturating_add(b.nodes),
        gpus: a.gpus.saturating_add(b.gpus),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ProfileNameRef, RackGroup, SGPUInventorySpec};

    fn shape(id: &str, racks: i64, nodes_per_rack: i64, gpus_per_node: i64) -> GroupShape {
        GroupShape {
            id: id.into(),
            racks,
            nodes_per_rack,
            gpus_per_node,
        }
    }

    fn time(seconds: i64) -> Option<Time> {
        Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap(),
        ))
    }

    fn candidate(
        name: &str,
        created: i64,
        groups: usize,
        racks: i64,
        nodes: i64,
    ) -> AdmissionCandidate {
        AdmissionCandidate {
            name: name.into(),
            uid: format!("{name}-uid"),
            created: time(created),
            deleting: false,
            declared_groups: groups,
            target: Some(Capacity {
                racks,
                nodes,
                gpus: nodes * 4,
            }),
            held: Capacity::default(),
        }
    }

    #[test]
    fn boundary_values_of_100000_are_accepted() {
        let capacity = inventory_capacity(&[shape("a", 100_000, 1, 64)]).unwrap();
        assert_eq!(
            capacity,
            Capacity {
                racks: 100_000,
                nodes: 100_000,
                gpus: 6_400_000
            }
        );
        assert_eq!(
            inventory_capacity(&[shape("a", 5555, 18, 4)])
                .unwrap()
                .nodes,
            99_990
        );
        assert_eq!(
            inventory_capacity(&[shape("a", 50_000, 1, 1), shape("b", 25_000, 2, 1)])
                .unwrap()
                .nodes,
            100_000
        );
    }

    #[test]
    fn over_limit_capacity_is_rejected_with_upstream_messages() {
        let message = |groups: &[GroupShape]| inventory_capacity(groups).unwrap_err().to_string();
        assert_eq!(
            message(&[shape("a", 5557, 18, 4)]),
            "desired Nodes 100026 exceed supported maximum 100000"
        );
        assert_eq!(
            message(&[shape("a", 60_000, 1, 1), shape("b", 40_001, 1, 1)]),
            "desired Nodes 100001 exceed supported maximum 100000"
        );
        assert_eq!(
            message(&[shape("a", 100_001, 0, 1)]),
            "desired racks 100001 exceed supported maximum 100000"
        );
        assert_eq!(
            message(&[shape("big", i64::MAX, 2, 1)]),
            "rack group \"big\" Node capacity overflows int64"
        );
        assert_eq!(
            message(&[shape("big", 1, i64::MAX / 2, 4)]),
            "rack group \"big\" GPU capacity overflows int64"
        );
        assert_eq!(
            inventory_capacity(&[shape("a", 1, 1, i64::from(i32::MAX)), shape("b", 1, 1, 1)])
                .unwrap_err()
                .to_string(),
            "declared capacity exceeds int32 status bounds"
        );
    }

    #[test]
    fn declared_racks_are_checked_before_profile_lookup() {
        let group = |id: &str, count| RackGroup {
            id: id.into(),
            count,
            profile_ref: ProfileNameRef {
                name: "missing".into(),
            },
            placement: None,
        };
        let inventory = SGPUInventory::new(
            "inv",
            SGPUInventorySpec {
                rack_groups: vec![group("a", 60_000), group("b", 40_000)],
            },
        );
        assert_eq!(check_declared_racks(&inventory), Ok(100_000));
        let over = SGPUInventory::new(
            "inv",
            SGPUInventorySpec {
                rack_groups: vec![group("a", 60_000), group("b", 40_001)],
            },
        );
        assert_eq!(
            check_declared_racks(&over).unwrap_err().to_string(),
            "desired racks 100001 exceed supported maximum 100000"
        );
    }

    #[test]
    fn inventories_are_admitted_whole_oldest_first() {
        let admission = admit(&[
            candidate("younger", 3, 1, 1000, 60_000),
            candidate("oldest", 1, 1, 1000, 50_000),
            candidate("middle", 2, 1, 1000, 50_001),
            candidate("small", 4, 1, 10, 50_000),
        ]);
        let order: Vec<&str> = admission
            .decisions
            .iter()
            .map(|(name, _, _)| name.as_str())
            .collect();
        assert_eq!(order, ["oldest", "middle", "younger", "small"]);
        assert_eq!(
            admission.outcome("oldest", "oldest-uid"),
            Some(&AdmissionOutcome::Ready)
        );
        assert_eq!(
            admission.outcome("middle", "middle-uid"),
            Some(&AdmissionOutcome::Rejected {
                message: "inventory \"middle\" is outside the aggregate limit of 100000 Nodes or racks and 64 rack \
                          groups; Inventories are admitted whole by oldest-first fit"
                    .into()
            })
        );
        assert!(matches!(
            admission.outcome("younger", "younger-uid"),
            Some(AdmissionOutcome::Rejected { .. })
        ));
        // A later, smaller inventory still fits what is left.
        assert_eq!(
            admission.outcome("small", "small-uid"),
            Some(&AdmissionOutcome::Ready)
        );
    }

    #[test]
    fn the_rack_group_budget_counts_unmaterializable_inventories_too() {
        let mut broken = candidate("broken", 1, 60, 0, 0);
        broken.target = None;
        let admission = admit(&[
            broken,
            candidate("late", 2, 5, 1, 1),
            candidate("fits", 3, 4, 1, 1),
        ]);
        assert_eq!(
            admission.outcome("broken", "broken-uid"),
            Some(&AdmissionOutcome::NotMaterializable)
        );
        assert!(matches!(
            admission.outcome("late", "late-uid"),
            Some(AdmissionOutcome::Rejected { .. })
        ));
        assert_eq!(
            admission.outcome("fits", "fits-uid"),
            Some(&AdmissionOutcome::Ready)
        );
    }

    #[test]
    fn growth_waits_until_held_capacity_is_released() {
        // "old" is being rejected but still holds 60,000 Nodes of racks.
        let mut old = candidate("rejected-old", 5, 1, 100, 100_000);
        old.target = Some(Capacity {
            racks: 100,
            nodes: 100_000,
            gpus: 0,
        });
        old.held = Capacity {
            racks: 100,
            nodes: 60_000,
            gpus: 0,
        };
        let admission = admit(&[candidate("first", 1, 1, 10, 50_000), old.clone()]);
        assert_eq!(
            admission.outcome("first", "first-uid"),
            Some(&AdmissionOutcome::Pending)
        );
        assert!(matches!(
            admission.outcome("rejected-old", "rejected-old-uid"),
            Some(AdmissionOutcome::Rejected { .. })
        ));
        // Once the informer sees the racks gone, the growth fits.
        old.held = Capacity::default();
        let admission = admit(&[candidate("first", 1, 1, 10, 50_000), old]);
        assert_eq!(
            admission.outcome("first", "first-uid"),
            Some(&AdmissionOutcome::Ready)
        );
    }

    fn holding(mut candidate: AdmissionCandidate, nodes: i64) -> AdmissionCandidate {
        candidate.held = Capacity {
            racks: nodes / 100,
            nodes,
            gpus: nodes * 4,
        };
        candidate
    }

    fn deleting(mut candidate: AdmissionCandidate) -> AdmissionCandidate {
        candidate.deleting = true;
        candidate
    }

    #[test]
    fn the_aggregate_sum_starts_from_racks_held_by_non_candidate_inventories() {
        // Upstream admissionCandidates: fixed capacity = every durable rack
        // minus the racks of materializable candidates. A deleting inventory
        // and an unmaterializable one still hold their racks.
        let gone = deleting(holding(candidate("gone", 1, 1, 600, 60_000), 60_000));
        let admission = admit(&[gone.clone(), candidate("new", 2, 1, 500, 50_000)]);
        assert_eq!(
            admission.outcome("gone", "gone-uid"),
            Some(&AdmissionOutcome::Skipped)
        );
        assert!(matches!(
            admission.outcome("new", "new-uid"),
            Some(AdmissionOutcome::Rejected { .. })
        ));
        // 40,000 fits next to the 60,000 still held.
        let admission = admit(&[gone, candidate("new", 2, 1, 400, 40_000)]);
        assert_eq!(
            admission.outcome("new", "new-uid"),
            Some(&AdmissionOutcome::Ready)
        );

        let mut broken = holding(candidate("broken", 1, 1, 0, 0), 70_000);
        broken.target = None;
        let admission = admit(&[broken, candidate("new", 2, 1, 400, 40_000)]);
        assert_eq!(
            admission.outcome("broken", "broken-uid"),
            Some(&AdmissionOutcome::NotMaterializable)
        );
        assert!(matches!(
            admission.outcome("new", "new-uid"),
            Some(AdmissionOutcome::Rejected { .. })
        ));
    }

    #[test]
    fn two_inventories_compete_for_the_aggregate_limit_and_the_older_wins() {
        // Upstream: admitted whole by oldest-first fit; the younger one is
        // rejected even though it alone would fit, whatever the input order.
        for order in [["a", "b"], ["b", "a"]] {
            let input: Vec<AdmissionCandidate> = order
                .iter()
                .map(|name| match *name {
                    "a" => candidate("a", 1, 1, 600, 60_000),
                    _ => candidate("b", 2, 1, 600, 60_000),
                })
                .collect();
            let admission = admit(&input);
            assert_eq!(
                admission.outcome("a", "a-uid"),
                Some(&AdmissionOutcome::Ready)
            );
            assert_eq!(
                admission.outcome("b", "b-uid"),
                Some(&AdmissionOutcome::Rejected {
                    message: aggregate_rejection_message("b")
                })
            );
        }
    }

    #[test]
    fn a_blocked_older_growth_holds_back_every_later_growing_inventory() {
        // Upstream admitInventories: the first growth that does not fit the
        // live topology blocks every later one, so readiness never overtakes
        // admission order; zero growth stays ready.
        let gone = deleting(holding(candidate("gone", 0, 1, 300, 30_000), 30_000));
        let older = candidate("older", 1, 1, 500, 50_000);
        let mut shrinking = holding(candidate("shrinking", 2, 1, 100, 10_000), 30_000);
        shrinking.target = Some(Capacity {
            racks: 100,
            nodes: 10_000,
            gpus: 40_000,
        });
        let small = candidate("small", 3, 1, 50, 5_000);
        let admission = admit(&[gone, older, shrinking, small]);
        assert_eq!(
            admission.outcome("older", "older-uid"),
            Some(&AdmissionOutcome::Pending)
        );
        assert_eq!(
            admission.outcome("shrinking", "shrinking-uid"),
            Some(&AdmissionOutcome::Ready)
        );
        // 5,000 more would fit next to the 60,000 held, but "older" waits.
        assert_eq!(
            admission.outcome("small", "small-uid"),
            Some(&AdmissionOutcome::Pending)
        );
    }

    #[test]
    fn zero_growth_is_always_ready_even_while_held_capacity_is_over_the_limit() {
        // Upstream: capacityIsZero(growth) => ready, before any live check.
        let gone = deleting(holding(candidate("gone", 0, 1, 800, 80_000), 80_000));
        let mut steady = holding(candidate("steady", 1, 1, 200, 20_000), 30_000);
        steady.target = Some(Capacity {
            racks: 200,
            nodes: 20_000,
            gpus: 80_000,
        });
        let admission = admit(&[gone, steady]);
        assert_eq!(
            admission.outcome("steady", "steady-uid"),
            Some(&AdmissionOutcome::Ready)
        );
    }

    #[test]
    fn deleting_inventories_are_skipped_and_take_no_rack_group_budget() {
        // Upstream AdmittedRackGroupInventoryUIDs skips deleting inventories
        // and those without UID.
        let mut nameless = candidate("nameless", 1, 10, 1, 1);
        nameless.uid = String::new();
        let admission = admit(&[
            deleting(candidate("gone", 0, 64, 1, 1)),
            nameless,
            candidate("wide", 2, 64, 1, 1),
        ]);
        assert_eq!(
            admission.outcome("gone", "gone-uid"),
            Some(&AdmissionOutcome::Skipped)
        );
        assert_eq!(
            admission.outcome("nameless", ""),
            Some(&AdmissionOutcome::Skipped)
        );
        assert_eq!(
            admission.outcome("wide", "wide-uid"),
            Some(&AdmissionOutcome::Ready)
        );
    }

    #[test]
    fn the_aggregate_gpu_total_must_stay_within_int32_status_bounds() {
        // Upstream ValidateSupportedCapacity also bounds GPUs by int32.
        let mut first = candidate("first", 1, 1, 1, 1);
        first.target = Some(Capacity {
            racks: 1,
            nodes: 1,
            gpus: i64::from(i32::MAX),
        });
        let admission = admit(&[first, candidate("second", 2, 1, 1, 1)]);
        assert_eq!(
            admission.outcome("first", "first-uid"),
            Some(&AdmissionOutcome::Ready)
        );
        assert!(matches!(
            admission.outcome("second", "second-uid"),
            Some(AdmissionOutcome::Rejected { .. })
        ));
    }
}
