//! Mokka: simulated-GPU racks for Kubernetes.
//!
//! This crate holds the `mokka.nvidia.com/v1alpha1` API, the pure core the
//! controller builds on, and the controller itself. Outside [`controller`]
//! nothing does I/O or reads a clock: timestamps and cluster state are
//! passed in, so every function is a value-in, value-out computation that
//! tests can pin down with vectors. [`controller`] reads caches, asks
//! [`plan`] what to do, and writes.

pub mod allocate;
pub mod api;
pub mod controller;
mod error;
pub mod fixtures;
pub mod identity;
pub mod inventory;
pub mod limits;
pub mod node_meta;
pub mod node_view;
pub mod plan;
pub mod policy;
pub mod profile;
pub mod quantity;
pub mod render;
pub mod run;
pub mod selector;
mod text;

pub use api::{crds, crds_yaml};
pub use error::MokkaError;
