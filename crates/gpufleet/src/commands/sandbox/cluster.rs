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
pub async fn start(port: u16, nodes: usize) -> anyhow::Result<kube_sim::KubeSim> {
    let renew = lease_renew_interval(nodes);
    kube_sim::KubeSim::builder()
        .port(port)
        .tls()
        .require_token()
        .kubelet(kube_sim::KubeletConfig {
            // Pods start and stop quickly so a demo job finishes in seconds.
            stop_delay: Duration::from_millis(100),
            lease_renew_interval: renew,
            // The kubelet's ratio: a lease lasts four renewal periods.
            lease_duration_seconds: i32::try_from(renew.as_secs().saturating_mul(4))
                .unwrap_or(i32::MAX),
            ..Default::default()
        })
        .start()
        .await
        .context("starting kube-sim")
}

/// Node Lease writes per second an idle sandbox may cost, whatever its
/// size.
const IDLE_LEASE_WRITES_PER_SECOND: usize = 100;

/// How often the simulated kubelet renews each Node's Lease: every 10 s as
/// the kubelet does, and less often for large fleets, so 10,000 idle Nodes
/// cost 100 Lease writes a second instead of 1,000 (nothing in the sandbox
/// reads a Lease's age).
pub fn lease_renew_interval(nodes: usize) -> Duration {
    Duration::from_secs(
        10u64.max(u64::try_from(nodes.div_ceil(IDLE_LEASE_WRITES_PER_SECOND)).unwrap_or(u64::MAX)),
    )
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
