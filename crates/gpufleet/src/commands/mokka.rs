//! `gpufleet mokka [FLAGS]`: the Mokka control plane, with the flags and
//! environment variables of upstream's `control-plane`, so an operator
//! switches by changing the image and the command (`control-plane ARGS`
//! becomes `gpufleet mokka ARGS`). `gpufleet mokka render` previews racks
//! offline.
//!
//! A flag beats its environment variable. Configuration errors name the
//! flag and the rule and stop the process before it contacts the cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{ArgMatches, parser::ValueSource};
use controller_kit::telemetry::LogLevel;
use controller_kit::{LeaderElectionConfig, telemetry};
use mokka::controller::MokkaController;
use mokka::plan::features::FeatureGates;
use mokka::plan::options::Options;
use mokka::run::{ControlPlane, run_control_plane};
use mokka::selector::{is_dns_label, is_dns_subdomain};
use tokio_util::sync::CancellationToken;

use crate::cli::LogFormat;
use crate::cli::mokka::{RunArgs, parse_go_duration};

/// The validated configuration of one replica.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub listen: SocketAddr,
    /// The fleet view's address (`--ui`), if any.
    pub ui: Option<SocketAddr>,
    pub shutdown_timeout: Duration,
    pub kubeconfig: Option<PathBuf>,
    pub election: LeaderElectionConfig,
    pub options: Options,
    pub qps: f64,
    pub burst: u32,
}

/// A configuration error naming the flag and the rule.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid configuration ({flags}): {rule}")]
pub struct ConfigError {
    pub flags: &'static str,
    pub rule: String,
}

fn error(flags: &'static str, rule: impl Into<String>) -> ConfigError {
    ConfigError {
        flags,
        rule: rule.into(),
    }
}

fn duration(flag: &'static str, text: &str) -> Result<i128, ConfigError> {
    parse_go_duration(text).map_err(|message| error(flag, message))
}

fn to_std(nanos: i128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX))
}

/// `":8080"` listens on every interface, as Go's net/http.
fn listen_address(text: &str) -> Result<SocketAddr, ConfigError> {
    socket_address("--listen-addr", text)
}

fn socket_address(flag: &'static str, text: &str) -> Result<SocketAddr, ConfigError> {
    let full = if text.starts_with(':') {
        format!("0.0.0.0{text}")
    } else {
        text.to_string()
    };
    full.parse()
        .map_err(|_| error(flag, format!("{text:?} is not a host:port address")))
}

impl Config {
    /// Upstream's validation rules, in upstream's order.
    pub fn from_args(args: &RunArgs, pod_namespace: Option<String>) -> Result<Config, ConfigError> {
        let namespace = args
            .leader_election_namespace
            .clone()
            .or(pod_namespace.filter(|ns| !ns.is_empty()))
            .unwrap_or_else(|| "default".to_string());
        let name = args.leader_election_name.clone();
        let election_flags = "--leader-election-namespace, --leader-election-name";
        if namespace.is_empty() || name.is_empty() {
            return Err(error(
                election_flags,
                "leader-election namespace and name must not be empty",
            ));
        }
        if !is_dns_subdomain(&name) {
            return Err(error(
                "--leader-election-name",
                format!("leader-election name {name:?} must be a DNS-1123 subdomain"),
            ));
        }
        if !is_dns_label(&namespace) {
            return Err(error(
                "--leader-election-namespace",
                format!("leader-election namespace {namespace:?} must be a DNS-1123 label"),
            ));
        }
        let debounce = duration("--status-debounce", &args.status_debounce)?;
        let progress = duration("--status-progress-interval", &args.status_progress_interval)?;
        let live = duration("--live-node-get-timeout", &args.live_node_get_timeout)?;
        if args.workers < 1 || live <= 0 || debounce < 0 || progress < 0 {
            return Err(error(
                "--workers, --live-node-get-timeout, --status-debounce, --status-progress-interval",
                "workers and live Node GET timeout must be positive and status intervals non-negative",
            ));
        }
        let options = Options {
            workers: usize::try_from(args.workers).unwrap_or(usize::MAX),
            status_debounce: to_std(debounce),
            status_progress_interval: to_std(progress),
            live_node_get_timeout: to_std(live),
            features: FeatureGates::parse(&args.feature_gates)
                .map_err(|e| error("--feature-gates (MOKKA_CP_FEATURE_GATES)", e.to_string()))?,
        };
        options.validate().map_err(|e| {
            error(
                "--status-debounce, --status-progress-interval",
                e.to_string(),
            )
        })?;
        let lease = duration(
            "--leader-election-lease-duration",
            &args.leader_election_lease_duration,
        )?;
        let renew = duration(
            "--leader-election-renew-deadline",
            &args.leader_election_renew_deadline,
        )?;
        let retry = duration(
            "--leader-election-retry-period",
            &args.leader_election_retry_period,
        )?;
        let durations = "--leader-election-lease-duration, --leader-election-renew-deadline, --leader-election-retry-period";
        if !(retry > 0 && lease > renew && (renew as f64) > (retry as f64) * 1.2) {
            return Err(error(
                durations,
                "leader-election durations must satisfy lease > renew > retry*jitter",
            ));
        }
        let qps_positive = args.kube_api_qps.is_finite() && args.kube_api_qps > 0.0;
        if !qps_positive || args.kube_api_burst < 1 {
            return Err(error(
                "--kube-api-qps, --kube-api-burst",
                "kubernetes API QPS and burst must be positive",
            ));
        }
        let mut election = LeaderElectionConfig::new(namespace, name);
        election.lease_duration = to_std(lease);
        election.renew_deadline = to_std(renew);
        election.retry_period = to_std(retry);
        election
            .validate()
            .map_err(|e| error(durations, e.to_string()))?;
        let shutdown = duration("--shutdown-timeout", &args.shutdown_timeout)?;
        if shutdown < 0 {
            return Err(error(
                "--shutdown-timeout",
                "the shutdown timeout must not be negative",
            ));
        }
        Ok(Config {
            listen: listen_address(&args.listen_addr)?,
            ui: match args.ui.as_deref() {
                Some(text) if !text.is_empty() => Some(socket_address("--ui", text)?),
                _ => None,
            },
            shutdown_timeout: to_std(shutdown),
            kubeconfig: (!args.kubeconfig.is_empty()).then(|| PathBuf::from(&args.kubeconfig)),
            election,
            options,
            qps: args.kube_api_qps,
            burst: u32::try_from(args.kube_api_burst).unwrap_or(u32::MAX),
        })
    }
}

/// Upstream's log level words: debug, info, warn (or warning), error; empty is info.
pub fn upstream_log_level(source: &str, value: &str) -> Result<&'static str, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "info" => Ok("info"),
        "debug" => Ok("debug"),
        "warn" | "warning" => Ok("warn"),
        "error" => Ok("error"),
        other => Err(format!(
            "{source}={other:?}: the log level must be debug, info, warn or error"
        )),
    }
}

/// Upstream's log formats: json (the default, also when empty) or plain.
pub fn upstream_log_format(source: &str, value: &str) -> Result<LogFormat, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "json" => Ok(LogFormat::Json),
        "plain" | "text" => Ok(LogFormat::Text),
        other => Err(format!(
            "{source}={other:?}: the log format must be json or plain"
        )),
    }
}

/// The logging of `gpufleet mokka`: the flag when given, else
/// MOKKA_LOG_FORMAT / MOKKA_LOG_LEVEL (then MOKKA_CP_LOG_LEVEL, the older
/// name), else json and info.
pub fn log_settings(
    matches: &ArgMatches,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(LogFormat, LogLevel), String> {
    let from_command_line = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    let format = if from_command_line("log_format") {
        matches
            .get_one::<LogFormat>("log_format")
            .copied()
            .unwrap_or(LogFormat::Json)
    } else {
        upstream_log_format(
            "MOKKA_LOG_FORMAT",
            &env("MOKKA_LOG_FORMAT").unwrap_or_default(),
        )?
    };
    let level = if from_command_line("log_level") {
        // The global flag's own parser has already read the value.
        let level = matches
            .get_one::<LogLevel>("log_level")
            .copied()
            .unwrap_or(LogLevel::Info);
        return Ok((format, level));
    } else if let Some(value) = env("MOKKA_LOG_LEVEL") {
        upstream_log_level("MOKKA_LOG_LEVEL", &value)?
    } else {
        upstream_log_level(
            "MOKKA_CP_LOG_LEVEL",
            &env("MOKKA_CP_LOG_LEVEL").unwrap_or_default(),
        )?
    };
    LogLevel::parse(level)
        .map(|level| (format, level))
        .ok_or_else(|| format!("log level {level:?} is not one of {}", LogLevel::ACCEPTED))
}

async fn client(config: &Config) -> anyhow::Result<kube::Client> {
    let mut kube_config = match &config.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {} (--kubeconfig)", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster configuration: run in a Pod, or pass --kubeconfig")?,
    };
    kube_config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static("mokka-control-plane"),
    ));
    // client-go's --kube-api-qps/--kube-api-burst: gpuid's token bucket.
    controller_kit::rate_limited_client(kube_config, config.qps, config.burst)
        .context("building the Kubernetes client")
}

/// Runs the control plane until SIGINT/SIGTERM.
pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = Config::from_args(&args, std::env::var("POD_NAMESPACE").ok())?;
    let client = client(&config).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(telemetry::cancel_on_signal(shutdown.clone()));
    if let Some(address) = config.ui {
        serve_fleet_view(&client, address, shutdown.clone()).await?;
    }
    run_with_client(
        client,
        ControlPlane {
            options: config.options,
            election: config.election,
            admin: Some(config.listen),
            shutdown_timeout: config.shutdown_timeout,
        },
        shutdown,
    )
    .await
}

/// `--ui`: the sandbox's fleet view over this replica's client, watching
/// the Mokka objects and Nodes only; it stops with the control plane.
async fn serve_fleet_view(
    client: &kube::Client,
    address: SocketAddr,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    use crate::fleet_view::live::Live;
    use crate::fleet_view::model::Mode;
    use crate::fleet_view::{server as ui, state::FleetState};
    let state = FleetState::new(client, false)?;
    let server = ui::bind_address(address).await?;
    tracing::info!(address = %server.local_addr, "serving the fleet view (--ui)");
    {
        let (state, stop) = (state.clone(), shutdown.clone());
        tokio::spawn(async move {
            if let Err(error) = state.run(stop).await {
                tracing::error!(
                    error = format!("{error:#}"),
                    "the fleet view's caches stopped"
                );
            }
        });
    }
    let live = Live::start(state, Mode::Cluster, shutdown.clone());
    tokio::spawn(async move {
        if let Err(error) = server.serve(live, None, shutdown).await {
            tracing::error!(error = format!("{error:#}"), "the fleet view stopped");
        }
    });
    Ok(())
}

/// The control plane on a given client until `shutdown`.
pub async fn run_with_client(
    client: kube::Client,
    plane: ControlPlane,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let controller = Arc::new(MokkaController::new(client, plane.options)?);
    run_control_plane(controller, plane, shutdown)
        .await
        .map_err(anyhow::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::mokka::{MokkaArgs, MokkaCommand};
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Probe {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(extra: &[&str]) -> RunArgs {
        let mut argv = vec!["mokka"];
        argv.extend_from_slice(extra);
        Probe::try_parse_from(argv).unwrap().run
    }

    #[test]
    fn default_config_values() {
        let config = Config::from_args(&args(&[]), None).unwrap();
        assert_eq!(config.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(config.shutdown_timeout, Duration::from_secs(5));
        assert_eq!(config.kubeconfig, None);
        assert_eq!(config.election.namespace, "default");
        assert_eq!(config.election.name, "control-plane.mokka.nvidia.com");
        assert_eq!(config.election.lease_duration, Duration::from_secs(15));
        assert_eq!(config.election.renew_deadline, Duration::from_secs(10));
        assert_eq!(config.election.retry_period, Duration::from_secs(2));
        assert_eq!(config.options, Options::default());
        assert_eq!((config.qps, config.burst), (50.0, 100));
        let in_pod = Config::from_args(&args(&[]), Some("mokka-system".into())).unwrap();
        assert_eq!(in_pod.election.namespace, "mokka-system");
    }

    /// argv through gpufleet's own top-level parser, so the settings of
    /// the `mokka` command apply as they do in the binary.
    fn gpufleet(argv: &[&str]) -> crate::cli::Cli {
        let mut full = vec!["gpufleet"];
        full.extend_from_slice(argv);
        crate::cli::Cli::try_parse_from(full).unwrap()
    }

    fn mokka(cli: crate::cli::Cli) -> MokkaArgs {
        match cli.command {
            crate::cli::Command::Mokka(args) => *args,
            other => panic!("not the mokka command: {other:?}"),
        }
    }

    #[test]
    fn a_repeated_flag_takes_its_last_value_like_upstreams_cli() {
        let args = mokka(gpufleet(&[
            "mokka",
            "--kube-api-qps",
            "1",
            "--kube-api-qps",
            "2",
            "--workers",
            "0",
            "--workers",
            "3",
            "--feature-gates",
            "NodeAgentAPI=false",
            "--feature-gates",
            "KubernetesEvents=false",
            "--ui",
            "127.0.0.1:1",
            "--ui",
            "127.0.0.1:2",
        ]));
        assert!(args.command.is_none());
        assert_eq!(args.run.kube_api_qps, 2.0);
        assert_eq!(args.run.workers, 3);
        assert_eq!(args.run.feature_gates, "KubernetesEvents=false");
        assert_eq!(args.run.ui.as_deref(), Some("127.0.0.1:2"));
        let config = Config::from_args(&args.run, None).unwrap();
        assert_eq!(config.qps, 2.0);
        assert!(config.options.features.node_agent_api);
        assert!(!config.options.features.kubernetes_events);

        // gpufleet's global log flags, given after `mokka`.
        let cli = gpufleet(&["mokka", "--log-level", "debug", "--log-level", "warn"]);
        assert_eq!(cli.log_level, LogLevel::Warn);

        // The subcommands: last value for single-valued flags, every file for -f.
        match mokka(gpufleet(&[
            "mokka", "render", "-f", "a.yaml", "-f", "b.yaml", "-o", "json", "-o", "yaml",
        ]))
        .command
        {
            Some(MokkaCommand::Render(render)) => {
                assert_eq!(render.files.len(), 2);
                assert!(matches!(
                    render.output,
                    crate::cli::mokka::OutputFormat::Yaml
                ));
            }
            other => panic!("{other:?}"),
        }
        match mokka(gpufleet(&[
            "mokka",
            "node-view",
            "n1",
            "--uid",
            "a",
            "--uid",
            "b",
        ]))
        .command
        {
            Some(MokkaCommand::NodeView(view)) => assert_eq!(view.uid.as_deref(), Some("b")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn config_validation_cases() {
        let rule = |extra: &[&str]| Config::from_args(&args(extra), None).unwrap_err().rule;
        assert_eq!(
            rule(&["--leader-election-name", ""]),
            "leader-election namespace and name must not be empty"
        );
        assert_eq!(
            rule(&["--leader-election-namespace", ""]),
            "leader-election namespace and name must not be empty"
        );
        let positive =
            "workers and live Node GET timeout must be positive and status intervals non-negative";
        assert_eq!(rule(&["--workers", "0"]), positive);
        assert_eq!(rule(&["--status-debounce", "-1s"]), positive);
        assert_eq!(rule(&["--status-progress-interval", "-1ms"]), positive);
        assert_eq!(rule(&["--live-node-get-timeout", "0"]), positive);
        assert_eq!(
            rule(&[
                "--status-debounce",
                "2s",
                "--status-progress-interval",
                "1s"
            ]),
            "status progress interval must not be shorter than status debounce"
        );
        let lease = "leader-election durations must satisfy lease > renew > retry*jitter";
        assert_eq!(rule(&["--leader-election-lease-duration", "10s"]), lease);
        assert_eq!(rule(&["--leader-election-retry-period", "-2s"]), lease);
        assert_eq!(
            rule(&["--kube-api-qps", "0"]),
            "kubernetes API QPS and burst must be positive"
        );
        assert_eq!(
            rule(&["--kube-api-burst", "0"]),
            "kubernetes API QPS and burst must be positive"
        );
        let error = Config::from_args(&args(&["--workers", "0"]), None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("--workers"), "{error}");
        assert!(rule(&["--leader-election-name", "Not_A_Name"]).contains("DNS-1123 subdomain"));
    }

    #[test]
    fn feature_gates_come_from_the_flag_and_bad_items_name_the_flag_and_the_variable() {
        assert_eq!(
            Config::from_args(&args(&[]), None)
                .unwrap()
                .options
                .features,
            FeatureGates::default()
        );
        let config = Config::from_args(
            &args(&[
                "--feature-gates",
                " NodeAgentAPI=false , KubernetesEvents=false",
            ]),
            None,
        )
        .unwrap();
        let features = config.options.features;
        assert!(!features.node_agent_api && !features.kubernetes_events);
        assert!(features.runtime_policies);
        let error = Config::from_args(&args(&["--feature-gates", "Foo=true"]), None).unwrap_err();
        assert_eq!(error.flags, "--feature-gates (MOKKA_CP_FEATURE_GATES)");
        assert!(
            error.rule.contains("unrecognized feature gate \"Foo\""),
            "{}",
            error.rule
        );
        let error = Config::from_args(&args(&["--feature-gates", "RuntimePolicies=yes"]), None)
            .unwrap_err();
        assert!(error.rule.contains("is not a boolean"), "{}", error.rule);
    }

    #[test]
    fn go_durations_parse_like_go() {
        assert_eq!(parse_go_duration("1m30s").unwrap(), 90_000_000_000);
        assert_eq!(parse_go_duration("100ms").unwrap(), 100_000_000);
        assert_eq!(parse_go_duration("1.5h").unwrap(), 5_400_000_000_000);
        assert_eq!(parse_go_duration("-1s").unwrap(), -1_000_000_000);
        assert_eq!(parse_go_duration("0").unwrap(), 0);
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5d").is_err());
    }

    #[test]
    fn logger_levels_follow_upstream_words() {
        assert_eq!(upstream_log_level("x", ""), Ok("info"));
        assert_eq!(upstream_log_level("x", "warning"), Ok("warn"));
        assert_eq!(upstream_log_level("x", "DEBUG"), Ok("debug"));
        assert!(
            upstream_log_level("MOKKA_LOG_LEVEL", "trace")
                .unwrap_err()
                .contains("MOKKA_LOG_LEVEL")
        );
        assert_eq!(upstream_log_format("x", ""), Ok(LogFormat::Json));
        assert_eq!(upstream_log_format("x", "plain"), Ok(LogFormat::Text));
        assert!(upstream_log_format("MOKKA_LOG_FORMAT", "xml").is_err());
    }
}
