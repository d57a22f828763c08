//! `fieldValidation`: what a write does with fields its type does not know
//! and with fields a JSON body sets twice, as kube-apiserver does.
//!
//! - `Strict` refuses the write (`strict decoding error: unknown field
//!   "spec.replica"`),
//! - `Warn` (the server's default when a request names none) drops them and
//!   answers with one `Warning` header per field,
//! - `Ignore` drops them silently.
//!
//! Everything here is pure: the store finds the fields, the HTTP layer
//! turns the collected warnings into headers.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// How a write treats unknown and duplicate fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    /// Dropped without a word. kube-sim's own writes (kubelet, garbage
    /// collection) use this: nobody reads their warnings.
    #[default]
    Ignore,
    /// Dropped, each reported as a `Warning` header.
    Warn,
    /// The write is refused.
    Strict,
}

impl FieldValidation {
    /// The mode of a request's `fieldValidation` value; absent or empty is
    /// the server's default, `Warn`. Unknown values are refused earlier
    /// (`Query::check_write_options`).
    pub fn from_query(value: Option<&str>) -> Self {
        match value {
            Some("Strict") => Self::Strict,
            Some("Ignore") => Self::Ignore,
            _ => Self::Warn,
        }
    }
}

/// Warnings a write collected for its answer's `Warning` headers. Shared by
/// the clones of one request's parameters, so the store can add to it from
/// inside a write and the HTTP layer reads it afterwards.
#[derive(Debug, Clone, Default)]
pub struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    pub fn push(&self, text: String) {
        self.0.lock().push(text);
    }

    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock())
    }
}

/// One problem the decoder found, in the real server's words.
pub fn unknown_field(path: &str) -> String {
    format!("unknown field \"{path}\"")
}

pub fn duplicate_field(path: &str) -> String {
    format!("duplicate field \"{path}\"")
}

/// The message of a create or replace refused by `Strict`:
/// `ConfigMap in version "v1" cannot be handled as a ConfigMap: strict
/// decoding error: unknown field "dataa"`.
pub fn strict_decoding_message(kind: &str, version: &str, problems: &[String]) -> String {
    format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        problems.join(", ")
    )
}

/// The value of one `Warning` header (RFC 7234 form, code 299, no agent),
/// with the text quoted as the real server quotes it.
pub fn warning_header(text: &str) -> String {
    let escaped = text.replace('\\', "\\\\").replace('"', "\\\"");
    format!("299 - \"{escaped}\"")
}

/// The paths of fields present in `input` but missing from `decoded`, its
/// decoded-and-encoded form: what a typed decode dropped. A `null` in the
/// input is not a field (decoders treat it as absent). Paths are written
/// `spec.containers[0].imagee`, sorted.
pub fn dropped_fields(input: &Value, decoded: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk_dropped(input, decoded, &mut Vec::new(), &mut found);
    found.sort();
    found
}

/// One step of a path into a document: an object key or an array index.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The path is kept as steps and only written out for a dropped field:
/// a write's body has thousands of kept fields and a handful (usually no)
/// dropped ones.
fn walk_dropped<'a>(
    input: &'a Value,
    decoded: &Value,
    path: &mut Vec<Step<'a>>,
    found: &mut Vec<String>,
) {
    match (input, decoded) {
        (Value::Object(input), Value::Object(decoded)) => {
            for (key, value) in input {
                match decoded.get(key) {
                    Some(kept) => {
                        path.push(Step::Key(key));
                        walk_dropped(value, kept, path, found);
                        path.pop();
                    }
                    None if value.is_null() => {}
                    None => {
                        path.push(Step::Key(key));
                        found.push(path_text(path));
                        path.pop();
                    }
                }
            }
        }
        (Value::Array(input), Value::Array(decoded)) => {
            for (i, (value, kept)) in input.iter().zip(decoded).enumerate() {
                path.push(Step::Index(i));
                walk_dropped(value, kept, path, found);
                path.pop();
            }
        }
        _ => {}
    }
}

/// `spec.containers[0].imagee`.
fn path_text(path: &[Step<'_>]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            Step::Index(i) => text.push_str(&format!("[{i}]")),
        }
    }
    text
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The paths of object keys a JSON document sets more than once, in
/// document order (`metadata.labels.a`). A document that is not valid JSON
/// has none here; its decoding error is reported elsewhere.
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let seed = DuplicateScan {
        path: String::new(),
        found: &mut found,
    };
    if seed.deserialize(&mut deserializer).is_err() {
        return Vec::new();
    }
    found
}

/// Walks one JSON value, recording keys seen twice in any object.
struct DuplicateScan<'a> {
    path: String,
    found: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for DuplicateScan<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DuplicateScan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = child_path(&self.path, &key);
            if !seen.insert(key) {
                self.found.push(path.clone());
            }
            map.next_value_seed(DuplicateScan {
                path,
                found: self.found,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            let path = format!("{}[{index}]", self.path);
            let item = DuplicateScan {
                path,
                found: self.found,
            };
            if seq.next_element_seed(item)?.is_none() {
                return Ok(());
            }
            index += 1;
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_field_the_typed_decode_dropped_is_reported_by_its_path() {
        let input = json!({
            "metadata": {"name": "a", "foo": 1},
            "spec": {"containers": [{"name": "c", "imagee": "x"}], "replica": 3},
            "dropped_null": null,
        });
        let decoded = json!({
            "metadata": {"name": "a"},
            "spec": {"containers": [{"name": "c"}]},
        });
        assert_eq!(
            dropped_fields(&input, &decoded),
            ["metadata.foo", "spec.containers[0].imagee", "spec.replica"]
        );
    }

    #[test]
    fn a_decode_that_keeps_every_field_reports_nothing() {
        let value = json!({"a": {"b": [1, {"c": "d"}]}, "e": {}});
        assert!(dropped_fields(&value, &value).is_empty());
    }

    #[test]
    fn keys_set_twice_are_reported_in_document_order_at_any_depth() {
        let body = br#"{"metadata":{"labels":{"a":"b","a":"c"}},"spec":{"containers":[{"image":"i","image":"j"}]},"x":1,"x":2}"#;
        assert_eq!(
            duplicate_fields(body),
            ["metadata.labels.a", "spec.containers[0].image", "x"]
        );
    }

    #[test]
    fn a_body_that_is_not_json_has_no_duplicates_here() {
        assert!(duplicate_fields(b"{not json").is_empty());
        assert!(duplicate_fields(br#"{"a":1}"#).is_empty());
    }

    #[test]
    fn the_strict_message_names_kind_version_and_every_problem() {
        let problems = [unknown_field("dataa"), duplicate_field("data")];
        assert_eq!(
            strict_decoding_message("ConfigMap", "v1", &problems),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"dataa\", duplicate field \"data\""
        );
    }

    #[test]
    fn a_warning_header_quotes_the_text() {
        assert_eq!(
            warning_header(&unknown_field("spec.bb")),
            r#"299 - "unknown field \"spec.bb\"""#
        );
    }

    #[test]
    fn the_default_mode_of_a_request_is_warn() {
        assert_eq!(FieldValidation::from_query(None), FieldValidation::Warn);
        assert_eq!(FieldValidation::from_query(Some("")), FieldValidation::Warn);
        assert_eq!(
            FieldValidation::from_query(Some("Strict")),
            FieldValidation::Strict
        );
        assert_eq!(
            FieldValidation::from_query(Some("Ignore")),
            FieldValidation::Ignore
        );
    }
}
