//! `gpufleet-gpuid`: the gpuid controller alone, the same as `gpufleet gpuid`
//! with none of gpufleet's other commands linked in (see the crate docs).

fn main() -> std::process::ExitCode {
    gpufleet::entry::run(
        gpufleet::entry::Binary::Controller {
            name: "gpufleet-gpuid",
            subcommand: "gpuid",
        },
        gpufleet::entry::gpuid_command,
    )
}
