//! Pure comparison of two servers' answers to the same step.

use serde_json::{Map, Value};

use super::corpus::Step;
use super::replay::Recorded;

/// One place where the two answers differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Which step (0-based) and where: `status`, a header, or a JSON
    /// pointer into the body (`/events/2/type` for watch events).
    pub step: usize,
    pub at: String,
    pub sim: String,
    pub real: String,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "step {} {}: kube-sim {} / kube-apiserver {}",
            self.step, self.at, self.sim, self.real
        )
    }
}

/// Keys whose values differ between servers by nature, with what they
/// become. Anything not listed is compared as it is.
fn placeholder(key: &str, value: &Value) -> Option<Value> {
    let set = |text: &str| match value {
        Value::Null => Some(Value::Null),
        Value::String(s) if s.is_empty() => Some(Value::String(String::new())),
        _ => Some(Value::String(text.to_owned())),
    };
    match key {
        "uid" => set("<uid>"),
        "resourceVersion" => set("<resourceVersion>"),
        "continue" => set("<continue>"),
        "creationTimestamp" | "deletionTimestamp" | "time" | "lastTransitionTime"
        | "lastHeartbeatTime" | "lastProbeTime" | "startTime" | "lastUpdateTime" | "renewTime"
        | "acquireTime" | "eventTime" | "firstTimestamp" | "lastTimestamp" => set("<time>"),
        "clusterIP" => set("<ip>"),
        "clusterIPs" => match value {
            Value::Array(items) => Some(Value::Array(
                items.iter().map(|_| Value::String("<ip>".into())).collect(),
            )),
            _ => None,
        },
        "selfLink" => Some(Value::Null),
        _ => None,
    }
}

/// The answer with the by-nature differences replaced by placeholders, and
/// generated names reduced to their prefix.
pub fn normalize(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                let item = placeholder(key, item).unwrap_or_else(|| normalize(item));
                if item.is_null() && key == "selfLink" {
                    continue;
                }
                out.insert(key.clone(), item);
            }
            if let (Some(Value::String(prefix)), Some(Value::String(name))) =
                (out.get("generateName"), out.get("name"))
                && name.starts_with(prefix.as_str())
                && name.len() > prefix.len()
            {
                let generated = format!("{prefix}<random>");
                out.insert("name".into(), Value::String(generated));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(normalize).collect()),
        other => other.clone(),
    }
}

fn remove_pointer(value: &mut Value, pointer: &str) {
    if pointer.is_empty() {
        *value = Value::Null;
        return;
    }
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return;
    };
    let last = last.replace("~1", "/").replace("~0", "~");
    match value.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.remove(&last);
        }
        Some(Value::Array(items)) => {
            if let Ok(index) = last.parse::<usize>()
                && index < items.len()
            {
                items.remove(index);
            }
        }
        _ => {}
    }
}

/// What of an answer takes part in the comparison: the normalised body,
/// narrowed to `compare` and without `ignore`.
fn comparable(step: &Step, body: &Value) -> Value {
    let mut body = normalize(body);
    // A Status is compared by code, reason and details (its causes); its
    // top-level message is prose for people and is compared only when a
    // step names it in `compare`.
    if step.compare.is_none()
        && body.get("kind").and_then(Value::as_str) == Some("Status")
        && let Some(map) = body.as_object_mut()
    {
        map.remove("message");
    }
    for pointer in &step.ignore {
        remove_pointer(&mut body, pointer);
    }
    for pointer in &step.unordered {
        if let Some(Value::Array(items)) = body.pointer_mut(pointer) {
            items.sort_by_key(|item| item.to_string());
        }
    }
    match &step.compare {
        None => body,
        Some(pointers) => {
            let mut picked = Map::new();
            for pointer in pointers {
                picked.insert(
                    pointer.clone(),
                    body.pointer(pointer).cloned().unwrap_or(Value::Null),
                );
            }
            Value::Object(picked)
        }
    }
}

fn short(value: &Value) -> String {
    let text = match value {
        Value::Null => "(absent)".to_owned(),
        other => other.to_string(),
    };
    if text.chars().count() > 160 {
        let cut: String = text.chars().take(157).collect();
        format!("{cut}...")
    } else {
        text
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn diff_values(step: usize, at: &str, sim: &Value, real: &Value, out: &mut Vec<Difference>) {
    match (sim, real) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let null = Value::Null;
                diff_values(
                    step,
                    &format!("{at}/{}", escape(key)),
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (index, (x, y)) in a.iter().zip(b).enumerate() {
                diff_values(step, &format!("{at}/{index}"), x, y, out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(Difference {
            step,
            at: if at.is_empty() { "/".into() } else { at.into() },
            sim: short(a),
            real: short(b),
        }),
    }
}

/// Compares one step's two answers: the status code, the listed headers,
/// then the body (or, for a watch, the event types and objects).
pub fn compare_step(index: usize, step: &Step, sim: &Recorded, real: &Recorded) -> Vec<Difference> {
    let mut out = Vec::new();
    if sim.status != real.status {
        out.push(Difference {
            step: index,
            at: "status".into(),
            sim: sim.status.to_string(),
            real: real.status.to_string(),
        });
    }
    for header in &step.headers {
        let header = header.to_ascii_lowercase();
        let a = sim.headers.get(&header).cloned().unwrap_or_default();
        let b = real.headers.get(&header).cloned().unwrap_or_default();
        if a != b {
            out.push(Difference {
                step: index,
                at: format!("header {header}"),
                sim: format!("{a:?}"),
                real: format!("{b:?}"),
            });
        }
    }
    match (&sim.events, &real.events) {
        (Some(a), Some(b)) => {
            let a = Value::Array(a.iter().map(|event| comparable(step, event)).collect());
            let b = Value::Array(b.iter().map(|event| comparable(step, event)).collect());
            if let (Value::Array(x), Value::Array(y)) = (&a, &b)
                && x.len() != y.len()
            {
                out.push(Difference {
                    step: index,
                    at: "/events (count)".into(),
                    sim: x.len().to_string(),
                    real: y.len().to_string(),
                });
            }
            diff_values(index, "/events", &a, &b, &mut out);
        }
        _ => diff_values(
            index,
            "",
            &comparable(step, &sim.body),
            &comparable(step, &real.body),
            &mut out,
        ),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn step(compare: Option<Vec<&str>>, ignore: Vec<&str>) -> Step {
        Step {
            method: "GET".into(),
            path: "/".into(),
            content_type: None,
            accept: None,
            body: None,
            body_text: None,
            setup: false,
            compare: compare.map(|c| c.into_iter().map(String::from).collect()),
            ignore: ignore.into_iter().map(String::from).collect(),
            unordered: vec![],
            save: BTreeMap::new(),
            events: None,
            status: None,
            headers: vec![],
            request_headers: BTreeMap::new(),
            repeat: None,
        }
    }

    fn recorded(status: u16, body: Value) -> Recorded {
        Recorded {
            status,
            body,
            headers: BTreeMap::new(),
            events: None,
        }
    }

    #[test]
    fn uids_times_and_resource_versions_never_count_as_differences() {
        let a = json!({"metadata": {"name": "a", "uid": "1", "resourceVersion": "10",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [{"manager": "m", "time": "x"}]}});
        let b = json!({"metadata": {"name": "a", "uid": "2", "resourceVersion": "99",
            "creationTimestamp": "2027-01-01T00:00:00Z",
            "managedFields": [{"manager": "m", "time": "y"}]}});
        assert!(
            compare_step(0, &step(None, vec![]), &recorded(200, a), &recorded(200, b)).is_empty()
        );
    }

    #[test]
    fn a_different_reason_or_cause_is_a_difference_at_its_pointer() {
        let a = json!({"kind": "Status", "reason": "Invalid",
            "details": {"causes": [{"field": "spec.x", "reason": "FieldValueRequired"}]}});
        let b = json!({"kind": "Status", "reason": "Invalid",
            "details": {"causes": [{"field": "spec.y", "reason": "FieldValueRequired"}]}});
        let differences =
            compare_step(3, &step(None, vec![]), &recorded(422, a), &recorded(422, b));
        assert_eq!(differences.len(), 1);
        assert_eq!(differences[0].at, "/details/causes/0/field");
        assert_eq!(differences[0].step, 3);
    }

    #[test]
    fn a_status_message_is_prose_unless_compare_names_it() {
        let a = json!({"kind": "Status", "reason": "NotFound", "message": "one"});
        let b = json!({"kind": "Status", "reason": "NotFound", "message": "two"});
        assert!(
            compare_step(
                0,
                &step(None, vec![]),
                &recorded(404, a.clone()),
                &recorded(404, b.clone())
            )
            .is_empty()
        );
        let named = step(Some(vec!["/message"]), vec![]);
        assert_eq!(
            compare_step(0, &named, &recorded(404, a), &recorded(404, b)).len(),
            1
        );
    }

    #[test]
    fn status_codes_are_compared_and_compare_narrows_the_body() {
        let a = json!({"reason": "NotFound", "message": "one"});
        let b = json!({"reason": "NotFound", "message": "two"});
        let narrow = step(Some(vec!["/reason"]), vec![]);
        assert!(
            compare_step(
                0,
                &narrow,
                &recorded(404, a.clone()),
                &recorded(404, b.clone())
            )
            .is_empty()
        );
        let differences = compare_step(0, &narrow, &recorded(404, a), &recorded(409, b));
        assert_eq!(differences[0].at, "status");
    }

    #[test]
    fn ignored_pointers_and_generated_name_suffixes_are_left_out() {
        let a = json!({"metadata": {"generateName": "w-", "name": "w-abcde", "annotations": {"x": "1"}}});
        let b = json!({"metadata": {"generateName": "w-", "name": "w-zq9k2", "annotations": {"x": "2"}}});
        let ignoring = step(None, vec!["/metadata/annotations"]);
        assert!(compare_step(0, &ignoring, &recorded(201, a), &recorded(201, b)).is_empty());
    }

    #[test]
    fn arrays_named_unordered_compare_as_sets() {
        let a = recorded(422, json!({"causes": [{"field": "a"}, {"field": "b"}]}));
        let b = recorded(422, json!({"causes": [{"field": "b"}, {"field": "a"}]}));
        let mut ordered = step(None, vec![]);
        assert!(!compare_step(0, &ordered, &a, &b).is_empty());
        ordered.unordered = vec!["/causes".into()];
        assert!(compare_step(0, &ordered, &a, &b).is_empty());
    }
}
