//! Fault injection in front of the Kubernetes routes: added latency, error
//! answers, watch streams cut after N events, a forced in-stream 410, and
//! outage windows. Faults are added through the library (`sim.faults()`) or
//! the admin endpoint `/sim/faults`; every injected fault is counted in
//! `kube_sim_faults_injected_total`.
//!
//! Matching and bookkeeping are plain functions over [`RequestInfo`]; the
//! axum middleware ([`layer`]) only applies the decision to the exchange.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::AppState;
use super::path::ApiPath;
use crate::metrics::Metrics;

/// The Kubernetes verb of a request, as RBAC and audit logs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    #[serde(rename = "deletecollection")]
    DeleteCollection,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// The verb of a resource request, or None for methods the API has no verb for.
    fn classify(method: &Method, named: bool, watch: bool) -> Option<Self> {
        Some(match (method.as_str(), named) {
            ("GET", _) if watch => Verb::Watch,
            ("GET", true) => Verb::Get,
            ("GET", false) => Verb::List,
            ("POST", _) => Verb::Create,
            ("PUT", _) => Verb::Update,
            ("PATCH", _) => Verb::Patch,
            ("DELETE", true) => Verb::Delete,
            ("DELETE", false) => Verb::DeleteCollection,
            _ => return None,
        })
    }
}

/// What a fault does to a matching request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum FaultAction {
    /// Answer with this HTTP code and a `Status` body instead of serving the
    /// request. 429 and 503 carry `Retry-After` (default 1 s).
    Error {
        code: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_seconds: Option<u64>,
    },
    /// Delay the request before serving it.
    Latency { millis: u64 },
    /// Serve the watch, then end its stream after this many events.
    CloseWatchAfter { events: u64 },
    /// Answer the watch with one in-stream `ERROR` 410 Expired, as the real
    /// server does for a resourceVersion it no longer has; clients relist.
    ExpireWatch,
    /// For this long every Kubernetes request fails with 503 and every open
    /// watch is dropped. Starts when the fault is added; ignores matchers.
    Outage { millis: u64 },
}

/// A fault rule: which requests it hits, what it does, how often.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    /// Verbs it applies to; empty means every verb.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verbs: Vec<Verb>,
    /// Resource plural (`pods`); None means every resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// API group (`""` for core); None means any group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Namespace; None means any namespace and cluster-scoped requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Object name; None means any object and collection requests. Lets a
    /// test fail the writes of one object while its siblings succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub action: FaultAction,
    /// Fire for the next N matching requests only; None means forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
    /// Chance (0..=1) that a matching request is hit; None means always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
}

impl Fault {
    fn with_action(action: FaultAction) -> Self {
        Self {
            verbs: Vec::new(),
            resource: None,
            group: None,
            namespace: None,
            name: None,
            action,
            times: None,
            probability: None,
        }
    }

    /// Answer matching requests with `code` (409, 429, 500, 503, ...).
    pub fn error(code: u16) -> Self {
        Self::with_action(FaultAction::Error {
            code,
            retry_after_seconds: None,
        })
    }

    /// Delay matching requests by `delay`.
    pub fn latency(delay: Duration) -> Self {
        Self::with_action(FaultAction::Latency {
            millis: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// End matching watch streams after `events` events.
    pub fn close_watch_after(events: u64) -> Self {
        Self::with_action(FaultAction::CloseWatchAfter { events }).verb(Verb::Watch)
    }

    /// The next matching watch gets an in-stream 410 Expired (once, unless
    /// `times` says otherwise).
    pub fn expire_next_watch() -> Self {
        Self::with_action(FaultAction::ExpireWatch)
            .verb(Verb::Watch)
            .times(1)
    }

    /// Every Kubernetes request fails with 503 for `duration`, open watches drop.
    pub fn outage(duration: Duration) -> Self {
        Self::with_action(FaultAction::Outage {
            millis: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// Limit to one verb on one resource plural (any group).
    pub fn on(self, verb: Verb, resource: impl Into<String>) -> Self {
        self.verb(verb).resource(resource)
    }

    /// Add a verb to the verbs this fault applies to.
    pub fn verb(mut self, verb: Verb) -> Self {
        if !self.verbs.contains(&verb) {
            self.verbs.push(verb);
        }
        self
    }

    pub fn resource(mut self, plural: impl Into<String>) -> Self {
        self.resource = Some(plural.into());
        self
    }

    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Limit to requests for the object of this name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    pub fn probability(mut self, p: f64) -> Self {
        self.probability = Some(p);
        self
    }

    /// `Retry-After` seconds for an error fault (ignored by other kinds).
    pub fn retry_after(mut self, seconds: u64) -> Self {
        if let FaultAction::Error {
            retry_after_seconds,
            ..
        } = &mut self.action
        {
            *retry_after_seconds = Some(seconds);
        }
        self
    }

    fn check(&self) -> Result<(), FaultError> {
        if let Some(p) = self.probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(FaultError::Probability(p));
        }
        if let FaultAction::Error { code, .. } = self.action
            && !(400..=599).contains(&code)
        {
            return Err(FaultError::Code(code));
        }
        Ok(())
    }

    /// Whether this rule's matchers select the request (probability aside).
    fn matches(&self, request: &RequestInfo) -> bool {
        let watch_only = matches!(
            self.action,
            FaultAction::CloseWatchAfter { .. } | FaultAction::ExpireWatch
        );
        if watch_only && request.verb != Verb::Watch {
            return false;
        }
        (self.verbs.is_empty() || self.verbs.contains(&request.verb))
            && self
                .resource
                .as_ref()
                .is_none_or(|r| *r == request.resource || *r == request.label())
            && self.group.as_ref().is_none_or(|g| *g == request.group)
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| request.namespace.as_deref() == Some(ns.as_str()))
            && self
                .name
                .as_ref()
                .is_none_or(|name| request.name.as_deref() == Some(name.as_str()))
    }
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FaultError {
    #[error("probability {0} is outside 0..=1")]
    Probability(f64),
    #[error("error code {0} is not an HTTP error code (400..=599)")]
    Code(u16),
}

/// A rule as listed by `Faults::list` and `GET /sim/faults`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultStatus {
    pub id: u64,
    pub fault: Fault,
    /// How many more times it fires; None means unlimited.
    pub remaining: Option<u64>,
    /// How many requests it has hit so far.
    pub fired: u64,
}

/// A Kubernetes resource request, as fault rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestInfo {
    pub verb: Verb,
    pub group: String,
    pub resource: String,
    /// `status`, `exec`, `binding`, ...
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    /// The object's name; None for collection requests.
    pub name: Option<String>,
}

impl RequestInfo {
    /// Classifies a request; None for anything but a resource path.
    pub fn from_parts(method: &Method, uri: &Uri) -> Option<Self> {
        let ApiPath::Resource(target) = ApiPath::parse(uri.path())? else {
            return None;
        };
        let watch = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .any(|(k, v)| k == "watch" && matches!(v.as_ref(), "true" | "1" | "True"));
        let verb = Verb::classify(method, target.name.is_some(), watch)?;
        Some(Self {
            verb,
            group: target.group,
            resource: target.plural,
            subresource: target.subresource,
            namespace: target.namespace,
            name: target.name,
        })
    }

    /// The resource as metrics name it: `pods`, or `pods/status` for a subresource.
    pub fn label(&self) -> String {
        match &self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// What to do to one request.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    pub latency: Duration,
    /// (HTTP code, Retry-After seconds)
    pub error: Option<(u16, Option<u64>)>,
    pub close_watch_after: Option<u64>,
    pub expire_watch: bool,
    pub outage: bool,
}

struct Rule {
    id: u64,
    fault: Fault,
    remaining: Option<u64>,
    fired: u64,
}

struct FaultState {
    next_id: u64,
    rules: Vec<Rule>,
    rng: StdRng,
    outage_until: Option<Instant>,
}

/// The fault rules of one kube-sim instance. Get it with `KubeSim::faults()`.
pub struct Faults {
    state: Mutex<FaultState>,
    metrics: Arc<Metrics>,
    /// Bumped when an outage starts; open watches end when they see it.
    outage_started: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

/// Seed used until `Faults::seed` is called, so runs are reproducible.
const DEFAULT_SEED: u64 = 0x6b75_6265_2d73_696d;

impl Faults {
    pub(crate) fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            state: Mutex::new(FaultState {
                next_id: 1,
                rules: Vec::new(),
                rng: StdRng::seed_from_u64(DEFAULT_SEED),
                outage_until: None,
            }),
            metrics,
            outage_started: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Adds a rule (or starts an outage) and returns its id.
    pub fn add(&self, fault: Fault) -> Result<u64, FaultError> {
        fault.check()?;
        let mut state = self.state.lock();
        let id = state.next_id;
        state.next_id += 1;
        if let FaultAction::Outage { millis } = fault.action {
            state.outage_until = Some(Instant::now() + Duration::from_millis(millis));
            drop(state);
            self.outage_started.send_modify(|n| *n += 1);
            return Ok(id);
        }
        let remaining = fault.times;
        state.rules.push(Rule {
            id,
            fault,
            remaining,
            fired: 0,
        });
        Ok(id)
    }

    /// Starts an outage window now.
    pub fn outage(&self, duration: Duration) {
        // An outage has no probability or code to reject.
        let _ = self.add(Fault::outage(duration));
    }

    /// Removes one rule; true if it existed.
    pub fn remove(&self, id: u64) -> bool {
        let mut state = self.state.lock();
        let before = state.rules.len();
        state.rules.retain(|r| r.id != id);
        state.rules.len() != before
    }

    /// Removes every rule and ends a running outage; returns how many rules went.
    pub fn clear(&self) -> usize {
        let mut state = self.state.lock();
        let n = state.rules.len();
        state.rules.clear();
        state.outage_until = None;
        n
    }

    /// Re-seeds the random source behind `probability`.
    pub fn seed(&self, seed: u64) {
        self.state.lock().rng = StdRng::seed_from_u64(seed);
    }

    /// The active rules (exhausted `times` rules are gone).
    pub fn list(&self) -> Vec<FaultStatus> {
        self.state
            .lock()
            .rules
            .iter()
            .map(|r| FaultStatus {
                id: r.id,
                fault: r.fault.clone(),
                remaining: r.remaining,
                fired: r.fired,
            })
            .collect()
    }

    /// Time left in the current outage, if one is running.
    pub fn outage_remaining(&self) -> Option<Duration> {
        let until = self.state.lock().outage_until?;
        let left = until.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Decides what happens to a resource request, consuming `times` budgets
    /// of the rules that fire, and counts the injected faults.
    pub fn decide(&self, request: &RequestInfo) -> Decision {
        let mut decision = Decision::default();
        let mut state = self.state.lock();
        if state.outage_until.is_some_and(|t| Instant::now() < t) {
            decision.outage = true;
            drop(state);
            self.count(request, "outage");
            return decision;
        }
        let FaultState { rules, rng, .. } = &mut *state;
        let mut fired = Vec::new();
        for rule in rules.iter_mut() {
            if !rule.fault.matches(request) || rule.remaining == Some(0) {
                continue;
            }
            // A second error rule would be shadowed by the first; leave its budget alone.
            if decision.error.is_some() && matches!(rule.fault.action, FaultAction::Error { .. }) {
                continue;
            }
            if let Some(p) = rule.fault.probability
                && !rng.random_bool(p)
            {
                continue;
            }
            rule.fired += 1;
            if let Some(left) = rule.remaining.as_mut() {
                *left -= 1;
            }
            match rule.fault.action {
                FaultAction::Error {
                    code,
                    retry_after_seconds,
                } => {
                    let retry_after =
                        retry_after_seconds.or(matches!(code, 429 | 503).then_some(1));
                    decision.error = Some((code, retry_after));
                    fired.push(format!("error_{code}"));
                }
                FaultAction::Latency { millis } => {
                    decision.latency += Duration::from_millis(millis);
                    fired.push("latency".to_string());
                }
                FaultAction::CloseWatchAfter { events } => {
                    decision.close_watch_after = Some(
                        decision
                            .close_watch_after
                            .map_or(events, |other| other.min(events)),
                    );
                }
                FaultAction::ExpireWatch => {
                    decision.expire_watch = true;
                    fired.push("expire_watch".to_string());
                }
                FaultAction::Outage { .. } => {}
            }
        }
        rules.retain(|r| r.remaining != Some(0));
        drop(state);
        for fault in fired {
            self.count(request, &fault);
        }
        decision
    }

    fn count(&self, request: &RequestInfo, fault: &str) {
        self.metrics
            .fault(request.verb.as_str(), &request.label(), fault);
    }
}

fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// The `Status` document of an injected error.
fn status_body(code: u16, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason_for(code),
        "code": code,
    })
}

fn error_response(code: u16, retry_after: Option<u64>, message: &str) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = status_body(code, message);
    if let Some(seconds) = retry_after {
        body["details"] = json!({ "retryAfterSeconds": seconds });
    }
    let mut response = (status, body.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(seconds) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// A 200 watch answer holding only the 410 event the real server sends for
/// a resourceVersion it has compacted away.
fn expired_watch_response() -> Response {
    let event = json!({
        "type": "ERROR",
        "object": status_body(410, "too old resource version: injected by kube-sim fault"),
    });
    let mut response = Response::new(Body::from(format!("{event}\n")));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Paths an outage takes down besides resource requests.
fn is_kubernetes_path(path: &str) -> bool {
    ["/api", "/apis", "/openapi", "/version"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// The middleware in front of the Kubernetes routes.
pub async fn layer(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let faults = state.faults.clone();
    let Some(info) = RequestInfo::from_parts(request.method(), request.uri()) else {
        if is_kubernetes_path(request.uri().path()) && faults.outage_remaining().is_some() {
            return error_response(503, Some(1), "kube-sim: injected outage");
        }
        return next.run(request).await;
    };
    let metrics = state.metrics.clone();
    let decision = faults.decide(&info);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    let early = if decision.outage {
        Some(error_response(503, Some(1), "kube-sim: injected outage"))
    } else if let Some((code, retry_after)) = decision.error {
        Some(error_response(
            code,
            retry_after,
            &format!("kube-sim: injected {code} for {}", info.verb.as_str()),
        ))
    } else if decision.expire_watch {
        Some(expired_watch_response())
    } else {
        None
    };
    if let Some(response) = early {
        metrics.request(
            info.verb.as_str(),
            &info.label(),
            response.status().as_u16(),
        );
        return response;
    }
    let response = next.run(request).await;
    metrics.request(
        info.verb.as_str(),
        &info.label(),
        response.status().as_u16(),
    );
    if info.verb != Verb::Watch || response.status() != StatusCode::OK {
        return response;
    }
    let (parts, body) = response.into_parts();
    let guarded = WatchGuard {
        inner: Box::pin(body.into_data_stream()),
        outage: faults.outage_started.subscribe(),
        close_after: decision.close_watch_after,
        seen: 0,
        pending: Vec::new(),
        faults: faults.clone(),
        info,
    };
    Response::from_parts(parts, Body::from_stream(guarded.into_stream()))
}

type DataStream = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, axum::Error>> + Send>>;

/// Wraps a watch body: ends it at an outage, or after `close_after` events.
struct WatchGuard {
    inner: DataStream,
    outage: tokio::sync::watch::Receiver<u64>,
    close_after: Option<u64>,
    seen: u64,
    /// Bytes of an event line not yet complete.
    pending: Vec<u8>,
    faults: Arc<Faults>,
    info: RequestInfo,
}

impl WatchGuard {
    fn into_stream(mut self) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        self.outage.borrow_and_update();
        futures::stream::unfold(Some(self), |guard| async move {
            let mut guard = guard?;
            loop {
                let chunk = tokio::select! {
                    chunk = guard.inner.next() => chunk,
                    changed = guard.outage.changed() => {
                        if changed.is_ok() {
                            guard.faults.count(&guard.info, "outage");
                            return None;
                        }
                        // The fault set is gone with the server; keep serving.
                        continue;
                    }
                };
                let chunk = match chunk {
                    Some(Ok(chunk)) => chunk,
                    // The producer ended or failed: end the body.
                    Some(Err(_)) | None => return None,
                };
                let Some(limit) = guard.close_after else {
                    return Some((Ok(chunk), Some(guard)));
                };
                let (emit, events, complete) =
                    take_events(&mut guard.pending, &chunk, limit - guard.seen.min(limit));
                guard.seen += events;
                if complete {
                    guard.faults.count(&guard.info, "close_watch");
                    // Emit what fits, then end the stream on the next poll.
                    return Some((Ok(emit), None));
                }
                if emit.is_empty() {
                    continue;
                }
                return Some((Ok(emit), Some(guard)));
            }
        })
    }
}

/// Splits a chunk of newline-delimited events: returns the bytes to pass on
/// (whole events only, at most `budget` of them), how many events they hold,
/// and whether the budget is now used up. Partial lines wait in `pending`.
pub fn take_events(pending: &mut Vec<u8>, chunk: &[u8], budget: u64) -> (Bytes, u64, bool) {
    if budget == 0 {
        return (Bytes::new(), 0, true);
    }
    pending.extend_from_slice(chunk);
    let mut end = 0;
    let mut events = 0;
    for (i, b) in pending.iter().enumerate() {
        if *b == b'\n' {
            end = i + 1;
            events += 1;
            if events == budget {
                break;
            }
        }
    }
    let emit = Bytes::copy_from_slice(&pending[..end]);
    pending.drain(..end);
    (emit, events, events == budget)
}

/// `GET /sim/faults`
pub async fn list_faults(State(state): State<AppState>) -> Response {
    let body = json!({
        "faults": state.faults.list(),
        "outageRemainingMillis": state.faults.outage_remaining().map(|d| d.as_millis() as u64),
    });
    json_ok(StatusCode::OK, &body)
}

/// `POST /sim/faults` with a [`Fault`] as JSON. Only `application/json`
/// is accepted (415 otherwise): a browser can send a cross-origin POST
/// without a preflight only as form data or `text/plain`, so a web page
/// cannot inject faults even where no token is asked for.
pub async fn add_fault(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let base = content_type.split(';').next().unwrap_or_default().trim();
    if !base.eq_ignore_ascii_case("application/json") {
        return crate::error::ApiError::unsupported_media_type(content_type, &["application/json"])
            .into_response();
    }
    let fault: Fault = match serde_json::from_slice(&body) {
        Ok(fault) => fault,
        Err(e) => {
            return error_response(400, None, &format!("the body is not a fault spec: {e}"));
        }
    };
    match state.faults.add(fault) {
        Ok(id) => json_ok(StatusCode::CREATED, &json!({ "id": id })),
        Err(e) => error_response(400, None, &e.to_string()),
    }
}

/// `DELETE /sim/faults`
pub async fn clear_faults(State(state): State<AppState>) -> Response {
    let removed = state.faults.clear();
    json_ok(StatusCode::OK, &json!({ "removed": removed }))
}

/// `DELETE /sim/faults/{id}`
pub async fn remove_fault(State(state): State<AppState>, Path(id): Path<u64>) -> Response {
    if state.faults.remove(id) {
        json_ok(StatusCode::OK, &json!({ "removed": 1 }))
    } else {
        error_response(404, None, &format!("no fault with id {id}"))
    }
}

/// `GET /metrics`
pub async fn metrics(State(state): State<AppState>) -> Response {
    let mut response = state.metrics.encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::OPENMETRICS_CONTENT_TYPE),
    );
    response
}

fn json_ok(code: StatusCode, body: &Value) -> Response {
    let mut response = (code, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, uri: &str) -> RequestInfo {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        RequestInfo::from_parts(&method, &uri.parse().unwrap()).unwrap()
    }

    fn faults() -> Faults {
        Faults::new(Arc::new(Metrics::new()))
    }

    #[test]
    fn requests_are_classified_by_verb_and_resource() {
        let r = request(
            "GET",
            "/api/v1/namespaces/default/pods?watch=true&resourceVersion=3",
        );
        assert_eq!((r.verb, r.resource.as_str()), (Verb::Watch, "pods"));
        assert_eq!(r.namespace.as_deref(), Some("default"));
        assert_eq!(request("GET", "/api/v1/nodes/n1").verb, Verb::Get);
        assert_eq!(request("GET", "/api/v1/nodes").verb, Verb::List);
        let r = request(
            "PATCH",
            "/apis/coordination.k8s.io/v1/namespaces/a/leases/l",
        );
        assert_eq!(
            (r.verb, r.group.as_str()),
            (Verb::Patch, "coordination.k8s.io")
        );
        assert_eq!(
            request("DELETE", "/api/v1/namespaces/a/configmaps").verb,
            Verb::DeleteCollection
        );
        let version = RequestInfo::from_parts(&Method::GET, &"/version".parse().unwrap());
        assert_eq!(version, None);
    }

    #[test]
    fn a_plural_matches_its_subresources_and_a_subresource_only_itself() {
        let f = faults();
        f.add(Fault::error(500).resource("pods/status")).unwrap();
        let status = request("PATCH", "/api/v1/namespaces/a/pods/p/status");
        assert_eq!(status.label(), "pods/status");
        assert_eq!(
            f.decide(&request("PATCH", "/api/v1/namespaces/a/pods/p"))
                .error,
            None
        );
        assert_eq!(f.decide(&status).error, Some((500, None)));
        f.clear();
        f.add(Fault::error(500).resource("pods")).unwrap();
        assert_eq!(f.decide(&status).error, Some((500, None)));
        assert_eq!(
            f.metrics
                .faults_injected("patch", "pods/status", "error_500"),
            2
        );
    }

    #[test]
    fn a_name_matcher_hits_only_that_object() {
        let f = faults();
        f.add(
            Fault::error(500)
                .resource("configmaps/status")
                .name("broken"),
        )
        .unwrap();
        let broken = request("PUT", "/api/v1/namespaces/a/configmaps/broken/status");
        let sibling = request("PUT", "/api/v1/namespaces/a/configmaps/fine/status");
        let list = request("GET", "/api/v1/namespaces/a/configmaps");
        assert_eq!(broken.name.as_deref(), Some("broken"));
        assert_eq!(f.decide(&broken).error, Some((500, None)));
        assert_eq!(f.decide(&sibling).error, None);
        assert_eq!(f.decide(&list).error, None);
    }

    #[test]
    fn times_limits_how_often_a_fault_fires() {
        let f = faults();
        f.add(Fault::error(503).on(Verb::List, "pods").times(2))
            .unwrap();
        let list = request("GET", "/api/v1/namespaces/default/pods");
        let get = request("GET", "/api/v1/namespaces/default/pods/p");
        assert_eq!(f.decide(&get).error, None);
        assert_eq!(f.decide(&list).error, Some((503, Some(1))));
        assert_eq!(f.decide(&list).error, Some((503, Some(1))));
        assert_eq!(f.decide(&list).error, None);
        assert!(f.list().is_empty());
        assert_eq!(f.metrics.faults_injected("list", "pods", "error_503"), 2);
    }

    #[test]
    fn probability_draws_are_reproducible_with_a_seed() {
        let run = |seed| {
            let f = faults();
            f.seed(seed);
            f.add(Fault::error(500).probability(0.5)).unwrap();
            let r = request("GET", "/api/v1/namespaces/default/configmaps");
            (0..64)
                .map(|_| f.decide(&r).error.is_some())
                .collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        let hits = a.iter().filter(|h| **h).count();
        assert!((16..=48).contains(&hits), "{hits} of 64 hit at p=0.5");
    }

    #[test]
    fn watch_faults_leave_other_verbs_alone() {
        let f = faults();
        f.add(Fault::expire_next_watch().resource("pods")).unwrap();
        let list = request("GET", "/api/v1/pods");
        assert!(!f.decide(&list).expire_watch);
        let watch = request("GET", "/api/v1/pods?watch=1");
        assert!(f.decide(&watch).expire_watch);
        assert!(!f.decide(&watch).expire_watch);
    }

    #[test]
    fn latency_adds_up_and_an_error_still_applies() {
        let f = faults();
        f.add(Fault::latency(Duration::from_millis(30))).unwrap();
        f.add(Fault::latency(Duration::from_millis(20)).namespace("a"))
            .unwrap();
        f.add(
            Fault::error(429)
                .retry_after(7)
                .on(Verb::Create, "configmaps"),
        )
        .unwrap();
        let d = f.decide(&request("POST", "/api/v1/namespaces/a/configmaps"));
        assert_eq!(d.latency, Duration::from_millis(50));
        assert_eq!(d.error, Some((429, Some(7))));
        let d = f.decide(&request("POST", "/api/v1/namespaces/b/configmaps"));
        assert_eq!(d.latency, Duration::from_millis(30));
    }

    #[tokio::test]
    async fn an_outage_fails_everything_until_it_ends_or_is_cleared() {
        let f = faults();
        f.outage(Duration::from_secs(60));
        assert!(f.decide(&request("GET", "/api/v1/pods")).outage);
        assert!(f.outage_remaining().is_some());
        f.clear();
        assert!(!f.decide(&request("GET", "/api/v1/pods")).outage);
    }

    #[test]
    fn bad_specs_are_rejected() {
        let f = faults();
        assert_eq!(f.add(Fault::error(200)), Err(FaultError::Code(200)));
        assert_eq!(
            f.add(Fault::error(500).probability(1.5)),
            Err(FaultError::Probability(1.5))
        );
    }

    #[test]
    fn fault_specs_read_from_json() {
        let spec = r#"{"verbs":["list","watch"],"resource":"pods","namespace":"default",
            "action":{"type":"error","code":429,"retryAfterSeconds":3},"times":2}"#;
        let fault: Fault = serde_json::from_str(spec).unwrap();
        assert_eq!(
            fault,
            Fault::error(429)
                .verb(Verb::List)
                .verb(Verb::Watch)
                .resource("pods")
                .namespace("default")
                .retry_after(3)
                .times(2)
        );
        let outage: Fault =
            serde_json::from_str(r#"{"action":{"type":"outage","millis":1500}}"#).unwrap();
        assert_eq!(outage, Fault::outage(Duration::from_millis(1500)));
    }

    #[test]
    fn event_splitting_keeps_whole_lines_within_the_budget() {
        let mut pending = Vec::new();
        let (emit, n, done) = take_events(&mut pending, b"{\"a\":1}\n{\"b\"", 2);
        assert_eq!((&emit[..], n, done), (&b"{\"a\":1}\n"[..], 1, false));
        let (emit, n, done) = take_events(&mut pending, b":2}\n{\"c\":3}\n", 1);
        assert_eq!((&emit[..], n, done), (&b"{\"b\":2}\n"[..], 1, true));
        assert_eq!(pending, b"{\"c\":3}\n");
    }
}
