//! `gpufleet tfjob` arguments: upstream's flags (tf-operator's and
//! training-operator's spellings), and how they become the operator's
//! [`OperatorConfig`]. The process around it (client, signals, `convert`)
//! is in `commands::tfjob`; building and running the operator is
//! `tfjob::run::Operator`.
//!
//! [`single_dash_to_double`] lives here rather than with the command: it
//! is argument handling (Go's `-flag` spelling), it is derived from these
//! flags, and `main.rs` needs it before clap parses anything.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use ::tfjob::api::CleanPodPolicy;
use ::tfjob::plan::failures::ExitCodeSet;
use ::tfjob::run::OperatorConfig;
use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TfjobArgs {
    #[command(subcommand)]
    pub command: Option<TfjobCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum TfjobCommand {
    /// Turn v1alpha1 TFJob manifests into kubeflow.org/v1 YAML.
    Convert(ConvertArgs),
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The manifest file, or `-` for standard input.
    pub file: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CleanPodPolicyArg {
    All,
    Running,
    None,
}

/// The operator's flags. Upstream's names are kept (both tf-operator's and
/// training-operator's spellings), so existing Deployments start unchanged;
/// Go's single dash (`-namespace=x`) is accepted too (see
/// [`single_dash_to_double`]).
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Kubeconfig file; without it KUBECONFIG, then the in-cluster config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// API server URL, overriding the kubeconfig's.
    #[arg(long)]
    pub master: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Reconcile workers.
    #[arg(long, visible_alias = "controller-threads", default_value_t = 1)]
    pub threadiness: usize,
    /// Print the version and exit.
    #[arg(long)]
    pub version: bool,
    /// JSON log records (true) or text (false); overrides --log-format.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub json_log_format: Option<bool>,
    /// Gang scheduling: each job's PodGroup is created before its pods
    /// (with Volcano the pods wait until the group is admitted). Without
    /// this flag, a non-empty --gang-scheduler-name turns it on, as in
    /// training-operator; `=false` turns it off whatever the name.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_gang_scheduling: Option<bool>,
    /// The gang scheduler: `volcano` (the default; Volcano PodGroups) or the
    /// name of a scheduler-plugins scheduler with the coscheduling plugin
    /// (scheduling.x-k8s.io PodGroups, pods get this schedulerName).
    #[arg(long)]
    pub gang_scheduler_name: Option<String>,
    /// Port of the plain-HTTP `/metrics` (with `/healthz`, `/readyz`) on all
    /// addresses; 0 turns the server off. Shorthand for
    /// `--metrics-bind-address 0.0.0.0:PORT`.
    #[arg(long, conflicts_with = "metrics_bind_address")]
    pub monitoring_port: Option<u16>,
    /// Address of `/metrics`, `/healthz` and `/readyz` (`:8443` means all
    /// addresses).
    #[arg(
        long,
        visible_alias = "admin-address",
        default_value = "0.0.0.0:8443",
        value_parser = parse_bind_address
    )]
    pub metrics_bind_address: SocketAddr,
    /// A second server for `/healthz` and `/readyz` (training-operator's
    /// probe port); by default the probes are on the metrics address.
    #[arg(long, value_parser = parse_bind_address)]
    pub health_probe_bind_address: Option<SocketAddr>,
    /// Informer resync of tf-operator (`-resyc-period`, sic, also works).
    /// Accepted for compatibility: this operator is level-triggered with
    /// exact timers and needs no periodic resync.
    #[arg(long, visible_alias = "resyc-period", default_value = "12h", value_parser = parse_go_duration)]
    pub resync_period: Duration,
    /// Client requests per second (with --burst), client-go's token bucket;
    /// 0 (the default) means no client-side limit. tf-operator's default was
    /// 5, which makes large clusters wait.
    #[arg(long, default_value_t = 0.0)]
    pub qps: f64,
    /// Client burst over --qps.
    #[arg(long, default_value_t = 10)]
    pub burst: u32,
    /// Elect a leader among replicas on a coordination.k8s.io Lease.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, default_value = "tf-operator")]
    pub leader_election_id: String,
    /// cleanPodPolicy of jobs that set none (None: training-operator v1.7+
    /// parity, the default; Running: tf-operator's old default).
    #[arg(long, value_enum, ignore_case = true, default_value_t = CleanPodPolicyArg::None)]
    pub default_clean_pod_policy: CleanPodPolicyArg,
    /// Exit codes an `ExitCode` replica retries: codes and ranges, `N-`
    /// meaning N and above.
    #[arg(long, default_value = "128-")]
    pub retryable_exit_codes: ExitCodeSet,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "KUBEFLOW_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// DNS suffix appended to TF_CONFIG addresses after `.svc`.
    #[arg(long, env = "CUSTOM_CLUSTER_DOMAIN")]
    pub cluster_domain: Option<String>,
}

/// `:8443` (Go's all-addresses form), `0.0.0.0:8443` or `[::]:8443`.
fn parse_bind_address(text: &str) -> Result<SocketAddr, String> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_string()
    };
    full.parse()
        .map_err(|_| format!("{text:?} is not HOST:PORT or :PORT (e.g. :8443, 127.0.0.1:8080)"))
}

/// A Go duration as tf-operator's flags take them: `12h`, `1h30m`, `90s`,
/// `500ms` (the workspace's one grammar, `controller_kit::go_duration`);
/// negative ones mean nothing here.
fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 12h, 1h30m, 90s or 500ms");
    let nanos = controller_kit::go_duration::parse(text).ok_or_else(bad)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| bad())
}

/// Go's flag package takes `-name` and `-name=value` as long options;
/// clap reads a single dash as short options. Rewrites, after the `tfjob`
/// subcommand, every `-name…` whose name is one of the tfjob long flags
/// (or their aliases) to `--name…`, leaving everything else as it is.
pub fn single_dash_to_double(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let command = <RunArgs as Args>::augment_args(clap::Command::new("tfjob"));
    let longs: Vec<String> = command
        .get_arguments()
        .flat_map(|arg| {
            arg.get_long()
                .into_iter()
                .chain(arg.get_all_aliases().into_iter().flatten())
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut seen_subcommand = false;
    args.into_iter()
        .map(|arg| {
            let Some(text) = arg.to_str() else {
                return arg;
            };
            if !seen_subcommand {
                seen_subcommand = text == "tfjob";
                return arg;
            }
            match text.strip_prefix('-') {
                Some(rest) if !rest.starts_with('-') => {
                    let name = rest.split_once('=').map_or(rest, |(name, _)| name);
                    if longs.iter().any(|long| long == name) {
                        format!("-{text}").into()
                    } else {
                        arg
                    }
                }
                _ => arg,
            }
        })
        .collect()
}

impl RunArgs {
    /// Where `/metrics` (and the probes) are served; None when off.
    fn metrics_address(&self) -> Option<SocketAddr> {
        match self.monitoring_port {
            Some(0) => None,
            Some(port) => Some(SocketAddr::from(([0, 0, 0, 0], port))),
            None => Some(self.metrics_bind_address),
        }
    }

    /// Gang scheduling from `--enable-gang-scheduling` and
    /// `--gang-scheduler-name`: tf-operator's switch with Volcano as the
    /// default scheduler, or training-operator's scheduler name alone.
    fn gang_config(&self) -> anyhow::Result<Option<::tfjob::plan::gang::GangConfig>> {
        let name = self.gang_scheduler_name.as_deref();
        let scheduler_name = match (self.enable_gang_scheduling, name) {
            (Some(false), _) | (None, None | Some("")) => return Ok(None),
            (Some(true), Some("")) => anyhow::bail!(
                "--gang-scheduler-name \"\": must name the gang scheduler (volcano, or a scheduler-plugins scheduler) when --enable-gang-scheduling is on"
            ),
            (_, Some(name)) => name.to_string(),
            (Some(true), None) => ::tfjob::plan::gang::VOLCANO.to_string(),
        };
        Ok(Some(::tfjob::plan::gang::GangConfig { scheduler_name }))
    }

    /// The operator's settings from the flags (`--version` and the
    /// client's flags aside).
    pub fn operator_config(&self) -> anyhow::Result<OperatorConfig> {
        if !(self.qps >= 0.0 && self.qps.is_finite()) {
            anyhow::bail!(
                "--qps {}: must be a number of requests per second >= 0",
                self.qps
            );
        }
        let mut config = OperatorConfig::new(self.lease_namespace.clone());
        config.election.name = self.leader_election_id.clone();
        config.leader_election = self.leader_elect;
        config.namespace = self.namespace.clone().filter(|n| !n.is_empty());
        config.workers = self.threadiness.max(1);
        config.plan.cluster_domain = self.cluster_domain.clone().filter(|d| !d.is_empty());
        config.plan.default_clean_pod_policy = match self.default_clean_pod_policy {
            CleanPodPolicyArg::All => CleanPodPolicy::All,
            CleanPodPolicyArg::Running => CleanPodPolicy::Running,
            CleanPodPolicyArg::None => CleanPodPolicy::None,
        };
        config.plan.retryable_exit_codes = self.retryable_exit_codes.clone();
        config.plan.gang = self.gang_config()?;
        // tf-operator's one monitoring port, or training-operator's metrics
        // and probe addresses, each its own listener.
        config.admin = self
            .metrics_address()
            .into_iter()
            .chain(self.health_probe_bind_address)
            .collect();
        Ok(config)
    }
}
#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn parse(args: &[&str]) -> RunArgs {
        let argv = single_dash_to_double(args.iter().map(Into::into).collect());
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Tfjob(tfjob) => tfjob.run,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn a_tf_operator_deployments_go_style_flags_start_the_operator_unchanged() {
        let args = parse(&[
            "gpufleet",
            "tfjob",
            "-monitoring-port=8443",
            "-resyc-period=30s",
            "-threadiness=2",
            "-namespace",
            "kubeflow",
            "-json-log-format=false",
            "-qps",
            "5",
            "-burst=10",
            "-enable-gang-scheduling=false",
        ]);
        assert_eq!(
            args.metrics_address(),
            Some("0.0.0.0:8443".parse().unwrap())
        );
        assert_eq!(args.resync_period, Duration::from_secs(30));
        assert_eq!(args.json_log_format, Some(false));
        assert_eq!((args.qps, args.burst), (5.0, 10));
        let config = args.operator_config().unwrap();
        assert_eq!(config.admin, ["0.0.0.0:8443".parse().unwrap()]);
        assert_eq!(config.workers, 2);
        assert_eq!(config.namespace.as_deref(), Some("kubeflow"));
        assert!(config.leader_election);
        assert_eq!(config.election.name, "tf-operator");
    }

    #[test]
    fn training_operator_flags_are_understood_too() {
        let args = parse(&[
            "gpufleet",
            "tfjob",
            "--metrics-bind-address=:8080",
            "--health-probe-bind-address",
            ":8081",
            "--leader-elect=false",
            "--controller-threads",
            "3",
            "--leader-election-id",
            "1ca428e5.training-operator.kubeflow.org",
            "--default-clean-pod-policy",
            "None",
            "--retryable-exit-codes",
            "1,130-143",
        ]);
        assert_eq!(
            args.metrics_address(),
            Some("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            args.health_probe_bind_address,
            Some("0.0.0.0:8081".parse().unwrap())
        );
        let config = args.operator_config().unwrap();
        assert_eq!(
            config.admin,
            [
                "0.0.0.0:8080".parse().unwrap(),
                "0.0.0.0:8081".parse().unwrap()
            ]
        );
        assert!(!config.leader_election);
        assert_eq!(config.workers, 3);
        assert_eq!(
            config.election.name,
            "1ca428e5.training-operator.kubeflow.org"
        );
        assert_eq!(config.plan.default_clean_pod_policy, CleanPodPolicy::None);
        assert!(config.plan.retryable_exit_codes.contains(137));
        assert!(!config.plan.retryable_exit_codes.contains(255));
    }

    #[test]
    fn the_default_clean_pod_policy_is_none_and_the_flag_still_restores_running() {
        let defaults = parse(&["gpufleet", "tfjob"]).operator_config().unwrap();
        assert_eq!(
            defaults.plan.default_clean_pod_policy,
            CleanPodPolicy::None,
            "training-operator v1.9's default"
        );
        let old = parse(&["gpufleet", "tfjob", "--default-clean-pod-policy=Running"])
            .operator_config()
            .unwrap();
        assert_eq!(old.plan.default_clean_pod_policy, CleanPodPolicy::Running);
    }

    #[test]
    fn the_monitoring_port_0_turns_the_metrics_server_off() {
        assert_eq!(
            parse(&["gpufleet", "tfjob", "-monitoring-port=0"]).metrics_address(),
            None
        );
        let config = parse(&["gpufleet", "tfjob", "-monitoring-port=0"])
            .operator_config()
            .unwrap();
        assert!(config.admin.is_empty(), "{:?}", config.admin);
    }

    #[test]
    fn bad_flag_values_are_refused_naming_the_value_and_the_rule() {
        for (flag, value, rule) in [
            ("--resync-period", "12 hours", "duration such as 12h"),
            ("--metrics-bind-address", "8443", "HOST:PORT or :PORT"),
            ("--retryable-exit-codes", "143-130", "N-M with N <= M"),
        ] {
            let error = Cli::try_parse_from(["gpufleet", "tfjob", flag, value])
                .unwrap_err()
                .to_string();
            assert!(error.contains(value) && error.contains(rule), "{error}");
        }
        let empty = parse(&[
            "gpufleet",
            "tfjob",
            "--enable-gang-scheduling",
            "--gang-scheduler-name=",
        ])
        .operator_config()
        .unwrap_err()
        .to_string();
        assert!(
            empty.contains("--gang-scheduler-name") && empty.contains("must name"),
            "{empty}"
        );
    }

    #[test]
    fn the_gang_scheduler_follows_tf_operators_switch_or_training_operators_name() {
        let gang = |args: &[&str]| {
            let mut argv = vec!["gpufleet", "tfjob"];
            argv.extend_from_slice(args);
            parse(&argv)
                .operator_config()
                .unwrap()
                .plan
                .gang
                .map(|gang| (gang.scheduler_name.clone(), gang.scheduler()))
        };
        use ::tfjob::plan::gang::GangScheduler::{SchedulerPlugins, Volcano};
        assert_eq!(gang(&[]), None);
        assert_eq!(
            gang(&["-enable-gang-scheduling"]),
            Some(("volcano".into(), Volcano))
        );
        assert_eq!(
            gang(&["--gang-scheduler-name", "scheduler-plugins-scheduler"]),
            Some(("scheduler-plugins-scheduler".into(), SchedulerPlugins))
        );
        assert_eq!(
            gang(&[
                "-enable-gang-scheduling=true",
                "-gang-scheduler-name=volcano"
            ]),
            Some(("volcano".into(), Volcano))
        );
        assert_eq!(
            gang(&[
                "--enable-gang-scheduling=false",
                "--gang-scheduler-name=volcano"
            ]),
            None
        );
        assert_eq!(gang(&["--gang-scheduler-name="]), None);
    }

    #[test]
    fn single_dash_rewriting_touches_only_the_tfjob_long_flags() {
        let argv = single_dash_to_double(
            [
                "gpufleet",
                "-h",
                "tfjob",
                "-namespace=a",
                "-x",
                "--burst",
                "3",
                "-",
            ]
            .iter()
            .map(Into::into)
            .collect(),
        );
        assert_eq!(
            argv,
            [
                "gpufleet",
                "-h",
                "tfjob",
                "--namespace=a",
                "-x",
                "--burst",
                "3",
                "-"
            ]
            .map(std::ffi::OsString::from)
        );
    }

    #[test]
    fn go_durations_read_like_go() {
        assert_eq!(
            parse_go_duration("1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_go_duration("500ms").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            parse_go_duration("12h").unwrap(),
            Duration::from_secs(43_200)
        );
        assert!(parse_go_duration("h").is_err() && parse_go_duration("5").is_err());
    }
}
