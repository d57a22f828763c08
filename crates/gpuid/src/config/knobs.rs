//! Every configuration knob: environment variable (upstream names), command
//! line flag, default and help. The binary generates its flags from
//! [`KNOBS`]; [`super::Config::from_sources`] applies "flag beats env".

/// Which part of gpuid a knob configures (a help heading for the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KnobGroup {
    Core,
    LeaderElection,
    HttpExporter,
    PostgresExporter,
    S3Exporter,
    /// The pipeline in front of every exporter (batching, retries, queue).
    ExportPipeline,
}

/// One configuration knob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knob {
    /// Environment variable, as upstream spells it.
    pub env: &'static str,
    /// Long flag without the leading `--`.
    pub flag: &'static str,
    /// Default as the user would type it; `None` when there is none.
    pub default: Option<&'static str>,
    pub help: &'static str,
    pub group: KnobGroup,
    /// Credentials: values are redacted in errors and `Debug` output.
    pub secret: bool,
}

macro_rules! knobs {
    ($($name:ident = $env:literal, $flag:literal, $default:expr, $group:ident, $secret:literal, $help:literal;)*) => {
        $(
            #[doc = $help]
            pub const $name: Knob = Knob {
                env: $env,
                flag: $flag,
                default: $default,
                help: $help,
                group: KnobGroup::$group,
                secret: $secret,
            };
        )*
        /// All knobs, in the order upstream lists and validates them,
        /// followed by the exporter knobs.
        pub const KNOBS: &[Knob] = &[$($name),*];
    };
}

knobs! {
    EXPORTER_TYPE = "EXPORTER_TYPE", "exporter-type", Some("stdout"), Core, false,
        "Where records go: stdout, http, postgres or s3.";
    CLUSTER_NAME = "CLUSTER_NAME", "cluster-name", None, Core, false,
        "Cluster name stamped on every record (required).";
    NAMESPACE = "NAMESPACE", "namespace", Some("gpu-operator"), Core, false,
        "Namespaces to watch for device-plugin pods, comma-separated.";
    LABEL_SELECTOR = "LABEL_SELECTOR", "label-selector", Some("app=nvidia-device-plugin-daemonset"), Core, false,
        "Label selector of the device-plugin pods.";
    CONTAINER = "CONTAINER", "container", Some("nvidia-device-plugin"), Core, false,
        "Container in the device-plugin pod that runs nvidia-smi.";
    WORKERS = "WORKERS", "workers", Some("16"), Core, false,
        "Pods processed concurrently (1-100).";
    TIMEOUT = "TIMEOUT", "timeout", Some("30s"), Core, false,
        "Time budget per pod: exec, labels and export (at most 10m).";
    RESYNC = "RESYNC", "resync", Some("0"), Core, false,
        "Periodic resync of the pod cache; 0 disables it.";
    QPS = "QPS", "qps", Some("50"), Core, false,
        "Kubernetes API client queries per second.";
    BURST = "BURST", "burst", Some("100"), Core, false,
        "Kubernetes API client burst (at least QPS).";
    KUBECONFIG = "KUBECONFIG", "kubeconfig", None, Core, false,
        "Kubeconfig path when not running in a cluster.";
    LOG_LEVEL = "LOG_LEVEL", "log-level", Some("info"), Core, false,
        "error, warn (or warning), info, debug or trace; case-insensitive. The same variable sets the global --log-level.";
    SERVER_PORT = "SERVER_PORT", "server-port", Some("8080"), Core, false,
        "Port of /healthz, /readyz and /metrics (1000-65535).";
    LEADER_ELECTION = "LEADER_ELECTION", "leader-election", Some("false"), LeaderElection, false,
        "Run only while holding the Lease (for more than one replica).";
    LEASE_NAMESPACE = "LEASE_NAMESPACE", "lease-namespace", Some("gpuid"), LeaderElection, false,
        "Namespace of the leader-election Lease.";
    LEASE_NAME = "LEASE_NAME", "lease-name", Some("gpuid-leader"), LeaderElection, false,
        "Name of the leader-election Lease.";
    LEASE_DURATION = "LEASE_DURATION", "lease-duration", Some("15s"), LeaderElection, false,
        "How long a Lease is valid without renewal.";
    LEASE_RENEW_DEADLINE = "LEASE_RENEW_DEADLINE", "lease-renew-deadline", Some("10s"), LeaderElection, false,
        "How long the leader keeps retrying renewal before giving up.";
    LEASE_RETRY_PERIOD = "LEASE_RETRY_PERIOD", "lease-retry-period", Some("2s"), LeaderElection, false,
        "Interval between attempts to acquire or renew the Lease.";
    POD_NAME = "POD_NAME", "pod-name", None, LeaderElection, false,
        "This pod's name (downward API); required with leader election.";
    POD_NAMESPACE = "POD_NAMESPACE", "pod-namespace", None, LeaderElection, false,
        "This pod's namespace (downward API).";
    HTTP_ENDPOINT = "HTTP_ENDPOINT", "http-endpoint", None, HttpExporter, false,
        "http:// or https:// URL that receives records (required for http).";
    HTTP_TIMEOUT = "HTTP_TIMEOUT", "http-timeout", Some("30s"), HttpExporter, false,
        "Timeout of one HTTP export request.";
    HTTP_AUTH_TOKEN = "HTTP_AUTH_TOKEN", "http-auth-token", None, HttpExporter, true,
        "Bearer token sent as Authorization.";
    HTTP_AUTH_TOKEN_FILE = "HTTP_AUTH_TOKEN_FILE", "http-auth-token-file", None, HttpExporter, false,
        "File holding the bearer token (instead of HTTP_AUTH_TOKEN).";
    HTTP_HEADERS = "HTTP_HEADERS", "http-headers", None, HttpExporter, true,
        "Extra request headers: Name=value,Other=value.";
    POSTGRES_DSN = "POSTGRES_DSN", "postgres-dsn", None, PostgresExporter, true,
        "postgres:// URL; replaces POSTGRES_HOST/PORT/DB/USER/PASSWORD/SSLMODE.";
    POSTGRES_DSN_FILE = "POSTGRES_DSN_FILE", "postgres-dsn-file", None, PostgresExporter, false,
        "File holding the postgres:// URL (instead of POSTGRES_DSN).";
    POSTGRES_HOST = "POSTGRES_HOST", "postgres-host", None, PostgresExporter, false,
        "PostgreSQL host (required for postgres unless POSTGRES_DSN is set).";
    POSTGRES_PORT = "POSTGRES_PORT", "postgres-port", Some("5432"), PostgresExporter, false,
        "PostgreSQL port.";
    POSTGRES_DB = "POSTGRES_DB", "postgres-db", None, PostgresExporter, false,
        "PostgreSQL database.";
    POSTGRES_USER = "POSTGRES_USER", "postgres-user", None, PostgresExporter, false,
        "PostgreSQL user.";
    POSTGRES_PASSWORD = "POSTGRES_PASSWORD", "postgres-password", None, PostgresExporter, true,
        "PostgreSQL password.";
    POSTGRES_PASSWORD_FILE = "POSTGRES_PASSWORD_FILE", "postgres-password-file", None, PostgresExporter, false,
        "File holding the PostgreSQL password (instead of POSTGRES_PASSWORD).";
    POSTGRES_SSLMODE = "POSTGRES_SSLMODE", "postgres-sslmode", Some("require"), PostgresExporter, false,
        "disable, allow, prefer, require, verify-ca or verify-full.";
    POSTGRES_SSLROOTCERT = "POSTGRES_SSLROOTCERT", "postgres-sslrootcert", None, PostgresExporter, false,
        "PEM file of the CA certificates that sign the server's certificate (default: the system's roots).";
    POSTGRES_TABLE = "POSTGRES_TABLE", "postgres-table", Some("gpu"), PostgresExporter, false,
        "Table name, optionally schema-qualified (schema.table); the name at most 39 characters, the schema at most 63; empty means gpu.";
    POSTGRES_AUTO_MIGRATE = "POSTGRES_AUTO_MIGRATE", "postgres-auto-migrate", Some("true"), PostgresExporter, false,
        "Create or migrate the tables and view before the first export (adopting a table upstream gpuid filled); false leaves the schema to a DBA and waits until it is applied.";
    S3_BUCKET = "S3_BUCKET", "s3-bucket", None, S3Exporter, false,
        "Bucket that receives record objects (required for s3).";
    S3_PREFIX = "S3_PREFIX", "s3-prefix", None, S3Exporter, false,
        "Leading key segment of every object.";
    S3_REGION = "S3_REGION", "s3-region", Some("us-east-1"), S3Exporter, false,
        "Bucket region.";
    S3_PARTITION_PATTERN = "S3_PARTITION_PATTERN", "s3-partition-pattern", Some("year=%Y/month=%m/day=%d/hour=%H"), S3Exporter, false,
        "Key partition; %Y, %m, %d and %H are replaced (UTC).";
    S3_ENDPOINT = "S3_ENDPOINT", "s3-endpoint", None, S3Exporter, false,
        "Custom S3 endpoint URL (MinIO, moto, other regions' endpoints).";
    S3_FORCE_PATH_STYLE = "S3_FORCE_PATH_STYLE", "s3-force-path-style", Some("false"), S3Exporter, false,
        "Address buckets as endpoint/bucket instead of bucket.endpoint.";
    S3_FORMAT = "S3_FORMAT", "s3-format", Some("csv"), S3Exporter, false,
        "Object body format: csv (with a header row) or ndjson.";
    EXPORT_BATCH_SIZE = "EXPORT_BATCH_SIZE", "export-batch-size", Some("500"), ExportPipeline, false,
        "Records plus change events per exported batch (1-10000).";
    EXPORT_BATCH_INTERVAL = "EXPORT_BATCH_INTERVAL", "export-batch-interval", Some("1s"), ExportPipeline, false,
        "Longest wait before a partly filled batch is exported (at most 10m).";
    EXPORT_QUEUE_CAPACITY = "EXPORT_QUEUE_CAPACITY", "export-queue-capacity", Some("256"), ExportPipeline, false,
        "Batches held in memory while the backend is slow or down (1-100000); then collection waits.";
    EXPORT_MAX_ATTEMPTS = "EXPORT_MAX_ATTEMPTS", "export-max-attempts", Some("0"), ExportPipeline, false,
        "Attempts per batch before it is dropped and counted; 0 retries until the backend recovers.";
    EXPORT_BACKOFF_INITIAL = "EXPORT_BACKOFF_INITIAL", "export-backoff-initial", Some("200ms"), ExportPipeline, false,
        "Delay before the first retry; doubles per retry, with jitter.";
    EXPORT_BACKOFF_MAX = "EXPORT_BACKOFF_MAX", "export-backoff-max", Some("1m"), ExportPipeline, false,
        "Longest delay between retries (at least EXPORT_BACKOFF_INITIAL).";
    EXPORT_RETRY_AFTER_MAX = "EXPORT_RETRY_AFTER_MAX", "export-retry-after-max", Some("5m"), ExportPipeline, false,
        "Longest server Retry-After that is honoured; longer hints are cut to this.";
    EXPORT_UNHEALTHY_AFTER = "EXPORT_UNHEALTHY_AFTER", "export-unhealthy-after", Some("3"), ExportPipeline, false,
        "Failed attempts in a row after which /readyz reports the exporter unhealthy.";
}

/// The knob a flag name (with or without `--`) belongs to.
pub fn knob_for_flag(flag: &str) -> Option<&'static Knob> {
    let flag = flag.strip_prefix("--").unwrap_or(flag);
    KNOBS.iter().find(|knob| knob.flag == flag)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_env_name_and_flag_is_unique() {
        let envs: BTreeSet<_> = KNOBS.iter().map(|k| k.env).collect();
        let flags: BTreeSet<_> = KNOBS.iter().map(|k| k.flag).collect();
        assert_eq!(envs.len(), KNOBS.len());
        assert_eq!(flags.len(), KNOBS.len());
    }

    #[test]
    fn flags_are_the_kebab_case_of_the_env_name() {
        for knob in KNOBS {
            assert_eq!(
                knob.flag,
                knob.env.to_ascii_lowercase().replace('_', "-"),
                "{}",
                knob.env
            );
        }
    }

    #[test]
    fn the_upstream_core_and_leader_election_names_come_first_in_upstream_order() {
        let upstream = [
            "EXPORTER_TYPE",
            "CLUSTER_NAME",
            "NAMESPACE",
            "LABEL_SELECTOR",
            "CONTAINER",
            "WORKERS",
            "TIMEOUT",
            "RESYNC",
            "QPS",
            "BURST",
            "KUBECONFIG",
            "LOG_LEVEL",
            "SERVER_PORT",
            "LEADER_ELECTION",
            "LEASE_NAMESPACE",
            "LEASE_NAME",
            "LEASE_DURATION",
            "LEASE_RENEW_DEADLINE",
            "LEASE_RETRY_PERIOD",
            "POD_NAME",
            "POD_NAMESPACE",
        ];
        let ours: Vec<_> = KNOBS.iter().take(upstream.len()).map(|k| k.env).collect();
        assert_eq!(ours, upstream);
    }

    #[test]
    fn a_flag_is_found_with_or_without_dashes() {
        assert_eq!(knob_for_flag("--workers").map(|k| k.env), Some("WORKERS"));
        assert_eq!(knob_for_flag("workers").map(|k| k.env), Some("WORKERS"));
        assert_eq!(knob_for_flag("--no-such-flag"), None);
    }
}
