//! Conversion of `kubeflow.org/v1alpha1` TFJob manifests (tf-operator's
//! first API) to equivalent `kubeflow.org/v1` ones. Pure: JSON in, JSON
//! out.
//!
//! | v1alpha1 | v1 |
//! |---|---|
//! | `replicaSpecs[]` with `tfReplicaType` `MASTER`/`PS`/`WORKER` (default `MASTER`) | `tfReplicaSpecs.{Master,PS,Worker}` |
//! | `replicas` (default 1), `template` | the same |
//! | `tfPort` other than 2222 | port `tfjob-port` on the `tensorflow` container |
//! | the template's `restartPolicy` | the replica's `restartPolicy` (v1 overrides the template's) |
//! | `cleanupPodPolicy` | `runPolicy.cleanPodPolicy` (v1alpha1's empty default `All` is written out) |
//! | `schedulerName` | `schedulerName` of every template that sets none |
//! | `terminationPolicy.chief` `MASTER`/0, or `WORKER`/0 without a MASTER | implied by v1's chief rule |
//!
//! Everything else has no v1 meaning and is refused naming its path.

use serde_json::{Map, Value, json};

use super::{CONTAINER_NAME, DEFAULT_PORT, PORT_NAME};

/// A manifest that cannot be converted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConvertError {
    /// JSON path of the offending field, e.g. `spec.replicaSpecs[1].tfPort`.
    pub path: String,
    pub message: String,
}

fn error(path: impl Into<String>, message: impl Into<String>) -> ConvertError {
    ConvertError {
        path: path.into(),
        message: message.into(),
    }
}

/// Converts every document of a YAML stream: v1alpha1 TFJobs become v1,
/// other documents pass through unchanged. Errors name the document.
pub fn convert_yaml(input: &str) -> Result<String, ConvertError> {
    let documents: Vec<Value> = serde_saphyr::from_multiple(input)
        .map_err(|e| error("(input)", format!("not YAML: {e}")))?;
    let mut out = String::new();
    for (index, document) in documents.into_iter().enumerate() {
        if document.is_null() {
            continue;
        }
        let converted = convert(document).map_err(|e| ConvertError {
            path: format!("document {}: {}", index + 1, e.path),
            message: e.message,
        })?;
        let yaml = serde_saphyr::to_string(&converted)
            .map_err(|e| error("(output)", format!("cannot write YAML: {e}")))?;
        out.push_str("---\n");
        out.push_str(&yaml);
        if !yaml.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Converts one document (unchanged unless it is a v1alpha1 TFJob).
pub fn convert(document: Value) -> Result<Value, ConvertError> {
    let is_v1alpha1_tfjob = document.get("apiVersion").and_then(Value::as_str)
        == Some("kubeflow.org/v1alpha1")
        && document.get("kind").and_then(Value::as_str) == Some("TFJob");
    if !is_v1alpha1_tfjob {
        return Ok(document);
    }
    let Value::Object(object) = document else {
        return Ok(document);
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("kubeflow.org/v1"));
    out.insert("kind".into(), json!("TFJob"));
    for (key, value) in object {
        match key.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                out.insert(key, metadata(value));
            }
            "spec" => {
                out.insert(key, spec(value)?);
            }
            other => return Err(error(other, "has no v1 meaning; remove it")),
        }
    }
    Ok(Value::Object(out))
}

/// Keeps what a user writes; drops what the server set.
fn metadata(value: Value) -> Value {
    let Value::Object(mut meta) = value else {
        return value;
    };
    for server_set in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
    ] {
        meta.remove(server_set);
    }
    Value::Object(meta)
}

fn spec(value: Value) -> Result<Value, ConvertError> {
    let Value::Object(spec) = value else {
        return Err(error("spec", "must be an object"));
    };
    let mut replicas: Map<String, Value> = Map::new();
    let mut clean_pod_policy = "All".to_string();
    let mut scheduler_name: Option<String> = None;
    let mut termination: Option<(String, i64, String)> = None;
    for (key, value) in spec {
        match key.as_str() {
            "replicaSpecs" => {
                let Value::Array(list) = value else {
                    return Err(error("spec.replicaSpecs", "must be a list"));
                };
                for (index, item) in list.into_iter().enumerate() {
                    let path = format!("spec.replicaSpecs[{index}]");
                    let (key, spec) = replica(item, &path)?;
                    if replicas.contains_key(&key) {
                        return Err(error(
                            format!("{path}.tfReplicaType"),
                            format!("{key} appears twice; v1 has one spec per replica type"),
                        ));
                    }
                    replicas.insert(key, spec);
                }
            }
            "cleanupPodPolicy" => match value.as_str() {
                Some("") => {}
                Some(policy @ ("All" | "Running" | "None")) => clean_pod_policy = policy.into(),
                _ => {
                    return Err(error(
                        "spec.cleanupPodPolicy",
                        format!("{value} is none of All, Running, None"),
                    ));
                }
            },
            "schedulerName" => {
                scheduler_name = value.as_str().filter(|s| !s.is_empty()).map(str::to_string);
            }
            "terminationPolicy" => {
                let chief = value.get("chief");
                let name = chief
                    .and_then(|c| c.get("replicaName"))
                    .and_then(Value::as_str)
                    .unwrap_or("MASTER")
                    .to_string();
                let index = chief
                    .and_then(|c| c.get("replicaIndex"))
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                termination = Some((name, index, "spec.terminationPolicy.chief".into()));
            }
            "RuntimeId" | "runtimeId" => {
                return Err(error(
                    format!("spec.{key}"),
                    "has no v1 meaning (v1 names children {job}-{type}-{index}); remove it",
                ));
            }
            "tfImage" => {
                return Err(error(
                    "spec.tfImage",
                    "has no v1 meaning (v1 has no built-in parameter server); give the PS replica a template with that image and remove tfImage",
                ));
            }
            other => {
                return Err(error(
                    format!("spec.{other}"),
                    "has no v1 meaning; remove it",
                ));
            }
        }
    }
    if replicas.is_empty() {
        return Err(error("spec.replicaSpecs", "is required"));
    }
    // v1's chief is the Master (or Chief) if there is one, else worker 0.
    let (chief, chief_index, chief_path) =
        termination.unwrap_or(("MASTER".into(), 0, "spec.terminationPolicy.chief".into()));
    let implied = match (chief.as_str(), chief_index) {
        ("MASTER", 0) => replicas.contains_key("Master"),
        ("WORKER", 0) => !replicas.contains_key("Master") && replicas.contains_key("Worker"),
        _ => false,
    };
    if !implied {
        return Err(error(
            chief_path,
            format!(
                "chief {chief}/{chief_index} has no v1 equivalent: v1's chief is the MASTER replica, or worker 0 when there is none"
            ),
        ));
    }
    if let Some(scheduler) = scheduler_name {
        for spec in replicas.values_mut() {
            let pod = &mut spec["template"]["spec"];
            if pod.get("schedulerName").is_none() {
                pod["schedulerName"] = json!(scheduler);
            }
        }
    }
    Ok(json!({
        "runPolicy": {"cleanPodPolicy": clean_pod_policy},
        "tfReplicaSpecs": replicas,
    }))
}

/// One `replicaSpecs[]` entry: the v1 key and spec.
fn replica(item: Value, path: &str) -> Result<(String, Value), ConvertError> {
    let Value::Object(item) = item else {
        return Err(error(path, "must be an object"));
    };
    let mut key = "Master".to_string();
    let mut replicas: Option<Value> = None;
    let mut port: Option<i64> = None;
    let mut template: Option<Value> = None;
    for (field, value) in item {
        match field.as_str() {
            "tfReplicaType" => {
                key = match value.as_str() {
                    Some("MASTER") | Some("") => "Master",
                    Some("PS") => "PS",
                    Some("WORKER") => "Worker",
                    _ => {
                        return Err(error(
                            format!("{path}.tfReplicaType"),
                            format!("{value} is none of MASTER, PS, WORKER"),
                        ));
                    }
                }
                .to_string();
            }
            "replicas" => replicas = Some(value),
            "tfPort" => {
                port = Some(value.as_i64().ok_or_else(|| {
                    error(
                        format!("{path}.tfPort"),
                        format!("{value} is not a port number"),
                    )
                })?);
            }
            "template" => template = Some(value),
            other => {
                return Err(error(
                    format!("{path}.{other}"),
                    "has no v1 meaning; remove it",
                ));
            }
        }
    }
    let mut template = template.ok_or_else(|| {
        error(
            format!("{path}.template"),
            "is required (v1 has no built-in default replica)",
        )
    })?;
    let containers = template
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| error(format!("{path}.template.spec.containers"), "is required"))?;
    let Some(tensorflow) = containers
        .iter_mut()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(CONTAINER_NAME))
    else {
        return Err(error(
            format!("{path}.template.spec.containers"),
            "needs a container named tensorflow",
        ));
    };
    if let Some(port) = port.filter(|p| *p != i64::from(DEFAULT_PORT)) {
        let ports = tensorflow
            .as_object_mut()
            .map(|c| c.entry("ports").or_insert_with(|| json!([])));
        if let Some(Value::Array(ports)) = ports {
            ports.retain(|p| p.get("name").and_then(Value::as_str) != Some(PORT_NAME));
            ports.push(json!({"name": PORT_NAME, "containerPort": port}));
        }
    }
    let mut spec = Map::new();
    if let Some(restart) = template
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .and_then(|pod| pod.remove("restartPolicy"))
    {
        spec.insert("restartPolicy".into(), restart);
    }
    spec.insert("replicas".into(), replicas.unwrap_or(json!(1)));
    spec.insert("template".into(), template);
    Ok((key, Value::Object(spec)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1ALPHA1: &str = r#"
apiVersion: kubeflow.org/v1alpha1
kind: TFJob
metadata:
  name: dist
  namespace: team-a
  uid: 123
spec:
  cleanupPodPolicy: Running
  schedulerName: kube-batch
  terminationPolicy:
    chief: {replicaName: MASTER, replicaIndex: 0}
  replicaSpecs:
  - replicas: 1
    tfReplicaType: MASTER
    template:
      spec:
        restartPolicy: OnFailure
        containers: [{name: tensorflow, image: img:1}]
  - replicas: 2
    tfReplicaType: PS
    tfPort: 3333
    template:
      spec:
        containers: [{name: tensorflow, image: img:1}]
status:
  phase: Running
"#;

    fn converted(yaml: &str) -> Value {
        let out = convert_yaml(yaml).unwrap();
        serde_saphyr::from_str(&out).unwrap()
    }

    #[test]
    fn a_v1alpha1_manifest_becomes_the_equivalent_v1_manifest() {
        let v1 = converted(V1ALPHA1);
        assert_eq!(
            v1,
            json!({
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "metadata": {"name": "dist", "namespace": "team-a"},
                "spec": {
                    "runPolicy": {"cleanPodPolicy": "Running"},
                    "tfReplicaSpecs": {
                        "Master": {
                            "replicas": 1,
                            "restartPolicy": "OnFailure",
                            "template": {"spec": {
                                "schedulerName": "kube-batch",
                                "containers": [{"name": "tensorflow", "image": "img:1"}]
                            }}
                        },
                        "PS": {
                            "replicas": 2,
                            "template": {"spec": {
                                "schedulerName": "kube-batch",
                                "containers": [{"name": "tensorflow", "image": "img:1",
                                    "ports": [{"name": "tfjob-port", "containerPort": 3333}]}]
                            }}
                        }
                    }
                }
            })
        );
        let job: crate::api::TFJob = serde_json::from_value(v1).unwrap();
        assert_eq!(crate::api::validate::validate(&job), Ok(()));
    }

    #[test]
    fn other_documents_pass_through_unchanged() {
        let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: y}\n";
        let out = convert_yaml(yaml).unwrap();
        let docs: Vec<Value> = serde_saphyr::from_multiple(&out).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["kind"], "ConfigMap");
        assert_eq!(docs[1]["apiVersion"], "kubeflow.org/v1");
    }

    #[test]
    fn fields_without_a_v1_meaning_are_refused_naming_the_field() {
        let cases = [
            ("  tfImage: tensorflow/tensorflow:1.3.0\n", "spec.tfImage"),
            ("  RuntimeId: abcd\n", "spec.RuntimeId"),
            (
                "  terminationPolicy: {chief: {replicaName: WORKER, replicaIndex: 1}}\n",
                "spec.terminationPolicy.chief",
            ),
        ];
        for (extra, path) in cases {
            let yaml = V1ALPHA1.replace(
                "spec:\n  cleanupPodPolicy",
                &format!("spec:\n{extra}  cleanupPodPolicy"),
            );
            let yaml = if path == "spec.terminationPolicy.chief" {
                yaml.replace(
                    "  terminationPolicy:\n    chief: {replicaName: MASTER, replicaIndex: 0}\n",
                    "",
                )
            } else {
                yaml
            };
            let error = convert_yaml(&yaml).unwrap_err();
            assert_eq!(error.path, format!("document 1: {path}"), "{error}");
        }
        let bad_type = V1ALPHA1.replace("tfReplicaType: PS", "tfReplicaType: EVALUATOR");
        let error = convert_yaml(&bad_type).unwrap_err();
        assert_eq!(error.path, "document 1: spec.replicaSpecs[1].tfReplicaType");
        assert!(error.message.contains("MASTER, PS, WORKER"));
    }

    #[test]
    fn a_worker_0_chief_without_master_is_v1s_default_chief() {
        let yaml = "apiVersion: kubeflow.org/v1alpha1\nkind: TFJob\nmetadata: {name: w}\nspec:\n  terminationPolicy: {chief: {replicaName: WORKER, replicaIndex: 0}}\n  replicaSpecs:\n  - {replicas: 2, tfReplicaType: WORKER, template: {spec: {containers: [{name: tensorflow, image: i}]}}}\n";
        let v1 = converted(yaml);
        assert_eq!(v1["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 2);
        assert_eq!(v1["spec"]["runPolicy"]["cleanPodPolicy"], "All");
    }
}
