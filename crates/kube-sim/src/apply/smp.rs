//! Strategic merge patch (`application/strategic-merge-patch+json`) for
//! built-in kinds.
//!
//! Maps merge as in a JSON merge patch (`null` deletes). Lists with a merge
//! key merge element by element, lists of scalars with a merge strategy
//! merge as sets, and every other list is replaced. The directives the
//! Kubernetes clients send are honoured: `$patch` (`replace`, `delete`,
//! `merge`) on maps and list elements, `$retainKeys`,
//! `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`.
//! Anything else starting with `$` is rejected.

use serde_json::{Map, Value};

use super::list_types::{ListTypes, SchemaNode, SmpListStrategy, child_node, item_node};

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Why a strategic merge patch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmpError {
    /// 415: the kind has no Go struct tags to merge by (custom resources).
    #[error(
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )]
    UnsupportedMediaType,
    /// 400: the patch is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// 422: the patch is well formed but contradicts itself.
    #[error("{0}")]
    Invalid(String),
}

impl SmpError {
    pub fn code(&self) -> u16 {
        match self {
            SmpError::UnsupportedMediaType => 415,
            SmpError::BadRequest(_) => 400,
            SmpError::Invalid(_) => 422,
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            SmpError::UnsupportedMediaType => "UnsupportedMediaType",
            SmpError::BadRequest(_) => "BadRequest",
            SmpError::Invalid(_) => "Invalid",
        }
    }
}

/// Applies a strategic merge `patch` to `original` under the kind's merge
/// keys. Custom resources (whose [`ListTypes`] do not support strategic
/// merge) get [`SmpError::UnsupportedMediaType`], as from the real server.
pub fn strategic_merge(
    original: &Value,
    patch: &Value,
    types: &ListTypes,
) -> Result<Value, SmpError> {
    if !types.supports_strategic_merge() {
        return Err(SmpError::UnsupportedMediaType);
    }
    let Value::Object(patch) = patch else {
        return Err(SmpError::BadRequest(format!(
            "a strategic merge patch must be a JSON object, not {}",
            crate::object::json_kind(patch)
        )));
    };
    let merged = merge_map(original.as_object(), patch, Some(types.root()), "")?;
    Ok(Value::Object(merged.unwrap_or_default()))
}

fn field_path(parent: &str, field: &str) -> String {
    if parent.is_empty() {
        field.to_string()
    } else {
        format!("{parent}.{field}")
    }
}

/// Merges `patch` into `original`; `None` means the patch deleted the map.
fn merge_map(
    original: Option<&Map<String, Value>>,
    patch: &Map<String, Value>,
    node: Option<&SchemaNode>,
    path: &str,
) -> Result<Option<Map<String, Value>>, SmpError> {
    match patch.get(PATCH_DIRECTIVE) {
        None => {}
        Some(Value::String(kind)) if kind == "replace" => {
            return Ok(Some(
                patch
                    .iter()
                    .filter(|(key, _)| !key.starts_with('$'))
                    .map(|(key, value)| (key.clone(), value.clone()))
                    .collect(),
            ));
        }
        Some(Value::String(kind)) if kind == "delete" => return Ok(None),
        Some(Value::String(kind)) if kind == "merge" => {}
        Some(other) => return Err(unknown_patch_type(other, path)),
    }
    for key in patch.keys().filter(|key| key.starts_with('$')) {
        let known = key == PATCH_DIRECTIVE
            || key == RETAIN_KEYS
            || key.starts_with(SET_ELEMENT_ORDER)
            || key.starts_with(DELETE_FROM_PRIMITIVE_LIST);
        if !known {
            return Err(SmpError::BadRequest(format!(
                "{}: unknown strategic merge directive {key:?}",
                display_path(path)
            )));
        }
    }

    let mut result = original.cloned().unwrap_or_default();
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        retain_keys(&mut result, retain, patch, path)?;
    }
    for (key, doomed) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            delete_from_primitive_list(&mut result, field, doomed, path)?;
        }
    }
    for (key, patch_value) in patch.iter().filter(|(key, _)| !key.starts_with('$')) {
        let child = child_node(node, key);
        let child_path = field_path(path, key);
        match patch_value {
            Value::Null => {
                result.remove(key);
            }
            Value::Object(patch_map) => {
                let original_map = result.get(key).and_then(Value::as_object);
                match merge_map(original_map, patch_map, child, &child_path)? {
                    Some(merged) => {
                        result.insert(key.clone(), Value::Object(merged));
                    }
                    None => {
                        result.remove(key);
                    }
                }
            }
            Value::Array(patch_items) => {
                let original_items = result
                    .get(key)
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice);
                let merged = merge_list(original_items, patch_items, child, &child_path)?;
                result.insert(key.clone(), Value::Array(merged));
            }
            scalar => {
                result.insert(key.clone(), scalar.clone());
            }
        }
    }
    for (key, order) in patch {
        if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
            let server_order = original
                .and_then(|o| o.get(field))
                .and_then(Value::as_array)
                .map_or(&[][..], Vec::as_slice);
            let field_path = field_path(path, field);
            if let Some(Value::Array(current)) = result.get(field) {
                let ordered = set_element_order(
                    current,
                    order,
                    server_order,
                    child_node(node, field),
                    &field_path,
                )?;
                result.insert(field.to_string(), Value::Array(ordered));
            }
        }
    }
    Ok(Some(result))
}

fn display_path(path: &str) -> &str {
    if path.is_empty() { "the object" } else { path }
}

fn unknown_patch_type(value: &Value, path: &str) -> SmpError {
    SmpError::BadRequest(format!(
        "{}: unknown $patch value {value}; expected \"replace\", \"delete\" or \"merge\"",
        display_path(path)
    ))
}

/// `$retainKeys`: after the merge only the listed fields remain, so a
/// one-of (such as a volume source) can switch member. Every field the
/// patch sets must be listed.
fn retain_keys(
    result: &mut Map<String, Value>,
    retain: &Value,
    patch: &Map<String, Value>,
    path: &str,
) -> Result<(), SmpError> {
    let keys: Vec<&str> = retain
        .as_array()
        .and_then(|items| items.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
        .ok_or_else(|| {
            SmpError::BadRequest(format!(
                "{}: invalid patch format of retainKeys: $retainKeys must be a list of field names",
                display_path(path)
            ))
        })?;
    if let Some(unlisted) = patch
        .keys()
        .find(|key| !key.starts_with('$') && !keys.contains(&key.as_str()))
    {
        return Err(SmpError::Invalid(format!(
            "{}: patch content doesn't match retainKeys list: {unlisted:?} is not in $retainKeys",
            display_path(path)
        )));
    }
    result.retain(|key, _| keys.contains(&key.as_str()));
    Ok(())
}

fn delete_from_primitive_list(
    result: &mut Map<String, Value>,
    field: &str,
    doomed: &Value,
    path: &str,
) -> Result<(), SmpError> {
    let Value::Array(doomed) = doomed else {
        return Err(SmpError::BadRequest(format!(
            "{}: invalid patch format of primitive list: $deleteFromPrimitiveList/{field} must be a list",
            display_path(path)
        )));
    };
    if let Some(Value::Array(items)) = result.get_mut(field) {
        items.retain(|item| !doomed.contains(item));
        // Built-in lists are omitted when empty.
        if items.is_empty() {
            result.remove(field);
        }
    }
    Ok(())
}

fn merge_list(
    original: &[Value],
    patch: &[Value],
    node: Option<&SchemaNode>,
    path: &str,
) -> Result<Vec<Value>, SmpError> {
    match node.and_then(SchemaNode::smp_list) {
        None => {
            let has_directive = patch.iter().any(|item| {
                item.as_object()
                    .is_some_and(|m| m.contains_key(PATCH_DIRECTIVE))
            });
            if has_directive {
                return Err(SmpError::BadRequest(format!(
                    "{path}: $patch directives need a list with a merge key; {path} is replaced whole"
                )));
            }
            Ok(patch.to_vec())
        }
        Some(SmpListStrategy::MergePrimitives) => {
            if let Some(item) = patch
                .iter()
                .find(|item| item.is_object() || item.is_array())
            {
                return Err(SmpError::BadRequest(format!(
                    "{path}: invalid patch format of primitive list: {} in a list of scalars",
                    crate::object::json_kind(item)
                )));
            }
            let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
            for item in original.iter().chain(patch) {
                if !merged.contains(item) {
                    merged.push(item.clone());
                }
            }
            Ok(merged)
        }
        Some(SmpListStrategy::MergeByKey(key)) => {
            merge_keyed_list(original, patch, key, item_node(node), path)
        }
    }
}

fn merge_keyed_list(
    original: &[Value],
    patch: &[Value],
    key: &str,
    items_node: Option<&SchemaNode>,
    path: &str,
) -> Result<Vec<Value>, SmpError> {
    let missing_key = |element: &Map<String, Value>| {
        SmpError::BadRequest(format!(
            "{path}: map {} does not contain declared merge key: {key}",
            Value::Object(element.clone())
        ))
    };
    let mut replace_whole = false;
    let mut deleted: Vec<&Value> = Vec::new();
    let mut elements: Vec<&Map<String, Value>> = Vec::new();
    for item in patch {
        match item {
            Value::Object(element) => match element.get(PATCH_DIRECTIVE) {
                None => elements.push(element),
                Some(Value::String(kind)) if kind == "merge" => elements.push(element),
                Some(Value::String(kind)) if kind == "replace" => replace_whole = true,
                Some(Value::String(kind)) if kind == "delete" => {
                    deleted.push(element.get(key).ok_or_else(|| missing_key(element))?);
                }
                Some(other) => return Err(unknown_patch_type(other, path)),
            },
            Value::Array(_) => {
                return Err(SmpError::Invalid(format!(
                    "{path}: lists of lists are not supported"
                )));
            }
            scalar => {
                return Err(SmpError::BadRequest(format!(
                    "{path}: expected a map in a list merged by {key}, got {scalar}"
                )));
            }
        }
    }
    if replace_whole {
        let mut replaced = Vec::with_capacity(elements.len());
        for element in elements {
            if let Some(element) = merge_map(None, element, items_node, path)? {
                replaced.push(Value::Object(element));
            }
        }
        return Ok(replaced);
    }
    let mut merged: Vec<Value> = original
        .iter()
        .filter(|item| !item.get(key).is_some_and(|k| deleted.contains(&k)))
        .cloned()
        .collect();
    for element in elements {
        let identity = element.get(key).ok_or_else(|| missing_key(element))?;
        let position = merged
            .iter()
            .position(|item| item.get(key) == Some(identity));
        let existing = position.and_then(|index| merged[index].as_object());
        let outcome = merge_map(existing, element, items_node, path)?;
        match (position, outcome) {
            (Some(index), Some(element)) => merged[index] = Value::Object(element),
            (Some(index), None) => {
                merged.remove(index);
            }
            (None, Some(element)) => merged.push(Value::Object(element)),
            (None, None) => {}
        }
    }
    Ok(merged)
}

/// `$setElementOrder/<list>`: the listed elements take the listed order;
/// elements the order does not mention keep their place relative to the
/// live list, coming before a listed element only when they came before
/// it on the server.
fn set_element_order(
    current: &[Value],
    order: &Value,
    server_order: &[Value],
    node: Option<&SchemaNode>,
    path: &str,
) -> Result<Vec<Value>, SmpError> {
    let bad_format = |why: &str| {
        SmpError::BadRequest(format!(
            "{path}: invalid patch format of setElementOrder list: {why}"
        ))
    };
    let Value::Array(order) = order else {
        return Err(bad_format("it must be a list"));
    };
    // The identity of an element: its merge key value, or itself for scalars.
    let merge_key = match node.and_then(SchemaNode::smp_list) {
        Some(SmpListStrategy::MergeByKey(key)) => Some(key.as_str()),
        Some(SmpListStrategy::MergePrimitives) => None,
        None => return Err(bad_format("the list has no merge strategy")),
    };
    let identity = |item: &Value| -> Option<Value> {
        match merge_key {
            Some(key) => item.get(key).cloned(),
            None => Some(item.clone()),
        }
    };
    let mut wanted = Vec::with_capacity(order.len());
    for entry in order {
        let id = match merge_key {
            Some(key) => entry.as_object().and_then(|m| m.get(key)).cloned(),
            None => (!entry.is_object() && !entry.is_array()).then(|| entry.clone()),
        };
        wanted.push(
            id.ok_or_else(|| bad_format(&format!("entry {entry} does not name an element")))?,
        );
    }
    let server_ids: Vec<Option<Value>> = server_order.iter().map(identity).collect();
    let rank = |ids: &[Value], item: &Value| {
        identity(item).and_then(|id| ids.iter().position(|w| *w == id))
    };
    let server_rank = |item: &Value| {
        identity(item).and_then(|id| server_ids.iter().position(|s| s.as_ref() == Some(&id)))
    };

    let (mut listed, mut unlisted): (Vec<&Value>, Vec<&Value>) = current
        .iter()
        .partition(|item| rank(&wanted, item).is_some());
    listed.sort_by_key(|item| rank(&wanted, item));
    // Stable: elements unknown to the server keep their relative order, last.
    unlisted.sort_by_key(|item| server_rank(item).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(current.len());
    let (mut u, mut l) = (0, 0);
    while u < unlisted.len() || l < listed.len() {
        let take_unlisted = match (unlisted.get(u), listed.get(l)) {
            (Some(_), None) => true,
            (None, _) => false,
            (Some(server_item), Some(listed_item)) => {
                matches!((server_rank(server_item), server_rank(listed_item)), (Some(a), Some(b)) if a < b)
            }
        };
        if take_unlisted {
            out.push(unlisted[u].clone());
            u += 1;
        } else {
            out.push(listed[l].clone());
            l += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> ListTypes {
        ListTypes::builtin("v1", "Pod").unwrap()
    }

    fn pod_with(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    fn names(list: &Value) -> Vec<&str> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|item| item["name"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn containers_merge_by_name_and_new_ones_are_appended() {
        let original = pod_with(json!({"containers": [
            {"name": "app", "image": "app:1", "args": ["a"]},
            {"name": "proxy", "image": "proxy:1"}
        ]}));
        let patch = json!({"spec": {"containers": [
            {"name": "app", "image": "app:2"},
            {"name": "debug", "image": "busybox"}
        ]}});
        let out = strategic_merge(&original, &patch, &pod()).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([
                {"name": "app", "image": "app:2", "args": ["a"]},
                {"name": "proxy", "image": "proxy:1"},
                {"name": "debug", "image": "busybox"}
            ])
        );
    }

    #[test]
    fn env_merges_by_name_and_ports_by_container_port() {
        let original = pod_with(json!({"containers": [{
            "name": "app",
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
            "ports": [{"containerPort": 80, "name": "http"}]
        }]}));
        let patch = json!({"spec": {"containers": [{
            "name": "app",
            "env": [{"name": "B", "value": "3"}, {"name": "A", "$patch": "delete"}],
            "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]
        }]}});
        let out = strategic_merge(&original, &patch, &pod()).unwrap();
        let container = &out["spec"]["containers"][0];
        assert_eq!(container["env"], json!([{"name": "B", "value": "3"}]));
        assert_eq!(
            container["ports"],
            json!([{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}])
        );
    }

    #[test]
    fn status_conditions_merge_by_type() {
        let original = json!({"status": {"conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": "True"}
        ]}});
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Up"}]}});
        let out = strategic_merge(&original, &patch, &pod()).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([
                {"type": "Ready", "status": "True", "reason": "Up"},
                {"type": "PodScheduled", "status": "True"}
            ])
        );
    }

    #[test]
    fn owner_references_merge_by_uid_and_finalizers_as_a_set() {
        let types = ListTypes::builtin("coordination.k8s.io/v1", "Lease").unwrap();
        let original = json!({"metadata": {
            "ownerReferences": [{"uid": "1", "name": "a", "kind": "Job"}],
            "finalizers": ["x/one", "x/two"]
        }});
        let patch = json!({"metadata": {
            "ownerReferences": [{"uid": "1", "controller": true}, {"uid": "2", "name": "b", "kind": "Job"}],
            "finalizers": ["x/two", "x/three"]
        }});
        let out = strategic_merge(&original, &patch, &types).unwrap();
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([
                {"uid": "1", "name": "a", "kind": "Job", "controller": true},
                {"uid": "2", "name": "b", "kind": "Job"}
            ])
        );
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["x/one", "x/two", "x/three"])
        );
    }

    #[test]
    fn delete_from_primitive_list_removes_values_and_an_emptied_list() {
        let types = pod();
        let original = json!({"metadata": {"finalizers": ["a", "b"]}});
        let out = strategic_merge(
            &original,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
            &types,
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
        let out = strategic_merge(
            &out,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["b"]}}),
            &types,
        )
        .unwrap();
        assert_eq!(out["metadata"], json!({}));
        let error = strategic_merge(
            &original,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
            &types,
        )
        .unwrap_err();
        assert_eq!(error.code(), 400);
    }

    #[test]
    fn tolerations_have_no_merge_key_and_are_replaced_whole() {
        let original = pod_with(json!({"tolerations": [{"key": "a"}, {"key": "b"}]}));
        let patch = json!({"spec": {"tolerations": [{"key": "c"}]}});
        let out = strategic_merge(&original, &patch, &pod()).unwrap();
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "c"}]));
        let bad = json!({"spec": {"tolerations": [{"key": "a", "$patch": "delete"}]}});
        assert_eq!(
            strategic_merge(&original, &bad, &pod()).unwrap_err().code(),
            400
        );
    }

    #[test]
    fn maps_merge_and_null_deletes_a_field() {
        let types = ListTypes::builtin("coordination.k8s.io/v1", "Lease").unwrap();
        let original = json!({"spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}});
        let patch = json!({"spec": {"holderIdentity": null, "leaseTransitions": 2}});
        let out = strategic_merge(&original, &patch, &types).unwrap();
        assert_eq!(
            out["spec"],
            json!({"leaseDurationSeconds": 15, "leaseTransitions": 2})
        );
    }

    #[test]
    fn patch_replace_on_a_map_and_on_a_list_replaces_them() {
        let original = json!({
            "metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"containers": [{"name": "x"}, {"name": "y"}]}
        });
        let patch = json!({
            "metadata": {"labels": {"$patch": "replace", "c": "3"}},
            "spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "i"}]}
        });
        let out = strategic_merge(&original, &patch, &pod()).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"c": "3"}));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "z", "image": "i"}])
        );
    }

    #[test]
    fn patch_delete_on_a_map_removes_it_and_on_an_element_removes_that_element() {
        let original = pod_with(json!({
            "securityContext": {"runAsUser": 1},
            "containers": [{"name": "x"}, {"name": "y"}]
        }));
        let patch = json!({"spec": {
            "securityContext": {"$patch": "delete"},
            "containers": [{"name": "x", "$patch": "delete"}]
        }});
        let out = strategic_merge(&original, &patch, &pod()).unwrap();
        assert!(out["spec"].get("securityContext").is_none());
        assert_eq!(names(&out["spec"]["containers"]), ["y"]);
        let no_key = json!({"spec": {"containers": [{"$patch": "delete"}]}});
        let error = strategic_merge(&original, &no_key, &pod()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("does not contain declared merge key: name"),
            "{error}"
        );
        let unknown = json!({"spec": {"securityContext": {"$patch": "explode"}}});
        assert_eq!(
            strategic_merge(&original, &unknown, &pod())
                .unwrap_err()
                .code(),
            400
        );
    }

    #[test]
    fn set_element_order_reorders_listed_elements_around_server_only_ones() {
        let original = pod_with(json!({"containers": [
            {"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}
        ]}));
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "d"}, {"name": "b"}, {"name": "e"}],
            "containers": [{"name": "e", "image": "new"}]
        }});
        let out = strategic_merge(&original, &patch, &pod()).unwrap();
        // a and c are not listed. Each goes before the next listed element
        // if it came before that element on the server: a and c both came
        // before d. The new e is listed last.
        assert_eq!(names(&out["spec"]["containers"]), ["a", "c", "d", "b", "e"]);
        let keep_b_first =
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}});
        let out = strategic_merge(&original, &keep_b_first, &pod()).unwrap();
        assert_eq!(names(&out["spec"]["containers"]), ["b", "a", "c", "d"]);

        let finalizers = json!({"metadata": {"finalizers": ["x", "y"]}});
        let reorder = json!({"metadata": {"$setElementOrder/finalizers": ["y", "x"]}});
        let out = strategic_merge(&finalizers, &reorder, &pod()).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["y", "x"]));

        let bad = json!({"spec": {"$setElementOrder/containers": [{"image": "no-name"}]}});
        assert_eq!(
            strategic_merge(&original, &bad, &pod()).unwrap_err().code(),
            400
        );
    }

    #[test]
    fn retain_keys_drops_fields_not_listed_so_a_volume_source_can_switch() {
        let original = pod_with(json!({"volumes": [{"name": "data", "emptyDir": {}}]}));
        let patch = json!({"spec": {"volumes": [{
            "$retainKeys": ["name", "hostPath"],
            "name": "data",
            "hostPath": {"path": "/srv"}
        }]}});
        let out = strategic_merge(&original, &patch, &pod()).unwrap();
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "data", "hostPath": {"path": "/srv"}}])
        );

        let mismatch = json!({"spec": {"volumes": [{"$retainKeys": ["name"], "name": "data", "hostPath": {}}]}});
        let error = strategic_merge(&original, &mismatch, &pod()).unwrap_err();
        assert_eq!(error.code(), 422);
        assert!(
            error.to_string().contains("doesn't match retainKeys"),
            "{error}"
        );
    }

    #[test]
    fn malformed_patches_are_rejected_with_a_clear_error() {
        let original = pod_with(json!({"containers": [{"name": "x"}]}));
        let cases = [
            (json!([1]), 400),
            (json!({"spec": {"$weird": 1}}), 400),
            (json!({"spec": {"containers": [["nested"]]}}), 422),
            (json!({"spec": {"containers": ["x"]}}), 400),
            (json!({"spec": {"containers": [{"image": "no-name"}]}}), 400),
            (json!({"metadata": {"finalizers": [{"a": 1}]}}), 400),
        ];
        for (patch, code) in cases {
            let error = strategic_merge(&original, &patch, &pod()).unwrap_err();
            assert_eq!(error.code(), code, "{patch}: {error}");
        }
    }

    #[test]
    fn custom_resources_get_unsupported_media_type() {
        let crd = ListTypes::from_crd_schema(&json!({"type": "object"}));
        let error = strategic_merge(&json!({}), &json!({}), &crd).unwrap_err();
        assert_eq!(
            (error.code(), error.reason()),
            (415, "UnsupportedMediaType")
        );
    }

    #[test]
    fn patch_delete_at_the_root_leaves_an_empty_object() {
        let out =
            strategic_merge(&pod_with(json!({})), &json!({"$patch": "delete"}), &pod()).unwrap();
        assert_eq!(out, json!({}));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// RFC 7386 JSON merge patch, the behaviour strategic merge must
        /// match wherever no list has a merge key.
        fn merge_patch(target: &Value, patch: &Value) -> Value {
            let Value::Object(patch) = patch else {
                return patch.clone();
            };
            let mut out = target.as_object().cloned().unwrap_or_default();
            for (key, value) in patch {
                if value.is_null() {
                    out.remove(key);
                } else {
                    let merged = merge_patch(out.get(key).unwrap_or(&Value::Null), value);
                    out.insert(key.clone(), merged);
                }
            }
            Value::Object(out)
        }

        fn object(with_nulls: bool) -> impl Strategy<Value = Value> {
            let plain = prop_oneof![
                any::<bool>().prop_map(Value::from),
                (-3i64..3).prop_map(Value::from),
                "[a-z]{0,2}".prop_map(Value::from),
                prop::collection::vec((0i64..3).prop_map(Value::from), 0..3).prop_map(Value::from),
            ];
            // Nulls only in patches, where they mean "delete".
            let scalar = if with_nulls {
                prop_oneof![plain, Just(Value::Null)].boxed()
            } else {
                plain.boxed()
            };
            let value = scalar.prop_recursive(3, 12, 3, |inner| {
                prop::collection::btree_map("[a-d]", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect()))
            });
            prop::collection::btree_map("[a-d]", value, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
        }

        proptest! {
            #[test]
            fn without_merge_keys_strategic_merge_is_a_json_merge_patch(
                original in object(false),
                patch in object(true),
            ) {
                let types = ListTypes::builtin("v1", "ConfigMap").unwrap();
                let out = strategic_merge(&original, &patch, &types).unwrap();
                prop_assert_eq!(out, merge_patch(&original, &patch));
            }
        }
    }
}
