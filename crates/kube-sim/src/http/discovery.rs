//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/<g>` and the
//! per group-version resource lists kubectl and kube-rs read.

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceType};

pub const SERVER_VERSION_MINOR: &str = "33";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": SERVER_VERSION_MINOR,
        "gitVersion": format!("v1.{SERVER_VERSION_MINOR}.0-kube-sim"),
        "gitCommit": "kube-sim",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "none (kube-sim is written in Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    })
}

/// A create-only API answered outside the store (reviews.rs, tokens.rs):
/// listed in discovery and OpenAPI like the stored kinds, so `kubectl
/// create -f tokenreview.yaml` finds its kind.
pub struct ReviewApi {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

pub const REVIEW_APIS: &[ReviewApi] = &[
    ReviewApi {
        group: "authentication.k8s.io",
        version: "v1",
        plural: "tokenreviews",
        kind: "TokenReview",
        namespaced: false,
    },
    ReviewApi {
        group: "authentication.k8s.io",
        version: "v1",
        plural: "selfsubjectreviews",
        kind: "SelfSubjectReview",
        namespaced: false,
    },
    ReviewApi {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "subjectaccessreviews",
        kind: "SubjectAccessReview",
        namespaced: false,
    },
    ReviewApi {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "selfsubjectaccessreviews",
        kind: "SelfSubjectAccessReview",
        namespaced: false,
    },
    ReviewApi {
        group: "authorization.k8s.io",
        version: "v1",
        plural: "localsubjectaccessreviews",
        kind: "LocalSubjectAccessReview",
        namespaced: true,
    },
];

/// Groups served only by review APIs, with their versions.
fn review_groups() -> Vec<(&'static str, Vec<String>)> {
    let mut groups: Vec<(&'static str, Vec<String>)> = Vec::new();
    for api in REVIEW_APIS {
        match groups.iter_mut().find(|(g, _)| *g == api.group) {
            Some((_, versions)) if !versions.iter().any(|v| v == api.version) => {
                versions.push(api.version.to_string());
            }
            Some(_) => {}
            None => groups.push((api.group, vec![api.version.to_string()])),
        }
    }
    groups
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let list: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = list.first().cloned().unwrap_or(Value::Null);
    json!({
        "name": group,
        "versions": list,
        "preferredVersion": preferred,
    })
}

pub fn group_list(registry: &Registry) -> Value {
    let served = registry.groups();
    let mut groups: Vec<Value> = served
        .iter()
        .map(|(g, versions)| group_json(g, versions))
        .collect();
    for (group, versions) in review_groups() {
        if !served.contains_key(group) {
            groups.push(group_json(group, &versions));
        }
    }
    json!({
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": groups,
    })
}

pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let groups = registry.groups();
    let reviews = review_groups();
    let versions = groups.get(name).or_else(|| {
        reviews
            .iter()
            .find(|(g, _)| *g == name)
            .map(|(_, versions)| versions)
    })?;
    let mut doc = group_json(name, versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource_entries(rt: &ResourceType, version: &str) -> Vec<Value> {
    let mut entry = json!({
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": ALL_VERBS,
    });
    if !rt.short_names.is_empty() {
        entry["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        entry["categories"] = json!(rt.categories);
    }
    let mut entries = vec![entry];
    if rt.has_status(version) {
        entries.push(json!({
            "name": format!("{}/status", rt.plural),
            "singularName": "",
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if super::scale::supported(rt) {
        entries.push(json!({
            "name": format!("{}/scale", rt.plural),
            "singularName": "",
            "namespaced": true,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    if rt.kind == "Pod" && rt.group.is_empty() {
        entries.push(json!({
            "name": "pods/exec", "singularName": "", "namespaced": true,
            "kind": "PodExecOptions", "verbs": ["create", "get"],
        }));
        entries.push(json!({
            "name": "pods/binding", "singularName": "", "namespaced": true,
            "kind": "Binding", "verbs": ["create"],
        }));
        entries.push(json!({
            "name": "pods/eviction", "singularName": "", "namespaced": true,
            "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"],
        }));
    }
    entries
}

/// The media type client-go asks for first: aggregated discovery.
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the Accept header asks for the aggregated document (v2).
pub fn wants_aggregated(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| {
            let params: Vec<&str> = media.split(';').map(str::trim).collect();
            params.contains(&"as=APIGroupDiscoveryList")
                && params.contains(&"g=apidiscovery.k8s.io")
                && params.contains(&"v=v2")
        })
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`):
/// every group's versions and resources in one document, `/api` for the
/// core group (`core: true`) and `/apis` for the others, as client-go reads
/// them before falling back to one request per group-version.
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = registry
        .groups()
        .iter()
        .map(|(g, versions)| (g.clone(), versions.clone()))
        .collect();
    if core {
        groups = vec![(String::new(), vec!["v1".to_string()])];
    } else {
        groups.retain(|(g, _)| !g.is_empty());
        for (group, versions) in review_groups() {
            if !groups.iter().any(|(g, _)| g == group) {
                groups.push((group.to_string(), versions));
            }
        }
    }
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .filter_map(|version| {
                    let list = resource_list(registry, group, version)?;
                    Some(json!({
                        "version": version,
                        "resources": aggregated_resources(group, version, &list["resources"]),
                        "freshness": "Current",
                    }))
                })
                .collect();
            json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// `APIResource` entries of one group-version as `APIResourceDiscovery`:
/// each resource with its subresources nested under it.
fn aggregated_resources(group: &str, version: &str, entries: &Value) -> Vec<Value> {
    let entries = entries.as_array().map(Vec::as_slice).unwrap_or_default();
    let kind_of = |e: &Value| {
        json!({
            "group": e.get("group").and_then(Value::as_str).unwrap_or(group),
            "version": e.get("version").and_then(Value::as_str).unwrap_or(version),
            "kind": e["kind"],
        })
    };
    let mut out: Vec<Value> = Vec::new();
    for entry in entries {
        let name = entry["name"].as_str().unwrap_or_default();
        if let Some((parent, sub)) = name.split_once('/') {
            if let Some(resource) = out.iter_mut().find(|r| r["resource"] == parent) {
                let subresource = json!({
                    "subresource": sub,
                    "responseKind": kind_of(entry),
                    "verbs": entry["verbs"],
                });
                match resource
                    .get_mut("subresources")
                    .and_then(Value::as_array_mut)
                {
                    Some(list) => list.push(subresource),
                    None => resource["subresources"] = json!([subresource]),
                }
            }
            continue;
        }
        let mut resource = json!({
            "resource": name,
            "responseKind": kind_of(entry),
            "scope": if entry["namespaced"] == true { "Namespaced" } else { "Cluster" },
            "singularResource": entry["singularName"],
            "verbs": entry["verbs"],
        });
        for key in ["shortNames", "categories"] {
            if let Some(v) = entry.get(key) {
                resource[key] = v.clone();
            }
        }
        out.push(resource);
    }
    out
}

/// The `APIResourceList` of one group-version, or None when nothing is served there.
pub fn resource_list(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut resources: Vec<Value> = registry
        .all()
        .filter(|rt| rt.group == group && rt.serves(version))
        .flat_map(|rt| resource_entries(rt, version))
        .collect();
    resources.extend(
        REVIEW_APIS
            .iter()
            .filter(|api| api.group == group && api.version == version)
            .map(|api| {
                json!({
                    "name": api.plural, "singularName": "", "namespaced": api.namespaced,
                    "kind": api.kind, "verbs": ["create"],
                })
            }),
    );
    if resources.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_carries_status_subresources_and_short_names() {
        let registry = Registry::with_builtins();
        let list = resource_list(&registry, "", "v1").unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"pods"));
        assert!(names.contains(&"pods/status"));
        assert!(names.contains(&"pods/exec"));
        assert!(names.contains(&"pods/binding"));
        assert!(!names.contains(&"configmaps/status"));
        let pods = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods")
            .unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["namespaced"], json!(true));
    }

    #[test]
    fn the_review_apis_are_discovered_as_create_only_kinds() {
        let registry = Registry::with_builtins();
        let groups = group_list(&registry);
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"authentication.k8s.io"), "{names:?}");
        assert!(names.contains(&"authorization.k8s.io"), "{names:?}");
        let list = resource_list(&registry, "authentication.k8s.io", "v1").unwrap();
        let token_reviews = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "tokenreviews")
            .unwrap();
        assert_eq!(token_reviews["kind"], "TokenReview");
        assert_eq!(token_reviews["verbs"], json!(["create"]));
        assert!(group(&registry, "authorization.k8s.io").is_some());
    }

    #[test]
    fn aggregated_discovery_nests_subresources_under_their_resource() {
        let registry = Registry::with_builtins();
        let core = aggregated(&registry, true);
        assert_eq!(core["kind"], "APIGroupDiscoveryList");
        assert_eq!(core["items"][0]["metadata"]["name"], "");
        let resources = core["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap();
        let pods = resources.iter().find(|r| r["resource"] == "pods").unwrap();
        assert_eq!(pods["scope"], "Namespaced");
        assert_eq!(
            pods["responseKind"],
            json!({"group": "", "version": "v1", "kind": "Pod"})
        );
        let subs: Vec<&str> = pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["subresource"].as_str().unwrap())
            .collect();
        assert!(
            subs.contains(&"status") && subs.contains(&"eviction"),
            "{subs:?}"
        );
        let eviction = pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "eviction")
            .unwrap();
        assert_eq!(eviction["responseKind"]["group"], "policy");
        let groups = aggregated(&registry, false);
        let names: Vec<&str> = groups["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["metadata"]["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"apps") && names.contains(&"authentication.k8s.io"),
            "{names:?}"
        );
        assert!(!names.contains(&""));
    }

    #[test]
    fn unknown_group_versions_have_no_resource_list() {
        let registry = Registry::with_builtins();
        assert!(resource_list(&registry, "example.com", "v1").is_none());
        assert!(group(&registry, "example.com").is_none());
        assert!(group(&registry, "coordination.k8s.io").is_some());
    }
}
