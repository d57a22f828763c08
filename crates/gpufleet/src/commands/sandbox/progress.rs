//! What the sandbox prints: a line per step on stderr (stdout carries
//! gpuid's NDJSON records by default), start-up progress read from the
//! watch caches, and the summary with how to connect.

use std::path::Path;
use std::time::{Duration, Instant};

use gpuid::collect::node_state::NodeKeys;

use super::fleet;
use super::state::{FleetState, is_assigned};

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
