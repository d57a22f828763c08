//! The review APIs kubectl's `auth can-i` and `auth whoami` use, answered
//! from the stored RBAC objects: SelfSubjectAccessReview,
//! SubjectAccessReview, LocalSubjectAccessReview and SelfSubjectReview.
//! Reviews are computed, never stored.
//!
//! kube-sim does not authenticate (every client is cluster-admin, user
//! `system:admin` in `system:masters`), so the asking user is the one
//! named by the `Impersonate-User`/`Impersonate-Group` headers
//! (`kubectl --as`), or the admin. A ServiceAccount user gets the groups
//! the apiserver gives ServiceAccounts.

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::rbac::{self, Policy, Request, UserInfo};
use crate::store::{ListOptions, Store};

/// Which review a path names, if it names one.
enum Review {
    SelfAccess,
    Access,
    LocalAccess { namespace: String },
    SelfSubject,
}

fn review_at(path: &str) -> Option<Review> {
    let path = path.trim_end_matches('/');
    if let Some(rest) = path.strip_prefix("/apis/authorization.k8s.io/v1/") {
        return match rest {
            "selfsubjectaccessreviews" => Some(Review::SelfAccess),
            "subjectaccessreviews" => Some(Review::Access),
            _ => {
                let (namespace, resource) = rest.strip_prefix("namespaces/")?.split_once('/')?;
                (resource == "localsubjectaccessreviews").then(|| Review::LocalAccess {
                    namespace: namespace.to_string(),
                })
            }
        };
    }
    (path == "/apis/authentication.k8s.io/v1/selfsubjectreviews").then_some(Review::SelfSubject)
}

/// Answers a review request, or `None` when the path is not a review's.
/// `authenticated` is the caller the loopback guard established (auth.rs);
/// without one the impersonation headers or the admin speak.
pub fn answer(
    store: &Store,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
    authenticated: Option<&UserInfo>,
) -> Option<Result<Response, ApiError>> {
    let review = review_at(path)?;
    if *method != Method::POST {
        return Some(Err(ApiError::method_not_allowed()));
    }
    Some(respond(store, review, headers, body, authenticated))
}

fn respond(
    store: &Store,
    review: Review,
    headers: &HeaderMap,
    body: &[u8],
    authenticated: Option<&UserInfo>,
) -> Result<Response, ApiError> {
    // kubectl sends reviews as protobuf.
    let mut doc = super::request_object(headers, body)?;
    let caller = authenticated.cloned().unwrap_or_else(|| caller(headers));
    if let Review::SelfSubject = review {
        doc["status"] = json!({"userInfo": {"username": caller.username, "groups": caller.groups}});
        return Ok(super::json_response(StatusCode::CREATED, &doc));
    }
    let spec = doc.get("spec").cloned().unwrap_or(Value::Null);
    let user = match review {
        Review::SelfAccess => caller,
        _ => UserInfo {
            username: text(&spec, "/user").to_string(),
            groups: spec
                .get("groups")
                .and_then(Value::as_array)
                .map(|g| {
                    g.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        },
    };
    let mut request = request_of(&spec)?;
    if let (
        Review::LocalAccess { namespace },
        Request::Resource {
            namespace: asked, ..
        },
    ) = (&review, &mut request)
    {
        *asked = namespace.clone();
    }
    let decision = rbac::authorize(&policy(store), &user, &request);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = Value::from(decision.reason);
    }
    doc["status"] = status;
    if doc.get("metadata").is_none() {
        doc["metadata"] = json!({});
    }
    Ok(super::json_response(StatusCode::CREATED, &doc))
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn request_of(spec: &Value) -> Result<Request, ApiError> {
    if let Some(attributes) = spec.get("resourceAttributes") {
        return Ok(Request::Resource {
            verb: text(attributes, "/verb").to_string(),
            group: text(attributes, "/group").to_string(),
            resource: text(attributes, "/resource").to_string(),
            subresource: text(attributes, "/subresource").to_string(),
            name: text(attributes, "/name").to_string(),
            namespace: text(attributes, "/namespace").to_string(),
        });
    }
    if let Some(attributes) = spec.get("nonResourceAttributes") {
        return Ok(Request::NonResource {
            verb: text(attributes, "/verb").to_string(),
            path: text(attributes, "/path").to_string(),
        });
    }
    Err(ApiError::bad_request(
        "exactly one of nonResourceAttributes or resourceAttributes must be specified",
    ))
}

/// The user a request speaks for: the impersonated one, or kube-sim's admin.
fn caller(headers: &HeaderMap) -> UserInfo {
    impersonated(headers).unwrap_or_else(super::auth::admin)
}

/// The user `Impersonate-User` (and `Impersonate-Group`) name, if any.
pub(super) fn impersonated(headers: &HeaderMap) -> Option<UserInfo> {
    let user = headers
        .get("impersonate-user")
        .and_then(|v| v.to_str().ok())?;
    let mut groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_string)
        .collect();
    if let Some(rest) = user.strip_prefix("system:serviceaccount:")
        && let Some((namespace, name)) = rest.split_once(':')
        && groups.is_empty()
    {
        return Some(UserInfo::service_account(namespace, name));
    }
    groups.push("system:authenticated".into());
    Some(UserInfo {
        username: user.to_string(),
        groups,
    })
}

pub(super) fn policy(store: &Store) -> Policy {
    let objects = |plural: &str| -> Vec<Value> {
        store
            .resolve("rbac.authorization.k8s.io", "v1", plural)
            .and_then(|rt| store.list(&rt, None, &ListOptions::default()).ok())
            .map(|page| page.items.iter().map(|o| o.value()).collect())
            .unwrap_or_default()
    };
    Policy {
        roles: objects("roles"),
        cluster_roles: objects("clusterroles"),
        role_bindings: objects("rolebindings"),
        cluster_role_bindings: objects("clusterrolebindings"),
    }
}
