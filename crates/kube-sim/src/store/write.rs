//! Create, update, patch and delete, with the server-side rules of
//! kube-apiserver: server-owned metadata, optimistic concurrency, generation,
//! the status subresource, finalizers and graceful namespace teardown.

use std::sync::Arc;

use base64::Engine;
use serde_json::{Map, Value, json};

use super::{ChangeType, State, Store};
use crate::crd;
use crate::error::ApiError;
use crate::object::{StoredObject, finalizers, meta_str, metadata_mut, now_rfc3339};
use crate::patch::{self, PatchKind};
use crate::resources::{ResourceType, StatusOnCreate};
use crate::validate;

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// The parts of `meta.k8s.io/v1 DeleteOptions` kube-sim honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    pub fn from_body(body: &Value) -> Self {
        let pre = |k: &str| {
            body.pointer(&format!("/preconditions/{k}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        Self {
            precondition_uid: pre("uid"),
            precondition_rv: pre("resourceVersion"),
            dry_run: body
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|d| !d.is_empty()),
        }
    }
}

const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];
const GENERATE_NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn random_suffix() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..5)
        .map(|_| GENERATE_NAME_ALPHABET[rng.random_range(0..GENERATE_NAME_ALPHABET.len())] as char)
        .collect()
}

impl Store {
    pub fn create(
        &self,
        rt: &ResourceType,
        version: &str,
        namespace: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let result = self
            .state
            .lock()
            .create(rt, version, namespace, body, dry_run);
        self.count_write(&result);
        result
    }

    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &self,
        rt: &ResourceType,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        sub: Subresource,
        dry_run: bool,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let result = self
            .state
            .lock()
            .update(rt, version, namespace, name, body, sub, dry_run);
        self.count_write(&result);
        result
    }

    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        rt: &ResourceType,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &[u8],
        sub: Subresource,
        dry_run: bool,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let mut state = self.state.lock();
        let current = state.existing(rt, namespace, name)?;
        let mut doc = current.value();
        if version != rt.storage_version {
            doc["apiVersion"] = Value::String(rt.api_version(version));
        }
        match kind {
            PatchKind::Merge => patch::apply_merge_patch(&mut doc, body)?,
            PatchKind::Json => patch::apply_json_patch(&mut doc, body)?,
            PatchKind::Strategic if rt.custom => {
                return Err(ApiError::unsupported_media_type(
                    patch::STRATEGIC,
                    &[patch::JSON, patch::MERGE],
                ));
            }
            PatchKind::Strategic | PatchKind::Apply => {
                return Err(ApiError::unsupported_media_type(
                    if kind == PatchKind::Apply {
                        patch::APPLY
                    } else {
                        patch::STRATEGIC
                    },
                    &[patch::JSON, patch::MERGE],
                ));
            }
        }
        let result = state.update(rt, version, namespace, name, doc, sub, dry_run);
        drop(state);
        self.count_write(&result);
        result
    }

    pub fn delete(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let result = self.state.lock().delete(rt, namespace, name, opts);
        self.count_write(&result);
        result
    }

    fn count_write<T>(&self, result: &Result<T, ApiError>) {
        if result.is_ok() {
            self.stats
                .writes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Sets `apiVersion` and `kind`, refusing a body that names another type.
fn check_type(rt: &ResourceType, version: &str, value: &mut Value) -> Result<(), ApiError> {
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {})",
            rt.kind
        )));
    };
    let expected_version = rt.api_version(version);
    if let Some(given) = obj.get("apiVersion").and_then(Value::as_str)
        && given != expected_version
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({given}) does not match the expected API version ({expected_version})"
        )));
    }
    if let Some(given) = obj.get("kind").and_then(Value::as_str)
        && given != rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({given}) does not match the expected kind ({})",
            rt.kind
        )));
    }
    // Stored in the storage version; reads convert back.
    obj.insert(
        "apiVersion".into(),
        Value::String(rt.api_version(&rt.storage_version)),
    );
    obj.insert("kind".into(), Value::String(rt.kind.clone()));
    Ok(())
}

/// Makes the body's namespace agree with the URL, as the real server demands.
fn check_namespace(
    rt: &ResourceType,
    namespace: Option<&str>,
    value: &mut Value,
) -> Result<(), ApiError> {
    let meta =
        metadata_mut(value).ok_or_else(|| ApiError::bad_request("object has no metadata"))?;
    if !rt.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    let url_ns = namespace.unwrap_or_default();
    match meta.get("namespace").and_then(Value::as_str) {
        Some(body_ns) if !body_ns.is_empty() && body_ns != url_ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            meta.insert("namespace".into(), Value::String(url_ns.to_string()));
            Ok(())
        }
    }
}

/// Built-in kinds decode into their typed form and back, which rejects
/// ill-typed fields and drops unknown ones exactly like the real server.
fn normalize(rt: &ResourceType, value: Value) -> Result<Value, ApiError> {
    match rt.normalize {
        Some(f) => f(value).map_err(|e| {
            ApiError::bad_request(format!(
                "error decoding {} {}: {e}",
                rt.group_resource().resource,
                rt.kind
            ))
        }),
        None => Ok(value),
    }
}

/// Secrets accept `stringData` as a write-only convenience folded into `data`.
fn fold_string_data(rt: &ResourceType, value: &mut Value) {
    if rt.kind != "Secret" || !rt.group.is_empty() {
        return;
    }
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    let Some(Value::Object(string_data)) = obj.remove("stringData") else {
        return;
    };
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(data) = data.as_object_mut() {
        for (k, v) in string_data {
            if let Some(text) = v.as_str() {
                let encoded = base64::engine::general_purpose::STANDARD.encode(text);
                data.insert(k, Value::String(encoded));
            }
        }
    }
}

fn check_valid(rt: &ResourceType, value: &Value) -> Result<(), ApiError> {
    let mut causes = validate::metadata(rt, value);
    causes.extend(validate::kind_specific(rt, value));
    if rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io" {
        causes.extend(crd::validate(value));
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = meta_str(value, "name").unwrap_or_default();
    Err(ApiError::invalid(&rt.group, &rt.kind, name, causes))
}

/// True when two objects differ outside `metadata` (and `status`, when the
/// status subresource owns it): the changes that bump `generation`.
fn spec_changed(old: &Value, new: &Value, status_is_separate: bool) -> bool {
    let skip = |k: &str| k == "metadata" || (status_is_separate && k == "status");
    let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let changed_or_added = new
        .iter()
        .filter(|(k, _)| !skip(k))
        .any(|(k, v)| old.get(k) != Some(v));
    let removed = old
        .keys()
        .filter(|k| !skip(k))
        .any(|k| !new.contains_key(k));
    changed_or_added || removed
}

fn is_crd_type(rt: &ResourceType) -> bool {
    rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io"
}

fn is_namespace_type(rt: &ResourceType) -> bool {
    rt.kind == "Namespace" && rt.group.is_empty()
}

impl State {
    pub(super) fn existing(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let key = (namespace.unwrap_or_default().to_string(), name.to_string());
        self.resource(rt)?
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    fn namespace_object(&self, name: &str) -> Option<Arc<StoredObject>> {
        self.resources
            .iter()
            .find(|(gr, _)| gr.group.is_empty() && gr.resource == "namespaces")
            .and_then(|(_, r)| r.objects.get(&(String::new(), name.to_string())))
            .cloned()
    }

    pub(super) fn create(
        &mut self,
        rt: &ResourceType,
        version: &str,
        namespace: Option<&str>,
        mut value: Value,
        dry_run: bool,
    ) -> Result<Arc<StoredObject>, ApiError> {
        check_type(rt, version, &mut value)?;
        check_namespace(rt, namespace, &mut value)?;
        fold_string_data(rt, &mut value);
        let generated_prefix = {
            let meta =
                metadata_mut(&mut value).ok_or_else(|| ApiError::bad_request("no metadata"))?;
            if meta
                .get("resourceVersion")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                return Err(ApiError::bad_request(
                    "resourceVersion should not be set on objects to be created",
                ));
            }
            for server_owned in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "selfLink",
            ] {
                meta.remove(server_owned);
            }
            let has_name = meta
                .get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            let prefix = meta
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|p| !p.is_empty() && !has_name)
                .map(str::to_string);
            if let Some(prefix) = &prefix {
                meta.insert(
                    "name".into(),
                    Value::String(format!("{prefix}{}", random_suffix())),
                );
            }
            meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
            meta.insert(
                "uid".into(),
                Value::String(uuid::Uuid::new_v4().to_string()),
            );
            meta.insert("generation".into(), json!(1));
            prefix
        };
        match rt.status_on_create {
            StatusOnCreate::Keep => {}
            StatusOnCreate::Drop => {
                if let Some(obj) = value.as_object_mut() {
                    obj.remove("status");
                }
            }
            StatusOnCreate::Reset(initial) => {
                value["status"] = serde_json::from_str(initial).unwrap_or(Value::Null);
            }
        }
        let mut value = normalize(rt, value)?;
        check_valid(rt, &value)?;

        if rt.namespaced {
            let ns = namespace.unwrap_or_default();
            match self.namespace_object(ns) {
                None => return Err(ApiError::not_found("", "namespaces", ns)),
                Some(ns_obj) if ns_obj.deleting => {
                    return Err(ApiError::forbidden(format!(
                        "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                        rt.plural,
                        meta_str(&value, "name").unwrap_or_default()
                    )));
                }
                Some(_) => {}
            }
        }
        let ns = namespace
            .filter(|_| rt.namespaced)
            .unwrap_or_default()
            .to_string();
        let store = self.resource(rt)?;
        let mut name = meta_str(&value, "name").unwrap_or_default().to_string();
        let mut attempts = 0;
        while store.objects.contains_key(&(ns.clone(), name.clone())) {
            match &generated_prefix {
                Some(prefix) if attempts < 8 => {
                    attempts += 1;
                    name = format!("{prefix}{}", random_suffix());
                }
                _ => return Err(ApiError::already_exists(&rt.group, &rt.plural, &name)),
            }
        }
        if let Some(meta) = metadata_mut(&mut value) {
            meta.insert("name".into(), Value::String(name));
        }
        if is_crd_type(rt) {
            self.prepare_crd(&mut value)?;
        }
        if dry_run {
            return StoredObject::from_value(rt, &value)
                .map(Arc::new)
                .map_err(|e| ApiError::internal(e.to_string()));
        }
        let stored = self.commit(rt, value, ChangeType::Added, None)?;
        if is_crd_type(rt) {
            self.register_crd(&stored);
        }
        Ok(stored)
    }

    /// Assigns the next resourceVersion, stores and records the change.
    pub(super) fn commit(
        &mut self,
        rt: &ResourceType,
        mut value: Value,
        change: ChangeType,
        previous: Option<Arc<StoredObject>>,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let rv = self.next_rv();
        if let Some(meta) = metadata_mut(&mut value) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let stored = Arc::new(
            StoredObject::from_value(rt, &value).map_err(|e| ApiError::internal(e.to_string()))?,
        );
        self.record(&rt.group_resource(), change, stored.clone(), previous);
        Ok(stored)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn update(
        &mut self,
        rt: &ResourceType,
        version: &str,
        namespace: Option<&str>,
        name: &str,
        mut value: Value,
        sub: Subresource,
        dry_run: bool,
    ) -> Result<Arc<StoredObject>, ApiError> {
        check_type(rt, version, &mut value)?;
        check_namespace(rt, namespace, &mut value)?;
        fold_string_data(rt, &mut value);
        let body_name = meta_str(&value, "name").unwrap_or_default();
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let current = self.existing(rt, namespace.filter(|_| rt.namespaced), name)?;
        let old = current.value();
        let given_rv = meta_str(&value, "resourceVersion").unwrap_or_default();
        if !given_rv.is_empty() && given_rv != current.rv.to_string() {
            return Err(ApiError::conflict(&rt.group, &rt.plural, name));
        }
        let status_is_separate = rt.has_status(version);
        let mut new = match sub {
            Subresource::Status => {
                // Only `.status` changes through the status subresource.
                let mut merged = old.clone();
                match value.get("status") {
                    Some(status) => merged["status"] = status.clone(),
                    None => {
                        if let Some(obj) = merged.as_object_mut() {
                            obj.remove("status");
                        }
                    }
                }
                merged
            }
            Subresource::Main => {
                if status_is_separate {
                    match old.get("status") {
                        Some(status) => value["status"] = status.clone(),
                        None => {
                            if let Some(obj) = value.as_object_mut() {
                                obj.remove("status");
                            }
                        }
                    }
                }
                value
            }
        };
        // Server-owned metadata always comes from the stored object.
        {
            let old_meta = old
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let meta =
                metadata_mut(&mut new).ok_or_else(|| ApiError::bad_request("no metadata"))?;
            for key in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "generateName",
            ] {
                match old_meta.get(key) {
                    Some(v) => meta.insert(key.into(), v.clone()),
                    None => meta.remove(key),
                };
            }
            meta.remove("selfLink");
            meta.insert(
                "resourceVersion".into(),
                Value::String(current.rv.to_string()),
            );
            if !meta.contains_key("managedFields")
                && let Some(mf) = old_meta.get("managedFields")
            {
                meta.insert("managedFields".into(), mf.clone());
            }
        }
        let mut new = normalize(rt, new)?;
        check_valid(rt, &new)?;
        if current.deleting {
            let before = finalizers(&old);
            let added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                let causes = vec![crate::error::Cause::forbidden(
                    "metadata.finalizers",
                    &format!(
                        "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                        added
                            .iter()
                            .map(|f| format!("{f:?}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )];
                return Err(ApiError::invalid(&rt.group, &rt.kind, name, causes));
            }
        }
        if spec_changed(&old, &new, status_is_separate) {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if let Some(meta) = metadata_mut(&mut new) {
                meta.insert("generation".into(), json!(generation + 1));
            }
        }
        if is_crd_type(rt) {
            self.prepare_crd(&mut new)?;
        }
        if new == old {
            // A no-op write changes nothing, not even the resourceVersion.
            return Ok(current);
        }
        if dry_run {
            return StoredObject::from_value(rt, &new)
                .map(Arc::new)
                .map_err(|e| ApiError::internal(e.to_string()));
        }
        if current.deleting && finalizers(&new).is_empty() {
            let removed = self.commit(rt, new, ChangeType::Deleted, Some(current))?;
            self.after_removal(rt, &removed);
            return Ok(removed);
        }
        let stored = self.commit(rt, new, ChangeType::Modified, Some(current))?;
        if is_crd_type(rt) {
            self.register_crd(&stored);
        }
        Ok(stored)
    }

    pub(super) fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let current = self.existing(rt, namespace.filter(|_| rt.namespaced), name)?;
        if let Some(uid) = &opts.precondition_uid
            && *uid != current.uid
        {
            return Err(ApiError::conflict_with(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    current.uid
                ),
            ));
        }
        if let Some(rv) = &opts.precondition_rv
            && *rv != current.rv.to_string()
        {
            return Err(ApiError::conflict_with(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    current.rv
                ),
            ));
        }
        if is_namespace_type(rt) && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        if opts.dry_run {
            return Ok(current);
        }
        if current.deleting {
            return Ok(current);
        }
        if current.has_finalizers || is_namespace_type(rt) {
            let mut value = current.value();
            let generation = value
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if let Some(meta) = metadata_mut(&mut value) {
                meta.insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
                meta.insert("deletionGracePeriodSeconds".into(), json!(0));
                meta.insert("generation".into(), json!(generation + 1));
            }
            if is_namespace_type(rt) {
                value["status"] = json!({"phase": "Terminating"});
            }
            let marked = self.commit(rt, value, ChangeType::Modified, Some(current))?;
            if is_namespace_type(rt) {
                self.terminate_namespace(name);
                return Ok(self.existing(rt, None, name).unwrap_or(marked));
            }
            return Ok(marked);
        }
        let removed = self.commit(rt, current.value(), ChangeType::Deleted, Some(current))?;
        self.after_removal(rt, &removed);
        Ok(removed)
    }

    /// Follow-ups once an object is gone: a CRD takes its kind and objects
    /// with it; the last object of a terminating namespace lets it go.
    fn after_removal(&mut self, rt: &ResourceType, removed: &StoredObject) {
        if is_crd_type(rt) {
            self.unregister_crd(removed);
        }
        if rt.namespaced && !removed.namespace.is_empty() {
            self.finish_namespace_if_empty(&removed.namespace.clone());
        }
    }

    /// Deletes everything in a terminating namespace; objects with
    /// finalizers are marked and the namespace waits for them.
    fn terminate_namespace(&mut self, ns: &str) {
        let mut victims = Vec::new();
        for (gr, store) in &self.resources {
            let Some(rt) = self.registry.get(gr) else {
                continue;
            };
            if !rt.namespaced {
                continue;
            }
            for ((obj_ns, name), _) in store.objects.range((ns.to_string(), String::new())..) {
                if obj_ns != ns {
                    break;
                }
                victims.push((rt.clone(), name.clone()));
            }
        }
        for (rt, name) in victims {
            let _ = self.delete(&rt, Some(ns), &name, &DeleteOptions::default());
        }
        self.finish_namespace_if_empty(ns);
    }

    fn finish_namespace_if_empty(&mut self, ns: &str) {
        let Some(ns_obj) = self.namespace_object(ns) else {
            return;
        };
        if !ns_obj.deleting {
            return;
        }
        let occupied = self.resources.values().any(|store| {
            store
                .objects
                .range((ns.to_string(), String::new())..)
                .next()
                .is_some_and(|((obj_ns, _), _)| obj_ns == ns)
        });
        if occupied {
            return;
        }
        let Some(rt) = self.registry.lookup("", "v1", "namespaces") else {
            return;
        };
        let _ = self.commit(&rt, ns_obj.value(), ChangeType::Deleted, Some(ns_obj));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_ignores_metadata_and_separate_status() {
        let old = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"x": 1}, "status": {"s": 1}});
        let relabeled =
            json!({"metadata": {"labels": {"a": "2"}}, "spec": {"x": 1}, "status": {"s": 1}});
        let restatused = json!({"metadata": {}, "spec": {"x": 1}, "status": {"s": 2}});
        let respecced = json!({"metadata": {}, "spec": {"x": 2}, "status": {"s": 1}});
        assert!(!spec_changed(&old, &relabeled, true));
        assert!(!spec_changed(&old, &restatused, true));
        assert!(spec_changed(&old, &restatused, false));
        assert!(spec_changed(&old, &respecced, true));
        let dropped = json!({"metadata": {}, "status": {"s": 1}});
        assert!(spec_changed(&old, &dropped, true));
    }

    #[test]
    fn generated_suffixes_use_the_kubernetes_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(s.bytes().all(|b| GENERATE_NAME_ALPHABET.contains(&b)));
    }
}
