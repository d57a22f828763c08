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

/// Most operations one JSON patch may hold: kube-apiserver's
/// `maxJSONPatchOperations`, checked before any operation is applied.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Most bytes the `copy` operations of one JSON patch may add together:
/// kube-apiserver's `JSONPatchMaxCopyBytes` (3 MiB, twice etcd's 1.5 MB
/// request limit), which it hands to json-patch as its accumulated copy
/// size limit. Without it a copy of a value into itself doubles the
/// document at each step: a 2 KB patch of 25 such ops asks for gigabytes.
pub const MAX_JSON_PATCH_COPY_BYTES: u64 = 3 * 1024 * 1024;

/// Applies an RFC 6902 patch. A `test` against a missing path compares with
/// `null`, as kube-apiserver does (kube-runtime's finalizer helper relies on
/// it to assert "no finalizers yet").
pub fn apply_json_patch(doc: &mut Value, patch_body: &[u8]) -> Result<(), ApiError> {
    let ops: Vec<Value> = serde_json::from_slice(patch_body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::too_large(format!(
            "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    let mut copied: u64 = 0;
    for (index, op) in ops.into_iter().enumerate() {
        if op.get("op").and_then(Value::as_str) == Some("copy") {
            charge_copy(doc, &op, &mut copied)?;
        }
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

/// Adds the size of the value a `copy` would duplicate to `copied`, and
/// refuses the op, before it allocates anything, once the total passes
/// [`MAX_JSON_PATCH_COPY_BYTES`]. The size is that of the value's compact
/// JSON, as json-patch measures it. A `from` that does not resolve is left
/// to the patch itself to report.
fn charge_copy(doc: &Value, op: &Value, copied: &mut u64) -> Result<(), ApiError> {
    let Some(value) = op
        .get("from")
        .and_then(Value::as_str)
        .and_then(|from| doc.pointer(from))
    else {
        return Ok(());
    };
    let budget = MAX_JSON_PATCH_COPY_BYTES.saturating_sub(*copied);
    *copied = copied.saturating_add(json_size_up_to(value, budget));
    if *copied > MAX_JSON_PATCH_COPY_BYTES {
        return Err(ApiError::invalid_patch(format!(
            "the server rejected our request due to an error in our request: Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
        )));
    }
    Ok(())
}

/// The length of `value`'s compact JSON, counted without building it, and
/// given up just past `cap`: the caller only needs to know it is over, and
/// a value worth refusing is one too big to walk for nothing.
fn json_size_up_to(value: &Value, cap: u64) -> u64 {
    struct Counter {
        bytes: u64,
        cap: u64,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bytes = self.bytes.saturating_add(buf.len() as u64);
            if self.bytes > self.cap {
                // Stops the serializer; the count so far is the answer.
                return Err(std::io::Error::other("over the cap"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter {
        bytes: 0,
        cap: cap.saturating_add(1),
    };
    // An error here is only the counter stopping early.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.bytes
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
    fn a_json_patch_with_more_than_ten_thousand_operations_is_refused_before_any_applies() {
        let op = r#"{"op":"add","path":"/n","value":1}"#;
        let body = |count: usize| format!("[{}]", vec![op; count].join(","));
        let mut doc = json!({});
        let err = apply_json_patch(&mut doc, body(10_001).as_bytes()).unwrap_err();
        assert_eq!((err.code, err.reason), (413, "RequestEntityTooLarge"));
        assert_eq!(
            err.message,
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
        assert_eq!(doc, json!({}), "no operation applied");
        apply_json_patch(&mut doc, body(10_000).as_bytes()).unwrap();
        assert_eq!(doc, json!({"n": 1}));
    }

    #[test]
    fn copies_of_a_value_into_itself_are_refused_once_they_add_more_than_three_mebibytes() {
        // Each copy appends the whole array to itself, doubling it from
        // about 1 KiB: after k copies about 1 KiB * (2^k - 1) has been
        // copied, so the 11th copy (~2 MiB in all) passes and the 12th
        // (~4 MiB) is refused.
        let kib = "x".repeat(1022); // plus two quotes: 1024 bytes of JSON
        let mut ops = vec![json!({"op": "add", "path": "/a", "value": [kib]})];
        for _ in 0..13 {
            ops.push(json!({"op": "copy", "from": "/a", "path": "/a/-"}));
        }
        let mut doc = json!({});
        let err = apply_json_patch(&mut doc, &serde_json::to_vec(&ops).unwrap()).unwrap_err();
        assert_eq!((err.code, err.reason), (422, "Invalid"));
        assert!(
            err.message
                .contains("Unable to complete the copy, the accumulated size increase of copy is")
                && err.message.ends_with("exceeding the limit 3145728"),
            "{}",
            err.message
        );
        // The refused copy never ran: the first value and 11 copies.
        assert_eq!(doc["a"].as_array().map(Vec::len), Some(12));
    }

    #[test]
    fn copies_within_the_limit_still_apply() {
        let mut doc = json!({"a": {"b": 1}});
        apply_json_patch(
            &mut doc,
            br#"[{"op":"copy","from":"/a","path":"/c"},{"op":"copy","from":"/a/b","path":"/d"}]"#,
        )
        .unwrap();
        assert_eq!(doc, json!({"a": {"b": 1}, "c": {"b": 1}, "d": 1}));
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
