//! `gpufleet`: one binary for the GPU cluster control loops and kube-sim.

fn main() -> std::process::ExitCode {
    gpufleet::entry::run(gpufleet::entry::Binary::Full, gpufleet::entry::any_command)
}
