//! The simulated GPU fleet the sandbox seeds: eligible Nodes with
//! `nvidia.com/gpu` capacity, a GB300 NVL72-shaped `SGPURackProfile` and an
//! `SGPUInventory` with enough racks for every Node. Objects are created
//! through the API like a user's `kubectl apply`; the controllers do the rest.

use std::collections::BTreeMap;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Namespace, Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use mokka::api::{
    GpuModel, ProfileNameRef, RackGroup, SGPUInventory, SGPUInventorySpec, SGPURackProfile,
    SGPURackProfileSpec,
};

/// Nodes per rack and GPUs per Node of a GB300 NVL72: 18 compute trays of
/// 4 GPUs behind one NVLink domain of 72 GPUs.
pub const NODES_PER_RACK: i32 = 18;
pub const GPUS_PER_NODE: i32 = 4;

pub const PROFILE_NAME: &str = "gb300-nvl72";
pub const INVENTORY_NAME: &str = "sandbox";
pub const RACK_GROUP: &str = "nvl72";
/// Where the device-plugin pods run (gpuid's default `NAMESPACE`).
pub const DEVICE_PLUGIN_NAMESPACE: &str = "gpu-operator";
/// The extended resource the device plugin advertises.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// `gpu-node-000`, `gpu-node-001`, …: zero-padded so names sort in order.
pub fn node_name(index: usize) -> String {
    format!("gpu-node-{index:03}")
}

/// Racks needed so every one of `nodes` Nodes gets a slot.
pub fn racks_for(nodes: usize) -> i32 {
    let per_rack = NODES_PER_RACK as usize;
    i32::try_from(nodes.div_ceil(per_rack).max(1)).unwrap_or(i32::MAX)
}

/// An eligible Node (Mokka's `mokka.nvidia.com/sgpu-node=true`) whose
/// kubelet reports `nvidia.com/gpu: 4`, as the NVIDIA device plugin would
/// make it. kube-sim's kubelet keeps the capacity its creator set.
pub fn gpu_node(name: &str) -> Node {
    let capacity: BTreeMap<String, Quantity> = [(
        GPU_RESOURCE.to_string(),
        Quantity(GPUS_PER_NODE.to_string()),
    )]
    .into();
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                [
                    (mokka::api::LABEL_SGPU_NODE.to_string(), "true".to_string()),
                    ("kubernetes.io/hostname".to_string(), name.to_string()),
                    ("nvidia.com/gpu.present".to_string(), "true".to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        // gpuid names the machine by the providerID's last segment.
        spec: Some(NodeSpec {
            provider_id: Some(format!("kube-sim://sandbox/{name}")),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(capacity.clone()),
            allocatable: Some(capacity),
            ..Default::default()
        }),
    }
}

/// The GB300 NVL72 profile: the example profile's structure with GB300's
/// model, memory and fifth-generation NVLink.
pub fn gb300_profile() -> SGPURackProfile {
    let mut spec: SGPURackProfileSpec =
        mokka::fixtures::example_profile_spec(NODES_PER_RACK, GPUS_PER_NODE);
    let gpus = &mut spec.node.gpus;
    gpus.model = GpuModel {
        vendor: Some("NVIDIA".into()),
        product: Some("GB300".into()),
        product_name: Some("NVIDIA GB300".into()),
        architecture: Some("Blackwell".into()),
        compute_capability: Some(mokka::api::ComputeCapability {
            major: 10,
            minor: 3,
        }),
        cores: None,
        board: None,
        firmware: None,
    };
    gpus.memory.capacity = Quantity("288Gi".into());
    gpus.pci.device_id = Some("31c2".into());
    if let Some(fabric) = spec
        .node
        .topology
        .as_mut()
        .and_then(|topology| topology.gpu_fabric.as_mut())
    {
        fabric.generation = Some(5);
        fabric.links_per_gpu = Some(18);
        fabric.bandwidth_per_link_mbps = Some(50_000);
        fabric.c2c_supported = Some(true);
    }
    SGPURackProfile::new(PROFILE_NAME, spec)
}

/// One rack group with enough NVL72 racks for `nodes` Nodes.
pub fn inventory(nodes: usize) -> SGPUInventory {
    SGPUInventory::new(
        INVENTORY_NAME,
        SGPUInventorySpec {
            rack_groups: vec![RackGroup {
                id: RACK_GROUP.to_string(),
                count: racks_for(nodes),
                profile_ref: ProfileNameRef {
                    name: PROFILE_NAME.to_string(),
                },
                placement: None,
            }],
        },
    )
}

/// Creates the namespace, the profile, the inventory and the Nodes.
pub async fn seed(client: &kube::Client, nodes: usize) -> anyhow::Result<()> {
    let create = PostParams::default();
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(DEVICE_PLUGIN_NAMESPACE.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&create, &namespace)
        .await
        .with_context(|| format!("creating namespace {DEVICE_PLUGIN_NAMESPACE}"))?;
    Api::<SGPURackProfile>::all(client.clone())
        .create(&create, &gb300_profile())
        .await
        .context("creating the SGPURackProfile")?;
    Api::<SGPUInventory>::all(client.clone())
        .create(&create, &inventory(nodes))
        .await
        .context("creating the SGPUInventory")?;
    let api = Api::<Node>::all(client.clone());
    for index in 0..nodes {
        let name = node_name(index);
        api.create(&create, &gpu_node(&name))
            .await
            .with_context(|| format!("creating Node {name}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_sandbox_fits_mokkas_inventory_limit_in_whole_racks() {
        let most = usize::try_from(crate::cli::sandbox::MAX_NODES).unwrap();
        let slots = |nodes: usize| i64::from(racks_for(nodes) * NODES_PER_RACK);
        assert!(slots(most) <= mokka::limits::MAX_INVENTORY_NODES);
        assert!(slots(most + 1) > mokka::limits::MAX_INVENTORY_NODES);
    }

    #[test]
    fn racks_cover_every_node() {
        assert_eq!(racks_for(72), 4);
        assert_eq!(racks_for(73), 5);
        assert_eq!(racks_for(1), 1);
        assert_eq!(racks_for(0), 1);
    }

    #[test]
    fn the_profile_is_shaped_like_an_nvl72_rack_and_renders() {
        let mut profile = gb300_profile();
        profile.metadata.uid = Some("profile-uid".into());
        profile.metadata.generation = Some(1);
        let resolved = mokka::render::ResolvedProfile::resolve(&profile).unwrap();
        assert_eq!(resolved.nodes_per_rack(), 18);
        assert_eq!(resolved.gpus_per_node(), 4);
        let domain = profile
            .spec
            .node
            .topology
            .as_ref()
            .and_then(|t| t.gpu_fabric.as_ref())
            .and_then(|f| f.domain.as_ref())
            .and_then(|d| d.gpu_count);
        assert_eq!(domain, Some(72));
    }
}
