//! What the controller stamps on every rack, and how it tells its own racks
//! from someone else's: the labels, annotation, finalizer and owner
//! reference an upstream `SGPURack` carries.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, ObjectMeta, OwnerReference,
};

use crate::api::{API_VERSION, SGPURack, SGPURackSpec};
use crate::plan::projection::FIELD_MANAGER;

/// Label naming the inventory of a rack (only when the name is a valid label value).
pub const LABEL_INVENTORY: &str = "mokka.nvidia.com/inventory";
/// Label naming the rack group of a rack.
pub const LABEL_RACK_GROUP: &str = "mokka.nvidia.com/rack-group";
/// Label holding the rack index.
pub const LABEL_RACK_INDEX: &str = "mokka.nvidia.com/rack-index";
/// Annotation holding the inventory UID.
pub const ANNOTATION_INVENTORY_UID: &str = "mokka.nvidia.com/inventory-uid";
/// Finalizer the controller puts on every rack.
pub const FINALIZER_RACK_CLEANUP: &str = "mokka.nvidia.com/rack-cleanup";
/// Finalizer the controller puts on every inventory.
pub const FINALIZER_INVENTORY_CLEANUP: &str = "mokka.nvidia.com/inventory-cleanup";
/// The owner kind of every rack.
pub const INVENTORY_KIND: &str = "SGPUInventory";

/// A valid Kubernetes label value: at most 63 characters, alphanumerics at
/// both ends, `-`, `_` and `.` between.
pub fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.len() <= 63
        && bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The metadata the controller stamps on a rack: labels, the inventory UID
/// annotation, the rack finalizer and one controller owner reference.
pub fn rack_metadata(
    name: &str,
    inventory_name: &str,
    inventory_uid: &str,
    group: &str,
    rack_index: i32,
) -> ObjectMeta {
    let mut labels = BTreeMap::new();
    if is_label_value(inventory_name) {
        labels.insert(LABEL_INVENTORY.to_string(), inventory_name.to_string());
    }
    labels.insert(LABEL_RACK_GROUP.to_string(), group.to_string());
    labels.insert(LABEL_RACK_INDEX.to_string(), rack_index.to_string());
    ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(
            ANNOTATION_INVENTORY_UID.to_string(),
            inventory_uid.to_string(),
        )])),
        finalizers: Some(vec![FINALIZER_RACK_CLEANUP.to_string()]),
        owner_references: Some(vec![inventory_owner(inventory_name, inventory_uid)]),
        ..ObjectMeta::default()
    }
}

/// The controller owner reference to an inventory. `blockOwnerDeletion` is
/// set as upstream sets it: a foreground delete of the inventory waits for
/// its racks (whose cleanup finalizer releases their Nodes first). Where the
/// OwnerReferencesPermissionEnforcement admission plugin runs, this needs
/// `update` on `sgpuinventories/finalizers` (deploy/mokka's ClusterRole).
pub fn inventory_owner(inventory_name: &str, inventory_uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: API_VERSION.to_string(),
        kind: INVENTORY_KIND.to_string(),
        name: inventory_name.to_string(),
        uid: inventory_uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A complete rack object as the controller creates it.
pub fn rack_object(
    name: &str,
    inventory_name: &str,
    inventory_uid: &str,
    spec: SGPURackSpec,
) -> SGPURack {
    let metadata = rack_metadata(
        name,
        inventory_name,
        inventory_uid,
        &spec.identity.rack_group,
        spec.identity.rack_index,
    );
    SGPURack {
        metadata,
        spec,
        status: None,
    }
}

/// The controller owner reference of a rack, when it names an SGPUInventory
/// of our API version (upstream `InventoryOwner`).
pub fn controller_owner(rack: &SGPURack) -> Option<&OwnerReference> {
    rack.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|owner| {
            owner.controller == Some(true)
                && owner.api_version == API_VERSION
                && owner.kind == INVENTORY_KIND
        })
}

/// Controlled by exactly this inventory instance, and its `inventoryRef`
/// agrees (upstream "owned").
pub fn is_owned_by(rack: &SGPURack, inventory_name: &str, inventory_uid: &str) -> bool {
    controller_owner(rack).is_some_and(|owner| {
        owner.name == inventory_name
            && owner.uid == inventory_uid
            && !owner.uid.is_empty()
            && rack.spec.inventory_ref.name == inventory_name
            && rack.spec.inventory_ref.uid == inventory_uid
    })
}

/// Controlled by the inventory its own `inventoryRef` names (upstream
/// `OwnerMatchesInventoryRef`): only such racks contribute bindings.
pub fn owner_matches_inventory_ref(rack: &SGPURack) -> bool {
    let reference = &rack.spec.inventory_ref;
    !reference.name.is_empty()
        && !reference.uid.is_empty()
        && is_owned_by(rack, &reference.name, &reference.uid)
}

/// Whether the controller-owned parts of `current` differ from `desired`
/// (spec, our labels and annotation, finalizer, owner reference).
pub fn rack_differs(current: &SGPURack, desired: &SGPURack) -> bool {
    if current.spec != desired.spec {
        return true;
    }
    let ours_missing = |have: &Option<BTreeMap<String, String>>,
                        want: &Option<BTreeMap<String, String>>| {
        want.as_ref().is_some_and(|want| {
            want.iter()
                .any(|(k, v)| have.as_ref().and_then(|have| have.get(k)) != Some(v))
        })
    };
    if ours_missing(&current.metadata.labels, &desired.metadata.labels)
        || ours_missing(&current.metadata.annotations, &desired.metadata.annotations)
    {
        return true;
    }
    let has_finalizer = current
        .metadata
        .finalizers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|f| f == FINALIZER_RACK_CLEANUP);
    let deleting = current.metadata.deletion_timestamp.is_some();
    if !has_finalizer && !deleting {
        return true;
    }
    let owner = controller_owner(current);
    let want = desired
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .first();
    // blockOwnerDeletion is compared too, so racks written before it was
    // set are brought in line by one update each.
    let key = |o: &OwnerReference| (o.name.clone(), o.uid.clone(), o.block_owner_deletion);
    owner.map(key) != want.map(key)
}

/// `current` with the controller-owned parts taken from `desired`, keeping
/// everything else (foreign labels, resourceVersion for the precondition).
pub fn merge_rack(current: &SGPURack, desired: &SGPURack) -> SGPURack {
    let mut merged = current.clone();
    merged.spec = desired.spec.clone();
    for (have, want) in [
        (&mut merged.metadata.labels, &desired.metadata.labels),
        (
            &mut merged.metadata.annotations,
            &desired.metadata.annotations,
        ),
    ] {
        if let Some(want) = want {
            let have = have.get_or_insert_with(BTreeMap::new);
            for (k, v) in want {
                have.insert(k.clone(), v.clone());
            }
        }
    }
    let finalizers = merged.metadata.finalizers.get_or_insert_with(Vec::new);
    if merged.metadata.deletion_timestamp.is_none()
        && !finalizers.iter().any(|f| f == FINALIZER_RACK_CLEANUP)
    {
        finalizers.push(FINALIZER_RACK_CLEANUP.to_string());
    }
    let owners = merged
        .metadata
        .owner_references
        .get_or_insert_with(Vec::new);
    owners.retain(|o| !(o.controller == Some(true) && o.kind == INVENTORY_KIND));
    owners.extend(desired.metadata.owner_references.iter().flatten().cloned());
    merged.status = None;
    merged.metadata.managed_fields = None;
    merged
}

/// Whether only our field manager owns the rack spec (operation Apply or
/// Update, main resource, our API version).
pub fn spec_exclusively_ours(rack: &SGPURack) -> bool {
    let Some(entries) = rack.metadata.managed_fields.as_deref() else {
        // Nothing recorded (the server does not track fields): nothing foreign.
        return true;
    };
    entries.iter().all(|entry| {
        let owns_spec = entry
            .fields_v1
            .as_ref()
            .is_some_and(|fields| fields.0.get("f:spec").is_some());
        !owns_spec
            || (entry.manager.as_deref() == Some(FIELD_MANAGER)
                && matches!(entry.operation.as_deref(), Some("Apply" | "Update"))
                && entry.subresource.as_deref().is_none_or(str::is_empty)
                && entry.api_version.as_deref() == Some(API_VERSION))
    })
}

/// What the rack cache keeps of a rack's managedFields: the entries that own
/// part of the spec, each reduced to its manager, operation, subresource and
/// API version with `fieldsV1` cut to `{"f:spec": {}}`. That is all
/// [`spec_exclusively_ours`] reads, and it answers the same for the summary
/// as for the whole list. The whole list names every field of every Node
/// slot, a third of a 100-Node rack's memory in the cache. A summary must
/// never be written back: rack writes send no managedFields.
pub fn compact_managed_fields(entries: Vec<ManagedFieldsEntry>) -> Vec<ManagedFieldsEntry> {
    entries
        .into_iter()
        .filter(|entry| {
            entry
                .fields_v1
                .as_ref()
                .is_some_and(|fields| fields.0.get("f:spec").is_some())
        })
        .map(|entry| ManagedFieldsEntry {
            fields_v1: Some(FieldsV1(serde_json::json!({"f:spec": {}}))),
            time: None,
            ..entry
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::example_profile;
    use crate::identity::rack_name;
    use crate::render::{RackCoordinate, render_rack};

    fn managed(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        api_version: &str,
        fields: serde_json::Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(Into::into),
            api_version: Some(api_version.into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            time: None,
        }
    }

    #[test]
    fn the_compacted_managed_fields_answer_the_ownership_check_as_the_whole_list_does() {
        let spec = serde_json::json!({"f:spec": {"f:nodes": {"k:{\"index\":0}": {
            ".": {}, "f:index": {}, "f:nodeRef": {"f:name": {}, "f:uid": {}}
        }}}, "f:metadata": {"f:labels": {"f:a": {}}}});
        let status = serde_json::json!({"f:status": {"f:assignedNodes": {}}});
        let ours = managed(FIELD_MANAGER, "Update", None, API_VERSION, spec.clone());
        let cases = [
            (vec![ours.clone()], true),
            (
                vec![
                    ours.clone(),
                    managed(
                        FIELD_MANAGER,
                        "Update",
                        Some("status"),
                        API_VERSION,
                        status.clone(),
                    ),
                    managed(
                        "kubectl-label",
                        "Update",
                        None,
                        API_VERSION,
                        serde_json::json!({"f:metadata": {}}),
                    ),
                ],
                true,
            ),
            (
                vec![
                    ours.clone(),
                    managed("kubectl-edit", "Update", None, API_VERSION, spec.clone()),
                ],
                false,
            ),
            (
                vec![managed(
                    FIELD_MANAGER,
                    "Update",
                    None,
                    "mokka.nvidia.com/v1beta1",
                    spec.clone(),
                )],
                false,
            ),
            (
                vec![managed(
                    FIELD_MANAGER,
                    "Update",
                    Some("status"),
                    API_VERSION,
                    spec.clone(),
                )],
                false,
            ),
            (
                vec![managed(
                    FIELD_MANAGER,
                    "Apply",
                    None,
                    API_VERSION,
                    spec.clone(),
                )],
                true,
            ),
            (Vec::new(), true),
        ];
        for (entries, exclusive) in cases {
            let mut rack = rendered();
            rack.metadata.managed_fields = Some(entries.clone());
            assert_eq!(spec_exclusively_ours(&rack), exclusive, "{entries:?}");
            let compacted = compact_managed_fields(entries.clone());
            // Only spec owners are kept, and of their fields only `f:spec`.
            assert!(compacted.len() <= entries.len());
            for entry in &compacted {
                assert_eq!(
                    entry.fields_v1.as_ref().map(|f| &f.0),
                    Some(&serde_json::json!({"f:spec": {}}))
                );
            }
            rack.metadata.managed_fields = Some(compacted);
            assert_eq!(spec_exclusively_ours(&rack), exclusive, "{entries:?}");
        }
    }

    fn rendered() -> SGPURack {
        let profile = example_profile("p", "p-uid", 2, 1);
        let spec = render_rack(
            RackCoordinate {
                inventory_name: "inv",
                inventory_uid: "inv-uid",
                group: "compute",
                rack_index: 0,
                rack_count: 1,
            },
            Some(&profile),
        )
        .unwrap();
        rack_object(
            &rack_name("inv", "inv-uid", "compute", 0),
            "inv",
            "inv-uid",
            spec,
        )
    }

    #[test]
    fn a_rendered_rack_is_owned_by_its_inventory_only() {
        let rack = rendered();
        assert!(is_owned_by(&rack, "inv", "inv-uid"));
        assert!(owner_matches_inventory_ref(&rack));
        assert!(!is_owned_by(&rack, "inv", "other-uid"));
        let mut foreign = rack.clone();
        foreign.metadata.owner_references = None;
        assert!(!is_owned_by(&foreign, "inv", "inv-uid"));
    }

    #[test]
    fn only_controller_fields_count_as_a_difference() {
        let rack = rendered();
        let mut current = rack.clone();
        current
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("team".into(), "a".into());
        current.metadata.resource_version = Some("7".into());
        assert!(!rack_differs(&current, &rack));
        current.spec.nodes[0].node_ref = Some(crate::api::NodeRef {
            name: "n".into(),
            uid: "u".into(),
        });
        assert!(rack_differs(&current, &rack));
        let merged = merge_rack(&current, &rack);
        assert_eq!(merged.spec, rack.spec);
        assert_eq!(merged.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(
            merged
                .metadata
                .labels
                .unwrap()
                .get("team")
                .map(String::as_str),
            Some("a")
        );
    }

    #[test]
    fn racks_block_their_inventory_deletion_as_upstream() {
        let rack = rendered();
        let owner = controller_owner(&rack).unwrap();
        assert_eq!(owner.block_owner_deletion, Some(true));
        // A rack written before the flag was set is updated to carry it.
        let mut older = rack.clone();
        older.metadata.owner_references.as_mut().unwrap()[0].block_owner_deletion = Some(false);
        assert!(rack_differs(&older, &rack));
        let merged = merge_rack(&older, &rack);
        assert_eq!(
            controller_owner(&merged).unwrap().block_owner_deletion,
            Some(true)
        );
    }

    #[test]
    fn label_values_follow_kubernetes_rules() {
        assert!(is_label_value("inventory-a"));
        assert!(is_label_value(""));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
