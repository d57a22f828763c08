//! The `scale` subresource of Deployments, ReplicaSets and StatefulSets:
//! an autoscaling/v1 `Scale` view of `spec.replicas`, which `kubectl scale`
//! reads and patches. A write to the view is a write of the parent's
//! `spec.replicas` (with the view's resourceVersion as a precondition).

use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::path::Target;
use super::query::Query;
use super::{json_response, request_object, user_agent};
use crate::error::ApiError;
use crate::patch::{self, PatchKind};
use crate::resources::ResourceType;
use crate::store::{Store, Subresource};

/// Kinds whose objects have a scale subresource.
pub fn supported(rt: &ResourceType) -> bool {
    rt.group == "apps"
        && matches!(
            rt.kind.as_str(),
            "Deployment" | "ReplicaSet" | "StatefulSet"
        )
}

/// `matchLabels` (and set-based expressions) as a label selector string.
pub(super) fn selector_string(selector: &Value) -> String {
    let mut parts: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expression["values"]
            .as_array()
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        parts.push(match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            _ => format!("!{key}"),
        });
    }
    parts.join(",")
}

fn scale_of(object: &Value) -> Value {
    let meta = &object["metadata"];
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"], "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": object["spec"]["replicas"]},
        "status": {
            "replicas": object["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector_string(&object["spec"]["selector"]),
        },
    })
}

/// Serves the scale subresource of `target`'s object `name`.
pub fn answer(
    store: &Arc<Store>,
    target: &Target,
    name: &str,
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let parent = store.get(&target.rt, target.namespace.as_deref(), name)?;
    let current = scale_of(&parent.value());
    let wanted = match *method {
        Method::GET => return Ok(json_response(StatusCode::OK, &current)),
        Method::PUT => {
            query.check_write_options("UpdateOptions")?;
            request_object(headers, body)?
        }
        Method::PATCH => {
            query.check_write_options("PatchOptions")?;
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let mut scale = current.clone();
            match PatchKind::from_content_type(content_type) {
                Some(PatchKind::Json) => patch::apply_json_patch(&mut scale, body)?,
                // A Scale has no lists, so a strategic merge is a plain merge.
                Some(PatchKind::Merge | PatchKind::Strategic) => {
                    let patch: Value = serde_json::from_slice(body)
                        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
                    json_patch::merge(&mut scale, &patch);
                }
                _ => {
                    return Err(ApiError::unsupported_media_type(
                        content_type,
                        &[patch::JSON, patch::MERGE, patch::STRATEGIC],
                    ));
                }
            }
            scale
        }
        _ => return Err(ApiError::method_not_allowed()),
    };
    let replicas = wanted["spec"]["replicas"].as_i64().ok_or_else(|| {
        ApiError::bad_request("a Scale's spec.replicas must be an integer".to_string())
    })?;
    let mut parent_patch = json!({"spec": {"replicas": replicas}});
    if let Some(rv) = wanted["metadata"]["resourceVersion"].as_str() {
        parent_patch["metadata"] = json!({"resourceVersion": rv});
    }
    let params = query.write_params(user_agent(headers));
    let written = store.patch(
        target.write_scope(&params),
        name,
        Subresource::Main,
        PatchKind::Merge,
        parent_patch.to_string().as_bytes(),
    )?;
    Ok(json_response(StatusCode::OK, &scale_of(&written.value())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scale_view_shows_replicas_and_the_selector_as_a_string() {
        let deployment = json!({
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "tier": "fe"},
                     "matchExpressions": [{"key": "track", "operator": "In", "values": ["a", "b"]}]}},
            "status": {"replicas": 2},
        });
        let scale = scale_of(&deployment);
        assert_eq!(scale["spec"]["replicas"], 3);
        assert_eq!(
            scale["status"],
            json!({"replicas": 2, "selector": "app=web,tier=fe,track in (a,b)"})
        );
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
    }
}
