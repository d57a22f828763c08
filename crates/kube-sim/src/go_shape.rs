//! The shape Go gives a built-in object. kube-apiserver holds every object
//! as a Go struct, so what it answers is that struct's JSON: a struct field
//! that is not a pointer is always written (an empty status reads `{}`), and
//! a field whose tag lacks `omitempty` is written even at its zero value
//! (`reportingComponent: ""` on a core Event, `Port: 0` in a Node's
//! `daemonEndpoints`). k8s-openapi's Rust types cannot tell a pointer from a
//! value, so kube-sim takes these facts from the protobuf table, which
//! records for every field whether Go holds it behind a pointer and whether
//! its tag says `omitempty` (`tools/protoschema/gofields`).
//!
//! The same facts give the object the real server compares a create
//! against (a zero-valued struct of the kind): ownership of a new Deployment
//! names `f:spec/f:strategy` without a `"."` member because that struct
//! exists in the zero value, while `f:spec/f:selector` (a pointer) gets one.
//!
//! Time and MicroTime values are never filled in: Kubernetes leaves zero
//! timestamps out of its answers.

use serde_json::{Map, Value};

use crate::protobuf::schema::{self, Field, Label, Special, Type, Zero};

/// The protobuf message of a built-in kind, if the table knows it.
pub fn message_of(api_version: &str, kind: &str) -> Option<usize> {
    schema::schema().kind(api_version, kind)
}

/// Adds to `value` what Go's JSON encoding of message `message` writes and
/// the value lacks: non-pointer structs (recursively) and the zero values
/// of fields without `omitempty`. Present values are kept; only missing
/// keys are added. Objects inside lists and maps are filled too.
pub fn fill(value: &mut Value, message: usize) {
    fill_depth(value, message, 0);
}

/// The zero value of message `message` as Go's JSON encoding writes it
/// (`{}` plus whatever [`fill`] adds to an empty object).
pub fn zero_value(message: usize) -> Value {
    let mut value = Value::Object(Map::new());
    fill(&mut value, message);
    value
}

/// Deep enough for every built-in kind; a bound because some messages
/// (apiextensions' JSONSchemaProps) refer to themselves.
const MAX_DEPTH: usize = 48;

fn fill_depth(value: &mut Value, message: usize, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let schema = schema::schema();
    let msg = schema.message(message);
    if msg.special != Special::None {
        return;
    }
    let Some(object) = value.as_object_mut() else {
        return;
    };
    for field in &msg.fields {
        if field.label == Label::Inline {
            if let Type::Message(inner) = field.ty {
                let mut taken = Value::Object(std::mem::take(object));
                fill_depth(&mut taken, inner, depth + 1);
                if let Value::Object(filled) = taken {
                    *object = filled;
                }
            }
            continue;
        }
        match object.get_mut(&field.json) {
            Some(present) => fill_present(present, field, depth),
            None => {
                if let Some(zero) = written_zero(field, depth) {
                    object.insert(field.json.clone(), zero);
                }
            }
        }
    }
}

/// Descends into a present field's objects.
fn fill_present(present: &mut Value, field: &Field, depth: usize) {
    let Type::Message(inner) = field.ty else {
        return;
    };
    match (field.label, present) {
        (Label::One, value @ Value::Object(_)) => fill_depth(value, inner, depth + 1),
        (Label::Many, Value::Array(items)) => {
            for item in items {
                fill_depth(item, inner, depth + 1);
            }
        }
        (Label::Map, Value::Object(entries)) => {
            for entry in entries.values_mut() {
                fill_depth(entry, inner, depth + 1);
            }
        }
        _ => {}
    }
}

/// What Go writes for a field the object lacks, if anything.
fn written_zero(field: &Field, depth: usize) -> Option<Value> {
    match field.zero {
        // A nil pointer is left out; an unknown field is left alone.
        Zero::Kept | Zero::Unknown => None,
        Zero::Omitted => match (field.label, field.ty) {
            // `omitempty` never leaves out a struct: only pointers, empty
            // lists, maps, strings and zero numbers are "empty" to Go.
            (Label::One, Type::Message(inner)) => struct_zero(inner, depth),
            _ => None,
        },
        Zero::Written => match (field.label, field.ty) {
            // A nil list or map without omitempty is written as null.
            (Label::Many | Label::Map, _) => Some(Value::Null),
            (Label::One, Type::Message(inner)) => struct_zero(inner, depth),
            (Label::One, Type::String) => Some(Value::String(String::new())),
            (Label::One, Type::Int32 | Type::Int64) => Some(Value::from(0)),
            (Label::One, Type::Double) => Some(Value::from(0.0)),
            (Label::One, Type::Bool) => Some(Value::Bool(false)),
            // A nil []byte is null; nothing served has such a field unset.
            _ => None,
        },
    }
}

fn struct_zero(message: usize, depth: usize) -> Option<Value> {
    let msg = schema::schema().message(message);
    match msg.special {
        Special::None => {
            let mut value = Value::Object(Map::new());
            fill_depth(&mut value, message, depth + 1);
            Some(value)
        }
        Special::Quantity => Some(Value::String("0".into())),
        Special::IntOrString => Some(Value::from(0)),
        // Timestamps, durations and raw JSON are left out.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn filled(api_version: &str, kind: &str, mut value: Value) -> Value {
        fill(&mut value, message_of(api_version, kind).unwrap());
        value
    }

    #[test]
    fn structs_that_are_not_pointers_appear_and_pointers_do_not() {
        let lease = filled(
            "coordination.k8s.io/v1",
            "Lease",
            json!({"metadata": {"name": "l"}}),
        );
        assert_eq!(lease["spec"], json!({}));
        let deployment = filled("apps/v1", "Deployment", json!({}));
        // Template and strategy are values; the selector is a pointer.
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"],
            Value::Null
        );
        assert_eq!(deployment["spec"]["strategy"], json!({}));
        assert!(deployment["spec"].get("selector").is_none());
        assert!(deployment["spec"].get("replicas").is_none());
    }

    #[test]
    fn fields_without_omitempty_are_written_at_their_zero_value() {
        let event = filled(
            "v1",
            "Event",
            json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod"}, "reason": "R"}),
        );
        assert_eq!(event["reportingComponent"], "");
        assert_eq!(event["reportingInstance"], "");
        assert_eq!(event["source"], json!({}));
        assert_eq!(event["reason"], "R");
        // Zero timestamps are not invented.
        assert!(event.get("firstTimestamp").is_none());
        let node = filled("v1", "Node", json!({"metadata": {"name": "n"}}));
        assert_eq!(node["spec"], json!({}));
        assert_eq!(
            node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
            0
        );
        assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "");
    }

    #[test]
    fn objects_inside_lists_are_filled_and_given_values_are_kept() {
        let pod = filled(
            "v1",
            "Pod",
            json!({"spec": {"containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}]}}),
        );
        let env = &pod["spec"]["containers"][0]["env"][0];
        assert_eq!(env["valueFrom"]["resourceFieldRef"]["divisor"], "0");
        assert_eq!(pod["spec"]["containers"][0]["resources"], json!({}));
        assert_eq!(pod["spec"]["containers"][0]["name"], "c");
        assert_eq!(pod["status"], json!({}));
    }

    #[test]
    fn the_zero_value_of_a_kind_is_the_struct_go_starts_from() {
        let zero = zero_value(message_of("policy/v1", "PodDisruptionBudget").unwrap());
        assert_eq!(
            zero["status"],
            json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
        );
        assert_eq!(zero["metadata"], json!({}));
    }
}
