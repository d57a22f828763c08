//! `gpufleet-gpuid`: the gpuid controller alone, the same as `gpufleet gpuid`
//! with none of gpufleet's other commands linked in (see the crate docs).

// No `#[global_allocator]`: glibc's malloc, on one runtime worker; see
// gpufleet::allocator for the measurements.
fn main() -> std::process::ExitCode {
    gpufleet::entry::run(
        gpufleet::entry::Binary::Controller {
            name: "gpufleet-gpuid",
            subcommand: "gpuid",
            allocator: gpufleet::allocator::Allocator::System,
            worker_threads: Some(1),
        },
        gpufleet::entry::gpuid_command,
    )
}
