//! What the sandbox prints: a line per step on stderr (stdout carries
//! gpuid's NDJSON records by default), start-up progress read from the
//! watch caches, and the summary with how to connect.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use gpuid::collect::node_state::NodeKeys;

use super::fleet;
use super::state::{FleetState, is_assigned};
use super::ui::view::FleetView;

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

/// What the running sandbox reports when it changes: TFJob phases, GPU
/// states, Nodes and bindings. Pure over two snapshots of the fleet view.
pub fn changes(before: &FleetView, after: &FleetView) -> Vec<String> {
    let mut lines = Vec::new();
    let bound = |view: &FleetView| {
        view.racks
            .iter()
            .flat_map(|rack| &rack.slots)
            .filter(|slot| slot.node.is_some())
            .count()
    };
    if before.nodes != after.nodes || bound(before) != bound(after) {
        lines.push(format!(
            "Nodes {} → {}, bound to rack slots {} → {}",
            before.nodes,
            after.nodes,
            bound(before),
            bound(after)
        ));
    }
    let gpu_states = |view: &FleetView| -> BTreeMap<String, (String, String)> {
        view.racks
            .iter()
            .flat_map(|rack| {
                rack.slots.iter().flat_map(move |slot| {
                    slot.gpus.iter().map(move |gpu| {
                        let place = format!(
                            "{} rack {} slot {} GPU {} on {}",
                            rack.group,
                            rack.index,
                            slot.index,
                            gpu.index,
                            slot.node.as_deref().unwrap_or("no Node")
                        );
                        (gpu.uuid.clone(), (gpu.state.to_string(), place))
                    })
                })
            })
            .collect()
    };
    let old_gpus = gpu_states(before);
    for (uuid, (state, place)) in gpu_states(after) {
        if let Some((old, _)) = old_gpus.get(&uuid)
            && *old != state
            && old != "unbound"
            && state != "unbound"
        {
            lines.push(format!("GPU {uuid} ({place}): {old} → {state}"));
        }
    }
    let old_jobs: BTreeMap<(String, String), &str> = before
        .tfjobs
        .iter()
        .map(|job| {
            (
                (job.namespace.clone(), job.name.clone()),
                job.phase.as_str(),
            )
        })
        .collect();
    for job in &after.tfjobs {
        let key = (job.namespace.clone(), job.name.clone());
        if old_jobs.get(&key) != Some(&job.phase.as_str()) {
            let nodes: BTreeSet<&str> = job.pods.values().map(|(node, _)| node.as_str()).collect();
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

/// Prints [`changes`] as they happen, until `stop`.
pub async fn report_changes(state: FleetState, stop: tokio_util::sync::CancellationToken) {
    let mut updates = state.subscribe();
    let mut last = FleetView::of(&state);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            changed = updates.changed() => if changed.is_err() { return },
        }
        // Coalesce a burst (a TFJob's pods, a policy's GPUs) into one report.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = FleetView::of(&state);
        for line in changes(&last, &now) {
            step(line);
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::sandbox::ui::view::{GpuView, JobView, RackView, SlotView};

    fn view(state: &'static str, phase: &str, node: Option<&str>) -> FleetView {
        FleetView {
            racks: vec![RackView {
                name: "r".into(),
                group: "nvl72".into(),
                index: 0,
                chassis_serial: "1".into(),
                slots: vec![SlotView {
                    index: 2,
                    node: node.map(Into::into),
                    inventoried_at: None,
                    gpus: vec![GpuView {
                        index: 1,
                        uuid: "GPU-a".into(),
                        serial: "1".into(),
                        state,
                        celsius: None,
                    }],
                }],
            }],
            nodes: 1,
            gpus: 1,
            tfjobs_watched: true,
            tfjobs: vec![JobView {
                namespace: "default".into(),
                name: "j".into(),
                phase: phase.into(),
                pods: [(
                    "j-worker-0".to_string(),
                    ("n1".to_string(), "Running".to_string()),
                )]
                .into(),
            }],
        }
    }

    #[test]
    fn gpu_state_job_phase_and_binding_changes_are_reported_once_each() {
        let before = view("healthy", "Created", Some("n1"));
        let after = view("lost", "Running", Some("n1"));
        assert_eq!(
            changes(&before, &after),
            vec![
                "GPU GPU-a (nvl72 rack 0 slot 2 GPU 1 on n1): healthy → lost".to_string(),
                "TFJob default/j: Running (1 pods on n1)".to_string(),
            ]
        );
        assert!(changes(&after, &after).is_empty());
        let released = view("unbound", "Running", None);
        assert_eq!(
            changes(&after, &released),
            vec!["Nodes 1 → 1, bound to rack slots 1 → 0".to_string()]
        );
    }
}
