//! The simulated kubelet, scheduler and service IPs, observed only through
//! the API as a user would (kube::Api and kubectl).

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, PodCondition, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, PostParams};
use kube_sim::{KubeSim, KubeletConfig};
use serde_json::{Value, json};

use crate::exec::kubectl_async;

const WAIT: Duration = Duration::from_secs(20);

async fn sim() -> KubeSim {
    let config = KubeletConfig {
        lease_renew_interval: Duration::from_millis(200),
        stop_delay: Duration::from_millis(50),
        restart_delay: Duration::from_millis(100),
        ..KubeletConfig::default()
    };
    KubeSim::builder().kubelet(config).start().await.unwrap()
}

/// Polls `check` until it returns Some, failing the test after a generous timeout.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn pod_where(api: &Api<Pod>, name: &str, what: &str, pred: impl Fn(&Pod) -> bool) -> Pod {
    eventually(what, || async {
        api.get_opt(name).await.unwrap().filter(|p| pred(p))
    })
    .await
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Waits for an Event with `reason` about pod `name` and returns its note.
async fn event_note(sim: &KubeSim, name: &str, reason: &str) -> String {
    let events: Api<Event> = Api::default_namespaced(sim.client());
    eventually(&format!("a {reason} event"), || async {
        let list = events.list(&Default::default()).await.unwrap();
        list.items.into_iter().find_map(|e| {
            let about = e.regarding.as_ref()?.name.as_deref()? == name;
            (about && e.reason.as_deref() == Some(reason)).then(|| e.note.unwrap_or_default())
        })
    })
    .await
}

async fn create_node(sim: &KubeSim, name: &str, labels: Value, capacity: Value) -> Node {
    let nodes: Api<Node> = Api::all(sim.client());
    let node: Node = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"capacity": capacity},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap()
}

async fn create_pod(sim: &KubeSim, value: Value) -> Pod {
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let mut value = value;
    value["apiVersion"] = json!("v1");
    value["kind"] = json!("Pod");
    if value["spec"].get("containers").is_none() {
        value["spec"]["containers"] = json!([{"name": "main", "image": "registry.example/app:1"}]);
    }
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(value).unwrap(),
    )
    .await
    .unwrap()
}

fn gpu_limits(gpus: u32) -> Value {
    json!([{"name": "main", "image": "registry.example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}])
}

/// Waits until `count` nodes are Ready, so pods created next see the final
/// cluster rather than nodes still coming up (tainted not-ready until the
/// kubelet reports).
async fn wait_ready(sim: &KubeSim, count: usize) {
    let nodes: Api<Node> = Api::all(sim.client());
    eventually("every node to be Ready", || async {
        let list = nodes.list(&Default::default()).await.unwrap();
        let ready = list
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        (ready == count).then_some(())
    })
    .await;
}

async fn gpu_cluster(sim: &KubeSim) {
    create_node(sim, "cpu-1", json!({}), json!({})).await;
    for name in ["gpu-1", "gpu-2"] {
        create_node(
            sim,
            name,
            json!({"nvidia.com/gpu.present": "true"}),
            json!({"nvidia.com/gpu": "8"}),
        )
        .await;
    }
    wait_ready(sim, 3).await;
}

#[tokio::test]
async fn a_gpu_node_becomes_ready_with_its_capacity_and_renews_its_lease() {
    let sim = sim().await;
    create_node(&sim, "gpu-1", json!({}), json!({"nvidia.com/gpu": "8"})).await;
    let nodes: Api<Node> = Api::all(sim.client());
    let node = eventually("the node to be Ready", || async {
        let node = nodes.get("gpu-1").await.unwrap();
        let status = node.status.as_ref()?;
        let ready = status
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(node)
    })
    .await;
    let status = node.status.unwrap();
    let allocatable = status.allocatable.unwrap();
    assert_eq!(allocatable["nvidia.com/gpu"].0, "8");
    assert_eq!(allocatable["cpu"].0, "32");
    assert_eq!(allocatable["memory"].0, "256Gi");
    assert_eq!(allocatable["pods"].0, "110");
    let addresses = status.addresses.unwrap();
    assert!(
        addresses
            .iter()
            .any(|a| a.type_ == "InternalIP" && !a.address.is_empty())
    );

    let leases: Api<Lease> = Api::namespaced(sim.client(), "kube-node-lease");
    let first = eventually("the node lease", || async {
        leases.get_opt("gpu-1").await.unwrap()
    })
    .await;
    let spec = first.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("gpu-1"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    let first_renew = spec.renew_time.unwrap();
    eventually("the lease to be renewed", || async {
        let lease = leases.get("gpu-1").await.unwrap();
        let renewed = lease.spec?.renew_time?;
        (renewed.0 > first_renew.0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_node_that_opts_out_is_left_to_its_creator() {
    let sim = sim().await;
    create_node(
        &sim,
        "manual",
        json!({"kube-sim.gpufleet.dev/simulated": "false"}),
        json!({}),
    )
    .await;
    // A simulated node created after it is handled, so the kubelet has run.
    create_node(&sim, "auto", json!({}), json!({})).await;
    let leases: Api<Lease> = Api::namespaced(sim.client(), "kube-node-lease");
    eventually("the simulated node's lease", || async {
        leases.get_opt("auto").await.unwrap()
    })
    .await;
    assert!(leases.get_opt("manual").await.unwrap().is_none());
    let nodes: Api<Node> = Api::all(sim.client());
    let manual = nodes.get("manual").await.unwrap();
    assert!(
        manual
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn a_two_gpu_pod_binds_to_a_gpu_node_and_runs() {
    let sim = sim().await;
    gpu_cluster(&sim).await;
    create_pod(
        &sim,
        json!({"metadata": {"name": "trainer"}, "spec": {"containers": gpu_limits(2)}}),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let running = pod_where(&pods, "trainer", "the pod to run", |p| {
        phase(p) == "Running"
    })
    .await;
    let node = running.spec.as_ref().unwrap().node_name.clone().unwrap();
    assert!(node.starts_with("gpu-"), "bound to {node}");
    assert_eq!(condition(&running, "PodScheduled").unwrap().status, "True");
    assert_eq!(condition(&running, "Ready").unwrap().status, "True");
    assert_eq!(
        condition(&running, "ContainersReady").unwrap().status,
        "True"
    );
    assert_eq!(condition(&running, "Initialized").unwrap().status, "True");
    let status = running.status.unwrap();
    assert!(status.pod_ip.is_some_and(|ip| ip.starts_with("10.244.")));
    assert!(status.host_ip.is_some());
    assert!(status.start_time.is_some());
    let container = &status.container_statuses.unwrap()[0];
    assert!(container.ready);
    assert!(container.state.as_ref().unwrap().running.is_some());

    assert_eq!(
        event_note(&sim, "trainer", "Scheduled").await,
        format!("Successfully assigned default/trainer to {node}")
    );

    // kubectl sees the same.
    let out = kubectl_async(
        &sim,
        &[
            "get",
            "pod",
            "trainer",
            "-o",
            "jsonpath={.status.phase} {.spec.nodeName}",
        ],
        None,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("Running {node}")
    );
}

#[tokio::test]
async fn gpus_are_counted_so_a_full_node_takes_no_more() {
    let sim = sim().await;
    create_node(&sim, "gpu-1", json!({}), json!({"nvidia.com/gpu": "4"})).await;
    wait_ready(&sim, 1).await;
    for name in ["a", "b", "c"] {
        create_pod(
            &sim,
            json!({"metadata": {"name": name}, "spec": {"containers": gpu_limits(2)}}),
        )
        .await;
    }
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let unschedulable = eventually("one pod to be unschedulable", || async {
        let list = pods.list(&Default::default()).await.unwrap();
        let bound = list
            .items
            .iter()
            .filter(|p| p.spec.as_ref().unwrap().node_name.is_some())
            .count();
        let waiting: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| {
                condition(p, "PodScheduled")
                    .is_some_and(|c| c.reason.as_deref() == Some("Unschedulable"))
            })
            .collect();
        (bound == 2 && waiting.len() == 1).then_some(waiting)
    })
    .await;
    assert_eq!(
        condition(&unschedulable[0], "PodScheduled")
            .unwrap()
            .message
            .as_deref(),
        Some("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    );
}

#[tokio::test]
async fn a_nine_gpu_pod_stays_pending_with_kube_schedulers_message() {
    let sim = sim().await;
    gpu_cluster(&sim).await;
    create_pod(
        &sim,
        json!({"metadata": {"name": "huge"}, "spec": {
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "containers": gpu_limits(9),
        }}),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let pending = pod_where(&pods, "huge", "the Unschedulable condition", |p| {
        condition(p, "PodScheduled").is_some_and(|c| c.status == "False")
    })
    .await;
    let scheduled = condition(&pending, "PodScheduled").unwrap();
    assert_eq!(scheduled.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(
        scheduled.message.as_deref(),
        Some(
            "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient nvidia.com/gpu."
        )
    );
    assert_eq!(phase(&pending), "Pending");
    assert!(pending.spec.as_ref().unwrap().node_name.is_none());
    assert_eq!(
        event_note(&sim, "huge", "FailedScheduling").await,
        scheduled.message.clone().unwrap()
    );
}

#[tokio::test]
async fn a_pod_of_a_job_like_owner_runs_to_succeeded() {
    let sim = sim().await;
    create_node(&sim, "node-1", json!({}), json!({})).await;
    let owners: Api<ConfigMap> = Api::default_namespaced(sim.client());
    let owner = owners
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "job-1"}})).unwrap(),
        )
        .await
        .unwrap();
    create_pod(
        &sim,
        json!({
            "metadata": {
                "name": "job-1-worker",
                "annotations": {"kube-sim.gpufleet.dev/run-seconds": "0.3"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "job-1",
                    "uid": owner.metadata.uid.unwrap(), "controller": true}],
            },
            "spec": {"restartPolicy": "Never"},
        }),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let done = pod_where(&pods, "job-1-worker", "the pod to succeed", |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let container = &done
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    let terminated = container
        .state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(terminated.exit_code, 0);
    assert_eq!(terminated.reason.as_deref(), Some("Completed"));
    assert_eq!(
        condition(&done, "Ready").unwrap().reason.as_deref(),
        Some("PodCompleted")
    );
}

#[tokio::test]
async fn per_container_exit_codes_fail_a_never_restart_pod() {
    let sim = sim().await;
    create_node(&sim, "node-1", json!({}), json!({})).await;
    create_pod(
        &sim,
        json!({
            "metadata": {"name": "two", "annotations": {
                "kube-sim.gpufleet.dev/run-seconds": "0.2",
                "kube-sim.gpufleet.dev/exit-code.sidecar": "3",
            }},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "main", "image": "a"}, {"name": "sidecar", "image": "b"}
            ]},
        }),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let failed = pod_where(&pods, "two", "the pod to fail", |p| phase(p) == "Failed").await;
    let codes: Vec<(String, i32)> = failed
        .status
        .unwrap()
        .container_statuses
        .unwrap()
        .into_iter()
        .map(|c| (c.name, c.state.unwrap().terminated.unwrap().exit_code))
        .collect();
    assert_eq!(
        codes,
        vec![("main".to_string(), 0), ("sidecar".to_string(), 3)]
    );
}

#[tokio::test]
async fn on_failure_restarts_failed_containers_and_counts_the_restarts() {
    let sim = sim().await;
    create_node(&sim, "node-1", json!({}), json!({})).await;
    create_pod(
        &sim,
        json!({
            "metadata": {"name": "flaky", "annotations": {
                "kube-sim.gpufleet.dev/run-seconds": "0.2",
                "kube-sim.gpufleet.dev/exit-code": "1,1,0",
            }},
            "spec": {"restartPolicy": "OnFailure"},
        }),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let done = pod_where(&pods, "flaky", "the pod to succeed after restarts", |p| {
        phase(p) == "Succeeded"
    })
    .await;
    let container = &done.status.unwrap().container_statuses.unwrap()[0];
    assert_eq!(container.restart_count, 2);
    let last = container
        .last_state
        .as_ref()
        .unwrap()
        .terminated
        .as_ref()
        .unwrap();
    assert_eq!(last.exit_code, 1);
}

#[tokio::test]
async fn always_restarts_forever_and_the_count_grows() {
    let sim = sim().await;
    create_node(&sim, "node-1", json!({}), json!({})).await;
    create_pod(
        &sim,
        json!({
            "metadata": {"name": "server", "annotations": {"kube-sim.gpufleet.dev/run-seconds": "0.1"}},
            "spec": {"restartPolicy": "Always"},
        }),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let restarted = pod_where(&pods, "server", "three restarts", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| cs[0].restart_count >= 3)
    })
    .await;
    assert_eq!(phase(&restarted), "Running");
}

#[tokio::test]
async fn a_graceful_deletion_is_finished_by_the_kubelet() {
    let sim = sim().await;
    create_node(&sim, "node-1", json!({}), json!({})).await;
    create_pod(&sim, json!({"metadata": {"name": "web"}, "spec": {}})).await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    pod_where(&pods, "web", "the pod to run", |p| phase(p) == "Running").await;
    // The default grace period is 30 s; the kubelet finishes long before.
    let marked = pods.delete("web", &DeleteParams::default()).await.unwrap();
    // The API only marks the pod; nobody but its kubelet removes it early.
    let marked = marked
        .left()
        .expect("a pod on a node is deleted gracefully");
    assert!(marked.metadata.deletion_timestamp.is_some());
    eventually("the kubelet to remove the pod", || async {
        pods.get_opt("web").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_pod_for_another_scheduler_is_left_alone() {
    let sim = sim().await;
    create_node(&sim, "node-1", json!({}), json!({})).await;
    create_pod(
        &sim,
        json!({"metadata": {"name": "gang"}, "spec": {"schedulerName": "volcano"}}),
    )
    .await;
    create_pod(&sim, json!({"metadata": {"name": "plain"}, "spec": {}})).await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    // Once a later default pod is bound, the scheduler has seen both.
    pod_where(&pods, "plain", "the default pod to bind", |p| {
        p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
    })
    .await;
    let gang = pods.get("gang").await.unwrap();
    assert!(gang.spec.as_ref().unwrap().node_name.is_none());
    assert!(condition(&gang, "PodScheduled").is_none());
    assert_eq!(phase(&gang), "Pending");
}

#[tokio::test]
async fn services_get_distinct_cluster_ips_and_headless_ones_stay_headless() {
    let sim = sim().await;
    let services: Api<Service> = Api::default_namespaced(sim.client());
    for (name, cluster_ip) in [("a", None), ("b", None), ("headless", Some("None"))] {
        let mut spec = json!({"ports": [{"port": 80}]});
        if let Some(ip) = cluster_ip {
            spec["clusterIP"] = json!(ip);
        }
        let svc: Service =
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
        services.create(&PostParams::default(), &svc).await.unwrap();
    }
    let ips = eventually("cluster IPs", || async {
        let mut ips = Vec::new();
        for name in ["a", "b"] {
            let svc = services.get(name).await.unwrap();
            ips.push(svc.spec?.cluster_ip.filter(|ip| !ip.is_empty())?);
        }
        Some(ips)
    })
    .await;
    assert_ne!(ips[0], ips[1]);
    for ip in &ips {
        let addr: std::net::Ipv4Addr = ip.parse().unwrap();
        assert_eq!(addr.octets()[0], 10);
        assert!(
            (96..112).contains(&addr.octets()[1]),
            "{ip} outside 10.96.0.0/12"
        );
    }
    let headless = services.get("headless").await.unwrap();
    assert_eq!(headless.spec.unwrap().cluster_ip.as_deref(), Some("None"));
}

#[tokio::test]
async fn with_the_simulation_off_pods_stay_pending() {
    let sim = KubeSim::builder()
        .kubelet(KubeletConfig::disabled())
        .start()
        .await
        .unwrap();
    create_node(&sim, "node-1", json!({}), json!({})).await;
    create_pod(&sim, json!({"metadata": {"name": "idle"}, "spec": {}})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let idle = pods.get("idle").await.unwrap();
    assert_eq!(phase(&idle), "Pending");
    assert!(idle.spec.unwrap().node_name.is_none());
}

#[tokio::test]
async fn the_binding_subresource_assigns_once_and_refuses_a_second_node() {
    let sim = KubeSim::builder()
        .kubelet(KubeletConfig::disabled())
        .start()
        .await
        .unwrap();
    create_pod(&sim, json!({"metadata": {"name": "p"}, "spec": {}})).await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    let binding = |node: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    };
    let _: Value = pods
        .create_subresource("binding", "p", &PostParams::default(), &binding("n1"))
        .await
        .unwrap();
    let bound = pods.get("p").await.unwrap();
    assert_eq!(
        bound.spec.as_ref().unwrap().node_name.as_deref(),
        Some("n1")
    );
    assert_eq!(condition(&bound, "PodScheduled").unwrap().status, "True");

    let again = pods
        .create_subresource::<_, Value>("binding", "p", &PostParams::default(), &binding("n2"))
        .await;
    match again {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 409);
            assert!(
                status.message.contains("already assigned to node \"n1\""),
                "{}",
                status.message
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let missing = pods
        .create_subresource::<_, Value>("binding", "ghost", &PostParams::default(), &binding("n1"))
        .await;
    assert!(matches!(missing, Err(kube::Error::Api(s)) if s.code == 404));
}

/// Reads the simulated kubelet's node and pod sync counters once they have
/// stopped moving, i.e. once the loops are idle.
async fn settled_syncs(sim: &KubeSim) -> (u64, u64) {
    use std::sync::atomic::Ordering;
    let read = || {
        (
            sim.stats().kubelet_node_syncs.load(Ordering::Relaxed),
            sim.stats().kubelet_pod_syncs.load(Ordering::Relaxed),
        )
    };
    eventually("the kubelet loops to go idle", || async {
        let before = read();
        tokio::time::sleep(Duration::from_millis(300)).await;
        (read() == before).then_some(before)
    })
    .await
}

#[tokio::test]
async fn a_label_change_on_one_node_among_many_touches_only_that_node() {
    // Leases far apart, so no renewal falls inside the measured window.
    let config = KubeletConfig {
        lease_renew_interval: Duration::from_secs(3600),
        ..KubeletConfig::default()
    };
    let sim = KubeSim::builder().kubelet(config).start().await.unwrap();
    let count = 60;
    for i in 0..count {
        create_node(&sim, &format!("fleet-{i:03}"), json!({}), json!({})).await;
        create_pod(
            &sim,
            json!({"metadata": {"name": format!("plugin-{i:03}")},
                   "spec": {"nodeName": format!("fleet-{i:03}")}}),
        )
        .await;
    }
    wait_ready(&sim, count).await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    eventually("every pod to run", || async {
        let list = pods.list(&Default::default()).await.unwrap();
        let running = list.items.iter().filter(|p| phase(p) == "Running").count();
        (running == count).then_some(())
    })
    .await;
    let (nodes_before, pods_before) = settled_syncs(&sim).await;
    let writes_before = sim
        .stats()
        .writes
        .load(std::sync::atomic::Ordering::Relaxed);

    let nodes: Api<Node> = Api::all(sim.client());
    nodes
        .patch(
            "fleet-007",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
        )
        .await
        .unwrap();
    let (nodes_after, pods_after) = settled_syncs(&sim).await;
    let writes = sim
        .stats()
        .writes
        .load(std::sync::atomic::Ordering::Relaxed)
        - writes_before;

    // The node loop looked at the patched node, not at all 60.
    let node_syncs = nodes_after - nodes_before;
    assert!(
        (1..=3).contains(&node_syncs),
        "{node_syncs} node syncs after one label patch"
    );
    // A label changes neither the host IP nor the node's existence, so no pod is synced.
    let pod_syncs = pods_after - pods_before;
    assert!(
        pod_syncs <= 2,
        "{pod_syncs} pod syncs after one label patch"
    );
    // The patch itself, and no status or lease writes for the others.
    assert!(writes <= 3, "{writes} writes after one label patch");
}

#[tokio::test]
async fn a_pod_bound_to_a_node_not_yet_created_runs_once_the_node_comes() {
    let sim = sim().await;
    create_pod(
        &sim,
        json!({"metadata": {"name": "early"}, "spec": {"nodeName": "late-node"}}),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(phase(&pods.get("early").await.unwrap()), "Pending");
    create_node(&sim, "late-node", json!({}), json!({})).await;
    let running = pod_where(&pods, "early", "the pod to run on the new node", |p| {
        phase(p) == "Running"
    })
    .await;
    let nodes: Api<Node> = Api::all(sim.client());
    let node = nodes.get("late-node").await.unwrap();
    let internal = node
        .status
        .and_then(|s| s.addresses)
        .and_then(|a| a.into_iter().find(|a| a.type_ == "InternalIP"))
        .map(|a| a.address);
    assert_eq!(running.status.and_then(|s| s.host_ip), internal);
}

#[tokio::test]
async fn deleting_the_node_of_a_deleting_pod_lets_the_pod_go() {
    let sim = sim().await;
    // An opted-out node: no simulated kubelet finishes its pods' deletions.
    create_node(
        &sim,
        "manual",
        json!({"kube-sim.gpufleet.dev/simulated": "false"}),
        json!({}),
    )
    .await;
    create_pod(
        &sim,
        json!({"metadata": {"name": "stuck"}, "spec": {"nodeName": "manual"}}),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(sim.client());
    pods.delete("stuck", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let marked = pods.get("stuck").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    // With its node gone, the pod is removed as the pod GC would.
    let nodes: Api<Node> = Api::all(sim.client());
    nodes
        .delete("manual", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the pod of the deleted node to go", || async {
        pods.get_opt("stuck").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_node_deleted_and_created_again_gets_a_new_lease_at_once() {
    // Renewals an hour apart: only the new Node's uid can bring the Lease back.
    let config = KubeletConfig {
        lease_renew_interval: Duration::from_secs(3600),
        ..KubeletConfig::default()
    };
    let sim = KubeSim::builder().kubelet(config).start().await.unwrap();
    let leases: Api<Lease> = Api::namespaced(sim.client(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(sim.client());
    create_node(&sim, "phoenix", json!({}), json!({})).await;
    eventually("the first lease", || async {
        leases.get_opt("phoenix").await.unwrap()
    })
    .await;
    // Back to back, so the loop may see both changes in one pass.
    nodes
        .delete("phoenix", &DeleteParams::default())
        .await
        .unwrap();
    let reborn = create_node(&sim, "phoenix", json!({}), json!({})).await;
    let lease = eventually("a lease owned by the new node", || async {
        leases.get_opt("phoenix").await.unwrap().filter(|l| {
            l.metadata.owner_references.as_ref().is_some_and(|o| {
                o.iter()
                    .any(|r| Some(&r.uid) == reborn.metadata.uid.as_ref())
            })
        })
    })
    .await;
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("phoenix")
    );
}
