//! Runtime policies: scope, target resolution, oldest-first conflict
//! settlement within a scope, and layering of accepted policies over the
//! profile defaults (RFC 7386 merge, broadest scope first).
//!
//! Unlike upstream, which re-evaluates every policy of an inventory on every
//! runtime request, [`Evaluation`] is built once per input revision and then
//! answers per-GPU queries from an index.

mod evaluate;
mod merge;
mod target;

pub use evaluate::{
    CONDITION_ACCEPTED, Decision, Evaluation, EvaluationError, EvaluationInput, GpuCoordinate,
    Outcome, policy_status,
};
pub use merge::{field_paths, merge_via_json};
pub use target::{
    AxisSelection, GroupBounds, GroupSelection, Scope, Selection, resolve_target, summaries,
};

#[cfg(test)]
mod tests;
