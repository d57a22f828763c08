//! Deletion: preconditions, finalizers, graceful pod deletion, namespace
//! teardown, and garbage collection through ownerReferences (background,
//! foreground and orphan propagation, as kube-controller-manager does it).
//!
//! Collection runs synchronously inside the deleting request: dependents
//! are gone (or marked) by the time the owner's delete returns, which a
//! client cannot tell apart from a fast garbage collector.

use std::sync::Arc;

use serde_json::{Value, json};

use super::write::{is_crd_type, is_namespace_type};
use super::{ChangeType, State, Store};
use crate::error::ApiError;
use crate::object::{ObjectKey, StoredObject, metadata_mut};
use crate::resources::{GroupResource, ResourceType};

/// `propagationPolicy` of DeleteOptions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

impl Propagation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Background => "Background",
            Self::Foreground => "Foreground",
            Self::Orphan => "Orphan",
        }
    }

    pub fn parse(text: &str) -> Result<Self, ApiError> {
        match text {
            "Background" => Ok(Self::Background),
            "Foreground" => Ok(Self::Foreground),
            "Orphan" => Ok(Self::Orphan),
            other => Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            ))),
        }
    }
}

/// The parts of `meta.k8s.io/v1 DeleteOptions` kube-sim honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
    pub propagation: Option<Propagation>,
    pub grace_period_seconds: Option<i64>,
}

impl DeleteOptions {
    pub fn from_body(body: &Value) -> Result<Self, ApiError> {
        let pre = |k: &str| {
            body.pointer(&format!("/preconditions/{k}"))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let mut propagation = body
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(Propagation::parse)
            .transpose()?;
        if propagation.is_none() {
            propagation = match body.get("orphanDependents").and_then(Value::as_bool) {
                Some(true) => Some(Propagation::Orphan),
                Some(false) => Some(Propagation::Background),
                None => None,
            };
        }
        Ok(Self {
            precondition_uid: pre("uid"),
            precondition_rv: pre("resourceVersion"),
            dry_run: body
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|d| !d.is_empty()),
            propagation,
            grace_period_seconds: body.get("gracePeriodSeconds").and_then(Value::as_i64),
        })
    }
}

const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];
const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

impl Store {
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
}

fn is_pod_type(rt: &ResourceType) -> bool {
    rt.kind == "Pod" && rt.group.is_empty()
}

impl State {
    pub(super) fn delete(
        &mut self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
    ) -> Result<Arc<StoredObject>, ApiError> {
        if let Some((storage, _)) = self.stored_type(rt) {
            return self.delete(&storage, namespace, name, opts);
        }
        let current = self.existing(rt, namespace, name)?;
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
            )
            .naming_kind(&rt.kind));
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
            )
            .naming_kind(&rt.kind));
        }
        if is_namespace_type(rt) && PROTECTED_NAMESPACES.contains(&name) {
            return Err(ApiError::forbidden(format!(
                "namespaces \"{name}\" is forbidden: this namespace may not be deleted"
            )));
        }
        if opts.dry_run {
            return Ok(current);
        }
        let value = current.value();
        // Pods on a node end through their kubelet: the API only marks them.
        if is_pod_type(rt)
            && self.graceful_pod_deletion
            && value
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
        {
            let grace = opts
                .grace_period_seconds
                .or_else(|| {
                    value
                        .pointer("/spec/terminationGracePeriodSeconds")
                        .and_then(Value::as_i64)
                })
                .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
                .max(0);
            if grace > 0 {
                if current.deleting {
                    return Ok(current);
                }
                return self.mark_deleting(rt, current, None, grace);
            }
            if !current.has_finalizers {
                return self.remove(rt, current);
            }
        }
        if current.deleting {
            return Ok(current);
        }
        match opts.propagation.unwrap_or_default() {
            Propagation::Orphan => self.orphan_dependents(&current.uid),
            Propagation::Foreground if self.dependents.contains_key(&current.uid) => {
                let marked = self.mark_deleting(rt, current, Some(FOREGROUND_FINALIZER), 0)?;
                self.delete_dependents(&marked.uid);
                self.finish_foreground(&marked.uid);
                let key: ObjectKey = marked.key();
                let ns = (!key.0.is_empty()).then_some(key.0.as_str());
                return Ok(self.existing(rt, ns, &key.1).unwrap_or(marked));
            }
            _ => {}
        }
        if current.has_finalizers || is_namespace_type(rt) {
            let marked = self.mark_deleting(rt, current, None, 0)?;
            if is_namespace_type(rt) {
                self.terminate_namespace(name);
                return Ok(self.existing(rt, None, name).unwrap_or(marked));
            }
            return Ok(marked);
        }
        self.remove(rt, current)
    }

    /// Sets deletionTimestamp (now plus `grace` seconds), bumps generation
    /// and optionally adds a finalizer.
    fn mark_deleting(
        &mut self,
        rt: &ResourceType,
        current: Arc<StoredObject>,
        finalizer: Option<&str>,
        grace: i64,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let mut value = current.value();
        let generation = value
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let when = jiff::Timestamp::now()
            .checked_add(jiff::SignedDuration::from_secs(grace))
            .unwrap_or_else(|_| jiff::Timestamp::now())
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        if let Some(meta) = metadata_mut(&mut value) {
            meta.insert("deletionTimestamp".into(), Value::String(when));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if rt.tracks_generation() {
                meta.insert("generation".into(), json!(generation + 1));
            }
            if let Some(f) = finalizer {
                let list = meta.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(list) = list.as_array_mut()
                    && !list.iter().any(|v| v.as_str() == Some(f))
                {
                    list.push(Value::String(f.to_string()));
                }
            }
        }
        if is_namespace_type(rt) {
            value["status"] = json!({"phase": "Terminating"});
        }
        self.commit(rt, value, ChangeType::Modified, Some(current))
    }

    fn remove(
        &mut self,
        rt: &ResourceType,
        current: Arc<StoredObject>,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let removed = self.commit(rt, current.value(), ChangeType::Deleted, Some(current))?;
        self.after_removal(rt, &removed);
        Ok(removed)
    }

    /// Follow-ups once an object is gone: a CRD takes its kind and objects
    /// with it; dependents are collected; owners waiting in foreground
    /// deletion may finish; the last object of a terminating namespace lets
    /// the namespace go.
    pub(super) fn after_removal(&mut self, rt: &ResourceType, removed: &StoredObject) {
        if is_crd_type(rt) {
            self.unregister_crd(removed);
        }
        self.collect_orphans_of(&removed.uid);
        for (owner_uid, _) in &removed.owners {
            self.finish_foreground(owner_uid);
        }
        if rt.namespaced && !removed.namespace.is_empty() {
            self.finish_namespace_if_empty(&removed.namespace.clone());
        }
    }

    fn lookup(
        &self,
        gr: &GroupResource,
        key: &ObjectKey,
    ) -> Option<(Arc<ResourceType>, Arc<StoredObject>)> {
        let rt = self.registry.get(gr)?.clone();
        let obj = self.resources.get(gr)?.objects.get(key)?.clone();
        Some((rt, obj))
    }

    fn dependents_of(&self, uid: &str) -> Vec<(GroupResource, ObjectKey)> {
        self.dependents
            .get(uid)
            .map(|set| set.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Rewrites a dependent's ownerReferences without the given owner.
    fn drop_owner_reference(&mut self, rt: &ResourceType, obj: Arc<StoredObject>, owner_uid: &str) {
        let mut value = obj.value();
        if let Some(meta) = metadata_mut(&mut value) {
            let remaining: Vec<Value> = meta
                .get("ownerReferences")
                .and_then(Value::as_array)
                .map(|refs| {
                    refs.iter()
                        .filter(|r| r.get("uid").and_then(Value::as_str) != Some(owner_uid))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            if remaining.is_empty() {
                meta.remove("ownerReferences");
            } else {
                meta.insert("ownerReferences".into(), Value::Array(remaining));
            }
        }
        let _ = self.commit(rt, value, ChangeType::Modified, Some(obj));
    }

    /// Background collection: a dependent whose owners are all gone is
    /// deleted; one that still has a live owner just loses the dangling reference.
    fn collect_orphans_of(&mut self, owner_uid: &str) {
        for (gr, key) in self.dependents_of(owner_uid) {
            let Some((rt, obj)) = self.lookup(&gr, &key) else {
                continue;
            };
            let other_owner_alive = obj
                .owners
                .iter()
                .any(|(uid, _)| uid != owner_uid && self.by_uid.contains_key(uid));
            if other_owner_alive {
                self.drop_owner_reference(&rt, obj, owner_uid);
                continue;
            }
            let ns = (!key.0.is_empty()).then_some(key.0.clone());
            let _ = self.delete(&rt, ns.as_deref(), &key.1, &DeleteOptions::default());
        }
    }

    /// What kube-controller-manager's garbage collector does to an object
    /// whose every owner reference names an object that does not exist (by
    /// uid): it deletes it (background propagation). The real collector
    /// gets there a moment after the write; here it happens in the same
    /// request, like the rest of kube-sim's collection.
    pub(super) fn collect_if_every_owner_is_gone(
        &mut self,
        rt: &ResourceType,
        stored: &StoredObject,
    ) {
        if stored.owners.is_empty()
            || stored.deleting
            || stored
                .owners
                .iter()
                .any(|(uid, _)| self.by_uid.contains_key(uid))
        {
            return;
        }
        let namespace = (!stored.namespace.is_empty()).then_some(stored.namespace.clone());
        let _ = self.delete(
            rt,
            namespace.as_deref(),
            &stored.name,
            &DeleteOptions::default(),
        );
    }

    /// Orphan propagation: dependents stay, without the owner's reference.
    fn orphan_dependents(&mut self, owner_uid: &str) {
        for (gr, key) in self.dependents_of(owner_uid) {
            if let Some((rt, obj)) = self.lookup(&gr, &key) {
                self.drop_owner_reference(&rt, obj, owner_uid);
            }
        }
    }

    /// Foreground propagation: every dependent is deleted while the owner waits.
    fn delete_dependents(&mut self, owner_uid: &str) {
        for (gr, key) in self.dependents_of(owner_uid) {
            let Some((rt, obj)) = self.lookup(&gr, &key) else {
                continue;
            };
            if obj.deleting && !is_pod_type(&rt) {
                continue;
            }
            let ns = (!key.0.is_empty()).then_some(key.0.clone());
            let opts = DeleteOptions {
                propagation: Some(Propagation::Foreground),
                ..DeleteOptions::default()
            };
            let _ = self.delete(&rt, ns.as_deref(), &key.1, &opts);
        }
    }

    /// Removes the owner's `foregroundDeletion` finalizer once no dependent
    /// with `blockOwnerDeletion` remains.
    fn finish_foreground(&mut self, owner_uid: &str) {
        let Some((gr, key)) = self.by_uid.get(owner_uid).cloned() else {
            return;
        };
        let Some((rt, owner)) = self.lookup(&gr, &key) else {
            return;
        };
        let mut value = owner.value();
        let waiting = crate::object::finalizers(&value)
            .iter()
            .any(|f| f == FOREGROUND_FINALIZER);
        if !owner.deleting || !waiting {
            return;
        }
        let blocked = self.dependents_of(owner_uid).iter().any(|(dgr, dkey)| {
            self.lookup(dgr, dkey).is_some_and(|(_, dep)| {
                dep.owners
                    .iter()
                    .any(|(uid, block)| uid == owner_uid && *block)
            })
        });
        if blocked {
            return;
        }
        if let Some(meta) = metadata_mut(&mut value) {
            let remaining: Vec<Value> = meta
                .get("finalizers")
                .and_then(Value::as_array)
                .map(|l| {
                    l.iter()
                        .filter(|f| f.as_str() != Some(FOREGROUND_FINALIZER))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default();
            if remaining.is_empty() {
                meta.remove("finalizers");
            } else {
                meta.insert("finalizers".into(), Value::Array(remaining));
            }
        }
        if crate::object::finalizers(&value).is_empty() {
            if let Ok(removed) = self.commit(&rt, value, ChangeType::Deleted, Some(owner)) {
                self.after_removal(&rt, &removed);
            }
        } else {
            let _ = self.commit(&rt, value, ChangeType::Modified, Some(owner));
        }
    }

    /// Deletes everything in a terminating namespace; objects with
    /// finalizers (and pods on nodes) are marked and the namespace waits.
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
