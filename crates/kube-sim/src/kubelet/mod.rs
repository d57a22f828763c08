//! A simulated kubelet and scheduler in the spirit of KWOK: controllers
//! that talk to kube-sim through the in-process `kube::Client`, exactly as
//! real components talk to an apiserver.
//!
//! - Nodes: every Node not annotated or labelled
//!   `kube-sim.gpufleet.dev/simulated: "false"` gets `Ready` conditions,
//!   capacity/allocatable (defaults filled in), an InternalIP and a Lease in
//!   `kube-node-lease` renewed periodically.
//! - Scheduler: binds pending pods of `default-scheduler` through
//!   `pods/{name}/binding`, with kube-scheduler's filters and messages.
//! - Pods on simulated nodes run: Pending -> Running -> Succeeded/Failed
//!   as the pod's annotations say ([`RUN_SECONDS`], [`EXIT_CODE`]), with
//!   restart policies, and graceful deletions are finished.

pub(crate) mod binding;
mod fit;
pub(crate) mod informer;
pub(crate) mod ipam;
mod lifecycle;
mod node;
mod nodes;
mod pods;
mod quantity;
mod scheduler;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;

use crate::store::Store;
use informer::Subscriber;

/// Label or annotation that turns the simulation off for one Node.
pub const SIMULATED: &str = "kube-sim.gpufleet.dev/simulated";
/// Seconds each container runs before it exits (decimal, e.g. `"0.5"`);
/// without it a container runs until deleted. `RUN_SECONDS.<container>`
/// (e.g. `kube-sim.gpufleet.dev/run-seconds.worker`) overrides it per container.
pub const RUN_SECONDS: &str = "kube-sim.gpufleet.dev/run-seconds";
/// Exit code of each container run (default 0). A comma-separated list
/// gives successive runs their codes, the last repeating: `"1,1,0"` fails
/// twice and then succeeds. `EXIT_CODE.<container>` overrides it per container.
pub const EXIT_CODE: &str = "kube-sim.gpufleet.dev/exit-code";

/// Settings of the simulated kubelet, scheduler and service IP allocator.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    /// Runs the simulation at all (default true).
    pub enabled: bool,
    /// How often node Leases are renewed (default 10 s, as the kubelet).
    pub lease_renew_interval: Duration,
    /// `spec.leaseDurationSeconds` of node Leases (default 40).
    pub lease_duration_seconds: i32,
    /// Simulated container stop time when a pod is deleted gracefully,
    /// instead of the whole grace period (default 200 ms).
    pub stop_delay: Duration,
    /// Pause before a container restarts (default 1 s; the real kubelet's
    /// CrashLoopBackOff starts at 10 s and doubles).
    pub restart_delay: Duration,
    /// Runs the Deployment, ReplicaSet and Job controllers, and gives every
    /// new namespace its `default` ServiceAccount and `kube-root-ca.crt`
    /// ConfigMap (default true; only with the kubelet enabled).
    pub workloads: bool,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            lease_renew_interval: Duration::from_secs(10),
            lease_duration_seconds: 40,
            stop_delay: Duration::from_millis(200),
            restart_delay: Duration::from_secs(1),
            workloads: true,
        }
    }
}

impl KubeletConfig {
    /// No simulated kubelet, scheduler or service IPs: pods stay Pending.
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }
}

/// Starts the simulation's controllers; they stop when the store shuts down.
pub(crate) fn spawn(client: kube::Client, config: KubeletConfig, store: Arc<Store>) {
    if !config.enabled {
        return;
    }
    let shutdown = store.shutdown.clone();
    if config.workloads {
        crate::workloads::spawn(client.clone(), shutdown.clone());
    }
    // One subscriber per loop and informer: each drains its own dirty keys.
    let scheduler_pods = Subscriber::new();
    let scheduler_nodes = Subscriber::new();
    let kubelet_pods = Subscriber::new();
    let kubelet_nodes = Subscriber::new();
    let nodes_nodes = Subscriber::new();
    let pods = informer::start(
        Api::<Pod>::all(client.clone()),
        vec![scheduler_pods.clone(), kubelet_pods.clone()],
        shutdown.clone(),
    );
    let nodes = informer::start(
        Api::<Node>::all(client.clone()),
        vec![
            scheduler_nodes.clone(),
            kubelet_nodes.clone(),
            nodes_nodes.clone(),
        ],
        shutdown.clone(),
    );
    tokio::spawn(scheduler::run(
        client.clone(),
        scheduler::Watches {
            pods: pods.clone(),
            nodes: nodes.clone(),
            pod_changes: scheduler_pods,
            node_changes: scheduler_nodes,
        },
        shutdown.clone(),
    ));
    tokio::spawn(pods::run(
        client.clone(),
        config.clone(),
        pods::Watches {
            pods,
            nodes: nodes.clone(),
            pod_changes: kubelet_pods,
            node_changes: kubelet_nodes,
        },
        store.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(nodes::run(
        client.clone(),
        config,
        nodes,
        nodes_nodes,
        store,
        shutdown.clone(),
    ));
}
