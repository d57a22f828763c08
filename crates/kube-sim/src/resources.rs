//! The kinds kube-sim serves: a table of built-ins plus whatever the stored
//! CustomResourceDefinitions declare. Pure data; the store owns one registry.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::apply::ListTypes;
use crate::names::NameRule;
use crate::schema::CompiledSchema;

/// Identifies storage: all versions of a resource share one set of objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

/// What happens to `.status` on create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusOnCreate {
    Keep,
    Drop,
    /// Replaced by this JSON document (pods start `Pending`, namespaces `Active`).
    Reset(&'static str),
}

/// Built-in kinds are checked by decoding into their k8s-openapi type and
/// re-encoding, which also drops unknown fields as the real server does.
pub type Normalizer = fn(&Value) -> Result<Value, serde_json::Error>;

/// How a kind's objects merge (SSA, SMP) and, for CRDs, the compiled
/// structural schema of each served version.
#[derive(Debug, Clone, Default)]
pub struct TypeSchemas {
    pub list_types: Arc<ListTypes>,
    pub by_version: BTreeMap<String, Arc<CompiledSchema>>,
}

/// One served kind, at one group.
#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    /// Served versions, highest priority first.
    pub versions: Vec<String>,
    /// The version objects are kept in (conversion is the `None` strategy:
    /// only `apiVersion` changes between versions, as for most CRDs).
    pub storage_version: String,
    pub kind: String,
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Versions whose status subresource is enabled.
    pub status_versions: Vec<String>,
    pub name_rule: NameRule,
    pub status_on_create: StatusOnCreate,
    pub normalize: Option<Normalizer>,
    /// Field selectors beyond `metadata.name` and `metadata.namespace`.
    pub extra_fields: &'static [&'static str],
    /// True for kinds served from a CRD.
    pub custom: bool,
    pub schemas: TypeSchemas,
    /// Set when this kind's objects are another kind's, seen through a
    /// conversion (events.k8s.io/v1 Events are stored core/v1 Events).
    pub stored_as: Option<StoredAs>,
}

/// Where a kind served as a view of another is stored, and how its objects
/// convert between the two forms.
#[derive(Debug, Clone, Copy)]
pub struct StoredAs {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    /// The stored kind's selectable fields (`StoredObject::fields` order).
    pub storage_fields: &'static [&'static str],
    pub to_view: fn(Value) -> Value,
    pub from_view: fn(Value) -> Value,
    /// A field selector path of the view, in the stored kind's names.
    pub field_in_storage: fn(&str) -> String,
    /// Rules only writes through the view obey (stored form; `None` old
    /// for a create).
    pub check_view_write: fn(&Value, Option<&Value>) -> Vec<crate::error::Cause>,
}

/// events.k8s.io/v1 Events over the core/v1 store.
const EVENTS_V1_STORED_AS: StoredAs = StoredAs {
    group: "",
    version: "v1",
    plural: "events",
    storage_fields: EVENT_FIELDS,
    to_view: crate::event_view::to_events_v1,
    from_view: crate::event_view::from_events_v1,
    field_in_storage: crate::event_view::field_in_storage,
    check_view_write: crate::event_view::check_events_v1_write,
};

impl ResourceType {
    /// Whether the real server keeps `metadata.generation` for this kind:
    /// its registry strategies set it for custom resources, CRDs, Pods,
    /// the apps/batch workloads, admission policies and PriorityClasses,
    /// and leave it out of kinds without a spec
    /// (ConfigMaps, Secrets, Leases, …) and of Services, Nodes, Namespaces.
    pub fn tracks_generation(&self) -> bool {
        self.custom
            || matches!(
                self.group.as_str(),
                "apps"
                    | "batch"
                    | "apiextensions.k8s.io"
                    | "networking.k8s.io"
                    | "policy"
                    | "admissionregistration.k8s.io"
                    | "scheduling.k8s.io"
                    | "discovery.k8s.io"
            )
            || (self.group.is_empty()
                && matches!(self.kind.as_str(), "Pod" | "ReplicationController"))
    }

    pub fn group_resource(&self) -> GroupResource {
        GroupResource {
            group: self.group.clone(),
            resource: self.plural.clone(),
        }
    }

    /// The resource whose store holds this kind's objects: its own, or the
    /// stored kind's for a view.
    pub fn storage_key(&self) -> GroupResource {
        match &self.stored_as {
            Some(stored) => GroupResource {
                group: stored.group.to_string(),
                resource: stored.plural.to_string(),
            },
            None => self.group_resource(),
        }
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    pub fn has_status(&self, version: &str) -> bool {
        self.status_versions.iter().any(|v| v == version)
    }

    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn schema(&self, version: &str) -> Option<&CompiledSchema> {
        self.schemas.by_version.get(version).map(|s| s.as_ref())
    }

    /// Every field a field selector may name for this kind.
    pub fn selectable_fields(&self) -> Vec<&'static str> {
        let mut fields = vec!["metadata.name"];
        if self.namespaced {
            fields.push("metadata.namespace");
        }
        fields.extend_from_slice(self.extra_fields);
        fields
    }
}

/// Decodes from a borrow: the caller keeps the input to find what the
/// decode dropped, without copying it first.
fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(
    value: &Value,
) -> Result<Value, serde_json::Error> {
    let typed = T::deserialize(value)?;
    serde_json::to_value(typed)
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    name_rule: NameRule,
    status_on_create: StatusOnCreate,
    normalize: Normalizer,
    extra_fields: &'static [&'static str],
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
const EVENTS_V1_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "reason",
    "type",
];

fn builtins() -> Vec<Builtin> {
    use NameRule::*;
    use StatusOnCreate::*;
    use k8s_openapi::api::admissionregistration::v1 as admission;
    use k8s_openapi::api::apps::v1 as apps;
    use k8s_openapi::api::batch::v1 as batch;
    use k8s_openapi::api::coordination::v1 as coordination;
    use k8s_openapi::api::core::v1 as core;
    use k8s_openapi::api::discovery::v1 as discovery;
    use k8s_openapi::api::events::v1 as events;
    use k8s_openapi::api::policy::v1 as policy;
    use k8s_openapi::api::rbac::v1 as rbac;
    use k8s_openapi::api::scheduling::v1 as scheduling;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    // Workloads and RBAC are stored and served. Deployments, ReplicaSets
    // and Jobs are acted on by `crate::workloads`; DaemonSets and
    // StatefulSets are stored only.
    let workload = |kind, plural, short_names, normalize| Builtin {
        group: "apps",
        version: "v1",
        kind,
        plural,
        namespaced: true,
        short_names,
        categories: &["all"],
        status: true,
        name_rule: Subdomain,
        status_on_create: Drop,
        normalize,
        extra_fields: &[],
    };
    let rbac_kind = |kind, plural, namespaced, normalize| Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        kind,
        plural,
        namespaced,
        short_names: &[],
        categories: &[],
        status: false,
        name_rule: PathSegment,
        status_on_create: Keep,
        normalize,
        extra_fields: &[],
    };
    let mut kinds = vec![
        Builtin {
            group: "",
            version: "v1",
            kind: "Namespace",
            plural: "namespaces",
            namespaced: false,
            short_names: &["ns"],
            categories: &[],
            status: true,
            name_rule: Label,
            status_on_create: Reset(r#"{"phase":"Active"}"#),
            normalize: roundtrip::<core::Namespace>,
            extra_fields: &["status.phase"],
        },
        Builtin {
            group: "",
            version: "v1",
            kind: "Node",
            plural: "nodes",
            namespaced: false,
            short_names: &["no"],
            categories: &[],
            status: true,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<core::Node>,
            extra_fields: &["spec.unschedulable"],
        },
        Builtin {
            group: "",
            version: "v1",
            kind: "Pod",
            plural: "pods",
            namespaced: true,
            short_names: &["po"],
            categories: &["all"],
            status: true,
            name_rule: Subdomain,
            status_on_create: Reset(r#"{"phase":"Pending"}"#),
            normalize: roundtrip::<core::Pod>,
            extra_fields: POD_FIELDS,
        },
        Builtin {
            group: "",
            version: "v1",
            kind: "Service",
            plural: "services",
            namespaced: true,
            short_names: &["svc"],
            categories: &["all"],
            status: true,
            name_rule: Dns1035,
            status_on_create: Reset(r#"{"loadBalancer":{}}"#),
            normalize: roundtrip::<core::Service>,
            extra_fields: &[],
        },
        Builtin {
            group: "",
            version: "v1",
            kind: "ConfigMap",
            plural: "configmaps",
            namespaced: true,
            short_names: &["cm"],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<core::ConfigMap>,
            extra_fields: &[],
        },
        Builtin {
            group: "",
            version: "v1",
            kind: "Secret",
            plural: "secrets",
            namespaced: true,
            short_names: &[],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<core::Secret>,
            extra_fields: &["type"],
        },
        Builtin {
            group: "",
            version: "v1",
            kind: "ServiceAccount",
            plural: "serviceaccounts",
            namespaced: true,
            short_names: &["sa"],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<core::ServiceAccount>,
            extra_fields: &[],
        },
        Builtin {
            group: "",
            version: "v1",
            kind: "Event",
            plural: "events",
            namespaced: true,
            short_names: &["ev"],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<core::Event>,
            extra_fields: EVENT_FIELDS,
        },
        Builtin {
            group: "events.k8s.io",
            version: "v1",
            kind: "Event",
            plural: "events",
            namespaced: true,
            short_names: &["ev"],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<events::Event>,
            extra_fields: EVENTS_V1_FIELDS,
        },
        Builtin {
            group: "coordination.k8s.io",
            version: "v1",
            kind: "Lease",
            plural: "leases",
            namespaced: true,
            short_names: &[],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<coordination::Lease>,
            extra_fields: &[],
        },
        // Stored and served so charts that ship them apply; kube-sim
        // neither enforces a disruption budget nor evaluates an admission
        // policy's CEL (docs/kube-sim.md, Limits).
        Builtin {
            group: "policy",
            version: "v1",
            kind: "PodDisruptionBudget",
            plural: "poddisruptionbudgets",
            namespaced: true,
            short_names: &["pdb"],
            categories: &[],
            status: true,
            name_rule: Subdomain,
            status_on_create: Drop,
            normalize: roundtrip::<policy::PodDisruptionBudget>,
            extra_fields: &[],
        },
        // Admission webhooks are called on writes (crate::admission).
        Builtin {
            group: "admissionregistration.k8s.io",
            version: "v1",
            kind: "MutatingWebhookConfiguration",
            plural: "mutatingwebhookconfigurations",
            namespaced: false,
            short_names: &[],
            categories: &["api-extensions"],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<admission::MutatingWebhookConfiguration>,
            extra_fields: &[],
        },
        Builtin {
            group: "admissionregistration.k8s.io",
            version: "v1",
            kind: "ValidatingWebhookConfiguration",
            plural: "validatingwebhookconfigurations",
            namespaced: false,
            short_names: &[],
            categories: &["api-extensions"],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<admission::ValidatingWebhookConfiguration>,
            extra_fields: &[],
        },
        // Stored for webhooks' Services to name their addresses (kube-sim
        // keeps no slices for Services with selectors).
        Builtin {
            group: "discovery.k8s.io",
            version: "v1",
            kind: "EndpointSlice",
            plural: "endpointslices",
            namespaced: true,
            short_names: &[],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<discovery::EndpointSlice>,
            extra_fields: &[],
        },
        Builtin {
            group: "",
            version: "v1",
            kind: "Endpoints",
            plural: "endpoints",
            namespaced: true,
            short_names: &["ep"],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<core::Endpoints>,
            extra_fields: &[],
        },
        Builtin {
            group: "admissionregistration.k8s.io",
            version: "v1",
            kind: "ValidatingAdmissionPolicy",
            plural: "validatingadmissionpolicies",
            namespaced: false,
            short_names: &[],
            categories: &["api-extensions"],
            status: true,
            name_rule: Subdomain,
            status_on_create: Drop,
            normalize: roundtrip::<admission::ValidatingAdmissionPolicy>,
            extra_fields: &[],
        },
        Builtin {
            group: "admissionregistration.k8s.io",
            version: "v1",
            kind: "ValidatingAdmissionPolicyBinding",
            plural: "validatingadmissionpolicybindings",
            namespaced: false,
            short_names: &[],
            categories: &["api-extensions"],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<admission::ValidatingAdmissionPolicyBinding>,
            extra_fields: &[],
        },
        // Stored and served for controllers that read priorities (gang
        // schedulers' minResources); pods' priorityClassName is not
        // resolved against them.
        Builtin {
            group: "scheduling.k8s.io",
            version: "v1",
            kind: "PriorityClass",
            plural: "priorityclasses",
            namespaced: false,
            short_names: &["pc"],
            categories: &[],
            status: false,
            name_rule: Subdomain,
            status_on_create: Keep,
            normalize: roundtrip::<scheduling::PriorityClass>,
            extra_fields: &[],
        },
        Builtin {
            group: "apiextensions.k8s.io",
            version: "v1",
            kind: "CustomResourceDefinition",
            plural: "customresourcedefinitions",
            namespaced: false,
            short_names: &["crd", "crds"],
            categories: &["api-extensions"],
            status: true,
            name_rule: Subdomain,
            status_on_create: Drop,
            normalize: roundtrip::<apiext::CustomResourceDefinition>,
            extra_fields: &[],
        },
    ];
    kinds.extend([
        workload(
            "Deployment",
            "deployments",
            &["deploy"],
            roundtrip::<apps::Deployment>,
        ),
        workload(
            "DaemonSet",
            "daemonsets",
            &["ds"],
            roundtrip::<apps::DaemonSet>,
        ),
        workload(
            "StatefulSet",
            "statefulsets",
            &["sts"],
            roundtrip::<apps::StatefulSet>,
        ),
        workload(
            "ReplicaSet",
            "replicasets",
            &["rs"],
            roundtrip::<apps::ReplicaSet>,
        ),
        Builtin {
            group: "batch",
            version: "v1",
            kind: "Job",
            plural: "jobs",
            namespaced: true,
            short_names: &[],
            categories: &["all"],
            status: true,
            name_rule: Subdomain,
            status_on_create: Drop,
            normalize: roundtrip::<batch::Job>,
            extra_fields: &["status.successful"],
        },
        rbac_kind("Role", "roles", true, roundtrip::<rbac::Role>),
        rbac_kind(
            "RoleBinding",
            "rolebindings",
            true,
            roundtrip::<rbac::RoleBinding>,
        ),
        rbac_kind(
            "ClusterRole",
            "clusterroles",
            false,
            roundtrip::<rbac::ClusterRole>,
        ),
        rbac_kind(
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            roundtrip::<rbac::ClusterRoleBinding>,
        ),
    ]);
    kinds
}

pub fn builtin_types() -> Vec<ResourceType> {
    builtins()
        .into_iter()
        .map(|b| ResourceType {
            schemas: TypeSchemas {
                list_types: Arc::new(
                    ListTypes::builtin(
                        &if b.group.is_empty() {
                            b.version.to_string()
                        } else {
                            format!("{}/{}", b.group, b.version)
                        },
                        b.kind,
                    )
                    .unwrap_or_else(ListTypes::generic_builtin),
                ),
                by_version: BTreeMap::new(),
            },
            group: b.group.into(),
            versions: vec![b.version.into()],
            storage_version: b.version.into(),
            kind: b.kind.into(),
            plural: b.plural.into(),
            singular: b.kind.to_lowercase(),
            namespaced: b.namespaced,
            short_names: b.short_names.iter().map(|s| s.to_string()).collect(),
            categories: b.categories.iter().map(|s| s.to_string()).collect(),
            status_versions: if b.status {
                vec![b.version.into()]
            } else {
                Vec::new()
            },
            name_rule: b.name_rule,
            status_on_create: b.status_on_create,
            normalize: Some(b.normalize),
            extra_fields: b.extra_fields,
            custom: false,
            stored_as: (b.group == "events.k8s.io" && b.kind == "Event")
                .then_some(EVENTS_V1_STORED_AS),
        })
        .collect()
}

/// Orders Kubernetes versions by priority: GA before beta before alpha,
/// higher numbers first, non-conforming names last in alphabetical order.
pub fn version_priority(a: &str, b: &str) -> std::cmp::Ordering {
    fn key(v: &str) -> (u8, u64, u64, String) {
        let parse = || -> Option<(u8, u64, u64)> {
            let rest = v.strip_prefix('v')?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let major: u64 = digits.parse().ok()?;
            let tail = &rest[digits.len()..];
            if tail.is_empty() {
                return Some((3, major, 0));
            }
            for (prefix, rank) in [("beta", 2u8), ("alpha", 1u8)] {
                if let Some(n) = tail.strip_prefix(prefix) {
                    return Some((rank, major, n.parse().ok()?));
                }
            }
            None
        };
        match parse() {
            Some((rank, major, minor)) => (rank, major, minor, String::new()),
            None => (0, 0, 0, v.to_string()),
        }
    }
    let (ka, kb) = (key(a), key(b));
    // Higher rank/major/minor first; unknown names alphabetically ascending.
    kb.0.cmp(&ka.0)
        .then(kb.1.cmp(&ka.1))
        .then(kb.2.cmp(&ka.2))
        .then(ka.3.cmp(&kb.3))
}

/// All served kinds, looked up by group, version and plural.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    by_resource: BTreeMap<GroupResource, Arc<ResourceType>>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let mut registry = Self::default();
        for t in builtin_types() {
            registry.insert(t);
        }
        registry
    }

    pub fn insert(&mut self, t: ResourceType) -> Arc<ResourceType> {
        let t = Arc::new(t);
        self.by_resource.insert(t.group_resource(), t.clone());
        t
    }

    pub fn remove(&mut self, gr: &GroupResource) -> Option<Arc<ResourceType>> {
        self.by_resource.remove(gr)
    }

    pub fn get(&self, gr: &GroupResource) -> Option<&Arc<ResourceType>> {
        self.by_resource.get(gr)
    }

    /// The kind served at `group/version` under `plural`, if that version is served.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        let gr = GroupResource {
            group: group.to_string(),
            resource: plural.to_string(),
        };
        self.by_resource
            .get(&gr)
            .filter(|t| t.serves(version))
            .cloned()
    }

    pub fn all(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.by_resource.values()
    }

    /// Groups (other than core) with their served versions, highest priority first.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in self.by_resource.values().filter(|t| !t.group.is_empty()) {
            let versions = groups.entry(t.group.clone()).or_default();
            for v in &t.versions {
                if !versions.contains(v) {
                    versions.push(v.clone());
                }
            }
        }
        for versions in groups.values_mut() {
            versions.sort_by(|a, b| version_priority(a, b));
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_ga_then_beta_then_alpha() {
        let mut v = vec!["v1alpha1", "v2beta1", "v1", "foo", "v1beta2", "v2", "bar"];
        v.sort_by(|a, b| version_priority(a, b));
        assert_eq!(
            v,
            vec!["v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "bar", "foo"]
        );
    }

    #[test]
    fn builtins_are_registered_with_their_groups() {
        let r = Registry::with_builtins();
        assert!(r.lookup("", "v1", "pods").is_some());
        assert!(r.lookup("coordination.k8s.io", "v1", "leases").is_some());
        assert!(
            r.lookup("scheduling.k8s.io", "v1", "priorityclasses")
                .is_some()
        );
        assert!(r.lookup("", "v2", "pods").is_none());
        let groups = r.groups();
        assert_eq!(groups["events.k8s.io"], vec!["v1".to_string()]);
    }
}
