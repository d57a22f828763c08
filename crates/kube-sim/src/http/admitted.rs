//! Writes that admission webhooks take part in (crate::admission).
//!
//! The store does a write in one step under its lock, and a webhook is a
//! network call, so a write that webhooks match is done in passes, as
//! kube-apiserver's own update loop retries its admission:
//!
//! 1. the write as the client sent it, as a dry run: decoding, defaults,
//!    the writer's managedFields and validation, exactly as without
//!    webhooks, so a bad request is refused before any webhook is called;
//! 2. mutating webhooks on that object (a create's object without the uid,
//!    creation time, generation and generated name the create strategy
//!    adds after them on the real server);
//! 3. the mutated object written as a dry run again ([`Store::create_admitted`]
//!    or [`Store::update_admitted`]): defaults and validation once more,
//!    webhooks' changes owned by nobody;
//! 4. validating webhooks on that final object;
//! 5. the final object stored, with the first pass's resourceVersion as a
//!    precondition. An update that lost a race to another writer starts
//!    again from 1, webhooks included, as kube-apiserver's does.
//!
//! A dry-run request stops after 4. Webhook configurations are never sent
//! to webhooks. Not passed through webhooks: the scale, binding and
//! eviction subresources and CONNECT (exec, attach, port-forward).

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

use super::path::Target;
use super::{
    AppState, bytes_response, delete_options, duplicate_fields, negotiate, query, target_object,
    with_warnings, write_params,
};
use crate::admission::webhooks::{Attributes, Configured, Operation};
use crate::admission::{self, Request};
use crate::error::ApiError;
use crate::field_validation::{FieldValidation, Warnings};
use crate::object::StoredObject;
use crate::patch::{self, PatchKind};
use crate::rbac::UserInfo;
use crate::store::{DeleteOptions, Store, Subresource, WriteParams};

/// How often a write that lost a race to another writer is admitted again
/// before its conflict is answered.
const ATTEMPTS: usize = 5;

/// One write on its way through admission.
pub(super) struct Write<'a> {
    pub state: &'a AppState,
    pub target: &'a Target,
    pub method: &'a Method,
    pub query: &'a query::Query,
    pub headers: &'a HeaderMap,
    pub caller: Option<&'a UserInfo>,
    pub sub: Subresource,
    /// The RBAC escalation check the final object must pass, if any
    /// (escalation.rs): it runs where kube-apiserver's registry runs it,
    /// after mutating admission and before validating admission.
    pub escalation: Option<super::escalation::Guard<'a>>,
}

/// The webhooks a write must pass, or `None` when no webhook's rules could
/// take it (the write then goes the usual way).
pub(super) fn webhooks_for(write: &Write<'_>) -> Option<Arc<Configured>> {
    let rt = &write.target.rt;
    if rt.group == "admissionregistration.k8s.io" {
        return None;
    }
    let operations: &[Operation] = match (write.method, &write.target.name) {
        (&Method::POST, None) => &[Operation::Create],
        (&Method::PUT, Some(_)) => &[Operation::Update],
        (&Method::PATCH, Some(_)) => &[Operation::Update, Operation::Create],
        (&Method::DELETE, _) if write.sub == Subresource::Main => &[Operation::Delete],
        _ => return None,
    };
    let set = write.state.admission.webhooks(&write.state.store);
    if set.is_empty() {
        return None;
    }
    let any = operations.iter().any(|op| {
        let attrs = attributes(write, *op, "");
        set.mutating
            .iter()
            .chain(&set.validating)
            .any(|w| w.matches_rules(&attrs).is_some())
            || set.policies.iter().any(|p| p.may_take(&attrs))
    });
    any.then_some(set)
}

fn attributes(write: &Write<'_>, operation: Operation, name: &str) -> Attributes {
    let rt = &write.target.rt;
    Attributes {
        operation,
        group: rt.group.clone(),
        version: write.target.version.clone(),
        resource: rt.plural.clone(),
        subresource: match write.sub {
            Subresource::Main => String::new(),
            Subresource::Status => "status".into(),
        },
        kind: rt.kind.clone(),
        namespaced: rt.namespaced,
        namespace: write.target.namespace.clone().unwrap_or_default(),
        name: name.to_string(),
        served_versions: rt.versions.clone(),
    }
}

/// The object as the client would be answered with it.
fn view(write: &Write<'_>, object: &StoredObject) -> Result<Value, ApiError> {
    let rendered = Store::render(&write.target.rt, &write.target.version, object);
    serde_json::from_slice(&rendered).map_err(|e| ApiError::internal(e.to_string()))
}

/// Parameters of the passes after the first: their warnings and unknown
/// fields were the first pass's to report, and managedFields are kept.
fn later_pass(params: &WriteParams, dry_run: bool) -> WriteParams {
    WriteParams {
        dry_run,
        warnings: Warnings::default(),
        duplicate_fields: Vec::new(),
        field_validation: FieldValidation::Ignore,
        ..params.clone()
    }
}

fn options(kind: &str, params: &WriteParams) -> Value {
    let mut options = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if params.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    if let Some(manager) = params.field_manager.as_deref().filter(|m| !m.is_empty()) {
        options["fieldManager"] = json!(manager);
    }
    options
}

fn delete_options_document(opts: &DeleteOptions) -> Value {
    let mut options = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    if opts.dry_run {
        options["dryRun"] = json!(["All"]);
    }
    if let Some(seconds) = opts.grace_period_seconds {
        options["gracePeriodSeconds"] = json!(seconds);
    }
    if let Some(propagation) = opts.propagation {
        options["propagationPolicy"] = json!(propagation.as_str());
    }
    options
}

fn object_name(value: &Value) -> &str {
    value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Serves a write that webhooks take part in.
pub(super) async fn serve(
    write: &Write<'_>,
    set: &Configured,
    body: Bytes,
) -> Result<Response, ApiError> {
    let target = write.target;
    let rt = &target.rt;
    let ns = target.namespace.as_deref();
    match (write.method, &target.name) {
        (&Method::POST, None) => {
            if rt.namespaced && ns.is_none() {
                return Err(ApiError::method_not_allowed());
            }
            write.query.check_write_options("CreateOptions")?;
            let value = target_object(rt, write.headers, &body)?;
            let mut params = write_params(write.query, write.headers, target);
            params.duplicate_fields = duplicate_fields(write.headers, &body);
            let named = !object_name(&value).is_empty();
            let stored = create(write, set, &params, named, |p| {
                write
                    .state
                    .store
                    .create(target.write_scope(p), value.clone())
            })
            .await?;
            Ok(answer(write, stored, StatusCode::CREATED, &params))
        }
        (&Method::PUT, Some(name)) => {
            write.query.check_write_options("UpdateOptions")?;
            let value = target_object(rt, write.headers, &body)?;
            let mut params = write_params(write.query, write.headers, target);
            params.duplicate_fields = duplicate_fields(write.headers, &body);
            let stored = update(write, set, name, &params, |p| {
                write
                    .state
                    .store
                    .update(target.write_scope(p), name, write.sub, value.clone())
            })
            .await?;
            Ok(answer(write, stored, StatusCode::OK, &params))
        }
        (&Method::PATCH, Some(name)) => {
            write.query.check_write_options("PatchOptions")?;
            let content_type = write
                .headers
                .get(axum::http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            let kind = PatchKind::from_content_type(content_type).ok_or_else(|| {
                ApiError::unsupported_media_type(
                    content_type,
                    &[patch::JSON, patch::MERGE, patch::APPLY, patch::STRATEGIC],
                )
            })?;
            let params = write_params(write.query, write.headers, target);
            let first_pass = |p: &WriteParams| {
                write
                    .state
                    .store
                    .patch(target.write_scope(p), name, write.sub, kind, &body)
            };
            let exists = write.state.store.get(rt, ns, name).is_ok();
            if !exists && kind == PatchKind::Apply {
                let stored = create(write, set, &params, true, first_pass).await?;
                return Ok(answer(write, stored, StatusCode::CREATED, &params));
            }
            let stored = update(write, set, name, &params, first_pass).await?;
            Ok(answer(write, stored, StatusCode::OK, &params))
        }
        (&Method::DELETE, Some(name)) => {
            let opts = delete_options(write.headers, &body, write.query)?;
            let old = write.state.store.get(rt, ns, name)?;
            admit_delete(write, set, &old, &opts).await?;
            super::object(
                &write.state.store,
                target,
                write.method,
                write.query,
                write.headers,
                body,
                Subresource::Main,
            )
        }
        (&Method::DELETE, None) => {
            let opts = delete_options(write.headers, &body, write.query)?;
            let store = &write.state.store;
            let page = store.list(rt, ns, &write.query.list_options(rt)?)?;
            let mut deleted = Vec::new();
            for obj in &page.items {
                admit_delete(write, set, obj, &opts).await?;
                let obj_ns = (!obj.namespace.is_empty()).then_some(obj.namespace.as_str());
                match store.delete(rt, obj_ns, &obj.name, &opts) {
                    Ok(d) => deleted.push(d),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let page = crate::store::ListPage {
                items: deleted,
                resource_version: store.current_rv(),
                continue_token: None,
                remaining: None,
            };
            Ok(bytes_response(
                StatusCode::OK,
                Store::render_list(rt, &target.version, &page),
            ))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn answer(
    write: &Write<'_>,
    stored: Arc<StoredObject>,
    code: StatusCode,
    params: &WriteParams,
) -> Response {
    let response = bytes_response(
        code,
        Store::render(&write.target.rt, &write.target.version, &stored),
    );
    with_warnings(
        negotiate::with_kept_object(response, &params.kept, &stored),
        params,
    )
}

/// A create through admission; `first_pass` is the client's write.
async fn create(
    write: &Write<'_>,
    set: &Configured,
    params: &WriteParams,
    named: bool,
    first_pass: impl Fn(&WriteParams) -> Result<Arc<StoredObject>, ApiError>,
) -> Result<Arc<StoredObject>, ApiError> {
    let store = &write.state.store;
    let first = first_pass(&WriteParams {
        dry_run: true,
        ..params.clone()
    })?;
    let mut object = view(write, &first)?;
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for added_later in ["uid", "creationTimestamp", "generation"] {
            meta.remove(added_later);
        }
        if !named {
            meta.remove("name");
        }
    }
    let mut request = Request {
        attrs: attributes(
            write,
            Operation::Create,
            if named { object_name(&object) } else { "" },
        ),
        user: write.caller,
        dry_run: params.dry_run,
        options: options("CreateOptions", params),
    };
    let mut object = Some(object);
    admission::mutate(store, set, &request, &mut object, None, &params.warnings).await?;
    let object = object.unwrap_or_default();
    let dry_run = later_pass(params, true);
    let admitted = store.create_admitted(write.target.write_scope(&dry_run), object)?;
    let final_object = view(write, &admitted)?;
    request.attrs.name = object_name(&final_object).to_string();
    if let Some(guard) = &write.escalation {
        let requested = if named {
            object_name(&final_object)
        } else {
            ""
        };
        guard.check(store, requested, &final_object, None)?;
    }
    admission::validate(
        store,
        set,
        &request,
        Some(&final_object),
        None,
        &params.warnings,
    )
    .await?;
    if params.dry_run {
        return Ok(admitted);
    }
    let commit = later_pass(params, false);
    store.create_admitted(write.target.write_scope(&commit), final_object)
}

/// An update (or a patch of an existing object) through admission;
/// `first_pass` is the client's write.
async fn update(
    write: &Write<'_>,
    set: &Configured,
    name: &str,
    params: &WriteParams,
    first_pass: impl Fn(&WriteParams) -> Result<Arc<StoredObject>, ApiError>,
) -> Result<Arc<StoredObject>, ApiError> {
    let store = &write.state.store;
    let rt = &write.target.rt;
    let ns = write.target.namespace.as_deref();
    let mut attempt = 0;
    loop {
        attempt += 1;
        let current = store.get(rt, ns, name);
        let first = first_pass(&WriteParams {
            dry_run: true,
            ..params.clone()
        })?;
        // A write that creates (an update of a kind that allows it) has no
        // old object; `current` told which it is before the first pass.
        let (operation, old) = match &current {
            Ok(current) => (Operation::Update, Some(view(write, current)?)),
            Err(_) => (Operation::Create, None),
        };
        let mut object = view(write, &first)?;
        if let (Ok(current), Some(meta)) = (
            &current,
            object.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            meta.insert("resourceVersion".into(), json!(current.rv.to_string()));
        }
        let request = Request {
            attrs: attributes(write, operation, name),
            user: write.caller,
            dry_run: params.dry_run,
            options: options("UpdateOptions", params),
        };
        let mut object = Some(object);
        admission::mutate(
            store,
            set,
            &request,
            &mut object,
            old.as_ref(),
            &params.warnings,
        )
        .await?;
        let object = object.unwrap_or_default();
        let dry_run = later_pass(params, true);
        let scope = write.target.write_scope(&dry_run);
        let admitted = match operation {
            Operation::Update => store.update_admitted(scope, name, write.sub, object),
            _ => store.create_admitted(scope, object),
        };
        let admitted = match admitted {
            Err(e) if e.code == 409 && attempt < ATTEMPTS => continue,
            other => other?,
        };
        let final_object = view(write, &admitted)?;
        if let Some(guard) = &write.escalation {
            guard.check(store, name, &final_object, old.as_ref())?;
        }
        admission::validate(
            store,
            set,
            &request,
            Some(&final_object),
            old.as_ref(),
            &params.warnings,
        )
        .await?;
        if params.dry_run {
            return Ok(admitted);
        }
        let commit = later_pass(params, false);
        let scope = write.target.write_scope(&commit);
        let committed = match operation {
            Operation::Update => store.update_admitted(scope, name, write.sub, final_object),
            _ => store.create_admitted(scope, final_object),
        };
        match committed {
            Err(e) if e.code == 409 && attempt < ATTEMPTS => continue,
            other => return other,
        }
    }
}

/// Admission of one object's deletion: the webhooks see it as the old
/// object. The deletion itself follows (a write between the two is not
/// seen by the webhooks; kube-apiserver admits inside its delete).
async fn admit_delete(
    write: &Write<'_>,
    set: &Configured,
    old: &StoredObject,
    opts: &DeleteOptions,
) -> Result<(), ApiError> {
    let store = &write.state.store;
    let old = view(write, old)?;
    let mut attrs = attributes(write, Operation::Delete, object_name(&old));
    if attrs.namespace.is_empty() && write.target.rt.namespaced {
        attrs.namespace = old
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
    }
    let request = Request {
        attrs,
        user: write.caller,
        dry_run: opts.dry_run,
        options: delete_options_document(opts),
    };
    let warnings = Warnings::default();
    let mut nothing = None;
    admission::mutate(store, set, &request, &mut nothing, Some(&old), &warnings).await?;
    admission::validate(store, set, &request, None, Some(&old), &warnings).await
}
