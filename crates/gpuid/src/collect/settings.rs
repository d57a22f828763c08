//! Collector settings: the validated [`Config`] plus the knobs only the
//! collector has (heartbeat, node-label prefix, output cap).
//!
//! The extra knobs live here rather than in `config::KNOBS` so the shared
//! configuration module stays untouched; they follow the same rules (flag
//! beats environment beats default, every problem reported).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::values::{format_go_duration, parse_bool, parse_go_duration};
use crate::config::{Config, ExporterConfig, ExporterIdentity, Knob, KnobGroup};

/// Re-export period of an unchanged inventory.
pub const HEARTBEAT_INTERVAL: Knob = Knob {
    env: "HEARTBEAT_INTERVAL",
    flag: "heartbeat-interval",
    default: Some("24h"),
    help: "Re-export an unchanged node inventory after this long; 0 disables heartbeats.",
    group: KnobGroup::Core,
    secret: false,
};

/// Prefix of node labels and annotations.
pub const NODE_LABEL_PREFIX: Knob = Knob {
    env: "NODE_LABEL_PREFIX",
    flag: "node-label-prefix",
    default: Some(DEFAULT_LABEL_PREFIX),
    help: "DNS-subdomain prefix of the node labels and annotations gpuid writes.",
    group: KnobGroup::Core,
    secret: false,
};

/// Upstream's `gpuid.github.com/` Node labels next to ours.
pub const UPSTREAM_NODE_LABELS: Knob = Knob {
    env: "UPSTREAM_NODE_LABELS",
    flag: "upstream-node-labels",
    default: Some("true"),
    help: "Also write upstream gpuid's gpuid.github.com/ node labels (chassis, chassis-count, gpu-<j>, ...); false leaves those keys alone.",
    group: KnobGroup::Core,
    secret: false,
};

/// The collector's own knobs, in addition to `config::KNOBS`.
pub const COLLECTOR_KNOBS: &[Knob] = &[HEARTBEAT_INTERVAL, NODE_LABEL_PREFIX, UPSTREAM_NODE_LABELS];

pub const DEFAULT_LABEL_PREFIX: &str = "gpuid.gpufleet.dev";

/// Largest accepted `nvidia-smi -q -x` output; beyond it the exec is an error.
pub const DEFAULT_OUTPUT_LIMIT: usize = 4 * 1024 * 1024;

/// Everything the collector needs to run.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorSettings {
    pub cluster: String,
    pub namespaces: Vec<String>,
    pub label_selector: String,
    pub container: String,
    pub workers: usize,
    /// Per-pod budget for the exec (and its output).
    pub timeout: Duration,
    /// Re-collect a pod this long after its last collection; zero: only on change.
    pub resync: Duration,
    /// Re-export an unchanged inventory this long after the last export; zero: never.
    pub heartbeat: Duration,
    pub label_prefix: String,
    pub output_limit: usize,
    pub collector_version: String,
    /// The exporter's destination: the Node state of what was exported is
    /// kept per destination.
    pub exporter: ExporterIdentity,
    /// Write upstream's `gpuid.github.com/` labels too (`UPSTREAM_NODE_LABELS`).
    pub upstream_labels: bool,
}

/// A problem with one of the collector's own knobs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}: {problem}")]
pub struct SettingError {
    /// `HEARTBEAT_INTERVAL` or `--heartbeat-interval`, as the user wrote it.
    pub name: String,
    pub problem: String,
}

impl CollectorSettings {
    /// Settings from a validated configuration with the defaults of the extra knobs.
    pub fn from_config(config: &Config) -> CollectorSettings {
        CollectorSettings {
            cluster: config.cluster_name.clone(),
            namespaces: config.namespaces.clone(),
            label_selector: config.label_selector.clone(),
            container: config.container.clone(),
            workers: config.workers.max(1) as usize,
            timeout: config.timeout,
            resync: config.resync,
            heartbeat: Duration::from_secs(24 * 3600),
            label_prefix: DEFAULT_LABEL_PREFIX.to_owned(),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            collector_version: env!("CARGO_PKG_VERSION").to_owned(),
            exporter: ExporterIdentity::of(&config.exporter),
            upstream_labels: true,
        }
    }

    /// Applies the collector knobs from `flags` (flag name without `--`)
    /// and `env`, flag first. Returns every problem found.
    pub fn with_knobs(
        mut self,
        flags: &BTreeMap<String, String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<CollectorSettings, Vec<SettingError>> {
        let mut errors = Vec::new();
        let lookup = |knob: &Knob| -> Option<(String, String)> {
            if let Some(value) = flags.get(knob.flag) {
                return Some((format!("--{}", knob.flag), value.clone()));
            }
            env(knob.env).map(|value| (knob.env.to_owned(), value))
        };
        if let Some((name, raw)) = lookup(&HEARTBEAT_INTERVAL) {
            match parse_heartbeat(&raw) {
                Ok(heartbeat) => self.heartbeat = heartbeat,
                Err(problem) => errors.push(SettingError { name, problem }),
            }
        }
        if let Some((name, raw)) = lookup(&UPSTREAM_NODE_LABELS) {
            match raw.trim() {
                "" => {}
                value => match parse_bool(value) {
                    Some(enabled) => self.upstream_labels = enabled,
                    None => errors.push(SettingError {
                        name,
                        problem: format!("invalid boolean {value:?} (use true or false)"),
                    }),
                },
            }
        }
        if let Some((name, raw)) = lookup(&NODE_LABEL_PREFIX) {
            match check_label_prefix(raw.trim()) {
                Ok(()) => self.label_prefix = raw.trim().to_owned(),
                Err(problem) => errors.push(SettingError { name, problem }),
            }
        }
        if errors.is_empty() {
            Ok(self)
        } else {
            Err(errors)
        }
    }
}

/// Checks the collector's own knobs on their own, so that they are reported
/// together with the core configuration's errors even when that failed.
pub fn check_collector_knobs(
    flags: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<SettingError> {
    let base = CollectorSettings {
        cluster: String::new(),
        namespaces: Vec::new(),
        label_selector: String::new(),
        container: String::new(),
        workers: 1,
        timeout: Duration::from_secs(30),
        resync: Duration::ZERO,
        heartbeat: Duration::from_secs(24 * 3600),
        label_prefix: DEFAULT_LABEL_PREFIX.to_owned(),
        output_limit: DEFAULT_OUTPUT_LIMIT,
        collector_version: String::new(),
        exporter: ExporterIdentity::of(&ExporterConfig::Stdout),
        upstream_labels: true,
    };
    base.with_knobs(flags, env).err().unwrap_or_default()
}

fn parse_heartbeat(raw: &str) -> Result<Duration, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(Duration::from_secs(24 * 3600));
    }
    let nanos = parse_go_duration(raw).ok_or_else(|| {
        format!("invalid duration {raw:?} (use a Go duration such as 24h or 90m)")
    })?;
    if nanos < 0 {
        return Err(format!(
            "heartbeat interval must be >= 0 (0 disables heartbeats): got {}",
            format_go_duration(nanos)
        ));
    }
    Ok(Duration::from_nanos(
        u64::try_from(nanos).unwrap_or(u64::MAX),
    ))
}

/// A label prefix is a DNS subdomain of at most 253 characters.
pub fn check_label_prefix(prefix: &str) -> Result<(), String> {
    let valid_label = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(valid_label) {
        return Err(format!(
            "label prefix {prefix:?} must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> CollectorSettings {
        CollectorSettings {
            cluster: "c".into(),
            namespaces: vec!["gpu-operator".into()],
            label_selector: "app=x".into(),
            container: "c".into(),
            workers: 1,
            timeout: Duration::from_secs(30),
            resync: Duration::ZERO,
            heartbeat: Duration::from_secs(24 * 3600),
            label_prefix: DEFAULT_LABEL_PREFIX.into(),
            output_limit: DEFAULT_OUTPUT_LIMIT,
            collector_version: "t".into(),
            exporter: ExporterIdentity::of(&ExporterConfig::Stdout),
            upstream_labels: true,
        }
    }

    #[test]
    fn a_flag_beats_the_environment_and_both_are_validated() {
        let mut flags = BTreeMap::new();
        flags.insert("heartbeat-interval".to_owned(), "90m".to_owned());
        let env = |name: &str| match name {
            "HEARTBEAT_INTERVAL" => Some("1h".to_owned()),
            "NODE_LABEL_PREFIX" => Some("gpus.example.com".to_owned()),
            _ => None,
        };
        let settings = base().with_knobs(&flags, env).unwrap();
        assert_eq!(settings.heartbeat, Duration::from_secs(90 * 60));
        assert_eq!(settings.label_prefix, "gpus.example.com");
    }

    #[test]
    fn bad_values_are_all_reported_with_the_name_the_user_used() {
        let mut flags = BTreeMap::new();
        flags.insert("node-label-prefix".to_owned(), "Not_A_Domain".to_owned());
        let errors = base()
            .with_knobs(&flags, |name| {
                (name == "HEARTBEAT_INTERVAL").then(|| "-5s".to_owned())
            })
            .unwrap_err();
        let names: Vec<_> = errors.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["HEARTBEAT_INTERVAL", "--node-label-prefix"]);
        assert!(errors[0].problem.contains("must be >= 0"), "{errors:?}");
    }

    #[test]
    fn upstream_labels_are_on_by_default_and_a_boolean_turns_them_off() {
        assert!(
            base()
                .with_knobs(&BTreeMap::new(), |_| None)
                .unwrap()
                .upstream_labels
        );
        let off = base()
            .with_knobs(&BTreeMap::new(), |name| {
                (name == "UPSTREAM_NODE_LABELS").then(|| "false".to_owned())
            })
            .unwrap();
        assert!(!off.upstream_labels);
        let errors = base()
            .with_knobs(&BTreeMap::new(), |name| {
                (name == "UPSTREAM_NODE_LABELS").then(|| "sometimes".to_owned())
            })
            .unwrap_err();
        assert_eq!(errors[0].name, "UPSTREAM_NODE_LABELS");
    }

    #[test]
    fn zero_disables_the_heartbeat() {
        let settings = base()
            .with_knobs(&BTreeMap::new(), |name| {
                (name == "HEARTBEAT_INTERVAL").then(|| "0".to_owned())
            })
            .unwrap();
        assert_eq!(settings.heartbeat, Duration::ZERO);
    }
}
