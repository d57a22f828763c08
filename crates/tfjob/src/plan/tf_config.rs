//! `TF_CONFIG`, byte for byte as upstream writes it: compact JSON, object
//! keys in declaration order, cluster keys sorted (Go encodes maps sorted;
//! `BTreeMap` does the same), lists in index order.

use std::collections::BTreeMap;

use serde::Serialize;

use super::names::child_name;
use crate::api::ReplicaType;
use crate::api::defaults::EffectiveSpec;

/// Name of the environment variable.
pub const TF_CONFIG: &str = "TF_CONFIG";

#[derive(Serialize)]
struct Task<'a> {
    #[serde(rename = "type")]
    type_: &'a str,
    index: i32,
}

#[derive(Serialize)]
struct Standard<'a> {
    cluster: BTreeMap<String, Vec<String>>,
    task: Task<'a>,
    /// A TF <= 1.3 contrib.learn relic upstream always writes.
    environment: &'static str,
}

#[derive(Serialize)]
struct SparseCluster {
    worker: BTreeMap<String, String>,
    ps: Option<Vec<String>>,
}

#[derive(Serialize)]
struct Sparse<'a> {
    #[serde(rename = "sparseCluster")]
    sparse_cluster: SparseCluster,
    task: Task<'a>,
}

/// `{job}-{rt}-{i}.{namespace}.svc[.{domain}]:{port}`.
fn address(
    job: &str,
    namespace: &str,
    rtype: &str,
    index: i32,
    port: i32,
    domain: Option<&str>,
) -> String {
    let host = child_name(job, rtype, index);
    match domain.filter(|d| !d.is_empty()) {
        Some(domain) => format!("{host}.{namespace}.svc.{domain}:{port}"),
        None => format!("{host}.{namespace}.svc:{port}"),
    }
}

fn addresses(
    spec: &EffectiveSpec,
    job: &str,
    namespace: &str,
    rtype: &ReplicaType,
    domain: Option<&str>,
) -> Vec<String> {
    let Some(replica) = spec.replicas.get(rtype) else {
        return Vec::new();
    };
    (0..replica.replicas.max(0))
        .map(|i| address(job, namespace, &rtype.lower(), i, replica.port, domain))
        .collect()
}

/// The `TF_CONFIG` of replica `index` of `rtype`, or `None` when the job is
/// not distributed (then upstream injects none). `domain` is the
/// operator's `CUSTOM_CLUSTER_DOMAIN`.
pub fn tf_config(
    spec: &EffectiveSpec,
    job: &str,
    namespace: &str,
    rtype: &ReplicaType,
    index: i32,
    domain: Option<&str>,
) -> Option<String> {
    if !spec.is_distributed() {
        return None;
    }
    let lower = rtype.lower();
    let task = Task {
        type_: &lower,
        index,
    };
    let json = if spec.enable_dynamic_worker {
        let port = spec
            .replicas
            .get(rtype)
            .map_or(crate::api::DEFAULT_PORT, |r| r.port);
        let own = address(job, namespace, &lower, index, port, domain);
        let sparse_cluster = match rtype {
            ReplicaType::PS => SparseCluster {
                worker: BTreeMap::new(),
                ps: Some(vec![own]),
            },
            ReplicaType::Worker => SparseCluster {
                worker: BTreeMap::from([(index.to_string(), own)]),
                ps: spec
                    .replicas
                    .contains_key(&ReplicaType::PS)
                    .then(|| addresses(spec, job, namespace, &ReplicaType::PS, domain)),
            },
            _ => SparseCluster {
                worker: BTreeMap::new(),
                ps: Some(Vec::new()),
            },
        };
        serde_json::to_string(&Sparse {
            sparse_cluster,
            task,
        })
    } else {
        let cluster = spec
            .replicas
            .keys()
            .map(|rt| (rt.lower(), addresses(spec, job, namespace, rt, domain)))
            .collect();
        serde_json::to_string(&Standard {
            cluster,
            task,
            environment: "cloud",
        })
    };
    // Serialising strings, integers and maps of them cannot fail.
    json.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::defaults::apply;
    use crate::api::{CleanPodPolicy, ReplicaSpec, TFJobSpec};
    use crate::testing::{job_with, tf_template};

    fn spec_of(types: &[(&str, i32)], dynamic: bool) -> EffectiveSpec {
        let job = job_with(TFJobSpec {
            enable_dynamic_worker: dynamic.then_some(true),
            tf_replica_specs: Some(
                types
                    .iter()
                    .map(|(key, n)| {
                        (
                            key.to_string(),
                            ReplicaSpec {
                                replicas: Some(*n),
                                template: Some(tf_template("img:1")),
                                ..ReplicaSpec::default()
                            },
                        )
                    })
                    .collect(),
            ),
            ..TFJobSpec::default()
        });
        apply(&job, CleanPodPolicy::Running)
    }

    fn config(types: &[(&str, i32)], rtype: ReplicaType, index: i32) -> Option<String> {
        tf_config(&spec_of(types, false), "j", "ns", &rtype, index, None)
    }

    #[test]
    fn one_worker_only_gets_no_tf_config() {
        assert_eq!(config(&[("Worker", 1)], ReplicaType::Worker, 0), None);
    }

    #[test]
    fn one_worker_and_one_ps_get_tf_config() {
        assert!(config(&[("Worker", 1), ("PS", 1)], ReplicaType::Worker, 0).is_some());
    }

    #[test]
    fn zero_workers_and_one_ps_get_no_tf_config() {
        assert_eq!(
            config(&[("Worker", 0), ("PS", 1)], ReplicaType::PS, 0),
            None
        );
    }

    #[test]
    fn one_chief_and_one_worker_get_tf_config() {
        assert_eq!(
            config(&[("Chief", 1), ("Worker", 1)], ReplicaType::Chief, 0).as_deref(),
            Some(
                r#"{"cluster":{"chief":["j-chief-0.ns.svc:2222"],"worker":["j-worker-0.ns.svc:2222"]},"task":{"type":"chief","index":0},"environment":"cloud"}"#
            )
        );
    }

    #[test]
    fn with_custom_cluster_domain_worker_0_of_a_1_worker_1_ps_job_in_ns2_gets_the_exact_upstream_bytes()
     {
        let spec = spec_of(&[("Worker", 1), ("PS", 1)], false);
        assert_eq!(
            tf_config(
                &spec,
                "test-tfjob",
                "ns2",
                &ReplicaType::Worker,
                0,
                Some("tf.training.org")
            )
            .as_deref(),
            Some(
                r#"{"cluster":{"ps":["test-tfjob-ps-0.ns2.svc.tf.training.org:2222"],"worker":["test-tfjob-worker-0.ns2.svc.tf.training.org:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}"#
            )
        );
    }

    #[test]
    fn with_an_evaluator_the_cluster_lists_evaluator_ps_worker_in_that_order_ending_in_svc_2222() {
        assert_eq!(
            config(
                &[("Worker", 2), ("PS", 2), ("Evaluator", 1), ("Chief", 1)],
                ReplicaType::Worker,
                1
            )
            .as_deref(),
            Some(
                r#"{"cluster":{"chief":["j-chief-0.ns.svc:2222"],"evaluator":["j-evaluator-0.ns.svc:2222"],"ps":["j-ps-0.ns.svc:2222","j-ps-1.ns.svc:2222"],"worker":["j-worker-0.ns.svc:2222","j-worker-1.ns.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#
            )
        );
        assert_eq!(
            config(
                &[("Worker", 1), ("Evaluator", 1)],
                ReplicaType::Evaluator,
                0
            )
            .as_deref(),
            Some(
                r#"{"cluster":{"evaluator":["j-evaluator-0.ns.svc:2222"],"worker":["j-worker-0.ns.svc:2222"]},"task":{"type":"evaluator","index":0},"environment":"cloud"}"#
            )
        );
    }

    #[test]
    fn an_empty_custom_cluster_domain_is_no_domain() {
        let spec = spec_of(&[("Worker", 1), ("PS", 1)], false);
        let with_empty = tf_config(&spec, "j", "ns", &ReplicaType::PS, 0, Some(""));
        assert_eq!(
            with_empty,
            tf_config(&spec, "j", "ns", &ReplicaType::PS, 0, None)
        );
    }

    #[test]
    fn the_port_is_the_tfjob_port_of_the_replica_type() {
        let mut job_spec = spec_of(&[("Worker", 1), ("PS", 1)], false);
        job_spec.replicas.get_mut(&ReplicaType::PS).unwrap().port = 3000;
        assert_eq!(
            tf_config(&job_spec, "j", "ns", &ReplicaType::Worker, 0, None).as_deref(),
            Some(
                r#"{"cluster":{"ps":["j-ps-0.ns.svc:3000"],"worker":["j-worker-0.ns.svc:2222"]},"task":{"type":"worker","index":0},"environment":"cloud"}"#
            )
        );
    }

    #[test]
    fn with_dynamic_workers_worker_0_sees_itself_and_both_ps_and_ps_0_sees_only_itself() {
        let spec = spec_of(&[("Worker", 2), ("PS", 2)], true);
        assert_eq!(
            tf_config(&spec, "j", "ns", &ReplicaType::Worker, 0, None).as_deref(),
            Some(
                r#"{"sparseCluster":{"worker":{"0":"j-worker-0.ns.svc:2222"},"ps":["j-ps-0.ns.svc:2222","j-ps-1.ns.svc:2222"]},"task":{"type":"worker","index":0}}"#
            )
        );
        assert_eq!(
            tf_config(&spec, "j", "ns", &ReplicaType::PS, 0, None).as_deref(),
            Some(
                r#"{"sparseCluster":{"worker":{},"ps":["j-ps-0.ns.svc:2222"]},"task":{"type":"ps","index":0}}"#
            )
        );
    }

    #[test]
    fn with_dynamic_workers_and_no_ps_a_worker_sees_null_ps_and_other_types_an_empty_list() {
        let spec = spec_of(&[("Worker", 2), ("Chief", 1)], true);
        assert_eq!(
            tf_config(&spec, "j", "ns", &ReplicaType::Worker, 1, None).as_deref(),
            Some(
                r#"{"sparseCluster":{"worker":{"1":"j-worker-1.ns.svc:2222"},"ps":null},"task":{"type":"worker","index":1}}"#
            )
        );
        assert_eq!(
            tf_config(&spec, "j", "ns", &ReplicaType::Chief, 0, None).as_deref(),
            Some(r#"{"sparseCluster":{"worker":{},"ps":[]},"task":{"type":"chief","index":0}}"#)
        );
    }
}
