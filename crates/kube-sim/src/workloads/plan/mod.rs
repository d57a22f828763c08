//! The workload controllers' decisions, pure: the objects as the caches
//! hold them and the clock in, the writes to make out. No I/O here.

pub mod deployment;
pub mod job;
pub mod pods;
pub mod replicaset;
