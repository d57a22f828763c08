//! Protobuf message -> the JSON form kube-sim stores.
//!
//! Go marshals every non-pointer field, so a Go client's body carries empty
//! strings, zeros and empty timestamps for fields it never set
//! (`namespace`, `uid`, `generation`, `creationTimestamp`). The object
//! stored is the one kube-apiserver would store after decoding into the Go
//! type and writing JSON: a zero of a non-pointer `omitempty` field is
//! dropped, a pointer's zero (`replicas: 0`, `automountServiceAccountToken:
//! false`) is the user's and kept, and a zero `Time` is dropped.

use base64::Engine;
use serde_json::{Map, Number, Value};

use super::ProtoError;
use super::schema::{Label, Message, Schema, Special, Type, Zero};
use super::special;
use super::wire::{Reader, Value as Wire};

/// Nesting deeper than this is refused (a JSONSchemaProps can nest, and a
/// hostile body must not overflow the stack).
pub const MAX_DEPTH: usize = 64;

pub fn message(
    schema: &Schema,
    index: usize,
    bytes: &[u8],
    depth: usize,
) -> Result<Value, ProtoError> {
    if depth > MAX_DEPTH {
        return Err(ProtoError::TooDeep(MAX_DEPTH));
    }
    let msg = schema.message(index);
    if msg.special != Special::None {
        return special::decode(schema, msg, bytes, depth);
    }
    let mut obj = Map::new();
    fields_into(schema, msg, bytes, depth, &mut obj)?;
    Ok(Value::Object(obj))
}

/// Decodes `bytes` as `msg` into `obj` (inline fields merge their keys).
pub fn fields_into(
    schema: &Schema,
    msg: &Message,
    bytes: &[u8],
    depth: usize,
    obj: &mut Map<String, Value>,
) -> Result<(), ProtoError> {
    for item in Reader::new(bytes) {
        let (number, wire) = item?;
        let field = msg.field(number).ok_or_else(|| ProtoError::UnknownField {
            message: msg.name.clone(),
            number,
            kubernetes: schema.kubernetes_version.clone(),
        })?;
        let mismatch = |want: &'static str| ProtoError::FieldWireType {
            message: msg.name.clone(),
            field: field.json.clone(),
            got: wire.wire_name(),
            want,
        };
        match field.label {
            Label::Inline => {
                let (Wire::Bytes(b), Type::Message(inner)) = (wire, field.ty) else {
                    return Err(mismatch("length-delimited"));
                };
                if depth + 1 > MAX_DEPTH {
                    return Err(ProtoError::TooDeep(MAX_DEPTH));
                }
                fields_into(schema, schema.message(inner), b, depth + 1, obj)?;
            }
            Label::Map => {
                let Wire::Bytes(entry) = wire else {
                    return Err(mismatch("length-delimited"));
                };
                let (key, value) = map_entry(schema, field.ty, entry, depth)?;
                let map = obj
                    .entry(field.json.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, value);
                }
            }
            Label::Many => {
                let list = obj
                    .entry(field.json.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                let Value::Array(list) = list else { continue };
                match (wire, field.ty) {
                    // Packed scalars: proto2 writes them one by one, but a
                    // packed run is legal on the wire too.
                    (Wire::Bytes(b), Type::Int32 | Type::Int64 | Type::Bool) => {
                        let mut packed = Reader::new(b);
                        while !packed.is_empty() {
                            list.push(
                                scalar(field.ty, Wire::Varint(packed.varint()?))
                                    .map_err(|_| mismatch("varint"))?,
                            );
                        }
                    }
                    (Wire::Bytes(b), Type::Double) => {
                        if b.len() % 8 != 0 {
                            return Err(ProtoError::Truncated("a packed double"));
                        }
                        for chunk in b.chunks_exact(8) {
                            let bits = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
                            list.push(
                                scalar(Type::Double, Wire::Fixed64(bits))
                                    .map_err(|_| mismatch("fixed64"))?,
                            );
                        }
                    }
                    _ => list.push(
                        value(schema, field.ty, wire, depth).map_err(|e| e.or_wire(mismatch))?,
                    ),
                }
            }
            Label::One => {
                let v = value(schema, field.ty, wire, depth).map_err(|e| e.or_wire(mismatch))?;
                if dropped_zero(field.zero, &v) {
                    obj.remove(&field.json);
                    continue;
                }
                obj.insert(field.json.clone(), v);
            }
        }
    }
    Ok(())
}

/// A singular field Go wrote only because its Go type is not a pointer.
fn dropped_zero(zero: Zero, v: &Value) -> bool {
    let is_zero = match v {
        Value::Null => return true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Bool(b) => !b,
        _ => false,
    };
    match zero {
        Zero::Omitted => is_zero,
        Zero::Unknown => matches!(v, Value::String(s) if s.is_empty()),
        Zero::Kept | Zero::Written => false,
    }
}

fn map_entry(
    schema: &Schema,
    ty: Type,
    entry: &[u8],
    depth: usize,
) -> Result<(String, Value), ProtoError> {
    let mut key = String::new();
    let mut val = None;
    for item in Reader::new(entry) {
        match item? {
            (1, Wire::Bytes(b)) => key = text(b)?,
            (2, wire) => val = Some(value(schema, ty, wire, depth)?),
            (n, _) => {
                return Err(ProtoError::Invalid(format!(
                    "a map entry has field {n}; only 1 (key) and 2 (value) exist"
                )));
            }
        }
    }
    let val = match val {
        Some(v) => v,
        None => zero(schema, ty),
    };
    Ok((key, val))
}

/// The JSON form of a value absent from a map entry.
fn zero(schema: &Schema, ty: Type) -> Value {
    match ty {
        Type::String => Value::String(String::new()),
        Type::Bytes => Value::String(String::new()),
        Type::Int32 | Type::Int64 => Value::from(0),
        Type::Bool => Value::Bool(false),
        Type::Double => Value::from(0.0),
        Type::Message(i) => match schema.message(i).special {
            Special::Quantity => Value::String("0".into()),
            Special::Array => Value::Array(Vec::new()),
            _ => Value::Object(Map::new()),
        },
    }
}

fn value(schema: &Schema, ty: Type, wire: Wire<'_>, depth: usize) -> Result<Value, ProtoError> {
    match ty {
        Type::Message(inner) => {
            let Wire::Bytes(b) = wire else {
                return Err(ProtoError::WrongWire);
            };
            message(schema, inner, b, depth + 1)
        }
        _ => scalar(ty, wire),
    }
}

pub fn scalar(ty: Type, wire: Wire<'_>) -> Result<Value, ProtoError> {
    Ok(match (ty, wire) {
        (Type::String, Wire::Bytes(b)) => Value::String(text(b)?),
        (Type::Bytes, Wire::Bytes(b)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        // int32 is sign-extended to 64 bits on the wire.
        (Type::Int32, Wire::Varint(v)) => Value::from(v as i64 as i32),
        (Type::Int64, Wire::Varint(v)) => Value::from(v as i64),
        (Type::Bool, Wire::Varint(v)) => Value::Bool(v != 0),
        (Type::Double, Wire::Fixed64(bits)) => {
            let f = f64::from_bits(bits);
            Value::Number(
                Number::from_f64(f)
                    .ok_or_else(|| ProtoError::Invalid(format!("{f} is not a JSON number")))?,
            )
        }
        _ => return Err(ProtoError::WrongWire),
    })
}

pub fn text(bytes: &[u8]) -> Result<String, ProtoError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| ProtoError::NotUtf8)
}
