//! The gpufleet binary driven from outside, as users and CI drive it.

mod browser;
mod commands;
mod controller_binaries;
mod deploy_kustomize;
mod deploy_manifests;
mod gpuid_quickstart;
mod gpuid_rbac;
mod gpuid_run;
mod gpuid_switch;
mod helm_e2e;
mod logging;
mod mokka_crds;
mod mokka_render;
mod mokka_run;
mod sandbox_demo;
mod sandbox_fleet_view;
mod sandbox_metrics;
mod sim_data_dir;
mod sim_exec_rules;
mod sim_security;
mod sim_serve;
mod support;
mod tfjob_run;
