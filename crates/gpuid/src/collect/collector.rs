//! Processing one device-plugin pod: exec, parse, compare with the Node's
//! stored state, hand changes to the export pipeline, patch the Node.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use controller_kit::{Action, CachedStore, EventSink};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::{Api, Resource};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::ack::{ExportAcks, accepted};
use super::exec::{ExecError, run_nvidia_smi};
use super::metrics::{CollectorMetrics, NodeLabel, PodResult};
use super::node_state::{
    ExportReason, NodeKeys, NodeUpdate, StoredState, export_patch, export_reason, node_patch,
};
use super::pod::{DevicePluginPod, collectable};
use super::settings::CollectorSettings;
use super::sightings::Sightings;
use super::sink::RecordSink;
use crate::inventory::{ChangeEvent, ChangeKind, diff, inventory_hash};
use crate::record::{GpuRecord, NodeIdentity, Observation, RecordError, records_from_report};
use crate::smi::{Limits, ParseError};

/// Why processing a pod failed; the key is retried with backoff. Export
/// failures are not here: the pipeline retries those without re-collecting.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("nvidia-smi output of {pod} is not usable: {source}")]
    Parse {
        pod: String,
        #[source]
        source: ParseError,
    },
    #[error("records of {pod}: {source}")]
    Record {
        pod: String,
        #[source]
        source: RecordError,
    },
    #[error("cannot read node {node}: {source}")]
    NodeRead {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot patch node {node}: {source}")]
    NodePatch {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error("export pipeline refused records of node {node}: {message}")]
    Submit { node: String, message: String },
}

impl CollectError {
    /// The `reason` label of `gpuid_exec_errors`.
    pub fn reason(&self) -> &'static str {
        match self {
            CollectError::Exec(error) => error.reason(),
            CollectError::Parse { .. } => "parse",
            CollectError::Record { .. } => "record",
            CollectError::NodeRead { .. } => "node_read",
            CollectError::NodePatch { .. } => "node_patch",
            CollectError::Submit { .. } => "submit",
        }
    }
}

impl CollectError {
    /// The reason of the Kubernetes Event on the pod, for the failures a
    /// user can act on (the device plugin or its nvidia-smi); API and
    /// pipeline errors are the collector's own and only logged and counted.
    pub fn event_reason(&self) -> Option<&'static str> {
        match self {
            CollectError::Exec(ExecError::OutputTooLarge { .. }) => Some("NvidiaSmiOutputTooLarge"),
            CollectError::Exec(_) => Some("NvidiaSmiFailed"),
            // nvidia-smi printed its own failure text instead of XML (it
            // may exit 0 doing so): a failed nvidia-smi, not bad output.
            CollectError::Parse {
                source: ParseError::SmiFailure { .. },
                ..
            } => Some("NvidiaSmiFailed"),
            CollectError::Parse { .. } | CollectError::Record { .. } => {
                Some("NvidiaSmiOutputMalformed")
            }
            CollectError::NodeRead { .. }
            | CollectError::NodePatch { .. }
            | CollectError::Submit { .. } => None,
        }
    }
}

/// The events API caps a note at 1 KiB.
const NOTE_MAX: usize = 1000;

fn note(text: String) -> String {
    if text.len() <= NOTE_MAX {
        return text;
    }
    let mut end = NOTE_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// One line per inventory change: counts by kind and the new GPU count.
fn change_note(events: &[ChangeEvent], node: &str, gpus: usize) -> String {
    let count = |kind: ChangeKind| events.iter().filter(|e| e.kind == kind).count();
    let moved_here = events
        .iter()
        .filter(|e| e.kind == ChangeKind::GpuMoved)
        .filter(|e| e.after.as_ref().is_some_and(|r| r.node_name == node))
        .count();
    let changed = count(ChangeKind::GpuChanged);
    format!(
        "GPU inventory changed: {} added, {} removed, {moved_here} moved here, {changed} changed; {gpus} GPUs now",
        count(ChangeKind::GpuAdded),
        count(ChangeKind::GpuRemoved),
    )
}

/// A GPU that left a node during the first sweep after start and has not
/// been seen elsewhere yet: its removal waits for the sweep to finish, so
/// that a GPU moved while no collector ran becomes one `gpu_moved`.
struct HeldRemoval {
    node: String,
    record: GpuRecord,
    event: ChangeEvent,
}

/// What one collection changed.
struct Changes {
    /// Events to export now (held removals left out).
    events: Vec<ChangeEvent>,
    /// Nodes whose held removals this collection claimed as moves.
    released: Vec<String>,
    /// The note of the node's Kubernetes Event, when something changed.
    note: Option<String>,
}

/// The first pass over the pods cached at start.
enum Sweep {
    Running(HashSet<String>),
    Done,
}

/// Last successful collection of a pod.
struct Collected {
    uid: String,
    node: String,
    at: Instant,
}

#[derive(Default)]
struct Memory {
    /// Pod key → last collection (skip re-collection on every status update).
    collected: HashMap<String, Collected>,
    /// Where each GPU was last seen (move detection); seeded from the
    /// Nodes' stored inventories at start.
    gpus: Sightings,
    /// GPU key → its removal held during the first sweep.
    held: HashMap<String, HeldRemoval>,
    /// Node → its export patch, waiting until its held removals are exported.
    held_acks: HashMap<String, Value>,
    sweep: Option<Sweep>,
}

impl Memory {
    fn holds_removals_of(&self, node: &str) -> bool {
        self.held.values().any(|held| held.node == node)
    }
}

/// The per-pod reconciler. Cheap to share; all state is behind one lock
/// held only for map updates.
pub struct Collector {
    settings: CollectorSettings,
    /// Label prefix and the exporter whose state this collector keeps.
    node_keys: NodeKeys,
    client: kube::Client,
    pods: Vec<CachedStore<DevicePluginPod>>,
    sink: Arc<dyn RecordSink>,
    metrics: CollectorMetrics,
    acks: ExportAcks,
    events: EventSink,
    memory: Mutex<Memory>,
    /// Set once the first reconcile seeded the memory and began the sweep.
    started: OnceCell<()>,
}

impl Collector {
    pub fn new(
        settings: CollectorSettings,
        client: kube::Client,
        pods: Vec<CachedStore<DevicePluginPod>>,
        sink: Arc<dyn RecordSink>,
        metrics: CollectorMetrics,
        acks: ExportAcks,
    ) -> Collector {
        Collector {
            node_keys: NodeKeys::new(&settings.label_prefix, &settings.exporter)
                .with_upstream_labels(settings.upstream_labels),
            settings,
            events: EventSink::new(client.clone(), "gpuid", None),
            client,
            pods,
            sink,
            metrics,
            acks,
            memory: Mutex::new(Memory::default()),
            started: OnceCell::new(),
        }
    }

    pub fn metrics(&self) -> &CollectorMetrics {
        &self.metrics
    }

    fn cached_pod(&self, namespace: &str, name: &str) -> Option<Arc<DevicePluginPod>> {
        self.pods
            .iter()
            .find_map(|store| store.get_namespaced(namespace, name))
    }

    /// Processes the pod `namespace/name` (the queue key).
    pub async fn reconcile(
        &self,
        key: String,
        _cancel: CancellationToken,
    ) -> Result<Action, CollectError> {
        self.started.get_or_init(|| self.start()).await;
        let result = self.reconcile_pod(&key).await;
        self.swept(&key).await;
        result
    }

    /// Runs before the first pod: seeds move detection from the inventories
    /// stored on the Nodes and notes which pods the first sweep covers.
    async fn start(&self) {
        let keys: HashSet<String> = self
            .pods
            .iter()
            .flat_map(|store| store.state())
            .map(|pod| super::pod::pod_key(&pod))
            .collect();
        let seeded = self.stored_inventories().await;
        let mut memory = self.memory.lock();
        for (node, records) in seeded {
            memory.gpus.seed(&node, &records);
        }
        memory.sweep = Some(Sweep::Running(keys));
    }

    /// Every Node's stored inventory, by pages. Without it (no `list`
    /// permission, API down) a GPU that moved to a node collected before
    /// its old one is reported as added plus removed.
    async fn stored_inventories(&self) -> Vec<(String, Vec<GpuRecord>)> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut params = ListParams::default().limit(super::run::LIST_PAGE_SIZE);
        let mut found = Vec::new();
        loop {
            let page = match nodes.list(&params).await {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(%error, "cannot list nodes; GPUs moved while gpuid was down may be reported as removed and added");
                    return found;
                }
            };
            for node in &page.items {
                let Some(annotations) = node.metadata.annotations.as_ref() else {
                    continue;
                };
                let stored = StoredState::from_annotations(&self.node_keys, annotations);
                if !stored.records.is_empty() {
                    found.push((
                        node.metadata.name.clone().unwrap_or_default(),
                        stored.records,
                    ));
                }
            }
            match page.metadata.continue_.filter(|token| !token.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return found,
            }
        }
    }

    /// Marks `key` as visited by the first sweep; when the sweep is complete,
    /// held removals that no other node claimed go out as `gpu_removed`.
    async fn swept(&self, key: &str) {
        let (events, acks) = {
            let mut memory = self.memory.lock();
            let Some(Sweep::Running(keys)) = memory.sweep.as_mut() else {
                return;
            };
            keys.remove(key);
            if !keys.is_empty() {
                return;
            }
            memory.sweep = Some(Sweep::Done);
            let events: Vec<ChangeEvent> =
                memory.held.drain().map(|(_, held)| held.event).collect();
            let acks: Vec<(String, Value)> = memory.held_acks.drain().collect();
            (events, acks)
        };
        if !events.is_empty()
            && let Err(error) = self.sink.submit(Vec::new(), events).await
        {
            // The nodes keep their old hash, so the next collection retries.
            tracing::warn!(%error, "cannot export the removals held during the first sweep");
            return;
        }
        let position = accepted(&self.sink.stats());
        for (node, patch) in acks {
            self.acks.push(position, node, patch);
        }
    }

    async fn reconcile_pod(&self, key: &str) -> Result<Action, CollectError> {
        let key = key.to_owned();
        let Some((namespace, name)) = key.split_once('/') else {
            return Ok(Action::AwaitChange);
        };
        let Some(pod) = self.cached_pod(namespace, name) else {
            self.pod_gone(&key).await?;
            return Ok(Action::AwaitChange);
        };
        let node_name = match collectable(&pod) {
            Ok(node) => node.to_owned(),
            Err(_) => {
                // A terminating pod keeps its collection: when it is gone,
                // `pod_gone` checks its node and reports the node's GPUs
                // removed if the node went too (a drained node's pods
                // terminate before the Node is deleted; forgetting them here
                // lost those removals on a real cluster).
                self.metrics.pod_processed(PodResult::Skipped);
                return Ok(Action::AwaitChange);
            }
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        controller_kit::record_uid(&uid);
        if let Some(wait) = self.recently_collected(&key, &uid) {
            return Ok(wait);
        }
        match self.collect(namespace, name, &key, &node_name).await {
            Ok(result) => {
                self.metrics.pod_processed(result);
                self.memory.lock().collected.insert(
                    key,
                    Collected {
                        uid,
                        node: node_name,
                        at: Instant::now(),
                    },
                );
                Ok(self.after_collection())
            }
            Err(error) => {
                self.metrics.pod_processed(PodResult::Error);
                self.metrics.exec_error(error.reason());
                if let Some(reason) = error.event_reason() {
                    self.events
                        .publish_or_log(
                            &pod.object_ref(&()),
                            EventType::Warning,
                            reason,
                            "Collect",
                            Some(note(error.to_string())),
                        )
                        .await;
                }
                Err(error)
            }
        }
    }

    /// How often a pod is collected again without any change to it: the
    /// resync period, else the heartbeat (which needs a fresh collection to
    /// re-export), else never.
    fn recollect_every(&self) -> Option<std::time::Duration> {
        [self.settings.resync, self.settings.heartbeat]
            .into_iter()
            .find(|period| !period.is_zero())
    }

    fn after_collection(&self) -> Action {
        match self.recollect_every() {
            Some(period) => Action::RequeueAfter(period),
            None => Action::AwaitChange,
        }
    }

    /// `Some(action)` when this pod UID was collected and is not due again.
    fn recently_collected(&self, key: &str, uid: &str) -> Option<Action> {
        let memory = self.memory.lock();
        let collected = memory.collected.get(key)?;
        if collected.uid != uid {
            return None;
        }
        let Some(period) = self.recollect_every() else {
            return Some(Action::AwaitChange);
        };
        let age = collected.at.elapsed();
        (age < period).then(|| Action::RequeueAfter(period - age))
    }

    async fn collect(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
        node_name: &str,
    ) -> Result<PodResult, CollectError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let started = Instant::now();
        // The Node read and the exec do not depend on each other; together
        // they cost one round trip less per pod (an exec for a Node that
        // turns out to be gone is wasted, which is rare).
        let limits = Limits {
            max_input_bytes: self.settings.output_limit,
            ..Limits::DEFAULT
        };
        let (node, report) = tokio::join!(
            nodes.get_opt(node_name),
            run_nvidia_smi(
                &pods,
                name,
                &self.settings.container,
                self.settings.timeout,
                limits,
            )
        );
        let node = match node {
            Ok(Some(node)) => node,
            Ok(None) => return Ok(PodResult::Skipped),
            Err(source) => {
                return Err(CollectError::NodeRead {
                    node: node_name.to_owned(),
                    source,
                });
            }
        };
        // The document was parsed as it arrived and is not held here.
        let report = report?.map_err(|source| CollectError::Parse {
            pod: key.to_owned(),
            source,
        })?;
        self.metrics
            .collection_duration
            .observe(started.elapsed().as_secs_f64());

        let now = Timestamp::now();
        let identity = node_identity(&node);
        let observation = Observation {
            cluster: &self.settings.cluster,
            node: &identity,
            source_pod: key,
            observed_at: now,
            collector_version: &self.settings.collector_version,
        };
        let records =
            records_from_report(&observation, &report).map_err(|source| CollectError::Record {
                pod: key.to_owned(),
                source,
            })?;
        self.metrics
            .node_gpus
            .get_or_create(&NodeLabel {
                node: node_name.to_owned(),
            })
            .set(records.len() as i64);

        let labels = node.metadata.labels.clone().unwrap_or_default();
        let annotations = node.metadata.annotations.clone().unwrap_or_default();
        let stored = StoredState::from_annotations(&self.node_keys, &annotations);
        let hash = inventory_hash(&records);
        let reason = export_reason(&stored, hash, now, self.settings.heartbeat);
        let (events, released, change_note) = match reason {
            ExportReason::Changed => {
                let changes = self.changes(node_name, &stored.records, &records, now);
                (changes.events, changes.released, changes.note)
            }
            ExportReason::Heartbeat | ExportReason::Unchanged => (Vec::new(), Vec::new(), None),
        };
        self.remember(node_name, &records);
        let exported = reason != ExportReason::Unchanged;
        if exported {
            self.sink
                .submit(records.clone(), events)
                .await
                .map_err(|error| CollectError::Submit {
                    node: node_name.to_owned(),
                    message: error.to_string(),
                })?;
            // Everything accepted so far, ours included, must settle first.
            // The labels go in the same patch as the export record: one Node
            // write per change, off the worker's path, and labels that never
            // run ahead of what the backend has.
            let position = accepted(&self.sink.stats());
            let update = NodeUpdate {
                record_export: Some((hash, now)),
                records,
            };
            let patch = node_patch(&self.node_keys, &labels, &annotations, &update)
                .unwrap_or_else(|| export_patch(&self.node_keys, hash, now, &update.records));
            let mut memory = self.memory.lock();
            if memory.holds_removals_of(node_name) {
                // Recorded only once its held removals are exported too, so
                // a crash before that reports them again after the restart.
                memory.held_acks.insert(node_name.to_owned(), patch);
            } else {
                self.acks.push(position, node_name.to_owned(), patch);
            }
            for node in released {
                if !memory.holds_removals_of(&node)
                    && let Some(patch) = memory.held_acks.remove(&node)
                {
                    self.acks.push(position, node, patch);
                }
            }
        } else {
            let update = NodeUpdate {
                record_export: None,
                records,
            };
            if let Some(patch) = node_patch(&self.node_keys, &labels, &annotations, &update) {
                nodes
                    .patch(node_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(|source| CollectError::NodePatch {
                        node: node_name.to_owned(),
                        source,
                    })?;
            }
        }
        if let Some(text) = change_note {
            // A fresh recorder: kube's Recorder folds every later event with
            // the same reason on the same object into a series that keeps
            // the first note, and each change needs its own note. Sent in
            // the background: an Event is best effort and must not slow
            // collection.
            let sink = EventSink::new(self.client.clone(), "gpuid", None);
            let regarding = node.object_ref(&());
            tokio::spawn(async move {
                sink.publish_or_log(
                    &regarding,
                    EventType::Normal,
                    "GpuInventoryChanged",
                    "Collect",
                    Some(note(text)),
                )
                .await;
            });
        }
        Ok(if exported {
            PodResult::Exported
        } else {
            PodResult::Unchanged
        })
    }

    /// Change events from the node's stored inventory to `now_records`,
    /// and the nodes whose held removals this node's records claimed.
    ///
    /// A GPU last seen on another node (or seeded from another node's
    /// stored inventory at start) is compared with that sighting, so it is
    /// one `gpu_moved` instead of an addition here; a stored GPU that has
    /// since been seen elsewhere is not reported as removed again; during
    /// the first sweep a removal nobody claimed yet is held back, since the
    /// GPU may show up on a node collected later.
    fn changes(
        &self,
        node_name: &str,
        stored: &[GpuRecord],
        now_records: &[GpuRecord],
        now: Timestamp,
    ) -> Changes {
        let mut memory = self.memory.lock();
        let memory = &mut *memory;
        let seen_elsewhere =
            |record: &GpuRecord| memory.gpus.elsewhere(&record.gpu_key(), node_name);
        let mut before: Vec<GpuRecord> = stored
            .iter()
            .filter(|record| seen_elsewhere(record).is_none())
            .cloned()
            .collect();
        let mut released = Vec::new();
        for record in now_records {
            if let Some(previous) = seen_elsewhere(record) {
                before.push(previous);
            } else if let Some(held) = memory
                .held
                .remove(&record.gpu_key())
                .filter(|held| held.node != node_name)
            {
                released.push(held.node.clone());
                before.push(held.record);
            }
        }
        let mut events = diff(&before, now_records, now);
        // The Kubernetes Event tells the whole change, held removals included.
        let note = (!events.is_empty() || stored.is_empty())
            .then(|| change_note(&events, node_name, now_records.len()));
        if matches!(memory.sweep, Some(Sweep::Running(_))) {
            let (removals, rest): (Vec<ChangeEvent>, Vec<ChangeEvent>) = events
                .into_iter()
                .partition(|event| event.kind == ChangeKind::GpuRemoved);
            events = rest;
            for event in removals {
                let Some(record) = event.before.clone() else {
                    events.push(event);
                    continue;
                };
                memory.held.insert(
                    event.gpu_key.clone(),
                    HeldRemoval {
                        node: node_name.to_owned(),
                        record,
                        event,
                    },
                );
            }
        }
        Changes {
            events,
            released,
            note,
        }
    }

    fn remember(&self, node_name: &str, records: &[GpuRecord]) {
        self.memory.lock().gpus.remember(node_name, records);
    }

    /// The pod is gone. If its node is gone too, its GPUs are reported removed.
    async fn pod_gone(&self, key: &str) -> Result<(), CollectError> {
        let Some(collected) = self.memory.lock().collected.remove(key) else {
            return Ok(());
        };
        let nodes: Api<Node> = Api::all(self.client.clone());
        let exists = nodes
            .get_opt(&collected.node)
            .await
            .map_err(|source| CollectError::NodeRead {
                node: collected.node.clone(),
                source,
            })?
            .is_some();
        if exists {
            return Ok(());
        }
        let removed = self.memory.lock().gpus.forget(&collected.node);
        let _ = self.metrics.node_gpus.remove(&NodeLabel {
            node: collected.node.clone(),
        });
        let events = diff(&removed, &[], Timestamp::now());
        if !events.is_empty() {
            self.sink
                .submit(Vec::new(), events)
                .await
                .map_err(|error| CollectError::Submit {
                    node: collected.node.clone(),
                    message: error.to_string(),
                })?;
        }
        Ok(())
    }
}

/// The identity fields of a Node.
pub fn node_identity(node: &Node) -> NodeIdentity {
    NodeIdentity {
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node.metadata.uid.clone().unwrap_or_default(),
        provider_id: node.spec.as_ref().and_then(|spec| spec.provider_id.clone()),
        system_uuid: node
            .status
            .as_ref()
            .and_then(|status| status.node_info.as_ref())
            .map(|info| info.system_uuid.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_smis_own_failure_text_is_a_failed_nvidia_smi_event_with_the_text() {
        let source =
            crate::smi::parse(b"Failed to initialize NVML: Driver/library version mismatch\n")
                .unwrap_err();
        let error = CollectError::Parse {
            pod: "gpu-operator/plugin".into(),
            source,
        };
        assert_eq!(error.event_reason(), Some("NvidiaSmiFailed"));
        assert!(
            error.to_string().contains(
                "nvidia-smi reported: Failed to initialize NVML: Driver/library version mismatch"
            ),
            "{error}"
        );
        let malformed = CollectError::Parse {
            pod: "gpu-operator/plugin".into(),
            source: crate::smi::parse(b"<nvidia_smi_log><gpu>").unwrap_err(),
        };
        assert_eq!(malformed.event_reason(), Some("NvidiaSmiOutputMalformed"));
    }
}
