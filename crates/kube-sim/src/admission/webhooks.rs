//! Webhook configurations read into the form a request is matched against:
//! rules, scope, namespace and object selectors, `matchPolicy` and
//! `matchConditions`, as kube-apiserver's webhook dispatchers decide which
//! webhooks a request reaches. Pure: no I/O, no store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::schema::Expression;
use crate::selector::LabelSelector;

/// What a request does, as admission names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// The request facts rules are matched on.
#[derive(Debug, Clone)]
pub(crate) struct Attributes {
    pub operation: Operation,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub kind: String,
    pub namespaced: bool,
    pub namespace: String,
    pub name: String,
    /// Every version this resource is served at, for `matchPolicy:
    /// Equivalent`.
    pub served_versions: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailurePolicy {
    Fail,
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SideEffects {
    None,
    NoneOnDryRun,
    /// `Some` or `Unknown`: such a webhook refuses dry-run requests.
    Some,
}

/// Where a webhook is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Url(String),
    Service {
        namespace: String,
        name: String,
        path: String,
        port: u16,
    },
}

/// One rule of a webhook or a policy's match resources.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    scope: String,
    /// A policy rule's `resourceNames`; empty takes every name.
    names: Vec<String>,
}

impl Rule {
    pub(crate) fn read(r: &Value) -> Rule {
        Rule {
            operations: strings(r.get("operations")),
            groups: strings(r.get("apiGroups")),
            versions: strings(r.get("apiVersions")),
            resources: strings(r.get("resources")),
            scope: r
                .get("scope")
                .and_then(Value::as_str)
                .unwrap_or("*")
                .to_string(),
            names: strings(r.get("resourceNames")),
        }
    }

    /// Whether the rule takes the request at `version`.
    pub(crate) fn matches(&self, attrs: &Attributes, version: &str) -> bool {
        rule_matches(self, attrs, version)
            && (self.names.is_empty() || self.names.contains(&attrs.name))
    }
}

/// One named `matchConditions` entry.
#[derive(Debug)]
pub(crate) struct MatchCondition {
    pub name: String,
    pub expression: Result<Expression, String>,
}

impl MatchCondition {
    pub(crate) fn read_all(conditions: Option<&Value>) -> Vec<MatchCondition> {
        conditions
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|c| MatchCondition {
                name: c
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                expression: Expression::compile(
                    c.get("expression")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                ),
            })
            .collect()
    }
}

/// Evaluates `matchConditions`: all true takes the request, any false
/// skips it, an error (of the first condition that failed to evaluate)
/// goes to the failure policy.
pub(crate) fn conditions_hold(
    conditions: &[MatchCondition],
    variables: &[(&str, &Value)],
) -> Result<bool, String> {
    let mut first_error = None;
    for condition in conditions {
        let outcome = condition
            .expression
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|e| e.evaluate_bool(variables));
        match outcome {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                first_error.get_or_insert_with(|| {
                    format!(
                        "failed to evaluate match condition {:?}: {e}",
                        condition.name
                    )
                });
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(true),
    }
}

/// One webhook of a configuration, ready to be matched and called.
#[derive(Debug)]
pub(crate) struct Webhook {
    pub name: String,
    pub mutating: bool,
    pub endpoint: Endpoint,
    pub ca_bundle: Vec<u8>,
    rules: Vec<Rule>,
    pub failure_policy: FailurePolicy,
    equivalent: bool,
    /// An error when the selector could not be read: the webhook's calls
    /// then fail (selectors are validated on write, so only an object
    /// restored from elsewhere gets here).
    namespace_selector: Result<LabelSelector, String>,
    object_selector: Result<LabelSelector, String>,
    pub side_effects: SideEffects,
    pub timeout: Duration,
    pub match_conditions: Vec<MatchCondition>,
    pub reinvoke_if_needed: bool,
}

/// What admission is configured with now: webhooks, mutating and
/// validating, in the order they run (configurations by name, webhooks in
/// their order within each), and the policies bindings apply.
#[derive(Debug, Default)]
pub(crate) struct Configured {
    pub mutating: Vec<Arc<Webhook>>,
    pub validating: Vec<Arc<Webhook>>,
    pub policies: Vec<super::policies::BoundPolicy>,
}

impl Configured {
    /// Reads stored configurations (`MutatingWebhookConfiguration` and
    /// `ValidatingWebhookConfiguration` objects, any order).
    pub(crate) fn from_configurations(mutating: &[Value], validating: &[Value]) -> Self {
        Self {
            mutating: read_all(mutating, true),
            validating: read_all(validating, false),
            policies: Vec::new(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.mutating.is_empty() && self.validating.is_empty() && self.policies.is_empty()
    }
}

fn read_all(configurations: &[Value], mutating: bool) -> Vec<Arc<Webhook>> {
    let mut named: Vec<(&str, &Value)> = configurations
        .iter()
        .map(|c| {
            (
                c.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                c,
            )
        })
        .collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    named
        .into_iter()
        .flat_map(|(_, c)| {
            c.get("webhooks")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
        })
        .map(|w| Arc::new(read_webhook(w, mutating)))
        .collect()
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn read_webhook(w: &Value, mutating: bool) -> Webhook {
    let text = |pointer: &str| {
        w.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let endpoint = match w.pointer("/clientConfig/url").and_then(Value::as_str) {
        Some(url) => Endpoint::Url(url.to_string()),
        None => Endpoint::Service {
            namespace: text("/clientConfig/service/namespace").to_string(),
            name: text("/clientConfig/service/name").to_string(),
            path: text("/clientConfig/service/path").to_string(),
            port: w
                .pointer("/clientConfig/service/port")
                .and_then(Value::as_u64)
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(443),
        },
    };
    let ca_bundle = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD
            .decode(text("/clientConfig/caBundle"))
            .unwrap_or_default()
    };
    let rules = w
        .get("rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(Rule::read)
        .collect();
    let match_conditions = MatchCondition::read_all(w.get("matchConditions"));
    Webhook {
        name: text("/name").to_string(),
        mutating,
        endpoint,
        ca_bundle,
        rules,
        failure_policy: match text("/failurePolicy") {
            "Ignore" => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        },
        equivalent: text("/matchPolicy") != "Exact",
        namespace_selector: LabelSelector::from_object(
            w.get("namespaceSelector").unwrap_or(&Value::Null),
        ),
        object_selector: LabelSelector::from_object(
            w.get("objectSelector").unwrap_or(&Value::Null),
        ),
        side_effects: match text("/sideEffects") {
            "None" => SideEffects::None,
            "NoneOnDryRun" => SideEffects::NoneOnDryRun,
            _ => SideEffects::Some,
        },
        timeout: Duration::from_secs(
            w.get("timeoutSeconds")
                .and_then(Value::as_u64)
                .unwrap_or(10)
                .clamp(1, 30),
        ),
        match_conditions,
        reinvoke_if_needed: text("/reinvocationPolicy") == "IfNeeded",
    }
}

/// Which version of the resource a matching webhook is sent the request
/// at: the request's own, or (`matchPolicy: Equivalent`) another served
/// version its rules name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Matched {
    pub version: String,
}

impl Webhook {
    /// Whether the rules, and scope, take the request; `None` when not.
    pub(crate) fn matches_rules(&self, attrs: &Attributes) -> Option<Matched> {
        if self.rules.iter().any(|r| r.matches(attrs, &attrs.version)) {
            return Some(Matched {
                version: attrs.version.clone(),
            });
        }
        if !self.equivalent {
            return None;
        }
        attrs
            .served_versions
            .iter()
            .filter(|v| **v != attrs.version)
            .find(|v| self.rules.iter().any(|r| r.matches(attrs, v)))
            .map(|v| Matched { version: v.clone() })
    }

    /// The namespace selector against the labels of the request's
    /// namespace (a Namespace's own labels when the request is about one).
    /// A cluster-scoped object other than a Namespace is always selected.
    pub(crate) fn selects_namespace(
        &self,
        attrs: &Attributes,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> Result<bool, String> {
        let selector = self.namespace_selector.as_ref().map_err(Clone::clone)?;
        let is_namespace = attrs.group.is_empty() && attrs.resource == "namespaces";
        if (!attrs.namespaced && !is_namespace) || selector.is_empty() {
            return Ok(true);
        }
        let empty = BTreeMap::new();
        Ok(selector.matches(namespace_labels.unwrap_or(&empty)))
    }

    /// The object selector against the new or the old object's labels:
    /// either selected is enough.
    pub(crate) fn selects_object(
        &self,
        object: Option<&Value>,
        old_object: Option<&Value>,
    ) -> Result<bool, String> {
        let selector = self.object_selector.as_ref().map_err(Clone::clone)?;
        if selector.is_empty() {
            return Ok(true);
        }
        Ok([object, old_object]
            .into_iter()
            .flatten()
            .any(|o| selector.matches(&labels_of(o))))
    }

    /// The `matchConditions` (see [`conditions_hold`]).
    pub(crate) fn conditions_hold(&self, variables: &[(&str, &Value)]) -> Result<bool, String> {
        conditions_hold(&self.match_conditions, variables)
    }
}

/// An object's labels.
pub(crate) fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn listed(list: &[String], wanted: &str) -> bool {
    list.iter().any(|entry| entry == "*" || entry == wanted)
}

fn rule_matches(rule: &Rule, attrs: &Attributes, version: &str) -> bool {
    listed(&rule.operations, attrs.operation.as_str())
        && listed(&rule.groups, &attrs.group)
        && listed(&rule.versions, version)
        && rule
            .resources
            .iter()
            .any(|r| resource_matches(r, &attrs.resource, &attrs.subresource))
        && scope_matches(&rule.scope, attrs)
}

/// `pods` takes the main resource only, `pods/status` one subresource,
/// `pods/*` the resource and all its subresources, `*` every main
/// resource, `*/status` that subresource of every resource and `*/*`
/// everything.
fn resource_matches(entry: &str, resource: &str, subresource: &str) -> bool {
    if entry == "*/*" {
        return true;
    }
    match entry.split_once('/') {
        Some((res, sub)) => (res == "*" || res == resource) && (sub == "*" || sub == subresource),
        None => (entry == "*" || entry == resource) && subresource.is_empty(),
    }
}

/// Namespaces are cluster-scoped, whatever namespace the request names.
pub(crate) fn scope_matches(scope: &str, attrs: &Attributes) -> bool {
    let is_namespace = attrs.group.is_empty() && attrs.resource == "namespaces";
    match scope {
        "Cluster" => is_namespace || !attrs.namespaced,
        "Namespaced" => attrs.namespaced && !is_namespace,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(operation: Operation, resource: &str, subresource: &str) -> Attributes {
        Attributes {
            operation,
            group: String::new(),
            version: "v1".into(),
            resource: resource.into(),
            subresource: subresource.into(),
            kind: "Pod".into(),
            namespaced: true,
            namespace: "default".into(),
            name: "p".into(),
            served_versions: vec!["v1".into()],
        }
    }

    fn webhook(extra: Value) -> Webhook {
        let mut w = json!({
            "name": "w.example.com",
            "clientConfig": {"url": "https://127.0.0.1:1/"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
            "sideEffects": "None",
        });
        if let (Some(w), Some(extra)) = (w.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                w.insert(k.clone(), v.clone());
            }
        }
        read_webhook(&w, false)
    }

    #[test]
    fn a_plain_resource_rule_takes_the_main_resource_only() {
        let w = webhook(json!({}));
        assert!(
            w.matches_rules(&attrs(Operation::Create, "pods", ""))
                .is_some()
        );
        assert!(
            w.matches_rules(&attrs(Operation::Create, "pods", "status"))
                .is_none()
        );
        assert!(
            w.matches_rules(&attrs(Operation::Update, "pods", ""))
                .is_none()
        );
    }

    #[test]
    fn wildcard_resource_rules_take_subresources_as_written() {
        assert!(resource_matches("*/*", "pods", "status"));
        assert!(resource_matches("pods/*", "pods", "status"));
        assert!(resource_matches("pods/*", "pods", ""));
        assert!(resource_matches("*/status", "nodes", "status"));
        assert!(!resource_matches("*/status", "nodes", ""));
        assert!(!resource_matches("*", "nodes", "status"));
    }

    #[test]
    fn equivalent_match_policy_sends_another_served_version() {
        let w = webhook(
            json!({"rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["v2"], "resources": ["*"]}]}),
        );
        let mut a = attrs(Operation::Create, "things", "");
        a.served_versions = vec!["v1".into(), "v2".into()];
        assert_eq!(
            w.matches_rules(&a),
            Some(Matched {
                version: "v2".into()
            })
        );
        let exact = webhook(
            json!({"matchPolicy": "Exact", "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["v2"], "resources": ["*"]}]}),
        );
        assert_eq!(exact.matches_rules(&a), None);
    }

    #[test]
    fn scope_treats_namespaces_as_cluster_scoped() {
        let mut ns = attrs(Operation::Create, "namespaces", "");
        ns.namespaced = false;
        assert!(scope_matches("Cluster", &ns));
        assert!(!scope_matches("Namespaced", &ns));
        let pod = attrs(Operation::Create, "pods", "");
        assert!(scope_matches("Namespaced", &pod));
        assert!(!scope_matches("Cluster", &pod));
    }

    #[test]
    fn object_selector_takes_either_the_new_or_the_old_labels() {
        let w = webhook(json!({"objectSelector": {"matchLabels": {"team": "a"}}}));
        let new = json!({"metadata": {"labels": {"team": "b"}}});
        let old = json!({"metadata": {"labels": {"team": "a"}}});
        assert_eq!(w.selects_object(Some(&new), Some(&old)), Ok(true));
        assert_eq!(w.selects_object(Some(&new), None), Ok(false));
    }

    #[test]
    fn namespace_selector_is_ignored_for_cluster_scoped_objects() {
        let w = webhook(
            json!({"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}}),
        );
        let mut node = attrs(Operation::Create, "nodes", "");
        node.namespaced = false;
        assert_eq!(w.selects_namespace(&node, None), Ok(true));
        let pod = attrs(Operation::Create, "pods", "");
        let prod = BTreeMap::from([("env".to_string(), "prod".to_string())]);
        assert_eq!(w.selects_namespace(&pod, Some(&prod)), Ok(true));
        assert_eq!(w.selects_namespace(&pod, Some(&BTreeMap::new())), Ok(false));
    }

    #[test]
    fn match_conditions_all_true_call_any_false_skips_and_errors_are_reported() {
        let w = webhook(json!({"matchConditions": [
            {"name": "not-kube-system", "expression": "object.metadata.namespace != 'kube-system'"},
            {"name": "labelled", "expression": "has(object.metadata.labels) && 'app' in object.metadata.labels"},
        ]}));
        let labelled = json!({"metadata": {"namespace": "default", "labels": {"app": "x"}}});
        let system = json!({"metadata": {"namespace": "kube-system", "labels": {"app": "x"}}});
        assert_eq!(w.conditions_hold(&[("object", &labelled)]), Ok(true));
        assert_eq!(w.conditions_hold(&[("object", &system)]), Ok(false));
        let broken = webhook(
            json!({"matchConditions": [{"name": "n", "expression": "object.spec.missing == 1"}]}),
        );
        let err = broken.conditions_hold(&[("object", &labelled)]);
        assert!(matches!(&err, Err(e) if e.contains("\"n\"")), "{err:?}");
    }

    #[test]
    fn configurations_run_in_name_order() {
        let config = |name: &str, hook: &str| json!({"metadata": {"name": name}, "webhooks": [{"name": hook, "clientConfig": {"url": "https://x/"}, "sideEffects": "None"}]});
        let set =
            Configured::from_configurations(&[config("b", "second"), config("a", "first")], &[]);
        let names: Vec<&str> = set.mutating.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["first", "second"]);
    }
}
