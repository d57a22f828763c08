//! Inventory and rack status, pure: conditions with upstream's exact
//! reasons and messages, counts, and the condition merge that keeps
//! `lastTransitionTime` unless status or reason change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::{
    InventoryCapacity, InventoryUsage, RackGroupStatus, SGPUInventoryStatus, SGPURackStatus,
};
use crate::plan::inventory::{IssueKind, ProfileIssue, Rejection};

/// Everything the inventory conditions depend on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InventoryFacts {
    pub rejection: Option<Rejection>,
    pub issues: Vec<ProfileIssue>,
    pub ownership_conflicts: usize,
    pub racks_missing: usize,
    /// Bound slots of owned racks, and how many of those are projected.
    pub allocated: usize,
    pub projected: usize,
    pub metadata_conflict: bool,
    pub placement_conflicts: usize,
    pub pending: usize,
}

fn condition(
    kind: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: kind.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// The four inventory conditions, sorted by type.
pub fn inventory_conditions(
    facts: &InventoryFacts,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let accepted = match &facts.rejection {
        None => condition(
            "Accepted",
            true,
            "Accepted",
            "The inventory configuration is valid.",
            generation,
            now,
        ),
        Some(rejection) => condition(
            "Accepted",
            false,
            &rejection.reason,
            &rejection.message,
            generation,
            now,
        ),
    };
    let resolved = if facts.issues.is_empty() {
        condition(
            "ResolvedRefs",
            true,
            "ProfilesResolved",
            "All referenced profiles are resolved.",
            generation,
            now,
        )
    } else if facts
        .issues
        .iter()
        .any(|issue| issue.kind != IssueKind::NotFound)
    {
        condition(
            "ResolvedRefs",
            false,
            "InvalidProfile",
            "One or more referenced profiles are invalid.",
            generation,
            now,
        )
    } else {
        condition(
            "ResolvedRefs",
            false,
            "ProfileNotFound",
            "One or more referenced profiles are missing.",
            generation,
            now,
        )
    };
    let programmed = if let Some(rejection) = &facts.rejection {
        condition(
            "Programmed",
            false,
            &rejection.reason,
            "Programming is blocked by an invalid inventory.",
            generation,
            now,
        )
    } else if !facts.issues.is_empty() {
        condition(
            "Programmed",
            false,
            "ReferencesUnresolved",
            "Programming is blocked by unresolved profiles.",
            generation,
            now,
        )
    } else if facts.ownership_conflicts > 0 {
        condition(
            "Programmed",
            false,
            "RackOwnershipConflict",
            "A deterministic rack name is owned by another object.",
            generation,
            now,
        )
    } else if facts.racks_missing > 0 {
        condition(
            "Programmed",
            false,
            "RacksPending",
            "One or more desired racks are not present in the cache.",
            generation,
            now,
        )
    } else if facts.projected < facts.allocated {
        let reason = if facts.metadata_conflict {
            "NodeMetadataConflict"
        } else {
            "ProjectionIncomplete"
        };
        let message = format!(
            "{} of {} allocated Nodes are projected.",
            facts.projected, facts.allocated
        );
        condition("Programmed", false, reason, &message, generation, now)
    } else {
        condition(
            "Programmed",
            true,
            "Programmed",
            "All desired racks and Node projections are programmed.",
            generation,
            now,
        )
    };
    let requests = if facts.placement_conflicts > 0 {
        let message = format!(
            "{} requested Nodes have placement conflicts.",
            facts.placement_conflicts
        );
        condition(
            "RequestsSatisfied",
            false,
            "PlacementConflicts",
            &message,
            generation,
            now,
        )
    } else if facts.pending > 0 {
        let message = format!("{} requested Nodes are pending capacity.", facts.pending);
        condition(
            "RequestsSatisfied",
            false,
            "PendingNodes",
            &message,
            generation,
            now,
        )
    } else {
        condition(
            "RequestsSatisfied",
            true,
            "RequestsSatisfied",
            "All unambiguous requests fit available capacity.",
            generation,
            now,
        )
    };
    vec![accepted, programmed, requests, resolved]
}

/// What makes a rack not ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RackFacts {
    pub assigned: usize,
    pub projected: usize,
    pub duplicate_bindings: bool,
    pub invalid_bindings: bool,
    pub metadata_conflict: bool,
}

/// The rack's `Ready` condition.
pub fn rack_ready(facts: &RackFacts, generation: Option<i64>, now: &Time) -> Condition {
    if facts.duplicate_bindings {
        condition(
            "Ready",
            false,
            "DuplicateBindings",
            "A Node UID is bound to more than one logical rack Node.",
            generation,
            now,
        )
    } else if facts.invalid_bindings {
        condition(
            "Ready",
            false,
            "InvalidBindings",
            "The rack contains an invalid or non-live binding.",
            generation,
            now,
        )
    } else if facts.projected < facts.assigned {
        let reason = if facts.metadata_conflict {
            "NodeMetadataConflict"
        } else {
            "ProjectionIncomplete"
        };
        let message = format!(
            "{} of {} assigned Nodes are projected.",
            facts.projected, facts.assigned
        );
        condition("Ready", false, reason, &message, generation, now)
    } else {
        condition(
            "Ready",
            true,
            "Ready",
            "Rack bindings are valid.",
            generation,
            now,
        )
    }
}

/// The desired conditions, keeping `lastTransitionTime` of an existing
/// condition whose status and reason are unchanged; sorted by type.
pub fn merge_conditions(existing: Option<&[Condition]>, desired: Vec<Condition>) -> Vec<Condition> {
    let mut merged: Vec<Condition> = desired
        .into_iter()
        .map(|mut condition| {
            if let Some(previous) = existing
                .unwrap_or_default()
                .iter()
                .find(|previous| previous.type_ == condition.type_)
                && previous.status == condition.status
                && previous.reason == condition.reason
            {
                condition.last_transition_time = previous.last_transition_time.clone();
            }
            condition
        })
        .collect();
    merged.sort_by(|a, b| a.type_.cmp(&b.type_));
    merged
}

/// The rack status as it should be. A rack with no bound slot has no
/// `assignedNodes`: upstream's field is a plain int32 with `omitempty`, so
/// its zero is never written.
pub fn rack_status(
    existing: Option<&SGPURackStatus>,
    facts: &RackFacts,
    generation: Option<i64>,
    now: &Time,
) -> SGPURackStatus {
    SGPURackStatus {
        observed_generation: generation,
        assigned_nodes: (facts.assigned > 0)
            .then(|| i32::try_from(facts.assigned).unwrap_or(i32::MAX)),
        conditions: Some(merge_conditions(
            existing.and_then(|status| status.conditions.as_deref()),
            vec![rack_ready(facts, generation, now)],
        )),
    }
}

/// Counts of one inventory (or group).
pub fn usage(
    requested: usize,
    allocated: usize,
    capacity_nodes: i32,
    pending: usize,
) -> InventoryUsage {
    let to_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    InventoryUsage {
        requested_nodes: to_i32(requested),
        allocated_nodes: to_i32(allocated),
        available_nodes: (capacity_nodes - to_i32(allocated)).max(0),
        pending_nodes: to_i32(pending),
    }
}

/// The inventory status as it should be. `rackGroups` is listed by id
/// whatever order the spec declares them in, as upstream sorts it, so
/// reordering the spec rewrites no status.
#[allow(clippy::too_many_arguments)]
pub fn inventory_status(
    existing: Option<&SGPUInventoryStatus>,
    facts: &InventoryFacts,
    summary: String,
    capacity: InventoryCapacity,
    usage: InventoryUsage,
    mut groups: Vec<RackGroupStatus>,
    generation: Option<i64>,
    now: &Time,
) -> SGPUInventoryStatus {
    groups.sort_by(|a, b| a.id.cmp(&b.id));
    SGPUInventoryStatus {
        rack_groups_summary: Some(summary),
        capacity: Some(capacity),
        usage: Some(usage),
        rack_groups: Some(groups),
        conditions: Some(merge_conditions(
            existing.and_then(|status| status.conditions.as_deref()),
            inventory_conditions(facts, generation, now),
        )),
        runtime_policies: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(seconds: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap())
    }

    fn by_type<'a>(conditions: &'a [Condition], kind: &str) -> &'a Condition {
        conditions.iter().find(|c| c.type_ == kind).unwrap()
    }

    #[test]
    fn inventory_status_math_and_conditions_are_exact() {
        let facts = InventoryFacts {
            allocated: 2,
            projected: 1,
            ..InventoryFacts::default()
        };
        let conditions = inventory_conditions(&facts, Some(3), &now(1));
        assert_eq!(
            conditions
                .iter()
                .map(|c| c.type_.as_str())
                .collect::<Vec<_>>(),
            [
                "Accepted",
                "Programmed",
                "RequestsSatisfied",
                "ResolvedRefs"
            ]
        );
        let programmed = by_type(&conditions, "Programmed");
        assert_eq!(programmed.reason, "ProjectionIncomplete");
        assert_eq!(programmed.message, "1 of 2 allocated Nodes are projected.");
        assert_eq!(programmed.observed_generation, Some(3));

        let blocked = InventoryFacts {
            rejection: Some(Rejection {
                reason: "InvalidInventory".into(),
                message: "rack group \"x\" count is outside [1,100000]".into(),
            }),
            ..InventoryFacts::default()
        };
        let conditions = inventory_conditions(&blocked, Some(1), &now(1));
        assert_eq!(
            by_type(&conditions, "Accepted").message,
            "rack group \"x\" count is outside [1,100000]"
        );
        assert_eq!(
            by_type(&conditions, "Programmed").message,
            "Programming is blocked by an invalid inventory."
        );
        assert_eq!(
            by_type(&conditions, "Programmed").reason,
            "InvalidInventory"
        );

        let pending = InventoryFacts {
            pending: 3,
            placement_conflicts: 1,
            ..InventoryFacts::default()
        };
        let conditions = inventory_conditions(&pending, None, &now(1));
        assert_eq!(
            by_type(&conditions, "RequestsSatisfied").message,
            "1 requested Nodes have placement conflicts."
        );
    }

    #[test]
    fn an_api_invalid_profile_surfaces_as_invalid_profile() {
        let facts = InventoryFacts {
            issues: vec![
                ProfileIssue {
                    group: "a".into(),
                    profile: "p".into(),
                    kind: IssueKind::NotFound,
                    message: String::new(),
                },
                ProfileIssue {
                    group: "b".into(),
                    profile: "q".into(),
                    kind: IssueKind::Invalid,
                    message: "rack \"x\" was rejected by API validation".into(),
                },
            ],
            ..InventoryFacts::default()
        };
        let conditions = inventory_conditions(&facts, None, &now(1));
        assert_eq!(
            by_type(&conditions, "ResolvedRefs").reason,
            "InvalidProfile"
        );
        assert_eq!(
            by_type(&conditions, "Programmed").reason,
            "ReferencesUnresolved"
        );
    }

    #[test]
    fn a_message_change_alone_is_not_a_transition() {
        let first = merge_conditions(
            None,
            vec![rack_ready(
                &RackFacts {
                    assigned: 2,
                    projected: 0,
                    ..RackFacts::default()
                },
                None,
                &now(1),
            )],
        );
        let second = merge_conditions(
            Some(&first),
            vec![rack_ready(
                &RackFacts {
                    assigned: 2,
                    projected: 1,
                    ..RackFacts::default()
                },
                None,
                &now(5),
            )],
        );
        assert_eq!(second[0].message, "1 of 2 assigned Nodes are projected.");
        assert_eq!(second[0].last_transition_time, now(1));
        let third = merge_conditions(
            Some(&second),
            vec![rack_ready(
                &RackFacts {
                    assigned: 2,
                    projected: 2,
                    ..RackFacts::default()
                },
                None,
                &now(9),
            )],
        );
        assert_eq!(third[0].reason, "Ready");
        assert_eq!(third[0].last_transition_time, now(9));
    }

    #[test]
    fn rack_status_counts_duplicate_bindings_before_projection() {
        let ready = rack_ready(
            &RackFacts {
                assigned: 1,
                projected: 0,
                duplicate_bindings: true,
                ..RackFacts::default()
            },
            None,
            &now(1),
        );
        assert_eq!(ready.reason, "DuplicateBindings");
        assert_eq!(
            ready.message,
            "A Node UID is bound to more than one logical rack Node."
        );
    }

    #[test]
    fn inventory_status_lists_rack_groups_sorted_by_id() {
        let group = |id: &str| RackGroupStatus {
            id: id.into(),
            profile_name: "p".into(),
            capacity: InventoryCapacity::default(),
            usage: InventoryUsage::default(),
        };
        let status = inventory_status(
            None,
            &InventoryFacts::default(),
            "alpha,mid,zeta".into(),
            InventoryCapacity::default(),
            InventoryUsage::default(),
            vec![group("zeta"), group("alpha"), group("mid")],
            Some(1),
            &now(1),
        );
        let ids: Vec<&str> = status
            .rack_groups
            .as_deref()
            .unwrap()
            .iter()
            .map(|g| g.id.as_str())
            .collect();
        assert_eq!(ids, ["alpha", "mid", "zeta"]);
    }

    #[test]
    fn rack_status_omits_zero_assigned_nodes() {
        let empty = rack_status(None, &RackFacts::default(), Some(1), &now(1));
        assert_eq!(empty.assigned_nodes, None);
        let encoded = serde_json::to_value(&empty).unwrap();
        assert!(encoded.get("assignedNodes").is_none(), "{encoded}");
        let bound = RackFacts {
            assigned: 2,
            projected: 2,
            ..RackFacts::default()
        };
        let status = rack_status(None, &bound, Some(1), &now(1));
        assert_eq!(status.assigned_nodes, Some(2));
    }
}
