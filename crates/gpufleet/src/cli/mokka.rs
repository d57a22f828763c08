//! `gpufleet mokka` arguments: upstream's control-plane flags, and those
//! of `mokka render` and `mokka node-view`. `commands::mokka` validates
//! them into its configuration and runs the control plane.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

/// A flag given twice takes its last value (`--kube-api-qps 1 --kube-api-qps
/// 2` is 2), as upstream's urfave/cli and Go's flag package do, instead of
/// clap's "cannot be used multiple times". clap passes the setting on to
/// `render` and `node-view`; `render -f` still collects every file.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, args_override_self = true)]
pub struct MokkaArgs {
    #[command(subcommand)]
    pub command: Option<MokkaCommand>,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Debug, Subcommand)]
pub enum MokkaCommand {
    /// Print the SGPURacks the controller would create for the profiles and
    /// inventories in some manifests (or the errors it would report).
    Render(RenderArgs),
    /// Print what the node-agent API would answer for one Node (its rack
    /// assignment and every GPU's effective runtime), from synced caches.
    NodeView(NodeViewArgs),
}

/// Upstream's control-plane flags. `--log-level` and `--log-format` are
/// gpufleet's global flags; for this command they take upstream's values
/// and environment variables (see `commands::mokka::log_settings`).
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Address of /healthz, /readyz and /metrics (`:8080` listens on every interface).
    #[arg(long, env = "MOKKA_CP_LISTEN_ADDR", default_value = ":8080")]
    pub listen_addr: String,
    /// How long the HTTP server may drain on SIGINT/SIGTERM.
    #[arg(
        long,
        env = "MOKKA_CP_SHUTDOWN_TIMEOUT",
        default_value = "5s",
        allow_hyphen_values = true
    )]
    pub shutdown_timeout: String,
    /// Kubeconfig file; empty means the in-cluster configuration (then KUBECONFIG).
    #[arg(long, env = "MOKKA_CP_KUBECONFIG", default_value = "")]
    pub kubeconfig: String,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else "default").
    #[arg(long, env = "MOKKA_CP_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "MOKKA_CP_LEADER_ELECTION_NAME",
        default_value = "control-plane.mokka.nvidia.com"
    )]
    pub leader_election_name: String,
    /// How long a leader's claim lasts without renewal.
    #[arg(long, default_value = "15s", allow_hyphen_values = true)]
    pub leader_election_lease_duration: String,
    /// How long the leader keeps trying to renew before it gives up.
    #[arg(long, default_value = "10s", allow_hyphen_values = true)]
    pub leader_election_renew_deadline: String,
    /// Pause between election attempts.
    #[arg(long, default_value = "2s", allow_hyphen_values = true)]
    pub leader_election_retry_period: String,
    /// Workers per queue.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
    pub workers: i64,
    /// Quiet period before a status update, and before the rack group a
    /// burst of Node events touched is reconciled (one rack write per burst).
    #[arg(long, default_value = "100ms", allow_hyphen_values = true)]
    pub status_debounce: String,
    /// Longest staleness of status while changes continue.
    #[arg(long, default_value = "1s", allow_hyphen_values = true)]
    pub status_progress_interval: String,
    /// Bound of the exact GET of a Node that left the filtered cache.
    #[arg(
        long,
        env = "MOKKA_CP_LIVE_NODE_GET_TIMEOUT",
        default_value = "2s",
        allow_hyphen_values = true
    )]
    pub live_node_get_timeout: String,
    /// Client-side request rate towards the API server.
    #[arg(long, default_value_t = 50.0, allow_negative_numbers = true)]
    pub kube_api_qps: f64,
    /// Client-side request burst towards the API server.
    #[arg(long, default_value_t = 100, allow_negative_numbers = true)]
    pub kube_api_burst: i64,
    /// Gates of what gpufleet adds beyond upstream, Kubernetes' syntax:
    /// `Name=true|false[,Name=bool...]`; empty means every default.
    /// Gates: NodeAgentAPI (the /v1alpha1 node-agent API), KubernetesEvents
    /// (Event objects), RuntimePolicies (watch and apply
    /// SGPURuntimePolicies); all default to true.
    #[arg(long, env = "MOKKA_CP_FEATURE_GATES", default_value = "")]
    pub feature_gates: String,
    /// gpufleet's fleet view (racks, their Nodes, each GPU's state,
    /// temperature and serial, gpuid's last inventory per Node, live) on
    /// this host:port, e.g. 127.0.0.1:8090. Off by default; upstream has
    /// no such page. It reads only what the control plane's RBAC grants
    /// (no pods, no TFJobs).
    #[arg(long, env = "MOKKA_CP_UI_ADDR", value_name = "ADDR")]
    pub ui: Option<String>,
}

/// A Go duration ("1m30s", "100ms", "-1s"), in nanoseconds, by the
/// workspace's one Go-duration grammar (`controller_kit::go_duration`).
pub fn parse_go_duration(text: &str) -> Result<i128, String> {
    controller_kit::go_duration::parse(text).ok_or_else(|| {
        format!("invalid duration {text:?}: use a Go duration such as 1m30s, 500ms or -1s")
    })
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Manifest files (YAML, several documents each) with SGPURackProfiles
    /// and SGPUInventories; `-` reads standard input.
    #[arg(short = 'f', long = "filename", required = true, num_args = 1..)]
    pub files: Vec<PathBuf>,
    /// Output format of the racks.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct NodeViewArgs {
    /// The Node's name.
    pub node: String,
    /// The Node's UID; read from the cluster when left out.
    #[arg(long)]
    pub uid: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = NodeViewFormat::Table)]
    pub output: NodeViewFormat,
    /// Kubeconfig file; without it the usual inference (KUBECONFIG, in-cluster).
    #[arg(long, env = "MOKKA_CP_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// How long to wait for the caches to sync.
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    pub sync_timeout: Duration,
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    let nanos = parse_go_duration(text)?;
    if nanos <= 0 {
        return Err(format!("{text:?} must be positive"));
    }
    Ok(Duration::from_nanos(
        u64::try_from(nanos).unwrap_or(u64::MAX),
    ))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NodeViewFormat {
    Table,
    Json,
}
