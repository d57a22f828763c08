//! How each list and map of a kind is merged.
//!
//! Server-side apply follows the structural schema markers
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`,
//! `x-kubernetes-map-type`); strategic merge patch follows the Go struct
//! tags of the built-in types (`patchStrategy`, `patchMergeKey`). Both are
//! described by one tree of [`SchemaNode`]s, built from a CRD's
//! `openAPIV3Schema` or from the table of built-in kinds below.

use std::collections::BTreeMap;

use serde_json::Value;

/// How server-side apply treats a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListType {
    /// The whole list is one value with one owner (the default for lists
    /// without a marker, in CRDs and built-ins alike).
    Atomic,
    /// A list of scalars, each element owned on its own.
    Set,
    /// A list of objects identified by the values of these key fields.
    Map { keys: Vec<String> },
}

/// How strategic merge patch treats a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SmpListStrategy {
    /// Objects merged by the value of this field (`patchMergeKey`).
    MergeByKey(String),
    /// Scalars merged as a set (`patchStrategy: merge` with no key).
    MergePrimitives,
}

/// One node of a kind's schema: the markers of the value at a path and the
/// nodes below it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SchemaNode {
    list_type: Option<ListType>,
    /// Values a list-map key takes when an element omits it (such as
    /// `protocol: TCP` on ports), so identity does not depend on defaulting.
    key_defaults: BTreeMap<String, Value>,
    atomic_map: bool,
    smp_list: Option<SmpListStrategy>,
    fields: BTreeMap<String, SchemaNode>,
    /// The node for every key of a free-form map (`additionalProperties`).
    any_field: Option<Box<SchemaNode>>,
    items: Option<Box<SchemaNode>>,
}

impl SchemaNode {
    /// The node of the named field, if the schema knows it.
    pub fn field(&self, name: &str) -> Option<&SchemaNode> {
        self.fields.get(name).or(self.any_field.as_deref())
    }

    /// The node of the elements of this list.
    pub fn items(&self) -> Option<&SchemaNode> {
        self.items.as_deref()
    }

    /// The apply list type; lists without a marker are atomic.
    pub fn list_type(&self) -> &ListType {
        const ATOMIC: &ListType = &ListType::Atomic;
        self.list_type.as_ref().unwrap_or(ATOMIC)
    }

    /// The default of a list-map key field, if it has one.
    pub fn key_default(&self, key: &str) -> Option<&Value> {
        self.key_defaults.get(key)
    }

    /// Whether this map is owned as a whole (`x-kubernetes-map-type: atomic`).
    pub fn is_atomic_map(&self) -> bool {
        self.atomic_map
    }

    /// The strategic-merge strategy of this list; `None` means "replace".
    pub fn smp_list(&self) -> Option<&SmpListStrategy> {
        self.smp_list.as_ref()
    }
}

/// The node below `node` for field `name`, if any.
pub(crate) fn child_node<'a>(node: Option<&'a SchemaNode>, name: &str) -> Option<&'a SchemaNode> {
    node.and_then(|n| n.field(name))
}

/// The node of the elements of the list at `node`, if any.
pub(crate) fn item_node(node: Option<&SchemaNode>) -> Option<&SchemaNode> {
    node.and_then(SchemaNode::items)
}

/// The list and map markers of one kind.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListTypes {
    root: SchemaNode,
    strategic_merge: bool,
    builtin: bool,
    /// A built-in kind's zero-valued Go struct, as JSON: what the real
    /// server compares a create against (see `crate::go_shape`).
    create_baseline: Option<std::sync::Arc<Value>>,
}

impl ListTypes {
    /// Markers for a kind nothing is known about beyond `ObjectMeta`.
    /// Strategic merge patch is not offered for it (as for CRDs).
    pub fn object_meta_only() -> Self {
        let mut types = ListTypes::default();
        types.add_object_meta();
        types
    }

    /// The schema root.
    pub fn root(&self) -> &SchemaNode {
        &self.root
    }

    /// Whether this describes a built-in kind (a Go struct on the real
    /// server, whose `spec` and `status` exist even when empty).
    pub fn is_builtin(&self) -> bool {
        self.builtin
    }

    /// The zero value a create of this built-in kind is compared against.
    pub fn create_baseline(&self) -> Option<&Value> {
        self.create_baseline.as_deref()
    }

    /// Whether the kind accepts `application/strategic-merge-patch+json`.
    /// The real server answers 415 for custom resources.
    pub fn supports_strategic_merge(&self) -> bool {
        self.strategic_merge
    }

    /// Declares the apply list type of the list at `path`. Paths are dotted
    /// field names; `[]` after a name steps into its elements and `*` stands
    /// for every key of a free-form map, e.g. `spec.containers[].ports`.
    pub fn with_list(mut self, path: &str, list_type: ListType) -> Self {
        self.set_list(path, list_type);
        self
    }

    /// Declares the strategic merge strategy of the list at `path`.
    pub fn with_smp(mut self, path: &str, strategy: SmpListStrategy) -> Self {
        self.node_mut(path).smp_list = Some(strategy);
        self.strategic_merge = true;
        self
    }

    /// Declares the map at `path` atomic for apply.
    pub fn with_atomic_map(mut self, path: &str) -> Self {
        self.node_mut(path).atomic_map = true;
        self
    }

    fn set_list(&mut self, path: &str, list_type: ListType) {
        self.node_mut(path).list_type = Some(list_type);
    }

    /// A list that is a map for apply (with `keys`) and merged by `smp_key`
    /// in strategic merge patches.
    fn keyed(&mut self, path: &str, keys: &[&str], smp_key: Option<&str>) {
        let keys = keys.iter().map(|k| (*k).to_string()).collect();
        let node = self.node_mut(path);
        node.list_type = Some(ListType::Map { keys });
        if let Some(key) = smp_key {
            node.smp_list = Some(SmpListStrategy::MergeByKey(key.to_string()));
        }
    }

    fn key_default(&mut self, path: &str, key: &str, value: &str) {
        self.node_mut(path)
            .key_defaults
            .insert(key.to_string(), Value::String(value.to_string()));
    }

    fn smp_key_only(&mut self, path: &str, smp_key: &str) {
        self.node_mut(path).smp_list = Some(SmpListStrategy::MergeByKey(smp_key.to_string()));
    }

    fn node_mut(&mut self, path: &str) -> &mut SchemaNode {
        let mut node = &mut self.root;
        for segment in path.split('.').filter(|s| !s.is_empty()) {
            let (name, into_items) = match segment.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (segment, false),
            };
            node = if name == "*" {
                node.any_field.get_or_insert_with(Box::default)
            } else {
                node.fields.entry(name.to_string()).or_default()
            };
            if into_items {
                node = node.items.get_or_insert_with(Box::default);
            }
        }
        node
    }

    fn add_object_meta(&mut self) {
        self.keyed("metadata.ownerReferences", &["uid"], Some("uid"));
        // OwnerReference is an atomic struct: each reference is owned whole.
        self.node_mut("metadata.ownerReferences[]").atomic_map = true;
        let finalizers = self.node_mut("metadata.finalizers");
        finalizers.list_type = Some(ListType::Set);
        finalizers.smp_list = Some(SmpListStrategy::MergePrimitives);
        self.set_list("metadata.managedFields", ListType::Atomic);
    }

    /// Markers for a built-in kind the table does not list: `ObjectMeta`
    /// lists only, every other list replaced, strategic merge allowed.
    pub fn generic_builtin() -> Self {
        let mut types = ListTypes::object_meta_only();
        types.strategic_merge = true;
        types.builtin = true;
        types
    }

    /// Markers for a custom resource from its version's `openAPIV3Schema`,
    /// plus the `ObjectMeta` lists every object has.
    pub fn from_crd_schema(open_api_v3_schema: &Value) -> Self {
        let mut types = ListTypes {
            root: node_from_openapi(open_api_v3_schema),
            strategic_merge: false,
            builtin: false,
            create_baseline: None,
        };
        types.add_object_meta();
        types
    }

    /// Markers for a built-in kind, or `None` when the table does not know
    /// it. `api_version` is `v1` or `group/version`.
    pub fn builtin(api_version: &str, kind: &str) -> Option<Self> {
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let mut t = ListTypes::generic_builtin();
        match (group, kind) {
            ("", "Pod") => {
                t.add_pod_spec("spec");
                t.add_pod_status();
            }
            ("", "PodTemplate") => t.add_pod_spec("template.spec"),
            ("", "ReplicationController") => {
                t.add_pod_spec("spec.template.spec");
                t.keyed("status.conditions", &["type"], Some("type"));
            }
            ("", "Node") => {
                t.set_list("spec.taints", ListType::Atomic);
                t.set_list("spec.podCIDRs", ListType::Set);
                t.node_mut("spec.podCIDRs").smp_list = Some(SmpListStrategy::MergePrimitives);
                t.keyed("status.conditions", &["type"], Some("type"));
                t.keyed("status.addresses", &["type"], Some("type"));
            }
            ("", "Service") => {
                t.node_mut("spec.selector").atomic_map = true;
                t.keyed("spec.ports", &["port", "protocol"], Some("port"));
                t.key_default("spec.ports", "protocol", "TCP");
                t.keyed("status.conditions", &["type"], Some("type"));
            }
            ("", "Namespace") => {
                t.keyed("status.conditions", &["type"], Some("type"));
            }
            ("", "ServiceAccount") => {
                t.smp_key_only("secrets", "name");
            }
            ("", "PersistentVolumeClaim") => {
                t.keyed("status.conditions", &["type"], Some("type"));
            }
            ("", "Event") => t.node_mut("involvedObject").atomic_map = true,
            ("policy", "PodDisruptionBudget") => {
                t.node_mut("spec.selector").atomic_map = true;
                t.keyed("status.conditions", &["type"], Some("type"));
            }
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
                t.keyed("status.conditions", &["type"], Some("type"));
            }
            (
                "admissionregistration.k8s.io",
                "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
            ) => {
                t.keyed("webhooks", &["name"], Some("name"));
            }
            ("discovery.k8s.io", "EndpointSlice") => {}
            ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
                t.set_list("spec.validationActions", ListType::Set);
            }
            ("events.k8s.io", "Event") => t.node_mut("regarding").atomic_map = true,
            ("", "ConfigMap" | "Secret" | "Endpoints" | "LimitRange")
            | ("", "ResourceQuota" | "PersistentVolume")
            | ("coordination.k8s.io", "Lease")
            | ("scheduling.k8s.io", "PriorityClass")
            | ("rbac.authorization.k8s.io", _)
            | ("apiextensions.k8s.io", "CustomResourceDefinition") => {}
            ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") => {
                // LabelSelector is an atomic struct.
                t.node_mut("spec.selector").atomic_map = true;
                t.add_pod_spec("spec.template.spec");
                t.keyed("status.conditions", &["type"], Some("type"));
            }
            ("batch", "Job") => {
                t.node_mut("spec.selector").atomic_map = true;
                t.add_pod_spec("spec.template.spec");
                // Job conditions are atomic for apply but merged by type in
                // strategic merge patches.
                t.smp_key_only("status.conditions", "type");
            }
            ("batch", "CronJob") => t.add_pod_spec("spec.jobTemplate.spec.template.spec"),
            _ => return None,
        }
        if let Some(message) = crate::go_shape::message_of(api_version, kind) {
            t.mark_atomic_structs(message);
            t.create_baseline = Some(std::sync::Arc::new(crate::go_shape::zero_value(message)));
        }
        Some(t)
    }

    fn add_pod_spec(&mut self, pod_spec: &str) {
        for containers in ["containers", "initContainers", "ephemeralContainers"] {
            let list = format!("{pod_spec}.{containers}");
            self.keyed(&list, &["name"], Some("name"));
            let ports = format!("{list}[].ports");
            self.keyed(
                &ports,
                &["containerPort", "protocol"],
                Some("containerPort"),
            );
            self.key_default(&ports, "protocol", "TCP");
            self.keyed(&format!("{list}[].env"), &["name"], Some("name"));
            self.keyed(
                &format!("{list}[].volumeMounts"),
                &["mountPath"],
                Some("mountPath"),
            );
            self.keyed(
                &format!("{list}[].volumeDevices"),
                &["devicePath"],
                Some("devicePath"),
            );
            self.keyed(&format!("{list}[].resources.claims"), &["name"], None);
        }
        for (list, key) in [
            ("volumes", "name"),
            ("imagePullSecrets", "name"),
            ("hostAliases", "ip"),
            ("resourceClaims", "name"),
            ("schedulingGates", "name"),
        ] {
            self.keyed(&format!("{pod_spec}.{list}"), &[key], Some(key));
        }
        self.keyed(
            &format!("{pod_spec}.topologySpreadConstraints"),
            &["topologyKey", "whenUnsatisfiable"],
            Some("topologyKey"),
        );
        // No merge key: strategic merge replaces them whole.
        self.set_list(&format!("{pod_spec}.tolerations"), ListType::Atomic);
        self.node_mut(&format!("{pod_spec}.nodeSelector"))
            .atomic_map = true;
    }

    /// Marks every struct Kubernetes declares atomic (`+structType=atomic`,
    /// `x-kubernetes-map-type: atomic` in its OpenAPI) wherever the kind's
    /// Go type holds one: a writer owns such a struct whole, as one field.
    fn mark_atomic_structs(&mut self, message: usize) {
        let mut paths = Vec::new();
        let mut stack = vec![message];
        atomic_struct_paths(message, "", &mut stack, &mut paths);
        for path in paths {
            self.node_mut(&path).atomic_map = true;
        }
    }

    fn add_pod_status(&mut self) {
        self.keyed("status.conditions", &["type"], Some("type"));
        self.keyed("status.podIPs", &["ip"], Some("ip"));
        self.smp_key_only("status.hostIPs", "ip");
        self.keyed("status.resourceClaimStatuses", &["name"], Some("name"));
    }
}

/// The atomic structs of the served built-in groups, by protobuf message
/// name (read from kube-apiserver v1.37.2's OpenAPI v3 documents).
const ATOMIC_STRUCTS: &[&str] = &[
    "api.admissionregistration.v1.MatchResources",
    "api.admissionregistration.v1.NamedRuleWithOperations",
    "api.admissionregistration.v1.ParamKind",
    "api.admissionregistration.v1.ParamRef",
    "api.admissionregistration.v1.Variable",
    "api.core.v1.ConfigMapKeySelector",
    "api.core.v1.EndpointAddress",
    "api.core.v1.EndpointPort",
    "api.core.v1.FileKeySelector",
    "api.core.v1.LocalObjectReference",
    "api.core.v1.NodeSelector",
    "api.core.v1.NodeSelectorTerm",
    "api.core.v1.ObjectFieldSelector",
    "api.core.v1.ObjectReference",
    "api.core.v1.ResourceFieldSelector",
    "api.core.v1.ScopeSelector",
    "api.core.v1.SecretKeySelector",
    "api.core.v1.SecretReference",
    "api.core.v1.TypedLocalObjectReference",
    "api.rbac.v1.RoleRef",
    "api.rbac.v1.Subject",
    "apimachinery.pkg.apis.meta.v1.LabelSelector",
    "apimachinery.pkg.apis.meta.v1.OwnerReference",
];

/// The paths (in `node_mut`'s syntax) below `prefix` where message
/// `message` holds an atomic struct. `stack` guards against messages that
/// contain themselves.
fn atomic_struct_paths(
    message: usize,
    prefix: &str,
    stack: &mut Vec<usize>,
    out: &mut Vec<String>,
) {
    use crate::protobuf::schema::{Label, Type, schema};
    let join = |a: &str, b: &str| {
        if a.is_empty() {
            b.to_string()
        } else {
            format!("{a}.{b}")
        }
    };
    let table = schema();
    for field in &table.message(message).fields {
        let Type::Message(inner) = field.ty else {
            continue;
        };
        if stack.contains(&inner) {
            continue;
        }
        let path = match field.label {
            Label::Inline => prefix.to_string(),
            Label::One => join(prefix, &field.json),
            Label::Many => format!("{}[]", join(prefix, &field.json)),
            Label::Map => join(&join(prefix, &field.json), "*"),
        };
        if field.label != Label::Inline
            && ATOMIC_STRUCTS.contains(&table.message(inner).name.as_str())
        {
            out.push(path);
            continue;
        }
        stack.push(inner);
        atomic_struct_paths(inner, &path, stack, out);
        stack.pop();
    }
}

fn node_from_openapi(schema: &Value) -> SchemaNode {
    let mut node = SchemaNode::default();
    let Some(schema) = schema.as_object() else {
        return node;
    };
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, property) in properties {
            node.fields
                .insert(name.clone(), node_from_openapi(property));
        }
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        node.any_field = Some(Box::new(node_from_openapi(additional)));
    }
    if let Some(items) = schema.get("items") {
        node.items = Some(Box::new(node_from_openapi(items)));
    }
    if schema.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") {
        node.atomic_map = true;
    }
    let is_array = schema.get("type").and_then(Value::as_str) == Some("array");
    node.list_type = match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => Some(ListType::Set),
        Some("map") => {
            let keys: Vec<String> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|keys| {
                    keys.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            // A map list without keys is not a valid structural schema; the
            // closest safe reading is to own it whole.
            if keys.is_empty() {
                Some(ListType::Atomic)
            } else {
                for key in &keys {
                    if let Some(default) = key_default_from(schema, key) {
                        node.key_defaults.insert(key.clone(), default);
                    }
                }
                Some(ListType::Map { keys })
            }
        }
        _ if is_array => Some(ListType::Atomic),
        _ => None,
    };
    node
}

fn key_default_from(list_schema: &serde_json::Map<String, Value>, key: &str) -> Option<Value> {
    list_schema
        .get("items")?
        .get("properties")?
        .get(key)?
        .get("default")
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node<'a>(types: &'a ListTypes, path: &[&str]) -> Option<&'a SchemaNode> {
        let mut node = Some(types.root());
        for segment in path {
            node = if *segment == "[]" {
                item_node(node)
            } else {
                child_node(node, segment)
            };
        }
        node
    }

    #[test]
    fn pod_containers_are_a_map_by_name_and_ports_by_port_and_protocol() {
        let pod = ListTypes::builtin("v1", "Pod").unwrap();
        let containers = node(&pod, &["spec", "containers"]).unwrap();
        assert_eq!(
            containers.list_type(),
            &ListType::Map {
                keys: vec!["name".into()]
            }
        );
        assert_eq!(
            containers.smp_list(),
            Some(&SmpListStrategy::MergeByKey("name".into()))
        );
        let ports = node(&pod, &["spec", "initContainers", "[]", "ports"]).unwrap();
        assert_eq!(
            ports.list_type(),
            &ListType::Map {
                keys: vec!["containerPort".into(), "protocol".into()]
            }
        );
        assert_eq!(ports.key_default("protocol"), Some(&json!("TCP")));
        assert_eq!(
            ports.smp_list(),
            Some(&SmpListStrategy::MergeByKey("containerPort".into()))
        );
        let tolerations = node(&pod, &["spec", "tolerations"]).unwrap();
        assert_eq!(tolerations.list_type(), &ListType::Atomic);
        assert_eq!(tolerations.smp_list(), None);
        assert!(pod.supports_strategic_merge());
    }

    #[test]
    fn every_kind_gets_owner_references_by_uid_and_finalizers_as_a_set() {
        for types in [
            ListTypes::builtin("coordination.k8s.io/v1", "Lease").unwrap(),
            ListTypes::from_crd_schema(&json!({"type": "object"})),
        ] {
            let owners = node(&types, &["metadata", "ownerReferences"]).unwrap();
            assert_eq!(
                owners.list_type(),
                &ListType::Map {
                    keys: vec!["uid".into()]
                }
            );
            let finalizers = node(&types, &["metadata", "finalizers"]).unwrap();
            assert_eq!(finalizers.list_type(), &ListType::Set);
            assert_eq!(
                finalizers.smp_list(),
                Some(&SmpListStrategy::MergePrimitives)
            );
        }
    }

    #[test]
    fn deployment_pod_template_uses_the_pod_spec_table() {
        let deploy = ListTypes::builtin("apps/v1", "Deployment").unwrap();
        assert!(
            node(&deploy, &["spec", "selector"])
                .unwrap()
                .is_atomic_map()
        );
        assert!(
            node(&deploy, &["metadata", "ownerReferences", "[]"])
                .unwrap()
                .is_atomic_map()
        );
        let env = node(
            &deploy,
            &["spec", "template", "spec", "containers", "[]", "env"],
        )
        .unwrap();
        assert_eq!(
            env.list_type(),
            &ListType::Map {
                keys: vec!["name".into()]
            }
        );
        assert!(ListTypes::builtin("example.com/v1", "Widget").is_none());
    }

    #[test]
    fn crd_schema_markers_become_list_types_and_unmarked_lists_are_atomic() {
        let schema = json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "properties": {
                        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "args": {"type": "array", "items": {"type": "string"}},
                        "slots": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["rack", "index"],
                            "items": {"type": "object", "properties": {
                                "rack": {"type": "string"},
                                "index": {"type": "integer", "default": 0}
                            }}
                        },
                        "selector": {"type": "object", "x-kubernetes-map-type": "atomic"},
                        "byName": {"type": "object", "additionalProperties": {
                            "type": "array", "x-kubernetes-list-type": "set"
                        }}
                    }
                }
            }
        });
        let types = ListTypes::from_crd_schema(&schema);
        assert_eq!(
            node(&types, &["spec", "tags"]).unwrap().list_type(),
            &ListType::Set
        );
        assert_eq!(
            node(&types, &["spec", "args"]).unwrap().list_type(),
            &ListType::Atomic
        );
        let slots = node(&types, &["spec", "slots"]).unwrap();
        assert_eq!(
            slots.list_type(),
            &ListType::Map {
                keys: vec!["rack".into(), "index".into()]
            }
        );
        assert_eq!(slots.key_default("index"), Some(&json!(0)));
        assert!(node(&types, &["spec", "selector"]).unwrap().is_atomic_map());
        assert_eq!(
            node(&types, &["spec", "byName", "anything"])
                .unwrap()
                .list_type(),
            &ListType::Set
        );
        assert!(!types.supports_strategic_merge());
    }
}
