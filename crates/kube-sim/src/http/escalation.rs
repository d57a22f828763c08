//! RBAC escalation prevention on writes of Roles, ClusterRoles and their
//! bindings, under `Authorization::Rbac` (the rule is
//! [`crate::rbac::escalation`]). Being allowed to create a
//! ClusterRoleBinding must not be a way to hold cluster-admin: kube-apiserver
//! refuses a role that grants more than its writer holds unless the writer
//! may `escalate` that role, and a binding to such a role unless the writer
//! may `bind` it. `system:masters` (the admin token) is never checked.
//!
//! The check has to see the object as it will be stored: a merge patch or
//! an apply adds rules the request body alone does not show. So such a
//! write goes the multi-pass way of `admitted.rs` (with no webhooks when
//! none match): the write is done as a dry run, the result checked after
//! mutating admission, as kube-apiserver's registry checks it, and then
//! stored with the dry run's resourceVersion as a precondition, so a
//! concurrent change cannot slip an unchecked object in between.

use axum::http::Method;
use serde_json::Value;

use super::path::Target;
use crate::error::ApiError;
use crate::rbac::escalation::{self, Rule};
use crate::rbac::{self, UserInfo};
use crate::store::{Store, Subresource};

const GROUP: &str = "rbac.authorization.k8s.io";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

/// The check one write must pass.
pub(super) struct Guard<'a> {
    kind: Kind,
    user: &'a UserInfo,
    /// The write's namespace (empty for the cluster-scoped kinds).
    namespace: String,
}

/// The check `target`'s write needs, or `None`: not one of the four kinds,
/// not a create or update, RBAC not enforced, a `system:masters` caller,
/// or a role its writer may `escalate`.
pub(super) fn guard_for<'a>(
    store: &Store,
    rbac_enforced: bool,
    caller: Option<&'a UserInfo>,
    target: &Target,
    method: &Method,
    sub: Subresource,
) -> Option<Guard<'a>> {
    let user = caller.filter(|user| rbac_enforced && !user.is_superuser())?;
    if target.rt.group != GROUP || sub != Subresource::Main {
        return None;
    }
    let writes = matches!(
        (method, &target.name),
        (&Method::POST, None) | (&Method::PUT, Some(_)) | (&Method::PATCH, Some(_))
    );
    if !writes {
        return None;
    }
    let kind = match target.rt.plural.as_str() {
        "roles" => Kind::Role,
        "clusterroles" => Kind::ClusterRole,
        "rolebindings" => Kind::RoleBinding,
        "clusterrolebindings" => Kind::ClusterRoleBinding,
        _ => return None,
    };
    let namespace = target.namespace.clone().unwrap_or_default();
    if matches!(kind, Kind::Role | Kind::ClusterRole) {
        // kube-apiserver asks with the request's own name, which a create
        // does not have: `escalate` limited by resourceNames never lets
        // one create a role.
        let escalate = rbac::Request::Resource {
            verb: "escalate".into(),
            group: GROUP.into(),
            resource: target.rt.plural.clone(),
            subresource: String::new(),
            name: target.name.clone().unwrap_or_default(),
            namespace: namespace.clone(),
        };
        if rbac::authorize(&super::reviews::policy(store), user, &escalate).allowed {
            return None;
        }
    }
    Some(Guard {
        kind,
        user,
        namespace,
    })
}

impl Guard<'_> {
    /// Refuses `object`, the object as it would be stored (`old`: the one
    /// it replaces), when it grants what the writer does not hold. `name`
    /// is the one the refusal names: a create's requested name, empty when
    /// the server generates it.
    pub(super) fn check(
        &self,
        store: &Store,
        name: &str,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        // kube-apiserver lets the garbage collector's writes through: a
        // change to ownerReferences or finalizers alone grants nothing.
        if old.is_some_and(|old| only_collector_fields_differ(object, old)) {
            return Ok(());
        }
        let policy = super::reviews::policy(store);
        let forbidden = |resource: &str, sentence: &str| {
            ApiError::forbidden_request(GROUP, resource, name, sentence)
        };
        match self.kind {
            Kind::Role | Kind::ClusterRole => {
                let resource = if self.kind == Kind::Role {
                    "roles"
                } else {
                    "clusterroles"
                };
                let rules = Rule::all_of(object);
                escalation::confirm_no_escalation(&policy, self.user, &self.namespace, &rules)
                    .map_err(|sentence| forbidden(resource, &sentence))?;
                // An aggregationRule gathers any role's rules, now or later,
                // so setting, changing or dropping one takes every
                // permission there is.
                let aggregates =
                    has_aggregation_rule(object) || old.is_some_and(has_aggregation_rule);
                if self.kind == Kind::ClusterRole
                    && aggregates
                    && escalation::confirm_no_escalation(
                        &policy,
                        self.user,
                        &self.namespace,
                        &Rule::full_authority(),
                    )
                    .is_err()
                {
                    return Err(forbidden(
                        resource,
                        "must have cluster-admin privileges to use the aggregationRule",
                    ));
                }
                Ok(())
            }
            Kind::RoleBinding | Kind::ClusterRoleBinding => {
                let resource = if self.kind == Kind::RoleBinding {
                    "rolebindings"
                } else {
                    "clusterrolebindings"
                };
                let text = |pointer: &str| {
                    object
                        .pointer(pointer)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                };
                let (role_kind, role_name) = (text("/roleRef/kind"), text("/roleRef/name"));
                let role_resource = match role_kind {
                    "Role" => Some("roles"),
                    "ClusterRole" => Some("clusterroles"),
                    _ => None,
                };
                // `bind` is asked in the binding's namespace, so it can be
                // delegated namespace by namespace.
                if let Some(role_resource) = role_resource {
                    let bind = rbac::Request::Resource {
                        verb: "bind".into(),
                        group: text("/roleRef/apiGroup").into(),
                        resource: role_resource.into(),
                        subresource: String::new(),
                        name: role_name.into(),
                        namespace: self.namespace.clone(),
                    };
                    if rbac::authorize(&policy, self.user, &bind).allowed {
                        return Ok(());
                    }
                }
                let rules = escalation::role_reference_rules(
                    &policy,
                    role_kind,
                    role_name,
                    &self.namespace,
                )
                .map_err(|e| match e {
                    // kube-apiserver answers with its lookup's own error.
                    escalation::RoleReferenceError::NotFound { resource, name } => {
                        ApiError::not_found(GROUP, resource, &name)
                    }
                    other => ApiError::internal(format!("Internal error occurred: {other}")),
                })?;
                escalation::confirm_no_escalation(&policy, self.user, &self.namespace, &rules)
                    .map_err(|sentence| forbidden(resource, &sentence))
            }
        }
    }
}

fn has_aggregation_rule(role: &Value) -> bool {
    role.pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .is_some_and(|selectors| !selectors.is_empty())
}

/// Whether `object` and `old` differ only where the garbage collector
/// writes (ownerReferences, finalizers) or where the server keeps its own
/// bookkeeping (resourceVersion, managedFields, selfLink), none of which
/// grants anything.
fn only_collector_fields_differ(object: &Value, old: &Value) -> bool {
    let stripped = |value: &Value| {
        let mut value = value.clone();
        if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
            for key in [
                "ownerReferences",
                "finalizers",
                "resourceVersion",
                "managedFields",
                "selfLink",
            ] {
                meta.remove(key);
            }
        }
        value
    };
    stripped(object) == stripped(old)
}
