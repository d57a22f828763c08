//! Request paths: `/api/v1/...` and `/apis/<group>/<version>/...`, with the
//! namespaced and cluster-scoped forms and an optional subresource.

use std::sync::Arc;

use crate::error::ApiError;
use crate::resources::ResourceType;
use crate::store::{Store, WriteParams, WriteScope};

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

impl Target {
    /// The scope of a write to this target with `params`.
    pub fn write_scope<'a>(&'a self, params: &'a WriteParams) -> WriteScope<'a> {
        WriteScope {
            rt: &self.rt,
            version: &self.version,
            namespace: self.namespace.as_deref(),
            params,
        }
    }
}

/// `%XX` escapes decoded; a malformed escape or a result that is not UTF-8
/// leaves the segment as it was (it then names nothing and gets a 404).
pub(crate) fn percent_decode(segment: &str) -> String {
    if !segment.contains('%') {
        return segment.to_owned();
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = segment.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| segment.to_owned())
}

impl ApiPath {
    pub fn parse(path: &str) -> Option<Self> {
        // Segments are percent-decoded after the split, as kube-apiserver
        // sees them (`system%3Aprobe` names `system:probe`).
        let decoded: Vec<String> = path
            .trim_end_matches('/')
            .split('/')
            .skip(1)
            .map(percent_decode)
            .collect();
        let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
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
    fn percent_encoded_segments_are_decoded_and_malformed_escapes_kept() {
        let t = target(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/system%3Aprobe%3Areader",
        );
        assert_eq!(t.name.as_deref(), Some("system:probe:reader"));
        assert_eq!(super::percent_decode("a%zz"), "a%zz");
        assert_eq!(super::percent_decode("a%ff"), "a%ff");
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
