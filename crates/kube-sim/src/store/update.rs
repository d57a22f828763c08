//! Updates and patches of existing objects, split into what needs the state
//! and what does not.
//!
//! An update is a pure function of the stored object it replaces and the
//! request: patching, normalization, validation (CEL included) and the
//! managedFields bookkeeping read nothing else. For a plain kind (not a
//! CRD, not a view), [`Store::patch`] works that out before the state lock
//! is taken, from a snapshot of the stored object, and takes the lock only
//! to commit, and only if the object is still the one it started from;
//! otherwise it starts again from the newer one. The commit order, the
//! resourceVersions and what watchers see are those of the serial path:
//! each write is decided against exactly the object it replaces, as if it
//! had run whole under the lock at its commit. The lock used to be held
//! for the whole of a 100-Node rack's status patch (milliseconds), which
//! kept every other request of the server waiting.

use std::sync::Arc;

use serde_json::{Value, json};

use super::write::{
    Ownership, Subresource, WriteOrigin, WriteScope, check_namespace, check_type, check_valid,
    fold_string_data, is_crd_type, normalize, spec_changed, to_storage_version, write_context,
};
use super::{ChangeType, State, Store};
use crate::apply;
use crate::error::{ApiError, Cause};
use crate::object::{StoredObject, finalizers, meta_str, metadata_mut, now_rfc3339};
use crate::patch::PatchKind;
use crate::resources::ResourceType;

/// How often a write decided outside the lock is decided again because the
/// object changed before it could commit; then it runs under the lock.
const OPTIMISTIC_ATTEMPTS: usize = 4;

/// What an update of a stored object comes to.
pub(super) enum UpdateOutcome {
    /// Nothing changes, not even the resourceVersion.
    Unchanged,
    /// A dry run: the object as it would be stored.
    DryRun(Arc<StoredObject>),
    /// The new object to commit; `removes` when it is being deleted and
    /// this write took its last finalizer.
    Commit { new: Value, removes: bool },
}

/// Whether a kind's writes (creates and patches) may be decided outside
/// the state lock: not a view (its writes go to another kind) and not a
/// CRD (registering one reads and changes the registry).
pub(super) fn decided_outside_lock(rt: &ResourceType) -> bool {
    rt.stored_as.is_none() && !is_crd_type(rt)
}

/// The checks of an update body that come before the stored object is
/// looked at: its namespace, Secret `stringData`, and its name.
pub(super) fn check_body(
    rt: &ResourceType,
    namespace: Option<&str>,
    name: &str,
    value: &mut Value,
) -> Result<(), ApiError> {
    check_namespace(rt, namespace, value)?;
    fold_string_data(rt, value);
    let body_name = meta_str(value, "name").unwrap_or_default();
    if !body_name.is_empty() && body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// Works out the update of `sub` of `current`, the stored object the
/// request names, to `value` (already through [`check_body`]). `old` is
/// `current` parsed at the scope's version, when the caller has it.
/// `prepare_crd` finishes a CRD before the no-op check (the one step that
/// needs the state; plain kinds pass a no-op).
pub(super) fn prepare_update(
    scope: WriteScope<'_>,
    sub: Subresource,
    value: Value,
    ownership: Ownership,
    current: &StoredObject,
    old: Option<Value>,
    prepare_crd: impl FnOnce(&mut Value) -> Result<(), ApiError>,
) -> Result<UpdateOutcome, ApiError> {
    let WriteScope {
        rt,
        version,
        params,
        ..
    } = scope;
    // The name the request gave: `current` was found by it.
    let name = current.name.as_str();
    let mut value = value;
    let old = old.unwrap_or_else(|| State::value_at(rt, version, current));
    let given_rv = meta_str(&value, "resourceVersion").unwrap_or_default();
    if !given_rv.is_empty() && given_rv != current.rv.to_string() {
        return Err(ApiError::conflict(&rt.group, &rt.plural, name));
    }
    let given_uid = meta_str(&value, "uid").unwrap_or_default();
    if !given_uid.is_empty() && given_uid != current.uid {
        // A replace naming another uid is a failed precondition; a
        // patch that changes it is an invalid change of an immutable
        // field (kube-apiserver words the two differently).
        return Err(match params.origin {
            WriteOrigin::Body => ApiError::conflict_with(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {given_uid}, UID in object meta: {}",
                    current.uid
                ),
            ),
            WriteOrigin::Patch => ApiError::invalid(
                &rt.group,
                &rt.kind,
                name,
                vec![Cause::invalid(
                    "metadata.uid",
                    &Value::from(given_uid),
                    "field is immutable",
                )],
            ),
        });
    }
    let status_is_separate = rt.has_status(version);
    let mut new = match sub {
        Subresource::Status => {
            // Only `.status` (and the ownership records) change through
            // the status subresource.
            let mut merged = old.clone();
            match value.get_mut("status") {
                Some(status) => merged["status"] = status.take(),
                None => {
                    if let Some(obj) = merged.as_object_mut() {
                        obj.remove("status");
                    }
                }
            }
            if let Some(mf) = value
                .pointer_mut("/metadata/managedFields")
                .map(Value::take)
                && let Some(meta) = metadata_mut(&mut merged)
            {
                meta.insert("managedFields".into(), mf);
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
    keep_server_owned_metadata(&old, current, &mut new)?;
    let mut new = normalize(scope, new)?;
    check_valid(rt, version, &new, Some(&old))?;
    if current.deleting {
        let before = finalizers(&old);
        let added: Vec<String> = finalizers(&new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            let causes = vec![Cause::forbidden(
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
    if !rt.tracks_generation() {
        if let Some(meta) = metadata_mut(&mut new) {
            meta.remove("generation");
        }
    } else if spec_changed(&old, &new, status_is_separate) {
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if let Some(meta) = metadata_mut(&mut new) {
            meta.insert("generation".into(), json!(generation + 1));
        }
    }
    prepare_crd(&mut new)?;
    if new == old {
        return Ok(UpdateOutcome::Unchanged);
    }
    if ownership == Ownership::Record {
        let manager = params.manager();
        let api_version = rt.api_version(version);
        let now = now_rfc3339();
        let ctx = write_context(&manager, &api_version, &now, sub);
        apply::record_update(Some(&old), &mut new, &rt.schemas.list_types, &ctx);
    }
    to_storage_version(rt, &mut new);
    if params.dry_run {
        return StoredObject::from_value(rt, &new)
            .map(|stored| UpdateOutcome::DryRun(Arc::new(stored)))
            .map_err(|e| ApiError::internal(e.to_string()));
    }
    Ok(UpdateOutcome::Commit {
        removes: current.deleting && finalizers(&new).is_empty(),
        new,
    })
}

/// Server-owned metadata always comes from the stored object, and so do
/// the ownership records when the write brings none.
fn keep_server_owned_metadata(
    old: &Value,
    current: &StoredObject,
    new: &mut Value,
) -> Result<(), ApiError> {
    let empty = serde_json::Map::new();
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let meta = metadata_mut(new).ok_or_else(|| ApiError::bad_request("no metadata"))?;
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
    let keep_old_records = match meta.get("managedFields") {
        None => true,
        Some(Value::Array(list)) => list.is_empty(),
        Some(_) => true,
    };
    if keep_old_records {
        match old_meta.get("managedFields") {
            Some(mf) => meta.insert("managedFields".into(), mf.clone()),
            None => meta.remove("managedFields"),
        };
    }
    Ok(())
}

impl State {
    /// Commits what [`prepare_update`] decided for `current`.
    pub(super) fn finish_update(
        &mut self,
        scope: WriteScope<'_>,
        outcome: UpdateOutcome,
        current: Arc<StoredObject>,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let WriteScope { rt, params, .. } = scope;
        match outcome {
            UpdateOutcome::Unchanged => Ok(current),
            UpdateOutcome::DryRun(stored) => Ok(stored),
            UpdateOutcome::Commit { new, removes: true } => {
                let (removed, value) =
                    self.commit_keeping_value(rt, new, ChangeType::Deleted, Some(current))?;
                params.kept.keep(&removed, value);
                self.after_removal(rt, &removed);
                Ok(removed)
            }
            UpdateOutcome::Commit {
                new,
                removes: false,
            } => {
                let (stored, value) =
                    self.commit_keeping_value(rt, new, ChangeType::Modified, Some(current))?;
                params.kept.keep(&stored, value);
                if is_crd_type(rt) {
                    self.register_crd(&stored);
                }
                Ok(stored)
            }
        }
    }

    /// A patch (any kind but a server-side apply that creates) of
    /// `current`, decided without the state.
    fn prepare_patch(
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        kind: PatchKind,
        body: &[u8],
        current: &StoredObject,
    ) -> Result<UpdateOutcome, ApiError> {
        let WriteScope {
            rt,
            version,
            namespace,
            ..
        } = scope;
        let (mut value, old, ownership, params) = if kind == PatchKind::Apply {
            let applied = Self::apply_configuration(rt, version, name, body, sub)?;
            let old = Self::value_at(rt, version, current);
            let merged = Self::merge_apply(scope, name, sub, applied, Some(current), Some(&old))?;
            (merged, Some(old), Ownership::Applied, scope.params.clone())
        } else {
            let patched = Self::patched_document(rt, version, current, kind, body)?;
            let params = scope.params.for_patched_object();
            (patched, None, Ownership::Record, params)
        };
        check_type(rt, version, &mut value)?;
        check_body(rt, namespace, name, &mut value)?;
        let scope = WriteScope {
            params: &params,
            ..scope
        };
        prepare_update(scope, sub, value, ownership, current, old, |_| Ok(()))
    }
}

impl Store {
    /// A patch decided outside the state lock (see the module's comment).
    /// `None` when it must run under the lock: a kind whose writes need
    /// the state, an apply with nothing to update (it creates), or an
    /// object that kept changing under it.
    pub(super) fn patch_outside_lock(
        &self,
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        kind: PatchKind,
        body: &[u8],
    ) -> Option<Result<Arc<StoredObject>, ApiError>> {
        let WriteScope { rt, namespace, .. } = scope;
        if !decided_outside_lock(rt) {
            return None;
        }
        for _ in 0..OPTIMISTIC_ATTEMPTS {
            let current = match self.state.lock().existing(rt, namespace, name) {
                Ok(current) => current,
                Err(_) if kind == PatchKind::Apply => return None,
                Err(error) => return Some(Err(error)),
            };
            let outcome = match State::prepare_patch(scope, name, sub, kind, body, &current) {
                Ok(outcome) => outcome,
                Err(error) => return Some(Err(error)),
            };
            let mut state = self.state.lock();
            let unchanged = state
                .existing(rt, namespace, name)
                .is_ok_and(|live| Arc::ptr_eq(&live, &current));
            if !unchanged {
                continue;
            }
            let result = state.finish_update(scope, outcome, current);
            if let Ok(stored) = &result
                && !scope.params.dry_run
            {
                state.collect_if_every_owner_is_gone(rt, stored);
            }
            drop(state);
            self.count_write(&result);
            return Some(result);
        }
        None
    }
}
