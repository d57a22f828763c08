//! Turning an `openAPIV3Schema` document into a tree of [`Node`]s, rejecting
//! what the apiserver rejects in a CRD: non-structural schemas, unsupported
//! keywords, invalid regexes, defaults that do not validate or are not
//! pruned, and CEL rules that do not compile.

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::errors::{FieldError, FieldErrorKind, go_quote};
use super::rules::{self, CompiledRule};

/// The JSON types a structural schema may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JsonType {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl JsonType {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "object" => JsonType::Object,
            "array" => JsonType::Array,
            "string" => JsonType::String,
            "integer" => JsonType::Integer,
            "number" => JsonType::Number,
            "boolean" => JsonType::Boolean,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            JsonType::Object => "object",
            JsonType::Array => "array",
            JsonType::String => "string",
            JsonType::Integer => "integer",
            JsonType::Number => "number",
            JsonType::Boolean => "boolean",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListType {
    Atomic,
    Set,
    Map,
}

/// What an object node says about keys it does not list in `properties`.
#[derive(Debug)]
pub(super) enum Additional {
    /// No `additionalProperties`: unknown keys are pruned (unless preserved).
    Unspecified,
    /// `additionalProperties: true`: any value is kept, unvalidated.
    Any,
    /// `additionalProperties: {schema}`: a map whose values follow the schema.
    Schema(Box<Node>),
}

/// One compiled schema node.
#[derive(Debug)]
pub(super) struct Node {
    /// The declared type; `None` for int-or-string, preserve-unknown-fields
    /// without a type, and nested value validations (allOf & co.).
    pub ty: Option<JsonType>,
    pub nullable: bool,
    pub format: Option<String>,
    pub int_or_string: bool,
    pub preserve_unknown: bool,
    pub embedded_resource: bool,
    pub properties: BTreeMap<String, Node>,
    pub required: Vec<String>,
    pub additional: Additional,
    pub items: Option<Box<Node>>,
    pub enum_values: Option<Vec<Value>>,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub max_length: Option<u64>,
    pub min_length: Option<u64>,
    pub pattern: Option<(String, Regex)>,
    pub max_items: Option<u64>,
    pub min_items: Option<u64>,
    pub max_properties: Option<u64>,
    pub min_properties: Option<u64>,
    pub default: Option<Value>,
    pub list_type: Option<ListType>,
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type: atomic` (granular otherwise).
    pub map_atomic: bool,
    pub all_of: Vec<Node>,
    pub any_of: Vec<Node>,
    pub one_of: Vec<Node>,
    pub not: Option<Box<Node>>,
    pub rules: Vec<CompiledRule>,
}

impl Node {
    /// The type names the type check accepts, as kube-openapi sees them.
    pub(super) fn type_names(&self) -> Vec<&'static str> {
        if self.int_or_string {
            vec!["integer", "string"]
        } else if let Some(ty) = self.ty {
            vec![ty.name()]
        } else {
            Vec::new()
        }
    }

    /// The type the CEL errors name as the offending value (`"object"`, ...).
    pub(super) fn cel_type_name(&self) -> &'static str {
        self.ty.map(JsonType::name).unwrap_or("")
    }

    /// Whether any node at or below this one carries CEL rules.
    pub(super) fn has_rules(&self) -> bool {
        !self.rules.is_empty()
            || self.properties.values().any(Node::has_rules)
            || self.items.as_ref().is_some_and(|n| n.has_rules())
            || matches!(&self.additional, Additional::Schema(n) if n.has_rules())
            || self.all_of.iter().any(Node::has_rules)
    }
}

/// Where a node sits, which decides what the structural rules allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// The root of the resource.
    Root,
    /// A property, item or additionalProperties schema on the structural spine.
    Spine,
    /// Inside allOf/anyOf/oneOf/not: value validations only.
    Nested,
    /// Directly in the anyOf/allOf of an x-kubernetes-int-or-string node,
    /// where `type: integer` and `type: string` are allowed (the shape
    /// controller-gen emits for IntOrString).
    NestedIntOrString,
}

/// Whether an ancestor breaks old/new correlation, which forbids `oldSelf`.
#[derive(Debug, Clone, Copy)]
struct Context {
    position: Position,
    correlatable: bool,
}

pub(super) struct Compiler {
    errors: Vec<FieldError>,
}

/// The formats the apiserver keeps in CRD schemas, compared with dashes
/// removed as go-openapi normalizes format names; any other format
/// (`int32`, `int64`, `float`, `double` included) is stripped before
/// validation and so validates nothing.
const SUPPORTED_FORMATS: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

impl Compiler {
    pub(super) fn new() -> Self {
        Compiler { errors: Vec::new() }
    }

    pub(super) fn into_errors(self) -> Vec<FieldError> {
        self.errors
    }

    fn invalid(&mut self, field: &str, value: Value, detail: impl Into<String>) {
        self.errors.push(FieldError::invalid(field, value, detail));
    }

    fn forbidden(&mut self, field: &str, detail: impl Into<String>) {
        self.errors.push(FieldError::new(
            field,
            FieldErrorKind::Forbidden,
            None,
            detail,
        ));
    }

    fn required(&mut self, field: &str, detail: impl Into<String>) {
        self.errors.push(FieldError::required(field, detail));
    }

    pub(super) fn compile_root(&mut self, schema: &Value) -> Node {
        let ctx = Context {
            position: Position::Root,
            correlatable: true,
        };
        let node = self.compile_node(schema, "openAPIV3Schema", ctx, "an object");
        if node.ty != Some(JsonType::Object) {
            self.invalid(
                "openAPIV3Schema.type",
                Value::String(node.ty.map(JsonType::name).unwrap_or("").into()),
                "must be object at the root",
            );
        }
        node
    }

    fn compile_node(&mut self, raw: &Value, path: &str, ctx: Context, what: &str) -> Node {
        let empty = Map::new();
        let obj = match raw {
            Value::Object(map) => map,
            other => {
                self.invalid(
                    path,
                    other.clone(),
                    format!("must be a schema object for {what}"),
                );
                &empty
            }
        };
        let nested = matches!(ctx.position, Position::Nested | Position::NestedIntOrString);

        for keyword in [
            "$ref",
            "definitions",
            "patternProperties",
            "dependencies",
            "additionalItems",
        ] {
            if obj.contains_key(keyword) {
                self.forbidden(
                    &format!("{path}.{keyword}"),
                    format!("{keyword} is not supported"),
                );
            }
        }

        let bool_of = |c: &mut Compiler, key: &str| -> bool {
            match obj.get(key) {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(other) => {
                    c.invalid(&format!("{path}.{key}"), other.clone(), "must be a boolean");
                    false
                }
            }
        };

        let int_or_string = bool_of(self, "x-kubernetes-int-or-string");
        let preserve_unknown = bool_of(self, "x-kubernetes-preserve-unknown-fields");
        if obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
            self.invalid(
                &format!("{path}.x-kubernetes-preserve-unknown-fields"),
                Value::Bool(false),
                "must be true or undefined",
            );
        }
        let embedded_resource = bool_of(self, "x-kubernetes-embedded-resource");
        let nullable = bool_of(self, "nullable");

        let ty = match obj.get("type") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => match JsonType::parse(s) {
                Some(t) => Some(t),
                None => {
                    self.errors.push(FieldError::not_supported(
                        &format!("{path}.type"),
                        Value::String(s.clone()),
                        &["array", "boolean", "integer", "number", "object", "string"]
                            .map(String::from),
                    ));
                    None
                }
            },
            Some(other) => {
                self.invalid(&format!("{path}.type"), other.clone(), "must be a string");
                None
            }
        };

        if nested {
            let int_or_string_branch = ctx.position == Position::NestedIntOrString
                && matches!(ty, Some(JsonType::Integer | JsonType::String));
            if obj.contains_key("type") && !int_or_string_branch {
                self.forbidden(&format!("{path}.type"), "must be empty to be structural");
            }
            for keyword in [
                "nullable",
                "default",
                "additionalProperties",
                "x-kubernetes-preserve-unknown-fields",
                "x-kubernetes-embedded-resource",
                "x-kubernetes-int-or-string",
                "x-kubernetes-list-type",
                "x-kubernetes-list-map-keys",
                "x-kubernetes-map-type",
            ] {
                if obj.contains_key(keyword) {
                    self.forbidden(
                        &format!("{path}.{keyword}"),
                        "must be empty to be structural",
                    );
                }
            }
        } else if ty.is_none() && !int_or_string && !preserve_unknown && !obj.contains_key("type") {
            self.required(
                &format!("{path}.type"),
                format!("must not be empty for specified {what}"),
            );
        }
        if int_or_string && ty.is_some() {
            self.invalid(
                &format!("{path}.type"),
                Value::String(ty.map(JsonType::name).unwrap_or("").into()),
                "must be empty if x-kubernetes-int-or-string is true",
            );
        }
        if preserve_unknown && ty.is_some() && ty != Some(JsonType::Object) {
            self.invalid(
                &format!("{path}.type"),
                Value::String(ty.map(JsonType::name).unwrap_or("").into()),
                "must be object if x-kubernetes-preserve-unknown-fields is true",
            );
        }
        if embedded_resource && ty != Some(JsonType::Object) {
            self.invalid(
                &format!("{path}.type"),
                Value::String(ty.map(JsonType::name).unwrap_or("").into()),
                "must be object if x-kubernetes-embedded-resource is true",
            );
        }

        let format = match obj.get("format") {
            Some(Value::String(f)) if !f.is_empty() => {
                // The apiserver strips formats it does not know before
                // validating, so they validate nothing.
                let normalized = f.replace('-', "");
                SUPPORTED_FORMATS
                    .contains(&normalized.as_str())
                    .then(|| f.clone())
            }
            _ => None,
        };

        let child_ctx = Context {
            position: if nested {
                Position::Nested
            } else {
                Position::Spine
            },
            correlatable: ctx.correlatable,
        };

        // properties
        let mut properties = BTreeMap::new();
        if let Some(props) = obj.get("properties") {
            match props {
                Value::Object(props) => {
                    for (name, sub) in props {
                        let sub_path = format!("{path}.properties[{name}]");
                        let node = self.compile_node(sub, &sub_path, child_ctx, "object fields");
                        properties.insert(name.clone(), node);
                    }
                }
                other => self.invalid(
                    &format!("{path}.properties"),
                    other.clone(),
                    "must be an object",
                ),
            }
        }
        if ctx.position == Position::Root {
            self.check_root_metadata(&properties, path);
        }

        // additionalProperties
        let additional = match obj.get("additionalProperties") {
            None | Some(Value::Null) => Additional::Unspecified,
            Some(Value::Bool(true)) => Additional::Any,
            Some(Value::Bool(false)) => {
                self.forbidden(
                    &format!("{path}.additionalProperties"),
                    "additionalProperties cannot be set to false",
                );
                Additional::Unspecified
            }
            Some(sub) => {
                // Values of a granular map correlate with the old map by key.
                let map_atomic = obj.get("x-kubernetes-map-type") == Some(&Value::from("atomic"));
                let ctx = Context {
                    correlatable: child_ctx.correlatable && !map_atomic,
                    ..child_ctx
                };
                let sub_path = format!("{path}.additionalProperties");
                Additional::Schema(Box::new(self.compile_node(
                    sub,
                    &sub_path,
                    ctx,
                    "additionalProperties",
                )))
            }
        };
        if !properties.is_empty() && !matches!(additional, Additional::Unspecified) {
            self.forbidden(
                &format!("{path}.additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            );
        }

        // list type
        let list_type = match obj.get("x-kubernetes-list-type") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => match s.as_str() {
                "atomic" => Some(ListType::Atomic),
                "set" => Some(ListType::Set),
                "map" => Some(ListType::Map),
                _ => {
                    self.errors.push(FieldError::not_supported(
                        &format!("{path}.x-kubernetes-list-type"),
                        Value::String(s.clone()),
                        &["atomic", "set", "map"].map(String::from),
                    ));
                    None
                }
            },
            Some(other) => {
                self.invalid(
                    &format!("{path}.x-kubernetes-list-type"),
                    other.clone(),
                    "must be a string",
                );
                None
            }
        };
        let list_map_keys: Vec<String> = match obj.get("x-kubernetes-list-map-keys") {
            Some(Value::Array(keys)) => keys
                .iter()
                .filter_map(|k| k.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };
        if list_type.is_some() && ty != Some(JsonType::Array) {
            self.invalid(
                &format!("{path}.x-kubernetes-list-type"),
                obj.get("x-kubernetes-list-type")
                    .cloned()
                    .unwrap_or(Value::Null),
                "must only be used if type is array",
            );
        }
        if list_type == Some(ListType::Map) && list_map_keys.is_empty() {
            self.required(
                &format!("{path}.x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            );
        }
        if !list_map_keys.is_empty() && list_type != Some(ListType::Map) {
            self.forbidden(
                &format!("{path}.x-kubernetes-list-map-keys"),
                "must not be set if x-kubernetes-list-type is not map",
            );
        }

        // items: only list-type=map lists correlate items with the old list.
        let items = match obj.get("items") {
            None | Some(Value::Null) => None,
            Some(Value::Array(_)) => {
                self.forbidden(
                    &format!("{path}.items"),
                    "items must be a schema object and not an array",
                );
                None
            }
            Some(sub) => {
                let ctx = Context {
                    correlatable: child_ctx.correlatable && list_type == Some(ListType::Map),
                    ..child_ctx
                };
                Some(Box::new(self.compile_node(
                    sub,
                    &format!("{path}.items"),
                    ctx,
                    "array items",
                )))
            }
        };
        if ty == Some(JsonType::Array) && items.is_none() && !nested {
            self.required(&format!("{path}.items"), "must be specified");
        }
        if let (Some(ListType::Map), Some(item)) = (list_type, items.as_deref()) {
            if item.ty != Some(JsonType::Object) {
                self.invalid(
                    &format!("{path}.items.type"),
                    Value::String(item.ty.map(JsonType::name).unwrap_or("").into()),
                    "must be object when x-kubernetes-list-type is map",
                );
            }
            for key in &list_map_keys {
                if !item.properties.contains_key(key) {
                    self.invalid(
                        &format!("{path}.x-kubernetes-list-map-keys"),
                        Value::from(list_map_keys.clone()),
                        format!(
                            "entries must all be names of item properties, {} is not",
                            go_quote(key)
                        ),
                    );
                }
            }
        }
        if let (Some(ListType::Set), Some(item)) = (list_type, items.as_deref())
            && matches!(item.ty, Some(JsonType::Object | JsonType::Array))
            && !(item.ty == Some(JsonType::Object) && item.map_atomic)
            && item.list_type != Some(ListType::Atomic)
        {
            self.invalid(
                &format!("{path}.items.x-kubernetes-map-type"),
                Value::Null,
                "must be atomic as item of a list with x-kubernetes-list-type=set",
            );
        }

        let map_atomic = match obj.get("x-kubernetes-map-type") {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) if s == "atomic" => true,
            Some(Value::String(s)) if s == "granular" => false,
            Some(other) => {
                self.errors.push(FieldError::not_supported(
                    &format!("{path}.x-kubernetes-map-type"),
                    other.clone(),
                    &["granular", "atomic"].map(String::from),
                ));
                false
            }
        };

        if obj.get("uniqueItems") == Some(&Value::Bool(true)) {
            self.forbidden(
                &format!("{path}.uniqueItems"),
                "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
            );
        }

        let count = |c: &mut Compiler, key: &str| -> Option<u64> {
            match obj.get(key) {
                None | Some(Value::Null) => None,
                Some(v) => match v.as_u64() {
                    Some(n) => Some(n),
                    None => {
                        c.invalid(
                            &format!("{path}.{key}"),
                            v.clone(),
                            "must be a non-negative integer",
                        );
                        None
                    }
                },
            }
        };
        let number = |c: &mut Compiler, key: &str| -> Option<f64> {
            match obj.get(key) {
                None | Some(Value::Null) => None,
                Some(v) => match v.as_f64() {
                    Some(n) => Some(n),
                    None => {
                        c.invalid(&format!("{path}.{key}"), v.clone(), "must be a number");
                        None
                    }
                },
            }
        };

        let max_length = count(self, "maxLength");
        let min_length = count(self, "minLength");
        let max_items = count(self, "maxItems");
        let min_items = count(self, "minItems");
        let max_properties = count(self, "maxProperties");
        let min_properties = count(self, "minProperties");
        let maximum = number(self, "maximum");
        let minimum = number(self, "minimum");
        let multiple_of = number(self, "multipleOf");
        if let Some(m) = multiple_of
            && m <= 0.0
        {
            self.invalid(
                &format!("{path}.multipleOf"),
                obj.get("multipleOf").cloned().unwrap_or(Value::Null),
                "must be greater than zero",
            );
        }
        let exclusive_maximum = bool_of(self, "exclusiveMaximum");
        let exclusive_minimum = bool_of(self, "exclusiveMinimum");

        let pattern = match obj.get("pattern") {
            None | Some(Value::Null) => None,
            Some(Value::String(p)) => match Regex::new(p) {
                Ok(re) => Some((p.clone(), re)),
                Err(err) => {
                    self.invalid(
                        &format!("{path}.pattern"),
                        Value::String(p.clone()),
                        format!("must be a valid regular expression, but isn't: {err}"),
                    );
                    None
                }
            },
            Some(other) => {
                self.invalid(
                    &format!("{path}.pattern"),
                    other.clone(),
                    "must be a string",
                );
                None
            }
        };

        let enum_values = match obj.get("enum") {
            None | Some(Value::Null) => None,
            Some(Value::Array(values)) => Some(values.clone()),
            Some(other) => {
                self.invalid(&format!("{path}.enum"), other.clone(), "must be an array");
                None
            }
        };

        let required = match obj.get("required") {
            Some(Value::Array(names)) => names
                .iter()
                .filter_map(|n| n.as_str().map(String::from))
                .collect(),
            _ => Vec::new(),
        };

        let nested_list = |c: &mut Compiler, key: &str| -> Vec<Node> {
            let position = if int_or_string && (key == "anyOf" || key == "allOf") {
                Position::NestedIntOrString
            } else {
                Position::Nested
            };
            let nested_ctx = Context {
                position,
                correlatable: ctx.correlatable,
            };
            match obj.get(key) {
                Some(Value::Array(subs)) => subs
                    .iter()
                    .enumerate()
                    .map(|(i, s)| c.compile_node(s, &format!("{path}.{key}[{i}]"), nested_ctx, key))
                    .collect(),
                Some(other) => {
                    c.invalid(&format!("{path}.{key}"), other.clone(), "must be an array");
                    Vec::new()
                }
                None => Vec::new(),
            }
        };
        let all_of = nested_list(self, "allOf");
        let any_of = nested_list(self, "anyOf");
        let one_of = nested_list(self, "oneOf");
        let not = obj.get("not").map(|s| {
            let nested_ctx = Context {
                position: Position::Nested,
                correlatable: ctx.correlatable,
            };
            Box::new(self.compile_node(s, &format!("{path}.not"), nested_ctx, "not"))
        });

        let default = obj.get("default").cloned();

        let mut node = Node {
            ty,
            nullable,
            format,
            int_or_string,
            preserve_unknown,
            embedded_resource,
            properties,
            required,
            additional,
            items,
            enum_values,
            maximum,
            exclusive_maximum,
            minimum,
            exclusive_minimum,
            multiple_of,
            max_length,
            min_length,
            pattern,
            max_items,
            min_items,
            max_properties,
            min_properties,
            default: None,
            list_type,
            list_map_keys,
            map_atomic,
            all_of,
            any_of,
            one_of,
            not,
            rules: Vec::new(),
        };

        if let Some(raw_rules) = obj.get("x-kubernetes-validations") {
            let rules_path = format!("{path}.x-kubernetes-validations");
            node.rules = rules::compile_rules(
                raw_rules,
                &rules_path,
                &node,
                ctx.correlatable,
                &mut self.errors,
            );
        }

        if let Some(default) = default {
            self.check_default(&node, &default, &format!("{path}.default"));
            node.default = Some(default);
        }
        node
    }

    /// At the root, metadata may only constrain name and generateName, as
    /// the apiserver allows.
    fn check_root_metadata(&mut self, properties: &BTreeMap<String, Node>, path: &str) {
        let Some(meta) = properties.get("metadata") else {
            return;
        };
        if meta.ty != Some(JsonType::Object) {
            self.invalid(
                &format!("{path}.properties[metadata].type"),
                Value::String(meta.ty.map(JsonType::name).unwrap_or("").into()),
                "must be object",
            );
        }
        for name in meta.properties.keys() {
            if name != "name" && name != "generateName" {
                self.forbidden(
                    &format!("{path}.properties[metadata].properties[{name}]"),
                    "must not be specified at the root, only name and generateName are allowed",
                );
            }
        }
    }

    /// Defaults must validate against their schema and survive pruning.
    fn check_default(&mut self, node: &Node, default: &Value, path: &str) {
        let mut pruned = default.clone();
        super::prune::prune_value(node, &mut pruned, false, "", &mut Vec::new());
        if &pruned != default {
            self.invalid(path, default.clone(), "must not have unknown fields");
            return;
        }
        // Rooted at the default itself, as the apiserver validates it.
        super::validate::validate_value(node, default, None, path, &mut self.errors);
    }
}
