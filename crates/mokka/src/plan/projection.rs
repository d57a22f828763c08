//! Node projection, the pure part: the three keys the controller owns on a
//! bound Node, the assignment annotation's exact bytes, who owns each key
//! according to `managedFields`, and what to do about a Node as observed.
//!
//! The controller owns exactly the label `mokka.nvidia.com/sgpu-assigned`,
//! the label `nvidia.com/gpu.clique` and the annotation
//! `mokka.nvidia.com/sgpu-assignment`; a value someone else owns is a
//! conflict and is never overwritten.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::api::{ANNOTATION_SGPU_ASSIGNMENT, LABEL_GPU_CLIQUE, LABEL_SGPU_ASSIGNED};

/// The field manager of every write the controller makes.
pub const FIELD_MANAGER: &str = "mokka-controller";

/// The value of the assigned label.
pub const ASSIGNED_VALUE: &str = "true";

/// The only annotation version this controller writes and reads.
pub const ASSIGNMENT_VERSION: i64 = 1;

/// One of the three projected keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProjectionKey {
    AssignedLabel,
    CliqueLabel,
    AssignmentAnnotation,
}

impl ProjectionKey {
    pub const ALL: [ProjectionKey; 3] = [
        ProjectionKey::AssignedLabel,
        ProjectionKey::CliqueLabel,
        ProjectionKey::AssignmentAnnotation,
    ];

    /// `(metadata map, key)` as the key appears in FieldsV1.
    fn path(self) -> (&'static str, &'static str) {
        match self {
            Self::AssignedLabel => ("f:labels", LABEL_SGPU_ASSIGNED),
            Self::CliqueLabel => ("f:labels", LABEL_GPU_CLIQUE),
            Self::AssignmentAnnotation => ("f:annotations", ANNOTATION_SGPU_ASSIGNMENT),
        }
    }
}

/// A name and UID pair in the annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct NamedUid {
    pub name: String,
    pub uid: String,
}

/// The profile the rack was rendered from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProfileStamp {
    pub name: String,
    pub uid: String,
    pub revision: String,
}

/// The `mokka.nvidia.com/sgpu-assignment` annotation, version 1. The field
/// order is the wire order (compact JSON, compared as exact strings).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Assignment {
    pub v: i64,
    pub inventory: NamedUid,
    pub rack: NamedUid,
    pub profile: ProfileStamp,
    #[serde(rename = "rackGroup")]
    pub rack_group: String,
    #[serde(rename = "rackIndex")]
    pub rack_index: i32,
    #[serde(rename = "nodeIndex")]
    pub node_index: i32,
    #[serde(rename = "nodeUID")]
    pub node_uid: String,
}

/// The annotation could not be read.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum AssignmentError {
    #[error("unsupported Node assignment version {0}")]
    UnsupportedVersion(i64),
    #[error("decode Node assignment: {0}")]
    Malformed(String),
}

impl Assignment {
    /// The compact JSON the annotation holds.
    pub fn encode(&self) -> String {
        // A struct of strings and integers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an annotation value; any version other than 1 is refused.
    pub fn decode(value: &str) -> Result<Assignment, AssignmentError> {
        let raw: Value = serde_json::from_str(value)
            .map_err(|error| AssignmentError::Malformed(error.to_string()))?;
        let version = raw.get("v").and_then(Value::as_i64).unwrap_or(0);
        if version != ASSIGNMENT_VERSION {
            return Err(AssignmentError::UnsupportedVersion(version));
        }
        serde_json::from_value(raw).map_err(|error| AssignmentError::Malformed(error.to_string()))
    }
}

/// The clique label value: `<fabricUUID>.<cliqueID>`.
pub fn clique_value(fabric_uuid: &str, clique_id: i32) -> String {
    format!("{fabric_uuid}.{clique_id}")
}

/// The three values a bound Node must carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredProjection {
    pub clique: String,
    pub assignment: Assignment,
    /// `assignment.encode()`, computed once.
    pub annotation: String,
}

impl DesiredProjection {
    pub fn new(assignment: Assignment, fabric_uuid: &str, clique_id: i32) -> Self {
        Self {
            clique: clique_value(fabric_uuid, clique_id),
            annotation: assignment.encode(),
            assignment,
        }
    }
}

/// The projection of `rack`'s slot `node_index`, if bound.
pub fn desired_for(rack: &crate::api::SGPURack, node_index: i32) -> Option<DesiredProjection> {
    let node = rack.spec.node_by_index(node_index)?.node_ref.as_ref()?;
    let assignment = Assignment {
        v: ASSIGNMENT_VERSION,
        inventory: NamedUid {
            name: rack.spec.inventory_ref.name.clone(),
            uid: rack.spec.inventory_ref.uid.clone(),
        },
        rack: NamedUid {
            name: rack.metadata.name.clone().unwrap_or_default(),
            uid: rack.metadata.uid.clone().unwrap_or_default(),
        },
        profile: ProfileStamp {
            name: rack.spec.profile_ref.name.clone(),
            uid: rack.spec.profile_ref.uid.clone(),
            revision: rack.spec.profile_ref.revision.clone(),
        },
        rack_group: rack.spec.identity.rack_group.clone(),
        rack_index: rack.spec.identity.rack_index,
        node_index,
        node_uid: node.uid.clone(),
    };
    Some(DesiredProjection::new(
        assignment,
        &rack.spec.identity.fabric_uuid,
        rack.spec.identity.clique_id,
    ))
}

/// Whether an annotation names exactly this binding (inventory, rack and
/// Node identities and the coordinate).
pub fn names_binding(
    assignment: &Assignment,
    binding: &crate::plan::inventory::ExactBinding,
) -> bool {
    assignment.inventory.uid == binding.inventory_uid
        && assignment.rack.name == binding.rack_name
        && assignment.rack.uid == binding.rack_uid
        && assignment.rack_group == binding.group
        && assignment.rack_index == binding.rack_index
        && assignment.node_index == binding.node_index
        && assignment.node_uid == binding.node.uid
}

/// Who holds each projected key, from `managedFields` (non-subresource
/// entries only): whether we do (our [`FIELD_MANAGER`] with operation
/// Apply) and whether any other manager does. That is all the projection
/// asks, so the Node cache keeps this summary (two bytes) in place of a
/// Node's managedFields, which as `serde_json` maps were about 2.5 KB a
/// cached Node even cut to the three keys (docs/benchmarks.md, "Mokka at
/// 10,000 Nodes").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyOwnership {
    ours: u8,
    foreign: u8,
}

impl KeyOwnership {
    fn bit(key: ProjectionKey) -> u8 {
        match key {
            ProjectionKey::AssignedLabel => 1,
            ProjectionKey::CliqueLabel => 2,
            ProjectionKey::AssignmentAnnotation => 4,
        }
    }

    /// Reads the ownership of the three keys from managed field entries.
    pub fn from_managed_fields(entries: &[ManagedFieldsEntry]) -> Self {
        let mut ownership = Self::default();
        for entry in entries {
            if entry
                .subresource
                .as_deref()
                .is_some_and(|sub| !sub.is_empty())
            {
                continue;
            }
            let Some(FieldsV1(fields)) = &entry.fields_v1 else {
                continue;
            };
            // Our name with another operation is a different owner for SSA.
            let ours = entry.manager.as_deref() == Some(FIELD_MANAGER)
                && entry.operation.as_deref() == Some("Apply");
            for key in ProjectionKey::ALL {
                let (map, name) = key.path();
                let owned = fields
                    .get("f:metadata")
                    .and_then(|metadata| metadata.get(map))
                    .and_then(|entries| entries.get(format!("f:{name}")))
                    .is_some();
                if owned {
                    let set = if ours {
                        &mut ownership.ours
                    } else {
                        &mut ownership.foreign
                    };
                    *set |= Self::bit(key);
                }
            }
        }
        ownership
    }

    /// Whether we own `key`.
    pub fn ours(&self, key: ProjectionKey) -> bool {
        self.ours & Self::bit(key) != 0
    }

    /// Whether any manager other than ours owns `key`.
    pub fn foreign(&self, key: ProjectionKey) -> bool {
        self.foreign & Self::bit(key) != 0
    }

    /// Whether we own none of the keys.
    pub fn ours_none(&self) -> bool {
        ProjectionKey::ALL.iter().all(|key| !self.ours(*key))
    }
}

/// The projection-relevant part of a Node as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedNode {
    pub name: String,
    pub uid: String,
    pub assigned: Option<String>,
    pub clique: Option<String>,
    pub annotation: Option<String>,
    pub ownership: KeyOwnership,
}

impl ObservedNode {
    /// The projection-relevant state of a Node object.
    pub fn from_node(node: &crate::node_meta::NodeMeta) -> Self {
        let meta = &node.metadata;
        let label = |key: &str| meta.labels.as_ref().and_then(|l| l.get(key)).cloned();
        Self {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            assigned: label(LABEL_SGPU_ASSIGNED),
            clique: label(LABEL_GPU_CLIQUE),
            annotation: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_SGPU_ASSIGNMENT))
                .cloned(),
            ownership: node.key_ownership(),
        }
    }

    fn value(&self, key: ProjectionKey) -> Option<&str> {
        match key {
            ProjectionKey::AssignedLabel => self.assigned.as_deref(),
            ProjectionKey::CliqueLabel => self.clique.as_deref(),
            ProjectionKey::AssignmentAnnotation => self.annotation.as_deref(),
        }
    }

    /// Exactly projected for `desired` and owned by us alone
    /// (upstream `MatchesBinding`).
    pub fn matches(&self, desired: &DesiredProjection) -> bool {
        self.assigned.as_deref() == Some(ASSIGNED_VALUE)
            && self.clique.as_deref() == Some(desired.clique.as_str())
            && self.annotation.as_deref() == Some(desired.annotation.as_str())
            && ProjectionKey::ALL
                .iter()
                .all(|key| self.ownership.ours(*key) && !self.ownership.foreign(*key))
    }
}

/// What to do to project a binding onto an observed Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProjectDecision {
    /// Values current and owned by us: no write.
    UpToDate,
    /// Apply our three keys.
    Apply,
    /// A value someone else set or owns: report, never overwrite.
    Conflict(String),
}

/// Upstream's order: first the conflict check (a key someone else set or
/// owns), then the no-op check (every key already current and ours).
pub fn decide_project(observed: &ObservedNode, desired: &DesiredProjection) -> ProjectDecision {
    if let Some(assigned) = &observed.assigned
        && assigned != ASSIGNED_VALUE
    {
        return ProjectDecision::Conflict(format!(
            "Node {:?} label {LABEL_SGPU_ASSIGNED} is {assigned:?}",
            observed.name
        ));
    }
    if let Some(clique) = &observed.clique
        && *clique != desired.clique
    {
        return ProjectDecision::Conflict(format!(
            "Node {:?} label {LABEL_GPU_CLIQUE} is {clique:?}, expected {:?}",
            observed.name, desired.clique
        ));
    }
    if let Some(annotation) = &observed.annotation
        && *annotation != desired.annotation
    {
        let other = Assignment::decode(annotation).ok();
        if other.as_ref() != Some(&desired.assignment) {
            return ProjectDecision::Conflict(format!(
                "Node {:?} annotation {ANNOTATION_SGPU_ASSIGNMENT} names a different binding",
                observed.name
            ));
        }
    }
    for key in ProjectionKey::ALL {
        if observed.ownership.foreign(key) {
            let (_, name) = key.path();
            return ProjectDecision::Conflict(format!(
                "Node {:?} key {name} is owned by another field manager",
                observed.name
            ));
        }
    }
    if observed.matches(desired) {
        ProjectDecision::UpToDate
    } else {
        ProjectDecision::Apply
    }
}

/// Checks an apply response: same Node, our values, our sole ownership.
pub fn verify_applied(
    response: &ObservedNode,
    name: &str,
    uid: &str,
    desired: &DesiredProjection,
) -> Result<(), String> {
    if response.name != name || response.uid != uid {
        return Err(format!("apply answered for Node {:?}", response.name));
    }
    if response.matches(desired) {
        Ok(())
    } else {
        Err(format!(
            "Node {name:?} projection is co-owned by another field manager"
        ))
    }
}

/// What to do to clean up a binding's projection from an observed Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupDecision {
    /// Nothing of this binding is on the Node (absent, replaced, or the
    /// annotation names something else): done, foreign values preserved.
    AlreadyClean,
    /// Relinquish both labels, and the annotation unless `keep_annotation`.
    Relinquish { keep_annotation: bool },
    /// We own none of the fields to release (a foreign co-owner holds
    /// them): block until the Node changes, no apply loop.
    Blocked(String),
}

/// Upstream's cleanup steps 1 to 3 for an exact binding.
pub fn decide_cleanup(
    observed: Option<&ObservedNode>,
    node_uid: &str,
    names_binding: impl Fn(&Assignment) -> bool,
    expected_clique: &str,
) -> CleanupDecision {
    let Some(observed) = observed.filter(|node| node.uid == node_uid) else {
        return CleanupDecision::AlreadyClean;
    };
    let Some(annotation) = observed.annotation.as_deref() else {
        return CleanupDecision::AlreadyClean;
    };
    match Assignment::decode(annotation) {
        Ok(named) if names_binding(&named) => {}
        _ => return CleanupDecision::AlreadyClean,
    }
    let clique_ok = observed
        .clique
        .as_deref()
        .is_none_or(|clique| clique == expected_clique);
    let assigned_ok = observed
        .assigned
        .as_deref()
        .is_none_or(|v| v == ASSIGNED_VALUE);
    let incompatible = !assigned_ok || !clique_ok;
    if observed.ownership.ours_none() {
        return CleanupDecision::Blocked(format!(
            "Node {:?} projection is held by another field manager",
            observed.name
        ));
    }
    CleanupDecision::Relinquish {
        keep_annotation: incompatible,
    }
}

/// After a cleanup apply: whether any released key still has a value (a
/// co-owner kept it, or we still own it). The cleanup then blocks instead
/// of looping.
pub fn cleanup_retains(response: &ObservedNode, released: &[ProjectionKey]) -> bool {
    released.iter().any(|key| response.value(*key).is_some())
}

/// The keys a cleanup releases.
pub fn released_keys(keep_annotation: bool) -> Vec<ProjectionKey> {
    let mut keys = vec![ProjectionKey::AssignedLabel, ProjectionKey::CliqueLabel];
    if !keep_annotation {
        keys.push(ProjectionKey::AssignmentAnnotation);
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment() -> Assignment {
        Assignment {
            v: 1,
            inventory: NamedUid {
                name: "inv".into(),
                uid: "inv-uid".into(),
            },
            rack: NamedUid {
                name: "inv-compute-0-abc".into(),
                uid: "rack-uid".into(),
            },
            profile: ProfileStamp {
                name: "p".into(),
                uid: "p-uid".into(),
                revision: "00".into(),
            },
            rack_group: "compute".into(),
            rack_index: 0,
            node_index: 3,
            node_uid: "node-uid".into(),
        }
    }

    fn entry(manager: &str, operation: &str, keys: &[ProjectionKey]) -> ManagedFieldsEntry {
        let mut labels = serde_json::Map::new();
        let mut annotations = serde_json::Map::new();
        for key in keys {
            let (map, name) = key.path();
            let target = if map == "f:labels" {
                &mut labels
            } else {
                &mut annotations
            };
            target.insert(format!("f:{name}"), serde_json::json!({}));
        }
        ManagedFieldsEntry {
            api_version: Some("v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(serde_json::json!({"f:metadata": {
                "f:labels": labels, "f:annotations": annotations, "f:name": {}
            }}))),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: None,
            time: None,
        }
    }

    fn projected(owner_entries: Vec<ManagedFieldsEntry>) -> (ObservedNode, DesiredProjection) {
        let desired = DesiredProjection::new(assignment(), "fab", 0);
        let observed = ObservedNode {
            name: "node-a".into(),
            uid: "node-uid".into(),
            assigned: Some("true".into()),
            clique: Some(desired.clique.clone()),
            annotation: Some(desired.annotation.clone()),
            ownership: KeyOwnership::from_managed_fields(&owner_entries),
        };
        (observed, desired)
    }

    #[test]
    fn the_assignment_annotation_is_compact_json_in_upstream_key_order() {
        assert_eq!(
            assignment().encode(),
            r#"{"v":1,"inventory":{"name":"inv","uid":"inv-uid"},"rack":{"name":"inv-compute-0-abc","uid":"rack-uid"},"profile":{"name":"p","uid":"p-uid","revision":"00"},"rackGroup":"compute","rackIndex":0,"nodeIndex":3,"nodeUID":"node-uid"}"#
        );
        assert_eq!(Assignment::decode(&assignment().encode()), Ok(assignment()));
    }

    #[test]
    fn decoding_rejects_any_version_other_than_1() {
        let two = assignment().encode().replacen("\"v\":1", "\"v\":2", 1);
        assert_eq!(
            Assignment::decode(&two).unwrap_err().to_string(),
            "unsupported Node assignment version 2"
        );
    }

    #[test]
    fn project_skips_the_apply_when_exact_and_owned() {
        let (observed, desired) =
            projected(vec![entry(FIELD_MANAGER, "Apply", &ProjectionKey::ALL)]);
        assert_eq!(
            decide_project(&observed, &desired),
            ProjectDecision::UpToDate
        );
    }

    #[test]
    fn project_applies_when_values_are_exact_but_not_owned() {
        let (observed, desired) = projected(vec![]);
        assert_eq!(decide_project(&observed, &desired), ProjectDecision::Apply);
    }

    #[test]
    fn project_rejects_exact_values_with_a_foreign_owner() {
        let (observed, desired) = projected(vec![
            entry(FIELD_MANAGER, "Apply", &ProjectionKey::ALL),
            entry("kubectl", "Update", &[ProjectionKey::AssignmentAnnotation]),
        ]);
        assert!(matches!(
            decide_project(&observed, &desired),
            ProjectDecision::Conflict(_)
        ));
    }

    #[test]
    fn project_requires_clique_ownership() {
        let (observed, desired) = projected(vec![entry(
            FIELD_MANAGER,
            "Apply",
            &[
                ProjectionKey::AssignedLabel,
                ProjectionKey::AssignmentAnnotation,
            ],
        )]);
        assert_eq!(decide_project(&observed, &desired), ProjectDecision::Apply);
    }

    #[test]
    fn project_keeps_partial_and_conflicting_values() {
        let (mut observed, desired) = projected(vec![]);
        observed.clique = Some("other.0".into());
        assert!(matches!(
            decide_project(&observed, &desired),
            ProjectDecision::Conflict(_)
        ));
        let (mut observed, desired) = projected(vec![]);
        observed.assigned = Some("false".into());
        assert!(matches!(
            decide_project(&observed, &desired),
            ProjectDecision::Conflict(_)
        ));
        let (mut observed, desired) = projected(vec![]);
        let mut other = assignment();
        other.node_index = 9;
        observed.annotation = Some(other.encode());
        assert!(matches!(
            decide_project(&observed, &desired),
            ProjectDecision::Conflict(_)
        ));
        // Partial values of ours (only the assigned label) are completed.
        let (mut observed, desired) = projected(vec![]);
        observed.clique = None;
        observed.annotation = None;
        assert_eq!(decide_project(&observed, &desired), ProjectDecision::Apply);
    }

    #[test]
    fn project_rejects_a_foreign_co_owner_in_the_apply_response() {
        let (response, desired) = projected(vec![
            entry(FIELD_MANAGER, "Apply", &ProjectionKey::ALL),
            entry("someone", "Apply", &[ProjectionKey::CliqueLabel]),
        ]);
        assert!(verify_applied(&response, "node-a", "node-uid", &desired).is_err());
        let (response, desired) =
            projected(vec![entry(FIELD_MANAGER, "Apply", &ProjectionKey::ALL)]);
        assert!(verify_applied(&response, "node-a", "node-uid", &desired).is_ok());
        assert!(verify_applied(&response, "node-a", "other-uid", &desired).is_err());
    }

    #[test]
    fn cleanup_treats_an_absent_exact_uid_as_clean_and_preserves_a_stale_annotation() {
        let (observed, _) = projected(vec![entry(FIELD_MANAGER, "Apply", &ProjectionKey::ALL)]);
        assert_eq!(
            decide_cleanup(
                None,
                "node-uid",
                |a: &Assignment| *a == assignment(),
                "fab.0"
            ),
            CleanupDecision::AlreadyClean
        );
        assert_eq!(
            decide_cleanup(
                Some(&observed),
                "replaced-uid",
                |a: &Assignment| *a == assignment(),
                "fab.0"
            ),
            CleanupDecision::AlreadyClean
        );
        let mut newer = assignment();
        newer.rack.uid = "new-rack".into();
        assert_eq!(
            decide_cleanup(
                Some(&observed),
                "node-uid",
                |a: &Assignment| *a == newer,
                "fab.0"
            ),
            CleanupDecision::AlreadyClean
        );
    }

    #[test]
    fn cleanup_requires_the_exact_annotation_and_relinquishes_all_three_keys() {
        let (observed, _) = projected(vec![entry(FIELD_MANAGER, "Apply", &ProjectionKey::ALL)]);
        assert_eq!(
            decide_cleanup(
                Some(&observed),
                "node-uid",
                |a: &Assignment| *a == assignment(),
                "fab.0"
            ),
            CleanupDecision::Relinquish {
                keep_annotation: false
            }
        );
    }

    #[test]
    fn cleanup_keeps_the_annotation_when_a_label_is_incompatible() {
        let (mut observed, _) = projected(vec![entry(
            FIELD_MANAGER,
            "Apply",
            &[ProjectionKey::AssignmentAnnotation],
        )]);
        observed.assigned = Some("no".into());
        assert_eq!(
            decide_cleanup(
                Some(&observed),
                "node-uid",
                |a: &Assignment| *a == assignment(),
                "fab.0"
            ),
            CleanupDecision::Relinquish {
                keep_annotation: true
            }
        );
    }

    #[test]
    fn cleanup_blocks_when_a_foreign_co_owner_holds_every_field() {
        let (observed, _) = projected(vec![entry("kubectl", "Update", &ProjectionKey::ALL)]);
        assert!(matches!(
            decide_cleanup(
                Some(&observed),
                "node-uid",
                |a: &Assignment| *a == assignment(),
                "fab.0"
            ),
            CleanupDecision::Blocked(_)
        ));
    }

    #[test]
    fn cleanup_rejects_a_response_that_retains_fields() {
        let (response, _) = projected(vec![entry(FIELD_MANAGER, "Apply", &ProjectionKey::ALL)]);
        assert!(cleanup_retains(&response, &released_keys(false)));
        let clean = ObservedNode {
            name: "node-a".into(),
            uid: "node-uid".into(),
            ..ObservedNode::default()
        };
        assert!(!cleanup_retains(&clean, &released_keys(false)));
    }

    #[test]
    fn ownership_is_read_per_key_for_ours_and_for_other_managers() {
        let ours = entry(
            FIELD_MANAGER,
            "Apply",
            &[ProjectionKey::CliqueLabel, ProjectionKey::AssignedLabel],
        );
        // Our name with another operation is someone else for SSA.
        let ours_by_update = entry(FIELD_MANAGER, "Update", &[ProjectionKey::AssignedLabel]);
        let kubectl = entry("kubectl", "Apply", &[ProjectionKey::AssignmentAnnotation]);
        let mut status = entry("kubelet", "Update", &[ProjectionKey::CliqueLabel]);
        status.subresource = Some("status".into());
        let ownership = KeyOwnership::from_managed_fields(&[ours, ours_by_update, kubectl, status]);
        assert!(ownership.ours(ProjectionKey::CliqueLabel));
        assert!(
            !ownership.foreign(ProjectionKey::CliqueLabel),
            "a subresource entry owns nothing"
        );
        assert!(ownership.ours(ProjectionKey::AssignedLabel));
        assert!(ownership.foreign(ProjectionKey::AssignedLabel));
        assert!(!ownership.ours(ProjectionKey::AssignmentAnnotation));
        assert!(ownership.foreign(ProjectionKey::AssignmentAnnotation));
        assert!(!ownership.ours_none());
        assert!(KeyOwnership::from_managed_fields(&[]).ours_none());
    }
}
