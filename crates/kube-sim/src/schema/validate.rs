//! OpenAPI value validation with the semantics (and the wording) of the
//! kube-openapi validator the apiserver runs on custom resources, plus the
//! `x-kubernetes-list-type` set/map uniqueness checks it runs after it.

use serde_json::{Number, Value};

use super::compile::{Additional, ListType, Node};
use super::errors::{FieldError, FieldErrorKind, go_float_v, go_json, go_quote, path};
use super::formats;

/// The JSON type and Go-inferred format of a decoded value.
fn schema_type_of(value: &Value) -> (&'static str, &'static str) {
    match value {
        Value::Null => ("null", ""),
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(n) if n.as_i64().is_some() => ("integer", "int64"),
        Value::Number(_) => ("number", "float64"),
        Value::Array(_) => ("array", ""),
        Value::Object(_) => ("object", ""),
    }
}

/// A number as the apiserver's JSON decoder holds it: int64 when it is an
/// integer literal that fits, float64 otherwise.
enum GoNumber {
    Int(i64),
    Float(f64),
}

fn go_number(n: &Number) -> GoNumber {
    match n.as_i64() {
        Some(i) => GoNumber::Int(i),
        None => GoNumber::Float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

fn type_invalid(field: &str, expected: &str, got: &str) -> FieldError {
    FieldError::new(
        field,
        FieldErrorKind::TypeInvalid,
        Some(Value::String(got.to_string())),
        format!(
            "{field} in body must be of type {expected}: {}",
            go_quote(got)
        ),
    )
}

/// A kube-openapi error that is not a per-field validation error: the
/// apiserver reports it at no field, with an empty value.
fn fieldless(detail: String) -> FieldError {
    FieldError::new("", FieldErrorKind::Invalid, Some(Value::from("")), detail)
}

/// Validates `value` against `node`; `field` is the path of `value` ("" for
/// the root). Errors are appended in the order kube-openapi produces them
/// (properties in name order, where Go's map order is random).
///
/// `old` is the correlated old value on an update. A value equal to its old
/// value is not re-validated: the apiserver ratchets (turns into warnings)
/// the errors of unchanged values, so that a stricter schema does not lock
/// existing objects.
pub(super) fn validate_value(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    field: &str,
    errs: &mut Vec<FieldError>,
) {
    if old == Some(value) {
        return;
    }
    if value.is_null() {
        let types = node.type_names();
        if !types.is_empty() && !node.nullable {
            errs.push(type_invalid(field, &types.join(","), "null"));
        }
        check_enum(node, value, field, errs);
        return;
    }

    check_type(node, value, field, errs);
    check_composition(node, value, field, errs);
    match value {
        Value::String(s) => {
            check_string(node, s, field, errs);
            if let Some(format) = &node.format
                && !formats::is_valid(format, s)
            {
                errs.push(FieldError::new(
                    field,
                    FieldErrorKind::TypeInvalid,
                    Some(value.clone()),
                    format!("{field} in body must be of type {format}: {}", go_quote(s)),
                ));
            }
        }
        Value::Number(n) => check_number(node, n, value, field, errs),
        Value::Array(items) => check_array(node, items, old, field, errs),
        _ => {}
    }
    check_enum(node, value, field, errs);
    if let Value::Object(map) = value {
        check_object(node, map, old.and_then(Value::as_object), field, errs);
    }
}

fn check_type(node: &Node, value: &Value, field: &str, errs: &mut Vec<FieldError>) {
    let types = node.type_names();
    let declared_format = node.format.as_deref().unwrap_or("");
    if types.is_empty() && declared_format.is_empty() {
        return;
    }
    let (sch_type, inferred_format) = schema_type_of(value);
    let has = |t: &str| types.contains(&t);
    let is_float_int = sch_type == "number"
        && value
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.is_finite())
        && has("integer");
    let is_int_float = sch_type == "integer" && has("number");
    let is_string_or_array = matches!(value, Value::String(_) | Value::Array(_));

    let type_matches = has(sch_type) || is_float_int || is_int_float;
    let has_format = !declared_format.is_empty();

    // A declared format must match the Go-inferred one of a non-string,
    // non-array value, unless the type already matches.
    if has_format && !is_string_or_array && !type_matches && inferred_format != declared_format {
        errs.push(type_invalid(field, declared_format, inferred_format));
        return;
    }
    // kube-openapi lets any string or array through a formatted,
    // non-numeric schema without a type check.
    let numeric = has("number") || has("integer");
    if has_format && !numeric && is_string_or_array {
        return;
    }
    if !types.is_empty() && !type_matches {
        errs.push(type_invalid(field, &types.join(","), sch_type));
    }
}

/// allOf, anyOf, oneOf and not, validated at the same path.
fn check_composition(node: &Node, value: &Value, field: &str, errs: &mut Vec<FieldError>) {
    for sub in &node.all_of {
        validate_value(sub, value, None, field, errs);
    }
    if !node.any_of.is_empty() {
        let mut best: Option<Vec<FieldError>> = None;
        let mut succeeded = false;
        for sub in &node.any_of {
            let mut sub_errs = Vec::new();
            validate_value(sub, value, None, field, &mut sub_errs);
            if sub_errs.is_empty() {
                succeeded = true;
                best = None;
                break;
            }
            if best.as_ref().is_none_or(|b| sub_errs.len() < b.len()) {
                best = Some(sub_errs);
            }
        }
        if !succeeded {
            errs.push(fieldless(format!(
                "{field} must validate at least one schema (anyOf)"
            )));
        }
        errs.extend(best.unwrap_or_default());
    }
    if !node.one_of.is_empty() {
        let mut valid = 0usize;
        let mut best: Option<Vec<FieldError>> = None;
        for sub in &node.one_of {
            let mut sub_errs = Vec::new();
            validate_value(sub, value, None, field, &mut sub_errs);
            if sub_errs.is_empty() {
                valid += 1;
            } else if best.as_ref().is_none_or(|b| sub_errs.len() < b.len()) {
                best = Some(sub_errs);
            }
        }
        if valid == 0 {
            errs.push(fieldless(format!(
                "{field} must validate one and only one schema (oneOf). Found none valid"
            )));
            errs.extend(best.unwrap_or_default());
        } else if valid > 1 {
            errs.push(fieldless(format!(
                "{field} must validate one and only one schema (oneOf). Found {valid} valid alternatives"
            )));
        }
    }
    if let Some(not) = &node.not {
        let mut sub_errs = Vec::new();
        validate_value(not, value, None, field, &mut sub_errs);
        if sub_errs.is_empty() {
            errs.push(fieldless(format!(
                "{field} must not validate the schema (not)"
            )));
        }
    }
}

/// maxLength, minLength and pattern; the first failure wins, as in kube-openapi.
fn check_string(node: &Node, s: &str, field: &str, errs: &mut Vec<FieldError>) {
    let chars = s.chars().count() as u64;
    if let Some(max) = node.max_length
        && chars > max
    {
        errs.push(FieldError::too_long(field, max));
        return;
    }
    if let Some(min) = node.min_length
        && chars < min
    {
        errs.push(FieldError::invalid(
            field,
            Value::String(s.to_string()),
            format!("{field} in body should be at least {min} chars long"),
        ));
        return;
    }
    if let Some((source, re)) = &node.pattern
        && !re.is_match(s)
    {
        errs.push(FieldError::invalid(
            field,
            Value::String(s.to_string()),
            format!("{field} in body should match '{source}'"),
        ));
    }
}

/// multipleOf, maximum and minimum. Integers are compared with the bound
/// truncated to an integer, as kube-openapi does.
fn check_number(node: &Node, n: &Number, value: &Value, field: &str, errs: &mut Vec<FieldError>) {
    let data = go_number(n);
    if let Some(factor) = node.multiple_of {
        let failed = match data {
            GoNumber::Int(i) if factor >= 1.0 => {
                let f = factor as i64;
                f != 0 && i % f != 0
            }
            GoNumber::Int(i) => !is_multiple(i as f64, factor),
            GoNumber::Float(x) => !is_multiple(x, factor),
        };
        if failed {
            let shown = match data {
                GoNumber::Int(_) if factor >= 1.0 => (factor as i64).to_string(),
                _ => go_float_v(factor),
            };
            errs.push(FieldError::invalid(
                field,
                value.clone(),
                format!("{field} in body should be a multiple of {shown}"),
            ));
        }
    }
    if let Some(max) = node.maximum {
        let exclusive = node.exclusive_maximum;
        let (failed, shown) = match data {
            GoNumber::Int(i) => {
                let m = max as i64;
                (if exclusive { i >= m } else { i > m }, m.to_string())
            }
            GoNumber::Float(x) => (if exclusive { x >= max } else { x > max }, go_float_v(max)),
        };
        if failed {
            let relation = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(FieldError::invalid(
                field,
                value.clone(),
                format!("{field} in body should be {relation} {shown}"),
            ));
        }
    }
    if let Some(min) = node.minimum {
        let exclusive = node.exclusive_minimum;
        let (failed, shown) = match data {
            GoNumber::Int(i) => {
                let m = min as i64;
                (if exclusive { i <= m } else { i < m }, m.to_string())
            }
            GoNumber::Float(x) => (if exclusive { x <= min } else { x < min }, go_float_v(min)),
        };
        if failed {
            let relation = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(FieldError::invalid(
                field,
                value.clone(),
                format!("{field} in body should be {relation} {shown}"),
            ));
        }
    }
}

/// kube-openapi's float multipleOf: the quotient must be a whole number.
fn is_multiple(data: f64, factor: f64) -> bool {
    let quotient = if factor < 1.0 {
        1.0 / factor * data
    } else {
        data / factor
    };
    quotient.is_finite() && quotient.fract() == 0.0
}

fn check_array(
    node: &Node,
    items: &[Value],
    old: Option<&Value>,
    field: &str,
    errs: &mut Vec<FieldError>,
) {
    if let Some(item_node) = node.items.as_deref() {
        let old_items = old.and_then(Value::as_array);
        for (i, item) in items.iter().enumerate() {
            let old_item = match (node.list_type, old_items) {
                (Some(ListType::Map), Some(olds)) => find_by_keys(&node.list_map_keys, item, olds),
                _ => None,
            };
            validate_value(item_node, item, old_item, &path::index(field, i), errs);
        }
    }
    let size = items.len() as u64;
    if let Some(min) = node.min_items
        && size < min
    {
        errs.push(FieldError::invalid(
            field,
            Value::from(size),
            format!("{field} in body should have at least {min} items"),
        ));
    }
    if let Some(max) = node.max_items
        && size > max
    {
        errs.push(FieldError::too_many(field, size, max));
    }
}

/// Enum membership, with the numeric conversions Go's reflection allows
/// (an integer matches an equal float and a float matches the integer it
/// truncates to).
fn check_enum(node: &Node, value: &Value, field: &str, errs: &mut Vec<FieldError>) {
    let Some(allowed) = &node.enum_values else {
        return;
    };
    if allowed.is_empty() {
        return;
    }
    if allowed
        .iter()
        .any(|candidate| enum_matches(value, candidate))
    {
        return;
    }
    let supported: Vec<String> = allowed
        .iter()
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => go_json(other),
        })
        .collect();
    errs.push(FieldError::not_supported(field, value.clone(), &supported));
}

fn enum_matches(value: &Value, candidate: &Value) -> bool {
    match (value, candidate) {
        // The validator skips null entries, so null never matches.
        (_, Value::Null) | (Value::Null, _) => false,
        (Value::Number(a), Value::Number(b)) => match (go_number(a), go_number(b)) {
            (GoNumber::Int(a), GoNumber::Int(b)) => a == b,
            (GoNumber::Int(a), GoNumber::Float(b)) => a as f64 == b,
            (GoNumber::Float(a), GoNumber::Int(b)) => a.is_finite() && a.trunc() as i64 == b,
            (GoNumber::Float(a), GoNumber::Float(b)) => a == b,
        },
        (a, b) => a == b,
    }
}

fn check_object(
    node: &Node,
    map: &serde_json::Map<String, Value>,
    old: Option<&serde_json::Map<String, Value>>,
    field: &str,
    errs: &mut Vec<FieldError>,
) {
    let count = map.len() as u64;
    // kube-openapi stops at a property-count failure, without looking inside.
    if let Some(min) = node.min_properties
        && count < min
    {
        errs.push(FieldError::invalid(
            field,
            Value::from(count),
            format!("{field} in body should have at least {min} properties"),
        ));
        return;
    }
    if let Some(max) = node.max_properties
        && count > max
    {
        errs.push(FieldError::too_many(field, count, max));
        return;
    }
    if let Additional::Schema(value_node) = &node.additional {
        for (key, v) in map {
            if !node.properties.contains_key(key) {
                let old_v = old.and_then(|o| o.get(key));
                validate_value(value_node, v, old_v, &path::child(field, key), errs);
            }
        }
    }
    for (name, prop) in &node.properties {
        if let Some(v) = map.get(name) {
            let old_v = old.and_then(|o| o.get(name));
            validate_value(prop, v, old_v, &path::child(field, name), errs);
        }
    }
    for name in &node.required {
        if !map.contains_key(name) {
            errs.push(FieldError::required(&path::child(field, name), ""));
        }
    }
}

/// `x-kubernetes-list-type` set and map invariants: the second appearance
/// of a repeated element (set) or key (map) is a `Duplicate value`.
pub(super) fn validate_list_types(
    node: &Node,
    value: &Value,
    field: &str,
    errs: &mut Vec<FieldError>,
) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if let Some(prop) = node.properties.get(key) {
                    validate_list_types(prop, v, &path::child(field, key), errs);
                } else if let Additional::Schema(value_node) = &node.additional {
                    validate_list_types(value_node, v, &path::key(field, key), errs);
                }
            }
        }
        Value::Array(items) => {
            match node.list_type {
                Some(ListType::Set) => {
                    for i in first_repeats(items.iter().map(identity_key)) {
                        errs.push(FieldError::new(
                            &path::index(field, i),
                            FieldErrorKind::Duplicate,
                            Some(items[i].clone()),
                            "",
                        ));
                    }
                }
                Some(ListType::Map) => check_list_map(node, items, field, errs),
                _ => {}
            }
            if let Some(item_node) = node.items.as_deref() {
                for (i, item) in items.iter().enumerate() {
                    validate_list_types(item_node, item, &path::index(field, i), errs);
                }
            }
        }
        _ => {}
    }
}

/// The item of `olds` whose list-map keys equal those of `item`: list-map
/// items correlate with the old list by key, not by index.
pub(super) fn find_by_keys<'a>(
    keys: &[String],
    item: &Value,
    olds: &'a [Value],
) -> Option<&'a Value> {
    let obj = item.as_object()?;
    olds.iter().find(|old| {
        old.as_object()
            .is_some_and(|o| keys.iter().all(|k| o.get(k) == obj.get(k)))
    })
}

/// A comparable identity: the type tag and the Go JSON rendering, so that
/// an int64 and a float64 of the same value stay distinct, as in Go.
fn identity_key(value: &Value) -> String {
    let tag = match value {
        Value::Number(n) if n.as_i64().is_some() => "i",
        Value::Number(_) => "f",
        _ => "",
    };
    format!("{tag}{}", go_json(value))
}

/// Indices of the second appearance of each repeated key.
fn first_repeats(keys: impl Iterator<Item = String>) -> Vec<usize> {
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut repeats = Vec::new();
    for (i, key) in keys.enumerate() {
        let times = seen.entry(key).or_insert(0);
        *times += 1;
        if *times == 2 {
            repeats.push(i);
        }
    }
    repeats
}

fn check_list_map(node: &Node, items: &[Value], field: &str, errs: &mut Vec<FieldError>) {
    for (i, item) in items.iter().enumerate() {
        if !item.is_null() && !item.is_object() {
            errs.push(FieldError::invalid(
                &path::index(field, i),
                item.clone(),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if items.len() <= 1 {
        return;
    }
    let key_values: Vec<Value> = items
        .iter()
        .map(|item| {
            let mut key = serde_json::Map::new();
            if let Value::Object(obj) = item {
                for name in &node.list_map_keys {
                    if let Some(v) = obj.get(name) {
                        key.insert(name.clone(), v.clone());
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    let single = node.list_map_keys.len() == 1;
    let identities = key_values.iter().map(|k| {
        // With one key field, the key's own value is compared (an absent
        // key is its own distinct value).
        if single {
            match k.as_object().and_then(|o| o.values().next()) {
                Some(v) => identity_key(v),
                None => "<unspecified>".to_string(),
            }
        } else {
            identity_key(k)
        }
    });
    for i in first_repeats(identities) {
        errs.push(FieldError::new(
            &path::index(field, i),
            FieldErrorKind::Duplicate,
            Some(key_values[i].clone()),
            "",
        ));
    }
}

/// Embedded resources (`x-kubernetes-embedded-resource`) must carry a
/// string `apiVersion` that parses as a group/version and a `kind` that is a
/// DNS-1035 label in any case. Their `metadata` must be an object; its
/// ObjectMeta rules are the caller's, as for the root.
pub(super) fn validate_embedded_resources(
    node: &Node,
    value: &Value,
    field: &str,
    errs: &mut Vec<FieldError>,
) {
    match value {
        Value::Object(map) => {
            if node.embedded_resource {
                check_embedded_resource(map, field, errs);
            }
            for (key, v) in map {
                if let Some(prop) = node.properties.get(key) {
                    validate_embedded_resources(prop, v, &path::child(field, key), errs);
                } else if let Additional::Schema(value_node) = &node.additional {
                    validate_embedded_resources(value_node, v, &path::key(field, key), errs);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = node.items.as_deref() {
                for (i, item) in items.iter().enumerate() {
                    validate_embedded_resources(item_node, item, &path::index(field, i), errs);
                }
            }
        }
        _ => {}
    }
}

const DNS1035_LABEL_MESSAGE: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn check_embedded_resource(
    map: &serde_json::Map<String, Value>,
    field: &str,
    errs: &mut Vec<FieldError>,
) {
    for name in ["apiVersion", "kind"] {
        if !map.contains_key(name) {
            errs.push(FieldError::required(&path::child(field, name), ""));
        }
    }
    for (key, v) in map {
        let child = path::child(field, key);
        match key.as_str() {
            "apiVersion" => match v {
                Value::String(s) if s.is_empty() => errs.push(FieldError::required(&child, "")),
                Value::String(s) if s.matches('/').count() > 1 => errs.push(FieldError::invalid(
                    &child,
                    v.clone(),
                    format!("unexpected GroupVersion string: {s}"),
                )),
                Value::String(_) => {}
                other => errs.push(FieldError::invalid(
                    &child,
                    other.clone(),
                    "must be a string",
                )),
            },
            "kind" => match v {
                Value::String(s) if s.is_empty() => errs.push(FieldError::required(&child, "")),
                Value::String(s) => {
                    let problems = dns1035_label_problems(&s.to_lowercase());
                    if !problems.is_empty() {
                        errs.push(FieldError::invalid(
                            &child,
                            v.clone(),
                            format!(
                                "may have mixed case, but should otherwise match: {}",
                                problems.join(",")
                            ),
                        ));
                    }
                }
                other => errs.push(FieldError::invalid(
                    &child,
                    other.clone(),
                    "must be a string",
                )),
            },
            "metadata" if !v.is_object() => {
                errs.push(FieldError::invalid(&child, v.clone(), "must be an object"));
            }
            _ => {}
        }
    }
}

fn dns1035_label_problems(label: &str) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if label.len() > 63 {
        problems.push("must be no more than 63 characters");
    }
    let bytes = label.as_bytes();
    let well_formed = bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes
            .last()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if !well_formed {
        problems.push(DNS1035_LABEL_MESSAGE);
    }
    problems
}
