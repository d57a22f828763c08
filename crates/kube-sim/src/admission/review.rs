//! `admission.k8s.io/v1` AdmissionReview: the request kube-sim sends a
//! webhook, the checks its answer must pass, and the errors a denial or a
//! failed call become, worded as kube-apiserver words them. Pure.

use serde_json::{Value, json};

use super::webhooks::Attributes;
use crate::error::ApiError;
use crate::rbac::UserInfo;

pub(crate) const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// What one call sends.
pub(crate) struct ReviewRequest<'a> {
    pub uid: &'a str,
    pub attrs: &'a Attributes,
    /// The version the webhook asked for (its rules' version under
    /// `matchPolicy: Equivalent`); objects are sent at it.
    pub version: &'a str,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub user: Option<&'a UserInfo>,
    pub dry_run: bool,
    /// CreateOptions, UpdateOptions or DeleteOptions, as the request had them.
    pub options: Value,
}

/// `object` with its `apiVersion` at `version` (kube-sim's versions of one
/// resource differ only there).
fn at_version(object: &Value, attrs: &Attributes, version: &str) -> Value {
    let mut object = object.clone();
    if version != attrs.version
        && let Some(map) = object.as_object_mut()
    {
        let api_version = if attrs.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", attrs.group)
        };
        map.insert("apiVersion".into(), Value::String(api_version));
    }
    object
}

/// The AdmissionReview document of one call.
pub(crate) fn request_document(r: &ReviewRequest<'_>) -> Value {
    let a = r.attrs;
    let gvk = |version: &str| json!({"group": a.group, "version": version, "kind": a.kind});
    let gvr = |version: &str| json!({"group": a.group, "version": version, "resource": a.resource});
    let mut request = json!({
        "uid": r.uid,
        "kind": gvk(r.version),
        "resource": gvr(r.version),
        "requestKind": gvk(&a.version),
        "requestResource": gvr(&a.version),
        "operation": a.operation.as_str(),
        "userInfo": match r.user {
            Some(user) => json!({"username": user.username, "groups": user.groups}),
            None => json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]}),
        },
        "object": r.object.map(|o| at_version(o, a, r.version)),
        "oldObject": r.old_object.map(|o| at_version(o, a, r.version)),
        "dryRun": r.dry_run,
        "options": r.options,
    });
    if let Some(map) = request.as_object_mut() {
        // omitempty fields, as the real server leaves them out
        for (key, value) in [
            ("subResource", &a.subresource),
            ("requestSubResource", &a.subresource),
            ("name", &a.name),
            ("namespace", &a.namespace),
        ] {
            if !value.is_empty() {
                map.insert(key.into(), Value::String(value.clone()));
            }
        }
    }
    json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "request": request})
}

/// A webhook's answer, checked.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub allowed: bool,
    /// `response.status`, kept for a denial.
    pub status: Option<Value>,
    /// The JSON patch, decoded from base64.
    pub patch: Option<Vec<u8>>,
    pub warnings: Vec<String>,
}

/// Reads a webhook's answer; the error is what "received invalid webhook
/// response" goes on to say.
pub(crate) fn read_response(body: &[u8], uid: &str, mutating: bool) -> Result<Verdict, String> {
    let review: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = review
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if api_version != REVIEW_API_VERSION || kind != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of {REVIEW_API_VERSION}, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        ));
    }
    let response = review
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("webhook response was absent")?;
    let answered_uid = response
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if answered_uid != uid {
        return Err(format!(
            "expected response.uid={uid:?}, got {answered_uid:?}"
        ));
    }
    let patch = match response.get("patch").and_then(Value::as_str) {
        None | Some("") => None,
        Some(_) if !mutating => {
            return Err("validating webhook may not return response.patch".into());
        }
        Some(encoded) => {
            use base64::Engine;
            match response.get("patchType").and_then(Value::as_str) {
                None | Some("") => {
                    return Err("webhook returned response.patch but not response.patchType".into());
                }
                Some("JSONPatch") => {}
                Some(other) => {
                    return Err(format!(
                        "webhook returned invalid response.patchType of {other:?}"
                    ));
                }
            }
            Some(
                base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|e| format!("response.patch is not base64: {e}"))?,
            )
        }
    };
    Ok(Verdict {
        allowed: response
            .get("allowed")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        status: response.get("status").filter(|s| s.is_object()).cloned(),
        patch,
        warnings: response
            .get("warnings")
            .and_then(Value::as_array)
            .map(|w| {
                w.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// The Status reasons apimachinery defines. A webhook's own reason outside
/// them is left out of the error (kube-sim's errors carry static reasons;
/// kube-apiserver passes any reason on).
fn known_reason(reason: &str) -> &'static str {
    const REASONS: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "StoreReadError",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    REASONS
        .iter()
        .find(|r| **r == reason)
        .copied()
        .unwrap_or("")
}

/// The error a denial becomes: the webhook's status, at least 400, its
/// message prefixed with who denied.
pub(crate) fn denial(webhook: &str, status: Option<&Value>) -> ApiError {
    let empty = json!({});
    let status = status.unwrap_or(&empty);
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .unwrap_or(400);
    let message = status
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let reason = status
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let message = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    ApiError {
        code,
        reason: known_reason(reason),
        message,
        details: status.get("details").filter(|d| d.is_object()).cloned(),
        retry_after: None,
    }
}

/// A call that failed (no answer, a bad answer, a patch that does not
/// apply) under `failurePolicy: Fail`: kube-apiserver's internal error.
pub(crate) fn call_failure(webhook: &str, why: &str) -> ApiError {
    let text = format!("failed calling webhook {webhook:?}: {why}");
    ApiError {
        code: 500,
        reason: "InternalError",
        message: format!("Internal error occurred: {text}"),
        details: Some(json!({"causes": [{"message": text}]})),
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::webhooks::Operation;

    fn attrs() -> Attributes {
        Attributes {
            operation: Operation::Create,
            group: "example.com".into(),
            version: "v1".into(),
            resource: "things".into(),
            subresource: String::new(),
            kind: "Thing".into(),
            namespaced: true,
            namespace: "team".into(),
            name: String::new(),
            served_versions: vec!["v1".into(), "v2".into()],
        }
    }

    #[test]
    fn the_request_carries_the_object_at_the_version_the_webhook_asked_for() {
        let a = attrs();
        let object = json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"generateName": "t-"}});
        let doc = request_document(&ReviewRequest {
            uid: "u1",
            attrs: &a,
            version: "v2",
            object: Some(&object),
            old_object: None,
            user: None,
            dry_run: true,
            options: json!({"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}),
        });
        let r = &doc["request"];
        assert_eq!(r["object"]["apiVersion"], "example.com/v2");
        assert_eq!(r["kind"]["version"], "v2");
        assert_eq!(r["requestKind"]["version"], "v1");
        assert_eq!(r["oldObject"], Value::Null);
        assert_eq!(r["dryRun"], true);
        assert!(r.get("name").is_none(), "an empty name is left out");
        assert_eq!(r["namespace"], "team");
    }

    fn response(body: Value) -> Result<Verdict, String> {
        read_response(body.to_string().as_bytes(), "u1", true)
    }

    #[test]
    fn an_answer_for_another_uid_or_of_another_kind_is_invalid() {
        let wrong_uid = response(
            json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": {"uid": "u2", "allowed": true}}),
        );
        assert_eq!(
            wrong_uid.err().as_deref(),
            Some("expected response.uid=\"u1\", got \"u2\"")
        );
        let wrong_kind = response(
            json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "response": {"uid": "u1", "allowed": true}}),
        );
        assert!(wrong_kind.is_err());
        assert!(read_response(b"<html>", "u1", true).is_err());
    }

    #[test]
    fn a_patch_needs_its_type() {
        let patch = "W10="; // []
        let untyped = response(
            json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": {"uid": "u1", "allowed": true, "patch": patch}}),
        );
        assert!(untyped.is_err());
        let typed = response(
            json!({"apiVersion": REVIEW_API_VERSION, "kind": "AdmissionReview", "response": {"uid": "u1", "allowed": true, "patch": patch, "patchType": "JSONPatch", "warnings": ["w"]}}),
        );
        let verdict = typed.unwrap_or_default();
        assert_eq!(verdict.patch.as_deref(), Some(&b"[]"[..]));
        assert_eq!(verdict.warnings, ["w"]);
        assert!(verdict.allowed);
    }

    #[test]
    fn a_denial_keeps_the_webhooks_code_but_never_below_400() {
        let forbidden = denial(
            "v.example.com",
            Some(&json!({"code": 403, "reason": "Forbidden", "message": "no"})),
        );
        assert_eq!(forbidden.code, 403);
        assert_eq!(forbidden.reason, "Forbidden");
        assert_eq!(
            forbidden.message,
            "admission webhook \"v.example.com\" denied the request: no"
        );
        let bare = denial("v.example.com", None);
        assert_eq!(bare.code, 400);
        assert_eq!(
            bare.message,
            "admission webhook \"v.example.com\" denied the request without explanation"
        );
    }
}
