//! The global `--log-level` / `LOG_LEVEL` and the shape of text logs, through
//! the real binary (stderr is a pipe here, as under a log collector).

use std::process::{Command, Output};

/// `gpufleet gpuid run` that fails at once (its kubeconfig does not exist),
/// so it logs one error and exits.
fn failing_run(level_env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(args)
        .args(["gpuid", "run"])
        .env_clear()
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("CLUSTER_NAME", "logging")
        .envs(level_env.iter().copied())
        .output()
        .expect("gpufleet runs")
}

fn log_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|line| line.contains("gpuid collector failed"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn log_level_warning_means_warn_so_errors_are_still_logged() {
    for spelling in ["warning", "WARNING", "warn", " Warn "] {
        let out = failing_run(&[("LOG_LEVEL", spelling)], &[]);
        assert_eq!(out.status.code(), Some(2), "LOG_LEVEL={spelling:?}");
        let lines = log_lines(&out);
        assert_eq!(
            lines.len(),
            1,
            "LOG_LEVEL={spelling:?} must keep the error line; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(lines[0].contains("ERROR"), "{}", lines[0]);
    }
    let flag = failing_run(&[], &["--log-level", "warning"]);
    assert_eq!(log_lines(&flag).len(), 1, "--log-level warning");
    let error_only = failing_run(&[("LOG_LEVEL", "error")], &[]);
    assert_eq!(log_lines(&error_only).len(), 1, "LOG_LEVEL=error");
}

#[test]
fn an_unknown_log_level_fails_naming_the_accepted_levels() {
    let out = failing_run(&[("LOG_LEVEL", "loud")], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--log-level"), "{stderr}");
    assert!(
        stderr.contains("error, warn (or warning), info, debug or trace"),
        "{stderr}"
    );
}

#[test]
fn the_global_help_says_which_log_levels_are_accepted() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .arg("--help")
        .output()
        .expect("gpufleet runs");
    let help = String::from_utf8_lossy(&out.stdout);
    let flag = help
        .split("--log-level")
        .nth(1)
        .unwrap_or_default()
        .split("\n      --")
        .next()
        .unwrap_or_default()
        .to_owned();
    for level in ["error", "warning", "info", "debug", "trace", "RUST_LOG"] {
        assert!(
            flag.contains(level),
            "--log-level help lacks {level}:\n{flag}"
        );
    }
}

#[test]
fn text_logs_on_a_pipe_carry_no_ansi_colour_codes() {
    let out = failing_run(&[("LOG_LEVEL", "info"), ("LOG_FORMAT", "text")], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(log_lines(&out).len(), 1, "{stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "escape codes on a non-terminal stderr: {stderr:?}"
    );
}
