//! The fleet view's model as the page receives it: records kept by key
//! (rack headers, rack slots with their GPUs, Nodes, TFJobs) and the
//! counts over them. Pure: the watched objects come in through
//! [`Sources`], records and deltas go out; the server does the I/O.
//!
//! The page fetches the whole model once ([`Model`] serialised) and then
//! receives [`Delta`]s that carry only the records that changed, each with
//! the next sequence number. [`Model::update`] recomputes only what a
//! change can affect (the racks and Nodes named in [`Dirty`]), so a fleet
//! of 100,000 Nodes costs per change what one rack costs, and nothing at
//! all while nothing changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use mokka::api::{
    DeviceState, RuntimeState, SGPUInventory, SGPURack, SGPURackProfile, SGPURuntimePolicy,
    TargetKind,
};
use mokka::policy::{Evaluation, EvaluationInput, GpuCoordinate};
use serde::Serialize;
use tfjob::api::object::TFJobObject;

use super::runtime::{chassis_serial, device_state, gpu_celsius};
use gpuid::collect::DEFAULT_LABEL_PREFIX;

/// Read access to the watched objects. The server reads its watch caches
/// through it; tests hand in plain vectors.
pub trait Sources {
    fn racks(&self) -> Vec<Arc<SGPURack>>;
    fn rack(&self, name: &str) -> Option<Arc<SGPURack>>;
    fn nodes(&self) -> Vec<Arc<Node>>;
    fn node(&self, name: &str) -> Option<Arc<Node>>;
    fn inventories(&self) -> Vec<Arc<SGPUInventory>>;
    fn profiles(&self) -> Vec<Arc<SGPURackProfile>>;
    fn policies(&self) -> Vec<Arc<SGPURuntimePolicy>>;
    fn pods(&self) -> Vec<Arc<Pod>>;
    fn tfjobs(&self) -> Vec<Arc<TFJobObject>>;
}

/// Who serves the page: the sandbox's simulated cluster, or `gpufleet
/// mokka --ui` on a real one. The page puts it in its title.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Sandbox,
    Cluster,
}

/// A rack without its slots (those are [`SlotRecord`]s, so a change to one
/// Node's GPUs sends one slot, not the rack).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RackRecord {
    pub name: String,
    pub group: String,
    pub index: i32,
    pub chassis: String,
    pub profile: String,
    /// Slots in the rack (the profile's Nodes per rack).
    pub slots: usize,
    /// The profile's temperatures: above `hot_celsius` a GPU is shown hot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hot_celsius: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_celsius: Option<i32>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlotRecord {
    pub rack: String,
    pub index: i32,
    /// The Node the slot is bound to (its Node may be gone: then the GPUs
    /// are unbound).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub gpus: Vec<GpuRecord>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuRecord {
    pub index: i32,
    pub uuid: String,
    pub serial: String,
    /// healthy, degraded, lost, or unbound (no live Node in the slot).
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub celsius: Option<i32>,
    /// Above the profile's operating maximum.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub hot: bool,
    /// The runtime policies that set this GPU's runtime, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeRecord {
    pub name: String,
    /// The rack slot bound to this Node; None: the Node has no slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<i32>,
    /// The Ready condition (None: not reported).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cordoned: bool,
    /// `key=value:Effect` of each taint.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<String>,
    /// gpuid's last export of this Node (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inventoried_at: Option<String>,
    /// Not sent: a slot's GPUs are bound only to the Node with this uid.
    #[serde(skip)]
    pub uid: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JobRecord {
    pub namespace: String,
    pub name: String,
    /// The latest true condition (Created, Running, Succeeded, …).
    pub phase: String,
    pub pods: Vec<PodRecord>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PodRecord {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub phase: String,
}

/// Counts for the overview. GPUs are counted in slots bound to a live
/// Node only: an empty slot has no GPU a user could run on.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub racks: usize,
    pub nodes: usize,
    pub nodes_without_slot: usize,
    pub not_ready: usize,
    pub cordoned: usize,
    pub tainted: usize,
    pub slots: usize,
    pub empty_slots: usize,
    pub gpus: usize,
    pub healthy: usize,
    pub degraded: usize,
    pub lost: usize,
    pub hot: usize,
    pub tfjobs: usize,
    /// Things a user should look at: lost, degraded and hot GPUs, NotReady
    /// Nodes, Nodes without a slot.
    pub problems: usize,
}

/// The whole model, as `/api/fleet` sends it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Model {
    pub seq: u64,
    pub mode: Mode,
    /// False where pods and TFJobs are not watched (`gpufleet mokka --ui`).
    pub tfjobs_watched: bool,
    pub summary: Summary,
    #[serde(serialize_with = "values")]
    pub racks: BTreeMap<String, RackRecord>,
    #[serde(serialize_with = "values")]
    pub slots: BTreeMap<(String, i32), SlotRecord>,
    #[serde(serialize_with = "values")]
    pub nodes: BTreeMap<String, NodeRecord>,
    #[serde(serialize_with = "values")]
    pub jobs: BTreeMap<(String, String), JobRecord>,
    /// Node name → its slot, to find the slot a Node change touches.
    #[serde(skip)]
    slot_of: HashMap<String, (String, i32)>,
}

fn values<K, V: Serialize, S: serde::Serializer>(
    map: &BTreeMap<K, V>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(map.values())
}

/// What changed since the last update, as the watch caches saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dirty {
    /// Everything (the first pass).
    pub all: bool,
    /// An inventory, profile or policy changed: every rack's GPUs may
    /// have (Nodes only where their slot changes).
    pub runtime: bool,
    pub racks: BTreeSet<String>,
    pub nodes: BTreeSet<String>,
    /// A TFJob or one of its pods changed.
    pub jobs: bool,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        !self.all && !self.runtime && !self.jobs && self.racks.is_empty() && self.nodes.is_empty()
    }
}

/// The records that changed, and the keys of those that went away.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Delta {
    pub seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub racks: Vec<RackRecord>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub racks_removed: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<SlotRecord>,
    /// `[rack, index]` of each removed slot.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slots_removed: Vec<(String, i32)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeRecord>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes_removed: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jobs: Vec<JobRecord>,
    /// `[namespace, name]` of each removed TFJob.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub jobs_removed: Vec<(String, String)>,
    /// The slots and jobs as they were before this delta (for the
    /// sandbox's change report on stderr; not sent).
    #[serde(skip)]
    pub slots_before: Vec<SlotRecord>,
    #[serde(skip)]
    pub jobs_before: Vec<JobRecord>,
}

impl Delta {
    pub fn is_empty(&self) -> bool {
        self.summary.is_none()
            && self.racks.is_empty()
            && self.racks_removed.is_empty()
            && self.slots.is_empty()
            && self.slots_removed.is_empty()
            && self.nodes.is_empty()
            && self.nodes_removed.is_empty()
            && self.jobs.is_empty()
            && self.jobs_removed.is_empty()
    }
}

/// The policy evaluation of each inventory, and what a rack's GPUs need
/// from its profile.
struct Context {
    evaluations: HashMap<String, Option<Evaluation>>,
    profiles: BTreeMap<String, SGPURackProfile>,
}

impl Context {
    fn new(sources: &dyn Sources) -> Context {
        let profiles: BTreeMap<String, SGPURackProfile> = sources
            .profiles()
            .iter()
            .filter_map(|p| p.metadata.name.clone().map(|name| (name, (**p).clone())))
            .collect();
        let policies = sources.policies();
        let mut evaluations = HashMap::new();
        for inventory in sources.inventories() {
            let Some(name) = inventory.metadata.name.clone() else {
                continue;
            };
            let targeting: Vec<SGPURuntimePolicy> = policies
                .iter()
                .filter(|policy| {
                    policy.spec.target_ref.kind == TargetKind::SgpuInventory
                        && policy.spec.target_ref.name == name
                })
                .map(|policy| (**policy).clone())
                .collect();
            // An inventory whose policies cannot be evaluated shows its
            // GPUs with the profile's defaults; Mokka reports the policy's
            // error in its status.
            let evaluation = Evaluation::new(EvaluationInput {
                inventory_name: &name,
                inventory: Some(&inventory),
                profiles: &profiles,
                policies: &targeting,
            })
            .ok();
            evaluations.insert(name, evaluation);
        }
        Context {
            evaluations,
            profiles,
        }
    }
}

/// gpuid's latest export of a Node to any destination: the newest
/// `<prefix>/<exporter>.exported-at` annotation under gpuid's default prefix.
pub fn last_inventory(annotations: &BTreeMap<String, String>) -> Option<jiff::Timestamp> {
    let prefix = format!("{DEFAULT_LABEL_PREFIX}/");
    annotations
        .iter()
        .filter(|(key, _)| key.starts_with(&prefix) && key.ends_with(".exported-at"))
        .filter_map(|(_, value)| value.parse::<jiff::Timestamp>().ok())
        .max()
}

/// The GPU state word the page uses.
pub fn state_word(state: DeviceState) -> &'static str {
    match state {
        DeviceState::Healthy => "healthy",
        DeviceState::Degraded => "degraded",
        DeviceState::Failed => "lost",
    }
}

/// Above which temperature a GPU is hot: the profile's maximum operating
/// temperature, else its slowdown threshold.
pub fn hot_threshold(profile: &SGPURackProfile) -> Option<i32> {
    let thermal = profile.spec.node.gpus.thermal.as_ref()?;
    thermal
        .max_operating_celsius
        .or(thermal.slowdown_threshold_celsius)
}

fn rack_records(
    rack: &SGPURack,
    context: &Context,
    sources: &dyn Sources,
) -> (RackRecord, Vec<SlotRecord>) {
    let name = rack.metadata.name.clone().unwrap_or_default();
    let profile = context.profiles.get(&rack.spec.profile_ref.name);
    let hot_celsius = profile.and_then(hot_threshold);
    let shutdown_celsius = profile
        .and_then(|p| p.spec.node.gpus.thermal.as_ref())
        .and_then(|t| t.shutdown_threshold_celsius);
    let defaults: Option<&RuntimeState> = profile
        .and_then(|p| p.spec.defaults.as_ref())
        .and_then(|d| d.runtime.as_ref());
    let evaluation = context
        .evaluations
        .get(&rack.spec.inventory_ref.name)
        .and_then(Option::as_ref);
    let identity = &rack.spec.identity;
    let slots: Vec<SlotRecord> = rack
        .spec
        .nodes
        .iter()
        .map(|slot| {
            let node = slot.node_ref.as_ref().map(|node_ref| node_ref.name.clone());
            // Bound only to the live Node with the uid the slot names: a
            // Node deleted and re-created under the same name is not it.
            let bound = node.as_deref().is_some_and(|name| {
                sources.node(name).is_some_and(|live| {
                    slot.bound_to(name, live.metadata.uid.as_deref().unwrap_or_default())
                })
            });
            let mut gpus: Vec<GpuRecord> = slot
                .gpus
                .iter()
                .map(|gpu| {
                    let coordinate = GpuCoordinate {
                        group: &identity.rack_group,
                        rack: identity.rack_index,
                        node: slot.index,
                        gpu: gpu.index,
                    };
                    let (state, celsius, policies) = if bound {
                        let runtime = match evaluation {
                            Some(evaluation) => evaluation.runtime(defaults, coordinate),
                            None => defaults.cloned().unwrap_or_default(),
                        };
                        let device = device_state(&runtime);
                        // A lost GPU reports no temperature (nvidia-smi: "GPU is lost").
                        let celsius = (device != DeviceState::Failed)
                            .then(|| gpu_celsius(&runtime))
                            .flatten();
                        let policies = evaluation
                            .map(|evaluation| {
                                evaluation
                                    .applied(coordinate)
                                    .into_iter()
                                    .map(str::to_string)
                                    .collect()
                            })
                            .unwrap_or_default();
                        (state_word(device), celsius, policies)
                    } else {
                        ("unbound", None, Vec::new())
                    };
                    GpuRecord {
                        index: gpu.index,
                        uuid: gpu.uuid.clone(),
                        serial: gpu.serial.clone(),
                        state,
                        celsius,
                        hot: matches!((celsius, hot_celsius), (Some(c), Some(limit)) if c > limit),
                        policies,
                    }
                })
                .collect();
            gpus.sort_by_key(|gpu| gpu.index);
            SlotRecord {
                rack: name.clone(),
                index: slot.index,
                node,
                gpus,
            }
        })
        .collect();
    let record = RackRecord {
        name: name.clone(),
        group: identity.rack_group.clone(),
        index: identity.rack_index,
        chassis: chassis_serial(&identity.fabric_uuid),
        profile: rack.spec.profile_ref.name.clone(),
        slots: slots.len(),
        hot_celsius,
        shutdown_celsius,
    };
    (record, slots)
}

fn node_record(node: &Node, slot: Option<&(String, i32)>) -> NodeRecord {
    let spec = node.spec.as_ref();
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conditions| conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status == "True");
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .map(|taints| {
            taints
                .iter()
                .map(|t| match &t.value {
                    Some(value) => format!("{}={}:{}", t.key, value, t.effect),
                    None => format!("{}:{}", t.key, t.effect),
                })
                .collect()
        })
        .unwrap_or_default();
    NodeRecord {
        name: node.metadata.name.clone().unwrap_or_default(),
        rack: slot.map(|(rack, _)| rack.clone()),
        slot: slot.map(|(_, index)| *index),
        ready,
        cordoned: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        taints,
        inventoried_at: node
            .metadata
            .annotations
            .as_ref()
            .and_then(last_inventory)
            .map(|at| at.to_string()),
        uid: node.metadata.uid.clone().unwrap_or_default(),
    }
}

fn latest_condition(status: &serde_json::Value) -> String {
    status
        .get("conditions")
        .and_then(|c| c.as_array())
        .and_then(|conditions| {
            conditions
                .iter()
                .rev()
                .find(|c| c.get("status").and_then(|s| s.as_str()) == Some("True"))
        })
        .and_then(|c| c.get("type").and_then(|t| t.as_str()))
        .unwrap_or("Pending")
        .to_string()
}

fn job_records(sources: &dyn Sources) -> BTreeMap<(String, String), JobRecord> {
    let mut jobs: BTreeMap<(String, String), JobRecord> = sources
        .tfjobs()
        .iter()
        .map(|job| {
            let key = (
                job.metadata.namespace.clone().unwrap_or_default(),
                job.metadata.name.clone().unwrap_or_default(),
            );
            let record = JobRecord {
                namespace: key.0.clone(),
                name: key.1.clone(),
                phase: latest_condition(&job.status),
                pods: Vec::new(),
            };
            (key, record)
        })
        .collect();
    // One pass over the pods (most are device-plugin pods, one per Node).
    for pod in sources.pods() {
        let Some(owner) = pod
            .metadata
            .owner_references
            .as_ref()
            .and_then(|owners| owners.iter().find(|o| o.kind == tfjob::api::KIND))
        else {
            continue;
        };
        let key = (
            pod.metadata.namespace.clone().unwrap_or_default(),
            owner.name.clone(),
        );
        if let Some(job) = jobs.get_mut(&key) {
            job.pods.push(PodRecord {
                name: pod.metadata.name.clone().unwrap_or_default(),
                node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                phase: pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_else(|| "Pending".into()),
            });
        }
    }
    for job in jobs.values_mut() {
        job.pods.sort_by(|a, b| a.name.cmp(&b.name));
    }
    jobs
}

impl Model {
    /// An empty model; the first [`Model::update`] with `Dirty { all: true, jobs: true, .. }` fills it.
    pub fn new(mode: Mode, tfjobs_watched: bool) -> Model {
        Model {
            seq: 0,
            mode,
            tfjobs_watched,
            summary: Summary::default(),
            racks: BTreeMap::new(),
            slots: BTreeMap::new(),
            nodes: BTreeMap::new(),
            jobs: BTreeMap::new(),
            slot_of: HashMap::new(),
        }
    }

    /// The whole model from the sources.
    #[cfg(test)]
    pub fn build(mode: Mode, tfjobs_watched: bool, sources: &dyn Sources) -> Model {
        let mut model = Model::new(mode, tfjobs_watched);
        model.update(
            sources,
            Dirty {
                all: true,
                jobs: true,
                ..Dirty::default()
            },
        );
        model
    }

    /// Recomputes what `dirty` can have changed; returns the changed
    /// records under the next sequence number (an empty delta, with the
    /// sequence number unchanged, when nothing visible changed).
    pub fn update(&mut self, sources: &dyn Sources, dirty: Dirty) -> Delta {
        let mut delta = Delta::default();
        let context = Context::new(sources);

        // Which racks and Nodes to recompute.
        let mut racks: BTreeSet<String> = dirty.racks.clone();
        let mut nodes: BTreeSet<String> = dirty.nodes.clone();
        if dirty.all || dirty.runtime {
            racks.extend(self.racks.keys().cloned());
            racks.extend(
                sources
                    .racks()
                    .iter()
                    .filter_map(|r| r.metadata.name.clone()),
            );
        }
        if dirty.all {
            nodes.extend(self.nodes.keys().cloned());
            nodes.extend(
                sources
                    .nodes()
                    .iter()
                    .filter_map(|n| n.metadata.name.clone()),
            );
        }
        // A Node that appeared, went, or came back with another uid binds
        // or unbinds its slot's GPUs.
        for name in &dirty.nodes {
            let live_uid = sources
                .node(name)
                .map(|node| node.metadata.uid.clone().unwrap_or_default());
            let known_uid = self.nodes.get(name).map(|record| record.uid.clone());
            if live_uid != known_uid {
                // `slot_of` holds every slot that names a Node, bound or not.
                if let Some((rack, _)) = self.slot_of.get(name) {
                    racks.insert(rack.clone());
                }
            }
        }

        for rack_name in &racks {
            let old_slots: Vec<(String, i32)> = self
                .slots
                .range((rack_name.clone(), i32::MIN)..=(rack_name.clone(), i32::MAX))
                .map(|(key, _)| key.clone())
                .collect();
            let Some(rack) = sources.rack(rack_name) else {
                if self.racks.remove(rack_name).is_some() {
                    delta.racks_removed.push(rack_name.clone());
                }
                for key in old_slots {
                    if let Some(old) = self.slots.remove(&key) {
                        if let Some(node) = &old.node {
                            self.slot_of.remove(node);
                            nodes.insert(node.clone());
                        }
                        delta.slots_removed.push(key);
                    }
                }
                continue;
            };
            let (record, slots) = rack_records(&rack, &context, sources);
            if self.racks.get(rack_name) != Some(&record) {
                delta.racks.push(record.clone());
                self.racks.insert(rack_name.clone(), record);
            }
            let mut seen = BTreeSet::new();
            for slot in slots {
                let key = (slot.rack.clone(), slot.index);
                seen.insert(key.clone());
                let old = self.slots.get(&key);
                if old == Some(&slot) {
                    continue;
                }
                if let Some(old) = old {
                    if let Some(node) = &old.node
                        && old.node != slot.node
                    {
                        if self.slot_of.get(node) == Some(&key) {
                            self.slot_of.remove(node);
                        }
                        nodes.insert(node.clone());
                    }
                    delta.slots_before.push(old.clone());
                }
                if let Some(node) = &slot.node {
                    if self.slot_of.get(node) != Some(&key) {
                        nodes.insert(node.clone());
                    }
                    self.slot_of.insert(node.clone(), key.clone());
                }
                delta.slots.push(slot.clone());
                self.slots.insert(key, slot);
            }
            for key in old_slots {
                if !seen.contains(&key)
                    && let Some(old) = self.slots.remove(&key)
                {
                    if let Some(node) = &old.node {
                        self.slot_of.remove(node);
                        nodes.insert(node.clone());
                    }
                    delta.slots_removed.push(key);
                }
            }
        }

        for name in &nodes {
            match sources.node(name) {
                Some(node) => {
                    let record = node_record(&node, self.slot_of.get(name));
                    if self.nodes.get(name) != Some(&record) {
                        delta.nodes.push(record.clone());
                        self.nodes.insert(name.clone(), record);
                    }
                }
                None => {
                    if self.nodes.remove(name).is_some() {
                        delta.nodes_removed.push(name.clone());
                    }
                }
            }
        }

        if dirty.jobs && self.tfjobs_watched {
            let jobs = job_records(sources);
            for (key, old) in &self.jobs {
                if !jobs.contains_key(key) {
                    delta.jobs_removed.push(key.clone());
                    delta.jobs_before.push(old.clone());
                }
            }
            for (key, job) in &jobs {
                let old = self.jobs.get(key);
                if old != Some(job) {
                    if let Some(old) = old {
                        delta.jobs_before.push(old.clone());
                    }
                    delta.jobs.push(job.clone());
                }
            }
            self.jobs = jobs;
        }

        if !delta.is_empty() {
            let summary = self.summarise();
            if summary != self.summary {
                self.summary = summary.clone();
                delta.summary = Some(summary);
            }
        }
        if !delta.is_empty() {
            self.seq += 1;
        }
        delta.seq = self.seq;
        delta
    }

    /// The counts over the current records.
    pub fn summarise(&self) -> Summary {
        let mut summary = Summary {
            racks: self.racks.len(),
            nodes: self.nodes.len(),
            slots: self.slots.len(),
            tfjobs: self.jobs.len(),
            ..Summary::default()
        };
        for slot in self.slots.values() {
            let bound = slot.gpus.iter().any(|gpu| gpu.state != "unbound");
            if !bound {
                summary.empty_slots += 1;
                continue;
            }
            for gpu in &slot.gpus {
                summary.gpus += 1;
                match gpu.state {
                    "healthy" => summary.healthy += 1,
                    "degraded" => summary.degraded += 1,
                    "lost" => summary.lost += 1,
                    _ => {}
                }
                if gpu.hot {
                    summary.hot += 1;
                }
            }
        }
        for node in self.nodes.values() {
            if node.rack.is_none() {
                summary.nodes_without_slot += 1;
            }
            if node.ready == Some(false) {
                summary.not_ready += 1;
            }
            if node.cordoned {
                summary.cordoned += 1;
            }
            if !node.taints.is_empty() {
                summary.tainted += 1;
            }
        }
        summary.problems = summary.lost
            + summary.degraded
            + summary.hot
            + summary.not_ready
            + summary.nodes_without_slot;
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mokka::api::{
        NodeRef, PolicyTargetRef, RackGroup, SGPUInventorySpec, SGPURackProfile,
        SGPURuntimePolicySpec, TargetGroup, TemperatureTelemetry,
    };
    use mokka::api::{RuntimeTelemetry, SGPURack};
    use mokka::render::{RackCoordinate, render_rack};

    /// The watched objects as plain vectors.
    #[derive(Default, Clone)]
    struct Fixture {
        racks: Vec<Arc<SGPURack>>,
        nodes: Vec<Arc<Node>>,
        inventories: Vec<Arc<SGPUInventory>>,
        profiles: Vec<Arc<SGPURackProfile>>,
        policies: Vec<Arc<SGPURuntimePolicy>>,
    }

    impl Sources for Fixture {
        fn racks(&self) -> Vec<Arc<SGPURack>> {
            self.racks.clone()
        }
        fn rack(&self, name: &str) -> Option<Arc<SGPURack>> {
            self.racks
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(name))
                .cloned()
        }
        fn nodes(&self) -> Vec<Arc<Node>> {
            self.nodes.clone()
        }
        fn node(&self, name: &str) -> Option<Arc<Node>> {
            self.nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(name))
                .cloned()
        }
        fn inventories(&self) -> Vec<Arc<SGPUInventory>> {
            self.inventories.clone()
        }
        fn profiles(&self) -> Vec<Arc<SGPURackProfile>> {
            self.profiles.clone()
        }
        fn policies(&self) -> Vec<Arc<SGPURuntimePolicy>> {
            self.policies.clone()
        }
        fn pods(&self) -> Vec<Arc<Pod>> {
            Vec::new()
        }
        fn tfjobs(&self) -> Vec<Arc<TFJobObject>> {
            Vec::new()
        }
    }

    fn node(name: &str) -> Node {
        Node {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Two racks of 18 Nodes x 4 GPUs; `bound` Nodes exist and are bound
    /// to the first slots of rack 0, in order.
    fn fleet(bound: usize) -> Fixture {
        let profile = mokka::fixtures::gb300_nvl72_profile("gb300", "profile-uid");
        let mut inventory = SGPUInventory::new(
            "inv",
            SGPUInventorySpec {
                rack_groups: vec![RackGroup {
                    id: "nvl72".into(),
                    count: 2,
                    profile_ref: mokka::api::ProfileNameRef {
                        name: "gb300".into(),
                    },
                    placement: None,
                }],
            },
        );
        inventory.metadata = mokka::fixtures::metadata("inv", "inv-uid", "2026-12-01T00:00:00Z");
        let racks = (0..2)
            .map(|index| {
                let mut spec = render_rack(
                    RackCoordinate {
                        inventory_name: "inv",
                        inventory_uid: "inv-uid",
                        group: "nvl72",
                        rack_index: index,
                        rack_count: 2,
                    },
                    Some(&profile),
                )
                .expect("the fixture profile renders");
                if index == 0 {
                    for (slot, number) in spec.nodes.iter_mut().zip(0..bound) {
                        let name = format!("n{number}");
                        slot.node_ref = Some(NodeRef {
                            uid: format!("uid-{name}"),
                            name,
                        });
                    }
                }
                Arc::new(SGPURack::new(&format!("rack-{index}"), spec))
            })
            .collect();
        Fixture {
            racks,
            nodes: (0..bound)
                .map(|i| Arc::new(node(&format!("n{i}"))))
                .collect(),
            inventories: vec![Arc::new(inventory)],
            profiles: vec![Arc::new(profile)],
            policies: Vec::new(),
        }
    }

    fn policy(
        name: &str,
        (node, gpu): (i32, i32),
        runtime: RuntimeState,
    ) -> Arc<SGPURuntimePolicy> {
        let mut policy = SGPURuntimePolicy::new(
            name,
            SGPURuntimePolicySpec {
                target_ref: PolicyTargetRef {
                    group: TargetGroup::Mokka,
                    kind: TargetKind::SgpuInventory,
                    name: "inv".into(),
                    rack_groups: Some(vec!["nvl72".into()]),
                    rack_indexes: Some(vec![0]),
                    node_indexes: Some(vec![node]),
                    gpu_indexes: Some(vec![gpu]),
                },
                runtime: Some(runtime),
            },
        );
        policy.metadata =
            mokka::fixtures::metadata(name, &format!("{name}-uid"), "2026-12-01T01:00:00Z");
        Arc::new(policy)
    }

    #[test]
    fn the_last_inventory_is_the_newest_export_to_any_destination() {
        let annotations: BTreeMap<String, String> = [
            (
                "gpuid.gpufleet.dev/stdout-0123456789.exported-at",
                "2026-12-01T17:00:00Z",
            ),
            (
                "gpuid.gpufleet.dev/postgres-abcdef0123.exported-at",
                "2026-12-01T18:00:00Z",
            ),
            (
                "gpuid.gpufleet.dev/stdout-0123456789.inventory-hash",
                "2026-12-01T19:00:00Z",
            ),
            ("other.example/x.exported-at", "2026-12-01T20:00:00Z"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(
            last_inventory(&annotations).map(|t| t.to_string()),
            Some("2026-12-01T18:00:00Z".to_string())
        );
        assert_eq!(last_inventory(&BTreeMap::new()), None);
    }

    #[test]
    fn gpus_in_empty_slots_are_unbound_and_not_counted() {
        let model = Model::build(Mode::Sandbox, true, &fleet(3));
        let summary = &model.summary;
        assert_eq!((summary.racks, summary.slots, summary.nodes), (2, 36, 3));
        assert_eq!(summary.empty_slots, 33);
        assert_eq!((summary.gpus, summary.healthy), (12, 12));
        assert_eq!(summary.problems, 0);
        let slot = &model.slots[&("rack-0".to_string(), 5)];
        assert!(slot.gpus.iter().all(|gpu| gpu.state == "unbound"));
        assert_eq!(model.nodes["n1"].rack.as_deref(), Some("rack-0"));
    }

    #[test]
    fn a_failed_gpu_changes_only_its_slot_and_the_counts() {
        let mut sources = fleet(3);
        let mut model = Model::build(Mode::Sandbox, true, &sources);
        let before = model.seq;
        let slot_index = model.slots[&("rack-0".to_string(), 1)].index;
        sources.policies.push(policy(
            "lose",
            (slot_index, 2),
            RuntimeState {
                device_state: Some(DeviceState::Failed),
                ..Default::default()
            },
        ));
        let delta = model.update(
            &sources,
            Dirty {
                runtime: true,
                ..Dirty::default()
            },
        );
        assert_eq!(delta.seq, before + 1);
        assert_eq!(delta.slots.len(), 1, "{delta:?}");
        assert!(delta.racks.is_empty() && delta.nodes.is_empty());
        let gpu = &delta.slots[0].gpus[2];
        assert_eq!(gpu.state, "lost");
        assert_eq!(gpu.policies, vec!["lose".to_string()]);
        let summary = delta.summary.clone().expect("the counts changed");
        assert_eq!(
            (summary.lost, summary.healthy, summary.problems),
            (1, 11, 1)
        );
        let wire = serde_json::to_string(&delta).expect("serialises");
        assert!(wire.len() < 2_000, "{} bytes: {wire}", wire.len());
        // Nothing changed: nothing sent, the sequence stays.
        let again = model.update(
            &sources,
            Dirty {
                runtime: true,
                ..Dirty::default()
            },
        );
        assert!(again.is_empty());
        assert_eq!(again.seq, delta.seq);
    }

    #[test]
    fn a_gpu_above_the_profiles_operating_maximum_is_hot() {
        let mut sources = fleet(1);
        let profile = &sources.profiles[0];
        let limit = hot_threshold(profile).expect("the fixture profile has thermal limits");
        let slot_index =
            Model::build(Mode::Sandbox, true, &sources).slots[&("rack-0".to_string(), 0)].index;
        let at = |celsius| RuntimeState {
            telemetry: Some(RuntimeTelemetry {
                temperature: Some(TemperatureTelemetry {
                    gpu_celsius: Some(celsius),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        sources
            .policies
            .push(policy("warm", (slot_index, 0), at(limit)));
        sources
            .policies
            .push(policy("hot", (slot_index, 1), at(limit + 10)));
        let model = Model::build(Mode::Sandbox, true, &sources);
        let gpus = &model.slots[&("rack-0".to_string(), slot_index)].gpus;
        assert_eq!((gpus[0].celsius, gpus[0].hot), (Some(limit), false));
        assert_eq!((gpus[1].celsius, gpus[1].hot), (Some(limit + 10), true));
        assert_eq!((model.summary.hot, model.summary.problems), (1, 1));
    }

    #[test]
    fn a_deleted_node_unbinds_its_slot_and_a_node_without_a_slot_is_counted() {
        let mut sources = fleet(2);
        let mut model = Model::build(Mode::Sandbox, true, &sources);
        sources
            .nodes
            .retain(|n| n.metadata.name.as_deref() != Some("n0"));
        sources.nodes.push(Arc::new(node("spare")));
        let delta = model.update(
            &sources,
            Dirty {
                nodes: ["n0".to_string(), "spare".to_string()].into(),
                ..Dirty::default()
            },
        );
        assert_eq!(delta.nodes_removed, vec!["n0".to_string()]);
        assert_eq!(delta.nodes.len(), 1);
        assert_eq!(delta.nodes[0].name, "spare");
        assert_eq!(delta.slots.len(), 1, "{delta:?}");
        assert!(delta.slots[0].gpus.iter().all(|gpu| gpu.state == "unbound"));
        let summary = delta.summary.expect("counts changed");
        assert_eq!((summary.gpus, summary.nodes_without_slot), (4, 1));
    }
}
