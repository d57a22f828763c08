//! The Kubeflow TFJob operator (`kubeflow.org/v1`), wire-compatible with
//! upstream tf-operator / training-operator: same CRD, child names,
//! `TF_CONFIG` bytes, conditions and events.
//!
//! Three rooms, as every gpufleet controller crate:
//! * [`api`]: wire types, replica types, in-memory defaults, validation, CRD;
//! * [`plan`]: pure decisions (names and labels, pods and Services,
//!   `TF_CONFIG`, the condition algebra, the planner) with no I/O and no clock;
//! * [`reconcile`] and [`run`]: the controller on controller-kit that
//!   observes, asks the planner, and acts; [`run::Operator`] is the one
//!   entry point that builds and runs it from an [`run::OperatorConfig`].

pub mod api;
pub mod events;
pub mod fixtures;
pub mod metrics;
pub mod plan;
pub mod pod_groups;
pub mod reconcile;
pub mod run;

#[cfg(test)]
pub(crate) mod testing;
