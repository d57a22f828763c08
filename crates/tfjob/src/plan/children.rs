//! Pod and headless Service of one replica, as upstream builds them.

use k8s_openapi::api::core::v1::{EnvVar, Pod, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::names::{child_name, owner_reference, replica_labels, service_selector};
use super::tf_config::{TF_CONFIG, tf_config};
use crate::api::defaults::EffectiveSpec;
use crate::api::{CONTAINER_NAME, PORT_NAME, ReplicaType, RestartPolicy, TFJob};

/// Whether replica `index` of `rtype` carries `job-role=master`: the
/// Chief/Master pods if such a spec exists, otherwise worker 0.
pub fn is_master_role(spec: &EffectiveSpec, rtype: &ReplicaType, index: i32) -> bool {
    if spec.has_chief() {
        rtype.is_chief()
    } else {
        *rtype == ReplicaType::Worker && index == 0
    }
}

/// The pod restart policy a replica policy maps to.
pub fn pod_restart_policy(policy: RestartPolicy) -> &'static str {
    match policy {
        RestartPolicy::Always => "Always",
        RestartPolicy::OnFailure => "OnFailure",
        // The operator, not the kubelet, restarts ExitCode pods.
        RestartPolicy::Never | RestartPolicy::ExitCode | RestartPolicy::Unset => "Never",
    }
}

/// The pod, and whether its template set a restart policy that the replica
/// spec overrides (worth a warning).
pub fn build_pod(
    job: &TFJob,
    spec: &EffectiveSpec,
    rtype: &ReplicaType,
    index: i32,
    cluster_domain: Option<&str>,
) -> (Pod, bool) {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let Some(replica) = spec.replicas.get(rtype) else {
        return (Pod::default(), false);
    };
    let template = replica.template.clone();
    let template_meta = template.metadata.unwrap_or_default();
    let mut labels = template_meta.labels.unwrap_or_default();
    labels.extend(replica_labels(
        name,
        rtype,
        index,
        is_master_role(spec, rtype, index),
    ));
    let mut pod_spec = template.spec.unwrap_or_default();
    if let Some(config) = tf_config(spec, name, namespace, rtype, index, cluster_domain)
        && let Some(container) = pod_spec
            .containers
            .iter_mut()
            .find(|c| c.name == CONTAINER_NAME)
    {
        // Appended, so it wins over a user-set TF_CONFIG as upstream.
        container.env.get_or_insert_with(Vec::new).push(EnvVar {
            name: TF_CONFIG.to_string(),
            value: Some(config),
            value_from: None,
        });
    }
    let template_set_restart_policy = pod_spec.restart_policy.is_some();
    pod_spec.restart_policy = Some(pod_restart_policy(replica.restart_policy).to_string());
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(child_name(name, &rtype.lower(), index)),
            namespace: Some(namespace.to_string()),
            labels: Some(labels),
            annotations: template_meta.annotations,
            owner_references: Some(vec![owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(pod_spec),
        status: None,
    };
    (pod, template_set_restart_policy)
}

/// The headless Service of replica `index`; `publishNotReadyAddresses` so
/// peers resolve each other before they are ready (upstream #1458; kept
/// on purpose, README: differences from upstream).
pub fn build_service(
    job: &TFJob,
    spec: &EffectiveSpec,
    rtype: &ReplicaType,
    index: i32,
) -> Service {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let port = spec
        .replicas
        .get(rtype)
        .map_or(crate::api::DEFAULT_PORT, |r| r.port);
    Service {
        metadata: ObjectMeta {
            name: Some(child_name(name, &rtype.lower(), index)),
            namespace: job.metadata.namespace.clone(),
            labels: Some(replica_labels(name, rtype, index, false)),
            owner_references: Some(vec![owner_reference(job)]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(service_selector(name, rtype, index)),
            ports: Some(vec![ServicePort {
                name: Some(PORT_NAME.to_string()),
                port,
                ..ServicePort::default()
            }]),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::api::defaults::apply;
    use crate::api::{CleanPodPolicy, ReplicaSpec, TFJobSpec};
    use crate::testing::{job_with, tf_template};

    fn job(types: &[(&str, i32, Option<RestartPolicy>)]) -> TFJob {
        job_with(TFJobSpec {
            tf_replica_specs: Some(
                types
                    .iter()
                    .map(|(key, n, policy)| {
                        (
                            key.to_string(),
                            ReplicaSpec {
                                replicas: Some(*n),
                                template: Some(tf_template("img:1")),
                                restart_policy: *policy,
                            },
                        )
                    })
                    .collect(),
            ),
            ..TFJobSpec::default()
        })
    }

    #[test]
    fn every_created_pod_carries_a_controller_owner_ref_to_the_tfjob() {
        let job = job(&[("Worker", 1, None)]);
        let spec = apply(&job, CleanPodPolicy::Running);
        let (pod, _) = build_pod(&job, &spec, &ReplicaType::Worker, 0, None);
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!(owner.api_version, "kubeflow.org/v1");
        assert_eq!(owner.kind, "TFJob");
        assert_eq!(owner.name, "test-tfjob");
        assert_eq!(owner.uid, "uid-1");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    #[test]
    fn labels_and_annotations_set_on_a_replica_template_appear_on_its_pods() {
        let mut job = job(&[("Worker", 1, None)]);
        let template = job
            .spec
            .tf_replica_specs
            .as_mut()
            .unwrap()
            .get_mut("Worker")
            .unwrap()
            .template
            .as_mut()
            .unwrap();
        template.metadata = Some(ObjectMeta {
            labels: Some(BTreeMap::from([
                ("team".to_string(), "a".to_string()),
                ("job-name".to_string(), "spoofed".to_string()),
            ])),
            annotations: Some(BTreeMap::from([("note".to_string(), "x".to_string())])),
            ..ObjectMeta::default()
        });
        let spec = apply(&job, CleanPodPolicy::Running);
        let (pod, _) = build_pod(&job, &spec, &ReplicaType::Worker, 0, None);
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels["team"], "a");
        assert_eq!(labels["job-name"], "test-tfjob", "operator labels win");
        assert_eq!(pod.metadata.annotations.unwrap()["note"], "x");
    }

    #[test]
    fn only_the_chief_or_master_pod_or_worker_0_without_one_carries_job_role_master() {
        let with_chief = job(&[("Chief", 1, None), ("Worker", 2, None)]);
        let spec = apply(&with_chief, CleanPodPolicy::Running);
        let role = |job: &TFJob, spec: &EffectiveSpec, rtype: ReplicaType, i: i32| {
            build_pod(job, spec, &rtype, i, None)
                .0
                .metadata
                .labels
                .unwrap()
                .get("job-role")
                .cloned()
        };
        assert_eq!(
            role(&with_chief, &spec, ReplicaType::Chief, 0).as_deref(),
            Some("master")
        );
        assert_eq!(role(&with_chief, &spec, ReplicaType::Worker, 0), None);
        let workers = job(&[("Worker", 2, None), ("PS", 1, None)]);
        let spec = apply(&workers, CleanPodPolicy::Running);
        assert_eq!(
            role(&workers, &spec, ReplicaType::Worker, 0).as_deref(),
            Some("master")
        );
        assert_eq!(role(&workers, &spec, ReplicaType::Worker, 1), None);
        assert_eq!(role(&workers, &spec, ReplicaType::PS, 0), None);
        let master = job(&[("Master", 1, None), ("Worker", 1, None)]);
        let spec = apply(&master, CleanPodPolicy::Running);
        assert_eq!(
            role(&master, &spec, ReplicaType::Master, 0).as_deref(),
            Some("master")
        );
    }

    #[test]
    fn exit_code_sets_the_pod_restart_policy_to_never_and_the_others_are_copied_through() {
        for (policy, expected) in [
            (RestartPolicy::ExitCode, "Never"),
            (RestartPolicy::Never, "Never"),
            (RestartPolicy::Always, "Always"),
            (RestartPolicy::OnFailure, "OnFailure"),
        ] {
            let job = job(&[("Worker", 1, Some(policy))]);
            let spec = apply(&job, CleanPodPolicy::Running);
            let (pod, overridden) = build_pod(&job, &spec, &ReplicaType::Worker, 0, None);
            assert_eq!(pod.spec.unwrap().restart_policy.as_deref(), Some(expected));
            assert!(!overridden);
        }
    }

    #[test]
    fn tf_config_is_appended_to_the_tensorflow_container_of_distributed_jobs_only() {
        let job = job(&[("Worker", 1, None), ("PS", 1, None)]);
        let spec = apply(&job, CleanPodPolicy::Running);
        let (pod, _) = build_pod(&job, &spec, &ReplicaType::PS, 0, Some("cluster.local"));
        let env = pod.spec.unwrap().containers[0].env.clone().unwrap();
        assert_eq!(env.last().unwrap().name, "TF_CONFIG");
        assert!(
            env.last()
                .unwrap()
                .value
                .as_deref()
                .unwrap()
                .contains("test-tfjob-ps-0.default.svc.cluster.local:2222")
        );
        let single = job_with(job.spec.clone());
        let mut single = single;
        single.spec.tf_replica_specs.as_mut().unwrap().remove("PS");
        let spec = apply(&single, CleanPodPolicy::Running);
        let (pod, _) = build_pod(&single, &spec, &ReplicaType::Worker, 0, None);
        assert_eq!(pod.spec.unwrap().containers[0].env, None);
    }

    #[test]
    fn each_service_is_headless_publishes_not_ready_addresses_and_names_the_tfjob_port() {
        let job = job(&[("Worker", 2, None)]);
        let spec = apply(&job, CleanPodPolicy::Running);
        let service = build_service(&job, &spec, &ReplicaType::Worker, 1);
        assert_eq!(
            service.metadata.name.as_deref(),
            Some("test-tfjob-worker-1")
        );
        let labels = service.metadata.labels.clone().unwrap();
        assert!(!labels.contains_key("job-role"));
        let svc = service.spec.unwrap();
        assert_eq!(svc.cluster_ip.as_deref(), Some("None"));
        assert_eq!(svc.publish_not_ready_addresses, Some(true));
        let port = &svc.ports.unwrap()[0];
        assert_eq!(
            (port.name.as_deref(), port.port),
            (Some("tfjob-port"), 2222)
        );
        assert_eq!(port.target_port, None);
    }

    #[test]
    fn a_service_selects_its_pod_by_training_operator_v1_9s_four_labels_only() {
        let job = job(&[("Worker", 2, None)]);
        let spec = apply(&job, CleanPodPolicy::Running);
        let service = build_service(&job, &spec, &ReplicaType::Worker, 1);
        let selector = service.spec.unwrap().selector.unwrap();
        let expected: BTreeMap<String, String> = [
            ("training.kubeflow.org/operator-name", "tfjob-controller"),
            ("training.kubeflow.org/job-name", "test-tfjob"),
            ("training.kubeflow.org/replica-type", "worker"),
            ("training.kubeflow.org/replica-index", "1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(selector, expected);
        // Its pod carries them (and the legacy set besides); the other
        // worker does not match.
        let pod_labels = |index| {
            build_pod(&job, &spec, &ReplicaType::Worker, index, None)
                .0
                .metadata
                .labels
                .unwrap()
        };
        let matches = |labels: &BTreeMap<String, String>| {
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        };
        assert!(matches(&pod_labels(1)));
        assert!(!matches(&pod_labels(0)));
        for legacy in ["group-name", "job-name", "replica-type", "replica-index"] {
            assert!(pod_labels(1).contains_key(legacy), "{legacy}");
        }
    }
}
