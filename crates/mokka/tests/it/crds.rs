//! The checked-in CRD YAML must equal what the Rust types generate.

use std::path::PathBuf;

fn checked_in_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds/mokka.nvidia.com.yaml")
}

#[test]
fn checked_in_crd_yaml_matches_the_types() {
    let generated = mokka::crds_yaml().unwrap();
    let path = checked_in_path();
    if std::env::var_os("UPDATE_CRDS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is out of date with the Rust types in crates/mokka/src/api.\n\
         Regenerate it with `cargo run -p gpufleet -- crds mokka > deploy/crds/mokka.nvidia.com.yaml`\n\
         or `UPDATE_CRDS=1 cargo test -p mokka --test it crds`.",
        path.display()
    );
}
