//! The protobuf schema of Kubernetes' built-in kinds, as a table generated
//! from the k8s-pb bindings (`tools/protoschema/generate.py`, file
//! `k8s.schema` beside this one): every message, its fields' numbers, wire
//! types and JSON names. Loaded once, on first use.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::LazyLock;

const TABLE: &str = include_str!("k8s.schema");

/// The process-wide schema.
pub fn schema() -> &'static Schema {
    static SCHEMA: LazyLock<Schema> = LazyLock::new(|| Schema::parse(TABLE));
    &SCHEMA
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    /// `optional`: one value.
    One,
    /// `repeated`: a JSON array.
    Many,
    /// `map<string, V>`: a JSON object.
    Map,
    /// A Go struct embedded inline: its fields are the parent's JSON keys.
    Inline,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    String,
    Int32,
    Int64,
    Bool,
    Double,
    Bytes,
    Message(usize),
}

#[derive(Debug)]
pub struct Field {
    pub number: u32,
    pub label: Label,
    pub ty: Type,
    pub json: String,
    /// What the Go type says of a written zero; see [`Zero`].
    pub zero: Zero,
}

/// What a singular zero value (`""`, `0`, `false`) on the wire means. Go
/// writes every non-pointer field, set or not, so only the Go type tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero {
    /// A pointer: written only when set, so the zero is the user's.
    Kept,
    /// Not a pointer, JSON `omitempty`: Go's JSON would leave it out.
    Omitted,
    /// Not a pointer, no `omitempty`: Go's JSON writes the zero too.
    Written,
    /// Not in the Go types (a message outside the served kinds): drop an
    /// empty string, keep other zeros.
    Unknown,
}

/// Messages whose JSON form is not an object of their fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    None,
    /// meta/v1 `Time`: RFC 3339 with seconds.
    Time,
    /// meta/v1 `MicroTime`: RFC 3339 with microseconds.
    MicroTime,
    /// meta/v1 `Duration`: a Go duration string.
    Duration,
    /// `resource.Quantity`: its string.
    Quantity,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `RawExtension`, `FieldsV1`, apiextensions `JSON`: field 1 holds JSON.
    RawJson,
    /// A Go named slice (`ExtraValue`, `Verbs`): field 1's items as an array.
    Array,
    /// apiextensions `JSONSchemaPropsOrArray`: a schema or an array of them.
    SchemaOrArray,
    /// apiextensions `JSONSchemaPropsOrBool`: a bool or a schema.
    SchemaOrBool,
    /// apiextensions `JSONSchemaPropsOrStringArray`: a schema or strings.
    SchemaOrStrings,
}

#[derive(Debug)]
pub struct Message {
    pub name: String,
    pub special: Special,
    /// Sorted by number.
    pub fields: Vec<Field>,
    /// Looked up once per key of every object encoded: a cheap hash (the
    /// table is fixed, so no key can be made to collide more than it does).
    by_json: HashMap<String, usize, FastHash>,
}

type FastHash = BuildHasherDefault<Fnv1a>;

/// FNV-1a: for short field names it costs a fraction of the default
/// SipHash, which showed in the profile of protobuf answers.
#[derive(Default)]
pub struct Fnv1a(u64);

impl Hasher for Fnv1a {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut hash = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = hash;
    }
}

impl Message {
    pub fn field(&self, number: u32) -> Option<&Field> {
        self.fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &self.fields[i])
    }

    pub fn field_by_json(&self, json: &str) -> Option<&Field> {
        self.by_json.get(json).map(|&i| &self.fields[i])
    }

    /// Fields embedded inline (their keys are looked for in this object).
    pub fn has_inline(&self) -> bool {
        self.fields.iter().any(|f| f.label == Label::Inline)
    }
}

#[derive(Debug)]
pub struct Schema {
    pub messages: Vec<Message>,
    by_name: HashMap<String, usize>,
    /// Lower-cased names: prost renamed `IPBlock` to `IpBlock`, kinds keep
    /// Kubernetes' capitals.
    by_lower_name: HashMap<String, usize>,
    /// apiVersion -> proto package.
    packages: HashMap<String, String>,
    /// apiVersion -> the kinds of its package as spelled in the table ->
    /// what [`Schema::kind`] finds for them; every encode and decode asks,
    /// and this answers without building and lower-casing a name.
    kinds: HashMap<String, HashMap<String, usize, FastHash>, FastHash>,
    /// The k8s-pb release the table was generated from.
    pub bindings_version: String,
    /// The Kubernetes release k8s-pb's protos follow.
    pub bindings_kubernetes_version: String,
    /// The Kubernetes release the table covers (k8s-pb plus the Go types'
    /// newer fields).
    pub kubernetes_version: String,
}

const META_V1: &str = "apimachinery.pkg.apis.meta.v1";

impl Schema {
    fn parse(table: &str) -> Self {
        let mut schema = Schema {
            messages: Vec::new(),
            by_name: HashMap::new(),
            by_lower_name: HashMap::new(),
            packages: HashMap::new(),
            kinds: HashMap::default(),
            bindings_version: String::new(),
            bindings_kubernetes_version: String::new(),
            kubernetes_version: String::new(),
        };
        // First pass: names, so fields can refer to messages by index.
        for line in table.lines() {
            if let Some(name) = line.strip_prefix("M ") {
                schema
                    .by_name
                    .insert(name.to_string(), schema.messages.len());
                schema
                    .by_lower_name
                    .insert(name.to_ascii_lowercase(), schema.messages.len());
                schema.messages.push(Message {
                    name: name.to_string(),
                    special: special_of(name),
                    fields: Vec::new(),
                    by_json: HashMap::default(),
                });
            }
        }
        let mut current = None;
        for line in table.lines() {
            let mut words = line.split(' ');
            match words.next() {
                Some("V") => {
                    schema.bindings_version = words.next().unwrap_or_default().to_string();
                    schema.bindings_kubernetes_version =
                        words.next().unwrap_or_default().to_string();
                    let _openapi = words.next();
                    schema.kubernetes_version = words.next().unwrap_or_default().to_string();
                }
                Some("G") => {
                    if let (Some(api_version), Some(package)) = (words.next(), words.next()) {
                        schema
                            .packages
                            .insert(api_version.to_string(), package.to_string());
                    }
                }
                Some("M") => current = words.next().and_then(|n| schema.by_name.get(n).copied()),
                Some("F") => {
                    let (Some(index), Some(number), Some(label), Some(ty), Some(json), flags) = (
                        current,
                        words.next().and_then(|n| n.parse().ok()),
                        words.next(),
                        words.next(),
                        words.next(),
                        words.next().unwrap_or("?"),
                    ) else {
                        continue;
                    };
                    let zero = match flags {
                        "?" => Zero::Unknown,
                        f if f.contains('p') => Zero::Kept,
                        f if f.contains('o') => Zero::Omitted,
                        _ => Zero::Written,
                    };
                    let label = match label {
                        "many" => Label::Many,
                        "map" => Label::Map,
                        "inline" => Label::Inline,
                        _ => Label::One,
                    };
                    let ty = match ty {
                        "string" => Type::String,
                        "int32" => Type::Int32,
                        "int64" => Type::Int64,
                        "bool" => Type::Bool,
                        "double" => Type::Double,
                        "bytes" => Type::Bytes,
                        name => match schema.by_name.get(name) {
                            Some(&i) => Type::Message(i),
                            None => continue,
                        },
                    };
                    schema.messages[index].fields.push(Field {
                        number,
                        label,
                        ty,
                        json: json.to_string(),
                        zero,
                    });
                }
                _ => {}
            }
        }
        for message in &mut schema.messages {
            message.fields.sort_by_key(|f| f.number);
            message.by_json = message
                .fields
                .iter()
                .enumerate()
                .filter(|(_, f)| f.label != Label::Inline)
                .map(|(i, f)| (f.json.clone(), i))
                .collect();
            if message.special == Special::None
                && message.fields.len() == 1
                && message.fields[0].json == "items"
                && message.fields[0].label == Label::Many
                && !matches!(message.fields[0].ty, Type::Message(_))
            {
                message.special = Special::Array;
            }
        }
        schema.kinds = schema
            .packages
            .iter()
            .map(|(api_version, package)| {
                let prefix = format!("{package}.");
                let kinds = schema
                    .messages
                    .iter()
                    .filter_map(|m| m.name.strip_prefix(&prefix))
                    .filter(|kind| !kind.contains('.'))
                    .filter_map(|kind| {
                        let index = schema.kind_by_lower_name(api_version, kind)?;
                        Some((kind.to_string(), index))
                    })
                    .collect();
                (api_version.clone(), kinds)
            })
            .collect();
        schema
    }

    pub fn message(&self, index: usize) -> &Message {
        &self.messages[index]
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The message of a kind in an API version (`v1` `Pod`, `apps/v1`
    /// `Deployment`, `v1` `Status`); meta/v1 kinds (Status, DeleteOptions,
    /// WatchEvent, Table) are found under every version.
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.kinds
            .get(api_version)
            .and_then(|kinds| kinds.get(kind))
            .copied()
            .or_else(|| self.kind_by_lower_name(api_version, kind))
    }

    fn kind_by_lower_name(&self, api_version: &str, kind: &str) -> Option<usize> {
        self.packages
            .get(api_version)
            .and_then(|p| self.lower(&format!("{p}.{kind}")))
            .or_else(|| self.lower(&format!("{META_V1}.{kind}")))
    }

    fn lower(&self, name: &str) -> Option<usize> {
        self.by_lower_name.get(&name.to_ascii_lowercase()).copied()
    }
}

fn special_of(name: &str) -> Special {
    match name {
        "apimachinery.pkg.apis.meta.v1.Time" => Special::Time,
        "apimachinery.pkg.apis.meta.v1.MicroTime" => Special::MicroTime,
        "apimachinery.pkg.apis.meta.v1.Duration" => Special::Duration,
        "apimachinery.pkg.api.resource.Quantity" => Special::Quantity,
        "apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
        "apimachinery.pkg.runtime.RawExtension" | "apimachinery.pkg.apis.meta.v1.FieldsV1" => {
            Special::RawJson
        }
        _ if name.starts_with("apiextensions_apiserver.pkg.apis.apiextensions.") => {
            match name.rsplit('.').next().unwrap_or_default() {
                "Json" => Special::RawJson,
                "JsonSchemaPropsOrArray" => Special::SchemaOrArray,
                "JsonSchemaPropsOrBool" => Special::SchemaOrBool,
                "JsonSchemaPropsOrStringArray" => Special::SchemaOrStrings,
                _ => Special::None,
            }
        }
        _ => Special::None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_index_finds_what_the_lower_cased_name_lookup_finds() {
        let schema = schema();
        let mut checked = 0;
        for (api_version, kinds) in &schema.kinds {
            for kind in kinds.keys() {
                assert_eq!(
                    schema.kind(api_version, kind),
                    schema.kind_by_lower_name(api_version, kind),
                    "{api_version} {kind}"
                );
                checked += 1;
            }
        }
        assert!(checked > 500, "only {checked} kinds indexed");
        let pod = schema.kind("v1", "Pod").unwrap();
        assert_eq!(schema.message(pod).name, "api.core.v1.Pod");
        // What the index does not hold still goes the old way: any case,
        // and meta/v1 kinds under every version.
        assert_eq!(schema.kind("v1", "pod"), Some(pod));
        let status = schema.kind("apps/v1", "Status").unwrap();
        assert_eq!(
            schema.message(status).name,
            "apimachinery.pkg.apis.meta.v1.Status"
        );
        assert_eq!(schema.kind("example.com/v1", "Widget"), None);
    }
}
