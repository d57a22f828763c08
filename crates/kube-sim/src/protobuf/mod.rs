//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which client-go and controller-runtime use for every built-in kind.
//!
//! A body is the magic `k8s\0` followed by a `runtime.Unknown` message:
//! `typeMeta` (apiVersion, kind), then `raw`, the object's own message.
//! Messages are described by a table generated from the k8s-pb bindings
//! ([`schema`]), so every built-in kind and subresource body is covered
//! without hand-written field lists. kube-sim stores JSON: bodies are
//! decoded to it and answers encoded from it.
//!
//! The bindings follow Kubernetes 1.34. A field kube-apiserver 1.37 added
//! since is refused by number on decode (never dropped), and an object
//! carrying one is answered in JSON, which every protobuf client accepts
//! too (client-go asks for `protobuf, json`).

mod decode;
mod encode;
pub mod gnostic;
mod memory;
pub mod schema;
mod special;
mod transcode;
mod wire;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

use serde_json::{Map, Value};

pub use special::{format_duration, parse_duration};

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The content type of a protobuf watch stream.
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
pub const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be decoded. Each names what is wrong.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProtoError {
    #[error("the body does not start with the protobuf magic k8s\\0")]
    NoMagic,
    #[error("the body ends inside {0}")]
    Truncated(&'static str),
    #[error("a varint is longer than 10 bytes")]
    LongVarint,
    #[error("field number {0} is out of range")]
    BadFieldNumber(u64),
    #[error("wire type {0} is not used by Kubernetes' protobuf")]
    WireType(u64),
    #[error("field {field} of {message} was sent as {got}, expected {want}")]
    FieldWireType {
        message: String,
        field: String,
        got: &'static str,
        want: &'static str,
    },
    #[error("a field was sent with the wrong wire type")]
    WrongWire,
    #[error(
        "kube-sim does not know field number {number} of {message} (its protobuf schema follows Kubernetes {kubernetes}); send JSON for newer fields"
    )]
    UnknownField {
        message: String,
        number: u32,
        kubernetes: String,
    },
    #[error("a string field is not valid UTF-8")]
    NotUtf8,
    #[error("the protobuf envelope names no kind")]
    NoKind,
    #[error("the protobuf envelope holds no object")]
    NoObject,
    #[error("the protobuf envelope's content encoding {0:?} is not supported")]
    ContentEncoding(String),
    #[error("kube-sim has no protobuf schema for {api_version} {kind}")]
    UnknownKind { api_version: String, kind: String },
    #[error("messages are nested deeper than {0}")]
    TooDeep(usize),
    #[error("{0}")]
    Invalid(String),
}

impl ProtoError {
    /// Names the field when a value had the wrong wire type.
    fn or_wire(self, named: impl FnOnce(&'static str) -> ProtoError) -> ProtoError {
        match self {
            ProtoError::WrongWire => named("its declared wire type"),
            other => other,
        }
    }
}

/// Why an object could not be encoded; the caller answers in JSON instead.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EncodeError {
    #[error("kube-sim has no protobuf schema for {api_version} {kind}")]
    UnknownKind { api_version: String, kind: String },
    #[error("{message} has no protobuf field for the JSON key {key:?}")]
    UnknownKey { message: String, key: String },
    #[error("{message} cannot hold {found}")]
    Shape { message: String, found: String },
    #[error("the object nests too deep for protobuf")]
    TooDeep,
}

/// Decodes a protobuf request body into the object's JSON form, with its
/// `apiVersion` and `kind` from the envelope.
pub fn decode_object(body: &[u8]) -> Result<Value, ProtoError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtoError::NoMagic)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    for item in wire::Reader::new(envelope) {
        match item? {
            (1, wire::Value::Bytes(type_meta)) => {
                for item in wire::Reader::new(type_meta) {
                    match item? {
                        (1, wire::Value::Bytes(b)) => api_version = decode::text(b)?,
                        (2, wire::Value::Bytes(b)) => kind = decode::text(b)?,
                        (n, _) => return Err(envelope_field("TypeMeta", n)),
                    }
                }
            }
            (2, wire::Value::Bytes(b)) => raw = Some(b),
            (3, wire::Value::Bytes(b)) if !b.is_empty() => {
                return Err(ProtoError::ContentEncoding(decode::text(b)?));
            }
            (3 | 4, wire::Value::Bytes(_)) => {}
            (n, _) => return Err(envelope_field("Unknown", n)),
        }
    }
    if kind.is_empty() {
        return Err(ProtoError::NoKind);
    }
    let raw = raw.ok_or(ProtoError::NoObject)?;
    let schema = schema::schema();
    let index = schema
        .kind(&api_version, &kind)
        .ok_or_else(|| ProtoError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let mut obj = Map::new();
    let msg = schema.message(index);
    if msg.special != schema::Special::None {
        return Err(ProtoError::Invalid(format!("{kind} is not an object kind")));
    }
    decode::fields_into(schema, msg, raw, 0, &mut obj)?;
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind));
    Ok(Value::Object(obj))
}

fn envelope_field(message: &str, number: u32) -> ProtoError {
    ProtoError::UnknownField {
        message: format!("runtime.{message}"),
        number,
        kubernetes: schema::schema().kubernetes_version.clone(),
    }
}

/// Encodes an object (its `apiVersion` and `kind` name the message) with
/// the magic and envelope, as kube-apiserver answers a protobuf client.
pub fn encode_object(value: &Value) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(MAGIC);
    encode_enveloped(value, &mut out)?;
    Ok(out)
}

/// [`encode_object`] from an object's JSON text, in one pass without
/// building a `Value` (the form answers take: kube-sim stores JSON).
pub fn encode_json_object(json: &[u8]) -> Result<Vec<u8>, EncodeError> {
    transcode::object(json)
}

/// [`encode_json_object`] for an object a write still holds in memory:
/// byte for byte what its stored JSON text would give, without reading
/// that text again. `json_len` (the text's length) sizes the output.
pub fn encode_object_in_memory(value: &Value, json_len: usize) -> Result<Vec<u8>, EncodeError> {
    memory::object(value, json_len)
}

fn encode_enveloped(value: &Value, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let schema = schema::schema();
    let unknown = || EncodeError::UnknownKind {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    };
    let index = schema.kind(api_version, kind).ok_or_else(unknown)?;
    let Value::Object(obj) = value else {
        return Err(unknown());
    };
    wire::put_nested(out, 1, |out| {
        wire::put_bytes(out, 1, api_version.as_bytes());
        wire::put_bytes(out, 2, kind.as_bytes());
        Ok::<_, EncodeError>(())
    })?;
    wire::put_nested(out, 2, |out| {
        encode::object(schema, schema.message(index), obj, out, 0)
    })?;
    // Go writes the empty contentEncoding and contentType too.
    wire::put_bytes(out, 3, b"");
    wire::put_bytes(out, 4, b"");
    Ok(())
}

/// One frame of a protobuf watch stream: a 4-byte big-endian length, then
/// a bare `WatchEvent` whose `object.raw` is the enveloped object.
pub fn encode_watch_frame(event_type: &str, object: &Value) -> Result<Vec<u8>, EncodeError> {
    let inner = encode_object(object)?;
    let mut event = Vec::with_capacity(inner.len() + 32);
    wire::put_bytes(&mut event, 1, event_type.as_bytes());
    wire::put_nested(&mut event, 2, |out| {
        wire::put_bytes(out, 1, &inner);
        Ok::<_, EncodeError>(())
    })?;
    let len = u32::try_from(event.len()).map_err(|_| EncodeError::TooDeep)?;
    let mut frame = Vec::with_capacity(event.len() + 4);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&event);
    Ok(frame)
}

/// Splits a protobuf watch stream's frames and decodes each event to
/// `(type, object)`; for tests and outside checks.
pub fn decode_watch_frame(frame: &[u8]) -> Result<(String, Value), ProtoError> {
    let mut event_type = String::new();
    let mut object = Value::Null;
    for item in wire::Reader::new(frame) {
        match item? {
            (1, wire::Value::Bytes(b)) => event_type = decode::text(b)?,
            (2, wire::Value::Bytes(raw_ext)) => {
                for item in wire::Reader::new(raw_ext) {
                    if let (1, wire::Value::Bytes(raw)) = item? {
                        object = decode_object(raw)?;
                    }
                }
            }
            (n, _) => return Err(envelope_field("WatchEvent", n)),
        }
    }
    Ok((event_type, object))
}
