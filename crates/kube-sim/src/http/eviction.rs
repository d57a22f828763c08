//! `POST …/pods/{name}/eviction`: the policy/v1 Eviction subresource, as
//! kube-apiserver answers it. A pod no PodDisruptionBudget covers is
//! deleted with the Eviction's delete options; a budget that allows no
//! disruption (or that its controller has not processed yet) is a 429
//! naming it; an allowed eviction takes one disruption from the budget's
//! status before the pod goes. kube-sim runs no disruption controller:
//! whoever manages the budget writes its status.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::{Value, json};

use super::negotiate;
use crate::error::ApiError;
use crate::store::{DeleteOptions, Store, Subresource, WriteParams, WriteScope};

pub(crate) fn routes(store: Arc<Store>) -> Router {
    Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction",
            any(eviction),
        )
        .with_state(store)
}

async fn eviction(
    State(store): State<Arc<Store>>,
    Path((namespace, name)): Path<(String, String)>,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if method != Method::POST {
        return ApiError::method_not_allowed().into_response();
    }
    let answer = match evict(&store, &namespace, &name, &headers, &body) {
        Ok(()) => crate::http::created_status(),
        Err(e) => e.into_response(),
    };
    negotiate::convert(&headers, false, false, answer).await
}

fn evict(
    store: &Store,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), ApiError> {
    let eviction = super::request_object(headers, body)?;
    // The kind may be left out: the endpoint says what the body is.
    if eviction
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k != "Eviction")
    {
        return Err(ApiError::bad_request(
            "the body of an eviction must be a policy/v1 Eviction",
        ));
    }
    let named = eviction.pointer("/metadata/name").and_then(Value::as_str);
    if named.is_some_and(|n| n != name) {
        return Err(ApiError::bad_request(format!(
            "name in URL does not match name in Eviction object: {name} != {}",
            named.unwrap_or_default()
        )));
    }
    let mut options = match eviction.get("deleteOptions") {
        Some(opts) if opts.is_object() => DeleteOptions::from_body(opts)?,
        _ => DeleteOptions::default(),
    };
    let pods = store
        .resolve("", "v1", "pods")
        .ok_or_else(ApiError::no_such_resource)?;
    let pod = store.get(&pods, Some(namespace), name)?;
    let pod_value = pod.value();
    let phase = pod_value
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // A finished or already-deleting pod needs no budget.
    let exempt = matches!(phase, "Succeeded" | "Failed") || pod.deleting;
    if !exempt {
        take_disruption(store, namespace, &pod.labels)?;
    }
    if options.precondition_uid.is_none() {
        options.precondition_uid = Some(pod.uid.clone());
    }
    store.delete(&pods, Some(namespace), name, &options)?;
    Ok(())
}

/// Takes one allowed disruption from the one budget covering the pod.
fn take_disruption(
    store: &Store,
    namespace: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<(), ApiError> {
    let Some(budgets) = store.resolve("policy", "v1", "poddisruptionbudgets") else {
        return Ok(());
    };
    let page = store.list(&budgets, Some(namespace), &Default::default())?;
    let covering: Vec<Value> = page
        .items
        .iter()
        .map(|b| b.value())
        .filter(|b| {
            let Some(selector) = b.pointer("/spec/selector") else {
                return false;
            };
            crate::selector::LabelSelector::parse(&super::scale::selector_string(selector))
                .is_ok_and(|s| s.matches(labels))
        })
        .collect();
    let budget = match covering.as_slice() {
        [] => return Ok(()),
        [one] => one.clone(),
        _ => {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
    };
    let budget_name = budget
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let generation = budget
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let observed = budget
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if observed < generation {
        return Err(ApiError::too_many_requests_because(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            "DisruptionBudget",
            &format!("The disruption budget {budget_name} is still being processed by the server."),
        ));
    }
    let allowed = budget
        .pointer("/status/disruptionsAllowed")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if allowed <= 0 {
        let healthy = budget
            .pointer("/status/currentHealthy")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let desired = budget
            .pointer("/status/desiredHealthy")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        return Err(ApiError::too_many_requests_because(
            "Cannot evict pod as it would violate the pod's disruption budget.",
            "DisruptionBudget",
            &format!(
                "The disruption budget {budget_name} needs {desired} healthy pods and has {healthy} currently"
            ),
        ));
    }
    let mut updated = budget;
    updated["status"]["disruptionsAllowed"] = json!(allowed - 1);
    let scope = WriteScope {
        rt: &budgets,
        version: "v1",
        namespace: Some(namespace),
        params: &WriteParams::default(),
    };
    store
        .update(scope, &budget_name, Subresource::Status, updated)
        .map(|_| ())
        .map_err(|e| {
            if e.code == 409 {
                ApiError::too_many_requests_because(
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                    "DisruptionBudget",
                    &format!("The disruption budget {budget_name} changed; try again"),
                )
            } else {
                e
            }
        })
}
