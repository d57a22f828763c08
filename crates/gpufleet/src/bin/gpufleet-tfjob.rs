//! `gpufleet-tfjob`: the tfjob controller alone, the same as `gpufleet tfjob`
//! with none of gpufleet's other commands linked in (see the crate docs).

fn main() -> std::process::ExitCode {
    gpufleet::entry::run(
        gpufleet::entry::Binary::Controller {
            name: "gpufleet-tfjob",
            subcommand: "tfjob",
        },
        gpufleet::entry::tfjob_command,
    )
}
