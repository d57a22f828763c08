//! `meta.k8s.io/v1` Table answers for `kubectl get`: when the Accept header
//! asks for `as=Table;v=v1;g=meta.k8s.io`, a get, list or watch answer is
//! turned into rows with the kind's printer columns: a CRD's
//! `additionalPrinterColumns`, kubectl's familiar columns for pods, nodes,
//! configmaps and namespaces, and NAME/AGE otherwise.
//!
//! The conversion runs on the finished JSON answer, so the store and the
//! request handlers know nothing about it.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;
use serde_json::{Map, Value, json};

use super::path::ApiPath;
use crate::resources::ResourceType;
use crate::store::Store;

pub const TABLE_CONTENT_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

/// Whether the client accepts a `meta.k8s.io/v1` Table (kubectl lists it
/// first, with plain JSON as the fallback).
pub fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| {
            let params: Vec<&str> = media.split(';').map(str::trim).collect();
            params.contains(&"as=Table")
                && params.contains(&"g=meta.k8s.io")
                && params.contains(&"v=v1")
        })
}

/// Whether Table is all the client accepts: an object without metadata (a
/// review) cannot be answered then, and kube-apiserver says 406.
pub fn accepts_only_table(headers: &HeaderMap) -> bool {
    let mut media = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .peekable();
    media.peek().is_some() && media.all(|m| m.split(';').map(str::trim).any(|p| p == "as=Table"))
}

/// What each row carries besides its cells (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    fn from_query(query: &str) -> Self {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "includeObject")
            .map_or(Self::Metadata, |(_, v)| match v.as_ref() {
                "None" => Self::None,
                "Object" => Self::Object,
                _ => Self::Metadata,
            })
    }
}

/// A printer column and how its cell is computed.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub source: Source,
}

#[derive(Debug, Clone)]
pub enum Source {
    Name,
    Age,
    /// A CRD column: a JSONPath with the declared type.
    Path(String),
    Builtin(fn(&Value) -> Value),
}

fn column(name: &str, kind: &str, priority: i64, source: Source) -> Column {
    Column {
        name: name.into(),
        kind: kind.into(),
        format: if matches!(source, Source::Name) {
            "name".into()
        } else {
            String::new()
        },
        description: String::new(),
        priority,
        source,
    }
}

/// Converts a finished answer into a Table when the client asked for one.
pub async fn convert(
    store: &Store,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    response: Response,
) -> Response {
    if method != Method::GET || response.status() != StatusCode::OK || !wants_table(headers) {
        return response;
    }
    let Some(ApiPath::Resource(target)) = ApiPath::parse(uri.path()) else {
        return response;
    };
    if target.subresource.is_some() {
        return response;
    }
    let Some(rt) = store.resolve(&target.group, &target.version, &target.plural) else {
        return response;
    };
    let query = uri.query().unwrap_or_default();
    let include = IncludeObject::from_query(query);
    let columns = columns_for(store, &rt, &target.version);
    let watch = form_urlencoded::parse(query.as_bytes())
        .any(|(k, v)| k == "watch" && matches!(v.as_ref(), "true" | "1" | "True"));
    let (mut parts, body) = response.into_parts();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(TABLE_CONTENT_TYPE),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    if watch {
        let events = table_events(body.into_data_stream(), columns, include);
        return Response::from_parts(parts, Body::from_stream(events));
    }
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Response::from_parts(parts, Body::empty()),
    };
    let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let now = jiff::Timestamp::now();
    let table = match value.get("items").and_then(Value::as_array) {
        Some(items) => {
            let mut meta = Map::new();
            for key in ["resourceVersion", "continue", "remainingItemCount"] {
                if let Some(v) = value.pointer(&format!("/metadata/{key}")) {
                    meta.insert(key.into(), v.clone());
                }
            }
            table(&columns, items, include, Value::Object(meta), now)
        }
        None => {
            let rv = value.pointer("/metadata/resourceVersion").cloned();
            let meta = rv.map_or_else(|| json!({}), |rv| json!({ "resourceVersion": rv }));
            table(&columns, std::slice::from_ref(&value), include, meta, now)
        }
    };
    Response::from_parts(parts, Body::from(table.to_string()))
}

/// Rewrites each watch event's object into a one-row Table (bookmarks into
/// an empty one carrying the resourceVersion; errors stay Status).
fn table_events(
    inner: impl Stream<Item = Result<Bytes, axum::Error>> + Send + 'static,
    columns: Vec<Column>,
    include: IncludeObject,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let columns = Arc::new(columns);
    let mut pending: Vec<u8> = Vec::new();
    inner
        .take_while(|chunk| std::future::ready(chunk.is_ok()))
        .filter_map(move |chunk| {
            let columns = columns.clone();
            let mut out = Vec::new();
            if let Ok(chunk) = chunk {
                pending.extend_from_slice(&chunk);
                while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=pos).collect();
                    out.extend_from_slice(&convert_event(&line, &columns, include));
                }
            }
            std::future::ready((!out.is_empty()).then(|| Ok(Bytes::from(out))))
        })
}

fn convert_event(line: &[u8], columns: &[Column], include: IncludeObject) -> Vec<u8> {
    let Ok(mut event) = serde_json::from_slice::<Value>(line) else {
        return line.to_vec();
    };
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let object = event.get("object").cloned().unwrap_or(Value::Null);
    let rv = object.pointer("/metadata/resourceVersion").cloned();
    let meta = rv.map_or_else(|| json!({}), |rv| json!({ "resourceVersion": rv }));
    let converted = match kind {
        "ERROR" => return line.to_vec(),
        "BOOKMARK" => table(columns, &[], include, meta, jiff::Timestamp::now()),
        _ => table(columns, &[object], include, meta, jiff::Timestamp::now()),
    };
    event["object"] = converted;
    let mut out = event.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// Builds the Table document for some objects.
pub fn table(
    columns: &[Column],
    objects: &[Value],
    include: IncludeObject,
    metadata: Value,
    now: jiff::Timestamp,
) -> Value {
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "type": c.kind,
                "format": c.format,
                "description": c.description,
                "priority": c.priority,
            })
        })
        .collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let cells: Vec<Value> = columns.iter().map(|c| cell(c, obj, now)).collect();
            let mut row = json!({ "cells": cells });
            match include {
                IncludeObject::None => {}
                IncludeObject::Object => row["object"] = obj.clone(),
                IncludeObject::Metadata => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    })
                }
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

fn cell(column: &Column, obj: &Value, now: jiff::Timestamp) -> Value {
    match &column.source {
        Source::Name => obj
            .pointer("/metadata/name")
            .cloned()
            .unwrap_or(Value::Null),
        Source::Age => age(obj.pointer("/metadata/creationTimestamp"), now),
        Source::Builtin(f) => f(obj),
        Source::Path(path) => {
            let found = jsonpath(obj, path);
            let first = match found.as_slice() {
                [] => return Value::Null,
                [one] => (*one).clone(),
                many => Value::String(
                    many.iter()
                        .map(|v| scalar_text(v))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            };
            match column.kind.as_str() {
                "date" => age(Some(&first), now),
                "integer" | "number" | "boolean" => first,
                _ => match first {
                    Value::String(_) | Value::Null => first,
                    other => Value::String(scalar_text(&other)),
                },
            }
        }
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn age(timestamp: Option<&Value>, now: jiff::Timestamp) -> Value {
    let Some(ts) = timestamp
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<jiff::Timestamp>().ok())
    else {
        return json!("<unknown>");
    };
    let seconds = now.as_second() - ts.as_second();
    Value::String(human_duration(seconds))
}

/// Elapsed time the way kubectl's AGE column prints it: two units while
/// short, one unit (s, m, h, d, y) with growing granularity as it gets long.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    let with_rest = |big: i64, unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big}{unit}")
        } else {
            format!("{big}{unit}{small}{small_unit}")
        }
    };
    if minutes < 10 {
        return with_rest(minutes, "m", seconds % 60, "s");
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        return with_rest(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return with_rest(days, "d", hours % 24, "h");
    }
    if days < 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if days < 365 * 8 {
        return with_rest(years, "y", days % 365, "d");
    }
    format!("{years}y")
}

/// Columns for a kind: the CRD's printer columns, a built-in's, or NAME/AGE.
pub fn columns_for(store: &Store, rt: &ResourceType, version: &str) -> Vec<Column> {
    if rt.custom {
        return crd_columns(store, rt, version);
    }
    builtin_columns(&rt.group, &rt.kind)
}

fn default_columns() -> Vec<Column> {
    vec![
        column("Name", "string", 0, Source::Name),
        column("Age", "date", 0, Source::Age),
    ]
}

fn crd_columns(store: &Store, rt: &ResourceType, version: &str) -> Vec<Column> {
    let crd = store
        .resolve("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .and_then(|crd_rt| {
            store
                .get(&crd_rt, None, &format!("{}.{}", rt.plural, rt.group))
                .ok()
        })
        .map(|o| o.value());
    let declared = crd
        .as_ref()
        .and_then(|crd| crd.pointer("/spec/versions"))
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
        })
        .and_then(|v| v.get("additionalPrinterColumns"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if declared.is_empty() {
        return default_columns();
    }
    let mut columns = vec![column("Name", "string", 0, Source::Name)];
    for c in declared {
        let text = |k: &str| {
            c.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let mut col = column(
            &text("name"),
            &text("type"),
            c.get("priority").and_then(Value::as_i64).unwrap_or(0),
            Source::Path(text("jsonPath")),
        );
        col.format = text("format");
        col.description = text("description");
        columns.push(col);
    }
    columns
}

fn builtin_columns(group: &str, kind: &str) -> Vec<Column> {
    match (group, kind) {
        ("", "Pod") => vec![
            column("Name", "string", 0, Source::Name),
            column("Ready", "string", 0, Source::Builtin(pod_ready)),
            column("Status", "string", 0, Source::Builtin(pod_status)),
            column("Restarts", "string", 0, Source::Builtin(pod_restarts)),
            column("Age", "string", 0, Source::Age),
            column(
                "IP",
                "string",
                1,
                Source::Builtin(|o| text_or_none(o, "/status/podIP")),
            ),
            column(
                "Node",
                "string",
                1,
                Source::Builtin(|o| text_or_none(o, "/spec/nodeName")),
            ),
        ],
        ("", "Node") => vec![
            column("Name", "string", 0, Source::Name),
            column("Status", "string", 0, Source::Builtin(node_status)),
            column("Roles", "string", 0, Source::Builtin(node_roles)),
            column("Age", "string", 0, Source::Age),
            column(
                "Version",
                "string",
                0,
                Source::Builtin(|o| text_or_empty(o, "/status/nodeInfo/kubeletVersion")),
            ),
        ],
        ("", "ConfigMap") => vec![
            column("Name", "string", 0, Source::Name),
            column("Data", "integer", 0, Source::Builtin(configmap_data)),
            column("Age", "string", 0, Source::Age),
        ],
        // kube-apiserver's event columns; events.k8s.io/v1 Events are the
        // same objects and are printed from their stored form.
        ("", "Event") => vec![
            column("Last Seen", "string", 0, Source::Builtin(event_last_seen)),
            column(
                "Type",
                "string",
                0,
                Source::Builtin(|o| text_or_empty(o, "/type")),
            ),
            column(
                "Reason",
                "string",
                0,
                Source::Builtin(|o| text_or_empty(o, "/reason")),
            ),
            column("Object", "string", 0, Source::Builtin(event_object)),
            column(
                "Subobject",
                "string",
                1,
                Source::Builtin(|o| text_or_empty(o, "/involvedObject/fieldPath")),
            ),
            column("Source", "string", 1, Source::Builtin(event_source)),
            column(
                "Message",
                "string",
                0,
                Source::Builtin(|o| text_or_empty(o, "/message")),
            ),
            column("First Seen", "string", 1, Source::Builtin(event_first_seen)),
            column("Count", "string", 1, Source::Builtin(event_count)),
            column("Name", "string", 1, Source::Name),
        ],
        ("apps", "Deployment") => vec![
            column("Name", "string", 0, Source::Name),
            column("Ready", "string", 0, Source::Builtin(deployment_ready)),
            column(
                "Up-to-date",
                "string",
                0,
                Source::Builtin(|o| count(o, "/status/updatedReplicas")),
            ),
            column(
                "Available",
                "string",
                0,
                Source::Builtin(|o| count(o, "/status/availableReplicas")),
            ),
            column("Age", "string", 0, Source::Age),
        ],
        ("apps", "ReplicaSet") => vec![
            column("Name", "string", 0, Source::Name),
            column(
                "Desired",
                "integer",
                0,
                Source::Builtin(|o| count(o, "/spec/replicas")),
            ),
            column(
                "Current",
                "integer",
                0,
                Source::Builtin(|o| count(o, "/status/replicas")),
            ),
            column(
                "Ready",
                "integer",
                0,
                Source::Builtin(|o| count(o, "/status/readyReplicas")),
            ),
            column("Age", "string", 0, Source::Age),
        ],
        ("batch", "Job") => vec![
            column("Name", "string", 0, Source::Name),
            column("Status", "string", 0, Source::Builtin(job_status)),
            column("Completions", "string", 0, Source::Builtin(job_completions)),
            column("Age", "string", 0, Source::Age),
        ],
        ("", "Namespace") => vec![
            column("Name", "string", 0, Source::Name),
            column(
                "Status",
                "string",
                0,
                Source::Builtin(|o| text_or_empty(o, "/status/phase")),
            ),
            column("Age", "string", 0, Source::Age),
        ],
        _ => default_columns(),
    }
}

fn count(obj: &Value, pointer: &str) -> Value {
    Value::from(obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0))
}

/// `ready/desired`, as kubectl prints a Deployment.
fn deployment_ready(obj: &Value) -> Value {
    format!(
        "{}/{}",
        count(obj, "/status/readyReplicas"),
        obj.pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1)
    )
    .into()
}

/// The Job's state as kube-apiserver's printer names it.
fn job_status(obj: &Value) -> Value {
    let holds = |kind: &str| {
        obj.pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == kind && c["status"] == "True")
            })
    };
    let state = if holds("Complete") {
        "Complete"
    } else if holds("Failed") {
        "Failed"
    } else if holds("FailureTarget") {
        "FailureTarget"
    } else if holds("SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else if obj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
        "Suspended"
    } else {
        "Running"
    };
    state.into()
}

/// `succeeded/completions` (`succeeded/1 of parallelism` without completions).
fn job_completions(obj: &Value) -> Value {
    let succeeded = count(obj, "/status/succeeded");
    match obj.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(completions) => format!("{succeeded}/{completions}").into(),
        None => format!(
            "{succeeded}/1 of {}",
            obj.pointer("/spec/parallelism")
                .and_then(Value::as_i64)
                .unwrap_or(1)
        )
        .into(),
    }
}

/// The most recent of the event's times, as an age (`lastTimestamp`, else
/// the series' last observation, else `eventTime`).
fn event_last_seen(obj: &Value) -> Value {
    let now = jiff::Timestamp::now();
    let seen = ["/lastTimestamp", "/series/lastObservedTime", "/eventTime"]
        .iter()
        .find_map(|p| {
            obj.pointer(p)
                .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        });
    age(seen, now)
}

fn event_first_seen(obj: &Value) -> Value {
    let now = jiff::Timestamp::now();
    let first = ["/firstTimestamp", "/eventTime"].iter().find_map(|p| {
        obj.pointer(p)
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
    });
    age(first, now)
}

/// `kind/name` of the object the event is about, kind in lower case.
fn event_object(obj: &Value) -> Value {
    let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or_default();
    json!(format!(
        "{}/{}",
        text("/involvedObject/kind").to_lowercase(),
        text("/involvedObject/name")
    ))
}

fn event_source(obj: &Value) -> Value {
    let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let component = match text("/source/component") {
        "" => text("/reportingComponent"),
        component => component,
    };
    match text("/source/host") {
        "" => json!(component),
        host => json!(format!("{component}, {host}")),
    }
}

fn event_count(obj: &Value) -> Value {
    let count = obj
        .pointer("/series/count")
        .or_else(|| obj.pointer("/count"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    json!(count.to_string())
}

fn text_or_none(obj: &Value, pointer: &str) -> Value {
    match obj.pointer(pointer).and_then(Value::as_str) {
        Some(s) if !s.is_empty() => json!(s),
        _ => json!("<none>"),
    }
}

fn text_or_empty(obj: &Value, pointer: &str) -> Value {
    json!(
        obj.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
    )
}

fn array<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn pod_ready(pod: &Value) -> Value {
    let total = array(pod, "/spec/containers").len();
    let ready = array(pod, "/status/containerStatuses")
        .iter()
        .filter(|s| s.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    json!(format!("{ready}/{total}"))
}

fn pod_restarts(pod: &Value) -> Value {
    let restarts: i64 = array(pod, "/status/containerStatuses")
        .iter()
        .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
        .sum();
    json!(restarts.to_string())
}

/// The STATUS kubectl shows: a container's waiting or terminated reason
/// beats the phase, and a deleting pod is Terminating.
fn pod_status(pod: &Value) -> Value {
    let mut reason = pod
        .pointer("/status/reason")
        .or_else(|| pod.pointer("/status/phase"))
        .and_then(Value::as_str)
        .unwrap_or("Unknown")
        .to_string();
    let mut running = false;
    for status in array(pod, "/status/containerStatuses").iter().rev() {
        let state = status.get("state");
        let waiting = state
            .and_then(|s| s.pointer("/waiting/reason"))
            .and_then(Value::as_str);
        let terminated = state.and_then(|s| s.get("terminated"));
        if let Some(w) = waiting.filter(|w| !w.is_empty()) {
            reason = w.to_string();
        } else if let Some(t) = terminated {
            reason = match t.get("reason").and_then(Value::as_str) {
                Some(r) if !r.is_empty() => r.to_string(),
                _ => format!(
                    "ExitCode:{}",
                    t.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                ),
            };
        } else if state.and_then(|s| s.get("running")).is_some()
            && status.get("ready").and_then(Value::as_bool) == Some(true)
        {
            running = true;
        }
    }
    if reason == "Completed" && running {
        reason = "Running".into();
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        reason = "Terminating".into();
    }
    json!(reason)
}

fn node_status(node: &Value) -> Value {
    let ready = array(node, "/status/conditions")
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .and_then(|c| c.get("status").and_then(Value::as_str));
    let mut status = match ready {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    json!(status)
}

fn node_roles(node: &Value) -> Value {
    let mut roles: Vec<String> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| {
                    if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                        (!role.is_empty()).then(|| role.to_string())
                    } else if k == "kubernetes.io/role" {
                        v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
                    } else {
                        None
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    roles.sort();
    roles.dedup();
    if roles.is_empty() {
        json!("<none>")
    } else {
        json!(roles.join(","))
    }
}

fn configmap_data(cm: &Value) -> Value {
    let count = |k: &str| cm.get(k).and_then(Value::as_object).map_or(0, Map::len);
    json!(count("data") + count("binaryData"))
}

/// Evaluates the JSONPath kube-apiserver's printer columns support: `.a.b`,
/// `[n]` and `[-n]`, slices `[start:end:step]` (`[-1:]`), `['key']`, `[*]`
/// and filters `[?(@.field=="value")]`, `!=` and `[?(@.field)]`.
pub fn jsonpath<'a>(root: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path.trim();
    let path = path
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(path);
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut current = vec![root];
    let mut rest = path;
    while !rest.is_empty() {
        let (step, tail) = match next_step(rest) {
            Some(split) => split,
            None => return Vec::new(),
        };
        rest = tail;
        current = current
            .into_iter()
            .flat_map(|v| apply_step(v, &step))
            .collect();
    }
    current
}

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    Slice {
        start: Option<i64>,
        end: Option<i64>,
        step: i64,
    },
    All,
    Filter {
        field: Vec<String>,
        test: FilterTest,
    },
}

#[derive(Debug, PartialEq)]
enum FilterTest {
    Equals(String),
    Differs(String),
    Exists,
}

fn next_step(path: &str) -> Option<(Step, &str)> {
    if let Some(rest) = path.strip_prefix('.') {
        if rest.starts_with('[') || rest.is_empty() {
            return next_step(rest).or(Some((Step::All, "")).filter(|_| rest.is_empty()));
        }
        let end = rest.find(['.', '[']).unwrap_or(rest.len());
        let name = &rest[..end];
        let step = if name == "*" {
            Step::All
        } else {
            Step::Field(name.to_string())
        };
        return Some((step, &rest[end..]));
    }
    let inner_start = path.strip_prefix('[')?;
    let close = if inner_start.starts_with("?(") {
        inner_start.find(")]").map(|i| i + 1)?
    } else {
        inner_start.find(']')?
    };
    let inner = inner_start[..close].trim();
    let tail = &inner_start[close + 1..];
    let step = if inner == "*" {
        Step::All
    } else if let Some(filter) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        let (lhs, test) = if let Some((lhs, rhs)) = filter.split_once("!=") {
            (lhs, FilterTest::Differs(unquote(rhs)))
        } else if let Some((lhs, rhs)) = filter.split_once("==") {
            (lhs, FilterTest::Equals(unquote(rhs)))
        } else {
            (filter, FilterTest::Exists)
        };
        let field = lhs
            .trim()
            .strip_prefix("@.")?
            .split('.')
            .map(str::to_string)
            .collect();
        Step::Filter { field, test }
    } else if inner.contains(':') {
        let mut parts = inner.split(':').map(str::trim);
        let bound = |p: Option<&str>| -> Option<Option<i64>> {
            match p {
                None | Some("") => Some(None),
                Some(n) => n.parse().ok().map(Some),
            }
        };
        let start = bound(parts.next())?;
        let end = bound(parts.next())?;
        let step = bound(parts.next())?.unwrap_or(1);
        if step == 0 || parts.next().is_some() {
            return None;
        }
        Step::Slice { start, end, step }
    } else if let Ok(n) = inner.parse::<i64>() {
        Step::Index(n)
    } else {
        Step::Field(inner.trim_matches(['"', '\'']).to_string())
    };
    Some((step, tail))
}

fn unquote(text: &str) -> String {
    text.trim().trim_matches(['"', '\'']).to_string()
}

/// Go's jsonpath slice: negative bounds count from the end, bounds are
/// clamped to the list, a negative step walks backwards.
fn slice(items: &[Value], start: Option<i64>, end: Option<i64>, step: i64) -> Vec<&Value> {
    let len = items.len() as i64;
    let clamp = |n: i64| if n < 0 { (n + len).max(0) } else { n.min(len) };
    let mut out = Vec::new();
    if step > 0 {
        let (mut i, stop) = (clamp(start.unwrap_or(0)), clamp(end.unwrap_or(len)));
        while i < stop {
            out.extend(items.get(i as usize));
            i += step;
        }
    } else {
        let mut i = start.map_or(len - 1, |s| clamp(s).min(len - 1));
        let stop = end.map_or(-1, clamp);
        while i > stop {
            out.extend(items.get(i as usize));
            i += step;
        }
    }
    out
}

fn apply_step<'a>(value: &'a Value, step: &Step) -> Vec<&'a Value> {
    match step {
        Step::Field(name) => value.get(name).into_iter().collect(),
        Step::Index(n) => {
            let Some(items) = value.as_array() else {
                return Vec::new();
            };
            let index = if *n < 0 { items.len() as i64 + n } else { *n };
            usize::try_from(index)
                .ok()
                .and_then(|i| items.get(i))
                .into_iter()
                .collect()
        }
        Step::All => match value {
            Value::Array(items) => items.iter().collect(),
            Value::Object(map) => map.values().collect(),
            _ => Vec::new(),
        },
        Step::Slice { start, end, step } => value
            .as_array()
            .map(|items| slice(items, *start, *end, *step))
            .unwrap_or_default(),
        Step::Filter { field, test } => value
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter(|item| {
                        let mut cur = Some(*item);
                        for part in field {
                            cur = cur.and_then(|c| c.get(part));
                        }
                        match test {
                            FilterTest::Equals(want) => {
                                cur.is_some_and(|v| scalar_text(v) == *want)
                            }
                            FilterTest::Differs(want) => {
                                cur.is_some_and(|v| scalar_text(v) != *want)
                            }
                            FilterTest::Exists => cur.is_some(),
                        }
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_follows_fields_indexes_and_filters() {
        let obj = json!({
            "spec": {"replicas": 3, "ports": [{"port": 80}, {"port": 443}]},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Synced", "status": "False"}
            ]},
            "metadata": {"labels": {"app.kubernetes.io/name": "w"}}
        });
        assert_eq!(jsonpath(&obj, ".spec.replicas"), vec![&json!(3)]);
        assert_eq!(jsonpath(&obj, ".spec.ports[1].port"), vec![&json!(443)]);
        assert_eq!(jsonpath(&obj, ".spec.ports[-1].port"), vec![&json!(443)]);
        assert_eq!(jsonpath(&obj, ".spec.ports[*].port").len(), 2);
        assert_eq!(
            jsonpath(&obj, r#".status.conditions[?(@.type=="Synced")].status"#),
            vec![&json!("False")]
        );
        assert_eq!(
            jsonpath(&obj, ".metadata.labels['app.kubernetes.io/name']"),
            vec![&json!("w")]
        );
        assert!(jsonpath(&obj, ".spec.missing.deeper").is_empty());
    }

    #[test]
    fn jsonpath_slices_and_filters_as_kube_apiserver_printer_columns_do() {
        let obj = json!({"status": {"conditions": [
            {"type": "Created", "status": "True"},
            {"type": "Running", "status": "False"},
            {"type": "Succeeded", "status": "True", "reason": "Done"},
        ]}});
        // The TFJob CRD's STATE column.
        assert_eq!(
            jsonpath(&obj, ".status.conditions[-1:].type"),
            vec![&json!("Succeeded")]
        );
        assert_eq!(
            jsonpath(&obj, ".status.conditions[0:2].type"),
            vec![&json!("Created"), &json!("Running")]
        );
        assert_eq!(
            jsonpath(&obj, ".status.conditions[::2].type"),
            vec![&json!("Created"), &json!("Succeeded")]
        );
        assert_eq!(
            jsonpath(&obj, ".status.conditions[::-1].type"),
            vec![&json!("Succeeded"), &json!("Running"), &json!("Created")]
        );
        assert_eq!(
            jsonpath(&obj, ".status.conditions[-5:1].type"),
            vec![&json!("Created")]
        );
        assert_eq!(
            jsonpath(&obj, r#".status.conditions[?(@.status!="True")].type"#),
            vec![&json!("Running")]
        );
        assert_eq!(
            jsonpath(&obj, ".status.conditions[?(@.reason)].type"),
            vec![&json!("Succeeded")]
        );
        assert!(jsonpath(&obj, ".status.conditions[-1:].missing").is_empty());
    }

    #[test]
    fn ages_print_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 5 * 60), "3h5m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(400 * 86400), "400d");
        assert_eq!(human_duration(-5), "<invalid>");
    }

    #[test]
    fn accept_headers_select_tables() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json",
            ),
        );
        assert!(wants_table(&headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!wants_table(&headers));
    }

    #[test]
    fn pods_show_ready_status_and_restarts() {
        let pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1,
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
            ]}
        });
        let columns = builtin_columns("", "Pod");
        let t = table(
            &columns,
            &[pod],
            IncludeObject::Metadata,
            json!({}),
            jiff::Timestamp::now(),
        );
        let cells = &t["rows"][0]["cells"];
        assert_eq!(cells[0], "p");
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], "3");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"] == 0)
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["Name", "Ready", "Status", "Restarts", "Age"]);
    }

    #[test]
    fn rows_carry_the_object_the_client_asked_for() {
        let cm = json!({"metadata": {"name": "c"}, "data": {"k": "v"}});
        let columns = builtin_columns("", "ConfigMap");
        let now = jiff::Timestamp::now();
        let include = IncludeObject::from_query("limit=500&includeObject=Object");
        let t = table(&columns, std::slice::from_ref(&cm), include, json!({}), now);
        assert_eq!(t["rows"][0]["object"], cm);
        assert_eq!(t["rows"][0]["cells"][1], 1);
        let include = IncludeObject::from_query("includeObject=None");
        let t = table(&columns, &[cm], include, json!({}), now);
        assert!(t["rows"][0].get("object").is_none());
        assert_eq!(IncludeObject::from_query(""), IncludeObject::Metadata);
    }

    #[test]
    fn nodes_show_readiness_roles_and_version() {
        let node = json!({
            "metadata": {"name": "n", "labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1.33.0"}}
        });
        assert_eq!(node_status(&node), "Ready,SchedulingDisabled");
        assert_eq!(node_roles(&node), "gpu,worker");
        assert_eq!(node_roles(&json!({"metadata": {}})), "<none>");
    }
}
