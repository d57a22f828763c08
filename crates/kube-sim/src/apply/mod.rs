//! Server-side apply field management and strategic merge patch, on
//! `serde_json::Value`, as the Kubernetes API server does them.
//!
//! Pure logic: no I/O, no clock (callers pass the time), no locking.

pub mod fields;
pub mod list_types;
pub mod managed;
pub mod ssa;
