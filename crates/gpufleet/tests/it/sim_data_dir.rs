//! `gpufleet sim serve --data-dir`: what a client saw acknowledged is there
//! after a `kill -9` and a restart, and a directory that is not a kube-sim
//! store is refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::support::SimServer;

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
