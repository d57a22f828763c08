//! The HTTP face of kube-sim: one axum Router, usable in-process as a
//! `kube::Client` service or served on a loopback port.

mod admitted;
pub mod auth;
pub mod discovery;
mod escalation;
pub(crate) mod eviction;
pub mod faults;
mod negotiate;
mod openapi;
pub(crate) mod openapi_v2;
pub(crate) mod path;
mod query;
mod reviews;
mod scale;
mod table;
mod tokens;

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;

use crate::error::ApiError;
use crate::patch::{self, PatchKind};
use crate::store::{DeleteOptions, Store, Subresource, WriteParams};
use path::{ApiPath, Target};

/// Largest request body accepted, as kube-apiserver's 3 MiB limit.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<Store>,
    /// `host:port` reported in `/api`; empty until a listener is bound.
    pub server_address: Arc<parking_lot::RwLock<String>>,
    /// Fault rules applied in front of the Kubernetes routes (faults.rs).
    pub faults: Arc<faults::Faults>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Issued and static bearer tokens, for TokenRequest and TokenReview.
    pub tokens: Arc<crate::tokens::Tokens>,
    /// The last `/openapi/v2` rendering (openapi_v2.rs).
    pub openapi_v2: Arc<openapi_v2::Cache>,
    /// Admission webhook configurations as last read (admitted.rs).
    pub admission: Arc<crate::admission::Admission>,
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route(
            "/version",
            get(|| async { json_response(StatusCode::OK, &discovery::version()) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route("/api", get(core_versions))
        .route("/apis", get(group_list))
        // kube-apiserver answers the root documents with a trailing slash
        // too (the e2e suite's discovery test asks for `/apis/`).
        .route("/api/", get(core_versions))
        .route("/apis/", get(group_list))
        // kubectl parity and fault injection (openapi.rs, openapi_v2.rs, faults.rs)
        .route("/openapi/v2", get(openapi_v2::document))
        .route("/openapi/v3", get(openapi::index))
        .route("/openapi/v3/{*group_version}", get(openapi::group_version))
        .route("/metrics", get(faults::metrics))
        .route(
            "/sim/faults",
            get(faults::list_faults)
                .post(faults::add_fault)
                .delete(faults::clear_faults),
        )
        .route(
            "/sim/faults/{id}",
            axum::routing::delete(faults::remove_fault),
        )
        .fallback(dispatch)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

fn json_response(status: StatusCode, value: &Value) -> Response {
    bytes_response(status, Bytes::from(value.to_string()))
}

/// The `201 Success` Status a POST to a create-only subresource (binding,
/// eviction) answers with.
pub(crate) fn created_status() -> Response {
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Success", "code": 201,
    });
    json_response(StatusCode::CREATED, &status)
}

fn bytes_response(status: StatusCode, body: Bytes) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn core_versions(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if discovery::wants_aggregated(&headers) {
        return aggregated_response(&discovery::aggregated(&state.store.registry(), true));
    }
    let address = state.server_address.read().clone();
    json_response(StatusCode::OK, &discovery::core_versions(&address))
}

async fn group_list(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if discovery::wants_aggregated(&headers) {
        return aggregated_response(&discovery::aggregated(&state.store.registry(), false));
    }
    json_response(
        StatusCode::OK,
        &discovery::group_list(&state.store.registry()),
    )
}

/// An aggregated discovery document, with the content type that tells
/// client-go it got the v2 form.
fn aggregated_response(doc: &Value) -> Response {
    let mut response = bytes_response(StatusCode::OK, Bytes::from(doc.to_string()));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::AGGREGATED_V2),
    );
    response
}

async fn dispatch(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    caller: Option<axum::Extension<auth::Caller>>,
    rbac_enforced: Option<axum::Extension<auth::RbacEnforced>>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return body_rejection(&rejection).into_response(),
    };
    let caller = caller.map(|axum::Extension(auth::Caller(user))| user);
    let request = Incoming {
        method: &method,
        uri: &uri,
        headers: &headers,
        caller: caller.as_ref(),
        rbac_enforced: rbac_enforced.is_some(),
    };
    let response = match handle(&state, &request, body).await {
        // Table answers for kubectl get (table.rs)
        Ok(response) => table::convert(&state.store, &method, &uri, &headers, response).await,
        Err(err) => err.into_response(),
    };
    // Protobuf answers for client-go (negotiate.rs)
    if !negotiate::prefers_protobuf(&headers) {
        return response;
    }
    let watch = query::Query::parse(uri.query().unwrap_or_default()).watch;
    // A plain answer names its kind, and a custom kind has no protobuf
    // form, so only a watch stream needs the registry (its state lock is
    // the store's, and one more take of it per write showed in the bench).
    let custom = watch
        && match ApiPath::parse(uri.path()) {
            Some(ApiPath::Resource(raw)) => state
                .store
                .resolve(&raw.group, &raw.version, &raw.plural)
                .is_some_and(|rt| rt.custom),
            _ => false,
        };
    negotiate::convert(&headers, custom, watch, response).await
}

/// A body that could not be read is answered with a Status like every other
/// error: over the limit is kube-apiserver's 413 `Request entity too large`.
fn body_rejection(rejection: &axum::extract::rejection::BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(format!(
            "Request entity too large: limit is {MAX_BODY_BYTES}"
        ))
    } else {
        ApiError::bad_request(format!("the request body could not be read: {rejection}"))
    }
}

/// A request as `handle` needs it.
struct Incoming<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    /// Who asks (`None`: authentication is off, or the in-process client).
    caller: Option<&'a crate::rbac::UserInfo>,
    /// Whether RBAC decides about the caller.
    rbac_enforced: bool,
}

async fn handle(
    state: &AppState,
    request: &Incoming<'_>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Incoming {
        method,
        uri,
        headers,
        caller,
        rbac_enforced,
    } = *request;
    let store = &state.store;
    if let Some(answer) = reviews::answer(store, method, uri.path(), headers, &body, caller) {
        if table::accepts_only_table(headers) {
            return Err(ApiError::not_acceptable(
                "the server was unable to respond with a content type that the client supports (a review has no Table form)",
            ));
        }
        return answer;
    }
    if let Some(answer) = tokens::answer(store, &state.tokens, method, uri.path(), headers, &body) {
        return answer;
    }
    let parsed = ApiPath::parse(uri.path()).ok_or_else(ApiError::no_such_resource)?;
    let target = match parsed {
        ApiPath::GroupDiscovery { group } => {
            let doc = discovery::group(&store.registry(), &group)
                .ok_or_else(ApiError::no_such_resource)?;
            return Ok(json_response(StatusCode::OK, &doc));
        }
        ApiPath::ResourceDiscovery { group, version } => {
            let doc = discovery::resource_list(&store.registry(), &group, &version)
                .ok_or_else(ApiError::no_such_resource)?;
            return Ok(json_response(StatusCode::OK, &doc));
        }
        ApiPath::Resource(raw) => raw.resolve(store)?,
    };
    let query = query::Query::parse(uri.query().unwrap_or_default());
    let sub = match target.subresource.as_deref() {
        None => Some(Subresource::Main),
        Some("status") if target.rt.has_status(&target.version) => Some(Subresource::Status),
        Some(_) => None,
    };
    if let Some(sub) = sub {
        let write = admitted::Write {
            state,
            target: &target,
            method,
            query: &query,
            headers,
            caller,
            sub,
            escalation: escalation::guard_for(store, rbac_enforced, caller, &target, method, sub),
        };
        match admitted::webhooks_for(&write) {
            Some(webhooks) => return admitted::serve(&write, &webhooks, body).await,
            // The escalation check alone takes the same passes, with no
            // webhook to call.
            None if write.escalation.is_some() => {
                let none = crate::admission::webhooks::Configured::default();
                return admitted::serve(&write, &none, body).await;
            }
            None => {}
        }
    }
    match (&target.name, target.subresource.as_deref()) {
        (None, _) => collection(store, &target, method, &query, headers, body),
        (Some(_), None) => object(
            store,
            &target,
            method,
            &query,
            headers,
            body,
            Subresource::Main,
        ),
        (Some(_), Some("status")) if target.rt.has_status(&target.version) => object(
            store,
            &target,
            method,
            &query,
            headers,
            body,
            Subresource::Status,
        ),
        (Some(name), Some("scale")) if scale::supported(&target.rt) => {
            scale::answer(store, &target, name, method, &query, headers, &body)
        }
        (Some(_), Some(_)) => Err(ApiError::no_such_resource()),
    }
}

/// The object in a create or replace body of a built-in kind: JSON, or
/// protobuf (negotiate.rs).
pub(super) fn request_object(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let base = content_type.split(';').next().unwrap_or_default().trim();
    match base {
        "" | "application/json" | "*/*" => parse_body(body),
        crate::protobuf::CONTENT_TYPE => negotiate::decode_body(body),
        _ => Err(ApiError::unsupported_media_type(
            content_type,
            &["application/json", crate::protobuf::CONTENT_TYPE],
        )),
    }
}

/// The object in a create or replace body of `rt`: custom resources take
/// JSON only, as on the real server.
fn target_object(
    rt: &crate::resources::ResourceType,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, ApiError> {
    if rt.custom && negotiate::is_protobuf_body(headers) {
        return Err(negotiate::custom_resource_refusal());
    }
    request_object(headers, body)
}

/// Keys a JSON body sets twice (YAML and protobuf bodies are not scanned).
fn duplicate_fields(headers: &HeaderMap, body: &[u8]) -> Vec<String> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    match content_type.split(';').next().unwrap_or_default().trim() {
        "" | "application/json" | "*/*" => crate::field_validation::duplicate_fields(body),
        _ => Vec::new(),
    }
}

/// One `Warning` header per warning the write collected.
fn with_warnings(mut response: Response, params: &WriteParams) -> Response {
    for text in params.warnings.take() {
        if let Ok(value) = HeaderValue::from_str(&crate::field_validation::warning_header(&text)) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

fn parse_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(ApiError::bad_request("the request body is empty"));
    }
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request could not be decoded as JSON: {e}"
        ))
    })
}

fn collection(
    store: &Arc<Store>,
    target: &Target,
    method: &Method,
    query: &query::Query,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let rt = &target.rt;
    let ns = target.namespace.as_deref();
    match *method {
        Method::GET if query.watch => {
            let opts = query.watch_options(rt)?;
            let stream = store.watch(rt.clone(), &target.version, ns, opts)?;
            let mut response = Response::new(Body::from_stream(stream));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Ok(response)
        }
        Method::GET => {
            let page = store.list(rt, ns, &query.list_options(rt)?)?;
            Ok(bytes_response(
                StatusCode::OK,
                Store::render_list(rt, &target.version, &page),
            ))
        }
        Method::POST => {
            if rt.namespaced && ns.is_none() {
                return Err(ApiError::method_not_allowed());
            }
            query.check_write_options("CreateOptions")?;
            let value = target_object(rt, headers, &body)?;
            let mut params = write_params(query, headers, target);
            params.duplicate_fields = duplicate_fields(headers, &body);
            params.protobuf_body = negotiate::is_protobuf_body(headers);
            let created = store.create(target.write_scope(&params), value)?;
            let response = bytes_response(
                StatusCode::CREATED,
                Store::render(rt, &target.version, &created),
            );
            Ok(with_warnings(
                negotiate::with_kept_object(response, &params.kept, &created),
                &params,
            ))
        }
        Method::DELETE => {
            let opts = delete_options(headers, &body, query)?;
            let page = store.list(rt, ns, &query.list_options(rt)?)?;
            let mut deleted = Vec::new();
            for obj in &page.items {
                let obj_ns = (!obj.namespace.is_empty()).then_some(obj.namespace.as_str());
                match store.delete(rt, obj_ns, &obj.name, &opts) {
                    Ok(d) => deleted.push(d),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let page = crate::store::ListPage {
                items: deleted,
                resource_version: store.current_rv(),
                continue_token: None,
                remaining: None,
            };
            Ok(bytes_response(
                StatusCode::OK,
                Store::render_list(rt, &target.version, &page),
            ))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn delete_options(
    headers: &HeaderMap,
    body: &[u8],
    query: &query::Query,
) -> Result<DeleteOptions, ApiError> {
    let mut opts = if body.iter().all(u8::is_ascii_whitespace) {
        DeleteOptions::default()
    } else if negotiate::is_protobuf_body(headers) {
        DeleteOptions::from_body(&negotiate::decode_body(body)?)?
    } else {
        DeleteOptions::from_body(&parse_body(body)?)?
    };
    query.apply_delete_params(&mut opts)?;
    Ok(opts)
}

/// A write's parameters; the stored object is kept in memory for the
/// answer when that answer will be protobuf encoded from it.
fn write_params(query: &query::Query, headers: &HeaderMap, target: &Target) -> WriteParams {
    let mut params = query.write_params(user_agent(headers));
    if negotiate::answers_from_memory(headers, &target.rt, &target.version) {
        params.kept = crate::store::KeptObject::wanted();
    }
    params
}

fn user_agent(headers: &HeaderMap) -> &str {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

fn object(
    store: &Arc<Store>,
    target: &Target,
    method: &Method,
    query: &query::Query,
    headers: &HeaderMap,
    body: Bytes,
    sub: Subresource,
) -> Result<Response, ApiError> {
    let rt = &target.rt;
    let ns = target.namespace.as_deref();
    let name = target.name.as_deref().unwrap_or_default();
    let version = &target.version;
    let mut params = write_params(query, headers, target);
    match *method {
        Method::PUT => query.check_write_options("UpdateOptions")?,
        Method::PATCH => query.check_write_options("PatchOptions")?,
        Method::DELETE => query.check_write_options("DeleteOptions")?,
        _ => {}
    }
    let respond =
        |obj: Arc<crate::object::StoredObject>, code: StatusCode, params: &WriteParams| {
            let response = bytes_response(code, Store::render(rt, version, &obj));
            Ok(with_warnings(
                negotiate::with_kept_object(response, &params.kept, &obj),
                params,
            ))
        };
    match *method {
        Method::GET => respond(store.get(rt, ns, name)?, StatusCode::OK, &params),
        Method::PUT => {
            let value = target_object(rt, headers, &body)?;
            params.duplicate_fields = duplicate_fields(headers, &body);
            params.protobuf_body = negotiate::is_protobuf_body(headers);
            respond(
                store.update(target.write_scope(&params), name, sub, value)?,
                StatusCode::OK,
                &params,
            )
        }
        Method::PATCH => {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let kind = PatchKind::from_content_type(content_type).ok_or_else(|| {
                ApiError::unsupported_media_type(
                    content_type,
                    &[patch::JSON, patch::MERGE, patch::APPLY, patch::STRATEGIC],
                )
            })?;
            // An apply that creates the object answers 201, as on the real server.
            let creates = kind == PatchKind::Apply && store.get(rt, ns, name).is_err();
            respond(
                store.patch(target.write_scope(&params), name, sub, kind, &body)?,
                if creates {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                &params,
            )
        }
        Method::DELETE if sub == Subresource::Main => {
            let opts = delete_options(headers, &body, query)?;
            let deleted = store.delete(rt, ns, name, &opts)?;
            // kube-apiserver answers an immediate deletion of a built-in
            // kind (Pods aside) with a Success Status; custom resources,
            // Pods and deletions still pending get the object.
            // `deleting` on the answer is what tells a pending deletion
            // (finalizers, a pod's grace period) from one already done.
            let returns_object = rt.custom || (rt.group.is_empty() && rt.kind == "Pod");
            if !returns_object && !deleted.deleting {
                let mut details = serde_json::json!({
                    "name": name, "kind": rt.plural, "uid": deleted.uid,
                });
                if !rt.group.is_empty() {
                    details["group"] = rt.group.clone().into();
                }
                let status = serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Success", "details": details,
                });
                return Ok(bytes_response(
                    StatusCode::OK,
                    Bytes::from(status.to_string()),
                ));
            }
            respond(deleted, StatusCode::OK, &params)
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}
