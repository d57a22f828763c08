//! JSON text -> protobuf in one pass, for answers: kube-sim keeps every
//! object as JSON bytes, and building a `serde_json::Value` of each answer
//! only to encode it again cost more than the JSON answer itself. The
//! schema drives a serde visitor that writes protobuf as the JSON is read;
//! fields come out in the JSON's key order, which every protobuf decoder
//! accepts (Go's merges repeated occurrences of a message field, which the
//! inline structs rely on).
//!
//! A write's answer, still in memory as a `Value`, is encoded by
//! [`super::memory`] instead, to the same bytes.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::EncodeError;
use super::decode::MAX_DEPTH;
use super::schema::{Label, Message, Schema, Special, Type};
use super::{MAGIC, encode, special, wire};

/// The type meta an answer's message is chosen by.
#[derive(serde::Deserialize)]
struct TypeMeta<'a> {
    #[serde(rename = "apiVersion", borrow, default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
}

/// Encodes the JSON text of an object (its `apiVersion` and `kind` name
/// the message) with the magic and envelope.
pub fn object(json: &[u8]) -> Result<Vec<u8>, EncodeError> {
    let meta = serde_json::from_slice(json).map_err(unreadable)?;
    enveloped(
        meta,
        json.len() / 2 + 64,
        &mut serde_json::Deserializer::from_slice(json),
    )
}

/// Embedded JSON's text, borrowed from the answer's JSON text.
struct RawJsonText<'de>(&'de [u8]);

impl<'de> serde::Deserialize<'de> for RawJsonText<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_newtype_struct("RawJson", RawJsonVisitor)
    }
}

struct RawJsonVisitor;

impl<'de> Visitor<'de> for RawJsonVisitor {
    type Value = RawJsonText<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("embedded JSON")
    }

    /// JSON text: serde_json lends the value's own slice.
    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
        self,
        d: D,
    ) -> Result<Self::Value, D::Error> {
        let raw: &'de serde_json::value::RawValue = serde::Deserialize::deserialize(d)?;
        Ok(RawJsonText(raw.get().as_bytes()))
    }
}

fn unreadable(e: serde_json::Error) -> EncodeError {
    EncodeError::Shape {
        message: "the answer".into(),
        found: e.to_string(),
    }
}

/// The envelope around the message `object` reads as, from either form.
fn enveloped<'de, D: serde::Deserializer<'de>>(
    meta: TypeMeta<'_>,
    capacity: usize,
    object: D,
) -> Result<Vec<u8>, EncodeError> {
    let schema = super::schema::schema();
    let index =
        schema
            .kind(&meta.api_version, &meta.kind)
            .ok_or_else(|| EncodeError::UnknownKind {
                api_version: meta.api_version.to_string(),
                kind: meta.kind.to_string(),
            })?;
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(MAGIC);
    wire::put_nested(&mut out, 1, |out| {
        wire::put_bytes(out, 1, meta.api_version.as_bytes());
        wire::put_bytes(out, 2, meta.kind.as_bytes());
        Ok::<_, EncodeError>(())
    })?;
    let mut failure = None;
    wire::put_nested(&mut out, 2, |out| {
        let seed = MessageSeed {
            schema,
            msg: schema.message(index),
            out,
            depth: 0,
            failure: &mut failure,
        };
        seed.deserialize(object).map_err(|e| {
            failure.take().unwrap_or(EncodeError::Shape {
                message: schema.message(index).name.clone(),
                found: e.to_string(),
            })
        })
    })?;
    wire::put_bytes(&mut out, 3, b"");
    wire::put_bytes(&mut out, 4, b"");
    Ok(out)
}

/// Writes one message's fields from a JSON object.
struct MessageSeed<'s, 'o> {
    schema: &'s Schema,
    msg: &'s Message,
    out: &'o mut Vec<u8>,
    depth: usize,
    /// Why encoding stopped, kept typed past serde's string errors.
    failure: &'o mut Option<EncodeError>,
}

impl<'de> DeserializeSeed<'de> for MessageSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.depth > MAX_DEPTH {
            *self.failure = Some(EncodeError::TooDeep);
            return Err(D::Error::custom("too deep"));
        }
        if self.msg.special != Special::None {
            // Rare shapes (timestamps, quantities, embedded JSON) go
            // through a Value.
            let value: Value = serde::Deserialize::deserialize(d)?;
            return special::encode(self.schema, self.msg, &value, self.out, self.depth).map_err(
                |e| {
                    *self.failure = Some(e);
                    D::Error::custom("special")
                },
            );
        }
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MessageSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object for {}", self.msg.name)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let MessageSeed {
            schema,
            msg,
            out,
            depth,
            failure,
        } = self;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let Some((field, inline)) = find(schema, msg, &key) else {
                if matches!(key.as_ref(), "apiVersion" | "kind") {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
                *failure = Some(EncodeError::UnknownKey {
                    message: msg.name.clone(),
                    key: key.into_owned(),
                });
                return Err(A::Error::custom("unknown key"));
            };
            match inline {
                // A key of an inline struct: one occurrence of the inline
                // field holding just this key; decoders merge them.
                Some(number) => {
                    let mut result = Ok(());
                    wire::put_nested(&mut *out, number, |o| {
                        result = map.next_value_seed(FieldSeed {
                            schema,
                            field,
                            out: o,
                            depth: depth + 1,
                            failure: &mut *failure,
                        });
                        Ok::<_, EncodeError>(())
                    })
                    .ok();
                    result?;
                }
                None => map.next_value_seed(FieldSeed {
                    schema,
                    field,
                    out: &mut *out,
                    depth,
                    failure: &mut *failure,
                })?,
            }
        }
        Ok(())
    }
}

/// The field a JSON key names, directly or in an inline struct (with the
/// inline field's number).
pub(super) fn find<'s>(
    schema: &'s Schema,
    msg: &'s Message,
    key: &str,
) -> Option<(&'s super::schema::Field, Option<u32>)> {
    if let Some(field) = msg.field_by_json(key) {
        return Some((field, None));
    }
    msg.fields.iter().find_map(|f| match (f.label, f.ty) {
        (Label::Inline, Type::Message(i)) => {
            let inner = schema.message(i);
            inner
                .field_by_json(key)
                .map(|found| (found, Some(f.number)))
        }
        _ => None,
    })
}

/// One field's value: a scalar, a message, a list or a map.
struct FieldSeed<'s, 'o> {
    schema: &'s Schema,
    field: &'s super::schema::Field,
    out: &'o mut Vec<u8>,
    depth: usize,
    failure: &'o mut Option<EncodeError>,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        // Every object carries timestamps and managedFields' fieldsV1:
        // these are written straight from the text, not through a Value.
        if let (Label::One, Type::Message(index)) = (self.field.label, self.field.ty) {
            match self.schema.message(index).special {
                Special::RawJson => {
                    let raw: RawJsonText<'de> = serde::Deserialize::deserialize(d)?;
                    if raw.0 != b"null" {
                        wire::put_nested(self.out, self.field.number, |o| {
                            wire::put_bytes(o, 1, raw.0);
                            Ok::<_, EncodeError>(())
                        })
                        .ok();
                    }
                    return Ok(());
                }
                kind @ (Special::Time | Special::MicroTime) => {
                    let text: Option<Cow<'de, str>> = serde::Deserialize::deserialize(d)?;
                    let Some(text) = text else { return Ok(()) };
                    let mut written = None;
                    wire::put_nested(self.out, self.field.number, |o| {
                        written = special::put_time(o, &text, kind == Special::MicroTime);
                        Ok::<_, EncodeError>(())
                    })
                    .ok();
                    if written.is_none() {
                        *self.failure = Some(EncodeError::Shape {
                            message: format!("field {}", self.field.json),
                            found: text.into_owned(),
                        });
                        return Err(D::Error::custom("time"));
                    }
                    return Ok(());
                }
                _ => {}
            }
        }
        match self.field.label {
            Label::Many => d.deserialize_any(ListVisitor(self)),
            Label::Map => d.deserialize_any(MapVisitor(self)),
            Label::One | Label::Inline => d.deserialize_any(OneVisitor {
                seed: self,
                number: None,
            }),
        }
    }
}

/// A singular value (or one list item, one map value: `number` overrides
/// the field's number, 2 in a map entry).
struct OneVisitor<'s, 'o> {
    seed: FieldSeed<'s, 'o>,
    number: Option<u32>,
}

impl OneVisitor<'_, '_> {
    fn number(&self) -> u32 {
        self.number.unwrap_or(self.seed.field.number)
    }

    fn shape<E: serde::de::Error>(self, found: &str) -> Result<(), E> {
        *self.seed.failure = Some(EncodeError::Shape {
            message: format!("field {}", self.seed.field.json),
            found: found.to_string(),
        });
        Err(E::custom("shape"))
    }

    fn int<E: serde::de::Error>(self, i: i64) -> Result<(), E> {
        match self.seed.field.ty {
            Type::Int32 | Type::Int64 => {
                wire::put_key(self.seed.out, self.number(), 0);
                wire::put_varint(self.seed.out, i as u64);
                Ok(())
            }
            Type::Double => {
                wire::put_key(self.seed.out, self.number(), 1);
                self.seed.out.extend_from_slice(&(i as f64).to_le_bytes());
                Ok(())
            }
            Type::Message(_) => self.via_value(Value::from(i)),
            _ => self.shape(&i.to_string()),
        }
    }

    /// Messages with a special JSON form take the value through a Value.
    fn via_value<E: serde::de::Error>(self, value: Value) -> Result<(), E> {
        let Type::Message(index) = self.seed.field.ty else {
            return self.shape(&value.to_string());
        };
        let number = self.number();
        let schema = self.seed.schema;
        let depth = self.seed.depth;
        let failure = &mut *self.seed.failure;
        wire::put_nested(self.seed.out, number, |o| {
            encode::message(schema, index, &value, o, depth + 1)
        })
        .map_err(|e| {
            *failure = Some(e);
            E::custom("special")
        })
    }
}

impl<'de> Visitor<'de> for OneVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a value for {}", self.seed.field.json)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_bool<E: serde::de::Error>(self, b: bool) -> Result<(), E> {
        match self.seed.field.ty {
            Type::Bool => {
                wire::put_key(self.seed.out, self.number(), 0);
                wire::put_varint(self.seed.out, u64::from(b));
                Ok(())
            }
            Type::Message(_) => self.via_value(Value::Bool(b)),
            _ => self.shape(&b.to_string()),
        }
    }

    fn visit_i64<E: serde::de::Error>(self, i: i64) -> Result<(), E> {
        self.int(i)
    }

    fn visit_u64<E: serde::de::Error>(self, u: u64) -> Result<(), E> {
        match i64::try_from(u) {
            Ok(i) => self.int(i),
            Err(_) => self.shape(&u.to_string()),
        }
    }

    fn visit_f64<E: serde::de::Error>(self, f: f64) -> Result<(), E> {
        match self.seed.field.ty {
            Type::Double => {
                wire::put_key(self.seed.out, self.number(), 1);
                self.seed.out.extend_from_slice(&f.to_le_bytes());
                Ok(())
            }
            Type::Int32 | Type::Int64 if f.fract() == 0.0 => self.int(f as i64),
            Type::Message(_) => match serde_json::Number::from_f64(f) {
                Some(n) => self.via_value(Value::Number(n)),
                None => self.shape(&f.to_string()),
            },
            _ => self.shape(&f.to_string()),
        }
    }

    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<(), E> {
        match self.seed.field.ty {
            Type::String => {
                wire::put_bytes(self.seed.out, self.number(), s.as_bytes());
                Ok(())
            }
            Type::Bytes => {
                use base64::Engine;
                match base64::engine::general_purpose::STANDARD.decode(s) {
                    Ok(bytes) => {
                        wire::put_bytes(self.seed.out, self.number(), &bytes);
                        Ok(())
                    }
                    Err(_) => self.shape(s),
                }
            }
            Type::Message(_) => self.via_value(Value::String(s.to_string())),
            _ => self.shape(s),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let Type::Message(index) = self.seed.field.ty else {
            return self.shape("an object");
        };
        let schema = self.seed.schema;
        let msg = schema.message(index);
        if msg.special != Special::None {
            let value: Value =
                serde::Deserialize::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
            return self.via_value(value);
        }
        let number = self.number();
        let depth = self.seed.depth + 1;
        if depth > MAX_DEPTH {
            *self.seed.failure = Some(EncodeError::TooDeep);
            return Err(A::Error::custom("too deep"));
        }
        let failure = &mut *self.seed.failure;
        let mut result = Ok(());
        wire::put_nested(self.seed.out, number, |o| {
            result = MessageSeed {
                schema,
                msg,
                out: o,
                depth,
                failure,
            }
            .visit_map(map);
            Ok::<_, EncodeError>(())
        })
        .ok();
        result
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        // Only a message with a special form (a Go named slice, a schema
        // union) is written as a JSON array in a singular field.
        let value: Value =
            serde::Deserialize::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))?;
        self.via_value(value)
    }
}

/// A repeated field: each item as its own occurrence.
struct ListVisitor<'s, 'o>(FieldSeed<'s, 'o>);

impl<'de> Visitor<'de> for ListVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list for {}", self.0.field.json)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let FieldSeed {
            schema,
            field,
            out,
            depth,
            failure,
        } = self.0;
        loop {
            let item = ItemSeed(OneVisitor {
                seed: FieldSeed {
                    schema,
                    field,
                    out: &mut *out,
                    depth,
                    failure: &mut *failure,
                },
                number: None,
            });
            if seq.next_element_seed(item)?.is_none() {
                return Ok(());
            }
        }
    }
}

struct ItemSeed<'s, 'o>(OneVisitor<'s, 'o>);

impl<'de> DeserializeSeed<'de> for ItemSeed<'_, '_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self.0)
    }
}

/// A map field: one entry message (key = 1, value = 2) per key.
struct MapVisitor<'s, 'o>(FieldSeed<'s, 'o>);

impl<'de> Visitor<'de> for MapVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object for {}", self.0.field.json)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let FieldSeed {
            schema,
            field,
            out,
            depth,
            failure,
        } = self.0;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let mut result = Ok(());
            wire::put_nested(&mut *out, field.number, |o| {
                wire::put_bytes(o, 1, key.as_bytes());
                let value = ItemSeed(OneVisitor {
                    seed: FieldSeed {
                        schema,
                        field,
                        out: o,
                        depth,
                        failure: &mut *failure,
                    },
                    number: Some(2),
                });
                result = map.next_value_seed(value);
                Ok::<_, EncodeError>(())
            })
            .ok();
            result?;
        }
        Ok(())
    }
}
