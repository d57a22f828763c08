//! Small one-shot commands: printing CRDs, parsing a capture, rendering
//! Mokka racks; the operator subcommands live in their own modules below.

pub mod mokka;
pub mod mokka_render;
pub mod tfjob;

use std::io::Write;
use std::path::Path;

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

/// `gpufleet gpuid parse FILE|-`: records as NDJSON on stdout.
pub fn gpuid_parse(file: &Path) -> anyhow::Result<()> {
    let ndjson = if file == Path::new("-") {
        gpuid::smi::parse_to_ndjson(std::io::stdin().lock())
            .context("parsing nvidia-smi XML from standard input")?
    } else {
        let reader =
            std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
        gpuid::smi::parse_to_ndjson(reader)
            .with_context(|| format!("parsing nvidia-smi XML from {}", file.display()))?
    };
    std::io::stdout()
        .write_all(ndjson.as_bytes())
        .context("writing to stdout")
}
