//! A write's protobuf answer, encoded straight from the `Value` the write
//! stored. The bytes are the ones [`super::transcode`] gives for the
//! stored JSON text (the text is this `Value` serialized, keys in the same
//! order), but the tree is walked directly: no serde visitor per value, no
//! borrowed-key deserializer, and embedded JSON (`fieldsV1`) written into
//! the answer without a buffer of its own. Through serde the encoding was
//! the largest cost a protobuf write had over a JSON one
//! (docs/benchmarks.md, "Protobuf against JSON bodies").
//!
//! Every rule below mirrors one of the transcoder's; the unit tests compare
//! the two byte for byte.

use serde_json::{Map, Value};

use super::EncodeError;
use super::decode::MAX_DEPTH;
use super::schema::{Field, Label, Message, Schema, Special, Type};
use super::{MAGIC, encode, special, wire};
use crate::object::json_kind;

/// The enveloped object; `size_hint` is the length of its JSON text.
pub(super) fn object(value: &Value, size_hint: usize) -> Result<Vec<u8>, EncodeError> {
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let schema = super::schema::schema();
    let index = schema
        .kind(api_version, kind)
        .ok_or_else(|| EncodeError::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        })?;
    let msg = schema.message(index);
    let mut out = Vec::with_capacity(size_hint / 2 + 64);
    out.extend_from_slice(MAGIC);
    wire::put_nested(&mut out, 1, |out| {
        wire::put_bytes(out, 1, api_version.as_bytes());
        wire::put_bytes(out, 2, kind.as_bytes());
        Ok::<_, EncodeError>(())
    })?;
    wire::put_nested(&mut out, 2, |out| match value {
        _ if msg.special != Special::None => special::encode(schema, msg, value, out, 0),
        Value::Object(obj) => message(schema, msg, obj, out, 0),
        other => Err(EncodeError::Shape {
            message: msg.name.clone(),
            found: json_kind(other).into(),
        }),
    })?;
    wire::put_bytes(&mut out, 3, b"");
    wire::put_bytes(&mut out, 4, b"");
    Ok(out)
}

/// The fields of `msg` in the object's key order, as the text has them.
fn message(
    schema: &Schema,
    msg: &Message,
    obj: &Map<String, Value>,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    for (key, value) in obj {
        let Some((field, inline)) = super::transcode::find(schema, msg, key) else {
            if matches!(key.as_str(), "apiVersion" | "kind") {
                continue;
            }
            return Err(EncodeError::UnknownKey {
                message: msg.name.clone(),
                key: key.clone(),
            });
        };
        match inline {
            // A key of an inline struct: one occurrence of the inline field
            // holding just this key, as the transcoder writes it.
            Some(number) => wire::put_nested(out, number, |out| {
                field_value(schema, field, value, out, depth + 1)
            })?,
            None => field_value(schema, field, value, out, depth)?,
        }
    }
    Ok(())
}

fn field_value(
    schema: &Schema,
    field: &Field,
    value: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    // Timestamps and embedded JSON, on every object, skip `encode::message`.
    if let (Label::One, Type::Message(index)) = (field.label, field.ty) {
        match schema.message(index).special {
            Special::RawJson => {
                if !value.is_null() {
                    wire::put_nested(out, field.number, |out| {
                        wire::put_nested(out, 1, |out| {
                            serde_json::to_writer(out, value).map_err(|e| EncodeError::Shape {
                                message: format!("field {}", field.json),
                                found: e.to_string(),
                            })
                        })
                    })?;
                }
                return Ok(());
            }
            kind @ (Special::Time | Special::MicroTime) => {
                return match value {
                    Value::Null => Ok(()),
                    Value::String(text) => {
                        let mut written = None;
                        wire::put_nested(out, field.number, |out| {
                            written = special::put_time(out, text, kind == Special::MicroTime);
                            Ok::<_, EncodeError>(())
                        })?;
                        written.ok_or_else(|| shape(field, text))
                    }
                    other => Err(shape(field, json_kind(other))),
                };
            }
            _ => {}
        }
    }
    match (field.label, value) {
        (Label::Many | Label::Map, Value::Null) => Ok(()),
        (Label::Many, Value::Array(items)) => items
            .iter()
            .try_for_each(|item| one(schema, field, field.number, item, out, depth)),
        (Label::Map, Value::Object(entries)) => entries.iter().try_for_each(|(key, item)| {
            wire::put_nested(out, field.number, |out| {
                wire::put_bytes(out, 1, key.as_bytes());
                one(schema, field, 2, item, out, depth)
            })
        }),
        (Label::Many | Label::Map, other) => Err(shape(field, json_kind(other))),
        (Label::One | Label::Inline, _) => one(schema, field, field.number, value, out, depth),
    }
}

/// A singular value, one list item or one map value (`number` 2).
fn one(
    schema: &Schema,
    field: &Field,
    number: u32,
    value: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    match (value, field.ty) {
        (Value::Null, _) => {}
        (Value::Bool(b), Type::Bool) => {
            wire::put_key(out, number, 0);
            wire::put_varint(out, u64::from(*b));
        }
        (Value::Number(n), _) => {
            return number_value(schema, field, number, n, out, depth);
        }
        (Value::String(s), Type::String) => wire::put_bytes(out, number, s.as_bytes()),
        (Value::String(s), Type::Bytes) => {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|_| shape(field, s))?;
            wire::put_bytes(out, number, &bytes);
        }
        (Value::Object(obj), Type::Message(index))
            if schema.message(index).special == Special::None =>
        {
            if depth + 1 > MAX_DEPTH {
                return Err(EncodeError::TooDeep);
            }
            let msg = schema.message(index);
            wire::put_nested(out, number, |out| message(schema, msg, obj, out, depth + 1))?;
        }
        // Messages with a JSON form of their own (quantities, int-or-string,
        // named slices), and whatever else a message field holds.
        (_, Type::Message(index)) => wire::put_nested(out, number, |out| {
            encode::message(schema, index, value, out, depth + 1)
        })?,
        (Value::Object(_), _) => return Err(shape(field, "an object")),
        (other, _) => return Err(shape(field, &other.to_string())),
    }
    Ok(())
}

/// A JSON number, read as serde reads it: unsigned, then negative, then
/// floating point.
fn number_value(
    schema: &Schema,
    field: &Field,
    number: u32,
    n: &serde_json::Number,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), EncodeError> {
    let whole = match (n.as_u64(), n.as_i64()) {
        (Some(u), _) => Some(i64::try_from(u).map_err(|_| shape(field, &u.to_string()))?),
        (None, Some(i)) => Some(i),
        (None, None) => None,
    };
    match (whole, field.ty) {
        (Some(i), Type::Int32 | Type::Int64) => {
            wire::put_key(out, number, 0);
            wire::put_varint(out, i as u64);
        }
        (Some(i), Type::Double) => {
            wire::put_key(out, number, 1);
            out.extend_from_slice(&(i as f64).to_le_bytes());
        }
        (None, Type::Double) => {
            wire::put_key(out, number, 1);
            out.extend_from_slice(&n.as_f64().unwrap_or_default().to_le_bytes());
        }
        (None, Type::Int32 | Type::Int64) => {
            let f = n.as_f64().unwrap_or_default();
            if f.fract() != 0.0 {
                return Err(shape(field, &f.to_string()));
            }
            wire::put_key(out, number, 0);
            wire::put_varint(out, f as i64 as u64);
        }
        (_, Type::Message(index)) => wire::put_nested(out, number, |out| {
            encode::message(schema, index, &Value::Number(n.clone()), out, depth + 1)
        })?,
        _ => return Err(shape(field, &n.to_string())),
    }
    Ok(())
}

fn shape(field: &Field, found: &str) -> EncodeError {
    EncodeError::Shape {
        message: format!("field {}", field.json),
        found: found.to_string(),
    }
}
