//! ValidatingAdmissionPolicy (admissionregistration/v1): a policy bound by
//! a ValidatingAdmissionPolicyBinding validates the writes its match
//! constraints (and the binding's match resources) take, with CEL over
//! `object`, `oldObject`, `request`, `namespaceObject` and `variables`.
//! It runs where kube-apiserver runs it: after mutation, before validating
//! webhooks. Pure apart from the values handed in.
//!
//! Not done: parameters (`paramKind` and `paramRef`); a binding of a policy
//! that has them is skipped with a log line. `auditAnnotations` and the
//! `Audit` action have no audit log to go to.

use std::collections::BTreeMap;

use serde_json::Value;

use super::webhooks::{Attributes, FailurePolicy, MatchCondition, Rule, conditions_hold};
use crate::error::ApiError;
use crate::schema::{Bindings, Expression, cel_string, cel_type_name};
use crate::selector::LabelSelector;

/// `matchConstraints` of a policy or `matchResources` of a binding.
#[derive(Debug)]
struct MatchResources {
    rules: Vec<Rule>,
    excluded: Vec<Rule>,
    namespace_selector: Result<LabelSelector, String>,
    object_selector: Result<LabelSelector, String>,
    equivalent: bool,
}

impl MatchResources {
    fn read(value: &Value) -> Self {
        let rules = |key: &str| {
            value
                .get(key)
                .and_then(Value::as_array)
                .map(|r| r.iter().map(Rule::read).collect())
                .unwrap_or_default()
        };
        Self {
            rules: rules("resourceRules"),
            excluded: rules("excludeResourceRules"),
            namespace_selector: LabelSelector::from_object(
                value.get("namespaceSelector").unwrap_or(&Value::Null),
            ),
            object_selector: LabelSelector::from_object(
                value.get("objectSelector").unwrap_or(&Value::Null),
            ),
            equivalent: value.get("matchPolicy").and_then(Value::as_str) != Some("Exact"),
        }
    }

    /// `all_when_empty`: a binding's resources without rules take what the
    /// policy takes; a policy's constraints without rules take nothing.
    fn matches(&self, request: &PolicyRequest<'_>, all_when_empty: bool) -> Result<bool, String> {
        let attrs = request.attrs;
        let versions = std::iter::once(&attrs.version).chain(
            attrs
                .served_versions
                .iter()
                .filter(|v| self.equivalent && **v != attrs.version),
        );
        let mut taken = all_when_empty && self.rules.is_empty();
        for version in versions {
            if self.rules.iter().any(|r| r.matches(attrs, version)) {
                taken = true;
                break;
            }
        }
        if !taken
            || self
                .excluded
                .iter()
                .any(|r| r.matches(attrs, &attrs.version))
        {
            return Ok(false);
        }
        let is_namespace = attrs.group.is_empty() && attrs.resource == "namespaces";
        let namespace_selector = self.namespace_selector.as_ref().map_err(Clone::clone)?;
        if (attrs.namespaced || is_namespace) && !namespace_selector.is_empty() {
            let empty = BTreeMap::new();
            if !namespace_selector.matches(request.namespace_labels.unwrap_or(&empty)) {
                return Ok(false);
            }
        }
        let object_selector = self.object_selector.as_ref().map_err(Clone::clone)?;
        if !object_selector.is_empty()
            && ![request.object, request.old_object]
                .into_iter()
                .flatten()
                .any(|o| object_selector.matches(&super::webhooks::labels_of(o)))
        {
            return Ok(false);
        }
        Ok(true)
    }
}

#[derive(Debug)]
struct Validation {
    text: String,
    expression: Result<Expression, String>,
    message: String,
    message_expression: Option<Result<Expression, String>>,
    reason: String,
}

/// A policy as one binding applies it.
#[derive(Debug)]
pub(crate) struct BoundPolicy {
    policy: String,
    binding: String,
    constraints: MatchResources,
    binding_resources: Option<MatchResources>,
    match_conditions: Vec<MatchCondition>,
    variables: Vec<(String, Result<Expression, String>)>,
    validations: Vec<Validation>,
    failure_policy: FailurePolicy,
    deny: bool,
    warn: bool,
    has_params: bool,
}

fn compile(text: &str) -> Result<Expression, String> {
    Expression::compile(text)
}

/// Pairs stored policies with the bindings that name them.
pub(crate) fn bind(policies: &[Value], bindings: &[Value]) -> Vec<BoundPolicy> {
    let by_name: BTreeMap<&str, &Value> = policies
        .iter()
        .filter_map(|p| Some((p.pointer("/metadata/name")?.as_str()?, p)))
        .collect();
    let mut bound = Vec::new();
    let mut bindings: Vec<&Value> = bindings.iter().collect();
    bindings.sort_by_key(|b| {
        b.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    });
    for binding in bindings {
        let text = |v: &Value, pointer: &str| {
            v.pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let policy_name = text(binding, "/spec/policyName");
        let Some(policy) = by_name.get(policy_name.as_str()) else {
            continue;
        };
        let actions: Vec<String> = binding
            .pointer("/spec/validationActions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let spec = policy.get("spec").cloned().unwrap_or_default();
        let validations = spec
            .get("validations")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|v| {
                let expression = text(v, "/expression");
                Validation {
                    expression: compile(&expression),
                    text: expression,
                    message: text(v, "/message"),
                    message_expression: v
                        .get("messageExpression")
                        .and_then(Value::as_str)
                        .filter(|m| !m.trim().is_empty())
                        .map(compile),
                    reason: text(v, "/reason"),
                }
            })
            .collect();
        let variables = spec
            .get("variables")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|v| (text(v, "/name"), compile(&text(v, "/expression"))))
            .collect();
        bound.push(BoundPolicy {
            policy: policy_name,
            binding: text(binding, "/metadata/name"),
            constraints: MatchResources::read(spec.get("matchConstraints").unwrap_or(&Value::Null)),
            binding_resources: binding
                .pointer("/spec/matchResources")
                .filter(|m| m.is_object())
                .map(MatchResources::read),
            match_conditions: MatchCondition::read_all(spec.get("matchConditions")),
            variables,
            validations,
            failure_policy: match text(&spec, "/failurePolicy").as_str() {
                "Ignore" => FailurePolicy::Ignore,
                _ => FailurePolicy::Fail,
            },
            deny: actions.iter().any(|a| a == "Deny"),
            warn: actions.iter().any(|a| a == "Warn"),
            has_params: spec.get("paramKind").is_some_and(|p| p.is_object()),
        });
    }
    bound
}

impl BoundPolicy {
    /// Whether the rules of the policy (and of its binding, when it has
    /// any) could take a request with these attributes, selectors aside.
    pub(crate) fn may_take(&self, attrs: &Attributes) -> bool {
        std::iter::once(&attrs.version)
            .chain(&attrs.served_versions)
            .any(|v| self.constraints.rules.iter().any(|r| r.matches(attrs, v)))
    }
}

/// What a policy is evaluated against.
pub(crate) struct PolicyRequest<'a> {
    pub attrs: &'a Attributes,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub namespace_labels: Option<&'a BTreeMap<String, String>>,
    pub namespace_object: Option<&'a Value>,
    /// The AdmissionRequest as webhooks get it, for `request`.
    pub request: &'a Value,
}

/// The error of a denial: worded as any 403 naming the object
/// (`<resource> "<name>" is forbidden: ...`), with the code and reason of
/// the validation's `reason` (Invalid, 422, unless it names another).
fn denial(attrs: &Attributes, reason: &str, message: String) -> ApiError {
    let mut error =
        ApiError::forbidden_request(&attrs.group, &attrs.resource, &attrs.name, &message);
    let (code, reason) = match reason {
        "Unauthorized" => (401, "Unauthorized"),
        "Forbidden" => (403, "Forbidden"),
        "RequestEntityTooLarge" => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    };
    error.code = code;
    error.reason = reason;
    error
}

/// Evaluates every bound policy that takes the request: `Ok` with the
/// warnings to answer with, or the denial.
pub(crate) fn evaluate(
    bound: &[BoundPolicy],
    request: &PolicyRequest<'_>,
) -> Result<Vec<String>, ApiError> {
    let mut warnings = Vec::new();
    let null = Value::Null;
    for policy in bound {
        let taken = policy.constraints.matches(request, false).and_then(|ok| {
            match &policy.binding_resources {
                Some(resources) if ok => resources.matches(request, true),
                _ => Ok(ok),
            }
        });
        let failed = |why: String| -> Result<(), ApiError> {
            match policy.failure_policy {
                FailurePolicy::Ignore => Ok(()),
                FailurePolicy::Fail => Err(denial(
                    request.attrs,
                    "",
                    format!(
                        "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {why}",
                        policy.policy, policy.binding
                    ),
                )),
            }
        };
        match taken {
            Ok(true) => {}
            Ok(false) => continue,
            Err(why) => {
                failed(why)?;
                continue;
            }
        }
        if policy.has_params {
            tracing::warn!(
                policy = %policy.policy,
                "ValidatingAdmissionPolicy with paramKind is not evaluated by kube-sim"
            );
            continue;
        }
        let json_variables: [(&str, &Value); 4] = [
            ("object", request.object.unwrap_or(&null)),
            ("oldObject", request.old_object.unwrap_or(&null)),
            ("request", request.request),
            ("namespaceObject", request.namespace_object.unwrap_or(&null)),
        ];
        match conditions_hold(&policy.match_conditions, &json_variables) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(why) => {
                failed(why)?;
                continue;
            }
        }
        let mut bound_variables = Bindings::from_json(&json_variables);
        let mut computed = Vec::new();
        for (name, expression) in &policy.variables {
            bound_variables.bind_map("variables", computed.clone());
            // An error in a variable surfaces where a validation uses it.
            if let Ok(value) = expression
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|e| e.evaluate(&bound_variables))
            {
                computed.push((name.clone(), value));
            }
        }
        bound_variables.bind_map("variables", computed);
        for validation in &policy.validations {
            let outcome = validation
                .expression
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|e| e.evaluate(&bound_variables));
            let message = match outcome {
                Ok(cel::Value::Bool(true)) => continue,
                Ok(cel::Value::Bool(false)) => validation
                    .message_expression
                    .as_ref()
                    .and_then(|m| m.as_ref().ok())
                    .and_then(|m| m.evaluate(&bound_variables).ok())
                    .and_then(|v| cel_string(&v))
                    .filter(|m| !m.trim().is_empty())
                    .or_else(|| {
                        (!validation.message.is_empty()).then(|| validation.message.clone())
                    })
                    .unwrap_or_else(|| format!("failed expression: {}", validation.text)),
                Ok(other) => {
                    failed(format!(
                        "expression '{}' resulted in error: expected bool, got {}",
                        validation.text,
                        cel_type_name(&other)
                    ))?;
                    continue;
                }
                Err(why) => {
                    failed(format!(
                        "expression '{}' resulted in error: {why}",
                        validation.text
                    ))?;
                    continue;
                }
            };
            if policy.warn {
                warnings.push(format!(
                    "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
                    policy.policy, policy.binding
                ));
            }
            if policy.deny {
                return Err(denial(
                    request.attrs,
                    &validation.reason,
                    format!(
                        "ValidatingAdmissionPolicy '{}' with binding '{}' denied request: {message}",
                        policy.policy, policy.binding
                    ),
                ));
            }
        }
    }
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::webhooks::Operation;
    use serde_json::json;

    fn attrs() -> Attributes {
        Attributes {
            operation: Operation::Create,
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            subresource: String::new(),
            kind: "Deployment".into(),
            namespaced: true,
            namespace: "team".into(),
            name: "web".into(),
            served_versions: vec!["v1".into()],
        }
    }

    fn policy(validations: Value, actions: &[&str]) -> Vec<BoundPolicy> {
        let policy = json!({
            "metadata": {"name": "replicas"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                "variables": [{"name": "replicas", "expression": "object.spec.replicas"}],
                "validations": validations,
            },
        });
        let binding = json!({"metadata": {"name": "replicas-binding"}, "spec": {"policyName": "replicas", "validationActions": actions}});
        bind(&[policy], &[binding])
    }

    fn run(bound: &[BoundPolicy], replicas: i64) -> Result<Vec<String>, ApiError> {
        let object = json!({"metadata": {"name": "web"}, "spec": {"replicas": replicas}});
        let a = attrs();
        evaluate(
            bound,
            &PolicyRequest {
                attrs: &a,
                object: Some(&object),
                old_object: None,
                namespace_labels: None,
                namespace_object: None,
                request: &json!({"operation": "CREATE"}),
            },
        )
    }

    #[test]
    fn a_denied_validation_names_the_policy_and_binding_with_its_message() {
        let bound = policy(
            json!([{"expression": "variables.replicas <= 5", "message": "too many replicas", "reason": "Forbidden"}]),
            &["Deny"],
        );
        assert!(run(&bound, 3).is_ok());
        let err = run(&bound, 7).err().map(|e| (e.code, e.message));
        assert_eq!(
            err,
            Some((403, "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding' denied request: too many replicas".to_string()))
        );
    }

    #[test]
    fn without_a_message_the_failed_expression_is_named_and_warn_only_warns() {
        let bound = policy(
            json!([{"expression": "object.spec.replicas <= 5"}]),
            &["Warn"],
        );
        assert_eq!(
            run(&bound, 7).ok(),
            Some(vec!["Validation failed for ValidatingAdmissionPolicy 'replicas' with binding 'replicas-binding': failed expression: object.spec.replicas <= 5".to_string()])
        );
        let deny = policy(
            json!([{"expression": "object.spec.replicas <= 5"}]),
            &["Deny"],
        );
        assert_eq!(run(&deny, 7).err().map(|e| e.code), Some(422));
    }

    #[test]
    fn a_message_expression_words_the_denial() {
        let bound = policy(
            json!([{"expression": "object.spec.replicas <= 5", "messageExpression": "'replicas ' + string(object.spec.replicas) + ' over 5'"}]),
            &["Deny"],
        );
        let message = run(&bound, 9).err().map(|e| e.message).unwrap_or_default();
        assert!(
            message.ends_with("denied request: replicas 9 over 5"),
            "{message}"
        );
    }
}
