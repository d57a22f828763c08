//! The collector: watches NVIDIA device-plugin pods, runs `nvidia-smi -q -x`
//! in each ready one, turns the output into per-GPU records, and exports
//! what changed.
//!
//! ```text
//! pod caches ─▶ work queue ─▶ Collector::reconcile
//!                                ├─ exec (argv, deadline, 4 MiB cap)
//!                                ├─ parse ─▶ records ─▶ content hash
//!                                ├─ changed / heartbeat? ─▶ RecordSink (export pipeline queue)
//!                                └─ JSON merge patch on the Node (labels + state annotations)
//! ```
//!
//! * Collection and export are decoupled: records go to the pipeline's
//!   queue, which retries on its own; an export failure never re-runs an exec.
//! * State is durable on the Node, per exporter destination
//!   (`<prefix>/<exporter>.inventory-hash`, `exported-at`,
//!   `inventory`), so restarts and leader changes re-export nothing that is
//!   unchanged; a heartbeat re-exports unchanged inventories.
//! * Kubernetes Events for what an operator can act on: a failed,
//!   oversized or malformed nvidia-smi (Warning on the pod) and a changed
//!   node inventory (Normal on the Node).
//! * API requests are throttled by `QPS`/`BURST`
//!   ([`controller_kit::rate_limit`]); execs take no token, as with client-go.
//! * Moves while no collector ran: before the first pod, the inventories
//!   stored on all Nodes are read (one paged list) to seed move detection,
//!   and during the first sweep over the cached pods a GPU that left a node
//!   is held back until the sweep ends, so a GPU found on another node in
//!   that sweep is one `gpu_moved` (whichever node is collected first).
//!   That node's export record waits for its held removals, so a crash in
//!   between reports them again.
//! * Pure parts: [`node_state`] (labels, patch, export decision), [`pod`]
//!   (which pods are collectable), [`settings`].

pub mod ack;
pub mod collector;
pub mod exec;
pub mod metrics;
pub mod node_state;
pub mod pod;
pub mod retry;
pub mod run;
pub mod serve;
pub mod settings;
pub mod sightings;
pub mod sink;

pub use collector::{CollectError, Collector, node_identity};
pub use exec::{ExecError, NVIDIA_SMI_ARGV};
pub use metrics::{CollectorMetrics, PodResult};
pub use run::{CollectorRuntime, Election, RunError, admin_router};
pub use settings::{COLLECTOR_KNOBS, CollectorSettings, DEFAULT_LABEL_PREFIX, SettingError};
pub use sink::RecordSink;
