//! What the benches share: the machine's load for their rows, medians,
//! and a client from a kubeconfig. gpufleet's benches include this with
//! `mod bench_support;` (a folder of `benches/`, so not a bench of its
//! own), tfjob's `tfjob_scale` with `#[path]`.

use std::path::Path;

/// The 1-minute load average, for a row's notes.
pub fn load() -> String {
    load_averages()
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

/// The 1-, 5- and 15-minute load averages.
pub fn load_averages() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The middle value (the upper middle of an even count); NaN for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A client from `kubeconfig`; a bench cannot go on without one.
pub async fn client(kubeconfig: &Path) -> kube::Client {
    kube_sim::lane::client_from_kubeconfig(kubeconfig)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
