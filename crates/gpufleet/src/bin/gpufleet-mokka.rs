//! `gpufleet-mokka`: the mokka controller alone, the same as `gpufleet mokka`
//! with none of gpufleet's other commands linked in (see the crate docs).

#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    gpufleet::entry::run(
        gpufleet::entry::Binary::Controller {
            name: "gpufleet-mokka",
            subcommand: "mokka",
            allocator: gpufleet::allocator::Allocator::Mimalloc,
            worker_threads: None,
        },
        gpufleet::entry::mokka_command,
    )
}
