//! API errors, rendered the way kube-apiserver renders them: every failure is a
//! `meta.k8s.io/v1 Status` body with the HTTP code repeated in `code`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One field-level cause inside a `Status.details.causes` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Machine-readable reason such as `FieldValueInvalid` or `FieldValueRequired`.
    pub reason: String,
    /// Human-readable message, without the field prefix.
    pub message: String,
    /// Dotted field path, e.g. `metadata.name`.
    pub field: String,
}

impl Cause {
    /// A `FieldValueInvalid` cause with the apiserver's `Invalid value: <v>: <detail>` text.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {detail}", render_value(value)),
            field: field.into(),
        }
    }

    /// A `FieldValueInvalid` cause whose value is already rendered the way
    /// the real server prints it (Go's JSON field order for a struct).
    pub fn invalid_shown(field: impl Into<String>, shown: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {shown}: {detail}"),
            field: field.into(),
        }
    }

    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let message = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Self {
            reason: "FieldValueRequired".into(),
            message,
            field: field.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden".into(),
            message: format!("Forbidden: {detail}"),
            field: field.into(),
        }
    }

    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            reason: "FieldValueTooLong".into(),
            message: format!("Too long: may not be more than {max} bytes"),
            field: field.into(),
        }
    }

    /// The `field: message` line used inside an Invalid status message.
    pub fn line(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// Values inside messages print like Go's `%q` for strings and plainly otherwise.
pub fn render_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// An API error: HTTP status, reason and message, plus optional details.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    /// Seconds for a `Retry-After` header (used by 429 and 503 answers).
    pub retry_after: Option<u64>,
}

/// Identifies the object an error is about, for `Status.details`.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub group: &'a str,
    /// The resource (plural) for most errors, the Kind for Invalid.
    pub kind: &'a str,
    pub name: &'a str,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    fn with_target(mut self, target: Target<'_>) -> Self {
        // An empty name is left out, as kube-apiserver's omitempty does.
        let mut details = json!({ "kind": target.kind });
        if !target.name.is_empty() {
            details["name"] = json!(target.name);
        }
        if !target.group.is_empty() {
            details["group"] = json!(target.group);
        }
        self.details = Some(details);
        self
    }

    /// Resource name as kube-apiserver qualifies it in messages: `configmaps`
    /// for the core group, `leases.coordination.k8s.io` otherwise.
    fn qualified(group: &str, resource: &str) -> String {
        if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        }
    }

    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        let message = format!("{} \"{name}\" not found", Self::qualified(group, resource));
        Self::new(404, "NotFound", message).with_target(Target {
            group,
            kind: resource,
            name,
        })
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        let message = format!(
            "{} \"{name}\" already exists",
            Self::qualified(group, resource)
        );
        Self::new(409, "AlreadyExists", message).with_target(Target {
            group,
            kind: resource,
            name,
        })
    }

    /// Optimistic-concurrency failure: the caller's resourceVersion is stale.
    pub fn conflict(group: &str, resource: &str, name: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            Self::qualified(group, resource)
        );
        Self::new(409, "Conflict", message).with_target(Target {
            group,
            kind: resource,
            name,
        })
    }

    /// A conflict with a custom explanation (failed preconditions and the like).
    pub fn conflict_with(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": {why}",
            Self::qualified(group, resource)
        );
        Self::new(409, "Conflict", message).with_target(Target {
            group,
            kind: resource,
            name,
        })
    }

    /// The same error with `details.kind` naming the Kind instead of the
    /// resource: kube-apiserver's failed delete preconditions do.
    pub fn naming_kind(mut self, kind: &str) -> Self {
        if let Some(details) = self.details.as_mut() {
            details["kind"] = Value::from(kind);
        }
        self
    }

    /// 422 with one cause per field, worded like kube-apiserver:
    /// `ConfigMap "x" is invalid: metadata.name: Invalid value: ...`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let mut lines: Vec<String> = causes.iter().map(Cause::line).collect();
        lines.dedup();
        let summary = match lines.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        // The message names the kind qualified by its group, as the real
        // server prints it (`Lease.coordination.k8s.io "x" is invalid`).
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let message = format!("{qualified} \"{name}\" is invalid: {summary}");
        let causes_json: Vec<Value> = causes
            .iter()
            .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
            .collect();
        let mut err = Self::new(422, "Invalid", message).with_target(Target { group, kind, name });
        if let Some(details) = err.details.as_mut() {
            details["causes"] = Value::Array(causes_json);
        }
        err
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    /// kube-apiserver's answer to a request whose credentials it cannot
    /// authenticate (no token where one is needed, or a wrong one).
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// kube-apiserver's authorization denial (`NewForbidden`): the message
    /// names the qualified resource (and the object, when there is one)
    /// before the authorizer's sentence; `details` carries group, resource
    /// and name. A non-resource request has no resource: `forbidden: ...`.
    pub fn forbidden_request(group: &str, resource: &str, name: &str, why: &str) -> Self {
        let message = match (resource.is_empty(), name.is_empty()) {
            (true, _) => format!("forbidden: {why}"),
            (false, true) => format!("{} is forbidden: {why}", Self::qualified(group, resource)),
            (false, false) => format!(
                "{} {name:?} is forbidden: {why}",
                Self::qualified(group, resource)
            ),
        };
        let mut error = Self::new(403, "Forbidden", message);
        let mut details = serde_json::Map::new();
        if !name.is_empty() {
            details.insert("name".into(), json!(name));
        }
        if !group.is_empty() {
            details.insert("group".into(), json!(group));
        }
        if !resource.is_empty() {
            details.insert("kind".into(), json!(resource));
        }
        error.details = Some(Value::Object(details));
        error
    }

    /// 421 Misdirected Request: the `Host` names a server kube-sim is not
    /// (see `security::host_is_loopback`). Kubernetes has no reason for it.
    pub fn misdirected(message: impl Into<String>) -> Self {
        Self::new(421, "", message)
    }

    /// The generic 404 for a path that names no known resource.
    pub fn no_such_resource() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {} (got {content_type:?})",
                accepted.join(", ")
            ),
        )
    }

    /// 406: none of the client's Accept types can carry the answer.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 410 Gone, used for expired resourceVersions and continue tokens.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(413, "RequestEntityTooLarge", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 504 for a list at a resourceVersion the store has not reached, in
    /// kube-apiserver's words (it answers so once its watch cache has not
    /// caught up within 3 s; kube-sim's store is never behind, so a newer
    /// version can only come from another server, e.g. before a restart).
    pub fn resource_version_too_large(requested: u64, current: u64) -> Self {
        let mut error = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {requested}, current: {current}"),
        );
        error.details = Some(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        }));
        error
    }

    /// 429 with one cause, as an eviction a disruption budget refuses.
    pub fn too_many_requests_because(
        message: &str,
        cause_reason: &str,
        cause_message: &str,
    ) -> Self {
        let mut error = Self::new(429, "TooManyRequests", message);
        error.details =
            Some(json!({"causes": [{"reason": cause_reason, "message": cause_message}]}));
        error
    }

    /// 503, as the real server answers while it cannot serve a request.
    pub fn service_unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "ServiceUnavailable", message)
    }

    /// A 500 the real server gives without a reason: a plain error from
    /// deep in a handler (server-side apply's typed conversion) rather than
    /// one of apimachinery's classified errors.
    pub fn unclassified(message: impl Into<String>) -> Self {
        Self::new(500, "", message)
    }

    /// The `meta.k8s.io/v1 Status` document for this error.
    pub fn status_json(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty()
            && let Some(map) = status.as_object_mut()
        {
            map.remove("reason");
        }
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = self.status_json().to_string();
        let mut response = (code, body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
