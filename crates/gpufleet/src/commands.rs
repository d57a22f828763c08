//! Small one-shot commands (printing CRDs); every other subcommand lives in
//! its own module below.

pub mod gpuid;
pub mod mokka;
pub mod mokka_node_view;
pub mod mokka_render;
pub mod sandbox;
pub mod tfjob;

use std::io::Write;

use anyhow::Context;

use crate::cli::CrdSet;

/// `gpufleet crds [all|mokka|tfjob]`: the generated CRDs, the same YAML as
/// in `deploy/crds/` (a test keeps the two identical).
pub fn print_crds(set: CrdSet) -> anyhow::Result<()> {
    let mokka = || ::mokka::crds_yaml().context("rendering the Mokka CRDs");
    let tfjob = || ::tfjob::api::crds_yaml().context("rendering the TFJob CRD");
    let yaml = match set {
        CrdSet::All => mokka()? + &tfjob()?,
        CrdSet::Mokka => mokka()?,
        CrdSet::Tfjob => tfjob()?,
    };
    std::io::stdout()
        .write_all(yaml.as_bytes())
        .context("writing to stdout")
}
