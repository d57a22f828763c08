//! The sandbox's cluster: kube-sim on loopback with its simulated kubelet
//! and scheduler, the CRDs gpufleet owns, and a kubeconfig for kubectl.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;

/// Starts kube-sim on `127.0.0.1:port` (0: any free port) with the kubelet
/// on, secured as `gpufleet sim serve` is by default: HTTPS with a generated
/// CA and a random admin token, both in the kubeconfig the sandbox writes
/// for its user (kubectl sends a token only over HTTPS). The sandbox's own
/// controllers use the in-process client or `http_client()`, which carry them.
pub async fn start(port: u16) -> anyhow::Result<kube_sim::KubeSim> {
    kube_sim::KubeSim::builder()
        .port(port)
        .tls()
        .require_token()
        .kubelet(kube_sim::KubeletConfig {
            // Pods start and stop quickly so a demo job finishes in seconds.
            stop_delay: Duration::from_millis(100),
            ..Default::default()
        })
        .start()
        .await
        .context("starting kube-sim")
}

/// Mokka's four CRDs and the TFJob CRD, as `gpufleet crds` prints them.
pub async fn install_crds(client: &kube::Client) -> anyhow::Result<usize> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let crds: Vec<CustomResourceDefinition> = mokka::crds()
        .into_iter()
        .chain(std::iter::once(tfjob::api::crd()))
        .collect();
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), crd)
            .await
            .with_context(|| format!("installing CRD {name}"))?;
    }
    Ok(crds.len())
}
