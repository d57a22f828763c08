//! Pure planning for the controller: no I/O, no clock (times are passed in).
//!
//! * [`catalog`]: the Node catalog and its allocation generation;
//! * [`inventory`]: group resolution, cluster-wide admission and allocation,
//!   and the rack writes and cleanups of one inventory reconcile;
//! * [`rack`]: the metadata stamped on racks and rack ownership;
//! * [`projection`]: the three projected Node keys, ownership and decisions;
//! * [`status`]: conditions and counts;
//! * [`options`]: controller options and their validation;
//! * [`features`]: the feature gates (`--feature-gates`);
//! * [`event_notes`]: the notes of the per-rack-write binding Events.

pub mod catalog;
pub mod event_notes;
pub mod features;
pub mod inventory;
#[cfg(test)]
mod inventory_tests;
pub mod options;
pub mod projection;
pub mod rack;
pub mod status;
