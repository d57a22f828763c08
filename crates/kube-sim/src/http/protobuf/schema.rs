//! Table-driven decoding of protobuf messages into their JSON form: each
//! message lists every field number the Go encoder can put on the wire, so
//! a field kube-sim does not decode is refused by name instead of dropped.
//!
//! The Go types are proto2 with gogo's non-nullable fields: plain (non
//! pointer) scalars and embedded structs are always written, zero or not.
//! Zero plain scalars therefore mean "unset" and are left out of the JSON,
//! while pointer fields (`replicas`, `backoffLimit`, …) keep a written zero.

use serde_json::{Map, Value};

use super::{Field, fields, text};

/// One message type: its Go name (for errors) and its fields.
pub struct Message {
    pub name: &'static str,
    pub fields: &'static [Spec],
}

/// One field: wire number, JSON name, and how it decodes.
pub struct Spec {
    pub number: u64,
    pub name: &'static str,
    pub kind: Kind,
}

pub enum Kind {
    /// `string`; empty is unset.
    Str,
    /// `repeated string`.
    Strs,
    /// A plain integer; zero is unset.
    Int,
    /// A pointer integer: present means set, zero included.
    OptInt,
    /// A plain bool; false is unset.
    Bool,
    /// A pointer bool.
    OptBool,
    /// `map<string, string>`.
    StringMap,
    /// `map<string, bytes>`, values base64 in JSON.
    BytesMap,
    /// An embedded message; left out when it decodes to nothing.
    Msg(&'static Message),
    /// `repeated` messages.
    Msgs(&'static Message),
    /// `intstr.IntOrString` held by value: the zero value (int 0) is unset.
    IntOrString,
    /// `*intstr.IntOrString`: a written int 0 is kept.
    OptIntOrString,
    /// A field kube-sim does not decode: accepted only as its zero value
    /// (the encoder writes those for every plain field), refused otherwise.
    Unset,
}

pub const fn field(number: u64, name: &'static str, kind: Kind) -> Spec {
    Spec { number, name, kind }
}

fn not_decoded(message: &Message, number: u64, name: &str) -> String {
    format!(
        "kube-sim does not decode field {name} (number {number}) of {}; send the object as JSON",
        message.name
    )
}

/// Decodes `bytes` as `message` into a JSON object.
pub fn decode(message: &Message, bytes: &[u8]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    for (number, field) in fields(bytes)? {
        let Some(spec) = message.fields.iter().find(|s| s.number == number) else {
            return Err(not_decoded(message, number, "<unknown>"));
        };
        let name = spec.name;
        let wrong_type = || {
            format!(
                "field {name} (number {number}) of {} has the wrong wire type",
                message.name
            )
        };
        match (&spec.kind, field) {
            (Kind::Str, Field::Bytes(b)) => {
                if !b.is_empty() {
                    out.insert(name.into(), text(b)?.into());
                }
            }
            (Kind::Strs, Field::Bytes(b)) => push(&mut out, name, text(b)?.into()),
            (Kind::Int, Field::Varint(v)) => {
                if v != 0 {
                    out.insert(name.into(), signed(v).into());
                }
            }
            (Kind::OptInt, Field::Varint(v)) => drop(out.insert(name.into(), signed(v).into())),
            (Kind::Bool, Field::Varint(v)) => {
                if v != 0 {
                    out.insert(name.into(), true.into());
                }
            }
            (Kind::OptBool, Field::Varint(v)) => drop(out.insert(name.into(), (v != 0).into())),
            (Kind::StringMap, Field::Bytes(b)) => {
                let (key, value) = string_entry(b)?;
                let map = out.entry(name).or_insert_with(|| Value::Object(Map::new()));
                if let Some(map) = map.as_object_mut() {
                    map.insert(key, value.into());
                }
            }
            (Kind::BytesMap, Field::Bytes(b)) => {
                let (key, value) = bytes_entry(b)?;
                let map = out.entry(name).or_insert_with(|| Value::Object(Map::new()));
                if let Some(map) = map.as_object_mut() {
                    map.insert(key, value.into());
                }
            }
            (Kind::Msg(inner), Field::Bytes(b)) => {
                let decoded = decode(inner, b)?;
                if !decoded.is_empty() {
                    out.insert(name.into(), Value::Object(decoded));
                }
            }
            (Kind::Msgs(inner), Field::Bytes(b)) => {
                push(&mut out, name, Value::Object(decode(inner, b)?));
            }
            (Kind::IntOrString, Field::Bytes(b)) => {
                let value = int_or_string(b)?;
                if value != 0 {
                    out.insert(name.into(), value);
                }
            }
            (Kind::OptIntOrString, Field::Bytes(b)) => {
                out.insert(name.into(), int_or_string(b)?);
            }
            (Kind::Unset, Field::Varint(0) | Field::Bytes([])) => {}
            (Kind::Unset, _) => return Err(not_decoded(message, number, name)),
            _ => return Err(wrong_type()),
        }
    }
    Ok(out)
}

/// int32/int64 travel as two's-complement varints.
fn signed(v: u64) -> i64 {
    v as i64
}

fn push(obj: &mut Map<String, Value>, name: &str, value: Value) {
    let list = obj.entry(name).or_insert_with(|| Value::Array(Vec::new()));
    if let Some(list) = list.as_array_mut() {
        list.push(value);
    }
}

/// A `map<string, string>` entry: key = 1, value = 2.
fn string_entry(bytes: &[u8]) -> Result<(String, String), String> {
    let (mut key, mut value) = (String::new(), String::new());
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) => value = text(b)?,
            (n, _) => return Err(format!("map entry with an unexpected field {n}")),
        }
    }
    Ok((key, value))
}

/// A `map<string, bytes>` entry, the value base64-encoded as in JSON.
fn bytes_entry(bytes: &[u8]) -> Result<(String, String), String> {
    use base64::Engine;
    let (mut key, mut value) = (String::new(), String::new());
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) => value = base64::engine::general_purpose::STANDARD.encode(b),
            (n, _) => return Err(format!("map entry with an unexpected field {n}")),
        }
    }
    Ok((key, value))
}

/// `intstr.IntOrString`: type = 1 (0 int, 1 string), intVal = 2, strVal = 3.
fn int_or_string(bytes: &[u8]) -> Result<Value, String> {
    let (mut is_string, mut int, mut string) = (false, 0i64, String::new());
    for (number, field) in fields(bytes)? {
        match (number, field) {
            (1, Field::Varint(t)) => is_string = t == 1,
            (2, Field::Varint(v)) => int = i64::from(v as i32),
            (3, Field::Bytes(b)) => string = text(b)?,
            (n, _) => return Err(format!("IntOrString with an unexpected field {n}")),
        }
    }
    Ok(if is_string { string.into() } else { int.into() })
}
