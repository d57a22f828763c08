//! Processing one device-plugin pod: exec, parse, compare with the Node's
//! stored state, hand changes to the export pipeline, patch the Node.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use controller_kit::{Action, CachedStore};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::ack::{ExportAcks, accepted};
use super::exec::{ExecError, run_nvidia_smi};
use super::metrics::{CollectorMetrics, NodeLabel, PodResult};
use super::node_state::{
    ExportReason, NodeUpdate, StoredState, export_patch, export_reason, node_patch,
};
use super::pod::{NotReady, collectable};
use super::settings::CollectorSettings;
use super::sink::RecordSink;
use crate::inventory::{ChangeEvent, diff, inventory_hash};
use crate::record::{GpuRecord, NodeIdentity, Observation, RecordError, records_from_report};
use crate::smi::{Limits, ParseError, parse_with_limits};

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
    /// GPU key → the node it was last seen on and its record (move detection).
    gpus: HashMap<String, (String, GpuRecord)>,
}

/// The per-pod reconciler. Cheap to share; all state is behind one lock
/// held only for map updates.
pub struct Collector {
    settings: CollectorSettings,
    client: kube::Client,
    pods: Vec<CachedStore<Pod>>,
    sink: Arc<dyn RecordSink>,
    metrics: CollectorMetrics,
    acks: ExportAcks,
    memory: Mutex<Memory>,
}

impl Collector {
    pub fn new(
        settings: CollectorSettings,
        client: kube::Client,
        pods: Vec<CachedStore<Pod>>,
        sink: Arc<dyn RecordSink>,
        metrics: CollectorMetrics,
        acks: ExportAcks,
    ) -> Collector {
        Collector {
            settings,
            client,
            pods,
            sink,
            metrics,
            acks,
            memory: Mutex::new(Memory::default()),
        }
    }

    pub fn metrics(&self) -> &CollectorMetrics {
        &self.metrics
    }

    fn cached_pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
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
        let Some((namespace, name)) = key.split_once('/') else {
            return Ok(Action::AwaitChange);
        };
        let Some(pod) = self.cached_pod(namespace, name) else {
            self.pod_gone(&key).await?;
            return Ok(Action::AwaitChange);
        };
        let node_name = match collectable(&pod) {
            Ok(node) => node.to_owned(),
            Err(reason) => {
                if reason == NotReady::Terminating {
                    self.memory.lock().collected.remove(&key);
                }
                self.metrics.pod_processed(PodResult::Skipped);
                return Ok(Action::AwaitChange);
            }
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
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
        let node = match nodes.get_opt(node_name).await {
            Ok(Some(node)) => node,
            Ok(None) => return Ok(PodResult::Skipped),
            Err(source) => {
                return Err(CollectError::NodeRead {
                    node: node_name.to_owned(),
                    source,
                });
            }
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let started = Instant::now();
        let output = run_nvidia_smi(
            &pods,
            name,
            &self.settings.container,
            self.settings.timeout,
            self.settings.output_limit,
        )
        .await?;
        let limits = Limits {
            max_input_bytes: self.settings.output_limit,
            ..Limits::DEFAULT
        };
        let report = parse_with_limits(&output, limits).map_err(|source| CollectError::Parse {
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
        let stored = StoredState::from_annotations(&self.settings.label_prefix, &annotations);
        let hash = inventory_hash(&records);
        let reason = export_reason(&stored, hash, now, self.settings.heartbeat);
        let events = match reason {
            ExportReason::Changed => self.changes(node_name, &stored.records, &records, now),
            ExportReason::Heartbeat | ExportReason::Unchanged => Vec::new(),
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
            let position = accepted(&self.sink.stats());
            self.acks.push(
                position,
                node_name.to_owned(),
                export_patch(&self.settings.label_prefix, hash, now, &records),
            );
        }
        let update = NodeUpdate {
            record_export: None,
            records,
        };
        if let Some(patch) = node_patch(&self.settings.label_prefix, &labels, &annotations, &update)
        {
            nodes
                .patch(node_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| CollectError::NodePatch {
                    node: node_name.to_owned(),
                    source,
                })?;
        }
        Ok(if exported {
            PodResult::Exported
        } else {
            PodResult::Unchanged
        })
    }

    /// Change events from the node's stored inventory to `now_records`.
    ///
    /// A GPU last seen on another node is compared with that sighting, so
    /// it is one `gpu_moved` instead of an addition here; and a stored GPU
    /// that has since been seen elsewhere is not reported as removed again.
    fn changes(
        &self,
        node_name: &str,
        stored: &[GpuRecord],
        now_records: &[GpuRecord],
        now: Timestamp,
    ) -> Vec<ChangeEvent> {
        let memory = self.memory.lock();
        let elsewhere = |record: &GpuRecord| {
            memory
                .gpus
                .get(&record.gpu_key())
                .filter(|(node, _)| node != node_name)
                .map(|(_, record)| record.clone())
        };
        let mut before: Vec<GpuRecord> = stored
            .iter()
            .filter(|record| elsewhere(record).is_none())
            .cloned()
            .collect();
        before.extend(now_records.iter().filter_map(elsewhere));
        diff(&before, now_records, now)
    }

    fn remember(&self, node_name: &str, records: &[GpuRecord]) {
        let mut memory = self.memory.lock();
        memory.gpus.retain(|_, (node, _)| node != node_name);
        for record in records {
            memory
                .gpus
                .insert(record.gpu_key(), (node_name.to_owned(), record.clone()));
        }
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
        let removed: Vec<GpuRecord> = {
            let mut memory = self.memory.lock();
            let mut removed = Vec::new();
            memory.gpus.retain(|_, (node, record)| {
                let keep = node != &collected.node;
                if !keep {
                    removed.push(record.clone());
                }
                keep
            });
            removed
        };
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
