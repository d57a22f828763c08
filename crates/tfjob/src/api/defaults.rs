//! Defaults applied in memory on every pass and never written back to the
//! spec (as upstream defaults them), plus the legacy top-level run fields
//! of the v1.0.x dialect, honoured when `runPolicy` lacks them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerPort, PodTemplateSpec};

use super::{
    CONTAINER_NAME, CleanPodPolicy, DEFAULT_PORT, PORT_NAME, ReplicaType, RestartPolicy, TFJob,
};

/// `successPolicy` as the operator understands it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SuccessPolicy {
    /// Chief decides, else worker 0 (or all workers).
    Default,
    /// Every worker must succeed.
    AllWorkers,
}

/// One replica type after defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveReplica {
    /// The key as the user wrote it.
    pub key: String,
    pub replicas: i32,
    pub restart_policy: RestartPolicy,
    /// Template with the `tfjob-port` port ensured on the tensorflow container.
    pub template: PodTemplateSpec,
    /// `containerPort` of `tfjob-port` on the tensorflow container.
    pub port: i32,
}

/// A legacy top-level field that was used because `runPolicy` lacks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeprecatedField {
    /// `spec.cleanPodPolicy` etc.
    pub path: &'static str,
    /// Where the value belongs now.
    pub replacement: &'static str,
}

/// The job as the planner reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct EffectiveSpec {
    pub replicas: BTreeMap<ReplicaType, EffectiveReplica>,
    pub clean_pod_policy: CleanPodPolicy,
    pub success_policy: SuccessPolicy,
    pub enable_dynamic_worker: bool,
    pub ttl_seconds_after_finished: Option<i32>,
    pub active_deadline_seconds: Option<i64>,
    pub backoff_limit: Option<i32>,
    /// `runPolicy.suspend`: pods deleted, none created, until false again.
    pub suspend: bool,
    pub deprecated: Vec<DeprecatedField>,
}

impl EffectiveSpec {
    /// Whether a Chief or Master spec exists.
    pub fn has_chief(&self) -> bool {
        self.replicas.keys().any(ReplicaType::is_chief)
    }

    /// Upstream's "distributed" test: the replicas of the five known
    /// types do not add up to exactly one.
    pub fn is_distributed(&self) -> bool {
        let total: i64 = self
            .replicas
            .iter()
            .filter(|(rtype, _)| rtype.is_known())
            .map(|(_, spec)| i64::from(spec.replicas))
            .sum();
        total != 1
    }
}

/// Applies the defaults. `default_clean_pod_policy` is the operator's
/// choice (`Running` for tf-operator parity). Call after validation: keys
/// that collide after normalisation keep the last one here.
pub fn apply(job: &TFJob, default_clean_pod_policy: CleanPodPolicy) -> EffectiveSpec {
    let spec = &job.spec;
    let run = spec.run_policy.clone().unwrap_or_default();
    // (present under runPolicy, present at the top, legacy path, new path)
    let legacy_fields = [
        (
            run.clean_pod_policy.is_some(),
            spec.clean_pod_policy.is_some(),
            "spec.cleanPodPolicy",
            "spec.runPolicy.cleanPodPolicy",
        ),
        (
            run.ttl_seconds_after_finished.is_some(),
            spec.ttl_seconds_after_finished.is_some(),
            "spec.ttlSecondsAfterFinished",
            "spec.runPolicy.ttlSecondsAfterFinished",
        ),
        (
            run.active_deadline_seconds.is_some(),
            spec.active_deadline_seconds.is_some(),
            "spec.activeDeadlineSeconds",
            "spec.runPolicy.activeDeadlineSeconds",
        ),
        (
            run.backoff_limit.is_some(),
            spec.backoff_limit.is_some(),
            "spec.backoffLimit",
            "spec.runPolicy.backoffLimit",
        ),
    ];
    let deprecated = legacy_fields
        .into_iter()
        .filter(|&(in_run, at_top, _, _)| !in_run && at_top)
        .map(|(_, _, path, replacement)| DeprecatedField { path, replacement })
        .collect();

    let mut replicas = BTreeMap::new();
    for (key, replica) in spec.tf_replica_specs.iter().flatten() {
        let mut template = replica.template.clone().unwrap_or_default();
        let port = ensure_port(&mut template);
        let restart_policy = match replica.restart_policy {
            None | Some(RestartPolicy::Unset) => RestartPolicy::Never,
            Some(policy) => policy,
        };
        replicas.insert(
            ReplicaType::from_key(key),
            EffectiveReplica {
                key: key.clone(),
                replicas: replica.replicas.unwrap_or(1),
                restart_policy,
                template,
                port,
            },
        );
    }

    EffectiveSpec {
        replicas,
        clean_pod_policy: run
            .clean_pod_policy
            .or(spec.clean_pod_policy)
            .unwrap_or(default_clean_pod_policy),
        success_policy: match spec.success_policy.as_deref() {
            Some("AllWorkers") => SuccessPolicy::AllWorkers,
            _ => SuccessPolicy::Default,
        },
        enable_dynamic_worker: spec.enable_dynamic_worker.unwrap_or(false),
        ttl_seconds_after_finished: run
            .ttl_seconds_after_finished
            .or(spec.ttl_seconds_after_finished),
        active_deadline_seconds: run.active_deadline_seconds.or(spec.active_deadline_seconds),
        backoff_limit: run.backoff_limit.or(spec.backoff_limit),
        suspend: run.suspend.unwrap_or(false),
        deprecated,
    }
}

/// Appends `tfjob-port:2222` to the tensorflow container (the first
/// container when none is named so, as upstream) unless it has a port of
/// that name; returns the port number replicas listen on.
fn ensure_port(template: &mut PodTemplateSpec) -> i32 {
    let Some(pod) = template.spec.as_mut() else {
        return DEFAULT_PORT;
    };
    let index = pod
        .containers
        .iter()
        .position(|c| c.name == CONTAINER_NAME)
        .unwrap_or(0);
    let Some(container) = pod.containers.get_mut(index) else {
        return DEFAULT_PORT;
    };
    let ports = container.ports.get_or_insert_with(Vec::new);
    if let Some(port) = ports.iter().find(|p| p.name.as_deref() == Some(PORT_NAME)) {
        return port.container_port;
    }
    ports.push(ContainerPort {
        name: Some(PORT_NAME.to_string()),
        container_port: DEFAULT_PORT,
        ..ContainerPort::default()
    });
    DEFAULT_PORT
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ReplicaSpec, RunPolicy, TFJobSpec};
    use crate::testing::{job_with, tf_template};

    fn worker_spec(replica: ReplicaSpec) -> TFJob {
        job_with(TFJobSpec {
            tf_replica_specs: Some([("Worker".to_string(), replica)].into()),
            ..TFJobSpec::default()
        })
    }

    #[test]
    fn a_tfjob_with_no_clean_pod_policy_takes_the_operators_default_and_an_explicit_all_is_kept() {
        let job = worker_spec(ReplicaSpec::default());
        assert_eq!(
            apply(&job, CleanPodPolicy::Running).clean_pod_policy,
            CleanPodPolicy::Running
        );
        assert_eq!(
            apply(&job, CleanPodPolicy::None).clean_pod_policy,
            CleanPodPolicy::None,
            "the default is the operator's choice"
        );
        let mut all = job.clone();
        all.spec.run_policy = Some(RunPolicy {
            clean_pod_policy: Some(CleanPodPolicy::All),
            ..RunPolicy::default()
        });
        assert_eq!(
            apply(&all, CleanPodPolicy::Running).clean_pod_policy,
            CleanPodPolicy::All
        );
    }

    #[test]
    fn success_policy_absent_behaves_as_empty() {
        let job = worker_spec(ReplicaSpec::default());
        assert_eq!(
            apply(&job, CleanPodPolicy::Running).success_policy,
            SuccessPolicy::Default
        );
        let mut other = job.clone();
        other.spec.success_policy = Some("Whatever".into());
        assert_eq!(
            apply(&other, CleanPodPolicy::Running).success_policy,
            SuccessPolicy::Default
        );
    }

    #[test]
    fn a_replica_spec_without_replicas_gets_1_without_restart_policy_gets_never_and_explicit_always_is_kept()
     {
        let effective = apply(
            &worker_spec(ReplicaSpec::default()),
            CleanPodPolicy::Running,
        );
        let worker = &effective.replicas[&ReplicaType::Worker];
        assert_eq!(worker.replicas, 1);
        assert_eq!(worker.restart_policy, RestartPolicy::Never);
        let always = worker_spec(ReplicaSpec {
            restart_policy: Some(RestartPolicy::Always),
            ..ReplicaSpec::default()
        });
        assert_eq!(
            apply(&always, CleanPodPolicy::Running).replicas[&ReplicaType::Worker].restart_policy,
            RestartPolicy::Always
        );
    }

    fn ports_after_defaults(ports: Option<Vec<ContainerPort>>) -> (Vec<(String, i32)>, i32) {
        let mut template = tf_template("img:1");
        template.spec.as_mut().unwrap().containers[0].ports = ports;
        let job = worker_spec(ReplicaSpec {
            template: Some(template),
            ..ReplicaSpec::default()
        });
        let effective = apply(&job, CleanPodPolicy::Running);
        let worker = &effective.replicas[&ReplicaType::Worker];
        let ports = worker.template.spec.as_ref().unwrap().containers[0]
            .ports
            .clone()
            .unwrap()
            .into_iter()
            .map(|p| (p.name.unwrap_or_default(), p.container_port))
            .collect();
        (ports, worker.port)
    }

    #[test]
    fn a_tensorflow_container_without_ports_gets_tfjob_port_2222() {
        assert_eq!(
            ports_after_defaults(None),
            (vec![("tfjob-port".into(), 2222)], 2222)
        );
    }

    #[test]
    fn a_tensorflow_container_with_tfjob_port_keeps_it() {
        let port = ContainerPort {
            name: Some("tfjob-port".into()),
            container_port: 3333,
            ..ContainerPort::default()
        };
        assert_eq!(
            ports_after_defaults(Some(vec![port])),
            (vec![("tfjob-port".into(), 3333)], 3333)
        );
    }

    #[test]
    fn a_tensorflow_container_with_only_a_custom_port_keeps_it_and_also_gets_tfjob_port() {
        let port = ContainerPort {
            name: Some("custom".into()),
            container_port: 4444,
            ..ContainerPort::default()
        };
        assert_eq!(
            ports_after_defaults(Some(vec![port])),
            (
                vec![("custom".into(), 4444), ("tfjob-port".into(), 2222)],
                2222
            )
        );
    }

    #[test]
    fn replica_key_worker_in_any_case_is_treated_as_worker_and_ps_as_ps() {
        let job = job_with(TFJobSpec {
            tf_replica_specs: Some(
                [
                    ("WORKER".to_string(), ReplicaSpec::default()),
                    ("ps".to_string(), ReplicaSpec::default()),
                    ("master".to_string(), ReplicaSpec::default()),
                ]
                .into(),
            ),
            ..TFJobSpec::default()
        });
        let effective = apply(&job, CleanPodPolicy::Running);
        let keys: Vec<&str> = effective.replicas.keys().map(|t| t.canonical()).collect();
        assert_eq!(keys, ["Master", "PS", "Worker"]);
        assert!(effective.has_chief(), "Master is an alias of Chief");
    }

    #[test]
    fn legacy_top_level_run_fields_are_honoured_when_run_policy_lacks_them() {
        let mut job = worker_spec(ReplicaSpec::default());
        job.spec.clean_pod_policy = Some(CleanPodPolicy::None);
        job.spec.backoff_limit = Some(3);
        job.spec.ttl_seconds_after_finished = Some(60);
        job.spec.run_policy = Some(RunPolicy {
            ttl_seconds_after_finished: Some(10),
            ..RunPolicy::default()
        });
        let effective = apply(&job, CleanPodPolicy::Running);
        assert_eq!(effective.clean_pod_policy, CleanPodPolicy::None);
        assert_eq!(effective.backoff_limit, Some(3));
        assert_eq!(
            effective.ttl_seconds_after_finished,
            Some(10),
            "runPolicy wins"
        );
        let paths: Vec<&str> = effective.deprecated.iter().map(|d| d.path).collect();
        assert_eq!(paths, ["spec.cleanPodPolicy", "spec.backoffLimit"]);
    }
}
