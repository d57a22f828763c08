//! The process's allocator, and how the long-running controllers tune it.
//!
//! glibc's malloc serialises a thread's frees of memory another thread
//! allocated, and tokio moves tasks (and what they allocated) between
//! threads: under load a third of the cores sat waiting on its arena locks.
//! mimalloc frees across threads without a shared lock. The
//! `system-allocator` feature keeps glibc's, for heap profilers (heaptrack)
//! that see only malloc.
//!
//! mimalloc keeps freed pages for a while before it returns them to the
//! kernel (its purge delay: 1 s, ten times that for arena pages), which
//! suits kube-sim under load and costs the controllers their peak memory:
//! the pages a start-up list freed are still held when collection begins.
//! gpuid at 500 device-plugin pods peaked at 69 MiB with the delay and at
//! 47 MiB without it, for the same CPU time (docs/benchmarks.md, "gpuid's
//! memory"). mimalloc reads its options only from the environment, and
//! setting one from Rust would take `unsafe`, so a controller subcommand
//! re-executes the binary once with `MIMALLOC_PURGE_DELAY=0`. The process
//! keeps its PID (execve), arguments and environment; a value the user set
//! is left alone.
//!
//! Each binary declares its own `#[global_allocator]` (a library's would
//! bind every binary linking it). `gpufleet`, `gpufleet-mokka` and
//! `gpufleet-tfjob` use mimalloc. `gpufleet-gpuid` keeps glibc's malloc and
//! runs one runtime worker: its work is a few hundred execs at the API
//! server's pace (under a tenth of a core at 500 pods), so the lock
//! contention above does not arise, and at 500 pods its peak RSS was 19.6
//! MiB anonymous with mimalloc against 14.6 MiB with glibc, both on one
//! worker (docs/benchmarks.md, "gpuid's exec stream").

/// Which allocator a binary declared, which decides how it is tuned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocator {
    Mimalloc,
    System,
}

const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// The subcommands that run a controller for a long time.
const CONTROLLERS: [&str; 3] = ["gpuid", "mokka", "tfjob"];

/// The others, which keep mimalloc's defaults (kube-sim and the sandbox
/// free and reuse memory at a high rate).
const OTHER_SUBCOMMANDS: [&str; 4] = ["sim", "crds", "sandbox", "help"];

/// Whether the subcommand is a controller: the first argument naming a
/// subcommand, past global flags and their values.
fn runs_a_controller(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .filter_map(|arg| arg.to_str())
        .filter(|arg| !arg.starts_with('-'))
        .find(|arg| CONTROLLERS.contains(arg) || OTHER_SUBCOMMANDS.contains(arg))
        .is_some_and(|subcommand| CONTROLLERS.contains(&subcommand))
}

/// Re-executes this process with mimalloc's purge delay at zero when it runs
/// a controller and no delay was chosen; returns only when it does not
/// (another subcommand, the delay already set, or the exec failed).
/// `controller_binary`: the binary carries one controller only
/// (`gpufleet-gpuid` and its siblings), so whatever it runs is tuned.
pub fn tune_for_controllers(allocator: Allocator, controller_binary: bool) {
    if allocator != Allocator::Mimalloc
        || cfg!(feature = "system-allocator")
        || std::env::var_os(PURGE_DELAY).is_some()
    {
        return;
    }
    let mut args = std::env::args_os();
    let Some(program) = args.next() else {
        return;
    };
    let rest: Vec<std::ffi::OsString> = args.collect();
    if !controller_binary && !runs_a_controller(&rest) {
        return;
    }
    let Ok(binary) = std::env::current_exe() else {
        return;
    };
    use std::os::unix::process::CommandExt;
    let error = std::process::Command::new(binary)
        .arg0(program)
        .args(rest)
        .env(PURGE_DELAY, "0")
        .exec();
    // Still this process: run untuned rather than not at all.
    eprintln!("gpufleet: running with mimalloc's default purge delay (re-exec failed: {error})");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<std::ffi::OsString> {
        line.split_whitespace().map(Into::into).collect()
    }

    #[test]
    fn only_the_controller_subcommands_are_tuned() {
        assert!(runs_a_controller(&args("gpuid run")));
        assert!(runs_a_controller(&args(
            "--log-format json mokka --kubeconfig k"
        )));
        assert!(runs_a_controller(&args("tfjob -qps 20")));
        assert!(!runs_a_controller(&args("sim serve --port 0")));
        assert!(!runs_a_controller(&args("sandbox --nodes 36")));
        // A controller's name later on, as a value, is not the subcommand.
        assert!(!runs_a_controller(&args("sim serve --data-dir mokka")));
        assert!(!runs_a_controller(&args("--version")));
    }
}
