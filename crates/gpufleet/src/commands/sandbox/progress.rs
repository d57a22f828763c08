//! What the sandbox prints: a line per step on stderr (stdout carries
//! gpuid's NDJSON records by default), start-up progress read from the
//! watch caches, and the summary with how to connect.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuid::collect::node_state::NodeKeys;

use super::fleet;
use crate::fleet_view::live::Live;
use crate::fleet_view::model::{Delta, SlotRecord, Summary};
use crate::fleet_view::state::{FleetState, is_assigned};

/// One progress line.
pub fn step(text: String) {
    eprintln!("sandbox: {text}");
}

/// Counts read from the caches, pure over what they hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub racks: usize,
    pub slots: usize,
    pub bound: usize,
    pub projected: usize,
    pub inventoried: usize,
    pub gpus: usize,
    pub tfjobs: usize,
}

impl Counts {
    pub fn of(state: &FleetState, keys: &NodeKeys) -> Counts {
        let racks = state.racks.state();
        let slots = racks.iter().map(|rack| rack.spec.nodes.len()).sum();
        let bound_slots: Vec<_> = racks
            .iter()
            .flat_map(|rack| rack.spec.nodes.iter())
            .filter(|slot| slot.node_ref.is_some())
            .collect();
        let gpus = bound_slots.iter().map(|slot| slot.gpus.len()).sum();
        let nodes = state.nodes.state();
        let projected = nodes.iter().filter(|node| is_assigned(node)).count();
        let exported_at = keys.state_annotation("exported-at");
        let inventoried = nodes
            .iter()
            .filter(|node| {
                node.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|annotations| annotations.contains_key(&exported_at))
            })
            .count();
        Counts {
            racks: racks.len(),
            slots,
            bound: bound_slots.len(),
            projected,
            inventoried,
            gpus,
            tfjobs: state.tfjobs.len(),
        }
    }
}

/// Waits for the fleet to come up and prints each milestone once.
pub struct Startup<'a> {
    pub state: &'a FleetState,
    pub nodes: usize,
    pub keys: NodeKeys,
}

impl Startup<'_> {
    /// Rendered, bound, projected and inventoried: every Node that fits in
    /// the inventory's racks.
    pub async fn wait_until_ready(&self) {
        let racks = usize::try_from(fleet::racks_for(self.nodes)).unwrap_or(usize::MAX);
        let mut changes = self.state.subscribe();
        let mut printed = [false; 4];
        let started = Instant::now();
        let mut last_report = Instant::now();
        loop {
            let counts = Counts::of(self.state, &self.keys);
            let bindable = self.nodes.min(counts.slots.max(1));
            let milestones = [
                (
                    counts.racks == racks && counts.slots > 0,
                    format!(
                        "{} SGPURacks rendered ({} Node slots)",
                        counts.racks, counts.slots
                    ),
                ),
                (
                    counts.bound == bindable,
                    format!(
                        "{} Nodes bound to rack slots ({} GPUs)",
                        counts.bound, counts.gpus
                    ),
                ),
                (
                    counts.projected == bindable,
                    format!(
                        "{} Nodes projected (mokka.nvidia.com/sgpu-assigned, nvidia.com/gpu.clique)",
                        counts.projected
                    ),
                ),
                (
                    counts.inventoried == bindable,
                    format!(
                        "{} Nodes inventoried by gpuid ({} GPUs)",
                        counts.inventoried, counts.gpus
                    ),
                ),
            ];
            for (index, (reached, text)) in milestones.iter().enumerate() {
                if *reached && !printed[index] {
                    printed[index] = true;
                    step(format!(
                        "{text} after {:.1} s",
                        started.elapsed().as_secs_f64()
                    ));
                }
            }
            if printed.iter().all(|done| *done) {
                return;
            }
            if last_report.elapsed() >= Duration::from_secs(3) {
                last_report = Instant::now();
                step(format!("waiting: {}", describe(&counts, racks)));
            }
            let _ = tokio::time::timeout(Duration::from_millis(500), changes.changed()).await;
        }
    }

    /// The counts so far, for a timeout message.
    pub fn describe(&self) -> String {
        let racks = usize::try_from(fleet::racks_for(self.nodes)).unwrap_or(usize::MAX);
        describe(&Counts::of(self.state, &self.keys), racks)
    }
}

fn describe(counts: &Counts, racks: usize) -> String {
    format!(
        "{}/{racks} racks, {} bound, {} projected, {} inventoried",
        counts.racks, counts.bound, counts.projected, counts.inventoried
    )
}

/// The fleet in numbers and how to connect.
pub fn summary(state: &FleetState, kubeconfig: &Path, ui_url: &str, elapsed: Duration) {
    let racks = state.racks.len();
    let nodes = state.nodes.len();
    let slots: usize = state.racks.state().iter().map(|r| r.spec.nodes.len()).sum();
    let kubeconfig = std::fs::canonicalize(kubeconfig).unwrap_or_else(|_| kubeconfig.to_path_buf());
    eprintln!(
        "\nsandbox ready in {:.1} s: {racks} racks, {nodes} Nodes, {} GPUs\n\
         \x20 fleet view:  {ui_url}\n\
         \x20 kubectl:     export KUBECONFIG={}\n\
         \x20              kubectl get sgpuracks,nodes\n\
         \x20              kubectl -n {} get pods -o wide\n",
        elapsed.as_secs_f64(),
        slots * fleet::GPUS_PER_NODE as usize,
        kubeconfig.display(),
        fleet::DEVICE_PLUGIN_NAMESPACE,
    );
}

/// What the running sandbox reports when it changes: Nodes and bindings,
/// GPU states and TFJob phases. Pure over the counts before and one delta
/// of the fleet view's model (which carries the slots and jobs as they
/// were), so the report costs what the change costs.
pub fn changes(before: &Summary, delta: &Delta) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(after) = &delta.summary {
        let bound = |s: &Summary| s.slots - s.empty_slots;
        if before.nodes != after.nodes || bound(before) != bound(after) {
            lines.push(format!(
                "Nodes {} → {}, bound to rack slots {} → {}",
                before.nodes,
                after.nodes,
                bound(before),
                bound(after)
            ));
        }
    }
    let old_slots: BTreeMap<(&str, i32), &SlotRecord> = delta
        .slots_before
        .iter()
        .map(|slot| ((slot.rack.as_str(), slot.index), slot))
        .collect();
    for slot in &delta.slots {
        let Some(old) = old_slots.get(&(slot.rack.as_str(), slot.index)) else {
            continue;
        };
        for gpu in &slot.gpus {
            let Some(was) = old.gpus.iter().find(|g| g.uuid == gpu.uuid) else {
                continue;
            };
            if was.state != gpu.state && was.state != "unbound" && gpu.state != "unbound" {
                lines.push(format!(
                    "GPU {} ({} slot {} GPU {} on {}): {} → {}",
                    gpu.uuid,
                    slot.rack,
                    slot.index,
                    gpu.index,
                    slot.node.as_deref().unwrap_or("no Node"),
                    was.state,
                    gpu.state
                ));
            }
        }
    }
    let old_jobs: BTreeMap<(&str, &str), &str> = delta
        .jobs_before
        .iter()
        .map(|job| {
            (
                (job.namespace.as_str(), job.name.as_str()),
                job.phase.as_str(),
            )
        })
        .collect();
    for job in &delta.jobs {
        if old_jobs.get(&(job.namespace.as_str(), job.name.as_str())) != Some(&job.phase.as_str()) {
            let nodes: BTreeSet<&str> = job
                .pods
                .iter()
                .filter_map(|pod| pod.node.as_deref())
                .collect();
            lines.push(format!(
                "TFJob {}/{}: {} ({} pods on {})",
                job.namespace,
                job.name,
                job.phase,
                job.pods.len(),
                if nodes.is_empty() {
                    "no Node yet".to_string()
                } else {
                    nodes.into_iter().collect::<Vec<_>>().join(", ")
                }
            ));
        }
    }
    lines
}

/// Prints [`changes`] as the fleet view's model moves, until `stop`.
pub async fn report_changes(live: Arc<Live>, stop: tokio_util::sync::CancellationToken) {
    let mut updates = live.subscribe();
    let mut last = live.summary();
    loop {
        let update = tokio::select! {
            () = stop.cancelled() => return,
            update = updates.recv() => update,
        };
        match update {
            Ok(update) => {
                for line in changes(&last, &update.delta) {
                    step(line);
                }
                if let Some(summary) = &update.delta.summary {
                    last = summary.clone();
                }
            }
            // Fell behind: start again from the current counts.
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => last = live.summary(),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet_view::model::{GpuRecord, JobRecord, PodRecord};

    fn slot(state: &'static str, node: Option<&str>) -> SlotRecord {
        SlotRecord {
            rack: "r".into(),
            index: 2,
            node: node.map(Into::into),
            gpus: vec![GpuRecord {
                index: 1,
                uuid: "GPU-a".into(),
                serial: "1".into(),
                state,
                celsius: None,
                hot: false,
                policies: Vec::new(),
            }],
        }
    }

    fn job(phase: &str) -> JobRecord {
        JobRecord {
            namespace: "default".into(),
            name: "j".into(),
            phase: phase.into(),
            pods: vec![PodRecord {
                name: "j-worker-0".into(),
                node: Some("n1".into()),
                phase: "Running".into(),
            }],
        }
    }

    #[test]
    fn gpu_state_job_phase_and_binding_changes_are_reported_once_each() {
        let counts = Summary {
            nodes: 1,
            slots: 1,
            ..Summary::default()
        };
        let delta = Delta {
            slots: vec![slot("lost", Some("n1"))],
            slots_before: vec![slot("healthy", Some("n1"))],
            jobs: vec![job("Running")],
            jobs_before: vec![job("Created")],
            ..Delta::default()
        };
        assert_eq!(
            changes(&counts, &delta),
            vec![
                "GPU GPU-a (r slot 2 GPU 1 on n1): healthy → lost".to_string(),
                "TFJob default/j: Running (1 pods on n1)".to_string(),
            ]
        );
        assert!(changes(&counts, &Delta::default()).is_empty());
        let released = Delta {
            summary: Some(Summary {
                nodes: 1,
                slots: 1,
                empty_slots: 1,
                ..Summary::default()
            }),
            slots: vec![slot("unbound", None)],
            slots_before: vec![slot("lost", Some("n1"))],
            ..Delta::default()
        };
        assert_eq!(
            changes(&counts, &released),
            vec!["Nodes 1 → 1, bound to rack slots 1 → 0".to_string()]
        );
    }
}
