//! `POST …/pods/{name}/binding`: assigns a pending pod to a node the way
//! the apiserver does for kube-scheduler, setting `spec.nodeName` and the
//! `PodScheduled=True` condition. A pod that already has a node is a 409.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{Method, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::object::now_rfc3339;
use crate::store::{Store, Subresource, WriteScope};

/// Optimistic-concurrency retries before giving up with the 409.
const ATTEMPTS: usize = 5;

pub(crate) fn routes(store: Arc<Store>) -> Router {
    Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/binding",
            any(binding),
        )
        .with_state(store)
}

async fn binding(
    State(store): State<Arc<Store>>,
    Path((namespace, name)): Path<(String, String)>,
    method: Method,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    if method != Method::POST {
        return ApiError::method_not_allowed().into_response();
    }
    // kube-scheduler and other Go clients send the Binding as protobuf.
    let protobuf = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(crate::protobuf::CONTENT_TYPE));
    let body = if protobuf {
        match crate::protobuf::decode_object(&body) {
            Ok(value) => Bytes::from(value.to_string()),
            Err(e) => {
                return ApiError::bad_request(format!(
                    "the protobuf body of the request could not be decoded: {e}"
                ))
                .into_response();
            }
        }
    } else {
        body
    };
    match bind(&store, &namespace, &name, &body) {
        Ok(()) => crate::http::created_status(),
        Err(e) => e.into_response(),
    }
}

/// The node a Binding body names.
pub(crate) fn binding_target(body: &[u8]) -> Result<String, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request could not be decoded as a Binding: {e}"
        ))
    })?;
    match value.pointer("/target/name").and_then(Value::as_str) {
        Some(node) if !node.is_empty() => Ok(node.to_string()),
        _ => Err(ApiError::bad_request(
            "a Binding needs target.name, the node to bind to",
        )),
    }
}

/// Adds or replaces the `PodScheduled=True` condition in a pod status.
pub(crate) fn mark_scheduled(status: &mut Value) {
    let condition = json!({
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": null,
        "lastTransitionTime": now_rfc3339(),
    });
    if !status.is_object() {
        *status = json!({});
    }
    let conditions = status
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
    if let Some(Value::Array(list)) = conditions {
        list.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
        list.insert(0, condition);
    }
}

fn bind(store: &Store, namespace: &str, name: &str, body: &[u8]) -> Result<(), ApiError> {
    let node = binding_target(body)?;
    let rt = store
        .resolve("", "v1", "pods")
        .ok_or_else(ApiError::no_such_resource)?;
    let params = scheduler_write();
    let scope = WriteScope {
        rt: &rt,
        version: "v1",
        namespace: Some(namespace),
        params: &params,
    };
    let mut last_error = None;
    for _ in 0..ATTEMPTS {
        let current = store.get(&rt, Some(namespace), name)?;
        let mut pod = current.value();
        if current.deleting {
            return Err(ApiError::conflict_with(
                "",
                "pods",
                name,
                &format!("pod {name} is being deleted, cannot be assigned to a host"),
            ));
        }
        if let Some(assigned) = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(ApiError::conflict_with(
                "",
                "pods",
                name,
                &format!("pod {name} is already assigned to node \"{assigned}\""),
            ));
        }
        // Status first: the kubelet acts on nodeName, and by then the pod
        // must already say it was scheduled.
        mark_scheduled(&mut pod["status"]);
        let with_status = match store.update(scope, name, Subresource::Status, pod) {
            Ok(stored) => stored,
            Err(e) if e.code == 409 => {
                last_error = Some(e);
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut pod = with_status.value();
        pod["spec"]["nodeName"] = Value::String(node.clone());
        match store.update(scope, name, Subresource::Main, pod) {
            Ok(_) => return Ok(()),
            Err(e) if e.code == 409 => last_error = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last_error.unwrap_or_else(|| ApiError::conflict("", "pods", name)))
}

/// Binding writes are recorded under the scheduler's name in managedFields.
fn scheduler_write() -> crate::store::WriteParams {
    crate::store::WriteParams {
        field_manager: Some("kube-scheduler".into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_names_its_node_in_target_name() {
        let body = br#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p"},"target":{"kind":"Node","name":"gpu-1"}}"#;
        assert_eq!(binding_target(body).unwrap(), "gpu-1");
        assert_eq!(binding_target(br#"{"target":{}}"#).unwrap_err().code, 400);
        assert_eq!(binding_target(b"not json").unwrap_err().code, 400);
    }

    #[test]
    fn scheduling_replaces_an_unschedulable_condition() {
        let mut status = json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]});
        mark_scheduled(&mut status);
        let conditions = status["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0]["status"], "True");
        let mut empty = Value::Null;
        mark_scheduled(&mut empty);
        assert_eq!(empty["conditions"][0]["type"], "PodScheduled");
    }
}
