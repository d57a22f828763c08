//! Which registered exec handler answers a command: pure matching on the
//! namespace, the pod's labels, the container and a command prefix.

use std::collections::BTreeMap;

use crate::selector::LabelSelector;

/// A label selector that did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?} for an exec handler: {reason}")]
pub struct InvalidSelector {
    pub selector: String,
    pub reason: String,
}

/// Chooses the commands an exec handler answers. Every part left unset
/// matches anything; [`ExecMatcher::any`] matches every command everywhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecMatcher {
    namespace: Option<String>,
    labels: BTreeMap<String, String>,
    selector: Option<LabelSelector>,
    container: Option<String>,
    command_prefix: Vec<String>,
}

/// The exec being matched, borrowed from the request.
#[derive(Debug, Clone, Copy)]
pub struct ExecTarget<'a> {
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub container: &'a str,
    pub command: &'a [String],
}

impl ExecMatcher {
    /// Matches every exec in every pod.
    pub fn any() -> Self {
        Self::default()
    }

    /// Only pods in this namespace.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Only pods carrying all these labels with these values.
    pub fn labels<I, K, V>(mut self, labels: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.labels
            .extend(labels.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Only pods matching a label selector in query-string form
    /// (`app=x`, `tier in (a,b)`, `!canary`, comma-joined).
    pub fn selector(mut self, selector: &str) -> Result<Self, InvalidSelector> {
        let parsed = LabelSelector::parse(selector).map_err(|reason| InvalidSelector {
            selector: selector.to_string(),
            reason,
        })?;
        self.selector = Some(parsed);
        Ok(self)
    }

    /// Only this container.
    pub fn container(mut self, container: impl Into<String>) -> Self {
        self.container = Some(container.into());
        self
    }

    /// Only commands whose first arguments are exactly these
    /// (`["nvidia-smi"]` matches `nvidia-smi -q -x`).
    pub fn command<I, S>(mut self, prefix: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.command_prefix = prefix.into_iter().map(Into::into).collect();
        self
    }

    pub fn matches(&self, target: &ExecTarget<'_>) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| ns == target.namespace)
            && self
                .labels
                .iter()
                .all(|(k, v)| target.labels.get(k) == Some(v))
            && self
                .selector
                .as_ref()
                .is_none_or(|s| s.matches(target.labels))
            && self
                .container
                .as_deref()
                .is_none_or(|c| c == target.container)
            && target.command.starts_with(&self.command_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn target<'a>(labels: &'a BTreeMap<String, String>, command: &'a [String]) -> ExecTarget<'a> {
        ExecTarget {
            namespace: "gpu-operator",
            labels,
            container: "nvidia-device-plugin",
            command,
        }
    }

    #[test]
    fn an_empty_matcher_matches_everything() {
        let labels = BTreeMap::new();
        let command = strings(&["anything"]);
        assert!(ExecMatcher::any().matches(&target(&labels, &command)));
    }

    #[test]
    fn a_command_prefix_matches_longer_commands_but_not_other_programs() {
        let labels = BTreeMap::new();
        let matcher = ExecMatcher::any().command(["nvidia-smi"]);
        let full = strings(&["nvidia-smi", "-q", "-x"]);
        let other = strings(&["nvidia-smi-extra"]);
        let empty = strings(&[]);
        assert!(matcher.matches(&target(&labels, &full)));
        assert!(!matcher.matches(&target(&labels, &other)));
        assert!(!matcher.matches(&target(&labels, &empty)));
    }

    #[test]
    fn namespace_container_and_labels_must_all_agree() {
        let labels: BTreeMap<String, String> = [(
            "app".to_string(),
            "nvidia-device-plugin-daemonset".to_string(),
        )]
        .into();
        let command = strings(&["nvidia-smi"]);
        let t = target(&labels, &command);
        let good = ExecMatcher::any()
            .namespace("gpu-operator")
            .container("nvidia-device-plugin")
            .labels([("app", "nvidia-device-plugin-daemonset")]);
        assert!(good.matches(&t));
        assert!(!good.clone().namespace("default").matches(&t));
        assert!(!good.clone().container("toolkit").matches(&t));
        assert!(!good.labels([("tier", "gpu")]).matches(&t));
    }

    #[test]
    fn selectors_use_the_kubernetes_grammar_and_reject_bad_input() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "dp".to_string())].into();
        let command = strings(&["x"]);
        let t = target(&labels, &command);
        let m = ExecMatcher::any()
            .selector("app in (dp, other),!canary")
            .unwrap();
        assert!(m.matches(&t));
        let m = ExecMatcher::any().selector("app notin (dp)").unwrap();
        assert!(!m.matches(&t));
        let err = ExecMatcher::any().selector("app in (").unwrap_err();
        assert_eq!(err.selector, "app in (");
    }
}
