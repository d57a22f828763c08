//! The node-agent HTTP API on the controller's port (docs/mokka-node-api.md):
//! `GET /v1alpha1/nodes/{name}/assignment?uid=…` answers what
//! [`super::ReadApi`] knows about the Node, with an ETag, `If-None-Match`
//! and long-polls (`watch=true&timeoutSeconds=N`), and
//! `GET /v1alpha1/openapi.json` describes it. Every replica with synced
//! caches answers; nothing here writes.

mod answers;
pub mod auth;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::read::{ReadApi, ReadError};
use crate::node_view::{
    AssignmentQuery, NodeAssignments, ObjectIdentity, assignment_view, encode, if_none_match_names,
    parse_query, validate_node_name,
};
use answers::{AnswerCache, Encoded};
use auth::{AuthError, Authenticator};

/// The OpenAPI 3 description served at `/v1alpha1/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");

/// Seconds a client should wait before asking again after a 503.
pub const RETRY_AFTER_SECONDS: u64 = 2;

/// What the handlers share.
pub struct NodeApi {
    read: ReadApi,
    auth: Authenticator,
    answers: AnswerCache,
}

/// Builds the answer for one Node from the read API: the same code path
/// serves the HTTP API and `gpufleet mokka node-view`.
pub fn node_assignments(
    read: &ReadApi,
    name: &str,
    uid: &str,
) -> Result<NodeAssignments, ReadError> {
    let slots = read.bound_slots(name, uid)?;
    let mut assignments = Vec::with_capacity(slots.len());
    for slot in &slots {
        let runtimes = read.slot_runtime(&slot.rack, slot.node_index)?;
        // slot_runtime checked that the cached profile is the rack's.
        let profile = read
            .cached_profile(&slot.rack.spec.profile_ref.name)
            .ok_or_else(|| {
                ReadError::StaleRuntimeInputs(format!(
                    "SGPURackProfile {:?} is no longer cached",
                    slot.rack.spec.profile_ref.name
                ))
            })?;
        let view = assignment_view(&slot.rack, slot.node_index, &profile, |index| {
            runtimes
                .iter()
                .find(|gpu| gpu.index == index)
                .map(|gpu| gpu.runtime.clone())
        })
        .ok_or(ReadError::RackAndNodeRequired)?;
        assignments.push(view);
    }
    Ok(NodeAssignments {
        node: ObjectIdentity {
            name: name.to_string(),
            uid: uid.to_string(),
        },
        assignments,
    })
}

impl NodeApi {
    pub fn new(read: ReadApi, client: kube::Client) -> Self {
        Self {
            read,
            auth: Authenticator::new(client),
            answers: AnswerCache::default(),
        }
    }

    /// The routes, ready to merge into the controller's admin server.
    pub fn router(self) -> Router {
        Router::new()
            .route("/v1alpha1/nodes/{name}/assignment", get(assignment))
            .route("/v1alpha1/openapi.json", get(openapi))
            .with_state(Arc::new(self))
    }
}

async fn openapi() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI_JSON,
    )
        .into_response()
}

fn error(status: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({"code": status.as_u16(), "reason": reason, "message": message});
    let mut response = (status, axum::Json(body)).into_response();
    match status {
        StatusCode::SERVICE_UNAVAILABLE => {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
        }
        StatusCode::UNAUTHORIZED => {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mokka\""),
            );
        }
        _ => {}
    }
    response
}

fn auth_error(failure: &AuthError) -> Response {
    let message = failure.to_string();
    match failure {
        AuthError::Unauthenticated(_) => error(StatusCode::UNAUTHORIZED, "Unauthorized", &message),
        AuthError::Forbidden(_) => error(StatusCode::FORBIDDEN, "Forbidden", &message),
        AuthError::Unavailable(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            &message,
        ),
    }
}

fn read_error(failure: &ReadError) -> Response {
    let message = failure.to_string();
    match failure {
        ReadError::CacheNotReady => {
            error(StatusCode::SERVICE_UNAVAILABLE, "CacheNotReady", &message)
        }
        ReadError::StaleRuntimeInputs(_) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "StaleRuntimeInputs",
            &message,
        ),
        ReadError::ExactIdentityRequired => error(StatusCode::BAD_REQUEST, "BadRequest", &message),
        ReadError::RackAndNodeRequired | ReadError::Evaluation(_) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", &message)
        }
    }
}

fn ok(body: bytes::Bytes, etag: &str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn not_modified(etag: &str) -> Response {
    let mut response = StatusCode::NOT_MODIFIED.into_response();
    if let Ok(value) = HeaderValue::from_str(etag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

async fn assignment(
    State(api): State<Arc<NodeApi>>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let request = match validate_node_name(&name)
        .and_then(|()| parse_query(query.as_deref().unwrap_or_default()))
    {
        Ok(request) => request,
        Err(bad) => return error(StatusCode::BAD_REQUEST, "BadRequest", &bad.0),
    };
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok());
    let token = match Authenticator::bearer(authorization) {
        Ok(token) => token,
        Err(failure) => return auth_error(&failure),
    };
    let caller = match api.auth.authenticate(token).await {
        Ok(caller) => caller,
        Err(failure) => return auth_error(&failure),
    };
    if let Err(failure) = api.auth.authorize(&caller, &name).await {
        return auth_error(&failure);
    }
    let known = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    answer(&api, &name, &request, known.as_deref()).await
}

/// The current answer; with `watch` and a matching `If-None-Match`, the
/// first different answer within the timeout, else 304 at the timeout.
async fn answer(
    api: &NodeApi,
    name: &str,
    request: &AssignmentQuery,
    known: Option<&str>,
) -> Response {
    let read = &api.read;
    let mut changes = read.changes();
    let deadline = request
        .watch
        .map(|seconds| tokio::time::Instant::now() + Duration::from_secs(seconds));
    loop {
        // Marked seen before computing: a change during the computation
        // wakes the wait below instead of being missed.
        let revision = *changes.borrow_and_update();
        let kept = if read.ready() {
            api.answers.get(revision, name, &request.uid)
        } else {
            None
        };
        let Encoded { body, etag } = match kept {
            Some(kept) => kept,
            None => match node_assignments(read, name, &request.uid) {
                Ok(view) => {
                    let (body, etag) = encode(&view);
                    let encoded = Encoded {
                        body: body.into(),
                        etag,
                    };
                    api.answers
                        .put(revision, name, &request.uid, encoded.clone());
                    encoded
                }
                Err(failure) => return read_error(&failure),
            },
        };
        let unchanged = known.is_some_and(|known| if_none_match_names(known, &etag));
        if !unchanged {
            return ok(body, &etag);
        }
        let Some(deadline) = deadline else {
            return not_modified(&etag);
        };
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    // The controller is gone; nothing will change any more.
                    return not_modified(&etag);
                }
            }
            () = tokio::time::sleep_until(deadline) => return not_modified(&etag),
        }
    }
}
