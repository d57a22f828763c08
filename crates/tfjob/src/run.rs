//! Wiring of the operator process.
