//! Target resolution: which (group, rack, node, GPU) coordinates a policy's
//! `targetRef` selects, given the inventory's groups and their shapes.

use std::collections::BTreeMap;

use crate::api::PolicyTargetRef;
use crate::text::{go_int_list, go_quote, quoted_list};

/// How wide a policy reaches, from broadest to narrowest. The deepest listed
/// axis decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    Inventory,
    RackGroup,
    Rack,
    Node,
    Gpu,
}

impl Scope {
    /// The scope of a target: the deepest listed axis.
    /// An empty list is not listed, as upstream (`len(...) > 0`).
    pub fn of(target: &PolicyTargetRef) -> Scope {
        if listed(&target.gpu_indexes).is_some() {
            Scope::Gpu
        } else if listed(&target.node_indexes).is_some() {
            Scope::Node
        } else if listed(&target.rack_indexes).is_some() {
            Scope::Rack
        } else if listed(&target.rack_groups).is_some() {
            Scope::RackGroup
        } else {
            Scope::Inventory
        }
    }

    /// The name used in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Inventory => "Inventory",
            Scope::RackGroup => "Rack Group",
            Scope::Rack => "Rack",
            Scope::Node => "Node",
            Scope::Gpu => "GPU",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The list an axis names, or `None` when it names none: upstream treats an
/// empty list exactly like an absent one.
fn listed<T>(list: &Option<Vec<T>>) -> Option<&Vec<T>> {
    list.as_ref().filter(|items| !items.is_empty())
}

/// The dimensions of one declared rack group. Node and GPU counts are known
/// only when the group's profile is cached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupBounds {
    pub racks: i32,
    /// `None` while the profile is not found.
    pub nodes_and_gpus: Option<(i32, i32)>,
}

impl GroupBounds {
    fn nodes(&self) -> i32 {
        self.nodes_and_gpus.map_or(0, |(nodes, _)| nodes)
    }
    fn gpus(&self) -> i32 {
        self.nodes_and_gpus.map_or(0, |(_, gpus)| gpus)
    }
}

/// The indexes one axis selects within one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AxisSelection {
    /// The axis is not listed: every index, including racks still retiring
    /// beyond a shrunk count.
    All,
    /// The listed indexes that exist in this group, sorted and distinct.
    Only(Vec<i32>),
}

impl AxisSelection {
    fn select(listed: Option<&Vec<i32>>, bound: i32) -> AxisSelection {
        match listed {
            None => AxisSelection::All,
            Some(listed) => {
                let mut inside: Vec<i32> = listed
                    .iter()
                    .copied()
                    .filter(|index| (0..bound).contains(index))
                    .collect();
                inside.sort_unstable();
                inside.dedup();
                AxisSelection::Only(inside)
            }
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, AxisSelection::Only(indexes) if indexes.is_empty())
    }

    /// True when `index` is selected.
    pub fn contains(&self, index: i32) -> bool {
        match self {
            AxisSelection::All => true,
            AxisSelection::Only(indexes) => indexes.binary_search(&index).is_ok(),
        }
    }

    /// True when both selections share an index.
    pub fn overlaps(&self, other: &AxisSelection) -> bool {
        match (self, other) {
            (AxisSelection::All, other) | (other, AxisSelection::All) => !other.is_empty(),
            (AxisSelection::Only(a), AxisSelection::Only(b)) => {
                let (mut i, mut j) = (0, 0);
                while i < a.len() && j < b.len() {
                    match a[i].cmp(&b[j]) {
                        std::cmp::Ordering::Equal => return true,
                        std::cmp::Ordering::Less => i += 1,
                        std::cmp::Ordering::Greater => j += 1,
                    }
                }
                false
            }
        }
    }
}

/// What a policy selects inside one participating group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSelection {
    pub racks: AxisSelection,
    pub nodes: AxisSelection,
    pub gpus: AxisSelection,
}

impl GroupSelection {
    /// True when some GPU is selected by both.
    pub fn overlaps(&self, other: &GroupSelection) -> bool {
        self.racks.overlaps(&other.racks)
            && self.nodes.overlaps(&other.nodes)
            && self.gpus.overlaps(&other.gpus)
    }

    /// True when the coordinate is selected.
    pub fn contains(&self, rack: i32, node: i32, gpu: i32) -> bool {
        self.racks.contains(rack) && self.nodes.contains(node) && self.gpus.contains(gpu)
    }
}

/// A resolved target: the participating groups and their selections.
pub type Selection = BTreeMap<String, GroupSelection>;

/// Resolves `target` against the declared groups. The error is the
/// `InvalidTarget` message.
pub fn resolve_target(
    inventory_name: &str,
    target: &PolicyTargetRef,
    groups: &BTreeMap<String, GroupBounds>,
) -> Result<Selection, String> {
    // Listed groups (deduplicated, listed order kept for the message) or
    // every declared group.
    let selected: Vec<&str> = match listed(&target.rack_groups) {
        Some(listed) => {
            let mut seen = std::collections::HashSet::new();
            listed
                .iter()
                .map(String::as_str)
                .filter(|group| seen.insert(*group))
                .collect()
        }
        None => groups.keys().map(String::as_str).collect(),
    };
    let undeclared: Vec<&str> = selected
        .iter()
        .copied()
        .filter(|group| !groups.contains_key(*group))
        .collect();
    if !undeclared.is_empty() {
        return Err(format!(
            "SGPUInventory {} does not declare rack groups {}.",
            go_quote(inventory_name),
            quoted_list(undeclared)
        ));
    }

    let mut selection = Selection::new();
    let mut reach = (0, 0, 0);
    for group in &selected {
        let bounds = groups[*group];
        let group_selection = GroupSelection {
            racks: AxisSelection::select(listed(&target.rack_indexes), bounds.racks),
            nodes: AxisSelection::select(listed(&target.node_indexes), bounds.nodes()),
            gpus: AxisSelection::select(listed(&target.gpu_indexes), bounds.gpus()),
        };
        if group_selection.racks.is_empty()
            || group_selection.nodes.is_empty()
            || group_selection.gpus.is_empty()
        {
            continue;
        }
        reach = (
            reach.0.max(bounds.racks),
            reach.1.max(bounds.nodes()),
            reach.2.max(bounds.gpus()),
        );
        selection.insert((*group).to_string(), group_selection);
    }

    let out_of_reach = |listed: Option<&Vec<i32>>, bound: i32| -> Vec<i32> {
        let mut outside: Vec<i32> = listed
            .into_iter()
            .flatten()
            .copied()
            .filter(|index| !(0..bound).contains(index))
            .collect();
        outside.sort_unstable();
        outside.dedup();
        outside
    };
    let axes = [
        (
            "rackIndexes",
            out_of_reach(listed(&target.rack_indexes), reach.0),
        ),
        (
            "nodeIndexes",
            out_of_reach(listed(&target.node_indexes), reach.1),
        ),
        (
            "gpuIndexes",
            out_of_reach(listed(&target.gpu_indexes), reach.2),
        ),
    ];
    let reported: Vec<String> = axes
        .iter()
        .filter(|(_, outside)| !outside.is_empty())
        .map(|(axis, outside)| format!("{axis} {}", go_int_list(outside)))
        .collect();
    if reported.is_empty() {
        return Ok(selection);
    }
    let mut message = format!(
        "The target lists indexes that select no GPU in the selected rack groups: {}.",
        reported.join(", ")
    );
    let node_or_gpu_unused = !axes[1].1.is_empty() || !axes[2].1.is_empty();
    let unresolved: Vec<&str> = selected
        .iter()
        .copied()
        .filter(|group| groups[*group].nodes_and_gpus.is_none())
        .collect();
    if node_or_gpu_unused && !unresolved.is_empty() {
        message.push_str(&format!(
            " The profiles of rack groups {} are not found, so those rack groups select no Node or GPU.",
            quoted_list(unresolved)
        ));
    }
    Err(message)
}

/// Summaries for the policy status: listed values, sorted, comma-joined;
/// `None` for an axis that lists nothing (upstream's empty string, which
/// `omitempty` drops).
pub fn summaries(target: &PolicyTargetRef) -> [Option<String>; 4] {
    let groups = listed(&target.rack_groups).map(|groups| {
        let mut groups: Vec<&str> = groups.iter().map(String::as_str).collect();
        groups.sort_unstable();
        groups.dedup();
        groups.join(",")
    });
    let numbers = |listed: Option<&Vec<i32>>| {
        listed.map(|listed| {
            let mut listed = listed.clone();
            listed.sort_unstable();
            listed.dedup();
            crate::text::comma_joined(&listed)
        })
    };
    [
        groups,
        numbers(listed(&target.rack_indexes)),
        numbers(listed(&target.node_indexes)),
        numbers(listed(&target.gpu_indexes)),
    ]
}
