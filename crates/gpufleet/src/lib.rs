//! gpufleet's commands, shared by its binaries.
//!
//! `gpufleet` carries every subcommand: kube-sim, the sandbox, the fleet view
//! and the three controllers. Each controller also ships as a binary of its
//! own (`gpufleet-gpuid`, `gpufleet-mokka`, `gpufleet-tfjob`, under
//! `src/bin/`) that hands only its own command to [`entry::run`]. The linker
//! then leaves kube-sim, the sandbox and the other controllers out, and the
//! code pages a running controller maps from its binary shrink with it: a
//! controller's resident memory counts those pages (docs/benchmarks.md,
//! "One binary per controller").

pub mod allocator;
pub mod cli;
pub mod commands;
pub mod entry;
mod exec_rules;
mod fleet_view;
mod logging;
mod sim;
