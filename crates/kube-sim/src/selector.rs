//! Label and field selectors, parsed from their query-string form and matched
//! against stored objects. Grammar as in the Kubernetes API conventions:
//! `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, comma-joined.

use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            // As in Kubernetes: `a!=b` also matches objects without the key.
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// A `metav1.LabelSelector` object (`matchLabels` and
    /// `matchExpressions`), as webhooks and workloads carry it; `{}` or
    /// null matches everything. An expression it cannot read is an error.
    pub fn from_object(selector: &serde_json::Value) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if selector.is_null() {
            return Ok(Self { requirements });
        }
        if let Some(labels) = selector.get("matchLabels").and_then(|m| m.as_object()) {
            for (key, value) in labels {
                let value = value
                    .as_str()
                    .ok_or_else(|| format!("matchLabels[{key}] must be a string"))?;
                requirements.push(Requirement::Equals(key.clone(), value.to_string()));
            }
        }
        let expressions = selector
            .get("matchExpressions")
            .and_then(|e| e.as_array())
            .map(Vec::as_slice)
            .unwrap_or_default();
        for expression in expressions {
            let key = expression
                .get("key")
                .and_then(|k| k.as_str())
                .ok_or("a matchExpressions entry needs a key")?
                .to_string();
            let values: Vec<String> = expression
                .get("values")
                .and_then(|v| v.as_array())
                .map(|v| {
                    v.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let operator = expression
                .get("operator")
                .and_then(|o| o.as_str())
                .unwrap_or_default();
            requirements.push(match operator {
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            });
        }
        Ok(Self { requirements })
    }

    /// Whether it has no requirement (and so matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn parse(input: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for clause in split_top_level(input)? {
            let clause = clause.trim();
            if clause.is_empty() {
                continue;
            }
            requirements.push(parse_clause(clause)?);
        }
        Ok(Self { requirements })
    }
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(input: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unexpected ')' in selector {input:?}"));
                }
            }
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unclosed '(' in selector {input:?}"));
    }
    parts.push(&input[start..]);
    Ok(parts)
}

fn check_key(key: &str, clause: &str) -> Result<String, String> {
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("found '{clause}', expected: a label key"));
    }
    let problems = crate::names::qualified_name(key);
    if let Some(first) = problems.first() {
        return Err(format!("invalid label key {key:?}: {first}"));
    }
    Ok(key.to_string())
}

fn check_value(value: &str) -> Result<String, String> {
    let value = value.trim();
    let problems = crate::names::label_value(value);
    if let Some(first) = problems.first() {
        return Err(format!("invalid label value: {value:?}: {first}"));
    }
    Ok(value.to_string())
}

fn parse_set(rest: &str, clause: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("found '{clause}', expected: '(' value list ')'"))?;
    let values = inner
        .split(',')
        .map(check_value)
        .collect::<Result<Vec<_>, _>>()?;
    if values.iter().all(String::is_empty) && values.len() == 1 && inner.trim().is_empty() {
        return Err(format!("found '{clause}', expected: at least one value"));
    }
    Ok(values)
}

fn parse_clause(clause: &str) -> Result<Requirement, String> {
    if let Some(key) = clause.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(check_key(key, clause)?));
    }
    for (op, ctor) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some((key, value)) = clause.split_once(op) {
            return Ok(ctor(check_key(key, clause)?, check_value(value)?));
        }
    }
    // Set-based forms: the key is followed by whitespace and `in`/`notin`.
    let mut words = clause.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default().trim_start();
    if rest.is_empty() {
        return Ok(Requirement::Exists(check_key(key, clause)?));
    }
    if let Some(set) = rest.strip_prefix("notin") {
        return Ok(Requirement::NotIn(
            check_key(key, clause)?,
            parse_set(set, clause)?,
        ));
    }
    if let Some(set) = rest.strip_prefix("in") {
        return Ok(Requirement::In(
            check_key(key, clause)?,
            parse_set(set, clause)?,
        ));
    }
    Err(format!(
        "found '{rest}', expected: in, notin, =, ==, !=, or end of string"
    ))
}

/// A parsed field selector: only `=`, `==` and `!=` exist for fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, String, bool)>,
}

impl FieldSelector {
    /// Parses and checks every field against the ones the kind supports.
    pub fn parse(input: &str, supported: &[&str]) -> Result<Self, String> {
        let mut terms = Vec::new();
        for clause in input.split(',') {
            let clause = clause.trim();
            if clause.is_empty() {
                continue;
            }
            let (field, value, equal) = if let Some((f, v)) = clause.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = clause.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = clause.split_once('=') {
                (f, v, true)
            } else {
                return Err(format!(
                    "invalid selector: '{clause}'; can't understand '{clause}'"
                ));
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), value.trim().to_string(), equal));
        }
        Ok(Self { terms })
    }

    /// `lookup` yields the object's value for a supported field ("" when unset).
    pub fn matches<'a>(&self, lookup: impl Fn(&str) -> &'a str) -> bool {
        self.terms
            .iter()
            .all(|(field, value, equal)| (lookup(field) == value) == *equal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equality_and_inequality_match_as_kubernetes_does() {
        let s = LabelSelector::parse("app=web,tier!=db").unwrap();
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "api")])));
        let s = LabelSelector::parse("app==web").unwrap();
        assert!(s.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn set_based_requirements_match() {
        let s = LabelSelector::parse("env in (prod, staging),zone notin (a),gpu,!legacy").unwrap();
        assert!(s.matches(&labels(&[("env", "prod"), ("gpu", "")])));
        assert!(s.matches(&labels(&[("env", "staging"), ("gpu", "1"), ("zone", "b")])));
        assert!(!s.matches(&labels(&[("env", "dev"), ("gpu", "1")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("gpu", "1"), ("zone", "a")])));
        assert!(!s.matches(&labels(&[("env", "prod")])));
        assert!(!s.matches(&labels(&[("env", "prod"), ("gpu", "1"), ("legacy", "y")])));
    }

    #[test]
    fn notin_matches_objects_without_the_key() {
        let s = LabelSelector::parse("zone notin (a)").unwrap();
        assert!(s.matches(&labels(&[])));
    }

    #[test]
    fn malformed_selectors_are_rejected() {
        assert!(LabelSelector::parse("env in (prod").is_err());
        assert!(LabelSelector::parse("env in prod").is_err());
        assert!(LabelSelector::parse("bad key=x").is_err());
        assert!(LabelSelector::parse("app=has space").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = LabelSelector::parse("").unwrap();
        assert!(s.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn field_selectors_reject_unsupported_fields() {
        let supported = ["metadata.name", "metadata.namespace", "spec.nodeName"];
        let s = FieldSelector::parse("spec.nodeName=node-1,metadata.name!=x", &supported).unwrap();
        let lookup = |f: &str| match f {
            "spec.nodeName" => "node-1",
            "metadata.name" => "p",
            _ => "",
        };
        assert!(s.matches(lookup));
        assert_eq!(
            FieldSelector::parse("spec.foo=1", &supported).unwrap_err(),
            "field label not supported: spec.foo"
        );
    }
}
