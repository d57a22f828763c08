//! Integration tests of gpuid's pure core, one module per concern.

mod alloc;
mod caps;
mod collect_e2e;
mod collect_leader_faults;
mod collect_ops;
mod collect_s3_qps;
mod collect_support;
mod docs;
mod events_e2e;
mod export_http;
mod export_metrics;
mod export_postgres;
mod export_postgres_tls;
mod export_s3;
mod export_stdout;
mod export_support;
mod fixtures;
mod fuzz;
mod golden;
mod pipeline;
mod stream;
