//! Custom resource validation as kube-apiserver does it for
//! `apiextensions.k8s.io/v1` CRDs, on `serde_json::Value`s and with no I/O.
//!
//! A [`CompiledSchema`] is built once per CRD version from its
//! `openAPIV3Schema` ([`CompiledSchema::compile`]), which rejects what the
//! apiserver rejects in a CRD (non-structural schemas, bad regexes, invalid
//! or unpruned defaults, CEL rules that do not compile). Then, per request:
//!
//! 1. [`CompiledSchema::prepare`] prunes unknown fields and applies
//!    defaults, as the apiserver does when it decodes a request body (and
//!    when it reads an object from storage);
//! 2. [`CompiledSchema::validate`] checks the OpenAPI value validations,
//!    the `x-kubernetes-list-type` invariants and the
//!    `x-kubernetes-validations` CEL rules, and returns the field errors a
//!    422 Invalid carries, worded as the apiserver words them
//!    ([`FieldError::message`], [`status_message`]).
//!
//! The wording follows a 1.33 apiserver (for example `Too long: may not be
//! more than 5 bytes` and `Invalid value: null` for the note about skipped
//! CEL rules).
//!
//! Deliberate limits, all documented where they apply: CEL runs without a
//! static type checker (so a rule naming a missing field fails when it is
//! evaluated rather than when the CRD is created) and with a cost proxy
//! instead of cel-go's cost model (see [`RUNTIME_COST_BUDGET`]); CEL values
//! have no `timestamp`, `duration`, `bytes` (format byte), `quantity`, `url`,
//! `ip` or `cidr` types (the Kubernetes list, regex and sets functions are
//! provided);
//! `metadata` is left to the caller (it is neither pruned nor validated here,
//! as the apiserver validates it as ObjectMeta).

mod compile;
mod errors;
mod formats;
mod k8s_lib;
mod prune;
mod rules;
mod validate;

use serde_json::Value;

pub(crate) use errors::go_quote;
pub use errors::{FieldError, FieldErrorKind, status_message};
pub(crate) use rules::{Bindings, cel_string, cel_type_name};
pub use rules::{Expression, PER_CALL_LIMIT, RUNTIME_COST_BUDGET};

/// A CRD version's schema, compiled for pruning, defaulting and validation.
#[derive(Debug)]
pub struct CompiledSchema {
    root: compile::Node,
    has_rules: bool,
}

/// Why a schema cannot be used, as field errors under `openAPIV3Schema`
/// (prefix them with `spec.versions[i].schema.` for a CRD's 422).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    #[error("invalid openAPIV3Schema: {}", join_messages(.0))]
    Invalid(Vec<FieldError>),
}

impl SchemaError {
    /// The individual problems, each naming the schema path.
    pub fn errors(&self) -> &[FieldError] {
        match self {
            SchemaError::Invalid(errs) => errs,
        }
    }
}

fn join_messages(errs: &[FieldError]) -> String {
    errs.iter()
        .map(FieldError::message)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The note the apiserver appends when schema errors keep it from running
/// the CEL rules.
const RULES_NOT_CHECKED: &str = "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation";

impl CompiledSchema {
    /// Compiles an `openAPIV3Schema` (regexes and CEL programs once), or
    /// says everything that makes the apiserver refuse it.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        let mut compiler = compile::Compiler::new();
        let root = compiler.compile_root(schema);
        let errs = compiler.into_errors();
        if !errs.is_empty() {
            return Err(SchemaError::Invalid(errs));
        }
        let has_rules = root.has_rules();
        Ok(CompiledSchema { root, has_rules })
    }

    /// Whether the schema carries any `x-kubernetes-validations` rule.
    pub fn has_rules(&self) -> bool {
        self.has_rules
    }

    /// Prunes unknown fields (keeping `apiVersion`, `kind` and `metadata` at
    /// the root and in embedded resources, and everything under
    /// `x-kubernetes-preserve-unknown-fields`), drops `null`s of
    /// non-nullable fields that have no default, then applies defaults where
    /// a field is absent. Run it on every decoded request body and on every
    /// object read from storage, as the apiserver defaults on both paths.
    ///
    /// Returns the sorted paths of the unknown fields it dropped (`spec.colour`,
    /// `spec.items[0].x`), for the apiserver's field validation: a warning
    /// `unknown field "<path>"` (Warn, kubectl's default) or a 400
    /// `strict decoding error: unknown field "<path>"` (Strict).
    pub fn prepare(&self, obj: &mut Value) -> Vec<String> {
        let mut pruned = Vec::new();
        prune::prune_value(&self.root, obj, true, "", &mut pruned);
        prune::prune_non_nullable_nulls(&self.root, obj);
        prune::apply_defaults(&self.root, obj);
        pruned.sort();
        pruned
    }

    /// Validates a prepared object; `old` is the stored object on an update
    /// (it enables transition rules and the apiserver's ratcheting of
    /// unchanged values). An empty result means valid.
    pub fn validate(&self, new: &Value, old: Option<&Value>) -> Vec<FieldError> {
        self.validate_after(new, old, Vec::new())
    }

    /// Like [`validate`](Self::validate), after errors the caller already
    /// found (the apiserver validates `metadata` first): they come first in
    /// the result and, like the schema's own errors, can keep the CEL rules
    /// from running.
    pub fn validate_after(
        &self,
        new: &Value,
        old: Option<&Value>,
        prior: Vec<FieldError>,
    ) -> Vec<FieldError> {
        self.validate_with(new, old, prior, rules::Evaluator::new())
    }

    fn validate_with(
        &self,
        new: &Value,
        old: Option<&Value>,
        prior: Vec<FieldError>,
        mut evaluator: rules::Evaluator,
    ) -> Vec<FieldError> {
        let mut errs = prior;
        validate::validate_value(&self.root, new, old, "", &mut errs);
        validate::validate_embedded_resources(&self.root, new, "", &mut errs);
        // List-type invariants are ratcheted as a whole: an update is only
        // checked when the old object met them.
        let old_lists_valid = old.is_none_or(|old| {
            let mut old_errs = Vec::new();
            validate::validate_list_types(&self.root, old, "", &mut old_errs);
            old_errs.is_empty()
        });
        if old_lists_valid {
            validate::validate_list_types(&self.root, new, "", &mut errs);
        }
        if !self.has_rules {
            return errs;
        }
        let blocking = errs.iter().any(|e| {
            matches!(
                e.kind,
                FieldErrorKind::NotSupported
                    | FieldErrorKind::Required
                    | FieldErrorKind::TooLong
                    | FieldErrorKind::TooMany
                    | FieldErrorKind::TypeInvalid
            )
        });
        if blocking {
            errs.push(FieldError::new(
                "",
                FieldErrorKind::Invalid,
                Some(Value::Null),
                RULES_NOT_CHECKED,
            ));
        } else {
            let corr = rules::Correlation {
                old,
                unchanged: old == Some(new),
            };
            evaluator.validate(&self.root, new, corr, "", true, &mut errs);
        }
        errs
    }
}

#[cfg(test)]
mod tests;
