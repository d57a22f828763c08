//! RBAC escalation prevention, the rule kube-apiserver's RBAC registry
//! enforces on every write of a Role, ClusterRole or binding: nobody grants
//! a permission they do not hold themselves. A role's rules (a binding's:
//! the rules of the role it refers to) must each be covered by a rule the
//! writer already holds, or the write is refused with the list of what is
//! missing. Pure, like the rest of [`crate::rbac`]; the HTTP layer decides
//! when it applies (`escalate`, `bind`, `system:masters`).
//!
//! Covering is decided per atom: each granted rule is split into single
//! (group, resource, verb[, name]) and (URL, verb) pieces, and a piece is
//! covered when one held rule covers it whole. `*` is only covered by `*`:
//! holding every verb by name does not hold `*`. The refusal lists the
//! uncovered pieces with pieces that differ only by verb folded together,
//! each written as Go's `%q` writes the rule's string lists, one per line,
//! sorted and without repeats, exactly as kube-apiserver's message does.

use serde_json::Value;

use super::{Policy, UserInfo, subject_matches, text};
use crate::schema::go_quote;

/// One PolicyRule's lists, in the order the object gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
    pub verbs: Vec<String>,
}

impl Rule {
    pub fn from_value(rule: &Value) -> Self {
        let list = |key: &str| super::strings(rule, key);
        Self {
            api_groups: list("apiGroups"),
            resources: list("resources"),
            resource_names: list("resourceNames"),
            non_resource_urls: list("nonResourceURLs"),
            verbs: list("verbs"),
        }
    }

    /// The rules of a Role or ClusterRole object.
    pub fn all_of(role: &Value) -> Vec<Rule> {
        role.get("rules")
            .and_then(Value::as_array)
            .map(|rules| rules.iter().map(Rule::from_value).collect())
            .unwrap_or_default()
    }

    /// Every permission there is: what the aggregationRule check asks for.
    pub fn full_authority() -> Vec<Rule> {
        let all = || vec!["*".to_string()];
        vec![
            Rule {
                api_groups: all(),
                resources: all(),
                verbs: all(),
                ..Rule::default()
            },
            Rule {
                non_resource_urls: all(),
                verbs: all(),
                ..Rule::default()
            },
        ]
    }

    /// kube-apiserver's compact rendering of a rule in its escalation
    /// message: only the lists that are not empty, each as Go's `%q`
    /// prints a string slice.
    pub fn compact_string(&self) -> String {
        let parts: Vec<String> = [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(label, list)| format!("{label}:{}", go_quoted_list(list)))
        .collect();
        format!("{{{}}}", parts.join(", "))
    }
}

/// Go's `%q` of a `[]string`: each quoted, space separated, in brackets.
fn go_quoted_list(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// Why the role a binding refers to could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleReferenceError {
    /// No such role (`roles` or `clusterroles`, and its name).
    NotFound {
        resource: &'static str,
        name: String,
    },
    /// A roleRef kind that is neither Role nor ClusterRole.
    UnsupportedKind(String),
}

impl std::fmt::Display for RoleReferenceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound { resource, name } => {
                let name = go_quote(name);
                write!(f, "{resource}.rbac.authorization.k8s.io {name} not found")
            }
            Self::UnsupportedKind(kind) => {
                write!(f, "unsupported role reference kind: {}", go_quote(kind))
            }
        }
    }
}

/// The rules of the role `kind`/`name` a binding in `namespace` (empty
/// for a ClusterRoleBinding) refers to.
pub fn role_reference_rules(
    policy: &Policy,
    kind: &str,
    name: &str,
    namespace: &str,
) -> Result<Vec<Rule>, RoleReferenceError> {
    let found = match kind {
        "ClusterRole" => policy
            .cluster_roles
            .iter()
            .find(|r| text(r, "/metadata/name") == name),
        "Role" => policy.roles.iter().find(|r| {
            !namespace.is_empty()
                && text(r, "/metadata/name") == name
                && text(r, "/metadata/namespace") == namespace
        }),
        other => return Err(RoleReferenceError::UnsupportedKind(other.to_string())),
    };
    let resource = if kind == "Role" {
        "roles"
    } else {
        "clusterroles"
    };
    found
        .map(Rule::all_of)
        .ok_or_else(|| RoleReferenceError::NotFound {
            resource,
            name: name.to_string(),
        })
}

/// Every rule `user` holds through bindings: ClusterRoleBindings, and the
/// RoleBindings of `namespace` when it is not empty. Bindings whose role
/// cannot be read add nothing and are reported, as kube-apiserver appends
/// them to its refusal.
pub fn rules_for(policy: &Policy, user: &UserInfo, namespace: &str) -> (Vec<Rule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    let cluster_wide = policy.cluster_role_bindings.iter().map(|b| (b, ""));
    let local = policy
        .role_bindings
        .iter()
        .filter(|b| !namespace.is_empty() && text(b, "/metadata/namespace") == namespace)
        .map(|b| (b, namespace));
    for (binding, binding_namespace) in cluster_wide.chain(local) {
        let applies = binding
            .get("subjects")
            .and_then(Value::as_array)
            .is_some_and(|subjects| {
                subjects
                    .iter()
                    .any(|s| subject_matches(s, binding_namespace, user))
            });
        if !applies {
            continue;
        }
        match role_reference_rules(
            policy,
            text(binding, "/roleRef/kind"),
            text(binding, "/roleRef/name"),
            binding_namespace,
        ) {
            Ok(found) => rules.extend(found),
            Err(e) => errors.push(e.to_string()),
        }
    }
    (rules, errors)
}

/// Refuses (with kube-apiserver's sentence, to follow `... is forbidden: `)
/// when `granted` holds a permission `user` does not hold in `namespace`
/// (cluster-wide only, when it is empty).
pub fn confirm_no_escalation(
    policy: &Policy,
    user: &UserInfo,
    namespace: &str,
    granted: &[Rule],
) -> Result<(), String> {
    let (held, resolution_errors) = rules_for(policy, user, namespace);
    let missing = uncovered(&held, granted);
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = fold_verbs(missing)
        .iter()
        .map(Rule::compact_string)
        .collect();
    lines.sort();
    lines.dedup();
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.username),
        go_quoted_list(&user.groups),
        lines.join("\n")
    );
    if !resolution_errors.is_empty() {
        message.push_str(&format!(
            "; resolution errors: [{}]",
            aggregate(&resolution_errors)
        ));
    }
    Err(message)
}

/// How Go's aggregate error reads: one error as itself, several (without
/// repeats) comma separated in brackets.
fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errors {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    match seen.as_slice() {
        [one] => one.to_string(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// Single-permission pieces of `rule`: per group, resource and verb (and
/// name, when it names any), then per URL and verb.
fn atoms(rule: &Rule) -> Vec<Rule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let piece = Rule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: one(verb),
                    ..Rule::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(piece);
                } else {
                    out.extend(rule.resource_names.iter().map(|name| Rule {
                        resource_names: one(name),
                        ..piece.clone()
                    }));
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(Rule {
                non_resource_urls: one(url),
                verbs: one(verb),
                ..Rule::default()
            });
        }
    }
    out
}

/// The pieces of `granted` no rule in `held` covers, in order.
fn uncovered(held: &[Rule], granted: &[Rule]) -> Vec<Rule> {
    granted
        .iter()
        .flat_map(atoms)
        .filter(|piece| !held.iter().any(|owner| covers(owner, piece)))
        .collect()
}

fn contains_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| set.contains(w))
}

fn star(set: &[String]) -> bool {
    set.iter().any(|s| s == "*")
}

/// Whether `owner` grants all of `piece` (a single-permission rule).
fn covers(owner: &Rule, piece: &Rule) -> bool {
    let verbs = star(&owner.verbs) || contains_all(&owner.verbs, &piece.verbs);
    let groups = star(&owner.api_groups) || contains_all(&owner.api_groups, &piece.api_groups);
    let resources = star(&owner.resources)
        || piece.resources.iter().all(|wanted| {
            owner.resources.contains(wanted)
                // A subresource is also held through `*/sub`.
                || wanted.split_once('/').is_some_and(|(_, sub)| {
                    owner.resources.contains(&format!("*/{sub}"))
                })
        });
    let urls = piece.non_resource_urls.iter().all(|wanted| {
        owner.non_resource_urls.iter().any(|held| {
            held == wanted
                || (held.ends_with('*') && wanted.starts_with(held.trim_end_matches('*')))
        })
    });
    // An owner rule limited to names never covers a piece that is not.
    let names = owner.resource_names.is_empty()
        || (!piece.resource_names.is_empty()
            && contains_all(&owner.resource_names, &piece.resource_names));
    verbs && groups && resources && urls && names
}

/// Folds pieces that differ only by verb (one group, one resource, at
/// most one name, nothing else) into one rule, verbs in the order met;
/// the rest stay as they are.
fn fold_verbs(pieces: Vec<Rule>) -> Vec<Rule> {
    let mut folded: Vec<Rule> = Vec::new();
    let mut others = Vec::new();
    for piece in pieces {
        let simple = piece.api_groups.len() == 1
            && piece.resources.len() == 1
            && piece.resource_names.len() <= 1
            && piece.non_resource_urls.is_empty();
        if !simple {
            others.push(piece);
            continue;
        }
        match folded.iter_mut().find(|f| {
            f.api_groups == piece.api_groups
                && f.resources == piece.resources
                && f.resource_names == piece.resource_names
        }) {
            Some(existing) => existing.verbs.extend(piece.verbs),
            None => folded.push(piece),
        }
    }
    others.extend(folded);
    others
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(value: Value) -> Rule {
        Rule::from_value(&value)
    }

    fn user() -> UserInfo {
        UserInfo::service_account("team", "deployer")
    }

    /// The deployer holds get/list on secrets and `*` on configmaps in
    /// "team", and reads nodes cluster-wide.
    fn policy() -> Policy {
        Policy {
            roles: vec![json!({
                "metadata": {"name": "team", "namespace": "team"},
                "rules": [
                    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]},
                    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},
                ]
            })],
            role_bindings: vec![json!({
                "metadata": {"name": "team", "namespace": "team"},
                "roleRef": {"kind": "Role", "name": "team"},
                "subjects": [{"kind": "ServiceAccount", "name": "deployer"}]
            })],
            cluster_roles: vec![json!({
                "metadata": {"name": "nodes"},
                "rules": [{"apiGroups": [""], "resources": ["nodes", "*/log"], "verbs": ["get"]}]
            })],
            cluster_role_bindings: vec![json!({
                "metadata": {"name": "nodes"},
                "roleRef": {"kind": "ClusterRole", "name": "nodes"},
                "subjects": [{"kind": "Group", "name": "system:serviceaccounts:team"}]
            })],
        }
    }

    #[test]
    fn granting_what_the_writer_holds_in_the_namespace_passes() {
        let granted = [
            rule(json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]})),
            rule(
                json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["delete"]}),
            ),
            rule(json!({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]})),
        ];
        assert_eq!(
            confirm_no_escalation(&policy(), &user(), "team", &granted),
            Ok(())
        );
    }

    #[test]
    fn the_refusal_lists_each_missing_permission_once_with_its_verbs_folded() {
        let granted = [
            rule(
                json!({"apiGroups": [""], "resources": ["secrets", "pods"], "verbs": ["get", "delete", "watch"]}),
            ),
            rule(json!({"nonResourceURLs": ["/metrics"], "verbs": ["get"]})),
        ];
        let refusal = confirm_no_escalation(&policy(), &user(), "team", &granted).unwrap_err();
        assert_eq!(
            refusal,
            "user \"system:serviceaccount:team:deployer\" (groups=[\"system:serviceaccounts\" \"system:serviceaccounts:team\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
             {APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"get\" \"delete\" \"watch\"]}\n\
             {APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"delete\" \"watch\"]}\n\
             {NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"
        );
    }

    #[test]
    fn a_role_binding_grants_nothing_outside_its_namespace() {
        let granted = [rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
        )];
        assert!(confirm_no_escalation(&policy(), &user(), "other", &granted).is_err());
        // A ClusterRole is checked against cluster-wide grants only.
        assert!(confirm_no_escalation(&policy(), &user(), "", &granted).is_err());
    }

    #[test]
    fn a_star_is_held_only_through_a_star() {
        let every_verb =
            rule(json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}));
        assert_eq!(
            confirm_no_escalation(&policy(), &user(), "team", &[every_verb]),
            Ok(())
        );
        let every_resource = rule(json!({"apiGroups": [""], "resources": ["*"], "verbs": ["get"]}));
        let refusal =
            confirm_no_escalation(&policy(), &user(), "team", &[every_resource]).unwrap_err();
        assert!(refusal.ends_with("\n{APIGroups:[\"\"], Resources:[\"*\"], Verbs:[\"get\"]}"));
    }

    #[test]
    fn names_and_subresources_are_covered_as_kube_apiserver_covers_them() {
        let named_owner = rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]}),
        );
        let named = rule(
            json!({"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"], "verbs": ["get"]}),
        );
        let unnamed = rule(json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}));
        assert!(uncovered(std::slice::from_ref(&named_owner), &[named]).is_empty());
        assert_eq!(uncovered(&[named_owner], &[unnamed]).len(), 1);
        let logs = rule(json!({"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}));
        assert!(
            uncovered(
                &Rule::all_of(&policy().cluster_roles[0]),
                std::slice::from_ref(&logs)
            )
            .is_empty()
        );
        // Only `*/sub` stands for a subresource of every resource; `pods/*`
        // is a resource name like any other.
        let pods_star = rule(json!({"apiGroups": [""], "resources": ["pods/*"], "verbs": ["get"]}));
        assert_eq!(uncovered(&[pods_star], &[logs]).len(), 1);
        let url_owner = rule(json!({"nonResourceURLs": ["/debug/*"], "verbs": ["get"]}));
        let url = rule(json!({"nonResourceURLs": ["/debug/pprof"], "verbs": ["get"]}));
        assert!(uncovered(&[url_owner], &[url]).is_empty());
    }

    #[test]
    fn a_binding_to_a_missing_role_is_reported_after_the_refusal() {
        let mut policy = policy();
        policy.cluster_role_bindings.push(json!({
            "metadata": {"name": "gone"},
            "roleRef": {"kind": "ClusterRole", "name": "gone"},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": "team"}]
        }));
        let granted = [rule(
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create"]}),
        )];
        let refusal = confirm_no_escalation(&policy, &user(), "team", &granted).unwrap_err();
        assert!(
            refusal.ends_with(
                "{APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"create\"]}; resolution errors: [clusterroles.rbac.authorization.k8s.io \"gone\" not found]"
            ),
            "{refusal}"
        );
    }

    #[test]
    fn a_binding_reads_the_rules_of_the_role_it_names() {
        let policy = policy();
        assert_eq!(
            role_reference_rules(&policy, "Role", "team", "team").map(|r| r.len()),
            Ok(2)
        );
        assert_eq!(
            role_reference_rules(&policy, "Role", "team", "other")
                .unwrap_err()
                .to_string(),
            "roles.rbac.authorization.k8s.io \"team\" not found"
        );
        assert_eq!(
            role_reference_rules(&policy, "Group", "x", "")
                .unwrap_err()
                .to_string(),
            "unsupported role reference kind: \"Group\""
        );
    }
}
