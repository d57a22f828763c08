//! The guard in front of kube-sim's loopback listener: the `Host` check,
//! bearer-token authentication, impersonation and (opt-in) RBAC, applied
//! in that order with the rules of `crate::security`. The in-process
//! client does not pass through it: it lives in the test's own process and
//! is the admin.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::error::ApiError;
use crate::rbac::{self, UserInfo};
use crate::security::{self, Credential};
use crate::tokens::Review;

/// How requests that authenticated are authorized.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Authorization {
    /// Every authenticated client may do everything (kube-apiserver's
    /// `AlwaysAllow`).
    #[default]
    AlwaysAllow,
    /// The stored Roles, ClusterRoles and bindings decide, as kube-apiserver's
    /// RBAC authorizer does; the admin token (`system:masters`) is allowed
    /// everything.
    Rbac,
}

/// The user a request speaks for once authenticated (and impersonation
/// applied), for the handlers that answer "who am I" questions.
#[derive(Debug, Clone)]
pub struct Caller(pub UserInfo);

/// Present on a request whose caller RBAC decides about, for the checks
/// that go with RBAC past the guard (escalation.rs).
#[derive(Debug, Clone, Copy)]
pub struct RbacEnforced;

/// The guard's settings and what it needs from the server.
#[derive(Clone)]
pub struct Guard {
    pub app: AppState,
    /// `None`: requests are not authenticated (every client is the admin).
    pub admin_token: Option<Arc<str>>,
    pub authorization: Authorization,
}

/// The admin user the admin token speaks for.
pub fn admin() -> UserInfo {
    UserInfo {
        username: "system:admin".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
    }
}

pub async fn layer(State(guard): State<Arc<Guard>>, mut request: Request, next: Next) -> Response {
    match check(&guard, &request) {
        Ok(Some(caller)) => {
            count_request(&guard, &caller.username, &request);
            request.extensions_mut().insert(Caller(caller));
            if guard.authorization == Authorization::Rbac {
                request.extensions_mut().insert(RbacEnforced);
            }
            next.run(request).await
        }
        Ok(None) => {
            count_request(&guard, ANONYMOUS_USER, &request);
            next.run(request).await
        }
        Err(error) => {
            tracing::debug!(
                method = %request.method(),
                path = request.uri().path(),
                code = error.code,
                "kube-sim refused a request"
            );
            error.into_response()
        }
    }
}

/// The `user` label of requests that carried no token where none is
/// needed (authentication off, or a path open to anyone).
const ANONYMOUS_USER: &str = "system:anonymous";

/// Counts a Kubernetes API request that passed the guard under its user
/// (`kube_sim_user_requests_total`).
fn count_request(guard: &Guard, user: &str, request: &Request) {
    if let Some(info) = super::faults::RequestInfo::from_parts(request.method(), request.uri()) {
        guard
            .app
            .metrics
            .user_request(user, info.verb.as_str(), &info.label());
    }
}

/// The caller a request may proceed as (`None`: authentication is off), or
/// the error it gets.
fn check(guard: &Guard, request: &Request) -> Result<Option<UserInfo>, ApiError> {
    let headers = request.headers();
    let uri = request.uri();
    let host = security::request_host(headers, uri).unwrap_or_default();
    if !security::host_is_loopback(host) {
        return Err(ApiError::misdirected(format!(
            "kube-sim answers only requests addressed to 127.0.0.1, [::1] or localhost; Host {host:?} is refused (DNS rebinding defence)"
        )));
    }
    let Some(admin_token) = &guard.admin_token else {
        return Ok(None);
    };
    let authenticated = match security::credential(headers) {
        Credential::None if security::anonymous_may(request.method(), uri.path()) => {
            return Ok(None);
        }
        Credential::None | Credential::Unusable => return Err(ApiError::unauthorized()),
        Credential::Bearer(token) if security::token_matches(admin_token, token) => admin(),
        Credential::Bearer(token) => authenticate(guard, token)?,
    };
    let caller = impersonate(guard, authenticated, headers)?;
    authorize(guard, &caller, request)?;
    Ok(Some(caller))
}

/// A ServiceAccount token from TokenRequest or from a ServiceAccount-token
/// Secret (for the API's own audience), or a static token.
fn authenticate(guard: &Guard, token: &str) -> Result<UserInfo, ApiError> {
    let store = &guard.app.store;
    match super::tokens::review_token(store, &guard.app.tokens, token, &[]) {
        Review::Authenticated { user, .. } => {
            let mut groups = user.groups;
            if !groups.iter().any(|g| g == "system:authenticated") {
                groups.push("system:authenticated".into());
            }
            Ok(UserInfo {
                username: user.username,
                groups,
            })
        }
        Review::Rejected(_) => Err(ApiError::unauthorized()),
    }
}

/// `Impersonate-User`/`Impersonate-Group` (kubectl `--as`): under RBAC the
/// caller needs the `impersonate` verb on the user (a ServiceAccount user:
/// on the `serviceaccounts` object) and on each group, as kube-apiserver
/// checks; the request then proceeds as the impersonated user.
fn impersonate(
    guard: &Guard,
    caller: UserInfo,
    headers: &axum::http::HeaderMap,
) -> Result<UserInfo, ApiError> {
    let Some(target) = super::reviews::impersonated(headers) else {
        return Ok(caller);
    };
    if guard.authorization == Authorization::Rbac {
        let policy = super::reviews::policy(&guard.app.store);
        let mut asks = Vec::new();
        match target.username.strip_prefix("system:serviceaccount:") {
            Some(rest) => {
                let (namespace, name) = rest.split_once(':').unwrap_or((rest, ""));
                asks.push(("serviceaccounts", name.to_string(), namespace.to_string()));
            }
            None => asks.push(("users", target.username.clone(), String::new())),
        }
        for group in headers
            .get_all("impersonate-group")
            .iter()
            .filter_map(|v| v.to_str().ok())
        {
            asks.push(("groups", group.to_string(), String::new()));
        }
        for (resource, name, namespace) in asks {
            let ask = rbac::Request::Resource {
                verb: "impersonate".into(),
                group: String::new(),
                resource: resource.into(),
                subresource: String::new(),
                name: name.clone(),
                namespace,
            };
            if !rbac::authorize(&policy, &caller, &ask).allowed {
                return Err(ApiError::forbidden_request(
                    "",
                    resource,
                    &name,
                    &security::denial_sentence(&caller, &ask),
                ));
            }
        }
    }
    Ok(target)
}

fn authorize(guard: &Guard, caller: &UserInfo, request: &Request) -> Result<(), ApiError> {
    if guard.authorization != Authorization::Rbac {
        return Ok(());
    }
    let attributes = security::request_attributes(request.method(), request.uri());
    if security::granted_to_every_authenticated_user(&attributes) {
        return Ok(());
    }
    let policy = super::reviews::policy(&guard.app.store);
    let second = security::also_required(&attributes);
    let denied = std::iter::once(attributes)
        .chain(second)
        .find(|check| !rbac::authorize(&policy, caller, check).allowed);
    let Some(attributes) = denied else {
        return Ok(());
    };
    let sentence = security::denial_sentence(caller, &attributes);
    Err(match &attributes {
        rbac::Request::Resource {
            group,
            resource,
            name,
            ..
        } => ApiError::forbidden_request(group, resource, name, &sentence),
        rbac::Request::NonResource { .. } => ApiError::forbidden_request("", "", "", &sentence),
    })
}
