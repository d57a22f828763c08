//! Server-side defaulting of built-in kinds: the fields kube-apiserver fills
//! in on every write, which controllers read and field selectors match on
//! (`spec.restartPolicy=Always` finds a pod that never named one).
//!
//! Two stages, as on the real server. [`apply`] is the defaulting done when
//! a body is decoded, before the field manager records the write, so the
//! writer owns what it fills in. [`admit`] is what admission plugins and
//! the create strategy add afterwards (a Pod's priority and ServiceAccount,
//! a Service's IP families, a Pod's QoS class), which nobody owns.
//! Each default is checked against kube-apiserver v1.37.2 by the
//! differential scenarios in `differential/defaults.yaml`.
//!
//! Not done: the ServiceAccount admission plugin's token volume, and the
//! `node.kubernetes.io/not-ready` taint a new Node gets (kube-sim's nodes
//! are ready from the start; docs/kube-sim.md).

use serde_json::{Map, Value, json};

fn set_missing(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_owned(), value);
    }
}

fn object<'a>(value: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    value.get_mut(key).and_then(Value::as_object_mut)
}

/// The objects of the array at `key` of `map`, if there is one.
fn items_mut<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    map.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// Fills in the decode-time defaults of `kind` (in `group`) in place.
pub fn apply(group: &str, kind: &str, value: &mut Value) {
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = object(value, "spec") {
                pod_spec(spec);
                pod_only(spec);
            }
        }
        ("", "Service") => {
            if let Some(spec) = object(value, "spec") {
                service_spec(spec);
            }
        }
        ("", "Secret") => {
            if let Some(map) = value.as_object_mut() {
                set_missing(map, "type", json!("Opaque"));
            }
        }
        ("", "Namespace") => {
            // Every namespace carries its own name as a label, so selectors
            // (NetworkPolicy's, admission webhooks') can name it.
            let name = value
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string);
            if let (Some(name), Some(meta)) = (name, object(value, "metadata")) {
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
        }
        ("scheduling.k8s.io", "PriorityClass") => {
            if let Some(map) = value.as_object_mut() {
                set_missing(map, "preemptionPolicy", json!("PreemptLowerPriority"));
            }
        }
        (
            "admissionregistration.k8s.io",
            kind @ ("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration"),
        ) => {
            let mutating = kind.starts_with("Mutating");
            if let Some(map) = value.as_object_mut() {
                for hook in items_mut(map, "webhooks") {
                    webhook(hook, mutating);
                }
            }
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy") => {
            if let Some(spec) = object(value, "spec") {
                set_missing(spec, "failurePolicy", json!("Fail"));
                if let Some(constraints) = spec
                    .get_mut("matchConstraints")
                    .and_then(Value::as_object_mut)
                {
                    match_resources(constraints);
                }
            }
        }
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding") => {
            if let Some(resources) = object(value, "spec")
                .and_then(|spec| spec.get_mut("matchResources"))
                .and_then(Value::as_object_mut)
            {
                match_resources(resources);
            }
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => custom_resource_definition(value),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            if let Some(map) = value.as_object_mut() {
                for subject in items_mut(map, "subjects") {
                    let group = match subject.get("kind").and_then(Value::as_str) {
                        Some("User" | "Group") => "rbac.authorization.k8s.io",
                        _ => continue,
                    };
                    if subject
                        .get("apiGroup")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        subject.insert("apiGroup".into(), json!(group));
                    }
                }
            }
        }
        ("apps", "Deployment") => {
            if let Some(spec) = object(value, "spec") {
                set_missing(spec, "replicas", json!(1));
                set_missing(spec, "revisionHistoryLimit", json!(10));
                set_missing(spec, "progressDeadlineSeconds", json!(600));
                set_missing(
                    spec,
                    "strategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
                );
                template_spec(spec);
            }
        }
        ("apps", "StatefulSet") => {
            if let Some(spec) = object(value, "spec") {
                set_missing(spec, "replicas", json!(1));
                set_missing(spec, "revisionHistoryLimit", json!(10));
                set_missing(spec, "podManagementPolicy", json!("OrderedReady"));
                set_missing(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": 1}}),
                );
                set_missing(
                    spec,
                    "persistentVolumeClaimRetentionPolicy",
                    json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
                );
                template_spec(spec);
            }
        }
        ("apps", "DaemonSet") => {
            if let Some(spec) = object(value, "spec") {
                set_missing(spec, "revisionHistoryLimit", json!(10));
                set_missing(
                    spec,
                    "updateStrategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
                );
                template_spec(spec);
            }
            // The apps/v1 form of the template generation, which kubectl's
            // rollout history reads; a new DaemonSet is at generation 1.
            let first_generation = value
                .pointer("/metadata/generation")
                .is_none_or(|g| g == &json!(1));
            if first_generation && let Some(meta) = object(value, "metadata") {
                let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
                if let Some(annotations) = annotations.as_object_mut() {
                    set_missing(
                        annotations,
                        "deprecated.daemonset.template.generation",
                        json!("1"),
                    );
                }
            }
        }
        ("apps", "ReplicaSet") => {
            if let Some(spec) = object(value, "spec") {
                set_missing(spec, "replicas", json!(1));
                template_spec(spec);
            }
        }
        ("batch", "Job") => job(value),
        _ => {}
    }
}

/// What admission and the create strategy add to a new object after the
/// field manager has recorded the write: nobody owns these fields.
pub fn admit(group: &str, kind: &str, value: &mut Value) {
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = object(value, "spec") {
                // Priority admission, and the ServiceAccount plugin
                // (without its token volume).
                set_missing(spec, "priority", json!(0));
                set_missing(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
                set_missing(spec, "serviceAccountName", json!("default"));
                let account = spec.get("serviceAccountName").cloned().unwrap_or_default();
                set_missing(spec, "serviceAccount", account);
                default_toleration_seconds(spec);
            }
            let qos = value.get("spec").map(qos_class);
            if let (Some(qos), Some(map)) = (qos, value.as_object_mut()) {
                let status = map.entry("status").or_insert_with(|| json!({}));
                if let Some(status) = status.as_object_mut() {
                    set_missing(status, "qosClass", json!(qos));
                }
            }
        }
        ("batch", "Job") => job_selector(value),
        ("", "Namespace") => {
            // The namespace strategy's finalizer, which namespace deletion
            // waits on.
            if let Some(map) = value.as_object_mut() {
                let spec = map.entry("spec").or_insert_with(|| json!({}));
                if let Some(spec) = spec.as_object_mut() {
                    set_missing(spec, "finalizers", json!(["kubernetes"]));
                }
            }
        }
        ("", "Service") => {
            if let Some(spec) = object(value, "spec") {
                // The IP families the allocator chose (single-stack IPv4).
                if spec.get("type").and_then(Value::as_str) != Some("ExternalName") {
                    set_missing(spec, "ipFamilyPolicy", json!("SingleStack"));
                    set_missing(spec, "ipFamilies", json!(["IPv4"]));
                }
                if spec.get("clusterIP").and_then(Value::as_str) == Some("None") {
                    set_missing(spec, "clusterIPs", json!(["None"]));
                }
            }
        }
        _ => {}
    }
}

/// The DefaultTolerationSeconds admission plugin: five minutes on a node
/// that is not ready or unreachable before eviction, unless the pod says.
fn default_toleration_seconds(spec: &mut Map<String, Value>) {
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    let Some(list) = tolerations.as_array_mut() else {
        return;
    };
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let covered = list.iter().any(|t| {
            let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
            let exists_all = t.get("operator").and_then(Value::as_str) == Some("Exists")
                && t.get("key")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty);
            (t.get("key").and_then(Value::as_str) == Some(key) || exists_all)
                && (effect.is_empty() || effect == "NoExecute")
        });
        if !covered {
            list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
}

/// The QoS class the pod strategy records: Guaranteed when every container
/// limits CPU and memory with equal requests, BestEffort when none asks
/// for anything, else Burstable.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|key| spec.get(*key).and_then(Value::as_array))
        .flatten()
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for container in &containers {
        let resources = container.get("resources");
        let requests = resources
            .and_then(|r| r.get("requests"))
            .and_then(Value::as_object);
        let limits = resources
            .and_then(|r| r.get("limits"))
            .and_then(Value::as_object);
        let relevant = |map: Option<&Map<String, Value>>| {
            map.map(|m| m.keys().filter(|k| *k == "cpu" || *k == "memory").count())
                .unwrap_or(0)
        };
        if relevant(requests) + relevant(limits) > 0 {
            any = true;
        }
        for resource in ["cpu", "memory"] {
            let limit = limits.and_then(|l| l.get(resource));
            let request = requests.and_then(|r| r.get(resource)).or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// admissionregistration/v1 webhook defaults: failing closed, equivalent
/// versions, every namespace and object, ten seconds, port 443.
fn webhook(hook: &mut Map<String, Value>, mutating: bool) {
    set_missing(hook, "failurePolicy", json!("Fail"));
    set_missing(hook, "matchPolicy", json!("Equivalent"));
    set_missing(hook, "namespaceSelector", json!({}));
    set_missing(hook, "objectSelector", json!({}));
    set_missing(hook, "timeoutSeconds", json!(10));
    if mutating {
        set_missing(hook, "reinvocationPolicy", json!("Never"));
    }
    for rule in items_mut(hook, "rules") {
        set_missing(rule, "scope", json!("*"));
    }
    if let Some(service) = hook
        .get_mut("clientConfig")
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
    {
        set_missing(service, "port", json!(443));
    }
}

/// admissionregistration's MatchResources defaults.
fn match_resources(resources: &mut Map<String, Value>) {
    set_missing(resources, "matchPolicy", json!("Equivalent"));
    set_missing(resources, "namespaceSelector", json!({}));
    set_missing(resources, "objectSelector", json!({}));
    for key in ["resourceRules", "excludeResourceRules"] {
        for rule in items_mut(resources, key) {
            set_missing(rule, "scope", json!("*"));
        }
    }
}

/// apiextensions/v1: no conversion webhook, and the names a definition
/// leaves out derived from its kind.
fn custom_resource_definition(value: &mut Value) {
    let Some(spec) = object(value, "spec") else {
        return;
    };
    set_missing(spec, "conversion", json!({"strategy": "None"}));
    for version in items_mut(spec, "versions") {
        if let Some(schema) = version
            .get_mut("schema")
            .and_then(|s| s.get_mut("openAPIV3Schema"))
        {
            whole_bounds(schema);
        }
    }
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if !kind.is_empty() {
            set_missing(names, "singular", json!(kind.to_lowercase()));
            set_missing(names, "listKind", json!(format!("{kind}List")));
        }
    }
}

/// Go writes a float64 with a whole value without a fraction (`10`, not
/// `10.0`); the typed round trip made the schema's bounds floats.
fn whole_bounds(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                let bound = matches!(key.as_str(), "maximum" | "minimum" | "multipleOf");
                match value.as_f64() {
                    Some(number)
                        if bound
                            && value.is_f64()
                            && number.fract() == 0.0
                            && number.abs() < 9.0e15 =>
                    {
                        *value = json!(number as i64);
                    }
                    _ => whole_bounds(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(whole_bounds),
        _ => {}
    }
}

/// The Job create strategy's selector generation: unless the user asks to
/// choose it (manualSelector), the server picks a selector on the Job's
/// uid and labels the template to match, once, at create (the selector is
/// immutable afterwards). A Job without labels of its own takes the
/// template's.
fn job_selector(value: &mut Value) {
    let uid = value
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(spec) = object(value, "spec") else {
        return;
    };
    let manual = spec.get("manualSelector").and_then(Value::as_bool) == Some(true);
    if !manual && spec.get("selector").is_none_or(Value::is_null) && !uid.is_empty() {
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        let template = spec.entry("template").or_insert_with(|| json!({}));
        if let Some(template) = template.as_object_mut() {
            let meta = template.entry("metadata").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                let labels = meta.entry("labels").or_insert_with(|| json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    for key in ["controller-uid", "batch.kubernetes.io/controller-uid"] {
                        labels.insert(key.into(), json!(uid));
                    }
                    for key in ["job-name", "batch.kubernetes.io/job-name"] {
                        labels.insert(key.into(), json!(name));
                    }
                }
            }
        }
    }
    let template_labels = value.pointer("/spec/template/metadata/labels").cloned();
    if let (Some(labels), Some(meta)) = (template_labels, object(value, "metadata"))
        && meta
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(Map::is_empty)
    {
        meta.insert("labels".into(), labels);
    }
}

/// The batch/v1 defaults of a Job.
fn job(value: &mut Value) {
    let Some(spec) = object(value, "spec") else {
        return;
    };
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        spec.insert("completions".into(), json!(1));
    }
    set_missing(spec, "parallelism", json!(1));
    set_missing(spec, "backoffLimit", json!(6));
    set_missing(spec, "completionMode", json!("NonIndexed"));
    set_missing(spec, "suspend", json!(false));
    set_missing(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    set_missing(spec, "manualSelector", json!(false));
    template_spec(spec);
}

fn template_spec(spec: &mut Map<String, Value>) {
    if let Some(pod) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod_spec(pod);
    }
}

fn pod_spec(spec: &mut Map<String, Value>) {
    set_missing(spec, "restartPolicy", json!("Always"));
    set_missing(spec, "dnsPolicy", json!("ClusterFirst"));
    set_missing(spec, "schedulerName", json!("default-scheduler"));
    set_missing(spec, "terminationGracePeriodSeconds", json!(30));
    set_missing(spec, "securityContext", json!({}));
    for key in ["containers", "initContainers"] {
        for container in items_mut(spec, key) {
            container_defaults(container);
        }
    }
    for volume in items_mut(spec, "volumes") {
        volume_defaults(volume);
    }
}

/// Defaults the real server gives a Pod but not a pod template
/// (`SetDefaults_Pod`, not `SetDefaults_PodSpec`).
fn pod_only(spec: &mut Map<String, Value>) {
    set_missing(spec, "enableServiceLinks", json!(true));
    let host_network = spec.get("hostNetwork").and_then(Value::as_bool) == Some(true);
    for key in ["containers", "initContainers"] {
        for container in items_mut(spec, key) {
            // Requests not given are the limits.
            if let Some(resources) = container
                .get_mut("resources")
                .and_then(Value::as_object_mut)
                && let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned()
            {
                let requests = resources.entry("requests").or_insert_with(|| json!({}));
                if let Some(requests) = requests.as_object_mut() {
                    for (name, quantity) in limits {
                        requests.entry(name).or_insert(quantity);
                    }
                }
            }
            if host_network {
                for port in items_mut(container, "ports") {
                    if port
                        .get("hostPort")
                        .and_then(Value::as_i64)
                        .is_none_or(|p| p == 0)
                        && let Some(number) = port.get("containerPort").cloned()
                    {
                        port.insert("hostPort".into(), number);
                    }
                }
            }
        }
    }
}

/// Probe timing, and the HTTP defaults of a probe or lifecycle handler.
fn probe_defaults(probe: &mut Map<String, Value>) {
    set_missing(probe, "timeoutSeconds", json!(1));
    set_missing(probe, "periodSeconds", json!(10));
    set_missing(probe, "successThreshold", json!(1));
    set_missing(probe, "failureThreshold", json!(3));
    handler_defaults(probe);
}

fn handler_defaults(handler: &mut Map<String, Value>) {
    if let Some(get) = handler.get_mut("httpGet").and_then(Value::as_object_mut) {
        set_missing(get, "path", json!("/"));
        set_missing(get, "scheme", json!("HTTP"));
    }
}

/// A downward-API field reference names `v1` unless it says otherwise.
fn field_ref_defaults(holder: &mut Map<String, Value>) {
    if let Some(field_ref) = holder.get_mut("fieldRef").and_then(Value::as_object_mut) {
        set_missing(field_ref, "apiVersion", json!("v1"));
    }
}

/// The file mode of projected files (0644) and the other volume defaults.
fn volume_defaults(volume: &mut Map<String, Value>) {
    for source in ["configMap", "secret", "downwardAPI", "projected"] {
        if let Some(source) = volume.get_mut(source).and_then(Value::as_object_mut) {
            set_missing(source, "defaultMode", json!(420));
            for item in items_mut(source, "items") {
                field_ref_defaults(item);
            }
            for projection in items_mut(source, "sources") {
                if let Some(down) = projection
                    .get_mut("downwardAPI")
                    .and_then(Value::as_object_mut)
                {
                    for item in items_mut(down, "items") {
                        field_ref_defaults(item);
                    }
                }
                if let Some(token) = projection
                    .get_mut("serviceAccountToken")
                    .and_then(Value::as_object_mut)
                {
                    set_missing(token, "expirationSeconds", json!(3600));
                }
            }
        }
    }
    if let Some(host_path) = volume.get_mut("hostPath").and_then(Value::as_object_mut) {
        set_missing(host_path, "type", json!(""));
    }
}

/// `Always` for an image without a tag or tagged `latest`, else
/// `IfNotPresent` (a digest counts as a tag).
fn pull_policy(image: &str) -> &'static str {
    if image.contains('@') {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) if tag != "latest" => "IfNotPresent",
        _ => "Always",
    }
}

fn container_defaults(container: &mut Map<String, Value>) {
    let image = container
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    set_missing(container, "imagePullPolicy", json!(pull_policy(&image)));
    set_missing(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    set_missing(container, "terminationMessagePolicy", json!("File"));
    set_missing(container, "resources", json!({}));
    for port in items_mut(container, "ports") {
        set_missing(port, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = container.get_mut(probe).and_then(Value::as_object_mut) {
            probe_defaults(probe);
        }
    }
    if let Some(lifecycle) = container
        .get_mut("lifecycle")
        .and_then(Value::as_object_mut)
    {
        for hook in ["postStart", "preStop"] {
            if let Some(hook) = lifecycle.get_mut(hook).and_then(Value::as_object_mut) {
                handler_defaults(hook);
            }
        }
    }
    for env in items_mut(container, "env") {
        if let Some(from) = env.get_mut("valueFrom").and_then(Value::as_object_mut) {
            field_ref_defaults(from);
        }
    }
}

fn service_spec(spec: &mut Map<String, Value>) {
    set_missing(spec, "type", json!("ClusterIP"));
    set_missing(spec, "sessionAffinity", json!("None"));
    let kind = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if kind != "ExternalName" {
        set_missing(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if kind == "NodePort" || kind == "LoadBalancer" {
        set_missing(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if kind == "LoadBalancer" {
        set_missing(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if spec.get("sessionAffinity").and_then(Value::as_str) == Some("ClientIP") {
        set_missing(
            spec,
            "sessionAffinityConfig",
            json!({"clientIP": {"timeoutSeconds": 10800}}),
        );
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_missing(port, "protocol", json!("TCP"));
            // A Go client's `ServicePort{Port: p}` sends targetPort 0;
            // kube-apiserver defaults 0 and "" like a missing one.
            let unset = match port.get("targetPort") {
                None | Some(Value::Null) => true,
                Some(Value::Number(n)) => n.as_i64() == Some(0),
                Some(Value::String(s)) => s.is_empty(),
                Some(_) => false,
            };
            if let (true, Some(number)) = (unset, port.get("port").cloned()) {
                port.insert("targetPort".into(), number);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_job_gets_a_selector_on_its_uid_and_matching_template_labels() {
        let mut job = json!({
            "metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "perl"}], "restartPolicy": "Never"}}},
        });
        apply("batch", "Job", &mut job);
        admit("batch", "Job", &mut job);
        assert_eq!(
            job["spec"]["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"],
            json!({
                "controller-uid": "u-1", "batch.kubernetes.io/controller-uid": "u-1",
                "job-name": "pi", "batch.kubernetes.io/job-name": "pi",
            })
        );
        assert_eq!(job["spec"]["completions"], 1);
        assert_eq!(job["spec"]["parallelism"], 1);
        assert_eq!(job["spec"]["backoffLimit"], 6);
        // kube-apiserver v1.37.2 (real lane) writes it out too.
        assert_eq!(job["spec"]["manualSelector"], false);
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    }

    #[test]
    fn a_job_with_parallelism_only_gets_no_completions_and_a_manual_selector_is_kept() {
        let mut job = json!({
            "metadata": {"name": "w", "uid": "u-2"},
            "spec": {"parallelism": 3, "manualSelector": true, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}}}},
        });
        apply("batch", "Job", &mut job);
        admit("batch", "Job", &mut job);
        assert!(job["spec"].get("completions").is_none());
        assert_eq!(job["spec"]["selector"], json!({"matchLabels": {"a": "b"}}));
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"],
            json!({"a": "b"})
        );
    }

    #[test]
    fn a_bare_pod_gets_the_real_servers_defaults() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "busybox"}, {"name": "d", "image": "nginx:1.27"}]}});
        apply("", "Pod", &mut pod);
        assert_eq!(pod["spec"]["restartPolicy"], "Always");
        assert_eq!(pod["spec"]["schedulerName"], "default-scheduler");
        assert_eq!(pod["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            pod["spec"]["containers"][1]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(
            pod["spec"]["containers"][0]["terminationMessagePath"],
            "/dev/termination-log"
        );
    }

    #[test]
    fn written_values_are_kept_and_service_ports_get_protocol_and_target_port() {
        let mut service = json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "targetPort": "http", "protocol": "UDP"}]}});
        apply("", "Service", &mut service);
        assert_eq!(service["spec"]["type"], "NodePort");
        assert_eq!(
            service["spec"]["ports"][0],
            json!({"port": 80, "protocol": "TCP", "targetPort": 80})
        );
        assert_eq!(service["spec"]["ports"][1]["protocol"], "UDP");
        assert_eq!(service["spec"]["ports"][1]["targetPort"], "http");
    }

    #[test]
    fn a_target_port_of_zero_or_empty_becomes_the_port_as_go_clients_rely_on() {
        let mut service = json!({"spec": {"ports": [{"port": 80, "targetPort": 0}, {"port": 81, "targetPort": ""}]}});
        if let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) {
            service_spec(spec);
        }
        assert_eq!(service["spec"]["ports"][0]["targetPort"], 80);
        assert_eq!(service["spec"]["ports"][1]["targetPort"], 81);
    }
}
