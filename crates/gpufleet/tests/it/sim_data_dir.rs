//! `gpufleet sim serve --data-dir`: what a client saw acknowledged is there
//! after a `kill -9` and a restart, a running controller carries on across
//! the restart with its kubeconfig and tokens, and a directory that is not
//! a kube-sim store is refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::support::{KilledOnDrop, SimServer, free_port, poll_http};

async fn client_for(kubeconfig: &Path) -> kube::Client {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig).expect("kubeconfig readable"),
        &KubeConfigOptions::default(),
    )
    .await
    .expect("kubeconfig usable");
    kube::Client::try_from(config).expect("client")
}

fn configmap(name: &str, writer: usize, sequence: usize) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.to_string());
    cm.data = Some(BTreeMap::from([
        ("writer".to_string(), writer.to_string()),
        ("sequence".to_string(), sequence.to_string()),
    ]));
    cm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_9_during_a_write_loop_loses_no_acknowledged_write() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().join("store");
    let data_arg = data_dir.to_string_lossy().into_owned();
    let mut first = SimServer::start_with(&["--data-dir", &data_arg]);
    let api: Api<ConfigMap> = Api::default_namespaced(client_for(&first.kubeconfig).await);

    // Four writers create ConfigMaps as fast as the server acknowledges
    // them; each remembers the resourceVersion of every acknowledged create.
    let acked: Arc<parking_lot::Mutex<BTreeMap<String, String>>> = Default::default();
    let mut writers = Vec::new();
    for writer in 0..4 {
        let (api, acked) = (api.clone(), acked.clone());
        writers.push(tokio::spawn(async move {
            for sequence in 0.. {
                let name = format!("w{writer}-{sequence}");
                match api
                    .create(&PostParams::default(), &configmap(&name, writer, sequence))
                    .await
                {
                    Ok(created) => {
                        let rv = created.metadata.resource_version.unwrap_or_default();
                        acked.lock().insert(name, rv);
                    }
                    Err(_) => break,
                }
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().len() < 400 {
        assert!(
            Instant::now() < deadline,
            "only {} writes acknowledged in 60 s",
            acked.lock().len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SIGKILL in the middle of the loop: no shutdown code runs.
    first.child.kill().expect("kill -9");
    first.child.wait().expect("the server is gone");
    for writer in writers {
        let _ = tokio::time::timeout(Duration::from_secs(30), writer).await;
    }
    let acked = acked.lock().clone();

    let second = SimServer::start_with(&["--data-dir", &data_arg]);
    let api: Api<ConfigMap> = Api::default_namespaced(client_for(&second.kubeconfig).await);
    let listed = api.list(&ListParams::default()).await.expect("list");
    let stored: BTreeMap<String, String> = listed
        .items
        .iter()
        .map(|cm| {
            (
                cm.metadata.name.clone().unwrap_or_default(),
                cm.metadata.resource_version.clone().unwrap_or_default(),
            )
        })
        .collect();
    let lost: Vec<&String> = acked
        .keys()
        .filter(|name| !stored.contains_key(*name))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost, e.g. {:?}",
        lost.len(),
        acked.len(),
        &lost[..lost.len().min(5)]
    );
    for (name, rv) in &acked {
        assert_eq!(
            &stored[name], rv,
            "{name} came back at another resourceVersion"
        );
    }
    // Resource versions continue after the last one handed out.
    let highest_acked = acked
        .values()
        .filter_map(|rv| rv.parse::<u64>().ok())
        .max()
        .unwrap();
    let list_rv: u64 = listed
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or("0")
        .parse()
        .unwrap();
    assert!(
        list_rv >= highest_acked,
        "list at {list_rv} < acked {highest_acked}"
    );
    let after = api
        .create(&PostParams::default(), &configmap("after-restart", 9, 0))
        .await
        .expect("a write after the restart");
    let after_rv: u64 = after.metadata.resource_version.unwrap().parse().unwrap();
    assert!(after_rv > list_rv);
}

#[test]
fn a_directory_that_is_not_a_kube_sim_store_is_refused_and_left_alone() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("thesis.tex"), "mine").unwrap();
    let kubeconfig = data.path().join("never-written.kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["sim", "serve", "--port", "0", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--data-dir")
        .arg(data.path())
        .stdout(Stdio::null())
        .output()
        .expect("gpufleet runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--data-dir")
            && stderr.contains("thesis.tex")
            && stderr.contains("not a kube-sim data directory"),
        "{stderr}"
    );
    assert!(!kubeconfig.exists());
    assert_eq!(
        std::fs::read_to_string(data.path().join("thesis.tex")).unwrap(),
        "mine"
    );
    // Nothing was added beside the file that was there.
    assert_eq!(std::fs::read_dir(data.path()).unwrap().count(), 1);
}

/// A TFJob with one Worker, as the test's user would write it.
fn one_worker_job(name: &str) -> tfjob::api::TFJobObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {"tfReplicaSpecs": {"Worker": {"template": {
            "spec": {"containers": [{"name": "tensorflow", "image": "tf:1"}]}
        }}}}
    }))
    .expect("a valid TFJob")
}

/// Waits (60 s at most) for `pod` to exist.
async fn pod_appears(pods: &Api<Pod>, pod: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(Some(_)) = pods.get_opt(pod).await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the controller never created {pod}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_controller_carries_on_after_kube_sim_restarts_on_its_data_dir() {
    let data = tempfile::tempdir().unwrap();
    let data_arg = data.path().join("store").to_string_lossy().into_owned();
    let port = free_port();
    let mut first = SimServer::start_on_port(port, &["--data-dir", &data_arg]);
    let kubeconfig = std::fs::read_to_string(&first.kubeconfig).unwrap();
    let client = client_for(&first.kubeconfig).await;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &tfjob::api::crd())
        .await
        .unwrap();
    let node: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "node-1"}})).unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    // A ServiceAccount token issued before the restart.
    let accounts: Api<ServiceAccount> = Api::default_namespaced(client.clone());
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "trainer"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let issued = accounts
        .create_token_request("trainer", &PostParams::default(), &Default::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .token;

    // The operator, a separate process with the kubeconfig file.
    let metrics_port = free_port();
    let _operator = KilledOnDrop {
        name: "gpufleet tfjob",
        child: Command::new(env!("CARGO_BIN_EXE_gpufleet"))
            .args(["tfjob", "--kubeconfig"])
            .arg(&first.kubeconfig)
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    };
    poll_http(metrics_port, "/readyz", |status, _| status == 200).await;
    let jobs: Api<tfjob::api::TFJobObject> = Api::default_namespaced(client.clone());
    jobs.create(&PostParams::default(), &one_worker_job("before"))
        .await
        .unwrap();
    pod_appears(&Api::default_namespaced(client.clone()), "before-worker-0").await;

    // kill -9, and the same command again on the same port and directory.
    first.child.kill().expect("kill -9");
    first.child.wait().expect("the server is gone");
    let second = SimServer::start_on_port(port, &["--data-dir", &data_arg]);
    assert_eq!(
        std::fs::read_to_string(&second.kubeconfig).unwrap(),
        kubeconfig,
        "the restarted server's kubeconfig (URL, CA, admin token) is the first one's"
    );
    // The old kubeconfig's client works: same CA, same admin token.
    let client = client_for(&first.kubeconfig).await;
    let review: TokenReview = serde_json::from_value(serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": issued},
    }))
    .unwrap();
    let reviewed = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(reviewed.authenticated, Some(true), "{reviewed:?}");
    assert_eq!(
        reviewed.user.and_then(|u| u.username).as_deref(),
        Some("system:serviceaccount:default:trainer")
    );
    // The operator, never restarted, acts on a job made after the restart.
    let jobs: Api<tfjob::api::TFJobObject> = Api::default_namespaced(client.clone());
    jobs.create(&PostParams::default(), &one_worker_job("after"))
        .await
        .unwrap();
    pod_appears(&Api::default_namespaced(client.clone()), "after-worker-0").await;
    drop(second);
}
