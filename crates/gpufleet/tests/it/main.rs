//! The gpufleet binary driven from outside, as users and CI drive it.

mod commands;
mod deploy_manifests;
mod gpuid_run;
mod mokka_crds;
mod mokka_render;
mod sim_serve;
mod support;
