//! Field errors in the shape the apiserver reports them, and the Go value
//! formatting their messages depend on.
//!
//! Every message here is rendered the way `k8s.io/apimachinery`'s field
//! errors render on a 1.33 apiserver: `<field>: <Type text>[: <value>][: <detail>]`,
//! with strings quoted the way Go's `%q` quotes them and compound values as
//! Go's `encoding/json` would print them.

use serde_json::Value;

/// The kind of a field error, one to one with the apiserver's `CauseType`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldErrorKind {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
    TypeInvalid,
}

impl FieldErrorKind {
    /// The human text that opens the message body (`Invalid value`, `Too long`, ...).
    pub fn text(self) -> &'static str {
        match self {
            FieldErrorKind::NotFound => "Not found",
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::Internal => "Internal error",
        }
    }

    /// The `StatusCause.reason` string (`FieldValueInvalid`, ...).
    pub fn cause_type(self) -> &'static str {
        match self {
            FieldErrorKind::NotFound => "FieldValueNotFound",
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::TooMany => "FieldValueTooMany",
            FieldErrorKind::Internal => "InternalError",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    /// Kinds whose body never shows the offending value.
    fn hides_value(self) -> bool {
        matches!(
            self,
            FieldErrorKind::Required
                | FieldErrorKind::Forbidden
                | FieldErrorKind::TooLong
                | FieldErrorKind::Internal
        )
    }
}

/// One validation failure at one field.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field path as the apiserver prints it: `spec.items[2].name`,
    /// `spec.labels[key]`, or `<nil>` for the object itself.
    pub field: String,
    pub kind: FieldErrorKind,
    /// The offending value; `None` when the apiserver omits it.
    pub value: Option<Value>,
    pub detail: String,
}

/// The apiserver prints a missing (root) path as `<nil>`.
pub(super) const ROOT_FIELD: &str = "<nil>";

impl FieldError {
    /// An error at `field` (an empty field prints as `<nil>`).
    pub fn new(
        field: &str,
        kind: FieldErrorKind,
        value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        let field = if field.is_empty() {
            ROOT_FIELD.to_string()
        } else {
            field.to_string()
        };
        FieldError {
            field,
            kind,
            value,
            detail: detail.into(),
        }
    }

    /// `Invalid value: <value>: <detail>`.
    pub fn invalid(field: &str, value: Value, detail: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Invalid, Some(value), detail)
    }

    /// `Required value[: <detail>]`.
    pub fn required(field: &str, detail: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Required, None, detail)
    }

    /// `Forbidden: <detail>`.
    pub fn forbidden(field: &str, detail: impl Into<String>) -> Self {
        Self::new(field, FieldErrorKind::Forbidden, None, detail)
    }

    /// `Duplicate value: <value>`.
    pub fn duplicate(field: &str, value: Value) -> Self {
        Self::new(field, FieldErrorKind::Duplicate, Some(value), "")
    }

    /// `Too long: may not be more than N bytes` (the 1.32+ wording).
    pub fn too_long(field: &str, max: u64) -> Self {
        let unit = if max == 1 { "byte" } else { "bytes" };
        Self::new(
            field,
            FieldErrorKind::TooLong,
            None,
            format!("may not be more than {max} {unit}"),
        )
    }

    /// `Too many: <actual>: must have at most N items`.
    pub fn too_many(field: &str, actual: u64, max: u64) -> Self {
        let unit = if max == 1 { "item" } else { "items" };
        Self::new(
            field,
            FieldErrorKind::TooMany,
            Some(Value::from(actual)),
            format!("must have at most {max} {unit}"),
        )
    }

    /// `Unsupported value: <v>: supported values: "a", "b"`.
    pub fn not_supported(field: &str, value: Value, supported: &[String]) -> Self {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Self::new(field, FieldErrorKind::NotSupported, Some(value), detail)
    }

    /// The message without the field, as in `StatusCause.message`.
    pub fn body(&self) -> String {
        let mut body = String::from(self.kind.text());
        if !self.kind.hides_value()
            && let Some(value) = &self.value
        {
            body.push_str(": ");
            body.push_str(&go_error_value(value));
        }
        if !self.detail.is_empty() {
            body.push_str(": ");
            body.push_str(&self.detail);
        }
        body
    }

    /// The full message, `<field>: <body>`, as in the Status message.
    pub fn message(&self) -> String {
        format!("{}: {}", self.field, self.body())
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

/// The Status message of a 422 Invalid: `<Kind> "<name>" is invalid: <errors>`.
///
/// `kind` is the qualified kind the apiserver prints (`Widget.example.com`,
/// or just the kind for the core group). One error is printed bare, several
/// are bracketed and comma separated; repeated messages are printed once,
/// as the apiserver's error aggregate does.
pub fn status_message(kind: &str, name: &str, errs: &[FieldError]) -> String {
    let mut messages: Vec<String> = Vec::with_capacity(errs.len());
    for err in errs {
        let message = err.message();
        if !messages.contains(&message) {
            messages.push(message);
        }
    }
    let head = format!("{kind} {} is invalid", go_quote(name));
    match messages.len() {
        0 => head,
        1 => format!("{head}: {}", messages[0]),
        _ => format!("{head}: [{}]", messages.join(", ")),
    }
}

/// A value as a field error prints it: Go `%v` for numbers and booleans,
/// `%q` for strings, JSON for everything else (null included).
pub(super) fn go_error_value(value: &Value) -> String {
    match value {
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number_v(n),
        Value::String(s) => go_quote(s),
        other => go_json(other),
    }
}

/// Go's `%v` of a decoded JSON number (int64, or float64 when it has a
/// fraction, an exponent or does not fit int64).
pub(super) fn go_number_v(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        i.to_string()
    } else {
        go_float_v(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Go's `%v` of a float64: the shortest representation, in exponent form
/// when the exponent is below -4 or at least 21.
pub(super) fn go_float_v(x: f64) -> String {
    go_float(x, -4, 21, true)
}

/// Shared float printer: plain decimal between the exponent bounds,
/// otherwise `d.ddde±XX`.
fn go_float(x: f64, min_exp: i32, max_exp: i32, two_digit_exp: bool) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{x:e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m.to_string(), e.parse::<i32>().unwrap_or(0)),
        None => (sci.clone(), 0),
    };
    if exp < min_exp || exp >= max_exp {
        let sign = if exp < 0 { '-' } else { '+' };
        let digits = exp.unsigned_abs();
        if two_digit_exp {
            format!("{mantissa}e{sign}{digits:02}")
        } else {
            format!("{mantissa}e{sign}{digits}")
        }
    } else {
        format!("{x}")
    }
}

/// Go's `strconv.Quote`: double quotes, with escapes for quotes,
/// backslashes, control and non-printable characters.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let code = c as u32;
                if code <= 0xffff {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `json.Marshal` of a decoded JSON value: object keys sorted, HTML
/// characters escaped, floats in Go's JSON float format.
pub(super) fn go_json(value: &Value) -> String {
    let mut out = String::new();
    write_go_json(value, &mut out);
    out
}

fn write_go_json(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else {
                // Go prints JSON floats plainly unless the exponent is below -6
                // or at least 21, and then without zero padding.
                out.push_str(&go_float(n.as_f64().unwrap_or(0.0), -6, 21, false));
            }
        }
        Value::String(s) => write_go_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(key, out);
                out.push(':');
                write_go_json(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_go_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Field path helpers, matching `field.Path`'s `Child`, `Index` and `Key`.
pub(super) mod path {
    pub(in super::super) fn child(parent: &str, name: &str) -> String {
        if parent.is_empty() {
            name.to_string()
        } else {
            format!("{parent}.{name}")
        }
    }

    pub(in super::super) fn index(parent: &str, i: usize) -> String {
        format!("{parent}[{i}]")
    }

    pub(in super::super) fn key(parent: &str, key: &str) -> String {
        format!("{parent}[{key}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn invalid_error_prints_integer_value_and_detail() {
        let err = FieldError::invalid(
            "spec.replicas",
            json!(-1),
            "spec.replicas in body should be greater than or equal to 0",
        );
        assert_eq!(
            err.message(),
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        );
    }

    #[test]
    fn required_error_omits_value() {
        assert_eq!(
            FieldError::required("spec.name", "").message(),
            "spec.name: Required value"
        );
    }

    #[test]
    fn not_supported_quotes_each_supported_value() {
        let err = FieldError::not_supported("spec.mode", json!("x"), &["a".into(), "b".into()]);
        assert_eq!(
            err.message(),
            "spec.mode: Unsupported value: \"x\": supported values: \"a\", \"b\""
        );
    }

    #[test]
    fn too_long_uses_singular_byte_for_one() {
        assert_eq!(
            FieldError::too_long("a", 1).message(),
            "a: Too long: may not be more than 1 byte"
        );
        assert_eq!(
            FieldError::too_long("a", 5).message(),
            "a: Too long: may not be more than 5 bytes"
        );
    }

    #[test]
    fn too_many_prints_actual_count() {
        assert_eq!(
            FieldError::too_many("spec.list", 4, 3).message(),
            "spec.list: Too many: 4: must have at most 3 items"
        );
        assert_eq!(
            FieldError::too_many("spec.list", 2, 1).message(),
            "spec.list: Too many: 2: must have at most 1 item"
        );
    }

    #[test]
    fn empty_field_prints_as_nil() {
        let err = FieldError::new("", FieldErrorKind::Invalid, Some(Value::Null), "x");
        assert_eq!(err.message(), "<nil>: Invalid value: null: x");
    }

    #[test]
    fn compound_values_print_as_go_json_with_sorted_keys_and_html_escapes() {
        let v = json!({"b": 1, "a": "<x>", "c": [1.5, true, null]});
        assert_eq!(
            go_json(&v),
            r#"{"a":"\u003cx\u003e","b":1,"c":[1.5,true,null]}"#
        );
    }

    #[test]
    fn floats_print_like_go_percent_v() {
        assert_eq!(go_float_v(0.5), "0.5");
        assert_eq!(go_float_v(3.0), "3");
        assert_eq!(go_float_v(1e20), "100000000000000000000");
        assert_eq!(go_float_v(1e21), "1e+21");
        assert_eq!(go_float_v(0.0001), "0.0001");
        assert_eq!(go_float_v(0.00001), "1e-05");
        assert_eq!(go_float_v(-2.5e-7), "-2.5e-07");
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(go_quote("\u{1}"), r#""\x01""#);
        assert_eq!(go_quote("héllo"), "\"héllo\"");
    }

    #[test]
    fn status_message_brackets_several_errors_and_not_one() {
        let one = [FieldError::required("spec.name", "")];
        assert_eq!(
            status_message("Widget.example.com", "w1", &one),
            "Widget.example.com \"w1\" is invalid: spec.name: Required value"
        );
        let two = [
            FieldError::required("spec.name", ""),
            FieldError::too_many("spec.list", 4, 3),
            FieldError::required("spec.name", ""),
        ];
        assert_eq!(
            status_message("Widget.example.com", "w1", &two),
            "Widget.example.com \"w1\" is invalid: [spec.name: Required value, spec.list: Too many: 4: must have at most 3 items]"
        );
    }

    #[test]
    fn cause_type_names_match_the_api() {
        assert_eq!(
            FieldErrorKind::TypeInvalid.cause_type(),
            "FieldValueTypeInvalid"
        );
        assert_eq!(FieldErrorKind::TypeInvalid.text(), "Invalid value");
        assert_eq!(
            FieldErrorKind::Duplicate.cause_type(),
            "FieldValueDuplicate"
        );
    }
}
