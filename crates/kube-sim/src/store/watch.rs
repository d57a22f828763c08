//! Watch streams: newline-delimited JSON events in resourceVersion order,
//! resumed from the per-resource history, with bookmarks, timeouts, streaming
//! initial lists and the in-stream 410 a client gets when it fell too far behind.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::list::{ListOptions, matches};
use super::{Change, ChangeType, Store};
use crate::error::{ApiError, Cause};
use crate::object::StoredObject;
use crate::resources::{GroupResource, ResourceType};

#[derive(Debug, Clone, Default)]
pub struct WatchOptions {
    pub filter: ListOptions,
    pub allow_bookmarks: bool,
    pub timeout: Option<Duration>,
    pub send_initial_events: bool,
}

/// Events handed to the HTTP body per chunk, at most.
const BATCH: usize = 256;
/// Chunks buffered per watch before the producer waits for the client.
const CHANNEL_DEPTH: usize = 8;

enum Since {
    Events(Vec<Arc<Change>>, u64),
    Expired { compacted: u64 },
    Gone,
}

enum Start {
    Initial(Vec<Arc<StoredObject>>),
    Resume,
    Expired {
        compacted: u64,
    },
    /// The client holds a resourceVersion this store never reached (it came
    /// from an earlier server, before a restart without `--data-dir`).
    TooLarge {
        current: u64,
    },
}

/// A started watch, as its task runs it.
struct WatchTask {
    /// What the client is shown.
    view: WatchView,
    /// The kind whose history the events come from, and the epoch of the
    /// store the watch started on: when a custom resource's CRD is
    /// deleted, its watch drains what the retired store still holds, then
    /// ends, even if the CRD is made again.
    history: (GroupResource, u64),
    /// Wakes the task when the kind changes.
    notify: tokio::sync::watch::Receiver<u64>,
    /// The client's end; closed when it goes away.
    tx: mpsc::Sender<Bytes>,
    opts: WatchOptions,
    /// When the watch times out, if it does.
    deadline: Option<Instant>,
}

/// Everything a watch task needs to filter and render events.
struct WatchView {
    rt: Arc<ResourceType>,
    version: String,
    namespace: Option<String>,
    filter: ListOptions,
}

impl WatchView {
    fn visible(&self, obj: &StoredObject) -> bool {
        let ns_ok = match &self.namespace {
            Some(ns) => obj.namespace == *ns,
            None => true,
        };
        ns_ok && matches(&self.rt, &self.filter, obj)
    }

    fn line(&self, out: &mut BytesMut, kind: &str, object: &[u8]) {
        out.put_slice(b"{\"type\":\"");
        out.put_slice(kind.as_bytes());
        out.put_slice(b"\",\"object\":");
        out.put_slice(object);
        out.put_slice(b"}\n");
    }

    fn render_change(&self, out: &mut BytesMut, change: &Change) {
        let now = self.visible(&change.object);
        let before = change.previous.as_deref().map(|p| self.visible(p));
        let kind = match (change.change, before, now) {
            (ChangeType::Added, _, true) => ChangeType::Added,
            (ChangeType::Deleted, _, true) => ChangeType::Deleted,
            (ChangeType::Modified, Some(true), true) => ChangeType::Modified,
            (ChangeType::Modified, _, true) => ChangeType::Added,
            (ChangeType::Modified, Some(true), false) => {
                // The object left the selection: tell the client with its
                // last visible state, stamped with this change's version.
                if let Some(prev) = &change.previous {
                    let mut value = prev.value();
                    value["metadata"]["resourceVersion"] = Value::String(change.rv.to_string());
                    if self.version != self.rt.storage_version {
                        value["apiVersion"] = Value::String(self.rt.api_version(&self.version));
                    }
                    let json = serde_json::to_vec(&value).unwrap_or_default();
                    self.line(out, "DELETED", &json);
                }
                return;
            }
            _ => return,
        };
        let json = Store::render(&self.rt, &self.version, &change.object);
        self.line(out, kind.as_str(), &json);
    }

    fn bookmark(&self, rv: u64, initial_events_end: bool) -> Bytes {
        let mut metadata = json!({ "resourceVersion": rv.to_string() });
        if initial_events_end {
            metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let object = json!({
            "kind": self.rt.kind,
            "apiVersion": self.rt.api_version(&self.version),
            "metadata": metadata,
        });
        let mut out = BytesMut::new();
        self.line(&mut out, "BOOKMARK", object.to_string().as_bytes());
        out.freeze()
    }

    fn expired(&self, requested: u64, compacted: u64) -> Bytes {
        let status = ApiError::expired(format!(
            "too old resource version: {requested} ({compacted})"
        ))
        .status_json();
        let mut out = BytesMut::new();
        self.line(&mut out, "ERROR", status.to_string().as_bytes());
        out.freeze()
    }
}

impl WatchView {
    /// kube-apiserver leaves such a watch open until the version is reached,
    /// which for a restarted server without its data may be never; kube-sim
    /// ends it with 410 at once so the client relists (issue #11 item 9;
    /// listed in differential/known-differences.yaml).
    fn too_large(&self, requested: u64, current: u64) -> Bytes {
        let status = ApiError::expired(format!(
            "too large resource version: {requested}, current: {current}; the server has no such version: relist"
        ))
        .status_json();
        let mut out = BytesMut::new();
        self.line(&mut out, "ERROR", status.to_string().as_bytes());
        out.freeze()
    }
}

fn parse_rv(text: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            vec![Cause::invalid(
                "resourceVersion",
                &Value::from(text),
                "must be a non-negative integer",
            )],
        )
    })
}

impl Store {
    /// Starts a watch; the stream ends at the timeout, on shutdown, when the
    /// client goes away, when its kind is removed, or after a 410 event.
    pub fn watch(
        self: &Arc<Self>,
        rt: Arc<ResourceType>,
        version: &str,
        namespace: Option<&str>,
        opts: WatchOptions,
    ) -> Result<impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static, ApiError> {
        let requested = opts.filter.resource_version.clone().unwrap_or_default();
        if opts.send_initial_events {
            let mut causes = Vec::new();
            if opts.filter.resource_version_match.as_deref() != Some("NotOlderThan") {
                causes.push(Cause::forbidden(
                    "resourceVersionMatch",
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if !opts.allow_bookmarks {
                causes.push(Cause::forbidden(
                    "allowWatchBookmarks",
                    "sendInitialEvents requires allowWatchBookmarks=true",
                ));
            }
            if !causes.is_empty() {
                return Err(ApiError::invalid("meta.k8s.io", "ListOptions", "", causes));
            }
        }
        let view = WatchView {
            rt: rt.clone(),
            version: version.to_string(),
            namespace: namespace.filter(|_| rt.namespaced).map(str::to_string),
            filter: opts.filter.clone(),
        };
        let gr = rt.storage_key();
        let wants_initial = opts.send_initial_events || requested.is_empty() || requested == "0";
        let requested_rv = if wants_initial {
            0
        } else {
            parse_rv(&requested)?
        };
        let (start, cursor, notify, epoch) = {
            let state = self.state.lock();
            let store = state.resource(&rt)?;
            let notify = store.notify.subscribe();
            let epoch = store.epoch;
            if wants_initial {
                let objects = store
                    .objects
                    .values()
                    .filter(|o| view.visible(o))
                    .cloned()
                    .collect();
                (Start::Initial(objects), state.rv, notify, epoch)
            } else if requested_rv < store.compacted_rv {
                let compacted = store.compacted_rv;
                (Start::Expired { compacted }, requested_rv, notify, epoch)
            } else if requested_rv > state.rv {
                let current = state.rv;
                (Start::TooLarge { current }, requested_rv, notify, epoch)
            } else {
                (Start::Resume, requested_rv, notify, epoch)
            }
        };
        self.stats.watches_started.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<Bytes>(CHANNEL_DEPTH);
        let store = self.clone();
        let deadline = opts.timeout.map(|t| Instant::now() + t);
        let task = WatchTask {
            view,
            history: (gr, epoch),
            notify,
            tx,
            opts,
            deadline,
        };
        tokio::spawn(async move { store.run_watch(task, start, cursor).await });
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|chunk| (Ok(chunk), rx))
        }))
    }

    fn events_since(&self, (gr, epoch): &(GroupResource, u64), cursor: u64) -> Since {
        let state = self.state.lock();
        let Some((store, retired)) = state.store_for_watch(gr, *epoch) else {
            return Since::Gone;
        };
        if retired && store.history.back().is_none_or(|last| last.rv <= cursor) {
            return Since::Gone;
        }
        if cursor < store.compacted_rv {
            return Since::Expired {
                compacted: store.compacted_rv,
            };
        }
        let start = store.history.partition_point(|c| c.rv <= cursor);
        let events: Vec<Arc<Change>> = store.history.range(start..).take(BATCH).cloned().collect();
        let complete = start + events.len() == store.history.len();
        let caught_up = match events.last() {
            Some(last) if !complete => last.rv,
            _ => state.rv,
        };
        Since::Events(events, caught_up)
    }

    /// Sends `task`'s events from `start`, then from the history after
    /// `cursor`, until the watch ends.
    async fn run_watch(&self, task: WatchTask, start: Start, mut cursor: u64) {
        let WatchTask {
            view,
            history,
            mut notify,
            tx,
            opts,
            deadline,
        } = task;
        match start {
            Start::Expired { compacted } => {
                self.stats.watch_expired.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send(view.expired(cursor, compacted)).await;
                return;
            }
            Start::TooLarge { current } => {
                self.stats.watch_expired.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send(view.too_large(cursor, current)).await;
                return;
            }
            Start::Initial(objects) => {
                for chunk in objects.chunks(BATCH) {
                    let mut out = BytesMut::new();
                    for obj in chunk {
                        let json = Store::render(&view.rt, &view.version, obj);
                        view.line(&mut out, "ADDED", &json);
                    }
                    if tx.send(out.freeze()).await.is_err() {
                        return;
                    }
                }
                if opts.send_initial_events {
                    self.stats.bookmarks.fetch_add(1, Ordering::Relaxed);
                    if tx.send(view.bookmark(cursor, true)).await.is_err() {
                        return;
                    }
                }
            }
            Start::Resume => {}
        }
        let interval = self.config.bookmark_interval;
        let mut next_bookmark = Instant::now() + interval;
        loop {
            notify.borrow_and_update();
            match self.events_since(&history, cursor) {
                Since::Gone => return,
                Since::Expired { compacted } => {
                    self.stats.watch_expired.fetch_add(1, Ordering::Relaxed);
                    let _ = tx.send(view.expired(cursor, compacted)).await;
                    return;
                }
                Since::Events(events, caught_up) => {
                    if let Some(last) = events.last() {
                        let mut out = BytesMut::new();
                        for change in &events {
                            view.render_change(&mut out, change);
                        }
                        cursor = last.rv;
                        if !out.is_empty() && tx.send(out.freeze()).await.is_err() {
                            return;
                        }
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            break;
                        }
                        continue;
                    }
                    // Nothing of this kind happened up to `caught_up`.
                    cursor = cursor.max(caught_up);
                }
            }
            let sleep_deadline =
                deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600 * 24));
            tokio::select! {
                changed = notify.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(next_bookmark), if opts.allow_bookmarks => {
                    next_bookmark = Instant::now() + interval;
                    self.stats.bookmarks.fetch_add(1, Ordering::Relaxed);
                    if tx.send(view.bookmark(cursor, false)).await.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep_until(sleep_deadline) => break,
                _ = self.shutdown.cancelled() => return,
                _ = tx.closed() => return,
            }
        }
        // Timed out: a last bookmark lets the client resume without a gap.
        if opts.allow_bookmarks {
            self.stats.bookmarks.fetch_add(1, Ordering::Relaxed);
            let _ = tx.send(view.bookmark(cursor, false)).await;
        }
    }
}
