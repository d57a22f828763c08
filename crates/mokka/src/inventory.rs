//! Inventory validation: the checks the CRD schema cannot express, with
//! upstream's messages in upstream's order.

use thiserror::Error;

use crate::api::SGPUInventory;
use crate::limits::{MAX_INVENTORY_NODES, MAX_RACK_GROUPS};
use crate::selector::{PlacementSelector, SelectorError};
use crate::text::go_quote;

/// Why an inventory is not accepted (`Accepted=False`, reason `InvalidInventory`).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum InventoryError {
    #[error("inventory identity must include name and UID")]
    IdentityMissing,
    #[error("rackGroups must contain at most 64 entries")]
    TooManyGroups,
    #[error("rack group ID {} is invalid: {reason}", go_quote(.id))]
    InvalidGroupId { id: String, reason: String },
    #[error("rack group ID {} is duplicated", go_quote(.0))]
    DuplicateGroupId(String),
    #[error("rack group {} count is outside [1,100000]", go_quote(.0))]
    CountOutOfRange(String),
    #[error("rack group {} profileRef.name must not be empty", go_quote(.0))]
    ProfileNameEmpty(String),
    #[error("rack group {} selector: {source}", go_quote(.group))]
    InvalidSelector {
        group: String,
        #[source]
        source: SelectorError,
    },
}

impl InventoryError {
    /// The condition reason upstream reports for every validation failure.
    pub const REASON: &'static str = "InvalidInventory";
}

/// Validates an inventory. Groups are checked one after another, each with
/// the checks in upstream's order; the first failure is returned.
pub fn validate_inventory(inventory: &SGPUInventory) -> Result<(), InventoryError> {
    let name = inventory.metadata.name.as_deref().unwrap_or_default();
    let uid = inventory.metadata.uid.as_deref().unwrap_or_default();
    if name.is_empty() || uid.is_empty() {
        return Err(InventoryError::IdentityMissing);
    }
    let groups = &inventory.spec.rack_groups;
    if groups.len() > MAX_RACK_GROUPS {
        return Err(InventoryError::TooManyGroups);
    }
    let mut seen = std::collections::HashSet::with_capacity(groups.len());
    for group in groups {
        if let Some(reason) = dns1123_label_error(&group.id) {
            return Err(InventoryError::InvalidGroupId {
                id: group.id.clone(),
                reason,
            });
        }
        if !seen.insert(group.id.as_str()) {
            return Err(InventoryError::DuplicateGroupId(group.id.clone()));
        }
        if group.count < 1 || i64::from(group.count) > MAX_INVENTORY_NODES {
            return Err(InventoryError::CountOutOfRange(group.id.clone()));
        }
        if group.profile_ref.name.is_empty() {
            return Err(InventoryError::ProfileNameEmpty(group.id.clone()));
        }
        let selector = group
            .placement
            .as_ref()
            .and_then(|placement| placement.node_selector.as_ref());
        PlacementSelector::compile(selector).map_err(|source| InventoryError::InvalidSelector {
            group: group.id.clone(),
            source,
        })?;
    }
    Ok(())
}

/// Kubernetes' DNS-1123 label messages (apimachinery `IsDNS1123Label`),
/// joined with "; " when both apply.
pub fn dns1123_label_error(value: &str) -> Option<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !is_dns_label_ignoring_length(value) {
        if is_dns_subdomain_ignoring_length(value) {
            errors.push("must not contain dots".to_string());
        } else {
            errors.push(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
                 start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for \
                 validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                    .to_string(),
            );
        }
    }
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// The DNS-1123 label pattern without its length limit (the length has its
/// own message, as in apimachinery).
fn is_dns_label_ignoring_length(value: &str) -> bool {
    let bytes = value.as_bytes();
    let lower_alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && lower_alnum(bytes[0])
        && lower_alnum(bytes[bytes.len() - 1])
        && bytes.iter().all(|b| lower_alnum(*b) || *b == b'-')
}

/// The DNS-1123 subdomain pattern without its length limit.
fn is_dns_subdomain_ignoring_length(value: &str) -> bool {
    value.split('.').all(is_dns_label_ignoring_length)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use super::*;
    use crate::api::{Placement, ProfileNameRef, RackGroup, SGPUInventorySpec};

    fn rack_group(id: &str, count: i32) -> RackGroup {
        RackGroup {
            id: id.into(),
            count,
            profile_ref: ProfileNameRef {
                name: "gb300".into(),
            },
            placement: None,
        }
    }

    fn inventory(groups: Vec<RackGroup>) -> SGPUInventory {
        let mut inventory = SGPUInventory::new(
            "inv",
            SGPUInventorySpec {
                rack_groups: groups,
            },
        );
        inventory.metadata.uid = Some("inv-uid".into());
        inventory
    }

    fn message(inventory: &SGPUInventory) -> String {
        validate_inventory(inventory).unwrap_err().to_string()
    }

    #[test]
    fn a_valid_inventory_passes_including_boundary_counts() {
        validate_inventory(&inventory(vec![
            rack_group("training", 1),
            rack_group("inference", 100_000),
        ]))
        .unwrap();
    }

    #[test]
    fn validation_reports_upstream_messages() {
        let mut anonymous = inventory(vec![rack_group("a", 1)]);
        anonymous.metadata.uid = None;
        assert_eq!(
            message(&anonymous),
            "inventory identity must include name and UID"
        );
        let many = inventory((0..65).map(|i| rack_group(&format!("g{i}"), 1)).collect());
        assert_eq!(message(&many), "rackGroups must contain at most 64 entries");
        assert_eq!(
            message(&inventory(vec![rack_group("Bad_ID", 1)])),
            "rack group ID \"Bad_ID\" is invalid: a lowercase RFC 1123 label must consist of lower case alphanumeric \
             characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
             regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        );
        assert_eq!(
            message(&inventory(vec![rack_group("a.b", 1)])),
            "rack group ID \"a.b\" is invalid: must not contain dots"
        );
        assert_eq!(
            message(&inventory(vec![rack_group(&"a".repeat(64), 1)])),
            format!(
                "rack group ID \"{}\" is invalid: must be no more than 63 characters",
                "a".repeat(64)
            )
        );
        assert_eq!(
            message(&inventory(vec![rack_group("a", 1), rack_group("a", 2)])),
            "rack group ID \"a\" is duplicated"
        );
        assert_eq!(
            message(&inventory(vec![rack_group("a", 0)])),
            "rack group \"a\" count is outside [1,100000]"
        );
        assert_eq!(
            message(&inventory(vec![rack_group("a", 100_001)])),
            "rack group \"a\" count is outside [1,100000]"
        );
        let mut nameless = rack_group("a", 1);
        nameless.profile_ref.name.clear();
        assert_eq!(
            message(&inventory(vec![nameless])),
            "rack group \"a\" profileRef.name must not be empty"
        );
    }

    #[test]
    fn a_selector_on_a_projected_label_is_rejected_with_upstreams_message() {
        let mut by_label = rack_group("compute", 1);
        by_label.placement = Some(Placement {
            node_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "mokka.nvidia.com/sgpu-assigned".to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            }),
        });
        assert_eq!(
            message(&inventory(vec![by_label])),
            "rack group \"compute\" selector: selector must not reference controller-owned label \"mokka.nvidia.com/sgpu-assigned\""
        );
        let mut by_expression = rack_group("compute", 1);
        by_expression.placement = Some(Placement {
            node_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "nvidia.com/gpu.clique".into(),
                    operator: "Exists".into(),
                    values: None,
                }]),
                ..Default::default()
            }),
        });
        assert_eq!(
            message(&inventory(vec![by_expression])),
            "rack group \"compute\" selector: selector must not reference controller-owned label \"nvidia.com/gpu.clique\""
        );
    }
}
