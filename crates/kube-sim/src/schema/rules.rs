//! `x-kubernetes-validations`: CEL rules compiled once per schema and
//! evaluated per value, with `self`, `oldSelf` (transition rules), `message`,
//! `messageExpression`, `fieldPath` and `reason`, reporting failures in the
//! apiserver's words.
//!
//! The CEL interpreter is the `cel` crate (cel-rust) with its standard
//! library (`size`, `has`, `all`, `exists`, `exists_one`, `map`, `filter`,
//! `matches`, `startsWith`, `endsWith`, `contains`, conversions, optionals)
//! and its strings extension (`lowerAscii`, `upperAscii`, `trim`, `split`,
//! `join`, `indexOf`, `replace`, `substring`, ...), plus the Kubernetes
//! list, regex and sets functions in [`super::k8s_lib`].
//!
//! Cost: cel-rust has no cost accounting, so evaluation is bounded by a
//! proxy. Each rule evaluation costs the number of JSON nodes it is handed
//! (`self` plus `oldSelf`, plus one); one evaluation over
//! [`PER_CALL_LIMIT`] fails like the apiserver's per-call limit, and the
//! whole object gets [`RUNTIME_COST_BUDGET`], after which no further rule
//! runs, as the apiserver words it. CEL itself has no unbounded loops, so
//! this bounds work by the size of the object.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use ::cel::objects::{Key, Map as CelMap, OptionalValue};
use ::cel::{Context, Env, ExecutionError, Program, Value as CelValue};
use serde_json::Value;

use super::compile::{Additional, JsonType, ListType, Node};
use super::errors::{FieldError, FieldErrorKind, path};
use super::validate::find_by_keys;

/// The apiserver's per-object CEL budget (`RuntimeCELCostBudget`).
pub const RUNTIME_COST_BUDGET: i64 = 10_000_000;
/// The apiserver's per-expression limit (`PerCallLimit`).
pub const PER_CALL_LIMIT: i64 = 1_000_000;

static ENV: LazyLock<Result<Arc<Env>, String>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    env.add_extension(::cel::extensions::strings)
        .map_err(|e| e.to_string())?;
    env.add_extension(super::k8s_lib::extension)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(env))
});

fn env() -> Result<&'static Arc<Env>, String> {
    ENV.as_ref().map_err(|e| format!("CEL environment: {e}"))
}

/// `reason` of a rule: which field error a failure becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    Invalid,
    Forbidden,
    Required,
    Duplicate,
}

#[derive(Debug)]
pub(super) struct CompiledRule {
    rule: String,
    program: Program,
    message: String,
    message_expression: Option<Program>,
    /// The `fieldPath`, normalized to a field-path suffix (`foo.bar[key]`).
    field_path: Option<String>,
    reason: Option<Reason>,
    uses_old_self: bool,
    optional_old_self: bool,
}

impl CompiledRule {
    /// The rule as errors name it: the message when there is one.
    fn error_string(&self) -> &str {
        if self.message.is_empty() {
            self.rule.trim()
        } else {
            &self.message
        }
    }

    fn default_detail(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.rule.trim())
        } else {
            self.message.clone()
        }
    }
}

pub(super) fn compile_rules(
    raw: &Value,
    rules_path: &str,
    node: &Node,
    correlatable: bool,
    errs: &mut Vec<FieldError>,
) -> Vec<CompiledRule> {
    let env = match env() {
        Ok(env) => env,
        Err(e) => {
            errs.push(FieldError::new(
                rules_path,
                FieldErrorKind::Internal,
                None,
                e,
            ));
            return Vec::new();
        }
    };
    let Value::Array(entries) = raw else {
        errs.push(FieldError::invalid(
            rules_path,
            raw.clone(),
            "must be an array",
        ));
        return Vec::new();
    };
    let mut compiled = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let entry_path = format!("{rules_path}[{i}]");
        let text = |key: &str| {
            entry
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let rule = text("rule");
        if rule.trim().is_empty() {
            errs.push(FieldError::required(&format!("{entry_path}.rule"), ""));
            continue;
        }
        let program = match env.compile(&rule) {
            Ok(p) => p,
            Err(e) => {
                errs.push(FieldError::invalid(
                    &format!("{entry_path}.rule"),
                    Value::String(rule.clone()),
                    format!("compilation failed: {e}"),
                ));
                continue;
            }
        };
        let references = program.references();
        let uses_old_self = references.has_variable("oldSelf");
        if uses_old_self && !correlatable {
            errs.push(FieldError::invalid(
                &format!("{entry_path}.rule"),
                Value::String(rule.clone()),
                "oldSelf cannot be used on the uncorrelatable portion of the schema",
            ));
            continue;
        }
        let optional_old_self = entry.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
        if optional_old_self && !uses_old_self {
            errs.push(FieldError::invalid(
                &format!("{entry_path}.optionalOldSelf"),
                Value::Bool(true),
                "may not be set if oldSelf is not used in rule",
            ));
            continue;
        }

        let message = text("message").trim().to_string();
        if message.contains('\n') {
            errs.push(FieldError::invalid(
                &format!("{entry_path}.message"),
                Value::String(message.clone()),
                "message must not contain line breaks",
            ));
            continue;
        }
        let message_expression = match entry.get("messageExpression").and_then(Value::as_str) {
            Some(source) if !source.trim().is_empty() => match env.compile(source) {
                Ok(p) => Some(p),
                Err(e) => {
                    errs.push(FieldError::invalid(
                        &format!("{entry_path}.messageExpression"),
                        Value::String(source.to_string()),
                        format!("messageExpression compilation failed: {e}"),
                    ));
                    continue;
                }
            },
            _ => None,
        };
        let reason = match entry.get("reason").and_then(Value::as_str) {
            None => None,
            Some("FieldValueInvalid") => Some(Reason::Invalid),
            Some("FieldValueForbidden") => Some(Reason::Forbidden),
            Some("FieldValueRequired") => Some(Reason::Required),
            Some("FieldValueDuplicate") => Some(Reason::Duplicate),
            Some(other) => {
                errs.push(FieldError::not_supported(
                    &format!("{entry_path}.reason"),
                    Value::String(other.to_string()),
                    &[
                        "FieldValueInvalid",
                        "FieldValueForbidden",
                        "FieldValueRequired",
                        "FieldValueDuplicate",
                    ]
                    .map(String::from),
                ));
                continue;
            }
        };
        let field_path = match entry.get("fieldPath").and_then(Value::as_str) {
            Some(fp) if !fp.is_empty() => match normalize_field_path(fp, node) {
                Ok(normalized) => Some(normalized),
                Err(why) => {
                    errs.push(FieldError::invalid(
                        &format!("{entry_path}.fieldPath"),
                        Value::String(fp.to_string()),
                        why,
                    ));
                    continue;
                }
            },
            _ => None,
        };
        compiled.push(CompiledRule {
            rule,
            program,
            message,
            message_expression,
            field_path,
            reason,
            uses_old_self,
            optional_old_self,
        });
    }
    compiled
}

/// Checks a rule's `fieldPath` (`.a.b`, `.a['key']`) against the schema and
/// renders it as the apiserver's field path suffix (`a.b`, `a[key]`).
fn normalize_field_path(fp: &str, root: &Node) -> Result<String, String> {
    let mut out = String::new();
    let mut node = root;
    let mut rest = fp;
    while !rest.is_empty() {
        let name;
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            name = after[..end].to_string();
            rest = &after[end..];
            if name.is_empty() {
                return Err("unexpected end of JSON path".into());
            }
        } else if let Some(after) = rest.strip_prefix("['") {
            let Some(end) = after.find("']") else {
                return Err("expected single quoted string followed by ]".into());
            };
            name = after[..end].replace("\\'", "'");
            rest = &after[end + 2..];
        } else {
            return Err(format!("expected [ or . but got: {rest}"));
        }
        if let Some(prop) = node.properties.get(&name) {
            out = path::child(&out, &name);
            node = prop;
        } else if let Additional::Schema(value_node) = &node.additional {
            out = path::key(&out, &name);
            node = value_node;
        } else {
            return Err("does not refer to a valid field".into());
        }
    }
    Ok(out)
}

/// CEL evaluation over a whole object.
pub(super) struct Evaluator {
    budget: i64,
    per_call_limit: i64,
    exhausted: bool,
}

/// Where a value sits relative to the old object on an update.
#[derive(Debug, Clone, Copy)]
pub(super) struct Correlation<'a> {
    /// The correlated old value, if any (transition rules need one).
    pub old: Option<&'a Value>,
    /// Whether the value, or its nearest correlatable ancestor, is
    /// unchanged: failures of rules that do not use `oldSelf` are then
    /// ratcheted away, as the apiserver turns them into warnings.
    pub unchanged: bool,
}

impl Evaluator {
    pub(super) fn new() -> Self {
        Self::with_limits(RUNTIME_COST_BUDGET, PER_CALL_LIMIT)
    }

    /// An evaluator with other limits, so tests can reach them with small
    /// objects.
    pub(super) fn with_limits(budget: i64, per_call_limit: i64) -> Self {
        Evaluator {
            budget,
            per_call_limit,
            exhausted: false,
        }
    }

    /// Evaluates every rule at and below `node`.
    pub(super) fn validate(
        &mut self,
        node: &Node,
        value: &Value,
        corr: Correlation<'_>,
        field: &str,
        resource_root: bool,
        errs: &mut Vec<FieldError>,
    ) {
        if self.exhausted || value.is_null() {
            return;
        }
        let old = corr.old.filter(|o| !o.is_null());
        let corr = Correlation { old, ..corr };
        self.run_rules(node, value, corr, field, resource_root, errs);
        if self.exhausted {
            return;
        }
        match value {
            Value::Object(map) => {
                // Only granular maps and objects correlate their entries.
                let old_map = if node.map_atomic {
                    None
                } else {
                    old.and_then(Value::as_object)
                };
                for (key, v) in map {
                    let (child, child_field) = if let Some(prop) = node.properties.get(key) {
                        (prop, path::child(field, key))
                    } else if let Additional::Schema(value_node) = &node.additional {
                        (value_node.as_ref(), path::key(field, key))
                    } else {
                        continue;
                    };
                    if !child.has_rules() {
                        continue;
                    }
                    let child_corr = match old_map {
                        Some(m) => {
                            let old_v = m.get(key);
                            Correlation {
                                old: old_v,
                                unchanged: old_v == Some(v),
                            }
                        }
                        None => Correlation {
                            old: None,
                            unchanged: corr.unchanged,
                        },
                    };
                    self.validate(
                        child,
                        v,
                        child_corr,
                        &child_field,
                        child.embedded_resource,
                        errs,
                    );
                    if self.exhausted {
                        return;
                    }
                }
            }
            Value::Array(items) => {
                let Some(item_node) = node.items.as_deref() else {
                    return;
                };
                if !item_node.has_rules() {
                    return;
                }
                let old_items = old.and_then(Value::as_array);
                for (i, item) in items.iter().enumerate() {
                    // Only list-type=map items correlate, by their keys.
                    let child_corr = match (node.list_type, old_items) {
                        (Some(ListType::Map), Some(olds)) => {
                            let old_item = find_by_keys(&node.list_map_keys, item, olds);
                            Correlation {
                                old: old_item,
                                unchanged: old_item == Some(item),
                            }
                        }
                        (Some(ListType::Map), None) => Correlation {
                            old: None,
                            unchanged: false,
                        },
                        _ => Correlation {
                            old: None,
                            unchanged: corr.unchanged,
                        },
                    };
                    let embedded = item_node.embedded_resource;
                    self.validate(
                        item_node,
                        item,
                        child_corr,
                        &path::index(field, i),
                        embedded,
                        errs,
                    );
                    if self.exhausted {
                        return;
                    }
                }
            }
            _ => {}
        }
    }

    /// Runs `node`'s rules on `value`, typed by `node`: its own, then
    /// those declared under its allOf, which apply to this same value.
    fn run_rules(
        &mut self,
        node: &Node,
        value: &Value,
        corr: Correlation<'_>,
        field: &str,
        resource_root: bool,
        errs: &mut Vec<FieldError>,
    ) {
        let mut rules = node
            .rules
            .iter()
            .chain(node.all_of.iter().flat_map(|sub| &sub.rules))
            .peekable();
        if rules.peek().is_none() || self.exhausted {
            return;
        }
        let env = match env() {
            Ok(env) => env,
            Err(e) => {
                errs.push(FieldError::new(field, FieldErrorKind::Internal, None, e));
                self.exhausted = true;
                return;
            }
        };
        let old = corr.old;
        let type_name = Value::String(node.cel_type_name().to_string());
        let self_val = to_cel(Some(node), value, resource_root);
        let self_cost = json_nodes(value);
        let old_val = old.map(|o| (to_cel(Some(node), o, resource_root), json_nodes(o)));

        for rule in rules {
            if rule.uses_old_self && old.is_none() && !rule.optional_old_self {
                continue; // transition rules need an old value
            }
            if self.budget <= 0 {
                self.out_of_budget(field, &type_name, errs);
                return;
            }
            let mut ctx = Context::with_env(Arc::clone(env));
            ctx.add_variable_from_value("self", self_val.clone());
            let mut cost = self_cost + 1;
            if rule.uses_old_self {
                let old_cel = match (&old_val, rule.optional_old_self) {
                    (Some((v, c)), false) => {
                        cost += c;
                        v.clone()
                    }
                    (Some((v, c)), true) => {
                        cost += c;
                        CelValue::Opaque(Arc::new(OptionalValue::of(v.clone())))
                    }
                    (None, _) => CelValue::Opaque(Arc::new(OptionalValue::none())),
                };
                ctx.add_variable_from_value("oldSelf", old_cel);
            }
            if cost > self.per_call_limit {
                errs.push(FieldError::invalid(
                    field,
                    type_name.clone(),
                    format!(
                        "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                        rule.error_string()
                    ),
                ));
                self.exhausted = true;
                return;
            }
            if cost > self.budget {
                self.out_of_budget(field, &type_name, errs);
                return;
            }
            self.budget -= cost;

            match rule.program.execute(&ctx) {
                Ok(CelValue::Bool(true)) => {}
                Ok(CelValue::Bool(false)) => {
                    if !rule.uses_old_self && corr.unchanged {
                        continue; // ratcheted: the apiserver only warns
                    }
                    let error_field = match &rule.field_path {
                        Some(suffix) if suffix.starts_with('[') => format!("{field}{suffix}"),
                        Some(suffix) => path::child(field, suffix),
                        None => field.to_string(),
                    };
                    let detail = rule
                        .message_expression
                        .as_ref()
                        .and_then(|expr| evaluate_message(expr, &ctx))
                        .unwrap_or_else(|| rule.default_detail());
                    errs.push(error_for_reason(
                        rule.reason,
                        &error_field,
                        type_name.clone(),
                        detail,
                    ));
                }
                Ok(other) => errs.push(FieldError::invalid(
                    field,
                    type_name.clone(),
                    format!(
                        "rule evaluated to {}, not a bool, evaluating rule: {}",
                        cel_type_of(&other),
                        rule.error_string()
                    ),
                )),
                Err(err) => errs.push(runtime_error(field, type_name.clone(), &err, rule)),
            }
        }
    }

    fn out_of_budget(&mut self, field: &str, type_name: &Value, errs: &mut Vec<FieldError>) {
        errs.push(FieldError::invalid(
            field,
            type_name.clone(),
            "validation failed due to running out of cost budget, no further validation rules will be run",
        ));
        self.exhausted = true;
    }
}

/// The message of a failed rule from its `messageExpression`, or `None` when
/// it fails, is not a string, is blank or spans lines (the apiserver then
/// falls back to `message`).
fn evaluate_message(expr: &Program, ctx: &Context) -> Option<String> {
    match expr.execute(ctx) {
        Ok(CelValue::String(s)) => {
            let trimmed = s.trim();
            (!trimmed.is_empty() && !trimmed.contains('\n') && trimmed.len() <= 5 * 1024)
                .then(|| trimmed.to_string())
        }
        _ => None,
    }
}

fn error_for_reason(
    reason: Option<Reason>,
    field: &str,
    type_name: Value,
    detail: String,
) -> FieldError {
    match reason {
        None | Some(Reason::Invalid) => FieldError::invalid(field, type_name, detail),
        Some(Reason::Forbidden) => FieldError::new(field, FieldErrorKind::Forbidden, None, detail),
        Some(Reason::Required) => FieldError::required(field, detail),
        // The apiserver's Duplicate carries the value and no detail.
        Some(Reason::Duplicate) => {
            FieldError::new(field, FieldErrorKind::Duplicate, Some(type_name), "")
        }
    }
}

/// A runtime error in the apiserver's wording, with cel-go's texts for the
/// errors both interpreters raise.
fn runtime_error(
    field: &str,
    type_name: Value,
    err: &ExecutionError,
    rule: &CompiledRule,
) -> FieldError {
    let detail = match err {
        ExecutionError::NoSuchOverload(_)
        | ExecutionError::UnsupportedBinaryOperator(..)
        | ExecutionError::ValuesNotComparable(..) => format!(
            "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {}",
            rule.error_string()
        ),
        other => format!(
            "{} evaluating rule: {}",
            go_cel_error(other),
            rule.error_string()
        ),
    };
    FieldError::invalid(field, type_name, detail)
}

fn go_cel_error(err: &ExecutionError) -> String {
    match err {
        ExecutionError::NoSuchKey(key) => format!("no such key: {key}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        ExecutionError::IndexOutOfBounds(index) => {
            format!("index out of bounds: {}", cel_display(index))
        }
        other => other.to_string(),
    }
}

fn cel_display(value: &CelValue) -> String {
    match value {
        CelValue::Int(i) => i.to_string(),
        CelValue::UInt(u) => u.to_string(),
        CelValue::String(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}

fn cel_type_of(value: &CelValue) -> &'static str {
    match value {
        CelValue::List(_) => "list",
        CelValue::Map(_) => "map",
        CelValue::Int(_) => "int",
        CelValue::UInt(_) => "uint",
        CelValue::Float(_) => "double",
        CelValue::String(_) => "string",
        CelValue::Bytes(_) => "bytes",
        CelValue::Bool(_) => "bool",
        CelValue::Null => "null_type",
        _ => "dyn",
    }
}

fn json_nodes(value: &Value) -> i64 {
    match value {
        Value::Array(items) => 1 + items.iter().map(json_nodes).sum::<i64>(),
        Value::Object(map) => 1 + map.values().map(json_nodes).sum::<i64>(),
        _ => 1,
    }
}

const CEL_RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The CEL name of a property, escaped as the apiserver escapes them, or
/// `None` when the name cannot be escaped (the field is then invisible to
/// rules).
pub(super) fn escape_property(name: &str) -> Option<String> {
    if CEL_RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut chars = name.chars();
    let first = chars.next()?;
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '/');
    if !(first.is_ascii_alphabetic() || matches!(first, '_' | '.' | '-' | '/'))
        || !chars.all(allowed)
    {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

fn cel_map(entries: HashMap<Key, CelValue>) -> CelValue {
    CelValue::Map(CelMap {
        map: Arc::new(entries),
    })
}

/// Converts a JSON value to CEL as the schema types it: declared properties
/// only (escaped), maps keyed as they are, numbers as the schema says, and
/// for a resource root only `apiVersion`, `kind` and `metadata.name` /
/// `metadata.generateName` besides the declared properties.
pub(super) fn to_cel(node: Option<&Node>, value: &Value, resource_root: bool) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Number(n) => {
            let declared = node.and_then(|n| n.ty);
            match (declared, n.as_i64()) {
                (Some(JsonType::Number), _) => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                (_, Some(i)) => CelValue::Int(i),
                (Some(JsonType::Integer), None) => match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.2e18 => CelValue::Int(f as i64),
                    Some(f) => CelValue::Float(f),
                    None => CelValue::Null,
                },
                (_, None) => match n.as_u64() {
                    Some(u) => CelValue::UInt(u),
                    None => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
            }
        }
        Value::Array(items) => {
            let item_node = node.and_then(|n| n.items.as_deref());
            CelValue::List(Arc::new(
                items
                    .iter()
                    .map(|v| to_cel(item_node, v, item_node.is_some_and(|n| n.embedded_resource)))
                    .collect(),
            ))
        }
        Value::Object(map) => {
            let mut entries = HashMap::new();
            match node {
                Some(n) if !n.properties.is_empty() || n.preserve_unknown || resource_root => {
                    for (name, prop) in &n.properties {
                        if resource_root && name == "metadata" {
                            continue;
                        }
                        if let (Some(v), Some(escaped)) = (map.get(name), escape_property(name)) {
                            entries.insert(
                                Key::String(Arc::new(escaped)),
                                to_cel(Some(prop), v, prop.embedded_resource),
                            );
                        }
                    }
                    if resource_root {
                        add_resource_fields(map, &mut entries);
                    }
                }
                Some(n) => {
                    let value_node = match &n.additional {
                        Additional::Schema(v) => Some(v.as_ref()),
                        _ => None,
                    };
                    for (k, v) in map {
                        let embedded = value_node.is_some_and(|n| n.embedded_resource);
                        entries.insert(
                            Key::String(Arc::new(k.clone())),
                            to_cel(value_node, v, embedded),
                        );
                    }
                }
                None => {
                    for (k, v) in map {
                        entries.insert(Key::String(Arc::new(k.clone())), to_cel(None, v, false));
                    }
                }
            }
            cel_map(entries)
        }
    }
}

fn add_resource_fields(map: &serde_json::Map<String, Value>, entries: &mut HashMap<Key, CelValue>) {
    for field in ["apiVersion", "kind"] {
        if let Some(Value::String(s)) = map.get(field) {
            entries.insert(
                Key::String(Arc::new(field.into())),
                CelValue::String(Arc::new(s.clone())),
            );
        }
    }
    if let Some(Value::Object(meta)) = map.get("metadata") {
        let mut meta_entries = HashMap::new();
        for field in ["name", "generateName"] {
            if let Some(Value::String(s)) = meta.get(field) {
                meta_entries.insert(
                    Key::String(Arc::new(field.into())),
                    CelValue::String(Arc::new(s.clone())),
                );
            }
        }
        entries.insert(
            Key::String(Arc::new("metadata".into())),
            cel_map(meta_entries),
        );
    }
}

/// A standalone CEL expression over untyped JSON variables, for the
/// `matchConditions` of admission webhooks: compiled once when the
/// configuration is read, evaluated per request. Values are converted
/// without a schema (every map key visible, integers as `int`).
#[derive(Debug)]
pub struct Expression {
    program: Program,
}

impl Expression {
    /// Compiles `text` in the same environment as schema rules.
    pub fn compile(text: &str) -> Result<Self, String> {
        let env = env()?;
        env.compile(text)
            .map(|program| Self { program })
            .map_err(|e| format!("compilation failed: {e}"))
    }

    /// Evaluates to a bool with `variables` bound; any other result is an
    /// error, worded as the apiserver words a non-bool condition.
    pub fn evaluate_bool(&self, variables: &[(&str, &Value)]) -> Result<bool, String> {
        let bound = Bindings::from_json(variables);
        match self.evaluate(&bound)? {
            CelValue::Bool(b) => Ok(b),
            other => Err(format!(
                "expression evaluated to {}, not a bool",
                cel_type_of(&other)
            )),
        }
    }

    /// Evaluates with `bound` variables, to whatever CEL value it gives.
    pub(crate) fn evaluate(&self, bound: &Bindings) -> Result<CelValue, String> {
        let env = env()?;
        let mut ctx = Context::with_env(Arc::clone(env));
        for (name, value) in &bound.0 {
            ctx.add_variable_from_value(name.clone(), value.clone());
        }
        self.program.execute(&ctx).map_err(|err| go_cel_error(&err))
    }
}

/// Variables for [`Expression::evaluate`]: JSON values converted once,
/// and CEL values (a policy's `variables`, computed by earlier
/// expressions) as they are.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bindings(Vec<(String, CelValue)>);

impl Bindings {
    pub(crate) fn from_json(variables: &[(&str, &Value)]) -> Self {
        Self(
            variables
                .iter()
                .map(|(name, value)| (name.to_string(), to_cel(None, value, false)))
                .collect(),
        )
    }

    /// Binds `name` to a map of already evaluated values.
    pub(crate) fn bind_map(&mut self, name: &str, entries: Vec<(String, CelValue)>) {
        let map = entries
            .into_iter()
            .map(|(k, v)| (Key::String(Arc::new(k)), v))
            .collect::<HashMap<_, _>>();
        self.0.retain(|(n, _)| n != name);
        self.0.push((name.to_string(), cel_map(map)));
    }
}

/// A CEL value as a string, when it is one.
pub(crate) fn cel_string(value: &CelValue) -> Option<String> {
    match value {
        CelValue::String(s) => Some(s.to_string()),
        _ => None,
    }
}

/// The CEL type name of a value, as error messages give it.
pub(crate) fn cel_type_name(value: &CelValue) -> &'static str {
    cel_type_of(value)
}
