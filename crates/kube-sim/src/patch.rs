//! Patch formats the server accepts, applied to a JSON document.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    /// RFC 7386 JSON merge patch.
    Merge,
    /// RFC 6902 JSON patch.
    Json,
    /// Strategic merge patch (built-in kinds only).
    Strategic,
    /// Server-side apply.
    Apply,
}

pub const MERGE: &str = "application/merge-patch+json";
pub const JSON: &str = "application/json-patch+json";
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
pub const APPLY: &str = "application/apply-patch+yaml";

impl PatchKind {
    pub fn from_content_type(content_type: &str) -> Option<Self> {
        let base = content_type.split(';').next().unwrap_or_default().trim();
        match base {
            MERGE => Some(Self::Merge),
            JSON => Some(Self::Json),
            STRATEGIC => Some(Self::Strategic),
            APPLY | "application/apply-patch+json" => Some(Self::Apply),
            _ => None,
        }
    }
}

/// Applies an RFC 6902 patch. A `test` against a missing path compares with
/// `null`, as kube-apiserver does (kube-runtime's finalizer helper relies on
/// it to assert "no finalizers yet").
pub fn apply_json_patch(doc: &mut Value, patch_body: &[u8]) -> Result<(), ApiError> {
    let ops: Vec<Value> = serde_json::from_slice(patch_body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    for (index, op) in ops.into_iter().enumerate() {
        let is_test = op.get("op").and_then(Value::as_str) == Some("test");
        if is_test {
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            let expected = op.get("value").cloned().unwrap_or(Value::Null);
            if doc.pointer(path).is_none() {
                if expected.is_null() {
                    continue;
                }
                return Err(test_failed(index, path));
            }
        }
        let single: json_patch::Patch = serde_json::from_value(Value::Array(vec![op]))
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
        json_patch::patch(doc, &single.0).map_err(|e| match e.kind {
            json_patch::PatchErrorKind::TestFailed => test_failed(index, &e.path.to_string()),
            _ => ApiError::invalid_patch(format!(
                "the server rejected our request due to an error in our request: {e}"
            )),
        })?;
    }
    Ok(())
}

fn test_failed(index: usize, path: &str) -> ApiError {
    ApiError::invalid_patch(format!(
        "the server rejected our request due to an error in our request: test operation {index} failed at path {path:?}"
    ))
}

/// Applies an RFC 7386 merge patch; the patch must be a JSON object.
pub fn apply_merge_patch(doc: &mut Value, patch_body: &[u8]) -> Result<(), ApiError> {
    let patch: Value = serde_json::from_slice(patch_body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if !patch.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: a merge patch must be a JSON object",
        ));
    }
    json_patch::merge(doc, &patch);
    Ok(())
}

impl ApiError {
    /// A patch that could not be applied is 422, as the real server answers.
    pub fn invalid_patch(message: impl Into<String>) -> Self {
        let mut err = ApiError::bad_request(message);
        err.code = 422;
        err.reason = "Invalid";
        err
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn test_on_a_missing_path_compares_with_null() {
        let mut doc = json!({"metadata": {"name": "a"}});
        let patch = br#"[{"op":"test","path":"/metadata/finalizers","value":null},
                         {"op":"add","path":"/metadata/finalizers","value":["x"]}]"#;
        apply_json_patch(&mut doc, patch).unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["x"]));
        // Now the path exists, so the same test fails.
        let err = apply_json_patch(&mut doc, patch).unwrap_err();
        assert_eq!(err.code, 422);
    }

    #[test]
    fn merge_patch_null_removes_and_objects_merge() {
        let mut doc = json!({"a": {"b": 1, "c": 2}, "d": [1, 2]});
        apply_merge_patch(&mut doc, br#"{"a": {"b": null, "e": 3}, "d": [3]}"#).unwrap();
        assert_eq!(doc, json!({"a": {"c": 2, "e": 3}, "d": [3]}));
    }

    #[test]
    fn malformed_patches_are_bad_requests() {
        let mut doc = json!({});
        assert_eq!(apply_merge_patch(&mut doc, b"[1]").unwrap_err().code, 400);
        assert_eq!(apply_json_patch(&mut doc, b"{").unwrap_err().code, 400);
        assert_eq!(
            apply_json_patch(&mut doc, br#"[{"op":"remove","path":"/nope"}]"#)
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn content_types_map_to_patch_kinds() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchKind::Merge)
        );
        assert_eq!(PatchKind::from_content_type("text/plain"), None);
    }
}
