//! Access to the nvidia-smi captures copied into `tests/fixtures/`.

use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Every capture, as `(name, bytes)` with name `hardware-gb200` etc.
pub fn all_captures() -> Vec<(String, Vec<u8>)> {
    let mut captures = Vec::new();
    for group in ["hardware", "simulated"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root().join(group))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "xml"))
            .collect();
        paths.sort();
        for path in paths {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            captures.push((format!("{group}-{stem}"), std::fs::read(&path).unwrap()));
        }
    }
    captures
}

pub fn capture(relative: &str) -> Vec<u8> {
    std::fs::read(root().join(relative)).unwrap()
}
