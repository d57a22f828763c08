//! Behaviour of the configuration parser, one sentence per test.

use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn no_files(path: &Path) -> io::Result<String> {
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} not found", path.display()),
    ))
}

fn load(pairs: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
    let vars = env(pairs);
    Config::from_lookup(|name| vars.get(name).cloned(), no_files)
}

fn load_with_files(pairs: &[(&str, &str)], files: &[(&str, &str)]) -> Result<Config, ConfigErrors> {
    let vars = env(pairs);
    let files = env(files);
    Config::from_lookup(
        |name| vars.get(name).cloned(),
        |path| {
            files
                .get(path.to_str().unwrap_or_default())
                .cloned()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "No such file or directory"))
        },
    )
}

fn messages(result: Result<Config, ConfigErrors>) -> Vec<String> {
    match result {
        Ok(config) => panic!("expected errors, got {config:?}"),
        Err(errors) => errors.errors.into_iter().map(|e| e.message).collect(),
    }
}

fn single(result: Result<Config, ConfigErrors>) -> String {
    let all = messages(result);
    assert_eq!(all.len(), 1, "expected one error, got {all:#?}");
    all.into_iter().next().unwrap_or_default()
}

const CLUSTER: (&str, &str) = ("CLUSTER_NAME", "prod");

#[test]
fn only_the_cluster_name_is_needed_and_every_other_knob_has_the_upstream_default() {
    let config = load(&[CLUSTER]).unwrap();
    assert_eq!(config.exporter, ExporterConfig::Stdout);
    assert_eq!(config.cluster_name, "prod");
    assert_eq!(config.namespaces, ["gpu-operator"]);
    assert_eq!(config.label_selector, "app=nvidia-device-plugin-daemonset");
    assert_eq!(config.container, "nvidia-device-plugin");
    assert_eq!(config.workers, 16);
    assert_eq!(config.timeout, Duration::from_secs(30));
    assert_eq!(config.resync, Duration::ZERO);
    assert_eq!(config.qps, 50.0);
    assert_eq!(config.burst, 100);
    assert_eq!(config.kubeconfig, None);
    assert_eq!(config.log_level, LogLevel::Info);
    assert_eq!(config.server_port, 8080);
    let le = &config.leader_election;
    assert!(!le.enabled);
    assert_eq!(
        (le.lease_namespace.as_str(), le.lease_name.as_str()),
        ("gpuid", "gpuid-leader")
    );
    assert_eq!(
        (le.lease_duration, le.renew_deadline, le.retry_period),
        (
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
}

#[test]
fn the_documented_defaults_in_knobs_are_the_defaults_the_parser_applies() {
    let mut pairs: Vec<(&str, &str)> = KNOBS
        .iter()
        .filter_map(|k| k.default.map(|d| (k.env, d)))
        .collect();
    pairs.push(CLUSTER);
    assert_eq!(load(&pairs).unwrap(), load(&[CLUSTER]).unwrap());
}

#[test]
fn a_missing_cluster_name_fails_with_the_upstream_message() {
    assert_eq!(
        single(load(&[])),
        "CLUSTER_NAME: cluster name must be specified"
    );
}

#[test]
fn a_string_knob_set_to_empty_is_used_and_fails_instead_of_defaulting() {
    assert_eq!(
        single(load(&[CLUSTER, ("NAMESPACE", "")])),
        "NAMESPACE: namespace must be specified"
    );
    assert_eq!(
        single(load(&[CLUSTER, ("CONTAINER", " ")])),
        "CONTAINER: container must be specified"
    );
    assert_eq!(
        single(load(&[CLUSTER, ("LABEL_SELECTOR", "")])),
        "LABEL_SELECTOR: label selector must be specified"
    );
    assert_eq!(
        single(load(&[CLUSTER, ("EXPORTER_TYPE", "")])),
        "EXPORTER_TYPE: invalid exporter type"
    );
}

#[test]
fn a_typed_knob_set_to_empty_takes_its_default() {
    let config = load(&[CLUSTER, ("WORKERS", ""), ("TIMEOUT", " "), ("QPS", "")]).unwrap();
    assert_eq!(
        (config.workers, config.timeout, config.qps),
        (16, Duration::from_secs(30), 50.0)
    );
}

#[test]
fn a_malformed_typed_value_names_the_variable_the_value_and_the_rule() {
    assert_eq!(
        single(load(&[CLUSTER, ("TIMEOUT", "abc")])),
        r#"invalid duration for TIMEOUT="abc": not a duration (use forms like 30s, 1m)"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("WORKERS", "abc")])),
        r#"invalid integer for WORKERS="abc": not an integer"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("QPS", "fast")])),
        r#"invalid float for QPS="fast": not a number"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("LEADER_ELECTION", "yes")])),
        r#"invalid boolean for LEADER_ELECTION="yes": not a boolean (use true or false)"#
    );
}

#[test]
fn all_problems_are_reported_together_in_validation_order() {
    let all = messages(load(&[
        ("WORKERS", "0"),
        ("TIMEOUT", "x"),
        ("SERVER_PORT", "80"),
    ]));
    assert_eq!(
        all,
        [
            "CLUSTER_NAME: cluster name must be specified",
            r#"WORKERS="0": workers must be > 0: got 0"#,
            r#"invalid duration for TIMEOUT="x": not a duration (use forms like 30s, 1m)"#,
            r#"SERVER_PORT="80": server port must be a valid integer between 1000 and 65535"#,
        ]
    );
}

#[test]
fn workers_must_be_between_1_and_100() {
    assert_eq!(
        single(load(&[CLUSTER, ("WORKERS", "-1")])),
        r#"WORKERS="-1": workers must be > 0: got -1"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("WORKERS", "101")])),
        r#"WORKERS="101": workers should not exceed 100 to prevent API server overload: got 101"#
    );
    assert_eq!(load(&[CLUSTER, ("WORKERS", "100")]).unwrap().workers, 100);
    assert_eq!(load(&[CLUSTER, ("WORKERS", "1")]).unwrap().workers, 1);
}

#[test]
fn timeout_must_be_positive_and_at_most_ten_minutes_reported_in_go_duration_form() {
    assert_eq!(
        single(load(&[CLUSTER, ("TIMEOUT", "0")])),
        r#"TIMEOUT="0": timeout must be > 0: got 0s"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("TIMEOUT", "601s")])),
        r#"TIMEOUT="601s": timeout should not exceed 10 minutes to prevent resource leaks: got 10m1s"#
    );
    assert_eq!(
        load(&[CLUSTER, ("TIMEOUT", "10m")]).unwrap().timeout,
        Duration::from_secs(600)
    );
}

#[test]
fn a_negative_resync_is_rejected_and_zero_disables_it() {
    assert_eq!(
        single(load(&[CLUSTER, ("RESYNC", "-1m")])),
        r#"RESYNC="-1m": resync period must be >= 0 (0 disables periodic resync): got -1m0s"#
    );
    assert_eq!(
        load(&[CLUSTER, ("RESYNC", "5m")]).unwrap().resync,
        Duration::from_secs(300)
    );
}

#[test]
fn qps_must_be_positive_and_burst_at_least_qps() {
    assert_eq!(
        single(load(&[CLUSTER, ("QPS", "0")])),
        r#"QPS="0": qps must be > 0: got 0"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("BURST", "0")])),
        r#"BURST="0": burst must be > 0: got 0"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("QPS", "200"), ("BURST", "150")])),
        r#"BURST="150": burst (150) should be >= QPS (200) for proper rate limiting"#
    );
    let config = load(&[CLUSTER, ("QPS", "12.5"), ("BURST", "13")]).unwrap();
    assert_eq!((config.qps, config.burst), (12.5, 13));
}

#[test]
fn the_server_port_must_be_between_1000_and_65535() {
    for bad in ["999", "65536", "-1"] {
        assert!(single(load(&[CLUSTER, ("SERVER_PORT", bad)])).ends_with("between 1000 and 65535"));
    }
    assert_eq!(
        load(&[CLUSTER, ("SERVER_PORT", "65535")])
            .unwrap()
            .server_port,
        65535
    );
}

#[test]
fn log_levels_are_case_insensitive_and_unknown_levels_are_rejected() {
    assert_eq!(
        load(&[CLUSTER, ("LOG_LEVEL", " WARNING ")])
            .unwrap()
            .log_level,
        LogLevel::Warn
    );
    assert_eq!(
        load(&[CLUSTER, ("LOG_LEVEL", "Debug")]).unwrap().log_level,
        LogLevel::Debug
    );
    assert_eq!(
        load(&[CLUSTER, ("LOG_LEVEL", "trace")]).unwrap().log_level,
        LogLevel::Trace
    );
    assert_eq!(
        single(load(&[CLUSTER, ("LOG_LEVEL", "loud")])),
        r#"invalid log level for LOG_LEVEL="loud": unknown log level (use error, warn (or warning), info, debug or trace)"#
    );
}

#[test]
fn an_unknown_exporter_type_is_rejected_at_configuration_time() {
    assert_eq!(
        single(load(&[CLUSTER, ("EXPORTER_TYPE", "kafka")])),
        r#"EXPORTER_TYPE="kafka": unknown exporter type: kafka (use stdout, http, postgres or s3)"#
    );
}

#[test]
fn namespace_accepts_a_comma_separated_list_and_drops_duplicates() {
    let config = load(&[
        CLUSTER,
        (
            "NAMESPACE",
            "gpu-operator, nvidia-device-plugin,gpu-operator",
        ),
    ])
    .unwrap();
    assert_eq!(config.namespaces, ["gpu-operator", "nvidia-device-plugin"]);
}

#[test]
fn namespace_lists_with_empty_or_invalid_names_are_rejected() {
    assert!(single(load(&[CLUSTER, ("NAMESPACE", "a,,b")])).contains("empty namespace name"));
    assert!(
        single(load(&[CLUSTER, ("NAMESPACE", "GPU")]))
            .contains(r#""GPU" is not a valid namespace name"#)
    );
}

#[test]
fn leader_election_needs_pod_name_and_ordered_durations_when_enabled() {
    let all = messages(load(&[
        CLUSTER,
        ("LEADER_ELECTION", "true"),
        ("LEASE_NAME", ""),
        ("LEASE_RENEW_DEADLINE", "20s"),
    ]));
    assert_eq!(
        all,
        [
            "LEASE_NAME: lease name must be specified when leader election is enabled",
            "LEASE_DURATION: lease duration > renew deadline > retry period must hold: got lease=15s renew=20s retry=2s",
            "POD_NAME: POD_NAME must be set (downward API) when leader election is enabled",
        ]
    );
    let config = load(&[
        CLUSTER,
        ("LEADER_ELECTION", "TRUE"),
        ("POD_NAME", "gpuid-0"),
    ])
    .unwrap();
    assert!(config.leader_election.enabled);
    assert_eq!(config.leader_election.pod_name.as_deref(), Some("gpuid-0"));
}

#[test]
fn lease_settings_are_not_enforced_while_leader_election_is_off() {
    let config = load(&[CLUSTER, ("LEASE_NAME", ""), ("LEASE_RENEW_DEADLINE", "20s")]).unwrap();
    assert!(!config.leader_election.enabled);
}

#[test]
fn a_flag_beats_the_environment_and_errors_name_the_flag() {
    let vars = env(&[CLUSTER, ("WORKERS", "4")]);
    let mut flags = BTreeMap::new();
    flags.insert("workers".to_owned(), "8".to_owned());
    flags.insert("--cluster-name".to_owned(), "from-flag".to_owned());
    let config = Config::from_sources(&flags, |n| vars.get(n).cloned(), no_files).unwrap();
    assert_eq!(
        (config.workers, config.cluster_name.as_str()),
        (8, "from-flag")
    );

    flags.insert("timeout".to_owned(), "soon".to_owned());
    let errors = Config::from_sources(&flags, |n| vars.get(n).cloned(), no_files).unwrap_err();
    assert_eq!(
        errors.errors[0].message,
        r#"invalid duration for --timeout="soon": not a duration (use forms like 30s, 1m)"#
    );
    assert_eq!(errors.errors[0].env, "TIMEOUT");
}

#[test]
fn every_knob_can_be_set_by_its_flag() {
    // A distinctive valid value per knob, given once as env and once as flag:
    // the two configurations must be identical.
    let values: Vec<(&Knob, &str)> = KNOBS
        .iter()
        .filter(|k| {
            !k.env.ends_with("_FILE") && k.env != "POSTGRES_DSN" && k.env != "POSTGRES_SSLROOTCERT"
        })
        .map(|k| {
            let value = match k.env {
                "EXPORTER_TYPE" => "postgres",
                "NAMESPACE" | "LEASE_NAMESPACE" | "POD_NAMESPACE" => "ns-x",
                "WORKERS" => "7",
                "QPS" => "3",
                "BURST" | "POSTGRES_PORT" => "9",
                "SERVER_PORT" => "9090",
                "LOG_LEVEL" => "error",
                "LEADER_ELECTION" | "POSTGRES_AUTO_MIGRATE" | "S3_FORCE_PATH_STYLE" => "true",
                "TIMEOUT" | "RESYNC" | "HTTP_TIMEOUT" => "45s",
                "LEASE_DURATION" => "20s",
                "LEASE_RENEW_DEADLINE" => "12s",
                "LEASE_RETRY_PERIOD" => "3s",
                "HTTP_ENDPOINT" | "S3_ENDPOINT" => "http://sink:9000",
                "HTTP_HEADERS" => "X-Tenant=blue",
                "POSTGRES_SSLMODE" => "disable",
                "POSTGRES_TABLE" => "inv.gpu",
                "S3_PARTITION_PATTERN" => "%Y/%m",
                "S3_FORMAT" => "ndjson",
                "EXPORT_BATCH_SIZE" | "EXPORT_QUEUE_CAPACITY" => "11",
                "EXPORT_MAX_ATTEMPTS" | "EXPORT_UNHEALTHY_AFTER" => "4",
                "EXPORT_BATCH_INTERVAL" | "EXPORT_BACKOFF_INITIAL" => "250ms",
                "EXPORT_BACKOFF_MAX" | "EXPORT_RETRY_AFTER_MAX" => "2m",
                _ => "value-x",
            };
            (k, value)
        })
        .collect();
    let vars: HashMap<String, String> = values
        .iter()
        .map(|(k, v)| (k.env.to_owned(), (*v).to_owned()))
        .collect();
    let from_env = Config::from_lookup(|n| vars.get(n).cloned(), no_files).unwrap();
    let flags: BTreeMap<String, String> = values
        .iter()
        .map(|(k, v)| (k.flag.to_owned(), (*v).to_owned()))
        .collect();
    let from_flags = Config::from_sources(&flags, |_| None, no_files).unwrap();
    assert_eq!(from_env, from_flags);
    assert_eq!(from_flags.workers, 7);
    assert!(matches!(from_flags.exporter, ExporterConfig::Postgres(_)));
}

#[test]
fn an_unknown_flag_is_an_error() {
    let mut flags = BTreeMap::new();
    flags.insert("wrokers".to_owned(), "8".to_owned());
    let vars = env(&[CLUSTER]);
    let errors = Config::from_sources(&flags, |n| vars.get(n).cloned(), no_files).unwrap_err();
    assert_eq!(errors.errors[0].message, "unknown flag --wrokers");
}

// ---- http exporter ----

#[test]
fn the_http_exporter_requires_an_http_or_https_endpoint_with_upstream_messages() {
    assert_eq!(
        single(load(&[CLUSTER, ("EXPORTER_TYPE", "http")])),
        "HTTP_ENDPOINT: HTTP configuration validation failed: HTTP endpoint URL is required"
    );
    assert_eq!(
        single(load(&[
            CLUSTER,
            ("EXPORTER_TYPE", "http"),
            ("HTTP_ENDPOINT", "collector:8080")
        ])),
        r#"HTTP_ENDPOINT="collector:8080": HTTP configuration validation failed: HTTP endpoint must be a valid HTTP/HTTPS URL"#
    );
}

#[test]
fn the_http_exporter_reads_timeout_token_and_headers() {
    let config = load(&[
        CLUSTER,
        ("EXPORTER_TYPE", "http"),
        ("HTTP_ENDPOINT", "https://sink.example/ingest"),
        ("HTTP_TIMEOUT", "45s"),
        ("HTTP_AUTH_TOKEN", "tok-123"),
        ("HTTP_HEADERS", "X-Tenant=blue"),
    ])
    .unwrap();
    let ExporterConfig::Http(http) = &config.exporter else {
        panic!("not http: {config:?}")
    };
    assert_eq!(http.endpoint, "https://sink.example/ingest");
    assert_eq!(http.timeout, Duration::from_secs(45));
    assert_eq!(
        http.auth_token.as_ref().map(Secret::expose),
        Some("tok-123")
    );
    assert_eq!(http.headers[0].name, "X-Tenant");
}

#[test]
fn a_malformed_exporter_knob_fails_even_when_another_exporter_is_selected() {
    assert_eq!(
        single(load(&[CLUSTER, ("HTTP_TIMEOUT", "thirty")])),
        r#"invalid duration for HTTP_TIMEOUT="thirty": not a duration (use forms like 30s, 1m)"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("POSTGRES_PORT", "five")])),
        r#"invalid integer for POSTGRES_PORT="five": not an integer"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("S3_FORCE_PATH_STYLE", "maybe")])),
        r#"invalid boolean for S3_FORCE_PATH_STYLE="maybe": not a boolean (use true or false)"#
    );
}

#[test]
fn a_zero_http_timeout_is_rejected_with_the_upstream_message() {
    assert_eq!(
        single(load(&[CLUSTER, ("HTTP_TIMEOUT", "0s")])),
        r#"HTTP_TIMEOUT="0s": HTTP configuration validation failed: timeout must be positive, got 0s"#
    );
}

#[test]
fn a_secret_can_come_from_a_file_with_its_trailing_newline_dropped() {
    let config = load_with_files(
        &[
            CLUSTER,
            ("EXPORTER_TYPE", "http"),
            ("HTTP_ENDPOINT", "http://sink"),
            ("HTTP_AUTH_TOKEN_FILE", "/var/run/secrets/token"),
        ],
        &[("/var/run/secrets/token", "from-file\n")],
    )
    .unwrap();
    let ExporterConfig::Http(http) = config.exporter else {
        panic!("not http")
    };
    assert_eq!(
        http.auth_token.map(|t| t.expose().to_owned()).as_deref(),
        Some("from-file")
    );
}

#[test]
fn a_secret_set_both_directly_and_by_file_is_an_error() {
    assert_eq!(
        single(load_with_files(
            &[
                CLUSTER,
                ("HTTP_AUTH_TOKEN", "a"),
                ("HTTP_AUTH_TOKEN_FILE", "/t")
            ],
            &[("/t", "b")]
        )),
        "HTTP_AUTH_TOKEN: set only one of HTTP_AUTH_TOKEN and HTTP_AUTH_TOKEN_FILE"
    );
}

#[test]
fn an_unreadable_or_empty_secret_file_names_the_file_variable() {
    let message = single(load(&[CLUSTER, ("HTTP_AUTH_TOKEN_FILE", "/missing")]));
    assert!(
        message.starts_with(r#"HTTP_AUTH_TOKEN_FILE="/missing": cannot read the file:"#),
        "{message}"
    );
    assert_eq!(
        single(load_with_files(
            &[CLUSTER, ("POSTGRES_PASSWORD_FILE", "/p")],
            &[("/p", "\n")]
        )),
        r#"POSTGRES_PASSWORD_FILE="/p": the file is empty"#
    );
}

#[test]
fn secrets_never_appear_in_debug_output_or_error_messages() {
    let config = load(&[
        CLUSTER,
        ("EXPORTER_TYPE", "postgres"),
        ("POSTGRES_HOST", "db"),
        ("POSTGRES_DB", "inv"),
        ("POSTGRES_USER", "gpuid"),
        ("POSTGRES_PASSWORD", "pw-SECRET-1"),
        ("HTTP_AUTH_TOKEN", "tok-SECRET-2"),
        ("HTTP_HEADERS", "X-Key=hdr-SECRET-3"),
    ])
    .unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains("SECRET"), "{debug}");
    assert!(debug.contains("<redacted>"));

    let errors = load(&[
        CLUSTER,
        ("HTTP_HEADERS", "X-Key=hdr-SECRET-3,broken"),
        ("POSTGRES_DSN", "mysql://SECRET"),
    ])
    .unwrap_err();
    let shown = format!("{errors} {errors:?}");
    assert!(!shown.contains("SECRET"), "{shown}");
    assert!(errors.mentions("HTTP_HEADERS") && errors.mentions("POSTGRES_DSN"));
}

// ---- postgres exporter ----

#[test]
fn the_postgres_exporter_requires_host_db_user_and_password_with_upstream_messages() {
    assert_eq!(
        messages(load(&[CLUSTER, ("EXPORTER_TYPE", "postgres")])),
        [
            "POSTGRES_HOST: postgres host is required (set POSTGRES_HOST or POSTGRES_DSN)",
            "POSTGRES_DB: postgres database name is required (set POSTGRES_DB)",
            "POSTGRES_USER: postgres user is required (set POSTGRES_USER)",
            "POSTGRES_PASSWORD: postgres password is required (set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE)",
        ]
    );
}

#[test]
fn postgres_parameters_default_to_port_5432_sslmode_require_table_gpu_and_auto_migrate() {
    let config = load_with_files(
        &[
            CLUSTER,
            ("EXPORTER_TYPE", "postgres"),
            ("POSTGRES_HOST", "db"),
            ("POSTGRES_DB", "inv"),
            ("POSTGRES_USER", "gpuid"),
            ("POSTGRES_PASSWORD_FILE", "/pw"),
        ],
        &[("/pw", "s3cret")],
    )
    .unwrap();
    let ExporterConfig::Postgres(pg) = config.exporter else {
        panic!("not postgres")
    };
    let PostgresConnection::Params {
        host,
        port,
        dbname,
        user,
        password,
        sslmode,
        sslrootcert,
    } = &pg.connection
    else {
        panic!("not params")
    };
    assert_eq!(
        (host.as_str(), *port, dbname.as_str(), user.as_str()),
        ("db", 5432, "inv", "gpuid")
    );
    assert_eq!((password.expose(), *sslmode), ("s3cret", SslMode::Require));
    assert_eq!(*sslrootcert, None);
    assert_eq!(
        pg.table,
        PostgresTable {
            schema: None,
            name: "gpu".into()
        }
    );
    // Upstream's variables alone must be enough to export: gpuid creates
    // what is missing unless told not to.
    assert!(pg.auto_migrate);
}

#[test]
fn postgres_auto_migrate_false_leaves_the_schema_to_a_dba() {
    for spelling in ["false", "FALSE", "0", "f"] {
        let config = load(&[
            CLUSTER,
            ("EXPORTER_TYPE", "postgres"),
            ("POSTGRES_DSN", "postgres://gpuid:pw@db:5432/inv"),
            ("POSTGRES_AUTO_MIGRATE", spelling),
        ])
        .unwrap();
        let ExporterConfig::Postgres(pg) = config.exporter else {
            panic!("not postgres")
        };
        assert!(!pg.auto_migrate, "{spelling}");
    }
}

#[test]
fn postgres_port_table_and_sslmode_are_validated() {
    assert_eq!(
        single(load(&[CLUSTER, ("POSTGRES_PORT", "70000")])),
        r#"POSTGRES_PORT="70000": postgres port must be between 1 and 65535, got 70000"#
    );
    assert_eq!(
        single(load(&[CLUSTER, ("POSTGRES_PORT", "0")])),
        r#"POSTGRES_PORT="0": postgres port must be between 1 and 65535, got 0"#
    );
    assert!(
        single(load(&[CLUSTER, ("POSTGRES_TABLE", "gpu;drop")]))
            .contains("contains invalid characters")
    );
    assert!(single(load(&[CLUSTER, ("POSTGRES_SSLMODE", "on")])).contains("not an sslmode"));
}

fn postgres_table(value: &str) -> Result<PostgresTable, String> {
    match load(&postgres_params(&[("POSTGRES_TABLE", value)])) {
        Ok(config) => Ok(postgres_of(config).table),
        Err(_) => Err(single(load(&[CLUSTER, ("POSTGRES_TABLE", value)]))),
    }
}

#[test]
fn an_empty_postgres_table_means_the_default_as_upstream() {
    for empty in ["", "  "] {
        assert_eq!(
            postgres_table(empty),
            Ok(PostgresTable {
                schema: None,
                name: "gpu".into()
            }),
            "{empty:?}"
        );
    }
}

#[test]
fn postgres_table_names_are_refused_at_start_when_a_derived_name_would_not_fit_63_characters() {
    let longest = "t".repeat(39);
    assert_eq!(
        postgres_table(&longest).map(|table| table.name),
        Ok(longest.clone())
    );
    assert_eq!(
        postgres_table(&format!("inv.{longest}")).map(|table| table.schema),
        Ok(Some("inv".to_owned()))
    );
    for too_long in [40, 63, 64] {
        let name = "t".repeat(too_long);
        let error = postgres_table(&name).unwrap_err();
        assert!(
            error.starts_with(&format!("POSTGRES_TABLE=\"{name}\": postgres table name")),
            "{error}"
        );
        assert!(error.contains("at most 39"), "{error}");
        assert!(error.contains("_inventory_last_seen_idx"), "{error}");
    }
    let long_schema = format!("{}.gpu", "s".repeat(64));
    assert!(
        postgres_table(&long_schema)
            .unwrap_err()
            .contains("at most 63")
    );
    assert!(postgres_table(&format!("{}.gpu", "s".repeat(63))).is_ok());
}

#[test]
fn a_postgres_url_replaces_the_separate_parameters() {
    let config = load(&[
        CLUSTER,
        ("EXPORTER_TYPE", "postgres"),
        (
            "POSTGRES_DSN",
            "postgres://gpuid:pw@db:5432/inv?sslmode=disable",
        ),
        ("POSTGRES_AUTO_MIGRATE", "True"),
    ])
    .unwrap();
    let ExporterConfig::Postgres(pg) = config.exporter else {
        panic!("not postgres")
    };
    assert!(
        matches!(&pg.connection, PostgresConnection::Dsn(dsn) if dsn.expose().ends_with("sslmode=disable"))
    );
    assert!(pg.auto_migrate);
}

#[test]
fn a_postgres_url_combined_with_separate_parameters_is_rejected() {
    assert_eq!(
        single(load(&[
            CLUSTER,
            ("EXPORTER_TYPE", "postgres"),
            ("POSTGRES_DSN", "postgres://db/inv"),
            ("POSTGRES_HOST", "other"),
        ])),
        "POSTGRES_HOST: cannot be combined with POSTGRES_DSN; put it in the URL instead"
    );
}

// ---- s3 exporter ----

#[test]
fn the_s3_exporter_requires_a_bucket_and_defaults_region_and_partition() {
    assert_eq!(
        single(load(&[CLUSTER, ("EXPORTER_TYPE", "s3")])),
        "S3_BUCKET: S3 configuration validation failed: S3 bucket name is required"
    );
    let config = load(&[
        CLUSTER,
        ("EXPORTER_TYPE", "s3"),
        ("S3_BUCKET", "inv"),
        ("S3_PREFIX", "/serials/"),
    ])
    .unwrap();
    let ExporterConfig::S3(s3) = config.exporter else {
        panic!("not s3")
    };
    assert_eq!(s3.bucket, "inv");
    assert_eq!(s3.prefix, "serials");
    assert_eq!(s3.region, "us-east-1");
    assert_eq!(s3.partition_pattern, "year=%Y/month=%m/day=%d/hour=%H");
    assert_eq!((s3.endpoint, s3.force_path_style), (None, false));
}

#[test]
fn the_s3_exporter_accepts_a_custom_endpoint_with_path_style() {
    let config = load(&[
        CLUSTER,
        ("EXPORTER_TYPE", "s3"),
        ("S3_BUCKET", "inv"),
        ("S3_ENDPOINT", "http://127.0.0.1:5000"),
        ("S3_FORCE_PATH_STYLE", "true"),
    ])
    .unwrap();
    let ExporterConfig::S3(s3) = config.exporter else {
        panic!("not s3")
    };
    assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
    assert!(s3.force_path_style);
    assert!(
        single(load(&[CLUSTER, ("S3_ENDPOINT", "minio:9000")]))
            .contains("not an http:// or https:// URL")
    );
}

#[test]
fn a_blank_s3_region_fails_with_the_upstream_message() {
    assert_eq!(
        single(load(&[CLUSTER, ("S3_REGION", "  ")])),
        r#"S3_REGION="  ": S3 configuration validation failed: AWS region is required"#
    );
}

#[test]
fn the_error_list_renders_as_one_readable_block() {
    let errors = load(&[("WORKERS", "0")]).unwrap_err();
    assert_eq!(
        errors.to_string(),
        "invalid configuration (2 problems):\n  - CLUSTER_NAME: cluster name must be specified\n  - WORKERS=\"0\": workers must be > 0: got 0"
    );
}

#[test]
fn a_label_selector_with_bad_syntax_fails_at_configuration_time() {
    assert_eq!(
        single(load(&[CLUSTER, ("LABEL_SELECTOR", "app in (a")])),
        r#"LABEL_SELECTOR="app in (a": invalid label selector: unbalanced '('"#
    );
    let config = load(&[
        CLUSTER,
        (
            "LABEL_SELECTOR",
            "app.kubernetes.io/name in (nvidia-device-plugin)",
        ),
    ])
    .unwrap();
    assert_eq!(
        config.label_selector,
        "app.kubernetes.io/name in (nvidia-device-plugin)"
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_values_for_any_knobs_never_panic_and_every_error_names_its_knob(
            settings in prop::collection::vec(
                (prop::sample::select(KNOBS), "\\PC{0,40}"),
                0..12,
            ),
        ) {
            let vars: HashMap<String, String> =
                settings.iter().map(|(knob, value)| (knob.env.to_owned(), value.clone())).collect();
            if let Err(errors) = Config::from_lookup(|n| vars.get(n).cloned(), no_files) {
                prop_assert!(!errors.errors.is_empty());
                for error in &errors.errors {
                    let knob = KNOBS.iter().find(|k| k.env == error.env);
                    prop_assert!(knob.is_some(), "error without a knob: {}", error.message);
                    prop_assert!(error.message.contains(error.env), "{}", error.message);
                }
                // Secret values never leak into messages. A non-secret knob's
                // value is echoed on purpose, so a secret that happens to be
                // (part of) such a value proves nothing either way.
                for (knob, value) in &settings {
                    let secret = value.trim();
                    let echoed_by_a_public_knob = settings
                        .iter()
                        .any(|(other, shown)| !other.secret && shown.contains(secret));
                    if knob.secret && secret.len() >= 4 && !echoed_by_a_public_knob {
                        prop_assert!(!errors.to_string().contains(secret));
                    }
                }
            }
        }

        #[test]
        fn go_durations_print_and_parse_back_to_the_same_value(nanos in -(i64::MAX as i128)..=(i64::MAX as i128)) {
            prop_assert_eq!(values::parse_go_duration(&values::format_go_duration(nanos)), Some(nanos));
        }
    }
}

// ---- additions: PostgreSQL TLS ----

const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

fn postgres_params<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut pairs = vec![
        CLUSTER,
        ("EXPORTER_TYPE", "postgres"),
        ("POSTGRES_HOST", "db"),
        ("POSTGRES_DB", "inv"),
        ("POSTGRES_USER", "gpuid"),
        ("POSTGRES_PASSWORD", "pw"),
    ];
    pairs.extend_from_slice(extra);
    pairs
}

fn postgres_of(config: Config) -> PostgresExporterConfig {
    match config.exporter {
        ExporterConfig::Postgres(pg) => pg,
        other => panic!("not postgres: {other:?}"),
    }
}

#[test]
fn the_root_certificate_file_is_read_at_start_and_kept_with_the_parameters() {
    let config = load_with_files(
        &postgres_params(&[
            ("POSTGRES_SSLMODE", "verify-full"),
            ("POSTGRES_SSLROOTCERT", "/etc/gpuid/ca.pem"),
        ]),
        &[("/etc/gpuid/ca.pem", CA_PEM)],
    )
    .unwrap();
    let pg = postgres_of(config);
    let PostgresConnection::Params {
        sslmode,
        sslrootcert,
        ..
    } = &pg.connection
    else {
        panic!("not params")
    };
    assert_eq!(*sslmode, SslMode::VerifyFull);
    assert_eq!(sslrootcert.as_deref(), Some("/etc/gpuid/ca.pem"));
    assert!(
        pg.connection
            .to_libpq_string()
            .expose()
            .ends_with("sslmode='verify-full' sslrootcert='/etc/gpuid/ca.pem'")
    );
}

#[test]
fn a_missing_or_non_pem_root_certificate_file_fails_naming_the_variable() {
    assert_eq!(
        single(load_with_files(
            &postgres_params(&[("POSTGRES_SSLROOTCERT", "/missing.pem")]),
            &[],
        )),
        r#"POSTGRES_SSLROOTCERT="/missing.pem": cannot read the file: No such file or directory"#
    );
    assert_eq!(
        single(load_with_files(
            &postgres_params(&[("POSTGRES_SSLROOTCERT", "/ca.der")]),
            &[("/ca.der", "0\u{1}binary")],
        )),
        r#"POSTGRES_SSLROOTCERT="/ca.der": no PEM certificate in the file (expected -----BEGIN CERTIFICATE-----)"#
    );
}

#[test]
fn a_postgres_url_may_carry_every_libpq_sslmode_and_a_root_certificate() {
    for mode in [
        "disable",
        "allow",
        "prefer",
        "require",
        "verify-ca",
        "verify-full",
    ] {
        let url = format!("postgres://gpuid:pw@db/inv?sslmode={mode}&sslrootcert=%2Fca.pem");
        let vars = env(&[CLUSTER, ("EXPORTER_TYPE", "postgres")]);
        let config = Config::from_lookup(
            |name| {
                if name == "POSTGRES_DSN" {
                    Some(url.clone())
                } else {
                    vars.get(name).cloned()
                }
            },
            |path| {
                if path == Path::new("/ca.pem") {
                    Ok(CA_PEM.to_owned())
                } else {
                    Err(io::Error::new(io::ErrorKind::NotFound, "No such file"))
                }
            },
        )
        .unwrap_or_else(|errors| panic!("{mode}: {errors}"));
        let PostgresConnection::Dsn(dsn) = postgres_of(config).connection else {
            panic!("not a URL")
        };
        let parts = split_postgres_url(dsn.expose()).unwrap();
        assert_eq!(parts.sslmode.map(SslMode::as_str), Some(mode));
        assert_eq!(parts.sslrootcert.as_deref(), Some("/ca.pem"));
        assert_eq!(parts.url.expose(), "postgres://gpuid:pw@db/inv");
    }
}

#[test]
fn a_bad_sslmode_or_unreadable_root_certificate_in_the_url_names_postgres_dsn_without_echoing_it() {
    let message = single(load(&[
        CLUSTER,
        ("EXPORTER_TYPE", "postgres"),
        ("POSTGRES_DSN", "postgres://u:hunter2@db/inv?sslmode=verify"),
    ]));
    assert_eq!(
        message,
        r#"POSTGRES_DSN: sslmode="verify" in the URL is not an sslmode (use disable, allow, prefer, require, verify-ca or verify-full)"#
    );
    let message = single(load(&[
        CLUSTER,
        ("EXPORTER_TYPE", "postgres"),
        (
            "POSTGRES_DSN",
            "postgres://u:hunter2@db/inv?sslrootcert=/nope.pem",
        ),
    ]));
    assert!(
        message.starts_with(r#"POSTGRES_DSN: sslrootcert "/nope.pem": cannot read the file"#),
        "{message}"
    );
    assert!(!message.contains("hunter2"));
}

#[test]
fn the_root_certificate_knob_joins_a_url_unless_the_url_has_one_already() {
    let files = [("/ca.pem", CA_PEM), ("/other.pem", CA_PEM)];
    let config = load_with_files(
        &[
            CLUSTER,
            ("EXPORTER_TYPE", "postgres"),
            ("POSTGRES_DSN", "postgres://db/inv?sslmode=verify-ca"),
            ("POSTGRES_SSLROOTCERT", "/ca.pem"),
        ],
        &files,
    )
    .unwrap();
    let PostgresConnection::Dsn(dsn) = postgres_of(config).connection else {
        panic!("not a URL")
    };
    let parts = split_postgres_url(dsn.expose()).unwrap();
    assert_eq!(parts.sslrootcert.as_deref(), Some("/ca.pem"));
    assert_eq!(parts.sslmode, Some(SslMode::VerifyCa));
    assert_eq!(
        single(load_with_files(
            &[
                CLUSTER,
                ("EXPORTER_TYPE", "postgres"),
                ("POSTGRES_DSN", "postgres://db/inv?sslrootcert=/other.pem"),
                ("POSTGRES_SSLROOTCERT", "/ca.pem"),
            ],
            &files,
        )),
        "POSTGRES_SSLROOTCERT: cannot be combined with sslrootcert in POSTGRES_DSN; set it in one place"
    );
}

#[test]
fn url_splitting_keeps_other_parameters_and_decodes_percent_escapes() {
    let parts = split_postgres_url(
        "postgresql://db/inv?application_name=x&sslmode=require&connect_timeout=3&sslrootcert=%2Fa%20b.pem",
    )
    .unwrap();
    assert_eq!(
        parts.url.expose(),
        "postgresql://db/inv?application_name=x&connect_timeout=3"
    );
    assert_eq!(parts.sslmode, Some(SslMode::Require));
    assert_eq!(parts.sslrootcert.as_deref(), Some("/a b.pem"));
    let plain = split_postgres_url("postgres://db/inv").unwrap();
    assert_eq!((plain.sslmode, plain.sslrootcert), (None, None));
    assert!(split_postgres_url("postgres://db/inv?sslrootcert=%zz").is_err());
    assert!(split_postgres_url("postgres://db/inv?sslrootcert=").is_err());
}

// ---- additions: S3_FORMAT ----

#[test]
fn s3_format_defaults_to_csv_and_accepts_ndjson_in_any_case() {
    let s3 = |extra: &[(&'static str, &'static str)]| {
        let mut pairs = vec![CLUSTER, ("EXPORTER_TYPE", "s3"), ("S3_BUCKET", "b")];
        pairs.extend_from_slice(extra);
        match load(&pairs).unwrap().exporter {
            ExporterConfig::S3(s3) => s3.format,
            other => panic!("not s3: {other:?}"),
        }
    };
    assert_eq!(s3(&[]), S3Format::Csv);
    assert_eq!(s3(&[("S3_FORMAT", "")]), S3Format::Csv);
    assert_eq!(s3(&[("S3_FORMAT", "NDJSON")]), S3Format::Ndjson);
    assert_eq!(s3(&[("S3_FORMAT", "csv")]), S3Format::Csv);
}

#[test]
fn an_unknown_s3_format_fails_naming_the_variable_whichever_exporter_is_selected() {
    assert_eq!(
        single(load(&[CLUSTER, ("S3_FORMAT", "parquet")])),
        r#"invalid S3 format for S3_FORMAT="parquet": not an S3 format (use csv or ndjson)"#
    );
}

// ---- additions: export pipeline ----

#[test]
fn the_export_pipeline_knobs_default_to_the_pipeline_defaults() {
    let config = load(&[CLUSTER]).unwrap();
    assert_eq!(config.export_pipeline, ExportPipelineSettings::default());
    let p = config.export_pipeline;
    assert_eq!(
        (
            p.batch_size,
            p.batch_interval,
            p.queue_capacity,
            p.max_attempts
        ),
        (500, Duration::from_secs(1), 256, None)
    );
    assert_eq!(
        (
            p.backoff_initial,
            p.backoff_max,
            p.retry_after_max,
            p.unhealthy_after
        ),
        (
            Duration::from_millis(200),
            Duration::from_secs(60),
            Duration::from_secs(300),
            3
        )
    );
}

#[test]
fn the_export_pipeline_knobs_are_read_from_env_and_flags() {
    let config = load(&[
        CLUSTER,
        ("EXPORT_BATCH_SIZE", "50"),
        ("EXPORT_BATCH_INTERVAL", "250ms"),
        ("EXPORT_QUEUE_CAPACITY", "8"),
        ("EXPORT_MAX_ATTEMPTS", "5"),
        ("EXPORT_BACKOFF_INITIAL", "1s"),
        ("EXPORT_BACKOFF_MAX", "30s"),
        ("EXPORT_RETRY_AFTER_MAX", "0"),
        ("EXPORT_UNHEALTHY_AFTER", "10"),
    ])
    .unwrap();
    assert_eq!(
        config.export_pipeline,
        ExportPipelineSettings {
            batch_size: 50,
            batch_interval: Duration::from_millis(250),
            queue_capacity: 8,
            max_attempts: Some(5),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            retry_after_max: Duration::ZERO,
            unhealthy_after: 10,
        }
    );
    let mut flags = BTreeMap::new();
    flags.insert("--export-max-attempts".to_owned(), "0".to_owned());
    let vars = env(&[CLUSTER, ("EXPORT_MAX_ATTEMPTS", "5")]);
    let config = Config::from_sources(&flags, |n| vars.get(n).cloned(), no_files).unwrap();
    assert_eq!(
        config.export_pipeline.max_attempts, None,
        "0 from the flag wins and means no limit"
    );
}

#[test]
fn malformed_export_pipeline_values_name_the_variable_and_the_rule() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "EXPORT_BATCH_SIZE",
            "ten",
            r#"invalid integer for EXPORT_BATCH_SIZE="ten": not an integer"#,
        ),
        (
            "EXPORT_BATCH_SIZE",
            "0",
            r#"EXPORT_BATCH_SIZE="0": must be between 1 and 10000: got 0"#,
        ),
        (
            "EXPORT_BATCH_SIZE",
            "10001",
            r#"EXPORT_BATCH_SIZE="10001": must be between 1 and 10000: got 10001"#,
        ),
        (
            "EXPORT_BATCH_INTERVAL",
            "soon",
            r#"invalid duration for EXPORT_BATCH_INTERVAL="soon": not a duration (use forms like 30s, 1m)"#,
        ),
        (
            "EXPORT_BATCH_INTERVAL",
            "0s",
            r#"EXPORT_BATCH_INTERVAL="0s": must be > 0: got 0s"#,
        ),
        (
            "EXPORT_BATCH_INTERVAL",
            "11m",
            r#"EXPORT_BATCH_INTERVAL="11m": must not exceed 10m0s: got 11m0s"#,
        ),
        (
            "EXPORT_QUEUE_CAPACITY",
            "0",
            r#"EXPORT_QUEUE_CAPACITY="0": must be between 1 and 100000: got 0"#,
        ),
        (
            "EXPORT_MAX_ATTEMPTS",
            "-1",
            r#"EXPORT_MAX_ATTEMPTS="-1": must be between 0 and 4294967295: got -1"#,
        ),
        (
            "EXPORT_BACKOFF_INITIAL",
            "-5ms",
            r#"EXPORT_BACKOFF_INITIAL="-5ms": must be > 0: got -5ms"#,
        ),
        (
            "EXPORT_BACKOFF_MAX",
            "100ms",
            r#"EXPORT_BACKOFF_MAX="100ms": must be >= EXPORT_BACKOFF_INITIAL (200ms): got 100ms"#,
        ),
        (
            "EXPORT_RETRY_AFTER_MAX",
            "-1s",
            r#"EXPORT_RETRY_AFTER_MAX="-1s": must be >= 0 (0 ignores Retry-After): got -1s"#,
        ),
        (
            "EXPORT_UNHEALTHY_AFTER",
            "0",
            r#"EXPORT_UNHEALTHY_AFTER="0": must be between 1 and 1000000: got 0"#,
        ),
    ];
    for (name, value, expected) in cases {
        let errors = load(&[CLUSTER, (name, value)]).unwrap_err();
        assert_eq!(errors.errors.len(), 1, "{name}={value}: {errors}");
        assert_eq!(errors.errors[0].message, *expected);
        assert_eq!(errors.errors[0].env, *name);
    }
}

#[test]
fn a_malformed_export_pipeline_flag_names_the_flag() {
    let mut flags = BTreeMap::new();
    flags.insert("export-batch-size".to_owned(), "many".to_owned());
    let vars = env(&[CLUSTER]);
    let errors = Config::from_sources(&flags, |n| vars.get(n).cloned(), no_files).unwrap_err();
    assert_eq!(
        errors.errors[0].message,
        r#"invalid integer for --export-batch-size="many": not an integer"#
    );
}

#[test]
fn a_root_certificate_flag_that_cannot_be_read_names_the_flag() {
    let mut flags = BTreeMap::new();
    flags.insert("postgres-sslrootcert".to_owned(), "/missing.pem".to_owned());
    let vars = env(&[CLUSTER]);
    let errors = Config::from_sources(&flags, |n| vars.get(n).cloned(), no_files).unwrap_err();
    assert_eq!(errors.errors.len(), 1, "{errors}");
    assert!(
        errors.errors[0]
            .message
            .starts_with(r#"--postgres-sslrootcert="/missing.pem": cannot read the file"#),
        "{errors}"
    );
    assert_eq!(errors.errors[0].env, "POSTGRES_SSLROOTCERT");
}
