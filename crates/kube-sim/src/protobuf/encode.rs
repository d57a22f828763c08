//! The JSON form kube-sim stores -> protobuf message, fields in number
//! order and map entries in key order, as Go writes them.

use base64::Engine;
use serde_json::{Map, Value};

use super::EncodeError;
use super::decode::MAX_DEPTH;
use super::schema::{Label, Message, Schema, Special, Type};
use super::special;
use super::wire;

pub fn message(
    schema: &Schema,
    index: usize,
    value: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    if depth > MAX_DEPTH {
        return Err(EncodeError::TooDeep);
    }
    let msg = schema.message(index);
    if msg.special != Special::None {
        return special::encode(schema, msg, value, out, depth);
    }
    let Value::Object(obj) = value else {
        return Err(EncodeError::Shape {
            message: msg.name.clone(),
            found: short(value),
        });
    };
    object(schema, msg, obj, out, depth)
}

/// Encodes `obj` as `msg`. Every key must be a field, but `apiVersion` and
/// `kind`: Go's TypeMeta has no protobuf form (list items carry it in
/// JSON, the envelope carries it in protobuf).
pub fn object(
    schema: &Schema,
    msg: &Message,
    obj: &Map<String, Value>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    let used = fields(schema, msg, obj, out, depth)?;
    let skipped = ["apiVersion", "kind"]
        .iter()
        .filter(|k| obj.contains_key(**k) && msg.field_by_json(k).is_none())
        .count();
    if used + skipped < obj.len() {
        let key = obj
            .keys()
            .find(|k| !knows(schema, msg, k) && !matches!(k.as_str(), "apiVersion" | "kind"))
            .cloned()
            .unwrap_or_default();
        return Err(EncodeError::UnknownKey {
            message: msg.name.clone(),
            key,
        });
    }
    Ok(())
}

fn knows(schema: &Schema, msg: &Message, key: &str) -> bool {
    msg.field_by_json(key).is_some()
        || msg.fields.iter().any(|f| match (f.label, f.ty) {
            (Label::Inline, Type::Message(i)) => knows(schema, schema.message(i), key),
            _ => false,
        })
}

/// Writes the fields of `msg` found in `obj`; returns how many keys it used.
fn fields(
    schema: &Schema,
    msg: &Message,
    obj: &Map<String, Value>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<usize, EncodeError> {
    let mut used = 0;
    for field in &msg.fields {
        if field.label == Label::Inline {
            let Type::Message(inner) = field.ty else {
                continue;
            };
            let before = out.len();
            let mut inner_used = 0;
            wire::put_nested(out, field.number, |out| {
                inner_used = fields(schema, schema.message(inner), obj, out, depth + 1)?;
                Ok::<_, EncodeError>(())
            })?;
            if inner_used == 0 {
                out.truncate(before);
            }
            used += inner_used;
            continue;
        }
        let Some(v) = obj.get(&field.json) else {
            continue;
        };
        used += 1;
        if v.is_null() {
            continue;
        }
        match field.label {
            Label::One | Label::Inline => put(schema, out, field.number, field.ty, v, depth, msg)?,
            Label::Many => {
                let Value::Array(items) = v else {
                    return Err(shape(msg, &field.json, v));
                };
                for item in items {
                    put(schema, out, field.number, field.ty, item, depth, msg)?;
                }
            }
            Label::Map => {
                let Value::Object(entries) = v else {
                    return Err(shape(msg, &field.json, v));
                };
                let mut keys: Vec<&String> = entries.keys().collect();
                keys.sort();
                for key in keys {
                    let value = &entries[key];
                    wire::put_nested(out, field.number, |out| {
                        wire::put_bytes(out, 1, key.as_bytes());
                        if !value.is_null() {
                            put(schema, out, 2, field.ty, value, depth, msg)?;
                        }
                        Ok::<_, EncodeError>(())
                    })?;
                }
            }
        }
    }
    Ok(used)
}

fn put(
    schema: &Schema,
    out: &mut Vec<u8>,
    number: u32,
    ty: Type,
    v: &Value,
    depth: usize,
    msg: &Message,
) -> Result<(), EncodeError> {
    let bad = || EncodeError::Shape {
        message: msg.name.clone(),
        found: short(v),
    };
    match ty {
        Type::String => wire::put_bytes(out, number, v.as_str().ok_or_else(bad)?.as_bytes()),
        Type::Bytes => {
            let text = v.as_str().ok_or_else(bad)?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| bad())?;
            wire::put_bytes(out, number, &bytes);
        }
        Type::Int32 | Type::Int64 => {
            let i = v
                .as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(bad)?;
            wire::put_key(out, number, 0);
            wire::put_varint(out, i as u64);
        }
        Type::Bool => {
            wire::put_key(out, number, 0);
            wire::put_varint(out, u64::from(v.as_bool().ok_or_else(bad)?));
        }
        Type::Double => {
            wire::put_key(out, number, 1);
            out.extend_from_slice(&v.as_f64().ok_or_else(bad)?.to_le_bytes());
        }
        Type::Message(i) => {
            wire::put_nested(out, number, |out| message(schema, i, v, out, depth + 1))?
        }
    }
    Ok(())
}

fn shape(msg: &Message, key: &str, v: &Value) -> EncodeError {
    EncodeError::Shape {
        message: format!("{}.{key}", msg.name),
        found: short(v),
    }
}

fn short(v: &Value) -> String {
    v.to_string().chars().take(60).collect()
}
