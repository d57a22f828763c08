//! gpuid: which physical GPU is in which Kubernetes node, and when that changes.
//!
//! This crate is the pure core of `gpufleet gpuid`: configuration compatible
//! with upstream mchmarny/gpuid ([`config`]), the `nvidia-smi -q -x` parser
//! ([`smi`]), the exported per-GPU record ([`record`]) and change detection
//! over inventories ([`inventory`]). Nothing here touches the network, the
//! file system or the clock: file contents, environment and time are passed in.

pub mod collect;
pub mod config;
pub mod export;
pub mod inventory;
mod ndjson;
pub mod record;
pub mod smi;
