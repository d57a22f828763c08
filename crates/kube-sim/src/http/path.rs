//! Request paths: `/api/v1/...` and `/apis/<group>/<version>/...`, with the
//! namespaced and cluster-scoped forms and an optional subresource.

use std::sync::Arc;

use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::Store;

#[derive(Debug, PartialEq, Eq)]
pub enum ApiPath {
    GroupDiscovery { group: String },
    ResourceDiscovery { group: String, version: String },
    Resource(RawTarget),
}

/// A resource path before the plural is checked against the registry.
#[derive(Debug, PartialEq, Eq)]
pub struct RawTarget {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub plural: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

/// A resolved request target.
pub struct Target {
    pub rt: Arc<ResourceType>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

impl ApiPath {
    pub fn parse(path: &str) -> Option<Self> {
        let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
        let (group, version, rest) = match segments.as_slice() {
            ["api", "v1", rest @ ..] => (String::new(), "v1".to_string(), rest),
            ["apis", group] => {
                return Some(Self::GroupDiscovery {
                    group: group.to_string(),
                });
            }
            ["apis", group, version, rest @ ..] => (group.to_string(), version.to_string(), rest),
            _ => return None,
        };
        if rest.iter().any(|s| s.is_empty()) {
            return None;
        }
        let owned = |s: &&str| Some(s.to_string());
        let (namespace, plural, name, subresource) = match rest {
            [] => return Some(Self::ResourceDiscovery { group, version }),
            // `namespaces/<ns>/status` and `namespaces/<ns>/finalize` are the
            // namespace's own subresources, not a collection inside it.
            ["namespaces", ns, sub @ ("status" | "finalize")] => {
                (None, "namespaces".to_string(), owned(ns), owned(sub))
            }
            ["namespaces", ns, plural, tail @ ..] => {
                let (name, sub) = match tail {
                    [] => (None, None),
                    [name] => (owned(name), None),
                    [name, sub] => (owned(name), owned(sub)),
                    _ => return None,
                };
                (owned(ns), plural.to_string(), name, sub)
            }
            [plural] => (None, plural.to_string(), None, None),
            [plural, name] => (None, plural.to_string(), owned(name), None),
            [plural, name, sub] => (None, plural.to_string(), owned(name), owned(sub)),
            _ => return None,
        };
        Some(Self::Resource(RawTarget {
            group,
            version,
            namespace,
            plural,
            name,
            subresource,
        }))
    }
}

impl RawTarget {
    pub fn resolve(self, store: &Store) -> Result<Target, ApiError> {
        let rt = store
            .resolve(&self.group, &self.version, &self.plural)
            .ok_or_else(ApiError::no_such_resource)?;
        // A namespaced path to a cluster-scoped kind names nothing.
        if !rt.namespaced && self.namespace.is_some() {
            return Err(ApiError::no_such_resource());
        }
        Ok(Target {
            rt,
            version: self.version,
            namespace: self.namespace,
            name: self.name,
            subresource: self.subresource,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str) -> RawTarget {
        match ApiPath::parse(path) {
            Some(ApiPath::Resource(t)) => t,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn namespaced_paths_split_into_their_parts() {
        let t = target("/api/v1/namespaces/default/pods/p1/status");
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert_eq!(t.plural, "pods");
        assert_eq!(t.name.as_deref(), Some("p1"));
        assert_eq!(t.subresource.as_deref(), Some("status"));
    }

    #[test]
    fn namespace_objects_and_their_status_are_cluster_paths() {
        let t = target("/api/v1/namespaces/team-a");
        assert_eq!(
            (t.plural.as_str(), t.name.as_deref(), t.namespace),
            ("namespaces", Some("team-a"), None)
        );
        let t = target("/api/v1/namespaces/team-a/status");
        assert_eq!(t.subresource.as_deref(), Some("status"));
        let t = target("/api/v1/namespaces/team-a/configmaps");
        assert_eq!(
            (t.plural.as_str(), t.namespace.as_deref()),
            ("configmaps", Some("team-a"))
        );
    }

    #[test]
    fn group_paths_and_discovery() {
        let t = target("/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l");
        assert_eq!(t.group, "coordination.k8s.io");
        assert_eq!(
            ApiPath::parse("/apis/example.com/v1"),
            Some(ApiPath::ResourceDiscovery {
                group: "example.com".into(),
                version: "v1".into()
            })
        );
        assert_eq!(
            ApiPath::parse("/apis/example.com"),
            Some(ApiPath::GroupDiscovery {
                group: "example.com".into()
            })
        );
        assert_eq!(ApiPath::parse("/nope"), None);
        assert_eq!(ApiPath::parse("/api/v1/a/b/c/d"), None);
    }
}
