//! Create, update and patch (merge, JSON, strategic, server-side apply), with
//! the server-side rules of kube-apiserver: server-owned metadata, optimistic
//! concurrency, generation, the status subresource, custom-resource schemas
//! (pruning, defaults, validation, CEL) and managedFields.

use std::sync::Arc;

use base64::Engine;
use parking_lot::Mutex;
use serde_json::{Map, Value, json};

use super::update::{check_body, decided_outside_lock, prepare_update};
use super::{ChangeType, State, Store};
use crate::apply::{self, ApplyError, SmpError, WriteContext};
use crate::crd;
use crate::error::{ApiError, Cause};
use crate::field_validation::{self, FieldValidation, Warnings};
use crate::object::{StoredObject, meta_str, metadata_mut, now_rfc3339};
use crate::patch::{self, PatchKind};
use crate::resources::{ResourceType, StatusOnCreate, StoredAs};
use crate::validate;

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Main,
    Status,
}

/// Request parameters every write carries.
#[derive(Debug, Clone, Default)]
pub struct WriteParams {
    pub dry_run: bool,
    pub field_manager: Option<String>,
    /// `force` as given; `Some(false)` still counts as given.
    pub force: Option<bool>,
    pub user_agent: String,
    /// What the write does with fields its type does not know or the body
    /// sets twice.
    pub field_validation: FieldValidation,
    /// Keys the request's JSON body set more than once. Only the HTTP layer
    /// has the bytes to find them; decoded values have lost them.
    pub duplicate_fields: Vec<String>,
    /// Where the write leaves its warnings for the answer's headers.
    pub warnings: Warnings,
    /// Whether the object came as a whole body or as the result of a
    /// patch: the two are refused by `Strict` in different words.
    pub(crate) origin: WriteOrigin,
    /// Where the write leaves the object it stored, still in memory, when
    /// the answer is wanted in protobuf (see [`KeptObject`]).
    pub kept: KeptObject,
    /// The object is a protobuf body as the decoder gave it: already the
    /// JSON the Go type writes, so [`normalize`] skips the typed round
    /// trip a JSON body needs (see there).
    pub(crate) protobuf_body: bool,
}

/// The object a write stored, as the `Value` it was serialized from. A
/// protobuf answer encoded from it skips reading the stored JSON text
/// again, which cost more than the JSON client's whole body parse. Off
/// unless the HTTP layer asks ([`KeptObject::wanted`]); shared by the
/// clones of one request's parameters, as a patch clones them.
#[derive(Debug, Clone, Default)]
pub struct KeptObject(Option<Arc<Mutex<Option<Kept>>>>);

/// A stored object and the `Value` its JSON text was serialized from.
type Kept = (Arc<StoredObject>, Value);

impl KeptObject {
    pub fn wanted() -> Self {
        Self(Some(Arc::default()))
    }

    /// Keeps `value`, the object `stored` was made from (dropped when
    /// nobody asked).
    pub(super) fn keep(&self, stored: &Arc<StoredObject>, value: Value) {
        if let Some(slot) = &self.0 {
            *slot.lock() = Some((stored.clone(), value));
        }
    }

    /// The kept object when it is the one `answer` was made from. A write
    /// that stored nothing (an unchanged update, a dry run) or answers
    /// with another object gives `None`: the answer is read from its text.
    pub fn take_for(&self, answer: &Arc<StoredObject>) -> Option<Value> {
        let (stored, value) = self.0.as_ref()?.lock().take()?;
        Arc::ptr_eq(&stored, answer).then_some(value)
    }
}

/// How the object being written reached the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum WriteOrigin {
    #[default]
    Body,
    Patch,
}

impl WriteParams {
    /// Writes kube-sim makes itself (built-in namespaces, garbage collection).
    pub fn system() -> Self {
        Self {
            field_manager: Some("kube-sim".into()),
            ..Self::default()
        }
    }

    /// The manager a non-apply write is recorded under: `fieldManager`, or
    /// the client's name from its User-Agent, as the real server does.
    pub(super) fn manager(&self) -> String {
        match &self.field_manager {
            Some(m) if !m.is_empty() => m.clone(),
            _ => apply::manager_from_user_agent(&self.user_agent),
        }
    }

    /// The parameters of the update a patch (other than an apply) comes
    /// to: the request's own, with the patched object as its origin.
    pub(super) fn for_patched_object(&self) -> Self {
        Self {
            origin: WriteOrigin::Patch,
            protobuf_body: false,
            ..self.clone()
        }
    }
}

/// What every step of one write shares, as kube-apiserver's handlers share
/// a request scope: the kind written, the version it is written at, the
/// namespace of the URL and the request's options. Which object an update
/// or a patch addresses, and which part of it ([`Subresource`]), are
/// arguments of their own, since a create has neither.
#[derive(Debug, Clone, Copy)]
pub struct WriteScope<'a> {
    /// The kind as the request names it. A write of a view kind
    /// (events.k8s.io Events) goes on in a scope of the kind it is stored
    /// as.
    pub rt: &'a ResourceType,
    /// The version the body is in and the answer is given at.
    pub version: &'a str,
    /// The namespace of the URL; a cluster-scoped kind ignores it.
    pub namespace: Option<&'a str>,
    pub params: &'a WriteParams,
}

/// A create prepared outside the state lock (see [`State::prepare_new`]).
pub(super) struct NewObject {
    value: Value,
    generated_prefix: Option<String>,
    /// The writer's managedFields are already recorded.
    recorded: bool,
}

/// Records the creator's managedFields entry on a new object.
fn record_create(scope: WriteScope<'_>, value: &mut Value) {
    let WriteScope {
        rt,
        version,
        params,
        ..
    } = scope;
    let manager = params.manager();
    let api_version = rt.api_version(version);
    let now = now_rfc3339();
    let ctx = write_context(&manager, &api_version, &now, Subresource::Main);
    // A kind with a status subresource resets status on main-resource
    // writes, so the creator never owns any of it (kube-apiserver's
    // field manager leaves its reset fields out).
    let status = match value.as_object_mut() {
        Some(object) if rt.has_status(version) => object.remove("status"),
        _ => None,
    };
    apply::record_update(None, value, &rt.schemas.list_types, &ctx);
    if let (Some(status), Some(object)) = (status, value.as_object_mut()) {
        object.insert("status".into(), status);
    }
}

/// Whether a write still needs its managedFields entry, or already has it
/// (server-side apply computes ownership itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ownership {
    Record,
    Applied,
    /// A write admission webhooks have seen (crate::admission): the
    /// writer's managedFields were recorded on its first pass, webhooks'
    /// changes are nobody's, and a create keeps the uid and
    /// creationTimestamp validating webhooks were shown.
    Admitted,
}

const GENERATE_NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn random_suffix() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..5)
        .map(|_| GENERATE_NAME_ALPHABET[rng.random_range(0..GENERATE_NAME_ALPHABET.len())] as char)
        .collect()
}

fn apply_error(e: ApplyError) -> ApiError {
    ApiError {
        code: e.code(),
        reason: e.reason(),
        message: e.to_string(),
        details: e.to_status().get("details").cloned(),
        retry_after: None,
    }
}

fn smp_error(e: SmpError) -> ApiError {
    ApiError {
        code: e.code(),
        reason: e.reason(),
        message: e.to_string(),
        details: None,
        retry_after: None,
    }
}

impl Store {
    /// Creates the object `body` (a server-side apply may create one too,
    /// see [`Store::patch`]).
    pub fn create(
        &self,
        scope: WriteScope<'_>,
        body: Value,
    ) -> Result<Arc<StoredObject>, ApiError> {
        if let Some(manager) = &scope.params.field_manager {
            apply::validate_field_manager(manager).map_err(apply_error)?;
        }
        if decided_outside_lock(scope.rt) {
            // Everything that does not need the state is done before the
            // lock is taken (the real server validates before its storage
            // transaction too).
            let mut value = body;
            check_type(scope.rt, scope.version, &mut value)?;
            let prepared = State::prepare_new(scope, value, Ownership::Record)?;
            return self.write_and_collect(scope, |state| {
                state.insert_new(scope, prepared, Ownership::Record)
            });
        }
        self.write_and_collect(scope, |state| state.create(scope, body, Ownership::Record))
    }

    /// Replaces `sub` of the object `name` with `body`.
    pub fn update(
        &self,
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        body: Value,
    ) -> Result<Arc<StoredObject>, ApiError> {
        if let Some(manager) = &scope.params.field_manager {
            apply::validate_field_manager(manager).map_err(apply_error)?;
        }
        self.write_and_collect(scope, |state| {
            state.update(scope, name, sub, body, Ownership::Record)
        })
    }

    /// Patches `sub` of the object `name` with `body`, a patch of `kind`
    /// (a server-side apply may create the object).
    pub fn patch(
        &self,
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        kind: PatchKind,
        body: &[u8],
    ) -> Result<Arc<StoredObject>, ApiError> {
        apply::validate_patch_options(
            kind == PatchKind::Apply,
            scope.params.field_manager.as_deref(),
            scope.params.force.is_some(),
        )
        .map_err(apply_error)?;
        if let Some(result) = self.patch_outside_lock(scope, name, sub, kind, body) {
            return result;
        }
        self.write_and_collect(scope, |state| state.patch(scope, name, sub, kind, body))
    }

    /// A create whose object admission webhooks have seen (see
    /// [`Ownership::Admitted`]).
    pub(crate) fn create_admitted(
        &self,
        scope: WriteScope<'_>,
        body: Value,
    ) -> Result<Arc<StoredObject>, ApiError> {
        self.write_and_collect(scope, |state| {
            state.create(scope, body, Ownership::Admitted)
        })
    }

    /// An update whose object admission webhooks have seen (see
    /// [`Ownership::Admitted`]); its resourceVersion is the precondition.
    pub(crate) fn update_admitted(
        &self,
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        body: Value,
    ) -> Result<Arc<StoredObject>, ApiError> {
        self.write_and_collect(scope, |state| {
            state.update(scope, name, sub, body, Ownership::Admitted)
        })
    }

    /// Runs one write under the state lock, then what the garbage collector
    /// does to its result (an object whose owners are all gone is
    /// collected), and counts it.
    fn write_and_collect(
        &self,
        scope: WriteScope<'_>,
        write: impl FnOnce(&mut State) -> Result<Arc<StoredObject>, ApiError>,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let mut state = self.state.lock();
        let result = write(&mut state);
        if let Ok(stored) = &result
            && !scope.params.dry_run
        {
            state.collect_if_every_owner_is_gone(scope.rt, stored);
        }
        drop(state);
        self.count_write(&result);
        result
    }

    pub(super) fn count_write<T>(&self, result: &Result<T, ApiError>) {
        if result.is_ok() {
            self.stats
                .writes
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Sets `apiVersion` and `kind`, refusing a body that names another type.
pub(super) fn check_type(
    rt: &ResourceType,
    version: &str,
    value: &mut Value,
) -> Result<(), ApiError> {
    let Some(obj) = value.as_object_mut() else {
        return Err(ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type {})",
            rt.kind
        )));
    };
    let expected_version = rt.api_version(version);
    // Custom resources are decoded as unstructured objects, which need
    // their type meta; built-in kinds take it from the URL.
    if rt.custom {
        let has = |key: &str| {
            obj.get(key)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
        };
        if !has("kind") {
            return Err(ApiError::bad_request(format!(
                "the object provided is unrecognized (must be of type {}): Object 'Kind' is missing in '{}'",
                rt.kind,
                Value::Object(obj.clone())
            )));
        }
        if !has("apiVersion") {
            return Err(ApiError::bad_request(format!(
                "the API version in the data () does not match the expected API version ({expected_version})"
            )));
        }
    }
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
    obj.insert("apiVersion".into(), Value::String(expected_version));
    obj.insert("kind".into(), Value::String(rt.kind.clone()));
    Ok(())
}

/// Objects are stored in the storage version; with the `None` conversion
/// strategy only `apiVersion` differs.
pub(super) fn to_storage_version(rt: &ResourceType, value: &mut Value) {
    if let Some(obj) = value.as_object_mut() {
        obj.insert(
            "apiVersion".into(),
            Value::String(rt.api_version(&rt.storage_version)),
        );
    }
}

/// Makes the body's namespace agree with the URL, as the real server demands.
pub(super) fn check_namespace(
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

/// Where `decoded` (a protobuf body, shaped) differs from `typed` (the
/// same through the typed round trip), but for keys only `decoded` has:
/// fields the typed form's older Kubernetes does not know.
#[cfg(debug_assertions)]
fn differs_beyond_newer_fields(decoded: &Value, typed: &Value, at: &str) -> Option<String> {
    match (decoded, typed) {
        (Value::Object(decoded), Value::Object(typed)) => {
            typed
                .iter()
                .find_map(|(key, typed_value)| match decoded.get(key) {
                    Some(value) => {
                        differs_beyond_newer_fields(value, typed_value, &format!("{at}.{key}"))
                    }
                    None => Some(format!("{at}.{key}")),
                })
        }
        (Value::Array(decoded), Value::Array(typed)) if decoded.len() == typed.len() => decoded
            .iter()
            .zip(typed)
            .enumerate()
            .find_map(|(i, (value, typed_value))| {
                differs_beyond_newer_fields(value, typed_value, &format!("{at}[{i}]"))
            }),
        _ => (decoded != typed).then(|| at.to_string()),
    }
}

/// kube-apiserver's defaulting of a built-in kind, then the zero values
/// its Go type writes that the typed form leaves out.
fn shape_like_go(rt: &ResourceType, version: &str, value: &mut Value) {
    crate::defaults::apply(&rt.group, &rt.kind, value);
    if let Some(message) = crate::go_shape::message_of(&rt.api_version(version), &rt.kind) {
        crate::go_shape::fill(value, message);
    }
}

/// Built-in kinds decode into their typed form and back, which rejects
/// ill-typed fields and drops unknown ones exactly like the real server
/// (a protobuf body, already in that form, skips the round trip);
/// custom resources are pruned and defaulted by their schema. What was
/// dropped (and what the body set twice) is then refused, reported as
/// warnings or ignored, as `fieldValidation` asks.
pub(super) fn normalize(scope: WriteScope<'_>, value: Value) -> Result<Value, ApiError> {
    let WriteScope {
        rt,
        version,
        params,
        ..
    } = scope;
    let checking = params.field_validation != FieldValidation::Ignore;
    let decoding_error = |e: serde_json::Error| {
        ApiError::bad_request(format!("error decoding {} {}: {e}", rt.plural, rt.kind))
    };
    // The input is kept only where a strict refusal quotes it; typed kinds
    // decode from a borrow, so they keep it without a copy.
    let (value, dropped, input) = match rt.normalize {
        // A protobuf body came through the decoder, which writes what the
        // Go type's JSON is (zeros Go omits dropped, numbers as integers,
        // times in UTC) and refuses any field its schema does not know;
        // protobuf has no duplicate keys. The typed round trip would give
        // it back unchanged, and was the largest single cost of a protobuf
        // create (docs/benchmarks.md). Unlike the round trip, this keeps a
        // field newer than the typed form's Kubernetes 1.33 that the
        // decoder's 1.37 schema knows, as kube-apiserver 1.37 does. Debug
        // builds, which the tests run, still take the round trip and
        // refuse the write if anything else differs.
        Some(f) if params.protobuf_body => {
            #[cfg(not(debug_assertions))]
            let _ = (f, decoding_error);
            #[cfg(debug_assertions)]
            let typed = {
                let mut typed = f(&value).map_err(decoding_error)?;
                shape_like_go(rt, version, &mut typed);
                typed
            };
            let mut value = value;
            shape_like_go(rt, version, &mut value);
            #[cfg(debug_assertions)]
            if let Some(path) = differs_beyond_newer_fields(&value, &typed, "") {
                return Err(ApiError::internal(format!(
                    "kube-sim's protobuf decode of this {} differs from its typed form at {path}",
                    rt.kind,
                )));
            }
            (value, Vec::new(), None)
        }
        Some(f) => {
            let mut decoded = f(&value).map_err(decoding_error)?;
            let dropped = if checking {
                field_validation::dropped_fields(&value, &decoded)
            } else {
                Vec::new()
            };
            shape_like_go(rt, version, &mut decoded);
            (decoded, dropped, checking.then_some(value))
        }
        None => {
            let input = (params.field_validation == FieldValidation::Strict).then(|| value.clone());
            let mut value = value;
            let mut dropped = drop_unknown_metadata(&mut value);
            if let Some(schema) = rt.schema(version) {
                dropped.extend(schema.prepare(&mut value));
            }
            dropped.sort();
            (value, dropped, input)
        }
    };
    if !checking {
        return Ok(value);
    }
    let problems: Vec<String> = dropped
        .iter()
        .map(|path| field_validation::unknown_field(path))
        .chain(
            params
                .duplicate_fields
                .iter()
                .map(|path| field_validation::duplicate_field(path)),
        )
        .collect();
    if problems.is_empty() {
        return Ok(value);
    }
    if params.field_validation == FieldValidation::Strict {
        return Err(strict_decoding_error(scope, input, &problems));
    }
    for problem in problems {
        params.warnings.push(problem);
    }
    Ok(value)
}

/// The refusal of a `Strict` write: a body the server cannot decode is
/// BadRequest; a patch whose result it cannot decode is an Invalid `patch`
/// showing that result, as kube-apiserver words them.
fn strict_decoding_error(
    scope: WriteScope<'_>,
    input: Option<Value>,
    problems: &[String],
) -> ApiError {
    match scope.params.origin {
        WriteOrigin::Body => ApiError::bad_request(field_validation::strict_decoding_message(
            &scope.rt.kind,
            scope.version,
            problems,
        )),
        WriteOrigin::Patch => {
            let patched = input.map(|v| v.to_string()).unwrap_or_default();
            ApiError::invalid(
                "",
                "",
                "",
                vec![Cause::invalid(
                    "patch",
                    &Value::String(patched),
                    &format!("strict decoding error: {}", problems.join(", ")),
                )],
            )
        }
    }
}

/// Removes the metadata fields `ObjectMeta` does not have from a custom
/// resource (the apiserver decodes every object's metadata into it) and
/// returns their paths. Built-in kinds lose them in their typed decode.
fn drop_unknown_metadata(value: &mut Value) -> Vec<String> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let Some(meta) = value.get_mut("metadata") else {
        return Vec::new();
    };
    let Ok(typed) = <ObjectMeta as serde::Deserialize>::deserialize(&*meta) else {
        // Ill-typed metadata is the validator's to report.
        return Vec::new();
    };
    let Ok(decoded) = serde_json::to_value(typed) else {
        return Vec::new();
    };
    let dropped = field_validation::dropped_fields(meta, &decoded);
    if let Some(map) = meta.as_object_mut() {
        for path in &dropped {
            if !path.contains(['.', '[']) {
                map.remove(path);
            }
        }
    }
    dropped
        .into_iter()
        .map(|path| format!("metadata.{path}"))
        .collect()
}

/// Fields of an apply configuration its type does not declare, outside
/// metadata. Server-side apply refuses them whatever `fieldValidation`
/// says, because it cannot build a typed patch from them. Best effort for
/// built-in kinds: a partial configuration the typed decoder cannot read
/// (a required field left out) is checked no further here.
fn undeclared_apply_fields(rt: &ResourceType, version: &str, applied: &Value) -> Vec<String> {
    let dropped = match rt.normalize {
        Some(f) => match f(applied) {
            Ok(decoded) => field_validation::dropped_fields(applied, &decoded),
            Err(_) => Vec::new(),
        },
        None => match rt.schema(version) {
            Some(schema) => {
                let mut pruned = applied.clone();
                schema.prepare(&mut pruned)
            }
            None => Vec::new(),
        },
    };
    dropped
        .into_iter()
        .filter(|path| path != "metadata" && !path.starts_with("metadata."))
        .collect()
}

/// Secrets accept `stringData` as a write-only convenience folded into `data`.
pub(super) fn fold_string_data(rt: &ResourceType, value: &mut Value) {
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

pub(super) fn check_valid(
    rt: &ResourceType,
    version: &str,
    value: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    let mut causes = validate::metadata(rt, value);
    causes.extend(validate::kind_specific(rt, value));
    if let Some(old) = old {
        causes.extend(validate::kind_specific_update(rt, value, old));
    }
    if is_crd_type(rt) {
        causes.extend(crd::validate(value));
    }
    if let Some(schema) = rt.schema(version) {
        for e in schema.validate(value, old) {
            causes.push(Cause {
                reason: e.kind.cause_type().to_string(),
                message: e.body(),
                field: e.field.clone(),
            });
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let name = meta_str(value, "name").unwrap_or_default();
    Err(ApiError::invalid(&rt.group, &rt.kind, name, causes))
}

/// True when two objects differ outside `metadata` (and `status`, when the
/// status subresource owns it): the changes that bump `generation`.
pub(super) fn spec_changed(old: &Value, new: &Value, status_is_separate: bool) -> bool {
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

pub(super) fn is_crd_type(rt: &ResourceType) -> bool {
    rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io"
}

pub(super) fn is_namespace_type(rt: &ResourceType) -> bool {
    rt.kind == "Namespace" && rt.group.is_empty()
}

pub(super) fn write_context<'a>(
    manager: &'a str,
    api_version: &'a str,
    time: &'a str,
    sub: Subresource,
) -> WriteContext<'a> {
    WriteContext {
        manager,
        api_version,
        time,
        subresource: (sub == Subresource::Status).then_some("status"),
    }
}

/// Parses a server-side apply body, which may be YAML or JSON.
fn parse_apply_body(body: &[u8]) -> Result<Value, ApiError> {
    if let Ok(value) = serde_json::from_slice::<Value>(body) {
        return Ok(value);
    }
    serde_saphyr::from_slice::<Value>(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))
}

impl State {
    pub(super) fn existing(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let ns = namespace.filter(|_| rt.namespaced).unwrap_or_default();
        let key = (ns.to_string(), name.to_string());
        self.resource(rt)?
            .objects
            .get(&key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    pub(super) fn namespace_object(&self, name: &str) -> Option<Arc<StoredObject>> {
        self.resources
            .iter()
            .find(|(gr, _)| gr.group.is_empty() && gr.resource == "namespaces")
            .and_then(|(_, r)| r.objects.get(&(String::new(), name.to_string())))
            .cloned()
    }

    /// The Service address book, built from the stored Services on first use.
    fn service_addresses(&mut self) -> &mut super::service_addresses::ServiceAddresses {
        let services = crate::resources::GroupResource {
            group: String::new(),
            resource: "services".into(),
        };
        let resources = &self.resources;
        self.service_addresses.get_or_insert_with(|| {
            let values: Vec<Value> = resources
                .get(&services)
                .map(|store| store.objects.values().map(|o| o.value()).collect())
                .unwrap_or_default();
            super::service_addresses::ServiceAddresses::from_services(values.iter())
        })
    }

    /// The stored kind behind a view (events.k8s.io/v1 Events), if `rt` is one.
    pub(super) fn stored_type(&self, rt: &ResourceType) -> Option<(Arc<ResourceType>, StoredAs)> {
        let stored = rt.stored_as?;
        let storage = self.registry.get(&rt.storage_key())?.clone();
        Some((storage, stored))
    }

    pub(super) fn create(
        &mut self,
        scope: WriteScope<'_>,
        mut value: Value,
        ownership: Ownership,
    ) -> Result<Arc<StoredObject>, ApiError> {
        check_type(scope.rt, scope.version, &mut value)?;
        if let Some((storage, stored)) = self.stored_type(scope.rt) {
            let value = (stored.from_view)(value);
            let causes = (stored.check_view_write)(&value, None);
            if !causes.is_empty() {
                let name = meta_str(&value, "name").unwrap_or_default();
                return Err(ApiError::invalid(
                    &storage.group,
                    &storage.kind,
                    name,
                    causes,
                ));
            }
            let stored_scope = WriteScope {
                rt: &storage,
                version: stored.version,
                ..scope
            };
            return self.create(stored_scope, value, ownership);
        }
        let prepared = Self::prepare_new(scope, value, ownership)?;
        self.insert_new(scope, prepared, ownership)
    }

    /// The state-free part of a create (of a kind that is not a view):
    /// metadata, normalization, validation and the writer's managedFields
    /// (not for CRDs, whose registration edits the object first). A plain
    /// create runs it outside the state lock, so a large object's
    /// validation does not hold every other request up.
    pub(super) fn prepare_new(
        scope: WriteScope<'_>,
        mut value: Value,
        ownership: Ownership,
    ) -> Result<NewObject, ApiError> {
        let rt = scope.rt;
        check_namespace(rt, scope.namespace, &mut value)?;
        fold_string_data(rt, &mut value);
        let generated_prefix = {
            let meta =
                metadata_mut(&mut value).ok_or_else(|| ApiError::bad_request("no metadata"))?;
            if meta
                .get("resourceVersion")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
                && ownership == Ownership::Record
            {
                return Err(ApiError::bad_request(
                    "resourceVersion should not be set on objects to be created",
                ));
            }
            let keeps_identity = ownership == Ownership::Admitted;
            for server_owned in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "selfLink",
            ] {
                if keeps_identity && matches!(server_owned, "uid" | "creationTimestamp") {
                    continue;
                }
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
            let given = |meta: &Map<String, Value>, key: &str| {
                meta.get(key)
                    .and_then(Value::as_str)
                    .is_some_and(|v| !v.is_empty())
            };
            if !(keeps_identity && given(meta, "creationTimestamp")) {
                meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
            }
            if !(keeps_identity && given(meta, "uid")) {
                meta.insert(
                    "uid".into(),
                    Value::String(uuid::Uuid::new_v4().to_string()),
                );
            }
            if rt.tracks_generation() {
                meta.insert("generation".into(), json!(1));
            } else {
                meta.remove("generation");
            }
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
        let mut value = normalize(scope, value)?;
        // As on the real server: the field manager records the decoded
        // body, admission and the create strategy add to it, then the
        // result is validated.
        let recorded = ownership == Ownership::Record && !is_crd_type(rt);
        if recorded {
            record_create(scope, &mut value);
        }
        crate::defaults::admit(&rt.group, &rt.kind, &mut value);
        check_valid(rt, scope.version, &value, None)?;
        Ok(NewObject {
            value,
            generated_prefix,
            recorded,
        })
    }

    /// The part of a create that needs the state: the namespace, a free
    /// name, and the commit.
    pub(super) fn insert_new(
        &mut self,
        scope: WriteScope<'_>,
        prepared: NewObject,
        ownership: Ownership,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let WriteScope {
            rt,
            namespace,
            params,
            ..
        } = scope;
        let NewObject {
            mut value,
            generated_prefix,
            recorded,
        } = prepared;
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
        if ownership == Ownership::Record && !recorded {
            record_create(scope, &mut value);
        }
        if rt.group.is_empty() && rt.kind == "Service" {
            self.service_addresses().allocate(&mut value);
        }
        to_storage_version(rt, &mut value);
        if params.dry_run {
            return StoredObject::from_value(rt, &value)
                .map(Arc::new)
                .map_err(|e| ApiError::internal(e.to_string()));
        }
        let (stored, value) = self.commit_keeping_value(rt, value, ChangeType::Added, None)?;
        params.kept.keep(&stored, value);
        if is_crd_type(rt) {
            self.register_crd(&stored);
        }
        Ok(stored)
    }

    /// Assigns the next resourceVersion, stores and records the change.
    pub(super) fn commit(
        &mut self,
        rt: &ResourceType,
        value: Value,
        change: ChangeType,
        previous: Option<Arc<StoredObject>>,
    ) -> Result<Arc<StoredObject>, ApiError> {
        self.commit_keeping_value(rt, value, change, previous)
            .map(|(stored, _)| stored)
    }

    /// [`Self::commit`], handing back the final object as well (what a
    /// protobuf answer is encoded from, see [`KeptObject`]).
    pub(super) fn commit_keeping_value(
        &mut self,
        rt: &ResourceType,
        mut value: Value,
        change: ChangeType,
        previous: Option<Arc<StoredObject>>,
    ) -> Result<(Arc<StoredObject>, Value), ApiError> {
        let rv = self.next_rv();
        if let Some(meta) = metadata_mut(&mut value) {
            meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
        let stored = Arc::new(
            StoredObject::from_value(rt, &value).map_err(|e| ApiError::internal(e.to_string()))?,
        );
        let gr = rt.storage_key();
        self.persist(&gr, change, &stored)?;
        self.record(&gr, change, stored.clone(), previous);
        Ok((stored, value))
    }

    /// The stored object as seen through `version`.
    pub(super) fn value_at(rt: &ResourceType, version: &str, obj: &StoredObject) -> Value {
        let mut value = obj.value();
        if version != rt.storage_version {
            value["apiVersion"] = Value::String(rt.api_version(version));
        }
        value
    }

    pub(super) fn patch(
        &mut self,
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        kind: PatchKind,
        body: &[u8],
    ) -> Result<Arc<StoredObject>, ApiError> {
        if kind == PatchKind::Apply {
            return self.server_side_apply(scope, name, sub, body);
        }
        let current = self.existing(scope.rt, scope.namespace, name)?;
        let doc = Self::patched_document(scope.rt, scope.version, &current, kind, body)?;
        let params = scope.params.for_patched_object();
        let scope = WriteScope {
            params: &params,
            ..scope
        };
        self.update(scope, name, sub, doc, Ownership::Record)
    }

    /// `current` as seen through `version` (and its view, for a view
    /// kind) with a patch other than an apply applied.
    pub(super) fn patched_document(
        rt: &ResourceType,
        version: &str,
        current: &StoredObject,
        kind: PatchKind,
        body: &[u8],
    ) -> Result<Value, ApiError> {
        let mut doc = Self::value_at(rt, version, current);
        // A view is patched in its own field names.
        if let Some(stored) = &rt.stored_as {
            doc = (stored.to_view)(doc);
        }
        match kind {
            PatchKind::Merge => patch::apply_merge_patch(&mut doc, body)?,
            PatchKind::Json => patch::apply_json_patch(&mut doc, body)?,
            PatchKind::Strategic => {
                let patch_value: Value = serde_json::from_slice(body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
                doc = apply::strategic_merge(&doc, &patch_value, &rt.schemas.list_types)
                    .map_err(smp_error)?;
            }
            PatchKind::Apply => {
                return Err(ApiError::internal("an apply is not a document patch"));
            }
        }
        Ok(doc)
    }

    fn server_side_apply(
        &mut self,
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        body: &[u8],
    ) -> Result<Arc<StoredObject>, ApiError> {
        let WriteScope {
            rt,
            version,
            namespace,
            ..
        } = scope;
        if let Some((storage, stored)) = self.stored_type(rt) {
            let mut applied = parse_apply_body(body)?;
            if !applied.is_object() {
                return Err(ApiError::bad_request(
                    "the apply configuration must be an object",
                ));
            }
            check_type(rt, version, &mut applied)?;
            let converted = serde_json::to_vec(&(stored.from_view)(applied))
                .map_err(|e| ApiError::internal(e.to_string()))?;
            let stored_scope = WriteScope {
                rt: &storage,
                version: stored.version,
                ..scope
            };
            return self.server_side_apply(stored_scope, name, sub, &converted);
        }
        let applied = Self::apply_configuration(rt, version, name, body, sub)?;
        let current = self.existing(rt, namespace, name).ok();
        let live = current.as_ref().map(|c| Self::value_at(rt, version, c));
        let merged =
            Self::merge_apply(scope, name, sub, applied, current.as_deref(), live.as_ref())?;
        match current {
            None => self.create(scope, merged, Ownership::Applied),
            // The live object was just parsed for the merge: the update
            // starts from it instead of parsing the stored JSON again.
            Some(_) => self.update_from(scope, name, sub, merged, Ownership::Applied, live),
        }
    }

    /// An apply configuration as the merge takes it: parsed (YAML or
    /// JSON), typed, named after the URL, cut to what `sub` addresses, and
    /// refused when it sets a field its type does not declare.
    pub(super) fn apply_configuration(
        rt: &ResourceType,
        version: &str,
        name: &str,
        body: &[u8],
        sub: Subresource,
    ) -> Result<Value, ApiError> {
        let mut applied = parse_apply_body(body)?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "the apply configuration must be an object",
            ));
        }
        check_type(rt, version, &mut applied)?;
        let body_name = meta_str(&applied, "name").unwrap_or_default().to_string();
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(meta) = metadata_mut(&mut applied) {
            meta.insert("name".into(), Value::String(name.to_string()));
        }
        let has_status = rt.has_status(version);
        if let Some(obj) = applied.as_object_mut() {
            match sub {
                Subresource::Main if has_status => {
                    obj.remove("status");
                }
                Subresource::Status => {
                    obj.retain(|k, _| {
                        matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status")
                    });
                }
                Subresource::Main => {}
            }
        }
        if let Some(field) = undeclared_apply_fields(rt, version, &applied).first() {
            let body_namespace = meta_str(&applied, "namespace").unwrap_or_default();
            return Err(ApiError::unclassified(format!(
                "failed to create typed patch object ({body_namespace}/{name}; {}/{version}, Kind={}): .{field}: field not declared in schema",
                rt.group, rt.kind
            )));
        }
        Ok(applied)
    }

    /// The apply's preconditions against `current` (the stored object, if
    /// any; `live` is it parsed at the scope's version), then the merge of
    /// the configuration into it.
    pub(super) fn merge_apply(
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        applied: Value,
        current: Option<&StoredObject>,
        live: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let WriteScope {
            rt,
            version,
            params,
            ..
        } = scope;
        let wanted_rv = meta_str(&applied, "resourceVersion").unwrap_or_default();
        if !wanted_rv.is_empty() {
            match current {
                Some(c) if c.rv.to_string() == wanted_rv => {}
                Some(_) => return Err(ApiError::conflict(&rt.group, &rt.plural, name)),
                None => return Err(ApiError::not_found(&rt.group, &rt.plural, name)),
            }
        }
        if current.is_none() && sub == Subresource::Status {
            return Err(ApiError::not_found(&rt.group, &rt.plural, name));
        }
        // A UID in an apply configuration is a precondition: with no object
        // of that name, kube-apiserver refuses rather than creating one (an
        // apply naming a deleted Node's UID must never bring it back).
        let wanted_uid = meta_str(&applied, "uid").unwrap_or_default();
        if current.is_none() && !wanted_uid.is_empty() {
            return Err(ApiError::conflict_with(
                &rt.group,
                &rt.plural,
                name,
                &format!(
                    "uid mismatch: the provided object specified uid {wanted_uid}, and no existing object was found"
                ),
            ));
        }
        let manager = params.field_manager.clone().unwrap_or_default();
        let api_version = rt.api_version(version);
        let now = now_rfc3339();
        let ctx = write_context(&manager, &api_version, &now, sub);
        apply::apply(
            live,
            &applied,
            params.force.unwrap_or(false),
            &rt.schemas.list_types,
            &ctx,
        )
        .map_err(apply_error)
    }

    pub(super) fn update(
        &mut self,
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        value: Value,
        ownership: Ownership,
    ) -> Result<Arc<StoredObject>, ApiError> {
        self.update_from(scope, name, sub, value, ownership, None)
    }

    /// [`update`](Self::update) with the stored object already parsed at
    /// the scope's version (`known_old`), when the caller has it.
    fn update_from(
        &mut self,
        scope: WriteScope<'_>,
        name: &str,
        sub: Subresource,
        mut value: Value,
        ownership: Ownership,
        known_old: Option<Value>,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let WriteScope { rt, namespace, .. } = scope;
        check_type(rt, scope.version, &mut value)?;
        if let Some((storage, stored)) = self.stored_type(rt) {
            let value = (stored.from_view)(value);
            let old = self.existing(&storage, namespace, name)?.value();
            let causes = (stored.check_view_write)(&value, Some(&old));
            if !causes.is_empty() {
                return Err(ApiError::invalid(
                    &storage.group,
                    &storage.kind,
                    name,
                    causes,
                ));
            }
            let stored_scope = WriteScope {
                rt: &storage,
                version: stored.version,
                ..scope
            };
            return self.update(stored_scope, name, sub, value, ownership);
        }
        check_body(rt, namespace, name, &mut value)?;
        let current = self.existing(rt, namespace, name)?;
        let outcome = prepare_update(scope, sub, value, ownership, &current, known_old, |new| {
            if is_crd_type(rt) {
                self.prepare_crd(new)
            } else {
                Ok(())
            }
        })?;
        self.finish_update(scope, outcome, current)
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

    #[test]
    fn apply_bodies_may_be_yaml_or_json() {
        assert_eq!(parse_apply_body(b"{\"a\": 1}").unwrap(), json!({"a": 1}));
        assert_eq!(
            parse_apply_body(b"a: 1\nb: [x]\n").unwrap(),
            json!({"a": 1, "b": ["x"]})
        );
        assert_eq!(parse_apply_body(b"a: [").unwrap_err().code, 400);
    }

    #[test]
    fn a_write_keeps_the_object_its_stored_text_was_made_from_only_when_asked() {
        let store = Store::new(super::super::StoreConfig::default());
        let rt = store.resolve("", "v1", "configmaps").unwrap();
        let asking = || WriteParams {
            kept: KeptObject::wanted(),
            ..WriteParams::default()
        };
        let scope = |params| WriteScope {
            rt: &rt,
            version: "v1",
            namespace: Some("default"),
            params,
        };
        let body = json!({"metadata": {"name": "c"}, "data": {"k": "v"}});

        let params = asking();
        let created = store.create(scope(&params), body.clone()).unwrap();
        let kept = params.kept.take_for(&created).expect("a create keeps it");
        assert_eq!(serde_json::to_vec(&kept).unwrap(), created.json);
        assert!(params.kept.take_for(&created).is_none(), "taken once");

        let params = asking();
        let patched = store
            .patch(
                scope(&params),
                "c",
                Subresource::Main,
                PatchKind::Merge,
                br#"{"data":{"k":"v2"}}"#,
            )
            .unwrap();
        let kept = params.kept.take_for(&patched).expect("a patch keeps it");
        assert_eq!(serde_json::to_vec(&kept).unwrap(), patched.json);
        assert_eq!(kept["data"]["k"], "v2");
        // Kept for another object is not handed out for this one.
        let params = asking();
        let mut again = kept.clone();
        again["data"]["k"] = json!("v3");
        let updated = store
            .update(scope(&params), "c", Subresource::Main, again)
            .unwrap();
        assert!(params.kept.take_for(&patched).is_none());

        // An update that changes nothing stores nothing, and keeps nothing.
        let params = asking();
        let unchanged = store
            .update(scope(&params), "c", Subresource::Main, updated.value())
            .unwrap();
        assert!(Arc::ptr_eq(&unchanged, &updated));
        assert!(params.kept.take_for(&unchanged).is_none());

        // Nobody asked: nothing is kept.
        let params = WriteParams::default();
        let other = store
            .create(scope(&params), json!({"metadata": {"name": "d"}}))
            .unwrap();
        assert!(params.kept.take_for(&other).is_none());
    }
}
