//! `gpufleet-mokka`: the mokka controller alone, the same as `gpufleet mokka`
//! with none of gpufleet's other commands linked in (see the crate docs).

fn main() -> std::process::ExitCode {
    gpufleet::entry::run(
        gpufleet::entry::Binary::Controller {
            name: "gpufleet-mokka",
            subcommand: "mokka",
        },
        gpufleet::entry::mokka_command,
    )
}
