//! Server-side defaulting of built-in kinds: the fields kube-apiserver fills
//! in on every write, which controllers read and field selectors match on
//! (`spec.restartPolicy=Always` finds a pod that never named one).
//!
//! Only what the differential corpus compares and controllers rely on; the
//! ServiceAccount admission plugin's token volume is not added.

use serde_json::{Map, Value, json};

fn set_missing(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_owned(), value);
    }
}

fn object<'a>(value: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    value.get_mut(key).and_then(Value::as_object_mut)
}

/// Fills in the defaults of `kind` (in `group`) in place.
pub fn apply(group: &str, kind: &str, value: &mut Value) {
    match (group, kind) {
        ("", "Pod") => {
            if let Some(spec) = object(value, "spec") {
                pod_spec(spec);
                // Admission's part for Pods themselves (not templates): the
                // priority and the ServiceAccount, without its token volume.
                set_missing(spec, "priority", json!(0));
                set_missing(spec, "serviceAccountName", json!("default"));
                let account = spec.get("serviceAccountName").cloned().unwrap_or_default();
                set_missing(spec, "serviceAccount", account);
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
            if let Some(map) = value.as_object_mut() {
                let spec = map.entry("spec").or_insert_with(|| json!({}));
                if let Some(spec) = spec.as_object_mut() {
                    set_missing(spec, "finalizers", json!(["kubernetes"]));
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
                    json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
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

/// The Job strategy's selector generation and the batch/v1 defaults.
fn job(value: &mut Value) {
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
    // Unless the user asks to choose it (manualSelector), the server picks a
    // selector on the Job's uid and labels the template to match, once, when
    // the Job is created (it is immutable afterwards, so an update that
    // already carries it is left alone).
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
    set_missing(spec, "enableServiceLinks", json!(true));

    for key in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(key).and_then(Value::as_array_mut) {
            for container in containers.iter_mut().filter_map(Value::as_object_mut) {
                container_defaults(container);
            }
        }
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
    if let Some(ports) = container.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_missing(port, "protocol", json!("TCP"));
        }
    }
}

fn service_spec(spec: &mut Map<String, Value>) {
    set_missing(spec, "type", json!("ClusterIP"));
    set_missing(spec, "sessionAffinity", json!("None"));
    set_missing(spec, "ipFamilyPolicy", json!("SingleStack"));
    set_missing(spec, "ipFamilies", json!(["IPv4"]));
    set_missing(spec, "internalTrafficPolicy", json!("Cluster"));
    if spec.get("clusterIP").and_then(Value::as_str) == Some("None") {
        set_missing(spec, "clusterIPs", json!(["None"]));
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
