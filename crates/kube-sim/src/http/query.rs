//! Query parameters of list, watch and write requests.

use std::time::Duration;

use serde_json::Value;

use crate::error::{ApiError, Cause};
use crate::field_validation::FieldValidation;
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOptions, ListOptions, Propagation, WatchOptions, WriteParams};

#[derive(Debug, Default)]
pub struct Query {
    pub watch: bool,
    pub dry_run: bool,
    /// Every `dryRun` value given (only `All` is valid, as often as given).
    dry_run_values: Vec<String>,
    field_validation: Option<String>,
    pub field_manager: Option<String>,
    pub force: Option<bool>,
    pub grace_period_seconds: Option<String>,
    pub propagation_policy: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    limit: Option<String>,
    continue_token: Option<String>,
    resource_version: Option<String>,
    resource_version_match: Option<String>,
    allow_bookmarks: bool,
    timeout_seconds: Option<String>,
    send_initial_events: bool,
}

fn truthy(v: &str) -> bool {
    matches!(v, "true" | "1" | "True")
}

fn invalid(field: &str, value: &str, detail: &str) -> ApiError {
    ApiError::invalid(
        "meta.k8s.io",
        "ListOptions",
        "",
        vec![Cause::invalid(field, &Value::from(value), detail)],
    )
}

impl Query {
    pub fn write_params(&self, user_agent: &str) -> WriteParams {
        WriteParams {
            dry_run: self.dry_run,
            field_manager: self.field_manager.clone(),
            force: self.force,
            user_agent: user_agent.to_string(),
            field_validation: FieldValidation::from_query(self.field_validation.as_deref()),
            ..WriteParams::default()
        }
    }

    /// The options every write checks before anything else, as
    /// kube-apiserver does: `dryRun` may only be `All`, and
    /// `fieldValidation` one of its three values (422 naming the options
    /// kind, e.g. `CreateOptions.meta.k8s.io "" is invalid`).
    pub fn check_write_options(&self, options_kind: &str) -> Result<(), ApiError> {
        let not_supported = |field: &str, shown: String, supported: &str| Cause {
            reason: "FieldValueNotSupported".into(),
            message: format!("Unsupported value: {shown}: supported values: {supported}"),
            field: field.into(),
        };
        let mut causes = Vec::new();
        if self.dry_run_values.iter().any(|value| value != "All") {
            let listed: Vec<String> = self
                .dry_run_values
                .iter()
                .map(|v| format!("{v:?}"))
                .collect();
            causes.push(not_supported(
                "dryRun",
                format!("[{}]", listed.join(",")),
                "\"All\"",
            ));
        }
        if let Some(value) = &self.field_validation
            && !matches!(value.as_str(), "" | "Ignore" | "Strict" | "Warn")
        {
            causes.push(not_supported(
                "fieldValidation",
                format!("{value:?}"),
                "\"\", \"Ignore\", \"Strict\", \"Warn\"",
            ));
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid("meta.k8s.io", options_kind, "", causes))
        }
    }

    /// Query parameters of a DELETE override its body, as on the real server.
    pub fn apply_delete_params(&self, opts: &mut DeleteOptions) -> Result<(), ApiError> {
        opts.dry_run |= self.dry_run;
        if let Some(text) = &self.grace_period_seconds {
            opts.grace_period_seconds = Some(text.parse().map_err(|_| {
                ApiError::bad_request(format!("gracePeriodSeconds: invalid value {text:?}"))
            })?);
        }
        if let Some(policy) = &self.propagation_policy {
            opts.propagation = Some(Propagation::parse(policy)?);
        }
        Ok(())
    }

    pub fn parse(raw: &str) -> Self {
        let mut q = Query::default();
        for (key, value) in form_urlencoded::parse(raw.as_bytes()) {
            let value = value.into_owned();
            match key.as_ref() {
                "watch" => q.watch = truthy(&value),
                "dryRun" => {
                    q.dry_run_values.push(value.clone());
                    q.dry_run = value == "All";
                }
                "fieldValidation" => q.field_validation = Some(value),
                "fieldManager" => q.field_manager = Some(value),
                "force" => q.force = Some(truthy(&value)),
                "gracePeriodSeconds" => q.grace_period_seconds = Some(value),
                "propagationPolicy" => q.propagation_policy = Some(value),
                "labelSelector" => q.label_selector = Some(value),
                "fieldSelector" => q.field_selector = Some(value),
                "limit" => q.limit = Some(value),
                "continue" => q.continue_token = Some(value).filter(|v| !v.is_empty()),
                "resourceVersion" => q.resource_version = Some(value),
                "resourceVersionMatch" => {
                    q.resource_version_match = Some(value).filter(|v| !v.is_empty())
                }
                "allowWatchBookmarks" => q.allow_bookmarks = truthy(&value),
                "timeoutSeconds" => q.timeout_seconds = Some(value),
                "sendInitialEvents" => q.send_initial_events = truthy(&value),
                _ => {}
            }
        }
        q
    }

    pub fn list_options(&self, rt: &ResourceType) -> Result<ListOptions, ApiError> {
        let label_selector =
            LabelSelector::parse(self.label_selector.as_deref().unwrap_or_default())
                .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = rt.selectable_fields();
        let field_selector =
            FieldSelector::parse(self.field_selector.as_deref().unwrap_or_default(), &fields)
                .map_err(ApiError::bad_request)?;
        // A negative limit means no limit, as on kube-apiserver.
        let limit = match &self.limit {
            None => None,
            Some(text) => {
                let n = text
                    .parse::<i64>()
                    .map_err(|_| invalid("limit", text, "must be an integer"))?;
                (n > 0).then_some(n as usize)
            }
        };
        if let Some(rv) = self.resource_version.as_deref().filter(|rv| !rv.is_empty()) {
            if rv.parse::<u64>().is_err() {
                return Err(ApiError::bad_request(format!(
                    "invalid resource version \"{rv}\""
                )));
            }
            if self.continue_token.is_some() && !self.watch {
                return Err(ApiError::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
        } else if self.resource_version_match.is_some() && !self.watch {
            return Err(invalid(
                "resourceVersionMatch",
                self.resource_version_match.as_deref().unwrap_or_default(),
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if let Some(m) = &self.resource_version_match
            && m != "Exact"
            && m != "NotOlderThan"
        {
            return Err(invalid(
                "resourceVersionMatch",
                m,
                "supported values: \"Exact\", \"NotOlderThan\"",
            ));
        }
        Ok(ListOptions {
            label_selector,
            field_selector,
            limit,
            continue_token: self.continue_token.clone(),
            resource_version: self.resource_version.clone(),
            resource_version_match: self.resource_version_match.clone(),
        })
    }

    pub fn watch_options(&self, rt: &ResourceType) -> Result<WatchOptions, ApiError> {
        let timeout = match &self.timeout_seconds {
            None => None,
            Some(text) => Some(Duration::from_secs(text.parse::<u64>().map_err(|_| {
                invalid("timeoutSeconds", text, "must be a non-negative integer")
            })?))
            // Zero means "no timeout requested", as for the real server.
            .filter(|d| !d.is_zero()),
        };
        Ok(WatchOptions {
            filter: self.list_options(rt)?,
            allow_bookmarks: self.allow_bookmarks,
            timeout,
            send_initial_events: self.send_initial_events,
        })
    }
}
