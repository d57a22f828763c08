//! The OpenAPI v2 document as gnostic's `openapi.v2.Document` protobuf
//! message, the form client-go's `OpenAPISchema()` asks for and kubectl
//! builds its client-side validation models from.
//!
//! The input is the Swagger 2.0 JSON kube-sim serves; only the parts that
//! document uses are written (paths, operations, parameters, responses and
//! schemas with the keywords Kubernetes' definitions carry). Field numbers
//! follow gnostic-models' `openapiv2/OpenAPIv2.proto`. Free-form values
//! (`default`, `enum`, `example`, vendor extensions) travel as the proto's
//! `Any.yaml` text: their JSON text, which every YAML parser reads as the
//! same value.

use std::convert::Infallible;

use serde_json::{Map, Value};

use super::wire::{put_bytes, put_key, put_nested, put_varint};

/// Field numbers, grouped by message.
mod field {
    pub mod document {
        pub const SWAGGER: u32 = 1;
        pub const INFO: u32 = 2;
        pub const HOST: u32 = 3;
        pub const BASE_PATH: u32 = 4;
        pub const SCHEMES: u32 = 5;
        pub const CONSUMES: u32 = 6;
        pub const PRODUCES: u32 = 7;
        pub const PATHS: u32 = 8;
        pub const DEFINITIONS: u32 = 9;
        pub const VENDOR_EXTENSION: u32 = 16;
    }
    pub mod info {
        pub const TITLE: u32 = 1;
        pub const VERSION: u32 = 2;
        pub const DESCRIPTION: u32 = 3;
        pub const VENDOR_EXTENSION: u32 = 7;
    }
    /// `NamedAny`, `NamedSchema`, `NamedPathItem`, `NamedResponseValue`.
    pub mod named {
        pub const NAME: u32 = 1;
        pub const VALUE: u32 = 2;
    }
    pub mod any {
        pub const YAML: u32 = 2;
    }
    pub mod paths {
        pub const VENDOR_EXTENSION: u32 = 1;
        pub const PATH: u32 = 2;
    }
    pub mod path_item {
        pub const REF: u32 = 1;
        pub const PARAMETERS: u32 = 9;
        pub const VENDOR_EXTENSION: u32 = 10;
        /// The operation fields, by method.
        pub const OPERATIONS: [(&str, u32); 7] = [
            ("get", 2),
            ("put", 3),
            ("post", 4),
            ("delete", 5),
            ("options", 6),
            ("head", 7),
            ("patch", 8),
        ];
    }
    pub mod operation {
        pub const TAGS: u32 = 1;
        pub const SUMMARY: u32 = 2;
        pub const DESCRIPTION: u32 = 3;
        pub const OPERATION_ID: u32 = 5;
        pub const PRODUCES: u32 = 6;
        pub const CONSUMES: u32 = 7;
        pub const PARAMETERS: u32 = 8;
        pub const RESPONSES: u32 = 9;
        pub const SCHEMES: u32 = 10;
        pub const DEPRECATED: u32 = 11;
        pub const VENDOR_EXTENSION: u32 = 13;
    }
    /// `ParametersItem` and `ResponseValue` share this shape: the object
    /// itself or a `JsonReference`.
    pub mod item_or_reference {
        pub const ITEM: u32 = 1;
        pub const JSON_REFERENCE: u32 = 2;
    }
    pub mod json_reference {
        pub const REF: u32 = 1;
        pub const DESCRIPTION: u32 = 2;
    }
    pub mod parameter {
        pub const BODY: u32 = 1;
        pub const NON_BODY: u32 = 2;
    }
    pub mod body_parameter {
        pub const DESCRIPTION: u32 = 1;
        pub const NAME: u32 = 2;
        pub const IN: u32 = 3;
        pub const REQUIRED: u32 = 4;
        pub const SCHEMA: u32 = 5;
        pub const VENDOR_EXTENSION: u32 = 6;
    }
    /// `NonBodyParameter`'s oneof, by the parameter's `in`.
    pub const NON_BODY_KINDS: [(&str, u32); 4] =
        [("header", 1), ("formData", 2), ("query", 3), ("path", 4)];
    /// The sub-schema messages share their first four fields; after them
    /// query and formData parameters have `allow_empty_value`, which shifts
    /// every later field by one.
    pub mod sub_schema {
        pub const REQUIRED: u32 = 1;
        pub const IN: u32 = 2;
        pub const DESCRIPTION: u32 = 3;
        pub const NAME: u32 = 4;
        /// Relative to `TYPE` of header/path (5); query/formData add one.
        pub const TYPE: u32 = 5;
        pub const FORMAT: u32 = 6;
        pub const DEFAULT: u32 = 9;
        pub const UNIQUE_ITEMS: u32 = 19;
        pub const ENUM: u32 = 20;
        pub const VENDOR_EXTENSION: u32 = 22;
    }
    pub mod responses {
        pub const RESPONSE_CODE: u32 = 1;
        pub const VENDOR_EXTENSION: u32 = 2;
    }
    pub mod response {
        pub const DESCRIPTION: u32 = 1;
        pub const SCHEMA: u32 = 2;
        pub const VENDOR_EXTENSION: u32 = 5;
    }
    pub mod schema_item {
        pub const SCHEMA: u32 = 1;
    }
    pub mod schema {
        pub const REF: u32 = 1;
        pub const FORMAT: u32 = 2;
        pub const TITLE: u32 = 3;
        pub const DESCRIPTION: u32 = 4;
        pub const DEFAULT: u32 = 5;
        pub const MULTIPLE_OF: u32 = 6;
        pub const MAXIMUM: u32 = 7;
        pub const EXCLUSIVE_MAXIMUM: u32 = 8;
        pub const MINIMUM: u32 = 9;
        pub const EXCLUSIVE_MINIMUM: u32 = 10;
        pub const MAX_LENGTH: u32 = 11;
        pub const MIN_LENGTH: u32 = 12;
        pub const PATTERN: u32 = 13;
        pub const MAX_ITEMS: u32 = 14;
        pub const MIN_ITEMS: u32 = 15;
        pub const UNIQUE_ITEMS: u32 = 16;
        pub const MAX_PROPERTIES: u32 = 17;
        pub const MIN_PROPERTIES: u32 = 18;
        pub const REQUIRED: u32 = 19;
        pub const ENUM: u32 = 20;
        pub const ADDITIONAL_PROPERTIES: u32 = 21;
        pub const TYPE: u32 = 22;
        pub const ITEMS: u32 = 23;
        pub const ALL_OF: u32 = 24;
        pub const PROPERTIES: u32 = 25;
        pub const DISCRIMINATOR: u32 = 26;
        pub const READ_ONLY: u32 = 27;
        pub const EXAMPLE: u32 = 30;
        pub const VENDOR_EXTENSION: u32 = 31;
    }
    /// `AdditionalPropertiesItem`'s oneof.
    pub mod additional_properties {
        pub const SCHEMA: u32 = 1;
        pub const BOOLEAN: u32 = 2;
    }
    /// `TypeItem`, `ItemsItem`, `Properties` and `Definitions` each hold
    /// one repeated field numbered 1.
    pub const REPEATED: u32 = 1;
}

/// Encodes a Swagger 2.0 document as `openapi.v2.Document`.
pub fn encode_document(doc: &Value) -> Vec<u8> {
    use field::document as f;
    let mut out = Vec::new();
    let Some(doc) = doc.as_object() else {
        return out;
    };
    string(&mut out, f::SWAGGER, doc.get("swagger"));
    if let Some(info) = doc.get("info").and_then(Value::as_object) {
        message(&mut out, f::INFO, |out| encode_info(out, info));
    }
    string(&mut out, f::HOST, doc.get("host"));
    string(&mut out, f::BASE_PATH, doc.get("basePath"));
    strings(&mut out, f::SCHEMES, doc.get("schemes"));
    strings(&mut out, f::CONSUMES, doc.get("consumes"));
    strings(&mut out, f::PRODUCES, doc.get("produces"));
    if let Some(paths) = doc.get("paths").and_then(Value::as_object) {
        message(&mut out, f::PATHS, |out| encode_paths(out, paths));
    }
    if let Some(definitions) = doc.get("definitions").and_then(Value::as_object) {
        message(&mut out, f::DEFINITIONS, |out| {
            named_schemas(out, definitions)
        });
    }
    vendor_extensions(&mut out, f::VENDOR_EXTENSION, doc);
    out
}

fn encode_info(out: &mut Vec<u8>, info: &Map<String, Value>) {
    use field::info as f;
    string(out, f::TITLE, info.get("title"));
    string(out, f::VERSION, info.get("version"));
    string(out, f::DESCRIPTION, info.get("description"));
    vendor_extensions(out, f::VENDOR_EXTENSION, info);
}

fn encode_paths(out: &mut Vec<u8>, paths: &Map<String, Value>) {
    use field::{named, paths as f};
    vendor_extensions(out, f::VENDOR_EXTENSION, paths);
    for (path, item) in paths {
        let Some(item) = item.as_object() else {
            continue;
        };
        if path.starts_with("x-") {
            continue;
        }
        message(out, f::PATH, |out| {
            string_value(out, named::NAME, path);
            message(out, named::VALUE, |out| encode_path_item(out, item));
        });
    }
}

fn encode_path_item(out: &mut Vec<u8>, item: &Map<String, Value>) {
    use field::path_item as f;
    string(out, f::REF, item.get("$ref"));
    for (method, number) in f::OPERATIONS {
        if let Some(op) = item.get(method).and_then(Value::as_object) {
            message(out, number, |out| encode_operation(out, op));
        }
    }
    parameters(out, f::PARAMETERS, item.get("parameters"));
    vendor_extensions(out, f::VENDOR_EXTENSION, item);
}

fn encode_operation(out: &mut Vec<u8>, op: &Map<String, Value>) {
    use field::operation as f;
    strings(out, f::TAGS, op.get("tags"));
    string(out, f::SUMMARY, op.get("summary"));
    string(out, f::DESCRIPTION, op.get("description"));
    string(out, f::OPERATION_ID, op.get("operationId"));
    strings(out, f::PRODUCES, op.get("produces"));
    strings(out, f::CONSUMES, op.get("consumes"));
    parameters(out, f::PARAMETERS, op.get("parameters"));
    if let Some(responses) = op.get("responses").and_then(Value::as_object) {
        message(out, f::RESPONSES, |out| encode_responses(out, responses));
    }
    strings(out, f::SCHEMES, op.get("schemes"));
    boolean(out, f::DEPRECATED, op.get("deprecated"));
    vendor_extensions(out, f::VENDOR_EXTENSION, op);
}

/// A repeated `ParametersItem` field.
fn parameters(out: &mut Vec<u8>, number: u32, list: Option<&Value>) {
    for param in list.and_then(Value::as_array).into_iter().flatten() {
        let Some(param) = param.as_object() else {
            continue;
        };
        message(out, number, |out| encode_parameters_item(out, param));
    }
}

fn encode_parameters_item(out: &mut Vec<u8>, param: &Map<String, Value>) {
    use field::item_or_reference as f;
    if param.contains_key("$ref") {
        message(out, f::JSON_REFERENCE, |out| json_reference(out, param));
        return;
    }
    message(out, f::ITEM, |out| encode_parameter(out, param));
}

fn json_reference(out: &mut Vec<u8>, object: &Map<String, Value>) {
    use field::json_reference as f;
    string(out, f::REF, object.get("$ref"));
    string(out, f::DESCRIPTION, object.get("description"));
}

fn encode_parameter(out: &mut Vec<u8>, param: &Map<String, Value>) {
    use field::parameter as f;
    let location = param.get("in").and_then(Value::as_str).unwrap_or_default();
    if location == "body" {
        use field::body_parameter as b;
        message(out, f::BODY, |out| {
            string(out, b::DESCRIPTION, param.get("description"));
            string(out, b::NAME, param.get("name"));
            string(out, b::IN, param.get("in"));
            boolean(out, b::REQUIRED, param.get("required"));
            if let Some(schema) = param.get("schema").and_then(Value::as_object) {
                message(out, b::SCHEMA, |out| encode_schema(out, schema));
            }
            vendor_extensions(out, b::VENDOR_EXTENSION, param);
        });
        return;
    }
    let Some(&(_, kind)) = field::NON_BODY_KINDS
        .iter()
        .find(|(name, _)| *name == location)
    else {
        // Not a parameter location Swagger 2.0 knows: nothing to encode.
        return;
    };
    message(out, f::NON_BODY, |out| {
        message(out, kind, |out| encode_sub_schema(out, kind, param));
    });
}

/// The header/formData/query/path parameter message of `kind`.
fn encode_sub_schema(out: &mut Vec<u8>, kind: u32, param: &Map<String, Value>) {
    use field::sub_schema as f;
    // query (3) and formData (2) carry allow_empty_value as field 5.
    let shift = u32::from(kind == 2 || kind == 3);
    boolean(out, f::REQUIRED, param.get("required"));
    string(out, f::IN, param.get("in"));
    string(out, f::DESCRIPTION, param.get("description"));
    string(out, f::NAME, param.get("name"));
    if shift == 1 {
        boolean(out, f::TYPE, param.get("allowEmptyValue"));
    }
    string(out, f::TYPE + shift, param.get("type"));
    string(out, f::FORMAT + shift, param.get("format"));
    if let Some(default) = param.get("default") {
        any(out, f::DEFAULT + shift, default);
    }
    boolean(out, f::UNIQUE_ITEMS + shift, param.get("uniqueItems"));
    for value in param
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        any(out, f::ENUM + shift, value);
    }
    vendor_extensions(out, f::VENDOR_EXTENSION + shift, param);
}

fn encode_responses(out: &mut Vec<u8>, responses: &Map<String, Value>) {
    use field::{item_or_reference, named, responses as f};
    for (code, response) in responses {
        let Some(response) = response.as_object() else {
            continue;
        };
        if code.starts_with("x-") {
            continue;
        }
        message(out, f::RESPONSE_CODE, |out| {
            string_value(out, named::NAME, code);
            message(out, named::VALUE, |out| {
                if response.contains_key("$ref") {
                    message(out, item_or_reference::JSON_REFERENCE, |out| {
                        json_reference(out, response)
                    });
                } else {
                    message(out, item_or_reference::ITEM, |out| {
                        encode_response(out, response)
                    });
                }
            });
        });
    }
    vendor_extensions(out, f::VENDOR_EXTENSION, responses);
}

fn encode_response(out: &mut Vec<u8>, response: &Map<String, Value>) {
    use field::response as f;
    string(out, f::DESCRIPTION, response.get("description"));
    if let Some(schema) = response.get("schema").and_then(Value::as_object) {
        message(out, f::SCHEMA, |out| {
            message(out, field::schema_item::SCHEMA, |out| {
                encode_schema(out, schema)
            });
        });
    }
    vendor_extensions(out, f::VENDOR_EXTENSION, response);
}

/// A repeated `NamedSchema` field numbered 1 (`Definitions`, `Properties`).
fn named_schemas(out: &mut Vec<u8>, schemas: &Map<String, Value>) {
    use field::named;
    for (name, schema) in schemas {
        message(out, field::REPEATED, |out| {
            string_value(out, named::NAME, name);
            message(out, named::VALUE, |out| {
                if let Some(schema) = schema.as_object() {
                    encode_schema(out, schema);
                }
            });
        });
    }
}

/// `openapi.v2.Schema`.
pub fn encode_schema(out: &mut Vec<u8>, schema: &Map<String, Value>) {
    use field::schema as f;
    string(out, f::REF, schema.get("$ref"));
    string(out, f::FORMAT, schema.get("format"));
    string(out, f::TITLE, schema.get("title"));
    string(out, f::DESCRIPTION, schema.get("description"));
    if let Some(default) = schema.get("default") {
        any(out, f::DEFAULT, default);
    }
    double(out, f::MULTIPLE_OF, schema.get("multipleOf"));
    double(out, f::MAXIMUM, schema.get("maximum"));
    boolean(out, f::EXCLUSIVE_MAXIMUM, schema.get("exclusiveMaximum"));
    double(out, f::MINIMUM, schema.get("minimum"));
    boolean(out, f::EXCLUSIVE_MINIMUM, schema.get("exclusiveMinimum"));
    int64(out, f::MAX_LENGTH, schema.get("maxLength"));
    int64(out, f::MIN_LENGTH, schema.get("minLength"));
    string(out, f::PATTERN, schema.get("pattern"));
    int64(out, f::MAX_ITEMS, schema.get("maxItems"));
    int64(out, f::MIN_ITEMS, schema.get("minItems"));
    boolean(out, f::UNIQUE_ITEMS, schema.get("uniqueItems"));
    int64(out, f::MAX_PROPERTIES, schema.get("maxProperties"));
    int64(out, f::MIN_PROPERTIES, schema.get("minProperties"));
    strings(out, f::REQUIRED, schema.get("required"));
    for value in schema
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        any(out, f::ENUM, value);
    }
    match schema.get("additionalProperties") {
        Some(Value::Bool(allowed)) => message(out, f::ADDITIONAL_PROPERTIES, |out| {
            // A oneof member is written even when it is false.
            put_key(out, field::additional_properties::BOOLEAN, 0);
            put_varint(out, u64::from(*allowed));
        }),
        Some(Value::Object(sub)) => message(out, f::ADDITIONAL_PROPERTIES, |out| {
            message(out, field::additional_properties::SCHEMA, |out| {
                encode_schema(out, sub)
            });
        }),
        _ => {}
    }
    match schema.get("type") {
        Some(Value::String(one)) => message(out, f::TYPE, |out| {
            string_value(out, field::REPEATED, one);
        }),
        Some(many @ Value::Array(_)) => message(out, f::TYPE, |out| {
            strings(out, field::REPEATED, Some(many));
        }),
        _ => {}
    }
    match schema.get("items") {
        Some(Value::Object(one)) => message(out, f::ITEMS, |out| {
            message(out, field::REPEATED, |out| encode_schema(out, one));
        }),
        Some(Value::Array(many)) => message(out, f::ITEMS, |out| {
            for item in many.iter().filter_map(Value::as_object) {
                message(out, field::REPEATED, |out| encode_schema(out, item));
            }
        }),
        _ => {}
    }
    for sub in schema
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
    {
        message(out, f::ALL_OF, |out| encode_schema(out, sub));
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        // Written even when empty: kube-openapi reads a present `properties`
        // as "an object with these fields".
        message(out, f::PROPERTIES, |out| named_schemas(out, properties));
    }
    string(out, f::DISCRIMINATOR, schema.get("discriminator"));
    boolean(out, f::READ_ONLY, schema.get("readOnly"));
    if let Some(example) = schema.get("example") {
        any(out, f::EXAMPLE, example);
    }
    vendor_extensions(out, f::VENDOR_EXTENSION, schema);
}

/// Every `x-` key of `object` as a repeated `NamedAny` field.
fn vendor_extensions(out: &mut Vec<u8>, number: u32, object: &Map<String, Value>) {
    use field::named;
    for (name, value) in object.iter().filter(|(k, _)| k.starts_with("x-")) {
        message(out, number, |out| {
            string_value(out, named::NAME, name);
            any(out, named::VALUE, value);
        });
    }
}

/// An `openapi.v2.Any` holding `value` as YAML text (JSON is YAML).
fn any(out: &mut Vec<u8>, number: u32, value: &Value) {
    message(out, number, |out| {
        string_value(out, field::any::YAML, &value.to_string())
    });
}

fn message(out: &mut Vec<u8>, number: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let written: Result<(), Infallible> = put_nested(out, number, |out| {
        body(out);
        Ok(())
    });
    let Ok(()) = written;
}

/// A string field; proto3 leaves an empty one off the wire.
fn string_value(out: &mut Vec<u8>, number: u32, text: &str) {
    if !text.is_empty() {
        put_bytes(out, number, text.as_bytes());
    }
}

fn string(out: &mut Vec<u8>, number: u32, value: Option<&Value>) {
    if let Some(text) = value.and_then(Value::as_str) {
        string_value(out, number, text);
    }
}

/// A repeated string field from a JSON array of strings.
fn strings(out: &mut Vec<u8>, number: u32, value: Option<&Value>) {
    for text in value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        put_bytes(out, number, text.as_bytes());
    }
}

/// A bool field; only `true` goes on the wire (proto3 default is false).
fn boolean(out: &mut Vec<u8>, number: u32, value: Option<&Value>) {
    if value.and_then(Value::as_bool) == Some(true) {
        put_key(out, number, 0);
        put_varint(out, 1);
    }
}

/// An int64 field (varint, two's complement for negatives).
fn int64(out: &mut Vec<u8>, number: u32, value: Option<&Value>) {
    let Some(value) = value else {
        return;
    };
    let integer = value.as_i64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e18)
            .map(|f| f as i64)
    });
    if let Some(integer) = integer.filter(|&i| i != 0) {
        put_key(out, number, 0);
        put_varint(out, integer as u64);
    }
}

/// A double field (fixed64, little-endian IEEE 754).
fn double(out: &mut Vec<u8>, number: u32, value: Option<&Value>) {
    if let Some(float) = value.and_then(Value::as_f64).filter(|&f| f != 0.0) {
        put_key(out, number, 1);
        out.extend_from_slice(&float.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema_bytes(schema: Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_schema(&mut out, schema.as_object().unwrap());
        out
    }

    #[test]
    fn a_document_header_is_swagger_then_info() {
        let doc = json!({"swagger": "2.0", "info": {"title": "K", "version": "v1"}});
        assert_eq!(
            encode_document(&doc),
            [
                0x0a, 3, b'2', b'.', b'0', // 1: swagger
                0x12, 7, // 2: info, 7 bytes
                0x0a, 1, b'K', // info 1: title
                0x12, 2, b'v', b'1', // info 2: version
            ]
        );
    }

    #[test]
    fn a_schema_type_is_a_type_item_in_field_22() {
        // Field 22, wire type 2: key (22 << 3) | 2 = 178 = varint b2 01.
        assert_eq!(
            schema_bytes(json!({"type": "string"})),
            [0xb2, 0x01, 8, 0x0a, 6, b's', b't', b'r', b'i', b'n', b'g']
        );
    }

    #[test]
    fn a_reference_is_field_1_and_a_description_field_4() {
        assert_eq!(
            schema_bytes(json!({"$ref": "#/definitions/A", "description": "d"})),
            [
                0x0a, 15, b'#', b'/', b'd', b'e', b'f', b'i', b'n', b'i', b't', b'i', b'o', b'n',
                b's', b'/', b'A', // 1: _ref
                0x22, 1, b'd', // 4: description
            ]
        );
    }

    #[test]
    fn properties_are_named_schemas_and_required_a_repeated_string() {
        assert_eq!(
            schema_bytes(json!({"required": ["a"], "properties": {"a": {}}})),
            [
                0x9a, 0x01, 1, b'a', // 19: required
                0xca, 0x01, 7, // 25: properties, 7 bytes
                0x0a, 5, // NamedSchema, 5 bytes
                0x0a, 1, b'a', // name
                0x12, 0, // value: an empty Schema, still present
            ]
        );
    }

    #[test]
    fn additional_properties_false_is_still_written() {
        assert_eq!(
            schema_bytes(json!({"additionalProperties": false})),
            [0xaa, 0x01, 2, 0x10, 0]
        );
        assert_eq!(
            schema_bytes(json!({"additionalProperties": {"type": "integer"}})),
            [
                0xaa, 0x01, 14, // 21: AdditionalPropertiesItem
                0x0a, 12, // schema
                0xb2, 0x01, 9, 0x0a, 7, b'i', b'n', b't', b'e', b'g', b'e', b'r',
            ]
        );
    }

    #[test]
    fn vendor_extensions_and_enums_carry_their_value_as_yaml_text() {
        assert_eq!(
            schema_bytes(json!({"enum": ["A"]})),
            [0xa2, 0x01, 5, 0x12, 3, b'"', b'A', b'"'] // 20: Any{yaml: "\"A\""}
        );
        assert_eq!(
            schema_bytes(json!({"x-k": [1]})),
            [
                0xfa, 0x01, 12, // 31: NamedAny, 12 bytes
                0x0a, 3, b'x', b'-', b'k', // name
                0x12, 5, 0x12, 3, b'[', b'1', b']', // value: Any{yaml: "[1]"}
            ]
        );
    }

    #[test]
    fn numbers_use_their_wire_types() {
        // maxLength: int64 varint (field 11); minimum: double fixed64 (field 9).
        assert_eq!(
            schema_bytes(json!({"maxLength": 300, "minimum": 1.5})),
            [
                0x49, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, // 9: 1.5
                0x58, 0xac, 0x02, // 11: 300
            ]
        );
    }

    #[test]
    fn query_and_body_parameters_take_their_oneof_branches() {
        let mut out = Vec::new();
        encode_parameters_item(
            &mut out,
            json!({"name": "q", "in": "query", "type": "string", "uniqueItems": true})
                .as_object()
                .unwrap(),
        );
        assert_eq!(
            out,
            [
                0x0a, 25, // ParametersItem.parameter
                0x12, 23, // Parameter.non_body_parameter
                0x1a, 21, // NonBodyParameter.query_parameter_sub_schema
                0x12, 5, b'q', b'u', b'e', b'r', b'y', // 2: in
                0x22, 1, b'q', // 4: name
                0x32, 6, b's', b't', b'r', b'i', b'n', b'g', // 6: type
                0xa0, 0x01, 1, // 20: unique_items
            ]
        );
        let mut out = Vec::new();
        encode_parameters_item(
            &mut out,
            json!({"name": "body", "in": "body", "required": true, "schema": {}})
                .as_object()
                .unwrap(),
        );
        assert_eq!(
            out,
            [
                0x0a, 18, // ParametersItem.parameter
                0x0a, 16, // Parameter.body_parameter
                0x12, 4, b'b', b'o', b'd', b'y', // 2: name
                0x1a, 4, b'b', b'o', b'd', b'y', // 3: in
                0x20, 1, // 4: required
                0x2a, 0, // 5: schema (empty)
            ]
        );
    }
}
