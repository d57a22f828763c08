//! The fleet view: the watch caches of the objects it shows ([`state`]),
//! each Node's assignment and its GPUs' effective runtime ([`runtime`]),
//! the page's model as records and deltas ([`model`], pure), the task that
//! keeps it current ([`live`]), the page ([`html`]) and the HTTP server
//! ([`server`]).
//!
//! Two commands serve it: `gpufleet sandbox` (beside its simulated
//! cluster, with the device plugin and the demo reading the same caches)
//! and `gpufleet mokka --ui` (a real cluster, Mokka's objects and Nodes
//! only). It lives outside `commands` so that neither command imports the
//! other's module.

pub mod html;
pub mod live;
pub mod model;
pub mod runtime;
pub mod server;
pub mod state;
