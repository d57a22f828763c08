//! Mokka pure-core benchmarks (filled in below as modules land).
fn main() {}
