//! The gpufleet binary driven from outside, as users and CI drive it.

mod commands;
mod deploy_manifests;
mod gpuid_run;
mod helm_e2e;
mod mokka_crds;
mod mokka_render;
mod mokka_run;
mod sim_serve;
mod support;
mod tfjob_run;
