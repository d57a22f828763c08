//! An object in memory as a serde deserializer for the answer encoder.
//! It reads like serde_json's `&Value` with one difference: embedded JSON
//! (`fieldsV1`, `RawExtension`) asked for by [`RAW_JSON`] is handed out as
//! compact bytes from `serde_json::to_vec`. serde_json's own route for a
//! raw value out of a `Value` goes through `Display`, whose formatter
//! writes piece by piece; for a Pod's managedFields that was the largest
//! single cost of a protobuf answer (docs/benchmarks.md).

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::forward_to_deserialize_any;
use serde_json::Value;

/// The newtype-struct name the encoder asks embedded JSON for.
pub(super) const RAW_JSON: &str = "kube-sim::protobuf::RawJson";

pub(super) struct InMemory<'a>(pub &'a Value);

impl<'de> serde::Deserializer<'de> for InMemory<'de> {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Array(items) => visitor.visit_seq(Items(items.iter())),
            Value::Object(map) => visitor.visit_map(Entries {
                entries: map.iter(),
                value: None,
            }),
            // Scalars read as `&Value` reads them (strings borrowed).
            scalar => scalar.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        if name == RAW_JSON {
            return visitor.visit_byte_buf(serde_json::to_vec(self.0)?);
        }
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

struct Items<'a>(std::slice::Iter<'a, Value>);

impl<'de> SeqAccess<'de> for Items<'de> {
    type Error = serde_json::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Self::Error> {
        self.0
            .next()
            .map(|item| seed.deserialize(InMemory(item)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Entries<'a> {
    entries: serde_json::map::Iter<'a>,
    value: Option<&'a Value>,
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = serde_json::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Self::Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(BorrowedStrDeserializer::new(key))
            .map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, Self::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(InMemory(value)),
            None => Err(serde::de::Error::custom(
                "a map value asked for before its key",
            )),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}
