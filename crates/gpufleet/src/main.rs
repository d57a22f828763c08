//! `gpufleet`: one binary for the GPU cluster control loops and kube-sim.

#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    gpufleet::entry::run(gpufleet::entry::Binary::Full, gpufleet::entry::any_command)
}
