//! Behaviour of the whole pipeline (compile, prepare, validate), with the
//! apiserver's exact messages.

use serde_json::{Value, json};

use super::*;

fn compile(schema: Value) -> CompiledSchema {
    match CompiledSchema::compile(&schema) {
        Ok(s) => s,
        Err(e) => panic!("schema should compile: {e}"),
    }
}

fn compile_errors(schema: Value) -> Vec<String> {
    match CompiledSchema::compile(&schema) {
        Ok(_) => panic!("schema should be rejected"),
        Err(e) => e.errors().iter().map(FieldError::message).collect(),
    }
}

/// A resource whose spec has the given properties (and required list).
fn spec_schema(properties: Value, required: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "spec": {"type": "object", "properties": properties, "required": required}
        }
    })
}

fn resource(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": spec})
}

/// Prepares then validates, as a create does.
fn create_messages(schema: &CompiledSchema, mut obj: Value) -> Vec<String> {
    schema.prepare(&mut obj);
    schema
        .validate(&obj, None)
        .iter()
        .map(FieldError::message)
        .collect()
}

fn update_messages(schema: &CompiledSchema, mut new: Value, mut old: Value) -> Vec<String> {
    schema.prepare(&mut new);
    schema.prepare(&mut old);
    schema
        .validate(&new, Some(&old))
        .iter()
        .map(FieldError::message)
        .collect()
}

const NOT_CHECKED: &str = "<nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

// ---------------------------------------------------------------- numbers

#[test]
fn minimum_violation_names_the_field_and_bound() {
    let s = compile(spec_schema(
        json!({"replicas": {"type": "integer", "minimum": 0}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"replicas": -1}))),
        [
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        ]
    );
    assert!(create_messages(&s, resource(json!({"replicas": 0}))).is_empty());
}

#[test]
fn exclusive_bounds_use_strict_wording() {
    let s = compile(spec_schema(
        json!({
            "low": {"type": "integer", "minimum": 0, "exclusiveMinimum": true},
            "high": {"type": "integer", "maximum": 10, "exclusiveMaximum": true},
            "cap": {"type": "integer", "maximum": 10}
        }),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"low": 0, "high": 10, "cap": 11}))),
        [
            "spec.cap: Invalid value: 11: spec.cap in body should be less than or equal to 10",
            "spec.high: Invalid value: 10: spec.high in body should be less than 10",
            "spec.low: Invalid value: 0: spec.low in body should be greater than 0",
        ]
    );
}

#[test]
fn float_values_are_compared_and_printed_as_floats() {
    let s = compile(spec_schema(
        json!({"ratio": {"type": "number", "minimum": 1.5}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"ratio": 0.5}))),
        [
            "spec.ratio: Invalid value: 0.5: spec.ratio in body should be greater than or equal to 1.5"
        ]
    );
}

#[test]
fn integer_values_compare_against_the_truncated_bound() {
    // kube-openapi compares an int64 with int64(minimum): 0 >= int64(0.5) passes.
    let s = compile(spec_schema(
        json!({"n": {"type": "integer", "minimum": 0.5}}),
        json!([]),
    ));
    assert!(create_messages(&s, resource(json!({"n": 0}))).is_empty());
}

#[test]
fn multiple_of_reports_the_factor() {
    let s = compile(spec_schema(
        json!({"n": {"type": "integer", "multipleOf": 5}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"n": 7}))),
        ["spec.n: Invalid value: 7: spec.n in body should be a multiple of 5"]
    );
    assert!(create_messages(&s, resource(json!({"n": 10}))).is_empty());
}

#[test]
fn integral_float_is_accepted_for_integer_type() {
    let s = compile(spec_schema(json!({"n": {"type": "integer"}}), json!([])));
    assert!(create_messages(&s, resource(json!({"n": 3.0}))).is_empty());
    assert_eq!(
        create_messages(&s, resource(json!({"n": 3.5}))),
        ["spec.n: Invalid value: \"number\": spec.n in body must be of type integer: \"number\""]
    );
}

#[test]
fn int32_format_does_not_range_check_as_in_the_apiserver() {
    // The apiserver strips int32/int64/float/double from CRD schemas, so an
    // int32 field accepts any int64.
    let s = compile(spec_schema(
        json!({"n": {"type": "integer", "format": "int32"}}),
        json!([]),
    ));
    assert!(create_messages(&s, resource(json!({"n": 1_i64 << 40}))).is_empty());
}

#[test]
fn stripped_numeric_formats_leave_the_plain_type_check() {
    let s = compile(spec_schema(
        json!({"n": {"type": "integer", "format": "int32"}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"n": true}))),
        ["spec.n: Invalid value: \"boolean\": spec.n in body must be of type integer: \"boolean\""]
    );
}

// ------------------------------------------------------------------ types

#[test]
fn wrong_type_reports_type_invalid_with_the_json_type() {
    let s = compile(spec_schema(
        json!({"count": {"type": "integer"}}),
        json!([]),
    ));
    let mut obj = resource(json!({"count": "string"}));
    s.prepare(&mut obj);
    let errs = s.validate(&obj, None);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].kind, FieldErrorKind::TypeInvalid);
    assert_eq!(errs[0].kind.cause_type(), "FieldValueTypeInvalid");
    assert_eq!(
        errs[0].message(),
        "spec.count: Invalid value: \"string\": spec.count in body must be of type integer: \"string\""
    );
    assert_eq!(
        errs[0].body(),
        "Invalid value: \"string\": spec.count in body must be of type integer: \"string\""
    );
}

#[test]
fn object_where_a_string_is_declared_is_pruned_empty_then_rejected() {
    let s = compile(spec_schema(json!({"name": {"type": "string"}}), json!([])));
    assert_eq!(
        create_messages(&s, resource(json!({"name": {"a": 1}}))),
        [
            "spec.name: Invalid value: \"object\": spec.name in body must be of type string: \"object\""
        ]
    );
}

#[test]
fn int_or_string_accepts_both_and_names_both_types() {
    let s = compile(spec_schema(
        json!({"port": {"x-kubernetes-int-or-string": true}}),
        json!([]),
    ));
    assert!(create_messages(&s, resource(json!({"port": 80}))).is_empty());
    assert!(create_messages(&s, resource(json!({"port": "http"}))).is_empty());
    assert_eq!(
        create_messages(&s, resource(json!({"port": true}))),
        [
            "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
        ]
    );
}

#[test]
fn int_or_string_in_controller_gen_shape_compiles_and_validates() {
    let s = compile(spec_schema(
        json!({"memory": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": true,
            "pattern": "^[0-9]+(Mi|Gi)?$"
        }}),
        json!([]),
    ));
    assert!(create_messages(&s, resource(json!({"memory": 512}))).is_empty());
    assert!(create_messages(&s, resource(json!({"memory": "4Gi"}))).is_empty());
    assert_eq!(
        create_messages(&s, resource(json!({"memory": "lots"}))),
        [
            "spec.memory: Invalid value: \"lots\": spec.memory in body should match '^[0-9]+(Mi|Gi)?$'"
        ]
    );
}

#[test]
fn types_inside_other_nested_schemas_are_not_structural() {
    let errs = compile_errors(spec_schema(
        json!({"v": {"type": "string", "anyOf": [{"type": "string"}]}}),
        json!([]),
    ));
    assert_eq!(
        errs,
        [
            "openAPIV3Schema.properties[spec].properties[v].anyOf[0].type: Forbidden: must be empty to be structural"
        ]
    );
}

#[test]
fn null_array_item_of_non_nullable_type_is_a_type_error() {
    let s = compile(spec_schema(
        json!({"tags": {"type": "array", "items": {"type": "string"}}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"tags": ["a", null]}))),
        [
            "spec.tags[1]: Invalid value: \"null\": spec.tags[1] in body must be of type string: \"null\""
        ]
    );
}

#[test]
fn null_for_a_non_nullable_field_is_dropped_so_required_reports_it() {
    let s = compile(spec_schema(
        json!({"name": {"type": "string"}}),
        json!(["name"]),
    ));
    let mut obj = resource(json!({"name": null}));
    s.prepare(&mut obj);
    assert_eq!(obj["spec"], json!({}));
    assert_eq!(
        s.validate(&obj, None)
            .iter()
            .map(FieldError::message)
            .collect::<Vec<_>>(),
        ["spec.name: Required value"]
    );
}

#[test]
fn nullable_null_is_kept_and_not_defaulted() {
    let s = compile(spec_schema(
        json!({"note": {"type": "string", "nullable": true, "default": "hi"}}),
        json!([]),
    ));
    let mut obj = resource(json!({"note": null}));
    s.prepare(&mut obj);
    assert_eq!(obj["spec"]["note"], Value::Null);
    assert!(s.validate(&obj, None).is_empty());
}

// ------------------------------------------------- required, enum, strings

#[test]
fn missing_required_field_is_required_value() {
    let s = compile(spec_schema(
        json!({"name": {"type": "string"}}),
        json!(["name"]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({}))),
        ["spec.name: Required value"]
    );
}

#[test]
fn enum_violation_lists_supported_values() {
    let s = compile(spec_schema(
        json!({"mode": {"type": "string", "enum": ["a", "b"]}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"mode": "x"}))),
        ["spec.mode: Unsupported value: \"x\": supported values: \"a\", \"b\""]
    );
    assert!(create_messages(&s, resource(json!({"mode": "b"}))).is_empty());
}

#[test]
fn null_never_matches_an_enum_even_when_nullable() {
    // kube-openapi skips null enum entries and never matches a null value.
    let s = compile(spec_schema(
        json!({"mode": {"type": "string", "nullable": true, "enum": ["a", null]}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"mode": null}))),
        ["spec.mode: Unsupported value: null: supported values: \"a\", \"null\""]
    );
}

#[test]
fn numeric_enum_values_are_quoted_json() {
    let s = compile(spec_schema(
        json!({"level": {"type": "integer", "enum": [1, 2]}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"level": 3}))),
        ["spec.level: Unsupported value: 3: supported values: \"1\", \"2\""]
    );
}

#[test]
fn max_length_counts_characters_and_reports_too_long() {
    let s = compile(spec_schema(
        json!({"name": {"type": "string", "maxLength": 5}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"name": "abcdef"}))),
        ["spec.name: Too long: may not be more than 5 bytes"]
    );
    // Five characters, ten bytes: the length is counted in characters.
    assert!(create_messages(&s, resource(json!({"name": "ééééé"}))).is_empty());
}

#[test]
fn min_length_reports_chars_long() {
    let s = compile(spec_schema(
        json!({"name": {"type": "string", "minLength": 3}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"name": "ab"}))),
        ["spec.name: Invalid value: \"ab\": spec.name in body should be at least 3 chars long"]
    );
}

#[test]
fn pattern_mismatch_quotes_the_pattern() {
    let s = compile(spec_schema(
        json!({"x": {"type": "string", "pattern": "^[0-9]+$"}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"x": "abc"}))),
        ["spec.x: Invalid value: \"abc\": spec.x in body should match '^[0-9]+$'"]
    );
}

#[test]
fn date_time_format_violation_is_type_invalid() {
    let s = compile(spec_schema(
        json!({"at": {"type": "string", "format": "date-time"}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"at": "noon"}))),
        ["spec.at: Invalid value: \"noon\": spec.at in body must be of type date-time: \"noon\""]
    );
    assert!(create_messages(&s, resource(json!({"at": "2024-05-01T12:00:00Z"}))).is_empty());
}

#[test]
fn byte_format_requires_base64() {
    let s = compile(spec_schema(
        json!({"data": {"type": "string", "format": "byte"}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"data": "not base64!"}))),
        [
            "spec.data: Invalid value: \"not base64!\": spec.data in body must be of type byte: \"not base64!\""
        ]
    );
}

// ------------------------------------------------------ arrays and objects

#[test]
fn too_many_items_reports_count_and_limit() {
    let s = compile(spec_schema(
        json!({"list": {"type": "array", "maxItems": 3, "items": {"type": "integer"}}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"list": [1, 2, 3, 4]}))),
        ["spec.list: Too many: 4: must have at most 3 items"]
    );
}

#[test]
fn too_few_items_is_invalid_with_the_count() {
    let s = compile(spec_schema(
        json!({"list": {"type": "array", "minItems": 2, "items": {"type": "integer"}}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"list": [1]}))),
        ["spec.list: Invalid value: 1: spec.list in body should have at least 2 items"]
    );
}

#[test]
fn item_errors_name_the_index() {
    let s = compile(spec_schema(
        json!({"items": {"type": "array", "items": {
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1}}
        }}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(
            &s,
            resource(json!({"items": [{"name": "a"}, {"name": "b"}, {"name": ""}]}))
        ),
        [
            "spec.items[2].name: Invalid value: \"\": spec.items[2].name in body should be at least 1 chars long"
        ]
    );
}

#[test]
fn property_count_limits_stop_at_the_object() {
    let s = compile(spec_schema(
        json!({
            "few": {"type": "object", "minProperties": 2, "additionalProperties": {"type": "string"}},
            "many": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "integer"}}
        }),
        json!([]),
    ));
    assert_eq!(
        create_messages(
            &s,
            resource(json!({"few": {"a": "x"}, "many": {"a": "not an int", "b": 2}}))
        ),
        [
            "spec.few: Invalid value: 1: spec.few in body should have at least 2 properties",
            "spec.many: Too many: 2: must have at most 1 item",
        ]
    );
}

#[test]
fn map_values_follow_additional_properties_with_dotted_paths() {
    let s = compile(spec_schema(
        json!({"labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}}),
        json!([]),
    ));
    let mut obj = resource(json!({"labels": {"ok": "abc", "bad": "abcd"}}));
    s.prepare(&mut obj);
    assert_eq!(
        obj["spec"]["labels"],
        json!({"ok": "abc", "bad": "abcd"}),
        "map keys are not pruned"
    );
    assert_eq!(
        s.validate(&obj, None)
            .iter()
            .map(FieldError::message)
            .collect::<Vec<_>>(),
        ["spec.labels.bad: Too long: may not be more than 3 bytes"]
    );
}

#[test]
fn list_type_set_reports_the_second_appearance_as_duplicate() {
    let s = compile(spec_schema(
        json!({"tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"tags": ["a", "b", "a", "a"]}))),
        ["spec.tags[2]: Duplicate value: \"a\""]
    );
}

#[test]
fn list_type_duplicates_already_stored_are_not_reported_on_update() {
    let s = compile(spec_schema(
        json!({"tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}),
        json!([]),
    ));
    let old = resource(json!({"tags": ["a", "a"]}));
    assert!(update_messages(&s, resource(json!({"tags": ["a", "a", "b"]})), old).is_empty());
    assert_eq!(
        update_messages(
            &s,
            resource(json!({"tags": ["b", "b"]})),
            resource(json!({"tags": ["b"]}))
        ),
        ["spec.tags[1]: Duplicate value: \"b\""]
    );
}

#[test]
fn list_type_map_reports_the_duplicate_key() {
    let s = compile(spec_schema(
        json!({"ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "port": {"type": "integer"}
            }}
        }}),
        json!([]),
    ));
    assert_eq!(
        create_messages(
            &s,
            resource(
                json!({"ports": [{"name": "http", "port": 80}, {"name": "http", "port": 8080}]})
            )
        ),
        ["spec.ports[1]: Duplicate value: {\"name\":\"http\"}"]
    );
}

#[test]
fn any_of_failure_is_reported_without_a_field() {
    let s = compile(spec_schema(
        json!({"v": {"type": "integer", "anyOf": [{"minimum": 10}, {"maximum": 0}]}}),
        json!([]),
    ));
    assert!(create_messages(&s, resource(json!({"v": 11}))).is_empty());
    let msgs = create_messages(&s, resource(json!({"v": 5})));
    assert_eq!(
        msgs[0],
        "<nil>: Invalid value: \"\": spec.v must validate at least one schema (anyOf)"
    );
    assert_eq!(msgs.len(), 2);
}

#[test]
fn not_rejects_a_matching_value() {
    let s = compile(spec_schema(
        json!({"v": {"type": "string", "not": {"enum": ["forbidden"]}}}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"v": "forbidden"}))),
        ["<nil>: Invalid value: \"\": spec.v must not validate the schema (not)"]
    );
}

// ------------------------------------------------------ pruning, defaults

#[test]
fn unknown_fields_are_pruned_but_resource_fields_and_metadata_are_kept() {
    let s = compile(spec_schema(
        json!({"name": {"type": "string"}, "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}}}),
        json!([]),
    ));
    let mut obj = json!({
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "anything": {"kept": true}},
        "spec": {"name": "a", "colour": "red", "list": [{"a": "x", "b": "y"}]},
        "extra": 1
    });
    let pruned = s.prepare(&mut obj);
    assert_eq!(pruned, ["extra", "spec.colour", "spec.list[0].b"]);
    assert_eq!(
        obj,
        json!({
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "w1", "anything": {"kept": true}},
            "spec": {"name": "a", "list": [{"a": "x"}]}
        })
    );
}

#[test]
fn errors_found_before_schema_validation_come_first_and_block_rules() {
    let s = compile(spec_with_rules(
        json!({"a": {"type": "integer"}}),
        json!([{"rule": "false", "message": "rule ran"}]),
    ));
    let mut obj = resource(json!({"a": 1}));
    s.prepare(&mut obj);
    let prior = vec![FieldError::required(
        "metadata.name",
        "name or generateName is required",
    )];
    let messages: Vec<_> = s
        .validate_after(&obj, None, prior)
        .iter()
        .map(FieldError::message)
        .collect();
    assert_eq!(
        messages,
        [
            "metadata.name: Required value: name or generateName is required",
            NOT_CHECKED
        ]
    );
}

#[test]
fn preserve_unknown_fields_keeps_unknowns_but_prunes_inside_known_properties() {
    let s = compile(spec_schema(
        json!({"config": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"inner": {"type": "object", "properties": {"a": {"type": "string"}}}}
        }}),
        json!([]),
    ));
    let mut obj = resource(json!({"config": {"free": {"x": 1}, "inner": {"a": "k", "b": "gone"}}}));
    s.prepare(&mut obj);
    assert_eq!(
        obj["spec"]["config"],
        json!({"free": {"x": 1}, "inner": {"a": "k"}})
    );
}

#[test]
fn embedded_resource_keeps_api_version_kind_and_metadata() {
    let s = compile(spec_schema(
        json!({"template": {
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object", "properties": {"image": {"type": "string"}}}}
        }}),
        json!([]),
    ));
    let mut obj = resource(json!({"template": {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}},
        "spec": {"image": "busybox", "junk": 1}, "status": {}
    }}));
    s.prepare(&mut obj);
    assert_eq!(
        obj["spec"]["template"],
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"a": "b"}}, "spec": {"image": "busybox"}})
    );
}

#[test]
fn embedded_resource_needs_api_version_and_a_dns_label_kind() {
    let s = compile(spec_schema(
        json!({"templates": {"type": "array", "items": {
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true
        }}}),
        json!([]),
    ));
    assert!(
        create_messages(
            &s,
            resource(json!({"templates": [{"apiVersion": "apps/v1", "kind": "Deployment"}]}))
        )
        .is_empty()
    );
    assert_eq!(
        create_messages(
            &s,
            resource(json!({"templates": [
                {"kind": "Pod"},
                {"apiVersion": "a/b/c", "kind": "Bad_Kind", "metadata": "x"},
                {"apiVersion": 1, "kind": ""}
            ]}))
        ),
        [
            "spec.templates[0].apiVersion: Required value",
            "spec.templates[1].apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string: a/b/c",
            "spec.templates[1].kind: Invalid value: \"Bad_Kind\": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
            "spec.templates[1].metadata: Invalid value: \"x\": must be an object",
            "spec.templates[2].apiVersion: Invalid value: 1: must be a string",
            "spec.templates[2].kind: Required value",
        ]
    );
}

#[test]
fn defaults_fill_absent_fields_only() {
    let s = compile(spec_schema(
        json!({
            "replicas": {"type": "integer", "default": 1},
            "mode": {"type": "string", "default": "auto"}
        }),
        json!([]),
    ));
    let mut obj = resource(json!({"mode": "manual"}));
    s.prepare(&mut obj);
    assert_eq!(obj["spec"], json!({"replicas": 1, "mode": "manual"}));
}

#[test]
fn defaults_nest_into_a_defaulted_object_and_array_items() {
    let s = compile(spec_schema(
        json!({
            "policy": {"type": "object", "default": {}, "properties": {
                "backoff": {"type": "integer", "default": 6}
            }},
            "ports": {"type": "array", "items": {"type": "object", "properties": {
                "protocol": {"type": "string", "default": "TCP"},
                "port": {"type": "integer"}
            }}}
        }),
        json!([]),
    ));
    let mut obj = resource(json!({"ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}));
    s.prepare(&mut obj);
    assert_eq!(
        obj["spec"],
        json!({
            "policy": {"backoff": 6},
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]
        })
    );
}

#[test]
fn non_nullable_null_with_a_default_takes_the_default() {
    let s = compile(spec_schema(
        json!({"mode": {"type": "string", "default": "auto"}}),
        json!([]),
    ));
    let mut obj = resource(json!({"mode": null}));
    s.prepare(&mut obj);
    assert_eq!(obj["spec"]["mode"], json!("auto"));
}

#[test]
fn defaults_are_applied_after_pruning_and_satisfy_required() {
    let s = compile(spec_schema(
        json!({"mode": {"type": "string", "default": "auto"}}),
        json!(["mode"]),
    ));
    assert!(create_messages(&s, resource(json!({"unknown": 1}))).is_empty());
}

// ------------------------------------------------------------- CRD checks

#[test]
fn schema_with_untyped_property_is_not_structural() {
    let errs = compile_errors(spec_schema(
        json!({"x": {"description": "no type"}}),
        json!([]),
    ));
    assert_eq!(
        errs,
        [
            "openAPIV3Schema.properties[spec].properties[x].type: Required value: must not be empty for specified object fields"
        ]
    );
}

#[test]
fn root_must_be_an_object() {
    let errs = compile_errors(json!({"type": "string"}));
    assert_eq!(
        errs,
        ["openAPIV3Schema.type: Invalid value: \"string\": must be object at the root"]
    );
}

#[test]
fn schema_rejects_what_the_apiserver_rejects() {
    let errs = compile_errors(spec_schema(
        json!({
            "bad": {"type": "string", "pattern": "(unclosed"},
            "uniq": {"type": "array", "uniqueItems": true, "items": {"type": "string"}},
            "both": {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "string"}},
            "noitems": {"type": "array"}
        }),
        json!([]),
    ));
    let joined = errs.join("\n");
    assert!(joined.contains("properties[bad].pattern: Invalid value: \"(unclosed\": must be a valid regular expression"), "{joined}");
    assert!(joined.contains("properties[uniq].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"), "{joined}");
    assert!(joined.contains("properties[both].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"), "{joined}");
    assert!(
        joined.contains("properties[noitems].items: Required value: must be specified"),
        "{joined}"
    );
    assert_eq!(errs.len(), 4, "{joined}");
}

#[test]
fn defaults_must_validate_and_be_pruned() {
    let errs = compile_errors(spec_schema(
        json!({
            "n": {"type": "integer", "minimum": 1, "default": 0},
            "o": {"type": "object", "properties": {"a": {"type": "string"}}, "default": {"a": "x", "b": 1}}
        }),
        json!([]),
    ));
    assert_eq!(
        errs,
        [
            "openAPIV3Schema.properties[spec].properties[n].default: Invalid value: 0: openAPIV3Schema.properties[spec].properties[n].default in body should be greater than or equal to 1",
            "openAPIV3Schema.properties[spec].properties[o].default: Invalid value: {\"a\":\"x\",\"b\":1}: must not have unknown fields",
        ]
    );
}

#[test]
fn uncompilable_rule_is_rejected_naming_the_rule() {
    let errs = compile_errors(json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.a >"}]}}
    }));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with("openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"self.a >\": compilation failed: "),
        "{}",
        errs[0]
    );
}

#[test]
fn transition_rule_under_uncorrelatable_items_is_rejected() {
    let errs = compile_errors(spec_schema(
        json!({"list": {"type": "array", "items": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "self == oldSelf"}]
        }}}),
        json!([]),
    ));
    assert_eq!(
        errs,
        [
            "openAPIV3Schema.properties[spec].properties[list].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema"
        ]
    );
}

#[test]
fn rule_field_path_and_reason_are_checked() {
    let errs = compile_errors(json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "properties": {"a": {"type": "string"}},
            "x-kubernetes-validations": [
                {"rule": "true", "fieldPath": ".nope"},
                {"rule": "true", "reason": "Because"}
            ]
        }}
    }));
    assert_eq!(
        errs,
        [
            "openAPIV3Schema.properties[spec].x-kubernetes-validations[0].fieldPath: Invalid value: \".nope\": does not refer to a valid field",
            "openAPIV3Schema.properties[spec].x-kubernetes-validations[1].reason: Unsupported value: \"Because\": supported values: \"FieldValueInvalid\", \"FieldValueForbidden\", \"FieldValueRequired\", \"FieldValueDuplicate\"",
        ]
    );
}

#[test]
fn compiled_schema_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CompiledSchema>();
}

// -------------------------------------------------------------------- CEL

fn spec_with_rules(properties: Value, rules: Value) -> Value {
    json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "properties": properties,
            "x-kubernetes-validations": rules
        }}
    })
}

#[test]
fn failing_rule_reports_its_message_at_the_declaring_node() {
    let s = compile(spec_with_rules(
        json!({"replicas": {"type": "integer"}, "max": {"type": "integer"}}),
        json!([{"rule": "self.replicas <= self.max", "message": "replicas must not exceed max"}]),
    ));
    assert!(s.has_rules());
    assert_eq!(
        create_messages(&s, resource(json!({"replicas": 5, "max": 3}))),
        ["spec: Invalid value: \"object\": replicas must not exceed max"]
    );
    assert!(create_messages(&s, resource(json!({"replicas": 3, "max": 3}))).is_empty());
}

#[test]
fn rules_under_all_of_run_on_the_same_value_after_the_nodes_own() {
    let mut schema = spec_with_rules(
        json!({"a": {"type": "integer"}}),
        json!([{"rule": "self.a > 0", "message": "own"}]),
    );
    schema["properties"]["spec"]["allOf"] = json!([
        {"x-kubernetes-validations": [{"rule": "self.a > 1", "message": "first allOf"}]},
        {"x-kubernetes-validations": [{"rule": "self.a > 2", "message": "second allOf"}]},
    ]);
    let s = compile(schema);
    assert!(s.has_rules());
    assert_eq!(
        create_messages(&s, resource(json!({"a": 0}))),
        [
            "spec: Invalid value: \"object\": own",
            "spec: Invalid value: \"object\": first allOf",
            "spec: Invalid value: \"object\": second allOf",
        ]
    );
    assert_eq!(
        create_messages(&s, resource(json!({"a": 2}))),
        ["spec: Invalid value: \"object\": second allOf"]
    );
}

#[test]
fn failing_rule_without_message_names_the_rule() {
    let s = compile(spec_with_rules(
        json!({"a": {"type": "integer"}}),
        json!([{"rule": " self.a > 0 "}]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"a": 0}))),
        ["spec: Invalid value: \"object\": failed rule: self.a > 0"]
    );
}

#[test]
fn message_expression_builds_the_message() {
    let s = compile(spec_with_rules(
        json!({"replicas": {"type": "integer"}}),
        json!([{
            "rule": "self.replicas < 10",
            "message": "static",
            "messageExpression": "'replicas is ' + string(self.replicas) + ', the limit is 10'"
        }]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"replicas": 12}))),
        ["spec: Invalid value: \"object\": replicas is 12, the limit is 10"]
    );
}

#[test]
fn failing_or_blank_message_expression_falls_back_to_message() {
    let s = compile(spec_with_rules(
        json!({"a": {"type": "integer"}}),
        json!([
            {"rule": "self.a > 0", "message": "fallback one", "messageExpression": "self.missing"},
            {"rule": "self.a > 1", "message": "fallback two", "messageExpression": "'  '"}
        ]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"a": 0}))),
        [
            "spec: Invalid value: \"object\": fallback one",
            "spec: Invalid value: \"object\": fallback two",
        ]
    );
}

#[test]
fn field_path_moves_the_error_to_the_named_field() {
    let s = compile(spec_with_rules(
        json!({"replicas": {"type": "integer"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}}}),
        json!([
            {"rule": "self.replicas >= 1", "message": "too few", "fieldPath": ".replicas"},
            {"rule": "'app' in self.labels", "message": "app label", "fieldPath": ".labels['app']"}
        ]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"replicas": 0, "labels": {}}))),
        [
            "spec.replicas: Invalid value: \"object\": too few",
            "spec.labels[app]: Invalid value: \"object\": app label",
        ]
    );
}

#[test]
fn reason_selects_the_error_type() {
    let s = compile(spec_with_rules(
        json!({"a": {"type": "integer"}}),
        json!([
            {"rule": "false", "message": "no way", "reason": "FieldValueForbidden"},
            {"rule": "false", "message": "need it", "reason": "FieldValueRequired"},
            {"rule": "false", "message": "twice", "reason": "FieldValueDuplicate"},
            {"rule": "false", "message": "bad", "reason": "FieldValueInvalid"}
        ]),
    ));
    let mut obj = resource(json!({"a": 1}));
    s.prepare(&mut obj);
    let errs = s.validate(&obj, None);
    let kinds: Vec<_> = errs.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            FieldErrorKind::Forbidden,
            FieldErrorKind::Required,
            FieldErrorKind::Duplicate,
            FieldErrorKind::Invalid
        ]
    );
    let messages: Vec<_> = errs.iter().map(FieldError::message).collect();
    assert_eq!(
        messages,
        [
            "spec: Forbidden: no way",
            "spec: Required value: need it",
            "spec: Duplicate value: \"object\"",
            "spec: Invalid value: \"object\": bad",
        ]
    );
}

#[test]
fn transition_rule_runs_only_on_update() {
    let s = compile(spec_schema(
        json!({"name": {
            "type": "string",
            "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "name is immutable"}]
        }}),
        json!([]),
    ));
    assert!(create_messages(&s, resource(json!({"name": "a"}))).is_empty());
    assert!(
        update_messages(
            &s,
            resource(json!({"name": "a"})),
            resource(json!({"name": "a"}))
        )
        .is_empty()
    );
    assert_eq!(
        update_messages(
            &s,
            resource(json!({"name": "b"})),
            resource(json!({"name": "a"}))
        ),
        ["spec.name: Invalid value: \"string\": name is immutable"]
    );
    // No old value at that path: the transition rule does not run.
    assert!(update_messages(&s, resource(json!({"name": "b"})), resource(json!({}))).is_empty());
}

#[test]
fn transition_rule_on_list_map_items_correlates_by_key() {
    let s = compile(spec_schema(
        json!({"ports": {
            "type": "array",
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": "self.port >= oldSelf.port", "message": "port may only grow"}]
            }
        }}),
        json!([]),
    ));
    let old = resource(json!({"ports": [{"name": "a", "port": 10}, {"name": "b", "port": 20}]}));
    let new = resource(
        json!({"ports": [{"name": "b", "port": 5}, {"name": "a", "port": 11}, {"name": "c", "port": 1}]}),
    );
    assert_eq!(
        update_messages(&s, new, old),
        ["spec.ports[0]: Invalid value: \"object\": port may only grow"]
    );
}

#[test]
fn optional_old_self_rule_runs_on_create_with_no_value() {
    let s = compile(spec_schema(
        json!({"version": {
            "type": "integer",
            "x-kubernetes-validations": [{
                "rule": "!oldSelf.hasValue() ? self == 1 : self >= oldSelf.value()",
                "optionalOldSelf": true,
                "message": "version starts at 1 and never goes down"
            }]
        }}),
        json!([]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"version": 2}))),
        ["spec.version: Invalid value: \"integer\": version starts at 1 and never goes down"]
    );
    assert!(create_messages(&s, resource(json!({"version": 1}))).is_empty());
    assert_eq!(
        update_messages(
            &s,
            resource(json!({"version": 1})),
            resource(json!({"version": 3}))
        ),
        ["spec.version: Invalid value: \"integer\": version starts at 1 and never goes down"]
    );
}

#[test]
fn rules_run_on_each_item_and_map_value_with_their_paths() {
    let s = compile(spec_schema(
        json!({
            "items": {"type": "array", "items": {
                "type": "string",
                "x-kubernetes-validations": [{"rule": "self.startsWith('x-')", "message": "must start with x-"}]
            }},
            "limits": {"type": "object", "additionalProperties": {
                "type": "integer",
                "x-kubernetes-validations": [{"rule": "self > 0", "message": "must be positive"}]
            }}
        }),
        json!([]),
    ));
    assert_eq!(
        create_messages(
            &s,
            resource(json!({"items": ["x-a", "b"], "limits": {"cpu": 0, "mem": 1}}))
        ),
        [
            "spec.items[1]: Invalid value: \"string\": must start with x-",
            "spec.limits[cpu]: Invalid value: \"integer\": must be positive",
        ]
    );
}

#[test]
fn standard_macros_and_string_functions_are_available() {
    let s = compile(spec_with_rules(
        json!({
            "name": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "opt": {"type": "string"}
        }),
        json!([
            {"rule": "self.tags.all(t, t.matches('^[a-z]+$'))", "message": "lowercase tags"},
            {"rule": "self.tags.exists(t, t == 'core')", "message": "core tag"},
            {"rule": "size(self.name) <= 8 && self.name.lowerAscii() == self.name", "message": "short lowercase name"},
            {"rule": "!has(self.opt) || self.opt.endsWith('!')", "message": "opt ends with !"}
        ]),
    ));
    assert!(
        create_messages(&s, resource(json!({"name": "ok", "tags": ["core", "gpu"]}))).is_empty()
    );
    assert_eq!(
        create_messages(
            &s,
            resource(json!({"name": "TooLongName", "tags": ["Bad"], "opt": "x"}))
        ),
        [
            "spec: Invalid value: \"object\": lowercase tags",
            "spec: Invalid value: \"object\": core tag",
            "spec: Invalid value: \"object\": short lowercase name",
            "spec: Invalid value: \"object\": opt ends with !",
        ]
    );
}

#[test]
fn kubernetes_list_regex_and_sets_functions_are_available() {
    let s = compile(spec_with_rules(
        json!({
            "steps": {"type": "array", "items": {"type": "integer"}},
            "zones": {"type": "array", "items": {"type": "string"}},
            "ref": {"type": "string"}
        }),
        json!([
            {"rule": "self.steps.isSorted() && self.steps.sum() <= 10 && self.steps.max() < 8", "message": "steps"},
            {"rule": "sets.contains(['a', 'b', 'c'], self.zones)", "message": "zones"},
            {"rule": "self.ref.find('[0-9]+') != ''", "message": "ref has a number"}
        ]),
    ));
    assert!(
        create_messages(
            &s,
            resource(json!({"steps": [1, 2, 3], "zones": ["a"], "ref": "v12"}))
        )
        .is_empty()
    );
    assert_eq!(
        create_messages(
            &s,
            resource(json!({"steps": [3, 1], "zones": ["z"], "ref": "none"}))
        ),
        [
            "spec: Invalid value: \"object\": steps",
            "spec: Invalid value: \"object\": zones",
            "spec: Invalid value: \"object\": ref has a number",
        ]
    );
}

#[test]
fn property_names_are_escaped_for_cel() {
    let s = compile(spec_with_rules(
        json!({"max-size": {"type": "integer"}, "namespace": {"type": "string"}}),
        json!([{"rule": "self.max__dash__size > 0 && self.__namespace__ == 'a'", "message": "escaped"}]),
    ));
    assert!(create_messages(&s, resource(json!({"max-size": 1, "namespace": "a"}))).is_empty());
    assert_eq!(
        create_messages(&s, resource(json!({"max-size": 0, "namespace": "a"}))),
        ["spec: Invalid value: \"object\": escaped"]
    );
}

#[test]
fn root_rules_see_only_name_and_generate_name_of_metadata() {
    let s = compile(json!({
        "type": "object",
        "properties": {"spec": {"type": "object"}},
        "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('w')", "message": "name starts with w"},
            {"rule": "!has(self.metadata.labels)", "message": "labels are not visible"},
            {"rule": "self.kind == 'Widget'", "message": "kind is visible"}
        ]
    }));
    let mut obj = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "labels": {"a": "b"}}, "spec": {}});
    s.prepare(&mut obj);
    assert!(s.validate(&obj, None).is_empty());
    obj["metadata"]["name"] = json!("x1");
    assert_eq!(
        s.validate(&obj, None)
            .iter()
            .map(FieldError::message)
            .collect::<Vec<_>>(),
        ["<nil>: Invalid value: \"object\": name starts with w"]
    );
}

#[test]
fn runtime_error_is_reported_naming_the_rule() {
    let s = compile(spec_with_rules(
        json!({"a": {"type": "integer"}}),
        json!([
            {"rule": "self.b == 1"},
            {"rule": "self.a / 0 == 1", "message": "never"},
            {"rule": "self.a + 'x' == '1x'"}
        ]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"a": 1}))),
        [
            "spec: Invalid value: \"object\": no such key: b evaluating rule: self.b == 1",
            "spec: Invalid value: \"object\": division by zero evaluating rule: never",
            "spec: Invalid value: \"object\": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: self.a + 'x' == '1x'",
        ]
    );
}

#[test]
fn schema_errors_that_block_rules_add_the_not_checked_note() {
    let s = compile(spec_with_rules(
        json!({"a": {"type": "integer"}}),
        json!([{"rule": "false", "message": "would fail"}]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"a": "text"}))),
        [
            "spec.a: Invalid value: \"string\": spec.a in body must be of type integer: \"string\"",
            NOT_CHECKED,
        ]
    );
}

#[test]
fn non_blocking_schema_errors_still_run_rules() {
    let s = compile(spec_with_rules(
        json!({"a": {"type": "integer", "minimum": 5}}),
        json!([{"rule": "false", "message": "rule ran"}]),
    ));
    assert_eq!(
        create_messages(&s, resource(json!({"a": 1}))),
        [
            "spec.a: Invalid value: 1: spec.a in body should be greater than or equal to 5",
            "spec: Invalid value: \"object\": rule ran",
        ]
    );
}

#[test]
fn schema_without_rules_adds_no_note() {
    let s = compile(spec_schema(json!({"a": {"type": "integer"}}), json!(["a"])));
    assert!(!s.has_rules());
    assert_eq!(
        create_messages(&s, resource(json!({}))),
        ["spec.a: Required value"]
    );
}

#[test]
fn unchanged_invalid_values_are_ratcheted_on_update() {
    let s = compile(spec_schema(
        json!({"name": {"type": "string", "maxLength": 3}, "other": {"type": "integer"}}),
        json!([]),
    ));
    let old = resource(json!({"name": "toolong", "other": 1}));
    assert!(
        update_messages(
            &s,
            resource(json!({"name": "toolong", "other": 2})),
            old.clone()
        )
        .is_empty()
    );
    assert_eq!(
        update_messages(&s, resource(json!({"name": "longer!", "other": 2})), old),
        ["spec.name: Too long: may not be more than 3 bytes"]
    );
}

#[test]
fn unchanged_values_ratchet_plain_rules_but_not_transition_rules() {
    let s = compile(spec_schema(
        json!({
            "size": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 10", "message": "small"}]},
            "gen": {"type": "integer", "x-kubernetes-validations": [{"rule": "self > oldSelf", "message": "must increase"}]}
        }),
        json!([]),
    ));
    let old = resource(json!({"size": 20, "gen": 1}));
    assert_eq!(
        update_messages(&s, resource(json!({"size": 20, "gen": 1})), old.clone()),
        ["spec.gen: Invalid value: \"integer\": must increase"]
    );
    assert_eq!(
        update_messages(&s, resource(json!({"size": 21, "gen": 2})), old),
        ["spec.size: Invalid value: \"integer\": small"]
    );
}

#[test]
fn cost_budget_stops_further_rules_with_the_apiserver_message() {
    let s = compile(spec_schema(
        json!({"items": {"type": "array", "items": {
            "type": "integer",
            "x-kubernetes-validations": [{"rule": "self >= 0"}]
        }}}),
        json!([]),
    ));
    let obj = resource(json!({"items": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]}));
    // Each item evaluation costs 2; a budget of 7 allows three.
    let errs = s.validate_with(
        &obj,
        None,
        Vec::new(),
        rules::Evaluator::with_limits(7, 100),
    );
    let messages: Vec<_> = errs.iter().map(FieldError::message).collect();
    assert_eq!(
        messages,
        [
            "spec.items[3]: Invalid value: \"integer\": validation failed due to running out of cost budget, no further validation rules will be run"
        ]
    );
}

#[test]
fn per_call_limit_stops_a_rule_over_a_huge_value() {
    let s = compile(spec_schema(
        json!({"items": {
            "type": "array",
            "items": {"type": "integer"},
            "x-kubernetes-validations": [{"rule": "self.all(x, x >= 0)", "message": "non-negative"}]
        }}),
        json!([]),
    ));
    let obj = resource(json!({"items": [1, 2, 3, 4, 5]}));
    let errs = s.validate_with(
        &obj,
        None,
        Vec::new(),
        rules::Evaluator::with_limits(1000, 4),
    );
    assert_eq!(
        errs.iter().map(FieldError::message).collect::<Vec<_>>(),
        [
            "spec.items: Invalid value: \"array\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: non-negative"
        ]
    );
    assert!(s.validate(&obj, None).is_empty());
}

#[test]
fn status_message_wraps_the_field_errors() {
    let s = compile(spec_schema(
        json!({"replicas": {"type": "integer", "minimum": 0}, "name": {"type": "string"}}),
        json!(["name"]),
    ));
    let mut obj = resource(json!({"replicas": -1}));
    s.prepare(&mut obj);
    let errs = s.validate(&obj, None);
    assert_eq!(
        status_message("Widget.example.com", "w1", &errs),
        "Widget.example.com \"w1\" is invalid: [spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0, spec.name: Required value]"
    );
}
