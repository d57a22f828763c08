//! Field sets in the `FieldsV1` form of `metadata.managedFields`.
//!
//! A path is a list of encoded elements, exactly the keys the JSON form
//! uses: `f:<field>`, `k:<key fields as JSON, sorted>` for an element of a
//! map-list, `v:<value as JSON>` for an element of a set, `i:<index>`
//! (only read, never produced, since atomic lists are owned whole). A set
//! is a tree; a node is a member when the path ending there is owned,
//! which the JSON form writes as an empty object for a leaf and as a `"."`
//! entry for a node that also has children.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::list_types::{ListType, ListTypes, SchemaNode, child_node, item_node};

/// A path of encoded elements (`["f:spec", "f:replicas"]`).
pub type FieldPath = Vec<String>;

/// Errors reading `fieldsV1` or walking an object by its list types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldsError {
    #[error("fieldsV1 at {path} must be a JSON object")]
    NotAnObject { path: String },
    #[error("fieldsV1 at {path} has an invalid path element {element:?}")]
    BadElement { path: String, element: String },
    #[error("{path}: element {index}: an associative list element must be an object")]
    ElementNotAnObject { path: String, index: usize },
    #[error(
        "{path}: element {index}: associative list with keys has an element that omits key field {key:?}"
    )]
    MissingKey {
        path: String,
        index: usize,
        key: String,
    },
    #[error("{path}: duplicate entries for key {element}")]
    Duplicate { path: String, element: String },
}

/// A set of field paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub fn new() -> Self {
        FieldSet::default()
    }

    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Adds a path; the empty path (the object itself) is never owned.
    pub fn insert(&mut self, path: &[String]) {
        let Some((last, parents)) = path.split_last() else {
            return;
        };
        let mut node = self;
        for element in parents {
            node = node.children.entry(element.clone()).or_default();
        }
        node.children.entry(last.clone()).or_default().member = true;
    }

    pub fn contains(&self, path: &[String]) -> bool {
        self.node(path).is_some_and(|node| node.member)
    }

    /// Whether some member lies strictly below `path`.
    pub fn has_member_below(&self, path: &[String]) -> bool {
        self.node(path)
            .is_some_and(|node| node.children.values().any(|child| !child.is_empty()))
    }

    fn node(&self, path: &[String]) -> Option<&FieldSet> {
        let mut node = self;
        for element in path {
            node = node.children.get(element)?;
        }
        Some(node)
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (element, child) in &other.children {
            let merged = match out.children.get(element) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.children.insert(element.clone(), merged);
        }
        out
    }

    /// Members of `self` that are not members of `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (element, child) in &self.children {
            let rest = match other.children.get(element) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(element.clone(), rest);
            }
        }
        out
    }

    /// `self = self.difference(other)`, in place: the work is proportional
    /// to `other`, which matters when a small change is taken from a large
    /// set (a status write against a manager owning the whole spec).
    pub fn subtract(&mut self, other: &FieldSet) {
        if other.member {
            self.member = false;
        }
        for (element, theirs) in &other.children {
            if let Some(mine) = self.children.get_mut(element) {
                mine.subtract(theirs);
                if mine.is_empty() {
                    self.children.remove(element);
                }
            }
        }
    }

    /// `self = self.union(other)`, in place (work proportional to `other`).
    pub fn absorb(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (element, theirs) in &other.children {
            match self.children.get_mut(element) {
                Some(mine) => mine.absorb(theirs),
                None => {
                    self.children.insert(element.clone(), theirs.clone());
                }
            }
        }
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (element, child) in &self.children {
            if let Some(theirs) = other.children.get(element) {
                let both = child.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(element.clone(), both);
                }
            }
        }
        out
    }

    /// Every member path, parents before children, siblings in key order.
    pub fn paths(&self) -> Vec<FieldPath> {
        let mut out = Vec::new();
        let mut prefix = Vec::new();
        self.collect_paths(&mut prefix, &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<String>, out: &mut Vec<FieldPath>) {
        for (element, child) in &self.children {
            prefix.push(element.clone());
            if child.member {
                out.push(prefix.clone());
            }
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON form.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        if self.member && !self.children.is_empty() {
            out.insert(".".to_string(), Value::Object(Map::new()));
        }
        for (element, child) in &self.children {
            if !child.is_empty() {
                out.insert(element.clone(), child.to_fields_v1());
            }
        }
        Value::Object(out)
    }

    /// Reads the `fieldsV1` JSON form.
    pub fn from_fields_v1(value: &Value) -> Result<FieldSet, FieldsError> {
        let mut prefix = Vec::new();
        let mut set = FieldSet::read_node(value, &mut prefix)?;
        // The object itself is never a member.
        set.member = false;
        Ok(set)
    }

    fn read_node(value: &Value, prefix: &mut Vec<String>) -> Result<FieldSet, FieldsError> {
        let object = value.as_object().ok_or_else(|| FieldsError::NotAnObject {
            path: path_to_string(prefix),
        })?;
        let mut node = FieldSet {
            // `{}` is a leaf member; a node with children is a member only
            // with an explicit ".".
            member: object.is_empty(),
            children: BTreeMap::new(),
        };
        for (element, child) in object {
            if element == "." {
                node.member = true;
                continue;
            }
            if !is_valid_element(element) {
                return Err(FieldsError::BadElement {
                    path: path_to_string(prefix),
                    element: element.clone(),
                });
            }
            prefix.push(element.clone());
            let child = FieldSet::read_node(child, prefix)?;
            prefix.pop();
            node.children.insert(element.clone(), child);
        }
        Ok(node)
    }

    /// The fields an apply configuration (or any object) sets: scalars,
    /// atomic lists and atomic maps as leaves, each element of a set or
    /// map-list as a member, and empty maps not at all. Elements of
    /// map-lists must carry their keys and must not repeat, as the server
    /// demands of an apply configuration.
    pub fn from_object(value: &Value, types: &ListTypes) -> Result<FieldSet, FieldsError> {
        let mut set = FieldSet::new();
        let mut path = Vec::new();
        collect_set(value, Some(types.root()), &mut path, &mut set, true)?;
        Ok(set)
    }

    /// Like [`FieldSet::from_object`] for a stored object, which may hold
    /// list items without keys or with repeated keys: those are skipped.
    pub fn from_stored_object(value: &Value, types: &ListTypes) -> FieldSet {
        let mut set = FieldSet::new();
        let mut path = Vec::new();
        // Cannot fail: non-strict walks skip what strict walks reject.
        let _ = collect_set(value, Some(types.root()), &mut path, &mut set, false);
        set
    }
}

fn is_valid_element(element: &str) -> bool {
    let Some((prefix, rest)) = element.split_once(':') else {
        return false;
    };
    match prefix {
        "f" => !rest.is_empty(),
        "k" => serde_json::from_str::<Value>(rest).is_ok_and(|v| v.is_object()),
        "v" => serde_json::from_str::<Value>(rest).is_ok(),
        "i" => rest.parse::<usize>().is_ok(),
        _ => false,
    }
}

/// The encoded element of a field name.
pub fn field_element(name: &str) -> String {
    format!("f:{name}")
}

fn value_element(value: &Value) -> String {
    format!("v:{value}")
}

/// The encoded element of a map-list item with these key values; keys are
/// written sorted by name, as the server does.
pub fn key_element(keys: &[(&str, &Value)]) -> String {
    let mut sorted: Vec<&(&str, &Value)> = keys.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    let parts: Vec<String> = sorted
        .iter()
        .map(|(name, value)| format!("{}:{value}", Value::String((*name).to_string())))
        .collect();
    format!("k:{{{}}}", parts.join(","))
}

/// Prints a path as the API server does in conflict messages:
/// `.spec.containers[name="c"].image`, `.metadata.finalizers[="x"]`.
pub fn path_to_string(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        match element.split_once(':') {
            Some(("f", name)) => {
                out.push('.');
                out.push_str(name);
            }
            Some(("k", keys)) => match serde_json::from_str::<Map<String, Value>>(keys) {
                Ok(keys) => {
                    let parts: Vec<String> = keys
                        .iter()
                        .map(|(name, value)| format!("{name}={}", go_value_string(value)))
                        .collect();
                    out.push_str(&format!("[{}]", parts.join(",")));
                }
                Err(_) => out.push_str(&format!("[{keys}]")),
            },
            Some(("v", value)) => match serde_json::from_str::<Value>(value) {
                Ok(value) => out.push_str(&format!("[={}]", go_value_string(&value))),
                Err(_) => out.push_str(&format!("[={value}]")),
            },
            Some(("i", index)) => out.push_str(&format!("[{index}]")),
            _ => out.push_str(element),
        }
    }
    out
}

/// Scalars as Go's structured-merge-diff prints them: strings quoted,
/// numbers and booleans bare.
fn go_value_string(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::String(s) => Value::String(s.clone()).to_string(),
        other => other.to_string(),
    }
}

/// The shape of a value under its schema node.
enum Shape<'v, 's> {
    /// Owned as one value: scalars, null, atomic lists and maps.
    Leaf,
    Map(&'v Map<String, Value>),
    SetList(&'v [Value]),
    MapList(&'v [Value], &'s [String]),
}

fn shape<'v, 's>(value: &'v Value, node: Option<&'s SchemaNode>) -> Shape<'v, 's> {
    match value {
        Value::Object(map) if !node.is_some_and(SchemaNode::is_atomic_map) => Shape::Map(map),
        Value::Array(items) => match node.map(SchemaNode::list_type) {
            Some(ListType::Set) => Shape::SetList(items),
            Some(ListType::Map { keys }) => Shape::MapList(items, keys),
            _ => Shape::Leaf,
        },
        _ => Shape::Leaf,
    }
}

fn same_kind(a: &Shape<'_, '_>, b: &Shape<'_, '_>) -> bool {
    matches!(
        (a, b),
        (Shape::Leaf, Shape::Leaf)
            | (Shape::Map(_), Shape::Map(_))
            | (Shape::SetList(_), Shape::SetList(_))
            | (Shape::MapList(..), Shape::MapList(..))
    )
}

/// The identity of a map-list item, or why it has none.
pub(crate) fn map_item_element(
    item: &Value,
    keys: &[String],
    list_node: Option<&SchemaNode>,
    index: usize,
    path: &[String],
) -> Result<String, FieldsError> {
    let object = item
        .as_object()
        .ok_or_else(|| FieldsError::ElementNotAnObject {
            path: path_to_string(path),
            index,
        })?;
    let mut values = Vec::with_capacity(keys.len());
    for key in keys {
        let value = object
            .get(key)
            .filter(|v| !v.is_null())
            .or_else(|| list_node.and_then(|n| n.key_default(key)))
            .ok_or_else(|| FieldsError::MissingKey {
                path: path_to_string(path),
                index,
                key: key.clone(),
            })?;
        values.push((key.as_str(), value));
    }
    Ok(key_element(&values))
}

/// One child of a granular value.
struct Child<'v, 's> {
    element: String,
    value: &'v Value,
    node: Option<&'s SchemaNode>,
    /// The position in the list, for list items.
    index: Option<usize>,
}

/// The children of a value. `strict` turns items without identity and
/// repeated identities into errors; otherwise they are skipped (live
/// objects written by other means may hold them, and must not break).
fn children<'v, 's>(
    value: &'v Value,
    node: Option<&'s SchemaNode>,
    path: &[String],
    strict: bool,
) -> Result<Vec<Child<'v, 's>>, FieldsError> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    match shape(value, node) {
        Shape::Leaf => {}
        Shape::Map(map) => {
            for (name, child) in map {
                out.push(Child {
                    element: field_element(name),
                    value: child,
                    node: child_node(node, name),
                    index: None,
                });
            }
        }
        Shape::SetList(items) => {
            for (index, item) in items.iter().enumerate() {
                let element = value_element(item);
                if !seen.insert(element.clone()) {
                    if strict {
                        return Err(FieldsError::Duplicate {
                            path: path_to_string(path),
                            element: path_to_string(&[element]),
                        });
                    }
                    continue;
                }
                out.push(Child {
                    element,
                    value: item,
                    node: item_node(node),
                    index: Some(index),
                });
            }
        }
        Shape::MapList(items, keys) => {
            for (index, item) in items.iter().enumerate() {
                let element = match map_item_element(item, keys, node, index, path) {
                    Ok(element) => element,
                    Err(error) if strict => return Err(error),
                    Err(_) => continue,
                };
                if !seen.insert(element.clone()) {
                    if strict {
                        return Err(FieldsError::Duplicate {
                            path: path_to_string(path),
                            element: path_to_string(&[element]),
                        });
                    }
                    continue;
                }
                out.push(Child {
                    element,
                    value: item,
                    node: item_node(node),
                    index: Some(index),
                });
            }
        }
    }
    Ok(out)
}

fn collect_set(
    value: &Value,
    node: Option<&SchemaNode>,
    path: &mut Vec<String>,
    set: &mut FieldSet,
    strict: bool,
) -> Result<(), FieldsError> {
    for child in children(value, node, path, strict)? {
        path.push(child.element);
        if child.index.is_some() || matches!(shape(child.value, child.node), Shape::Leaf) {
            set.insert(path);
        }
        collect_set(child.value, child.node, path, set, strict)?;
        path.pop();
    }
    Ok(())
}

/// What changed between two versions of an object, as field sets. Every
/// node that appears or disappears is listed (maps and lists included),
/// which is why `Update` entries carry `"."` members for new maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    /// Added and modified paths: what a writer takes ownership of.
    pub fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }

    /// Drops paths nobody may own.
    pub fn without(&self, excluded: &FieldSet) -> Comparison {
        Comparison {
            added: self.added.difference(excluded),
            modified: self.modified.difference(excluded),
            removed: self.removed.difference(excluded),
        }
    }
}

/// The old and new value of one child, with its schema node.
type ChildPair<'v, 's> = (Option<&'v Value>, Option<&'v Value>, Option<&'s SchemaNode>);

/// Compares two versions of an object under `types`.
pub fn compare(old: &Value, new: &Value, types: &ListTypes) -> Comparison {
    let mut out = Comparison::default();
    let mut path = Vec::new();
    compare_at(
        Some(old),
        Some(new),
        Some(types.root()),
        &mut path,
        &mut out,
    );
    out
}

fn compare_at(
    old: Option<&Value>,
    new: Option<&Value>,
    node: Option<&SchemaNode>,
    path: &mut Vec<String>,
    out: &mut Comparison,
) {
    match (old, new) {
        (None, None) => {}
        (None, Some(new)) => {
            out.added.insert(path);
            insert_all_below(new, node, path, &mut out.added);
        }
        (Some(old), None) => {
            out.removed.insert(path);
            insert_all_below(old, node, path, &mut out.removed);
        }
        // Equal values have no differing paths below them; checking that
        // first is much cheaper than naming every child (a status write
        // leaves the whole spec untouched).
        (Some(old), Some(new)) if old == new => {}
        // A nil list or map that Go writes as null (a field without
        // omitempty in the zero value) existed already: only what is
        // inside it is new or gone, as structured-merge-diff compares.
        (Some(Value::Null), Some(new)) if !matches!(shape(new, node), Shape::Leaf) => {
            insert_all_below(new, node, path, &mut out.added);
        }
        (Some(old), Some(Value::Null)) if !matches!(shape(old, node), Shape::Leaf) => {
            insert_all_below(old, node, path, &mut out.removed);
        }
        (Some(old), Some(new)) => {
            let (old_shape, new_shape) = (shape(old, node), shape(new, node));
            if !same_kind(&old_shape, &new_shape) {
                out.modified.insert(path);
                insert_all_below(old, node, path, &mut out.removed);
                insert_all_below(new, node, path, &mut out.added);
                return;
            }
            if let Shape::Leaf = new_shape {
                if old != new {
                    out.modified.insert(path);
                }
                return;
            }
            let old_children = children(old, node, path, false).unwrap_or_default();
            let new_children = children(new, node, path, false).unwrap_or_default();
            let mut zipped: BTreeMap<String, ChildPair<'_, '_>> = BTreeMap::new();
            for child in old_children {
                zipped.insert(child.element, (Some(child.value), None, child.node));
            }
            for child in new_children {
                let entry = zipped
                    .entry(child.element)
                    .or_insert((None, None, child.node));
                entry.1 = Some(child.value);
            }
            for (element, (old_child, new_child, child_node)) in zipped {
                path.push(element);
                compare_at(old_child, new_child, child_node, path, out);
                path.pop();
            }
        }
    }
}

/// Adds every path strictly below `path` in `value` to `set`. The subtree
/// is built in place under `path`'s node: inserting each descendant by its
/// full path cloned every element of the path for every field, which made
/// a create of a large object (a 100-Node rack) quadratic in its depth.
fn insert_all_below(
    value: &Value,
    node: Option<&SchemaNode>,
    path: &mut Vec<String>,
    set: &mut FieldSet,
) {
    let below = children(value, node, path, false).unwrap_or_default();
    if below.is_empty() {
        // No node is created for a path with nothing below it.
        return;
    }
    let mut target = set;
    for element in path.iter() {
        target = target.children.entry(element.clone()).or_default();
    }
    fill_below(below, path, target);
}

fn fill_below(below: Vec<Child<'_, '_>>, path: &mut Vec<String>, target: &mut FieldSet) {
    for child in below {
        let entry = target.children.entry(child.element.clone()).or_default();
        entry.member = true;
        let grandchildren = children(child.value, child.node, path, false).unwrap_or_default();
        path.push(child.element);
        fill_below(grandchildren, path, entry);
        path.pop();
    }
}

/// The value at `path`, if the object has one.
pub fn get_at<'a>(value: &'a Value, path: &[String], types: &ListTypes) -> Option<&'a Value> {
    let mut current = value;
    let mut node = Some(types.root());
    let mut walked = Vec::new();
    for element in path {
        let child = children(current, node, &walked, false)
            .ok()?
            .into_iter()
            .find(|child| &child.element == element)?;
        current = child.value;
        node = child.node;
        walked.push(element.clone());
    }
    Some(current)
}

/// Removes the value at `path`, and any map or list that this leaves empty
/// on the way up (never the object itself). Returns whether it removed
/// anything.
pub fn remove_at(value: &mut Value, path: &[String], types: &ListTypes) -> bool {
    remove_below(value, Some(types.root()), path, &mut Vec::new())
}

fn remove_below(
    value: &mut Value,
    node: Option<&SchemaNode>,
    path: &[String],
    walked: &mut Vec<String>,
) -> bool {
    let Some((element, rest)) = path.split_first() else {
        return false;
    };
    let found = children(value, node, walked, false)
        .ok()
        .and_then(|kids| kids.into_iter().find(|c| &c.element == element))
        .map(|c| (c.index, c.node));
    let Some((index, child_node)) = found else {
        return false;
    };
    walked.push(element.clone());
    let removed = match (value, index) {
        (Value::Object(map), None) => {
            let name = element.strip_prefix("f:").unwrap_or(element);
            match map.get_mut(name) {
                Some(_) if rest.is_empty() => map.remove(name).is_some(),
                Some(child) => {
                    let removed = remove_below(child, child_node, rest, walked);
                    if removed && is_empty_container(child) {
                        map.remove(name);
                    }
                    removed
                }
                None => false,
            }
        }
        (Value::Array(items), Some(index)) if index < items.len() => {
            if rest.is_empty() {
                items.remove(index);
                true
            } else {
                let removed = remove_below(&mut items[index], child_node, rest, walked);
                if removed && is_empty_container(&items[index]) {
                    items.remove(index);
                }
                removed
            }
        }
        _ => false,
    };
    walked.pop();
    removed
}

fn is_empty_container(value: &Value) -> bool {
    match value {
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(elements: &[&str]) -> FieldPath {
        elements.iter().map(|e| (*e).to_string()).collect()
    }

    fn pod() -> ListTypes {
        ListTypes::builtin("v1", "Pod").unwrap()
    }

    #[test]
    fn fields_v1_round_trips_in_the_exact_kubernetes_form() {
        let text = r#"{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:image":{}}}}}"#;
        let parsed: Value = serde_json::from_str(text).unwrap();
        let set = FieldSet::from_fields_v1(&parsed).unwrap();
        assert!(set.contains(&path(&["f:metadata", "f:labels", "f:app"])));
        assert!(set.contains(&path(&["f:spec", "f:containers", r#"k:{"name":"c"}"#])));
        assert!(!set.contains(&path(&["f:spec", "f:containers"])));
        assert_eq!(set.to_fields_v1().to_string(), text);
    }

    #[test]
    fn fields_v1_rejects_unknown_elements_and_non_objects() {
        assert!(matches!(
            FieldSet::from_fields_v1(&json!({"x:spec": {}})),
            Err(FieldsError::BadElement { .. })
        ));
        assert!(matches!(
            FieldSet::from_fields_v1(&json!({"f:spec": 3})),
            Err(FieldsError::NotAnObject { .. })
        ));
        assert!(FieldSet::from_fields_v1(&json!({"k:[1]": {}})).is_err());
    }

    #[test]
    fn object_fields_use_keys_for_map_lists_values_for_sets_and_leaves_for_atomic_lists() {
        let object = json!({
            "metadata": {"labels": {"app": "x"}, "finalizers": ["a/b"]},
            "spec": {
                "containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}],
                "tolerations": [{"key": "k"}],
                "securityContext": {}
            }
        });
        let set = FieldSet::from_object(&object, &pod()).unwrap();
        let expected = json!({
            "f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"a/b\"": {}}},
            "f:spec": {
                "f:containers": {"k:{\"name\":\"c\"}": {
                    ".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}
                }},
                "f:tolerations": {}
            }
        });
        assert_eq!(set.to_fields_v1(), expected);
    }

    #[test]
    fn owner_references_and_selectors_are_owned_whole() {
        let object = json!({
            "metadata": {"ownerReferences": [{"uid": "1", "kind": "Job", "name": "j"}]},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "replicas": 1}
        });
        let types = ListTypes::builtin("apps/v1", "ReplicaSet").unwrap();
        let set = FieldSet::from_object(&object, &types).unwrap();
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"1\"}": {}}},
                "f:spec": {"f:replicas": {}, "f:selector": {}}
            })
        );
    }

    #[test]
    fn apply_sets_reject_missing_keys_and_duplicates() {
        let missing = json!({"spec": {"containers": [{"image": "i"}]}});
        assert!(matches!(
            FieldSet::from_object(&missing, &pod()),
            Err(FieldsError::MissingKey { ref key, .. }) if key == "name"
        ));
        let duplicate = json!({"spec": {"containers": [{"name": "c"}, {"name": "c"}]}});
        let error = FieldSet::from_object(&duplicate, &pod()).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#".spec.containers: duplicate entries for key [name="c"]"#
        );
    }

    #[test]
    fn set_algebra_keeps_members_apart_from_prefixes() {
        let mut a = FieldSet::new();
        a.insert(&path(&["f:spec", "f:a"]));
        a.insert(&path(&["f:spec", "f:b"]));
        let mut b = FieldSet::new();
        b.insert(&path(&["f:spec", "f:b"]));
        b.insert(&path(&["f:spec"]));
        assert_eq!(a.intersection(&b).paths(), vec![path(&["f:spec", "f:b"])]);
        assert_eq!(a.difference(&b).paths(), vec![path(&["f:spec", "f:a"])]);
        let union = a.union(&b);
        assert_eq!(union.paths().len(), 3);
        assert!(union.contains(&path(&["f:spec"])));
        assert!(a.difference(&a).is_empty());
        assert!(b.has_member_below(&path(&["f:spec"])));
    }

    #[test]
    fn in_place_subtract_and_absorb_equal_difference_and_union() {
        let sets: Vec<FieldSet> = [
            vec![],
            vec![vec!["f:spec"]],
            vec![vec!["f:spec", "f:a"], vec!["f:spec", "f:b"]],
            vec![
                vec!["f:spec"],
                vec!["f:spec", "f:b"],
                vec!["f:status", "f:x"],
            ],
            vec![
                vec!["f:spec", "f:a", "f:deep"],
                vec!["f:metadata", "f:labels", "f:k"],
            ],
            vec![vec!["f:spec", "f:a"], vec!["f:spec", "f:a", "f:deep"]],
        ]
        .into_iter()
        .map(|paths| {
            let mut set = FieldSet::new();
            for p in paths {
                set.insert(&path(&p));
            }
            set
        })
        .collect();
        for a in &sets {
            for b in &sets {
                let mut subtracted = a.clone();
                subtracted.subtract(b);
                assert_eq!(subtracted, a.difference(b), "{a:?} - {b:?}");
                let mut absorbed = a.clone();
                absorbed.absorb(b);
                assert_eq!(absorbed, a.union(b), "{a:?} + {b:?}");
            }
        }
    }

    #[test]
    fn paths_print_like_the_api_server() {
        assert_eq!(
            path_to_string(&path(&[
                "f:spec",
                "f:containers",
                r#"k:{"name":"c"}"#,
                "f:image"
            ])),
            r#".spec.containers[name="c"].image"#
        );
        assert_eq!(
            path_to_string(&path(&[
                "f:spec",
                "f:ports",
                r#"k:{"port":80,"protocol":"TCP"}"#
            ])),
            r#".spec.ports[port=80,protocol="TCP"]"#
        );
        assert_eq!(
            path_to_string(&path(&["f:metadata", "f:finalizers", r#"v:"x""#])),
            r#".metadata.finalizers[="x"]"#
        );
        assert_eq!(path_to_string(&path(&["f:a", "i:3"])), ".a[3]");
    }

    #[test]
    fn compare_lists_new_maps_as_nodes_and_changed_scalars_as_modified() {
        let old = json!({"metadata": {"name": "p"}, "spec": {"replicas": 1, "gone": true}});
        let new =
            json!({"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"replicas": 2}});
        let cmp = compare(&old, &new, &ListTypes::object_meta_only());
        assert_eq!(
            cmp.added.to_fields_v1(),
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
        );
        assert_eq!(
            cmp.modified.to_fields_v1(),
            json!({"f:spec": {"f:replicas": {}}})
        );
        assert_eq!(
            cmp.removed.to_fields_v1(),
            json!({"f:spec": {"f:gone": {}}})
        );
    }

    #[test]
    fn get_and_remove_find_list_items_by_identity_and_drop_emptied_parents() {
        let mut object = json!({"spec": {"containers": [
            {"name": "a", "image": "x"},
            {"name": "b", "image": "y"}
        ]}});
        let types = pod();
        let image_b = path(&["f:spec", "f:containers", r#"k:{"name":"b"}"#, "f:image"]);
        assert_eq!(get_at(&object, &image_b, &types), Some(&json!("y")));
        assert!(remove_at(&mut object, &image_b, &types));
        assert_eq!(object["spec"]["containers"][1], json!({"name": "b"}));
        let element_a = path(&["f:spec", "f:containers", r#"k:{"name":"a"}"#]);
        assert!(remove_at(&mut object, &element_a, &types));
        let element_b = path(&["f:spec", "f:containers", r#"k:{"name":"b"}"#]);
        assert!(remove_at(&mut object, &element_b, &types));
        assert_eq!(object, json!({}));
        assert!(!remove_at(&mut object, &element_b, &types));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn element() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a-c]".prop_map(|f| format!("f:{f}")),
                "[a-c]".prop_map(|n| format!("k:{{\"name\":\"{n}\"}}")),
                "[a-c]".prop_map(|v| format!("v:\"{v}\"")),
                (0u8..3).prop_map(|i| format!("v:{i}")),
            ]
        }

        fn field_set() -> impl Strategy<Value = FieldSet> {
            prop::collection::vec(prop::collection::vec(element(), 1..4), 0..8).prop_map(|paths| {
                let mut set = FieldSet::new();
                for path in &paths {
                    set.insert(path);
                }
                set
            })
        }

        proptest! {
            #[test]
            fn any_field_set_survives_the_fields_v1_round_trip(set in field_set()) {
                let json = set.to_fields_v1();
                prop_assert_eq!(FieldSet::from_fields_v1(&json).unwrap(), set);
            }

            #[test]
            fn set_operations_agree_with_their_member_paths(a in field_set(), b in field_set()) {
                let in_a = |p: &FieldPath| a.contains(p);
                let in_b = |p: &FieldPath| b.contains(p);
                for path in a.union(&b).paths() {
                    prop_assert!(in_a(&path) || in_b(&path));
                }
                for path in a.paths().iter().chain(b.paths().iter()) {
                    prop_assert!(a.union(&b).contains(path));
                    prop_assert_eq!(a.intersection(&b).contains(path), in_a(path) && in_b(path));
                    prop_assert_eq!(a.difference(&b).contains(path), in_a(path) && !in_b(path));
                }
                prop_assert!(a.difference(&b).intersection(&b).is_empty());
            }
        }
    }
}
