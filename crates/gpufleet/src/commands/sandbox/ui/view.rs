//! The fleet view's model, computed from the watch caches: racks with
//! their Node slots and GPUs (state, temperature, serial), gpuid's last
//! inventory time per Node, and the TFJobs with their pods' placement.

use std::collections::BTreeMap;

use gpuid::collect::DEFAULT_LABEL_PREFIX;
use mokka::api::DeviceState;
use serde::Serialize;

use super::super::device_plugin::current_assignment;
use super::super::nvidia_smi;
use super::super::state::{FleetState, owned_by_tfjob};

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FleetView {
    pub racks: Vec<RackView>,
    pub nodes: usize,
    pub gpus: usize,
    /// False where pods and TFJobs are not watched (`gpufleet mokka --ui`).
    pub tfjobs_watched: bool,
    pub tfjobs: Vec<JobView>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RackView {
    pub name: String,
    pub group: String,
    pub index: i32,
    pub chassis_serial: String,
    pub slots: Vec<SlotView>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SlotView {
    pub index: i32,
    pub node: Option<String>,
    /// gpuid's last export for this Node (RFC 3339).
    pub inventoried_at: Option<String>,
    pub gpus: Vec<GpuView>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuView {
    pub index: i32,
    pub uuid: String,
    pub serial: String,
    /// healthy, degraded, lost, or unbound (no Node in the slot).
    pub state: &'static str,
    pub celsius: Option<i32>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct JobView {
    pub namespace: String,
    pub name: String,
    /// The latest true condition (Created, Running, Succeeded, …).
    pub phase: String,
    /// Pod name → (Node, pod phase).
    pub pods: BTreeMap<String, (String, String)>,
}

pub fn state_word(state: DeviceState) -> &'static str {
    match state {
        DeviceState::Healthy => "healthy",
        DeviceState::Degraded => "degraded",
        DeviceState::Failed => "lost",
    }
}

impl FleetView {
    pub fn of(state: &FleetState) -> FleetView {
        let mut racks: Vec<RackView> = state
            .racks
            .state()
            .iter()
            .map(|rack| {
                let slots = rack
                    .spec
                    .nodes
                    .iter()
                    .map(|slot| slot_view(state, slot))
                    .collect();
                RackView {
                    name: rack.metadata.name.clone().unwrap_or_default(),
                    group: rack.spec.identity.rack_group.clone(),
                    index: rack.spec.identity.rack_index,
                    chassis_serial: nvidia_smi::chassis_serial(&rack.spec.identity.fabric_uuid),
                    slots,
                }
            })
            .collect();
        racks.sort_by(|a, b| (&a.group, a.index).cmp(&(&b.group, b.index)));
        let gpus = racks
            .iter()
            .flat_map(|rack| &rack.slots)
            .map(|slot| slot.gpus.len())
            .sum();
        FleetView {
            racks,
            nodes: state.nodes.len(),
            gpus,
            tfjobs_watched: state.workloads,
            tfjobs: jobs(state),
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

fn slot_view(state: &FleetState, slot: &mokka::api::RackNode) -> SlotView {
    let node = slot.node_ref.as_ref().map(|node_ref| node_ref.name.clone());
    let assignment = node
        .as_deref()
        .and_then(|name| current_assignment(state, name).ok().flatten());
    let inventoried_at = node
        .as_deref()
        .and_then(|name| state.nodes.get(name))
        .and_then(|node| last_inventory(&node.metadata.annotations.clone().unwrap_or_default()))
        .map(|at| at.to_string());
    let mut gpus: Vec<GpuView> = slot
        .gpus
        .iter()
        .map(|gpu| {
            let runtime = assignment.as_ref().and_then(|(assignment, _)| {
                assignment
                    .gpus
                    .iter()
                    .find(|assigned| assigned.uuid == gpu.uuid)
                    .map(|assigned| assigned.runtime.clone())
            });
            let (state, celsius) = match &runtime {
                Some(runtime) => {
                    let device = nvidia_smi::device_state(runtime);
                    let celsius = (device != DeviceState::Failed)
                        .then(|| nvidia_smi::gpu_celsius(runtime))
                        .flatten();
                    (state_word(device), celsius)
                }
                None => ("unbound", None),
            };
            GpuView {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                serial: gpu.serial.clone(),
                state,
                celsius,
            }
        })
        .collect();
    gpus.sort_by_key(|gpu| gpu.index);
    SlotView {
        index: slot.index,
        node,
        inventoried_at,
        gpus,
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

fn jobs(state: &FleetState) -> Vec<JobView> {
    let pods = state.pods.state();
    let mut jobs: Vec<JobView> = state
        .tfjobs
        .state()
        .iter()
        .map(|job| {
            let name = job.metadata.name.clone().unwrap_or_default();
            let namespace = job.metadata.namespace.clone().unwrap_or_default();
            let owned = pods
                .iter()
                .filter(|pod| pod.metadata.namespace.as_deref() == Some(namespace.as_str()))
                .filter(|pod| owned_by_tfjob(pod, &name))
                .map(|pod| {
                    let node = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.clone())
                        .unwrap_or_else(|| "(unscheduled)".into());
                    let phase = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_else(|| "Pending".into());
                    (pod.metadata.name.clone().unwrap_or_default(), (node, phase))
                })
                .collect();
            JobView {
                phase: latest_condition(&job.status),
                namespace,
                name,
                pods: owned,
            }
        })
        .collect();
    jobs.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
