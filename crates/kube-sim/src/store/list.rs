//! Lists with selectors and paging. A paged list is one consistent snapshot:
//! the first page captures every matching object at one resourceVersion and
//! later pages are served from that capture through the `continue` token.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};

use super::Store;
use crate::error::ApiError;
use crate::object::StoredObject;
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};

#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub label_selector: LabelSelector,
    pub field_selector: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// A page of results in storage order, with the list's resourceVersion.
pub struct ListPage {
    pub items: Vec<Arc<StoredObject>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

#[derive(Serialize, Deserialize)]
struct ContinueToken {
    rv: u64,
    id: u64,
    offset: usize,
}

struct Snapshot {
    items: Arc<Vec<Arc<StoredObject>>>,
    taken: Instant,
}

#[derive(Default)]
pub(crate) struct Snapshots {
    by_id: HashMap<u64, Snapshot>,
    next_id: u64,
}

/// Snapshots beyond this many are dropped oldest first.
const MAX_SNAPSHOTS: usize = 256;

const TOO_OLD_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

pub fn matches(rt: &ResourceType, opts: &ListOptions, obj: &StoredObject) -> bool {
    opts.label_selector.matches(&obj.labels) && opts.field_selector.matches(|f| obj.field(rt, f))
}

impl Store {
    pub fn list(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        opts: &ListOptions,
    ) -> Result<ListPage, ApiError> {
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        if let Some(token) = &opts.continue_token {
            return self.continue_list(token, opts.limit);
        }
        let (items, rv) = {
            let state = self.state.lock();
            if opts.resource_version_match.as_deref() == Some("Exact") {
                let wanted = opts.resource_version.as_deref().unwrap_or_default();
                if wanted != state.rv.to_string() {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {wanted} ({})",
                        state.rv
                    )));
                }
            }
            // "0" (any) and unset (most recent) never wait; a version the
            // store has not reached cannot be served.
            if let Some(wanted) = opts
                .resource_version
                .as_deref()
                .and_then(|rv| rv.parse::<u64>().ok())
                .filter(|rv| *rv > state.rv)
            {
                return Err(ApiError::resource_version_too_large(wanted, state.rv));
            }
            let store = state.resource(rt)?;
            // The selectors are matched after the lock is released: a
            // selective list of a large namespace (a DeleteCollection of
            // three pods among 11,000) would otherwise hold every write up
            // for the whole scan. The snapshot is consistent at `state.rv`.
            let candidates: Vec<Arc<StoredObject>> = match namespace.filter(|_| rt.namespaced) {
                Some(ns) => store
                    .objects
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((obj_ns, _), _)| obj_ns == ns)
                    .map(|(_, o)| Arc::clone(o))
                    .collect(),
                None => store.objects.values().cloned().collect(),
            };
            (candidates, state.rv)
        };
        let items: Vec<Arc<StoredObject>> =
            items.into_iter().filter(|o| matches(rt, opts, o)).collect();
        let limit = opts.limit.filter(|l| *l > 0);
        match limit {
            Some(limit) if items.len() > limit => {
                let items = Arc::new(items);
                let id = self.keep_snapshot(items.clone());
                Ok(self.page(items, rv, id, 0, limit))
            }
            _ => Ok(ListPage {
                items,
                resource_version: rv,
                continue_token: None,
                remaining: None,
            }),
        }
    }

    fn keep_snapshot(&self, items: Arc<Vec<Arc<StoredObject>>>) -> u64 {
        let mut snapshots = self.snapshots.lock();
        let ttl = self.config.snapshot_ttl;
        snapshots.by_id.retain(|_, s| s.taken.elapsed() < ttl);
        while snapshots.by_id.len() >= MAX_SNAPSHOTS {
            let oldest = snapshots
                .by_id
                .iter()
                .min_by_key(|(_, s)| s.taken)
                .map(|(id, _)| *id);
            match oldest {
                Some(id) => snapshots.by_id.remove(&id),
                None => break,
            };
        }
        snapshots.next_id += 1;
        let id = snapshots.next_id;
        snapshots.by_id.insert(
            id,
            Snapshot {
                items,
                taken: Instant::now(),
            },
        );
        id
    }

    fn page(
        &self,
        items: Arc<Vec<Arc<StoredObject>>>,
        rv: u64,
        id: u64,
        offset: usize,
        limit: usize,
    ) -> ListPage {
        let end = (offset + limit).min(items.len());
        let page: Vec<_> = items.get(offset..end).unwrap_or_default().to_vec();
        let remaining = items.len() - end;
        let continue_token = (remaining > 0).then(|| {
            let token = ContinueToken {
                rv,
                id,
                offset: end,
            };
            let json = serde_json::to_vec(&token).unwrap_or_default();
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
        });
        ListPage {
            items: page,
            resource_version: rv,
            continue_token,
            remaining: (remaining > 0).then_some(remaining),
        }
    }

    fn continue_list(&self, token: &str, limit: Option<usize>) -> Result<ListPage, ApiError> {
        let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad())?;
        let token: ContinueToken = serde_json::from_slice(&raw).map_err(|_| bad())?;
        let items = {
            let snapshots = self.snapshots.lock();
            snapshots
                .by_id
                .get(&token.id)
                .filter(|s| s.taken.elapsed() < self.config.snapshot_ttl)
                .map(|s| s.items.clone())
        };
        let items = items.ok_or_else(|| ApiError::expired(TOO_OLD_CONTINUE))?;
        let limit = limit.filter(|l| *l > 0).unwrap_or(items.len());
        Ok(self.page(items, token.rv, token.id, token.offset, limit))
    }

    /// The JSON list document for a page, built from the stored bytes.
    pub fn render_list(rt: &ResourceType, version: &str, page: &ListPage) -> Bytes {
        let mut meta = serde_json::json!({ "resourceVersion": page.resource_version.to_string() });
        if let Some(token) = &page.continue_token {
            meta["continue"] = token.clone().into();
        }
        if let Some(remaining) = page.remaining {
            meta["remainingItemCount"] = remaining.into();
        }
        let head = serde_json::json!({
            "kind": rt.list_kind(),
            "apiVersion": rt.api_version(version),
            "metadata": meta,
        })
        .to_string();
        let size: usize = page.items.iter().map(|o| o.json.len() + 1).sum();
        let mut out = BytesMut::with_capacity(head.len() + size + 16);
        // Splice `"items":[...]` into the header object.
        out.put_slice(&head.as_bytes()[..head.len() - 1]);
        out.put_slice(b",\"items\":[");
        for (i, obj) in page.items.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            let rendered = Store::render(rt, version, obj);
            if rt.custom {
                out.put_slice(&rendered);
            } else {
                put_without_type_meta(&mut out, &rendered);
            }
        }
        out.put_slice(b"]}");
        out.freeze()
    }
}

/// Writes a built-in object's JSON without its leading `apiVersion` and
/// `kind`: kube-apiserver leaves them out of the items of built-in lists
/// (the list names the type), while custom resource lists keep them. Stored
/// objects begin with those two fields, so this copies a slice straight into
/// the list; any other layout is re-encoded.
fn put_without_type_meta(out: &mut BytesMut, json: &[u8]) {
    fn skip_string_field<'a>(rest: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
        let rest = rest.strip_prefix(b"\"")?.strip_prefix(name)?;
        let rest = rest.strip_prefix(b"\":\"")?;
        let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
        (rest[end] == b'"').then(|| &rest[end + 1..])
    }
    let fast = json.strip_prefix(b"{").and_then(|rest| {
        let rest = skip_string_field(rest, b"apiVersion")?.strip_prefix(b",")?;
        let rest = skip_string_field(rest, b"kind")?;
        rest.strip_prefix(b",")
    });
    if let Some(rest) = fast {
        out.put_u8(b'{');
        out.put_slice(rest);
        return;
    }
    match serde_json::from_slice::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(mut map)) => {
            map.remove("apiVersion");
            map.remove("kind");
            match serde_json::to_vec(&map) {
                Ok(bytes) => out.put_slice(&bytes),
                Err(_) => out.put_slice(json),
            }
        }
        _ => out.put_slice(json),
    }
}

#[cfg(test)]
mod type_meta_tests {
    use super::put_without_type_meta;
    use bytes::BytesMut;

    fn cut(json: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        put_without_type_meta(&mut out, json);
        out.to_vec()
    }

    #[test]
    fn leading_api_version_and_kind_are_cut_and_other_layouts_re_encoded() {
        let fast = cut(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#);
        assert_eq!(&*fast, br#"{"metadata":{"name":"a"}}"#);
        let slow = cut(br#"{"metadata":{"name":"a"},"kind":"ConfigMap","apiVersion":"v1"}"#);
        let value: serde_json::Value = serde_json::from_slice(&slow).unwrap();
        assert_eq!(value, serde_json::json!({"metadata": {"name": "a"}}));
    }
}
