//! Placement selectors: Kubernetes label selectors compiled once and matched
//! against Node labels many times.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use thiserror::Error;

use crate::api::{LABEL_GPU_CLIQUE, LABEL_SGPU_ASSIGNED, LABEL_SGPU_NODE};
use crate::text::go_quote;

/// Labels the controller writes itself. A placement selector on them would
/// let the controller's own projection change the allocation (a feedback loop).
pub const CONTROLLER_OWNED_LABELS: [&str; 2] = [LABEL_SGPU_ASSIGNED, LABEL_GPU_CLIQUE];

/// Why a placement selector is rejected.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SelectorError {
    #[error("selector must not reference controller-owned label {}", go_quote(.0))]
    ControllerOwnedLabel(String),
    #[error("selector key {}: {reason}", go_quote(.key))]
    InvalidKey { key: String, reason: &'static str },
    #[error("selector value {} of key {}: {reason}", go_quote(.value), go_quote(.key))]
    InvalidValue {
        key: String,
        value: String,
        reason: &'static str,
    },
    #[error("selector operator {} of key {} is not one of In, NotIn, Exists, DoesNotExist", go_quote(.operator), go_quote(.key))]
    UnknownOperator { key: String, operator: String },
    #[error("selector operator {operator} of key {} requires at least one value", go_quote(.key))]
    ValuesRequired { key: String, operator: &'static str },
    #[error("selector operator {operator} of key {} takes no values", go_quote(.key))]
    ValuesForbidden { key: String, operator: &'static str },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(key, value) => labels.get(key) == Some(value),
            Requirement::In(key, values) => labels.get(key).is_some_and(|v| values.contains(v)),
            Requirement::NotIn(key, values) => labels.get(key).is_none_or(|v| !values.contains(v)),
            Requirement::Exists(key) => labels.contains_key(key),
            Requirement::DoesNotExist(key) => !labels.contains_key(key),
        }
    }
}

/// A validated placement selector. An absent or empty selector matches every
/// Node (the caller restricts to eligible Nodes first).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementSelector {
    requirements: Vec<Requirement>,
}

impl PlacementSelector {
    /// Validates and compiles `selector`. Controller-owned labels are rejected
    /// in `matchLabels` and in `matchExpressions` alike.
    pub fn compile(selector: Option<&LabelSelector>) -> Result<Self, SelectorError> {
        let Some(selector) = selector else {
            return Ok(Self::default());
        };
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            check_key(key)?;
            check_value(key, value)?;
            requirements.push(Requirement::Equals(key.clone(), value.clone()));
        }
        for expression in selector.match_expressions.iter().flatten() {
            let key = &expression.key;
            check_key(key)?;
            let values = expression.values.clone().unwrap_or_default();
            let requirement = match expression.operator.as_str() {
                "In" | "NotIn" => {
                    let operator = if expression.operator == "In" {
                        "In"
                    } else {
                        "NotIn"
                    };
                    if values.is_empty() {
                        return Err(SelectorError::ValuesRequired {
                            key: key.clone(),
                            operator,
                        });
                    }
                    for value in &values {
                        check_value(key, value)?;
                    }
                    if operator == "In" {
                        Requirement::In(key.clone(), values)
                    } else {
                        Requirement::NotIn(key.clone(), values)
                    }
                }
                "Exists" | "DoesNotExist" => {
                    let exists = expression.operator == "Exists";
                    let operator = if exists { "Exists" } else { "DoesNotExist" };
                    if !values.is_empty() {
                        return Err(SelectorError::ValuesForbidden {
                            key: key.clone(),
                            operator,
                        });
                    }
                    if exists {
                        Requirement::Exists(key.clone())
                    } else {
                        Requirement::DoesNotExist(key.clone())
                    }
                }
                other => {
                    return Err(SelectorError::UnknownOperator {
                        key: key.clone(),
                        operator: other.to_string(),
                    });
                }
            };
            requirements.push(requirement);
        }
        Ok(Self { requirements })
    }

    /// True when every requirement holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|requirement| requirement.matches(labels))
    }

    /// True for a selector with no requirements (it selects every Node).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// A Node is eligible for Mokka when it carries `mokka.nvidia.com/sgpu-node=true`.
pub fn is_eligible(labels: &BTreeMap<String, String>) -> bool {
    labels
        .get(LABEL_SGPU_NODE)
        .is_some_and(|value| value == "true")
}

fn check_key(key: &str) -> Result<(), SelectorError> {
    if CONTROLLER_OWNED_LABELS.contains(&key) {
        return Err(SelectorError::ControllerOwnedLabel(key.to_string()));
    }
    let invalid = |reason| {
        Err(SelectorError::InvalidKey {
            key: key.to_string(),
            reason,
        })
    };
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns_subdomain(prefix)
    {
        return invalid("prefix must be a DNS-1123 subdomain");
    }
    if !is_qualified_name_part(name) {
        return invalid(
            "name must be 1-63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric",
        );
    }
    Ok(())
}

fn check_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_qualified_name_part(value) {
        return Ok(());
    }
    Err(SelectorError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        reason: "must be empty or 1-63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric",
    })
}

fn is_qualified_name_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// RFC 1123 subdomain: dot-separated DNS labels, at most 253 characters.
pub fn is_dns_subdomain(value: &str) -> bool {
    !value.is_empty() && value.len() <= 253 && value.split('.').all(is_dns_label)
}

/// RFC 1123 label: 1-63 lowercase alphanumerics or '-', alphanumeric at both ends.
pub fn is_dns_label(value: &str) -> bool {
    let bytes = value.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && is_lower_alnum(bytes[0])
        && is_lower_alnum(bytes[bytes.len() - 1])
        && bytes.iter().all(|b| is_lower_alnum(*b) || *b == b'-')
}

fn is_lower_alnum(byte: u8) -> bool {
    byte.is_ascii_lowercase() || byte.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expression(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| v.to_string()).collect())
            },
        }
    }

    #[test]
    fn an_empty_selector_matches_every_node() {
        let absent = PlacementSelector::compile(None).unwrap();
        let empty = PlacementSelector::compile(Some(&LabelSelector::default())).unwrap();
        for selector in [absent, empty] {
            assert!(selector.is_empty());
            assert!(selector.matches(&labels(&[])));
            assert!(selector.matches(&labels(&[("pool", "a")])));
        }
    }

    #[test]
    fn projected_labels_are_rejected_in_match_labels_and_match_expressions() {
        for key in CONTROLLER_OWNED_LABELS {
            let by_label = LabelSelector {
                match_labels: Some(labels(&[(key, "true")])),
                ..Default::default()
            };
            let by_expression = LabelSelector {
                match_expressions: Some(vec![expression(key, "Exists", &[])]),
                ..Default::default()
            };
            for selector in [by_label, by_expression] {
                assert_eq!(
                    PlacementSelector::compile(Some(&selector))
                        .unwrap_err()
                        .to_string(),
                    format!("selector must not reference controller-owned label \"{key}\"")
                );
            }
        }
    }

    #[test]
    fn operator_owned_labels_are_accepted() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[
                ("mokka.nvidia.com/sgpu-group", "training"),
                (LABEL_SGPU_NODE, "true"),
            ])),
            ..Default::default()
        };
        let compiled = PlacementSelector::compile(Some(&selector)).unwrap();
        assert!(compiled.matches(&labels(&[
            ("mokka.nvidia.com/sgpu-group", "training"),
            (LABEL_SGPU_NODE, "true")
        ])));
        assert!(!compiled.matches(&labels(&[
            ("mokka.nvidia.com/sgpu-group", "inference"),
            (LABEL_SGPU_NODE, "true")
        ])));
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let selector = LabelSelector {
            match_expressions: Some(vec![
                expression("pool", "In", &["a", "b"]),
                expression("zone", "NotIn", &["z1"]),
                expression("gpu", "Exists", &[]),
                expression("drain", "DoesNotExist", &[]),
            ]),
            ..Default::default()
        };
        let compiled = PlacementSelector::compile(Some(&selector)).unwrap();
        assert!(compiled.matches(&labels(&[("pool", "a"), ("gpu", "")])));
        assert!(compiled.matches(&labels(&[("pool", "b"), ("gpu", "x"), ("zone", "z2")])));
        assert!(!compiled.matches(&labels(&[("pool", "c"), ("gpu", "")])));
        assert!(!compiled.matches(&labels(&[("pool", "a"), ("gpu", ""), ("zone", "z1")])));
        assert!(!compiled.matches(&labels(&[("pool", "a")])));
        assert!(!compiled.matches(&labels(&[("pool", "a"), ("gpu", ""), ("drain", "")])));
    }

    #[test]
    fn invalid_selectors_are_rejected() {
        let bad = |expression: LabelSelectorRequirement| {
            PlacementSelector::compile(Some(&LabelSelector {
                match_expressions: Some(vec![expression]),
                ..Default::default()
            }))
            .unwrap_err()
        };
        assert!(matches!(
            bad(expression("pool", "Near", &["a"])),
            SelectorError::UnknownOperator { .. }
        ));
        assert!(matches!(
            bad(expression("pool", "In", &[])),
            SelectorError::ValuesRequired { .. }
        ));
        assert!(matches!(
            bad(expression("pool", "Exists", &["a"])),
            SelectorError::ValuesForbidden { .. }
        ));
        assert!(matches!(
            bad(expression("bad key!", "Exists", &[])),
            SelectorError::InvalidKey { .. }
        ));
        assert!(matches!(
            bad(expression("Bad_Prefix/key", "Exists", &[])),
            SelectorError::InvalidKey { .. }
        ));
        assert!(matches!(
            bad(expression("pool", "In", &["no spaces"])),
            SelectorError::InvalidValue { .. }
        ));
    }

    #[test]
    fn eligibility_needs_the_sgpu_node_label_set_to_true() {
        assert!(is_eligible(&labels(&[(LABEL_SGPU_NODE, "true")])));
        assert!(!is_eligible(&labels(&[(LABEL_SGPU_NODE, "false")])));
        assert!(!is_eligible(&labels(&[])));
    }
}
