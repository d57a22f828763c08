//! Server-side apply field management and strategic merge patch, on
//! `serde_json::Value`, as the Kubernetes API server does them.
//!
//! - [`list_types`]: how each list and map of a kind merges (CRD schema
//!   markers, or the table of built-in kinds).
//! - [`fields`]: `FieldsV1` field sets and the comparison of two objects.
//! - [`managed`]: `metadata.managedFields` entries.
//! - [`ssa`]: server-side apply, and ownership records for other writes.
//! - [`smp`]: strategic merge patch for built-in kinds.
//!
//! Pure logic: no I/O, no clock (callers pass the time), no locking.

pub mod fields;
pub mod list_types;
pub mod managed;
pub mod smp;
pub mod ssa;

pub use fields::{Comparison, FieldSet, FieldsError};
pub use list_types::{ListType, ListTypes, SchemaNode, SmpListStrategy};
pub use managed::{
    ManagedFieldsEntry, ManagedFieldsError, Operation, read_managed_fields, write_managed_fields,
};
pub use smp::{SmpError, strategic_merge};
pub use ssa::{
    ApplyError, FieldConflict, OptionCause, WriteContext, apply, manager_from_user_agent,
    record_update, validate_field_manager, validate_patch_options,
};
