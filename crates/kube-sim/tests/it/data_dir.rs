//! `KubeSim::builder().data_dir(DIR)`: a restarted server holds the same
//! objects, CRDs, uids and resourceVersions, keeps its garbage-collection
//! index, and sends a watch from before the restart a 410 to relist.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube_sim::{DataDirError, Error, KubeSim};

use crate::crd::{Widget, WidgetSpec, install};
use crate::support::configmap;

async fn start(dir: &std::path::Path) -> KubeSim {
    KubeSim::builder()
        .data_dir(dir)
        .start()
        .await
        .expect("kube-sim starts on its data directory")
}

#[tokio::test]
async fn a_restarted_store_keeps_objects_crds_uids_and_resource_versions() {
    let data = tempfile::tempdir().unwrap();
    let sim = start(data.path()).await;
    let client = sim.client();
    install(&client).await;
    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = configmaps
        .create(&PostParams::default(), &configmap("owner", &[("k", "v")]))
        .await
        .unwrap();
    let mut dependent = configmap("dependent", &[]);
    dependent.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    ]);
    configmaps
        .create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    configmaps
        .create(&PostParams::default(), &configmap("removed", &[]))
        .await
        .unwrap();
    configmaps
        .delete("removed", &DeleteParams::default())
        .await
        .unwrap();
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let widget = widgets
        .create(
            &PostParams::default(),
            &Widget::new("w1", WidgetSpec { size: 3 }),
        )
        .await
        .unwrap();
    let rv_before = sim.resource_version();
    drop((client, configmaps, widgets));
    sim.shutdown().await;

    let sim = start(data.path()).await;
    let client = sim.client();
    assert_eq!(sim.resource_version(), rv_before);
    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner_again = configmaps.get("owner").await.unwrap();
    assert_eq!(owner_again.metadata.uid, owner.metadata.uid);
    assert_eq!(
        owner_again.metadata.resource_version,
        owner.metadata.resource_version
    );
    assert_eq!(owner_again.data, owner.data);
    assert!(configmaps.get_opt("removed").await.unwrap().is_none());
    // The CRD is served again and its objects are back.
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let widget_again = widgets.get("w1").await.unwrap();
    assert_eq!(widget_again.spec.size, 3);
    assert_eq!(widget_again.metadata.uid, widget.metadata.uid);
    // The built-in namespaces are the stored ones, not seeded twice.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect();
    assert_eq!(
        names.iter().filter(|name| *name == "default").count(),
        1,
        "{names:?}"
    );

    // A watch from before the restart cannot be resumed: 410, relist.
    let events: Vec<_> = configmaps
        .watch(
            &WatchParams::default().timeout(2),
            &owner.metadata.resource_version.clone().unwrap(),
        )
        .await
        .expect("watch starts")
        .try_collect()
        .await
        .unwrap();
    assert!(
        matches!(events.as_slice(), [WatchEvent::Error(status)] if status.code == 410),
        "{events:?}"
    );
    // A watch from the restart's resourceVersion sees the next change,
    // which continues the numbering.
    let mut stream = configmaps
        .watch(&WatchParams::default().timeout(5), &rv_before.to_string())
        .await
        .unwrap()
        .boxed();
    let created = configmaps
        .create(&PostParams::default(), &configmap("after", &[]))
        .await
        .unwrap();
    let created_rv: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    assert_eq!(created_rv, rv_before + 1);
    match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await {
        Ok(Ok(Some(WatchEvent::Added(cm)))) => {
            assert_eq!(cm.metadata.name.as_deref(), Some("after"))
        }
        other => panic!("expected the ADDED event, got {other:?}"),
    }

    // The owner index came back too: deleting the owner collects its dependent.
    configmaps
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while configmaps.get_opt("dependent").await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dependent was not collected after the restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_second_server_on_a_data_directory_in_use_is_refused() {
    let data = tempfile::tempdir().unwrap();
    let _first = start(data.path()).await;
    let refused = KubeSim::builder().data_dir(data.path()).start().await;
    match refused {
        Err(Error::DataDir(DataDirError::InUse { dir })) => assert_eq!(dir, data.path()),
        Err(other) => panic!("expected InUse, got {other}"),
        Ok(_) => panic!("a second server opened a data directory in use"),
    }
}
