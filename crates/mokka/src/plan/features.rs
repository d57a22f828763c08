//! Feature gates of `gpufleet mokka` (`--feature-gates`,
//! `MOKKA_CP_FEATURE_GATES`).
//!
//! Upstream's newest chart passes `--feature-gates`, but nothing upstream
//! says which gates exist, so none of them is copied. Ours switch what
//! gpufleet adds beyond upstream's older control plane, so an operator can
//! run exactly that older surface: the node-agent HTTP API, Kubernetes
//! Events, and runtime policies (whose CRD an older upstream install does
//! not have).
//!
//! The syntax is Kubernetes' own `--feature-gates`: `Name=bool` items
//! separated by commas, whitespace around items, names and values ignored,
//! empty items skipped (so an empty text means the defaults), a repeated
//! name taking its last value, and the booleans Go's `strconv.ParseBool`
//! accepts. Names are case-sensitive.

use std::fmt;

use thiserror::Error;

/// One gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FeatureGate {
    /// The node-agent HTTP API (`/v1alpha1/...` on the admin port).
    NodeAgentApi,
    /// Kubernetes Events for user-visible decisions (upstream records none).
    KubernetesEvents,
    /// Watching and applying `SGPURuntimePolicy` objects (only upstream's
    /// newest release has them).
    RuntimePolicies,
}

impl FeatureGate {
    /// Every gate, in name order (the order of logs and metrics).
    pub const ALL: [FeatureGate; 3] = [
        FeatureGate::KubernetesEvents,
        FeatureGate::NodeAgentApi,
        FeatureGate::RuntimePolicies,
    ];

    /// The name an operator writes.
    pub fn name(self) -> &'static str {
        match self {
            FeatureGate::NodeAgentApi => "NodeAgentAPI",
            FeatureGate::KubernetesEvents => "KubernetesEvents",
            FeatureGate::RuntimePolicies => "RuntimePolicies",
        }
    }

    /// Whether the gate is on when the operator does not mention it.
    pub fn default_enabled(self) -> bool {
        match self {
            FeatureGate::NodeAgentApi
            | FeatureGate::KubernetesEvents
            | FeatureGate::RuntimePolicies => true,
        }
    }

    fn from_name(name: &str) -> Option<FeatureGate> {
        FeatureGate::ALL
            .into_iter()
            .find(|gate| gate.name() == name)
    }
}

/// The effective gates of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureGates {
    pub node_agent_api: bool,
    pub kubernetes_events: bool,
    pub runtime_policies: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            node_agent_api: FeatureGate::NodeAgentApi.default_enabled(),
            kubernetes_events: FeatureGate::KubernetesEvents.default_enabled(),
            runtime_policies: FeatureGate::RuntimePolicies.default_enabled(),
        }
    }
}

/// A `--feature-gates` item that is not `KnownName=bool`.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FeatureGateError {
    #[error("item {item:?} must be Name=true or Name=false")]
    MissingValue { item: String },
    #[error("unrecognized feature gate {name:?} in item {item:?}; known gates: {known}")]
    UnknownGate {
        item: String,
        name: String,
        known: String,
    },
    #[error("item {item:?}: value {value:?} is not a boolean (true or false)")]
    NotBoolean { item: String, value: String },
}

/// Go's `strconv.ParseBool`, which Kubernetes' gate parser uses.
fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

impl FeatureGates {
    /// The defaults overridden by `text` (Kubernetes' syntax, see the module).
    pub fn parse(text: &str) -> Result<FeatureGates, FeatureGateError> {
        let mut gates = FeatureGates::default();
        for item in text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            let Some((name, value)) = item.split_once('=') else {
                return Err(FeatureGateError::MissingValue {
                    item: item.to_string(),
                });
            };
            let (name, value) = (name.trim(), value.trim());
            let Some(gate) = FeatureGate::from_name(name) else {
                return Err(FeatureGateError::UnknownGate {
                    item: item.to_string(),
                    name: name.to_string(),
                    known: FeatureGate::ALL.map(FeatureGate::name).join(", "),
                });
            };
            let Some(enabled) = parse_go_bool(value) else {
                return Err(FeatureGateError::NotBoolean {
                    item: item.to_string(),
                    value: value.to_string(),
                });
            };
            gates.set(gate, enabled);
        }
        Ok(gates)
    }

    pub fn enabled(&self, gate: FeatureGate) -> bool {
        match gate {
            FeatureGate::NodeAgentApi => self.node_agent_api,
            FeatureGate::KubernetesEvents => self.kubernetes_events,
            FeatureGate::RuntimePolicies => self.runtime_policies,
        }
    }

    pub fn set(&mut self, gate: FeatureGate, enabled: bool) {
        match gate {
            FeatureGate::NodeAgentApi => self.node_agent_api = enabled,
            FeatureGate::KubernetesEvents => self.kubernetes_events = enabled,
            FeatureGate::RuntimePolicies => self.runtime_policies = enabled,
        }
    }

    /// Every gate with its state, in name order.
    pub fn states(&self) -> impl Iterator<Item = (FeatureGate, bool)> + '_ {
        FeatureGate::ALL
            .into_iter()
            .map(|gate| (gate, self.enabled(gate)))
    }
}

/// `KubernetesEvents=true,NodeAgentAPI=true,...`: every gate, parseable back.
impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (position, (gate, enabled)) in self.states().enumerate() {
            if position > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={enabled}", gate.name())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_text_means_every_gate_at_its_default() {
        for text in ["", " ", ",", " , ,"] {
            assert_eq!(FeatureGates::parse(text), Ok(FeatureGates::default()));
        }
        let defaults = FeatureGates::default();
        assert!(defaults.node_agent_api && defaults.kubernetes_events && defaults.runtime_policies);
    }

    #[test]
    fn items_switch_their_gate_and_tolerate_whitespace() {
        let gates = FeatureGates::parse(
            " NodeAgentAPI = false ,KubernetesEvents=true,, RuntimePolicies=0 ",
        )
        .unwrap();
        assert!(!gates.node_agent_api);
        assert!(gates.kubernetes_events);
        assert!(!gates.runtime_policies);
    }

    #[test]
    fn go_booleans_are_accepted_and_the_last_repeat_wins() {
        for (value, expected) in [
            ("1", true),
            ("t", true),
            ("TRUE", true),
            ("True", true),
            ("0", false),
            ("F", false),
            ("FALSE", false),
            ("False", false),
        ] {
            let gates = FeatureGates::parse(&format!("KubernetesEvents={value}")).unwrap();
            assert_eq!(gates.kubernetes_events, expected, "{value}");
        }
        let gates = FeatureGates::parse("RuntimePolicies=false,RuntimePolicies=true").unwrap();
        assert!(gates.runtime_policies);
    }

    #[test]
    fn an_unknown_gate_is_refused_naming_the_item_and_the_known_gates() {
        let error = FeatureGates::parse("NodeAgentAPI=true,Foo=true").unwrap_err();
        assert_eq!(
            error.to_string(),
            "unrecognized feature gate \"Foo\" in item \"Foo=true\"; known gates: KubernetesEvents, NodeAgentAPI, RuntimePolicies"
        );
        // Names are case-sensitive, as Kubernetes'.
        assert!(matches!(
            FeatureGates::parse("nodeagentapi=false"),
            Err(FeatureGateError::UnknownGate { .. })
        ));
    }

    #[test]
    fn a_non_boolean_or_missing_value_is_refused_naming_the_item() {
        assert_eq!(
            FeatureGates::parse("KubernetesEvents=maybe")
                .unwrap_err()
                .to_string(),
            "item \"KubernetesEvents=maybe\": value \"maybe\" is not a boolean (true or false)"
        );
        assert_eq!(
            FeatureGates::parse("KubernetesEvents=").unwrap_err(),
            FeatureGateError::NotBoolean {
                item: "KubernetesEvents=".into(),
                value: String::new()
            }
        );
        assert_eq!(
            FeatureGates::parse("KubernetesEvents")
                .unwrap_err()
                .to_string(),
            "item \"KubernetesEvents\" must be Name=true or Name=false"
        );
    }

    #[test]
    fn the_display_form_lists_every_gate_and_parses_back() {
        let mut gates = FeatureGates::default();
        gates.set(FeatureGate::NodeAgentApi, false);
        let text = gates.to_string();
        assert_eq!(
            text,
            "KubernetesEvents=true,NodeAgentAPI=false,RuntimePolicies=true"
        );
        assert_eq!(FeatureGates::parse(&text), Ok(gates));
    }
}
