//! Validation of `MutatingWebhookConfiguration` and
//! `ValidatingWebhookConfiguration` (admissionregistration/v1), with the
//! field paths and words kube-apiserver uses. Pure.

use std::collections::HashSet;

use serde_json::Value;

use crate::error::Cause;
use crate::schema::Expression;

fn not_supported(field: String, value: &str, supported: &[&str]) -> Cause {
    let list = supported
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!("Unsupported value: {value:?}: supported values: {list}"),
        field,
    }
}

fn duplicate(field: String, value: &str) -> Cause {
    Cause {
        reason: "FieldValueDuplicate".into(),
        message: format!("Duplicate value: {value:?}"),
        field,
    }
}

fn text<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

/// Whether `name` is a DNS subdomain.
fn is_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The causes of a webhook configuration of kind `kind`; empty when valid.
pub(crate) fn configuration(kind: &str, value: &Value) -> Vec<Cause> {
    let mutating = kind == "MutatingWebhookConfiguration";
    let mut causes = Vec::new();
    let hooks = value
        .get("webhooks")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut names = HashSet::new();
    for (i, hook) in hooks.iter().enumerate() {
        let path = format!("webhooks[{i}]");
        // A webhook's own causes come before its name's duplication, as
        // kube-apiserver lists them.
        webhook(hook, &path, mutating, &mut causes);
        let name = text(hook, "name").unwrap_or_default();
        if !name.is_empty() && !names.insert(name) {
            causes.push(duplicate(format!("{path}.name"), name));
        }
    }
    causes
}

fn webhook(hook: &Value, path: &str, mutating: bool, causes: &mut Vec<Cause>) {
    let name = text(hook, "name").unwrap_or_default();
    if name.is_empty() {
        causes.push(Cause::required(format!("{path}.name"), ""));
    } else if !is_subdomain(name) {
        causes.push(Cause::invalid(
            format!("{path}.name"),
            &Value::from(name),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ));
    } else if name.split('.').count() < 3 {
        causes.push(Cause::invalid(
            format!("{path}.name"),
            &Value::from(name),
            "should be a domain with at least three segments separated by dots",
        ));
    }
    for (i, rule) in hook
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        rule_causes(rule, &format!("{path}.rules[{i}]"), causes);
    }
    if let Some(policy) = text(hook, "failurePolicy")
        && !matches!(policy, "Fail" | "Ignore")
    {
        causes.push(not_supported(
            format!("{path}.failurePolicy"),
            policy,
            &["Fail", "Ignore"],
        ));
    }
    if let Some(policy) = text(hook, "matchPolicy")
        && !matches!(policy, "Exact" | "Equivalent")
    {
        causes.push(not_supported(
            format!("{path}.matchPolicy"),
            policy,
            &["Equivalent", "Exact"],
        ));
    }
    match text(hook, "sideEffects") {
        None | Some("") => causes.push(Cause::required(
            format!("{path}.sideEffects"),
            "must specify one of None, NoneOnDryRun",
        )),
        Some("None" | "NoneOnDryRun") => {}
        Some(other) => causes.push(not_supported(
            format!("{path}.sideEffects"),
            other,
            &["None", "NoneOnDryRun"],
        )),
    }
    if let Some(timeout) = hook.get("timeoutSeconds").and_then(Value::as_i64)
        && !(1..=30).contains(&timeout)
    {
        causes.push(Cause::invalid(
            format!("{path}.timeoutSeconds"),
            &Value::from(timeout),
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    let versions: Vec<&str> = hook
        .get("admissionReviewVersions")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required(
            format!("{path}.admissionReviewVersions"),
            "must specify one of v1, v1beta1",
        ));
    } else if !versions.iter().any(|v| matches!(*v, "v1" | "v1beta1")) {
        causes.push(Cause::invalid(
            format!("{path}.admissionReviewVersions"),
            &Value::from(versions.iter().map(|v| Value::from(*v)).collect::<Vec<_>>()),
            "must include at least one of v1, v1beta1",
        ));
    }
    if mutating
        && let Some(policy) = text(hook, "reinvocationPolicy")
        && !matches!(policy, "IfNeeded" | "Never")
    {
        causes.push(not_supported(
            format!("{path}.reinvocationPolicy"),
            policy,
            &["IfNeeded", "Never"],
        ));
    }
    client_config(
        hook.get("clientConfig"),
        &format!("{path}.clientConfig"),
        causes,
    );
    match_conditions(hook, path, causes);
}

fn rule_causes(rule: &Value, path: &str, causes: &mut Vec<Cause>) {
    let list = |key: &str| -> Vec<&str> {
        rule.get(key)
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    };
    let operations = list("operations");
    if operations.is_empty() {
        causes.push(Cause::required(format!("{path}.operations"), ""));
    } else if operations.len() > 1 && operations.contains(&"*") {
        causes.push(Cause::invalid(
            format!("{path}.operations"),
            &Value::from(
                operations
                    .iter()
                    .map(|o| Value::from(*o))
                    .collect::<Vec<_>>(),
            ),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in operations.iter().enumerate() {
        if !matches!(*op, "*" | "CREATE" | "UPDATE" | "DELETE" | "CONNECT") {
            causes.push(not_supported(
                format!("{path}.operations[{i}]"),
                op,
                &["*", "CONNECT", "CREATE", "DELETE", "UPDATE"],
            ));
        }
    }
    for key in ["apiGroups", "apiVersions", "resources"] {
        if list(key).is_empty() {
            causes.push(Cause::required(format!("{path}.{key}"), ""));
        }
    }
    if let Some(scope) = text(rule, "scope")
        && !matches!(scope, "*" | "Cluster" | "Namespaced")
    {
        causes.push(not_supported(
            format!("{path}.scope"),
            scope,
            &["*", "Cluster", "Namespaced"],
        ));
    }
}

fn client_config(config: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let url = config.and_then(|c| c.get("url")).and_then(Value::as_str);
    let service = config
        .and_then(|c| c.get("service"))
        .filter(|s| s.is_object());
    match (url, service) {
        (Some(url), None) => url_causes(url, &format!("{path}.url"), causes),
        (None, Some(service)) => service_causes(service, &format!("{path}.service"), causes),
        _ => causes.push(Cause::required(
            path.to_string(),
            "exactly one of url or service is required",
        )),
    }
}

fn url_causes(url: &str, path: &str, causes: &mut Vec<Cause>) {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    if scheme != "https" {
        causes.push(Cause::invalid(
            path.to_string(),
            &Value::from(scheme),
            "'https' is the only allowed URL scheme; desired format: https://host[/path]",
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        causes.push(Cause::invalid(
            path.to_string(),
            &Value::from(url),
            "user information is not permitted in the URL",
        ));
    } else if authority.is_empty() {
        causes.push(Cause::invalid(
            path.to_string(),
            &Value::from(authority),
            "host must be specified",
        ));
    }
    if url.contains('#') {
        causes.push(Cause::invalid(
            path.to_string(),
            &Value::from(url.split_once('#').map(|(_, f)| f).unwrap_or_default()),
            "fragments are not permitted in the URL",
        ));
    }
    if let Some((_, query)) = url.split_once('?') {
        let query = query.split('#').next().unwrap_or_default();
        causes.push(Cause::invalid(
            path.to_string(),
            &Value::from(query),
            "query parameters are not permitted in the URL",
        ));
    }
}

fn service_causes(service: &Value, path: &str, causes: &mut Vec<Cause>) {
    if text(service, "name").is_none_or(str::is_empty) {
        causes.push(Cause::required(
            format!("{path}.name"),
            "service name is required",
        ));
    }
    if text(service, "namespace").is_none_or(str::is_empty) {
        causes.push(Cause::required(
            format!("{path}.namespace"),
            "service namespace is required",
        ));
    }
    if let Some(port) = service.get("port").and_then(Value::as_i64)
        && !(1..=65535).contains(&port)
    {
        causes.push(Cause::invalid(
            format!("{path}.port"),
            &Value::from(port),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    if let Some(p) = text(service, "path")
        && !p.is_empty()
        && !p.starts_with('/')
    {
        causes.push(Cause::invalid(
            format!("{path}.path"),
            &Value::from(p),
            "must start with a '/'",
        ));
    }
}

fn match_conditions(hook: &Value, path: &str, causes: &mut Vec<Cause>) {
    let conditions = hook
        .get("matchConditions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if conditions.len() > 64 {
        causes.push(Cause {
            reason: "FieldValueTooMany".into(),
            message: format!("Too many: {}: must have at most 64 items", conditions.len()),
            field: format!("{path}.matchConditions"),
        });
    }
    let mut names = HashSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let at = format!("{path}.matchConditions[{i}]");
        let name = text(condition, "name").unwrap_or_default();
        if name.is_empty() {
            causes.push(Cause::required(format!("{at}.name"), ""));
        } else if !names.insert(name) {
            causes.push(duplicate(format!("{at}.name"), name));
        }
        let expression = text(condition, "expression").unwrap_or_default();
        if expression.trim().is_empty() {
            causes.push(Cause::required(format!("{at}.expression"), ""));
        } else if let Err(e) = Expression::compile(expression) {
            causes.push(Cause::invalid(
                format!("{at}.expression"),
                &Value::from(expression),
                &e,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid_hook() -> Value {
        json!({
            "name": "check.example.com",
            "clientConfig": {"service": {"namespace": "default", "name": "hooks", "path": "/validate", "port": 443}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        })
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_complete_webhook_is_valid() {
        let config = json!({"webhooks": [valid_hook()]});
        assert_eq!(configuration("ValidatingWebhookConfiguration", &config), []);
    }

    #[test]
    fn names_need_three_segments_and_must_be_unique() {
        let mut short = valid_hook();
        short["name"] = json!("check.example");
        let config = json!({"webhooks": [short.clone(), short]});
        let causes = configuration("ValidatingWebhookConfiguration", &config);
        assert!(fields(&causes).contains(&"webhooks[0].name"));
        assert!(
            causes
                .iter()
                .any(|c| c.reason == "FieldValueDuplicate" && c.field == "webhooks[1].name")
        );
    }

    #[test]
    fn side_effects_review_versions_and_timeout_are_checked() {
        let mut hook = valid_hook();
        hook["sideEffects"] = json!("Some");
        hook["admissionReviewVersions"] = json!([]);
        hook["timeoutSeconds"] = json!(31);
        let causes = configuration("MutatingWebhookConfiguration", &json!({"webhooks": [hook]}));
        assert_eq!(
            fields(&causes),
            [
                "webhooks[0].sideEffects",
                "webhooks[0].timeoutSeconds",
                "webhooks[0].admissionReviewVersions"
            ]
        );
    }

    #[test]
    fn a_client_config_names_exactly_one_https_destination() {
        let mut both = valid_hook();
        both["clientConfig"]["url"] = json!("https://127.0.0.1/");
        let causes = configuration(
            "ValidatingWebhookConfiguration",
            &json!({"webhooks": [both]}),
        );
        assert_eq!(fields(&causes), ["webhooks[0].clientConfig"]);
        let mut plain = valid_hook();
        plain["clientConfig"] = json!({"url": "http://127.0.0.1:8080/x?y=1"});
        let causes = configuration(
            "ValidatingWebhookConfiguration",
            &json!({"webhooks": [plain]}),
        );
        let messages: Vec<&str> = causes.iter().map(|c| c.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
                "Invalid value: \"y=1\": query parameters are not permitted in the URL"
            ]
        );
    }

    #[test]
    fn match_conditions_must_compile() {
        let mut hook = valid_hook();
        hook["matchConditions"] = json!([{"name": "a", "expression": "object.metadata.("}]);
        let causes = configuration(
            "ValidatingWebhookConfiguration",
            &json!({"webhooks": [hook]}),
        );
        assert_eq!(
            fields(&causes),
            ["webhooks[0].matchConditions[0].expression"]
        );
    }
}
