//! `TokenRequest` (`POST .../serviceaccounts/{name}/token`) and
//! `TokenReview` (`POST /apis/authentication.k8s.io/v1/tokenreviews`),
//! answered from [`crate::tokens::Tokens`]. Like the access reviews, a
//! TokenReview is computed and never stored.

use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use crate::error::{ApiError, Cause};
use crate::store::Store;
use crate::tokens::{
    DEFAULT_AUDIENCE, DEFAULT_EXPIRATION_SECONDS, MIN_EXPIRATION_SECONDS, Review, TokenUser, Tokens,
};

enum Call {
    Request { namespace: String, name: String },
    Review,
}

fn call_at(path: &str) -> Option<Call> {
    let path = path.trim_end_matches('/');
    if path == "/apis/authentication.k8s.io/v1/tokenreviews" {
        return Some(Call::Review);
    }
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let (namespace, rest) = rest.split_once('/')?;
    let name = rest
        .strip_prefix("serviceaccounts/")?
        .strip_suffix("/token")?;
    (!name.contains('/')).then(|| Call::Request {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

/// Answers a token call, or `None` when the path is not one.
pub fn answer(
    store: &Store,
    tokens: &Tokens,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Result<Response, ApiError>> {
    let call = call_at(path)?;
    if *method != Method::POST {
        return Some(Err(ApiError::method_not_allowed()));
    }
    Some(match call {
        Call::Request { namespace, name } => {
            request(store, tokens, &namespace, &name, headers, body)
        }
        Call::Review => review(store, tokens, headers, body),
    })
}

/// Reviews a token kube-sim accepts: a static or TokenRequest token, else
/// the token of a filled ServiceAccount-token Secret (see
/// `workloads::token_secrets`), valid for the API's own audience only.
pub(super) fn review_token(
    store: &Store,
    tokens: &Tokens,
    token: &str,
    audiences: &[String],
) -> Review {
    let review = tokens.review(token, audiences, jiff::Timestamp::now(), |ns, name| {
        account_uid(store, ns, name)
    });
    if !matches!(&review, Review::Rejected(why) if why == "invalid bearer token") {
        return review;
    }
    let Some(user) = secret_token_user(store, token) else {
        return review;
    };
    if !audiences.is_empty() && !audiences.iter().any(|a| a == DEFAULT_AUDIENCE) {
        return Review::Rejected("invalid bearer token, token audiences is invalid".into());
    }
    Review::Authenticated {
        user,
        audiences: vec![DEFAULT_AUDIENCE.to_string()],
    }
}

/// Who the token of a ServiceAccount-token Secret speaks for, while the
/// Secret holds it and its account still has the uid it recorded.
fn secret_token_user(store: &Store, token: &str) -> Option<TokenUser> {
    use crate::workloads::token_secrets::{
        ACCOUNT_NAME_ANNOTATION, ACCOUNT_UID_ANNOTATION, TOKEN_SECRET_TYPE,
    };
    if token.is_empty() {
        return None;
    }
    use base64::Engine;
    let wanted = base64::engine::general_purpose::STANDARD.encode(token);
    let rt = store.resolve("", "v1", "secrets")?;
    let page = store
        .list(&rt, None, &crate::store::ListOptions::default())
        .ok()?;
    page.items.iter().find_map(|object| {
        let secret = object.value();
        if secret.get("type").and_then(Value::as_str) != Some(TOKEN_SECRET_TYPE) {
            return None;
        }
        let stored = secret.pointer("/data/token").and_then(Value::as_str)?;
        if !crate::security::token_matches(stored, &wanted) {
            return None;
        }
        let annotations = secret.pointer("/metadata/annotations")?;
        let account = annotations.get(ACCOUNT_NAME_ANNOTATION)?.as_str()?;
        let recorded_uid = annotations.get(ACCOUNT_UID_ANNOTATION)?.as_str()?;
        let namespace = secret.pointer("/metadata/namespace")?.as_str()?;
        (account_uid(store, namespace, account)? == recorded_uid).then(|| TokenUser {
            username: format!("system:serviceaccount:{namespace}:{account}"),
            uid: recorded_uid.to_string(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
            ],
        })
    })
}

pub(super) fn account_uid(store: &Store, namespace: &str, name: &str) -> Option<String> {
    let rt = store.resolve("", "v1", "serviceaccounts")?;
    store
        .get(&rt, Some(namespace), name)
        .ok()
        .map(|object| object.uid.clone())
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn request(
    store: &Store,
    tokens: &Tokens,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let mut doc = super::request_object(headers, body)?;
    let uid = account_uid(store, namespace, name)
        .ok_or_else(|| ApiError::not_found("", "serviceaccounts", name))?;
    let spec = doc.get("spec").cloned().unwrap_or_else(|| json!({}));
    let expiration = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(value) => value
            .as_i64()
            .ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
    };
    if expiration < MIN_EXPIRATION_SECONDS {
        // The real server names the body's object, which rarely has a name.
        let named = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            named,
            vec![Cause::invalid(
                "spec.expirationSeconds",
                &Value::from(expiration),
                "may not specify a duration less than 10 minutes",
            )],
        ));
    }
    let mut audiences = strings(spec.get("audiences"));
    if audiences.is_empty() {
        audiences = vec![DEFAULT_AUDIENCE.to_string()];
    }
    let now = jiff::Timestamp::now();
    let expires = now
        .checked_add(jiff::SignedDuration::from_secs(expiration))
        .map_err(|_| ApiError::bad_request("spec.expirationSeconds is too large"))?;
    let token = tokens.issue(namespace, name, &uid, audiences.clone(), expires);
    doc["apiVersion"] = json!("authentication.k8s.io/v1");
    doc["kind"] = json!("TokenRequest");
    doc["metadata"] = json!({
        "name": name,
        "namespace": namespace,
        "creationTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    doc["spec"] = json!({
        "audiences": audiences,
        "expirationSeconds": expiration,
        "boundObjectRef": spec.get("boundObjectRef").cloned().unwrap_or(Value::Null),
    });
    doc["status"] = json!({
        "token": token,
        "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    });
    Ok(super::json_response(StatusCode::CREATED, &doc))
}

fn review(
    store: &Store,
    tokens: &Tokens,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let mut doc = super::request_object(headers, body)?;
    let spec = doc.get("spec").cloned().unwrap_or_else(|| json!({}));
    let token = spec
        .get("token")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let audiences = strings(spec.get("audiences"));
    let status = match review_token(store, tokens, token, &audiences) {
        Review::Authenticated { user, audiences } => {
            let mut groups = user.groups.clone();
            if !groups.iter().any(|g| g == "system:authenticated") {
                groups.push("system:authenticated".into());
            }
            json!({
                "authenticated": true,
                "user": {"username": user.username, "uid": user.uid, "groups": groups},
                "audiences": audiences,
            })
        }
        Review::Rejected(error) => json!({"user": {}, "error": error}),
    };
    doc["apiVersion"] = json!("authentication.k8s.io/v1");
    doc["kind"] = json!("TokenReview");
    if doc.get("metadata").is_none() {
        doc["metadata"] = json!({"creationTimestamp": null});
    }
    doc["status"] = status;
    Ok(super::json_response(StatusCode::CREATED, &doc))
}
