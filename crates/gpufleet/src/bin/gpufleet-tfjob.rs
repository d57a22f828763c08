//! `gpufleet-tfjob`: the tfjob controller alone, the same as `gpufleet tfjob`
//! with none of gpufleet's other commands linked in (see the crate docs).

#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    gpufleet::entry::run(
        gpufleet::entry::Binary::Controller {
            name: "gpufleet-tfjob",
            subcommand: "tfjob",
            allocator: gpufleet::allocator::Allocator::Mimalloc,
            worker_threads: None,
        },
        gpufleet::entry::tfjob_command,
    )
}
