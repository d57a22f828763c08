//! Admission webhooks, as kube-apiserver runs them: the stored
//! `MutatingWebhookConfiguration` and `ValidatingWebhookConfiguration`
//! objects decide which writes go to which webhook; mutating webhooks run
//! one after another on the object the write would store, their JSON
//! patches applied in turn (and `reinvocationPolicy: IfNeeded` webhooks
//! called once more when a later one changed the object); validating
//! webhooks then see the final object, all at once, and any denial stops
//! the write. A webhook that cannot be reached, answers late or answers
//! garbage is decided by its `failurePolicy`.
//!
//! How a write passes through them is in `http/admitted.rs`; this module
//! keeps the configurations and makes the calls. Writes kube-sim makes
//! itself (its kubelet, scheduler, workload controllers and garbage
//! collector) do not pass through webhooks; on a real cluster the
//! controllers' writes would.

pub(crate) mod call;
pub(crate) mod policies;
pub(crate) mod review;
pub(crate) mod validation;
pub(crate) mod webhooks;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use crate::error::ApiError;
use crate::field_validation::Warnings;
use crate::rbac::UserInfo;
use crate::store::Store;
use webhooks::{Attributes, Configured, FailurePolicy, SideEffects, Webhook};

/// The webhook configurations of one server, read again whenever one of
/// them changes.
pub struct Admission {
    cached: Mutex<Option<(u64, Arc<Configured>)>>,
}

impl Default for Admission {
    fn default() -> Self {
        Self::new()
    }
}

impl Admission {
    pub fn new() -> Self {
        Self {
            cached: Mutex::new(None),
        }
    }

    /// The webhooks stored now.
    pub(crate) fn webhooks(&self, store: &Store) -> Arc<Configured> {
        let epoch = store.admission_epoch();
        let mut cached = self.cached.lock();
        match &*cached {
            Some((seen, set)) if *seen == epoch => set.clone(),
            _ => {
                let group = "admissionregistration.k8s.io";
                let mutating = store.values_of(group, "mutatingwebhookconfigurations", None);
                let validating = store.values_of(group, "validatingwebhookconfigurations", None);
                let mut configured = Configured::from_configurations(&mutating, &validating);
                configured.policies = policies::bind(
                    &store.values_of(group, "validatingadmissionpolicies", None),
                    &store.values_of(group, "validatingadmissionpolicybindings", None),
                );
                let set = Arc::new(configured);
                *cached = Some((epoch, set.clone()));
                set
            }
        }
    }
}

/// One write as admission sees it.
pub(crate) struct Request<'a> {
    pub attrs: Attributes,
    pub user: Option<&'a UserInfo>,
    pub dry_run: bool,
    /// CreateOptions, UpdateOptions or DeleteOptions.
    pub options: Value,
}

/// What the webhooks are given besides the request.
struct Objects<'a> {
    object: Option<&'a Value>,
    old_object: Option<&'a Value>,
    namespace_labels: Option<&'a BTreeMap<String, String>>,
}

/// The labels the namespace selector is matched against: the request's
/// namespace, or the Namespace the request is about.
fn namespace_labels(
    store: &Store,
    attrs: &Attributes,
    object: Option<&Value>,
    old_object: Option<&Value>,
) -> Option<BTreeMap<String, String>> {
    if attrs.group.is_empty() && attrs.resource == "namespaces" {
        return object.or(old_object).map(webhooks::labels_of);
    }
    if !attrs.namespaced || attrs.namespace.is_empty() {
        return None;
    }
    store
        .object_value("", "namespaces", "", &attrs.namespace)
        .map(|ns| webhooks::labels_of(&ns))
}

/// The version a webhook is called at when it is to be called: rules,
/// selectors and match conditions all take the request. An error is the
/// request's answer (a selector or condition that fails under `Fail`, a
/// dry run a webhook with side effects cannot take).
fn version_to_call(
    webhook: &Webhook,
    request: &Request<'_>,
    objects: &Objects<'_>,
) -> Result<Option<String>, ApiError> {
    let Some(matched) = webhook.matches_rules(&request.attrs) else {
        return Ok(None);
    };
    let selected = webhook
        .selects_namespace(&request.attrs, objects.namespace_labels)
        .and_then(|ok| {
            if ok {
                webhook.selects_object(objects.object, objects.old_object)
            } else {
                Ok(false)
            }
        })
        .and_then(|ok| {
            if !ok {
                return Ok(false);
            }
            let review = review_request(request, "", &matched.version, objects);
            let null = Value::Null;
            webhook.conditions_hold(&[
                ("object", objects.object.unwrap_or(&null)),
                ("oldObject", objects.old_object.unwrap_or(&null)),
                ("request", review.get("request").unwrap_or(&null)),
            ])
        });
    match selected {
        Ok(false) => Ok(None),
        Ok(true) => {
            if request.dry_run && webhook.side_effects == SideEffects::Some {
                return Err(ApiError::bad_request(format!(
                    "admission webhook {:?} does not support dry run",
                    webhook.name
                )));
            }
            Ok(Some(matched.version))
        }
        Err(why) => match webhook.failure_policy {
            FailurePolicy::Ignore => Ok(None),
            FailurePolicy::Fail => Err(review::call_failure(&webhook.name, &why)),
        },
    }
}

fn review_request(request: &Request<'_>, uid: &str, version: &str, objects: &Objects<'_>) -> Value {
    review::request_document(&review::ReviewRequest {
        uid,
        attrs: &request.attrs,
        version,
        object: objects.object,
        old_object: objects.old_object,
        user: request.user,
        dry_run: request.dry_run,
        options: request.options.clone(),
    })
}

/// One call: its verdict, or why there is none.
async fn call(
    store: &Store,
    webhook: &Webhook,
    request: &Request<'_>,
    version: &str,
    objects: &Objects<'_>,
) -> Result<review::Verdict, String> {
    let uid = uuid::Uuid::new_v4().to_string();
    let document = review_request(request, &uid, version, objects);
    let destination = call::destination(store, &webhook.endpoint, webhook.timeout)
        .map_err(|e| format!("failed to call webhook: {e}"))?;
    let body = call::post(&destination, &webhook.ca_bundle, &document, webhook.timeout)
        .await
        .map_err(|e| format!("failed to call webhook: {e}"))?;
    review::read_response(&body, &uid, webhook.mutating)
        .map_err(|e| format!("received invalid webhook response: {e}"))
}

/// The verdict of a call, or `None` when the failure policy lets the
/// request go on without it.
async fn verdict(
    store: &Store,
    webhook: &Webhook,
    request: &Request<'_>,
    version: &str,
    objects: &Objects<'_>,
    warnings: &Warnings,
) -> Result<Option<review::Verdict>, ApiError> {
    match call(store, webhook, request, version, objects).await {
        Ok(verdict) => {
            for warning in &verdict.warnings {
                warnings.push(warning.clone());
            }
            if verdict.allowed {
                Ok(Some(verdict))
            } else {
                Err(review::denial(&webhook.name, verdict.status.as_ref()))
            }
        }
        Err(why) => {
            tracing::warn!(webhook = %webhook.name, "admission webhook call failed: {why}");
            match webhook.failure_policy {
                FailurePolicy::Ignore => Ok(None),
                FailurePolicy::Fail => Err(review::call_failure(&webhook.name, &why)),
            }
        }
    }
}

/// Applies a mutating webhook's patch to `object`, which the webhook saw at
/// `version`.
fn apply_patch(
    object: &mut Value,
    patch: &[u8],
    attrs: &Attributes,
    version: &str,
) -> Result<(), ApiError> {
    let api_version = |v: &str| {
        if attrs.group.is_empty() {
            v.to_string()
        } else {
            format!("{}/{v}", attrs.group)
        }
    };
    object["apiVersion"] = Value::String(api_version(version));
    crate::patch::apply_json_patch(object, patch)
        .map_err(|e| ApiError::internal(format!("Internal error occurred: {}", e.message)))?;
    object["apiVersion"] = Value::String(api_version(&attrs.version));
    Ok(())
}

/// Runs the mutating webhooks on `object` (`None` on a delete, where
/// patches have nothing to change).
pub(crate) async fn mutate(
    store: &Store,
    set: &Configured,
    request: &Request<'_>,
    object: &mut Option<Value>,
    old_object: Option<&Value>,
    warnings: &Warnings,
) -> Result<(), ApiError> {
    let labels = namespace_labels(store, &request.attrs, object.as_ref(), old_object);
    // Index of each webhook called, and whether a later one changed the
    // object after it (which calls an IfNeeded webhook once more).
    let mut called: Vec<usize> = Vec::new();
    let mut changed_by: Vec<usize> = Vec::new();
    for (index, webhook) in set.mutating.iter().enumerate() {
        let outcome = invoke_mutating(
            store,
            webhook,
            request,
            object,
            old_object,
            labels.as_ref(),
            warnings,
        )
        .await?;
        if let Some(changed) = outcome {
            called.push(index);
            if changed {
                changed_by.push(index);
            }
        }
    }
    let reinvoked: Vec<usize> = called
        .into_iter()
        .filter(|i| set.mutating[*i].reinvoke_if_needed && changed_by.iter().any(|c| c > i))
        .collect();
    for index in reinvoked {
        invoke_mutating(
            store,
            &set.mutating[index],
            request,
            object,
            old_object,
            labels.as_ref(),
            warnings,
        )
        .await?;
    }
    Ok(())
}

/// Calls one mutating webhook if it takes the request; `Some(changed)`
/// when it was called.
async fn invoke_mutating(
    store: &Store,
    webhook: &Webhook,
    request: &Request<'_>,
    object: &mut Option<Value>,
    old_object: Option<&Value>,
    namespace_labels: Option<&BTreeMap<String, String>>,
    warnings: &Warnings,
) -> Result<Option<bool>, ApiError> {
    let objects = Objects {
        object: object.as_ref(),
        old_object,
        namespace_labels,
    };
    let Some(version) = version_to_call(webhook, request, &objects)? else {
        return Ok(None);
    };
    let Some(verdict) = verdict(store, webhook, request, &version, &objects, warnings).await?
    else {
        return Ok(Some(false));
    };
    match (verdict.patch, object.as_mut()) {
        (Some(patch), Some(object)) => {
            let before = object.clone();
            apply_patch(object, &patch, &request.attrs, &version)?;
            Ok(Some(*object != before))
        }
        _ => Ok(Some(false)),
    }
}

/// Runs the validating admission on the final object: bound
/// ValidatingAdmissionPolicies, then the validating webhooks, all at once;
/// the first (in configuration order) that denies or fails decides.
pub(crate) async fn validate(
    store: &Store,
    set: &Configured,
    request: &Request<'_>,
    object: Option<&Value>,
    old_object: Option<&Value>,
    warnings: &Warnings,
) -> Result<(), ApiError> {
    let labels = namespace_labels(store, &request.attrs, object, old_object);
    let objects = Objects {
        object,
        old_object,
        namespace_labels: labels.as_ref(),
    };
    if !set.policies.is_empty() {
        // Policies first, as kube-apiserver orders its validating plugins.
        let document = review_request(request, "", &request.attrs.version, &objects);
        let namespace_object = (request.attrs.namespaced && !request.attrs.namespace.is_empty())
            .then(|| store.object_value("", "namespaces", "", &request.attrs.namespace))
            .flatten();
        let policy_warnings = policies::evaluate(
            &set.policies,
            &policies::PolicyRequest {
                attrs: &request.attrs,
                object,
                old_object,
                namespace_labels: labels.as_ref(),
                namespace_object: namespace_object.as_ref(),
                request: document.get("request").unwrap_or(&Value::Null),
            },
        )?;
        for warning in policy_warnings {
            warnings.push(warning);
        }
    }
    if set.validating.is_empty() {
        return Ok(());
    }
    let mut calls = Vec::new();
    for webhook in &set.validating {
        if let Some(version) = version_to_call(webhook, request, &objects)? {
            calls.push((webhook.clone(), version));
        }
    }
    let outcomes =
        futures::future::join_all(calls.iter().map(|(webhook, version)| {
            verdict(store, webhook, request, version, &objects, warnings)
        }))
        .await;
    for outcome in outcomes {
        outcome?;
    }
    Ok(())
}
