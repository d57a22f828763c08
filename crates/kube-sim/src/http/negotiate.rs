//! Protobuf bodies in and out, as kube-apiserver negotiates them.
//!
//! Requests: a built-in kind's create, update, subresource or delete body
//! may be `application/vnd.kubernetes.protobuf`; a custom resource's may
//! not (415, as on the real server, where custom resources are JSON only).
//!
//! Answers: when the Accept header prefers protobuf (client-go sends
//! `application/vnd.kubernetes.protobuf, application/json`), a built-in
//! kind's answer, list, Status or watch stream is encoded in protobuf. The
//! handlers produce JSON; this runs on the finished answer, like the Table
//! conversion. An object protobuf cannot hold (a field newer than the
//! schema) is answered in JSON, which the client accepted too.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::HttpBody as _;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use futures::{Stream, StreamExt};
use http_body_util::BodyExt;
use serde_json::Value;

use crate::error::ApiError;
use crate::object::StoredObject;
use crate::protobuf;
use crate::resources::ResourceType;
use crate::store::KeptObject;

/// The media type a request body was sent as.
pub fn is_protobuf_body(headers: &HeaderMap) -> bool {
    content_type(headers) == protobuf::CONTENT_TYPE
}

fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim)
        .unwrap_or_default()
}

/// Decodes a protobuf request body, answering what is wrong with it as a
/// 400 Status (a kind with no protobuf form is a 415).
pub fn decode_body(body: &[u8]) -> Result<Value, ApiError> {
    protobuf::decode_object(body).map_err(|e| match e {
        protobuf::ProtoError::UnknownKind { .. } => ApiError::unsupported_media_type(
            &format!("{}: {e}", protobuf::CONTENT_TYPE),
            &["application/json", "application/yaml"],
        ),
        other => ApiError::bad_request(format!(
            "the protobuf body of the request could not be decoded: {other}"
        )),
    })
}

/// The 415 a custom resource's protobuf body gets.
pub fn custom_resource_refusal() -> ApiError {
    ApiError::unsupported_media_type(
        protobuf::CONTENT_TYPE,
        &[
            "application/json",
            "application/yaml",
            "application/apply-patch+yaml",
            "application/merge-patch+json",
            "application/json-patch+json",
        ],
    )
}

/// Whether the Accept header puts protobuf before JSON.
pub fn prefers_protobuf(headers: &HeaderMap) -> bool {
    // client-go's header names protobuf first: answered without splitting
    // (a protobuf write asks this three times).
    if let Some(first) = headers.get(header::ACCEPT)
        && first.to_str().is_ok()
        && let Some(rest) = first
            .as_bytes()
            .strip_prefix(protobuf::CONTENT_TYPE.as_bytes())
        && matches!(rest.first(), None | Some(b',' | b';' | b' '))
    {
        return true;
    }
    for media in headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let base = media.split(';').next().unwrap_or_default().trim();
        match base {
            protobuf::CONTENT_TYPE => return true,
            "application/json" | "*/*" | "application/*" | "application/yaml" => return false,
            _ => {}
        }
    }
    false
}

/// Whether a write's answer of `rt` seen through `version` will be
/// protobuf that can be encoded from the object the write keeps in
/// memory: the kind has a protobuf form and the answer is the stored
/// object as is (not another version's or a view's rendering of it).
pub fn answers_from_memory(headers: &HeaderMap, rt: &ResourceType, version: &str) -> bool {
    !rt.custom
        && rt.stored_as.is_none()
        && version == rt.storage_version
        && prefers_protobuf(headers)
}

/// The object a JSON answer was rendered from, still in memory, for
/// [`convert`] to encode instead of reading the answer's text again.
#[derive(Clone)]
struct AnswerObject(Arc<Value>);

/// Attaches the object `kept` holds when it is the one `answer` renders.
pub fn with_kept_object(
    mut response: Response,
    kept: &KeptObject,
    answer: &Arc<StoredObject>,
) -> Response {
    if let Some(value) = kept.take_for(answer) {
        response
            .extensions_mut()
            .insert(AnswerObject(Arc::new(value)));
    }
    response
}

/// Re-encodes a finished JSON answer in protobuf when the client prefers
/// it and the answer's kind has a protobuf form.
pub async fn convert(
    headers: &HeaderMap,
    custom: bool,
    watch: bool,
    response: Response,
) -> Response {
    if custom || !prefers_protobuf(headers) {
        return response;
    }
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json") && !v.contains("as=Table"));
    if !json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    if let Some(AnswerObject(value)) = parts.extensions.remove::<AnswerObject>() {
        let json_len = usize::try_from(body.size_hint().lower()).unwrap_or_default();
        return match protobuf::encode_object_in_memory(&value, json_len) {
            Ok(encoded) => protobuf_answer(parts, encoded),
            // The text would not encode either: answer the JSON.
            Err(_) => Response::from_parts(parts, body),
        };
    }
    if watch && parts.status == StatusCode::OK {
        parts.headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(protobuf::WATCH_CONTENT_TYPE),
        );
        parts.headers.remove(header::CONTENT_LENGTH);
        return Response::from_parts(
            parts,
            Body::from_stream(watch_frames(body.into_data_stream())),
        );
    }
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Response::from_parts(parts, Body::empty()),
    };
    match protobuf::encode_json_object(&bytes) {
        Ok(encoded) => protobuf_answer(parts, encoded),
        Err(_) => Response::from_parts(parts, Body::from(bytes)),
    }
}

fn protobuf_answer(mut parts: axum::http::response::Parts, encoded: Vec<u8>) -> Response {
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(protobuf::CONTENT_TYPE),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(encoded))
}

/// Turns a JSON watch stream (one event per line) into protobuf frames.
fn watch_frames(
    inner: impl Stream<Item = Result<Bytes, axum::Error>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
    let mut pending: Vec<u8> = Vec::new();
    inner
        .take_while(|chunk| std::future::ready(chunk.is_ok()))
        .filter_map(move |chunk| {
            let mut out = Vec::new();
            if let Ok(chunk) = chunk {
                pending.extend_from_slice(&chunk);
                while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=pos).collect();
                    out.extend_from_slice(&frame(&line));
                }
            }
            std::future::ready((!out.is_empty()).then(|| Ok(Bytes::from(out))))
        })
}

/// One event's frame; an event protobuf cannot hold becomes an ERROR event
/// naming why, so the client sees the failure instead of a silent gap.
fn frame(line: &[u8]) -> Vec<u8> {
    let Ok(event) = serde_json::from_slice::<Value>(line) else {
        return Vec::new();
    };
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let object = event.get("object").unwrap_or(&Value::Null);
    protobuf::encode_watch_frame(kind, object).unwrap_or_else(|e| {
        let status = serde_json::json!({
            "apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 500,
            "reason": "InternalError",
            "message": format!("kube-sim could not encode a watch event in protobuf: {e}; watch with Accept: application/json"),
        });
        protobuf::encode_watch_frame("ERROR", &status).unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepting(values: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(header::ACCEPT, HeaderValue::from_bytes(value).unwrap());
        }
        headers
    }

    #[test]
    fn protobuf_is_preferred_only_when_named_before_json() {
        let preferred: [&[&[u8]]; 5] = [
            &[b"application/vnd.kubernetes.protobuf, application/json"],
            &[b"application/vnd.kubernetes.protobuf"],
            &[b"application/vnd.kubernetes.protobuf;q=0.9,application/json"],
            &[b" application/vnd.kubernetes.protobuf , application/json"],
            &[b"text/plain", b"application/vnd.kubernetes.protobuf"],
        ];
        for values in preferred {
            assert!(prefers_protobuf(&accepting(values)), "{values:?}");
        }
        let not_preferred: [&[&[u8]]; 6] = [
            &[],
            &[b"application/json, application/vnd.kubernetes.protobuf"],
            &[b"*/*"],
            &[b"application/vnd.kubernetes.protobufx"],
            &[
                b"application/vnd.kubernetes.protobuf;stream=watch\xff",
                b"application/json",
            ],
            &[b"application/yaml", b"application/vnd.kubernetes.protobuf"],
        ];
        for values in not_preferred {
            assert!(!prefers_protobuf(&accepting(values)), "{values:?}");
        }
    }
}
