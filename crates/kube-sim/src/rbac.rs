//! RBAC decisions from stored Roles, ClusterRoles and their bindings, the
//! way kube-apiserver's RBAC authorizer makes them: a request is allowed
//! when some binding that names the user (or one of its groups, or its
//! ServiceAccount) refers to a role with a rule covering it. Pure: the
//! caller hands in the four kinds' objects.

use serde_json::Value;

pub mod escalation;

/// Who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

impl UserInfo {
    /// A ServiceAccount's user, with the groups the token authenticator
    /// gives it.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    /// Whether the user is in `system:masters`, the group kube-apiserver
    /// allows everything without asking RBAC (the admin token's).
    pub fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == SUPERUSER_GROUP)
    }

    /// The namespace and name of the ServiceAccount this user is, if any.
    fn service_account_of(&self) -> Option<(&str, &str)> {
        let rest = self.username.strip_prefix("system:serviceaccount:")?;
        rest.split_once(':')
    }
}

/// What is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Resource {
        verb: String,
        group: String,
        resource: String,
        subresource: String,
        name: String,
        /// Empty for a cluster-wide request.
        namespace: String,
    },
    NonResource {
        verb: String,
        path: String,
    },
}

/// The stored RBAC objects, as JSON.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub roles: Vec<Value>,
    pub cluster_roles: Vec<Value>,
    pub role_bindings: Vec<Value>,
    pub cluster_role_bindings: Vec<Value>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// Which binding allowed it, in kube-apiserver's words; empty when denied.
    pub reason: String,
}

/// The group whose members may do anything (the apiserver short-circuits
/// it before RBAC).
const SUPERUSER_GROUP: &str = "system:masters";

pub fn authorize(policy: &Policy, user: &UserInfo, request: &Request) -> Decision {
    if user.is_superuser() {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let request_namespace = match request {
        Request::Resource { namespace, .. } => namespace.as_str(),
        Request::NonResource { .. } => "",
    };
    for binding in &policy.cluster_role_bindings {
        if let Some(reason) = grants(policy, binding, "", user, request) {
            return allowed(reason);
        }
    }
    if !request_namespace.is_empty() {
        for binding in policy
            .role_bindings
            .iter()
            .filter(|b| text(b, "/metadata/namespace") == request_namespace)
        {
            if let Some(reason) = grants(policy, binding, request_namespace, user, request) {
                return allowed(reason);
            }
        }
    }
    Decision {
        allowed: false,
        reason: String::new(),
    }
}

fn allowed(reason: String) -> Decision {
    Decision {
        allowed: true,
        reason,
    }
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Whether `binding` (a RoleBinding in `namespace`, or a ClusterRoleBinding
/// when `namespace` is empty) gives `user` a rule covering `request`, and
/// the reason the apiserver would print.
fn grants(
    policy: &Policy,
    binding: &Value,
    namespace: &str,
    user: &UserInfo,
    request: &Request,
) -> Option<String> {
    let subjects = binding.get("subjects").and_then(Value::as_array)?;
    let subject = subjects
        .iter()
        .find(|s| subject_matches(s, namespace, user))?;
    let role_kind = text(binding, "/roleRef/kind");
    let role_name = text(binding, "/roleRef/name");
    let role = match role_kind {
        "ClusterRole" => policy
            .cluster_roles
            .iter()
            .find(|r| text(r, "/metadata/name") == role_name),
        "Role" if !namespace.is_empty() => policy.roles.iter().find(|r| {
            text(r, "/metadata/name") == role_name && text(r, "/metadata/namespace") == namespace
        }),
        _ => None,
    }?;
    let rules = role.get("rules").and_then(Value::as_array)?;
    rules.iter().find(|rule| rule_covers(rule, request))?;
    let binding_name = text(binding, "/metadata/name");
    let binding_shown = if namespace.is_empty() {
        format!("ClusterRoleBinding \"{binding_name}\"")
    } else {
        format!("RoleBinding \"{binding_name}/{namespace}\"")
    };
    Some(format!(
        "RBAC: allowed by {binding_shown} of {role_kind} \"{role_name}\" to {}",
        describe_subject(subject, namespace)
    ))
}

fn describe_subject(subject: &Value, binding_namespace: &str) -> String {
    let kind = text(subject, "/kind");
    let name = text(subject, "/name");
    match kind {
        "ServiceAccount" => {
            let namespace = match text(subject, "/namespace") {
                "" => binding_namespace,
                ns => ns,
            };
            format!("ServiceAccount \"{name}/{namespace}\"")
        }
        _ => format!("{kind} \"{name}\""),
    }
}

fn subject_matches(subject: &Value, binding_namespace: &str, user: &UserInfo) -> bool {
    let name = text(subject, "/name");
    match text(subject, "/kind") {
        "User" => user.username == name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let namespace = match text(subject, "/namespace") {
                "" => binding_namespace,
                ns => ns,
            };
            user.service_account_of() == Some((namespace, name))
        }
        _ => false,
    }
}

fn strings(rule: &Value, key: &str) -> Vec<String> {
    rule.get(key)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn rule_covers(rule: &Value, request: &Request) -> bool {
    let verbs = strings(rule, "verbs");
    let verb_ok = |verb: &str| verbs.iter().any(|v| v == "*" || v == verb);
    match request {
        Request::NonResource { verb, path } => {
            verb_ok(verb)
                && strings(rule, "nonResourceURLs").iter().any(|url| {
                    url == "*"
                        || url == path
                        || url
                            .strip_suffix('*')
                            .is_some_and(|prefix| path.starts_with(prefix))
                })
        }
        Request::Resource {
            verb,
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let groups = strings(rule, "apiGroups");
            let resources = strings(rule, "resources");
            let names = strings(rule, "resourceNames");
            let combined = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            verb_ok(verb)
                && groups.iter().any(|g| g == "*" || g == group)
                && resources.iter().any(|r| {
                    r == "*"
                        || *r == combined
                        || (!subresource.is_empty() && *r == format!("*/{subresource}"))
                })
                && (names.is_empty() || names.iter().any(|n| n == name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn get_pods(namespace: &str) -> Request {
        Request::Resource {
            verb: "get".into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: String::new(),
            name: String::new(),
            namespace: namespace.into(),
        }
    }

    fn exec(namespace: &str) -> Request {
        Request::Resource {
            verb: "create".into(),
            group: String::new(),
            resource: "pods".into(),
            subresource: "exec".into(),
            name: "p".into(),
            namespace: namespace.into(),
        }
    }

    fn gpuid_policy() -> Policy {
        Policy {
            cluster_roles: vec![json!({
                "metadata": {"name": "gpuid"},
                "rules": [
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
                ]
            })],
            cluster_role_bindings: vec![json!({
                "metadata": {"name": "gpuid"},
                "roleRef": {"kind": "ClusterRole", "name": "gpuid"},
                "subjects": [{"kind": "ServiceAccount", "name": "gpuid", "namespace": "gpuid"}]
            })],
            roles: vec![json!({
                "metadata": {"name": "lease", "namespace": "gpuid"},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["gpuid"], "verbs": ["get", "update"]}]
            })],
            role_bindings: vec![json!({
                "metadata": {"name": "lease", "namespace": "gpuid"},
                "roleRef": {"kind": "Role", "name": "lease"},
                "subjects": [{"kind": "ServiceAccount", "name": "gpuid"}]
            })],
        }
    }

    #[test]
    fn a_cluster_role_binding_allows_its_service_account_everywhere_and_says_why() {
        let policy = gpuid_policy();
        let sa = UserInfo::service_account("gpuid", "gpuid");
        let decision = authorize(&policy, &sa, &exec("gpu-operator"));
        assert_eq!(
            decision,
            Decision {
                allowed: true,
                reason: "RBAC: allowed by ClusterRoleBinding \"gpuid\" of ClusterRole \"gpuid\" to ServiceAccount \"gpuid/gpuid\"".into()
            }
        );
        assert!(authorize(&policy, &sa, &get_pods("")).allowed);
        let other = UserInfo::service_account("default", "gpuid");
        assert!(!authorize(&policy, &other, &exec("gpu-operator")).allowed);
    }

    #[test]
    fn a_role_binding_allows_only_in_its_namespace_and_only_the_named_objects() {
        let policy = gpuid_policy();
        let sa = UserInfo::service_account("gpuid", "gpuid");
        let lease = |namespace: &str, name: &str, verb: &str| Request::Resource {
            verb: verb.into(),
            group: "coordination.k8s.io".into(),
            resource: "leases".into(),
            subresource: String::new(),
            name: name.into(),
            namespace: namespace.into(),
        };
        let decision = authorize(&policy, &sa, &lease("gpuid", "gpuid", "update"));
        assert!(decision.allowed);
        assert_eq!(
            decision.reason,
            "RBAC: allowed by RoleBinding \"lease/gpuid\" of Role \"lease\" to ServiceAccount \"gpuid/gpuid\""
        );
        assert!(!authorize(&policy, &sa, &lease("other", "gpuid", "update")).allowed);
        assert!(!authorize(&policy, &sa, &lease("gpuid", "mokka", "update")).allowed);
        assert!(!authorize(&policy, &sa, &lease("gpuid", "gpuid", "delete")).allowed);
    }

    #[test]
    fn a_subresource_needs_its_own_rule_and_wildcards_cover_it() {
        let mut policy = gpuid_policy();
        policy.cluster_roles[0]["rules"] =
            json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]}]);
        let sa = UserInfo::service_account("gpuid", "gpuid");
        assert!(!authorize(&policy, &sa, &exec("ns")).allowed);
        policy.cluster_roles[0]["rules"] =
            json!([{"apiGroups": ["*"], "resources": ["*/exec"], "verbs": ["create"]}]);
        assert!(authorize(&policy, &sa, &exec("ns")).allowed);
    }

    #[test]
    fn groups_users_non_resource_urls_and_the_superuser_group() {
        let policy = Policy {
            cluster_roles: vec![
                json!({"metadata": {"name": "metrics"}, "rules": [{"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}]}),
            ],
            cluster_role_bindings: vec![json!({
                "metadata": {"name": "metrics"},
                "roleRef": {"kind": "ClusterRole", "name": "metrics"},
                "subjects": [{"kind": "Group", "name": "monitoring"}, {"kind": "User", "name": "alice"}]
            })],
            ..Policy::default()
        };
        let get = |path: &str| Request::NonResource {
            verb: "get".into(),
            path: path.into(),
        };
        let alice = UserInfo {
            username: "alice".into(),
            groups: vec![],
        };
        let bob = UserInfo {
            username: "bob".into(),
            groups: vec!["monitoring".into()],
        };
        let eve = UserInfo {
            username: "eve".into(),
            groups: vec![],
        };
        assert!(authorize(&policy, &alice, &get("/metrics")).allowed);
        assert!(authorize(&policy, &bob, &get("/debug/pprof")).allowed);
        assert!(!authorize(&policy, &bob, &get("/healthz")).allowed);
        assert!(!authorize(&policy, &eve, &get("/metrics")).allowed);
        let admin = UserInfo {
            username: "admin".into(),
            groups: vec![SUPERUSER_GROUP.into()],
        };
        assert!(authorize(&policy, &admin, &get_pods("any")).allowed);
    }
}
