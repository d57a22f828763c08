//! Integration tests for gpuid; modules are added per concern.
