//! Integration tests of gpuid's pure core, one module per concern.

mod alloc;
mod caps;
mod docs;
mod fixtures;
mod fuzz;
mod golden;
mod pipeline;
