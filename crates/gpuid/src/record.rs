//! The exported record: one per GPU, keyed by UUID, carrying where it was
//! seen (cluster, node, machine) and when.
//!
//! Upstream exported one row per distinct board serial, which collapses the
//! two GPUs of a GB200/GB300 module into one row and drops UUID, PCI id and
//! location. Here every GPU is its own record with every identity field the
//! parser found; serials are attributes, never keys.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::smi::{SmiGpu, SmiReport};

/// Version of the record layout; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// The Kubernetes Node a device-plugin pod runs on, as the collector read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub name: String,
    pub uid: String,
    /// `spec.providerID`; absent on bare metal without a cloud provider.
    pub provider_id: Option<String>,
    /// `status.nodeInfo.systemUUID`.
    pub system_uuid: Option<String>,
}

/// Where the machine id came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MachineIdSource {
    ProviderId,
    SystemUuid,
}

/// The identity of the machine (VM or bare-metal host) behind a Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineId {
    pub value: String,
    pub source: MachineIdSource,
}

/// Why a providerID yields no machine id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderIdError {
    #[error("node providerID is empty")]
    Empty,
    #[error("node providerID {0:?} is not of the form <provider>://<path>")]
    NoProvider(String),
    #[error("node providerID {0:?} ends without an instance identifier")]
    NoInstance(String),
}

/// Upstream's rule: the last `/`-separated segment after `<provider>://`
/// (`aws:///us-west-2a/i-0abc` → `i-0abc`, `gce://proj/zone/name` → `name`,
/// `kind://docker/c/worker` → `worker`).
///
/// One deliberate difference: an Azure scale-set id ends in the instance
/// number alone (`…/virtualMachineScaleSets/pool/virtualMachines/3`), which
/// is the same in every scale set, so the scale-set name is kept with it
/// (`pool_3`).
pub fn machine_id_from_provider_id(provider_id: &str) -> Result<String, ProviderIdError> {
    let provider_id = provider_id.trim();
    if provider_id.is_empty() {
        return Err(ProviderIdError::Empty);
    }
    let Some((provider, _)) = provider_id.split_once(':') else {
        return Err(ProviderIdError::NoProvider(provider_id.to_owned()));
    };
    let prefix_len = provider.len() + "://".len();
    let has_prefix = provider_id
        .get(provider.len()..prefix_len)
        .is_some_and(|separator| separator == "://");
    if provider.is_empty() || !has_prefix {
        return Err(ProviderIdError::NoProvider(provider_id.to_owned()));
    }
    let path = &provider_id[prefix_len..];
    let segments: Vec<&str> = path.split('/').collect();
    let last = segments.last().copied().unwrap_or_default();
    if last.is_empty() {
        return Err(ProviderIdError::NoInstance(provider_id.to_owned()));
    }
    if provider.eq_ignore_ascii_case("azure")
        && let [.., kind, scale_set, instances, instance] = segments.as_slice()
        && kind.eq_ignore_ascii_case("virtualMachineScaleSets")
        && instances.eq_ignore_ascii_case("virtualMachines")
        && !scale_set.is_empty()
    {
        return Ok(format!("{scale_set}_{instance}"));
    }
    Ok(last.to_owned())
}

/// Why a record could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("cluster name is required")]
    NoCluster,
    #[error("node name is required")]
    NoNodeName,
    #[error("source name is required")]
    NoSource,
    #[error(
        "node {node}: cannot identify its machine ({provider_id}) and it has no status.nodeInfo.systemUUID to fall back on"
    )]
    NoMachineId {
        node: String,
        provider_id: ProviderIdError,
    },
}

/// The machine behind `node`: from the providerID, or, when there is none
/// or it cannot be parsed, from the systemUUID (upstream retried forever).
pub fn machine_id(node: &NodeIdentity) -> Result<MachineId, RecordError> {
    let from_provider = machine_id_from_provider_id(node.provider_id.as_deref().unwrap_or(""));
    match from_provider {
        Ok(value) => Ok(MachineId {
            value,
            source: MachineIdSource::ProviderId,
        }),
        Err(provider_error) => match node.system_uuid.as_deref().map(str::trim) {
            Some(uuid) if !uuid.is_empty() => Ok(MachineId {
                value: uuid.to_ascii_lowercase(),
                source: MachineIdSource::SystemUuid,
            }),
            _ => Err(RecordError::NoMachineId {
                node: node.name.clone(),
                provider_id: provider_error,
            }),
        },
    }
}

/// Everything about one collection that is not in the nvidia-smi output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation<'a> {
    pub cluster: &'a str,
    pub node: &'a NodeIdentity,
    /// `<namespace>/<name>` of the device-plugin pod that ran nvidia-smi.
    pub source_pod: &'a str,
    /// When the collector ran nvidia-smi (passed in; nothing here reads a clock).
    pub observed_at: Timestamp,
    pub collector_version: &'a str,
}

/// One GPU as exported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuRecord {
    pub schema_version: u32,
    pub cluster: String,
    pub node_name: String,
    pub node_uid: String,
    pub provider_id: Option<String>,
    pub system_uuid: Option<String>,
    pub machine_id: String,
    pub machine_id_source: MachineIdSource,
    pub source_pod: String,
    pub observed_at: Timestamp,
    pub collector_version: String,
    #[serde(flatten)]
    pub gpu: SmiGpu,
}

impl GpuRecord {
    /// The key a GPU is tracked by across nodes and time: its UUID. A GPU
    /// whose UUID could not be read falls back to its position on this
    /// machine (PCI bus id, else document index), which is stable for a
    /// machine but cannot follow the GPU elsewhere.
    pub fn gpu_key(&self) -> String {
        if let Some(uuid) = &self.gpu.uuid {
            return uuid.clone();
        }
        match &self.gpu.pci_bus_id {
            Some(pci) => format!("{}/pci/{pci}", self.machine_id),
            None => format!("{}/index/{}", self.machine_id, self.gpu.index),
        }
    }
}

/// Records as NDJSON, one per line, in the given order (the stdout
/// exporter's format).
pub fn to_ndjson(records: &[GpuRecord]) -> String {
    crate::ndjson::to_ndjson(records)
}

/// Builds one record per GPU of `report`.
pub fn records_from_report(
    observation: &Observation<'_>,
    report: &SmiReport,
) -> Result<Vec<GpuRecord>, RecordError> {
    let cluster = observation.cluster.trim();
    if cluster.is_empty() {
        return Err(RecordError::NoCluster);
    }
    let node = observation.node;
    if node.name.trim().is_empty() {
        return Err(RecordError::NoNodeName);
    }
    let source_pod = observation.source_pod.trim();
    if source_pod.is_empty() {
        return Err(RecordError::NoSource);
    }
    let machine = machine_id(node)?;
    Ok(report
        .gpus
        .iter()
        .map(|gpu| GpuRecord {
            schema_version: SCHEMA_VERSION,
            cluster: cluster.to_owned(),
            node_name: node.name.clone(),
            node_uid: node.uid.clone(),
            provider_id: node.provider_id.clone().filter(|id| !id.trim().is_empty()),
            system_uuid: node.system_uuid.clone().filter(|id| !id.trim().is_empty()),
            machine_id: machine.value.clone(),
            machine_id_source: machine.source,
            source_pod: source_pod.to_owned(),
            observed_at: observation.observed_at,
            collector_version: observation.collector_version.to_owned(),
            gpu: gpu.clone(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(provider_id: Option<&str>, system_uuid: Option<&str>) -> NodeIdentity {
        NodeIdentity {
            name: "gpu-node-1".into(),
            uid: "6f1c0d3e-0000-4000-8000-000000000001".into(),
            provider_id: provider_id.map(Into::into),
            system_uuid: system_uuid.map(Into::into),
        }
    }

    #[test]
    fn provider_ids_of_every_upstream_example_yield_the_instance_name() {
        for (provider_id, expected) in [
            (
                "aws:///us-west-2a/i-0123456789abcdef0",
                "i-0123456789abcdef0",
            ),
            ("gce://proj/zone/name", "name"),
            (
                "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/vm-name",
                "vm-name",
            ),
            ("kind://docker/gpuid/gpuid-worker", "gpuid-worker"),
        ] {
            assert_eq!(
                machine_id_from_provider_id(provider_id).as_deref(),
                Ok(expected),
                "{provider_id}"
            );
        }
    }

    #[test]
    fn azure_scale_set_instances_keep_the_scale_set_name_so_they_stay_unique() {
        let id = "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/gpu-pool/virtualMachines/3";
        assert_eq!(machine_id_from_provider_id(id).as_deref(), Ok("gpu-pool_3"));
    }

    #[test]
    fn malformed_provider_ids_are_errors() {
        assert_eq!(machine_id_from_provider_id(""), Err(ProviderIdError::Empty));
        assert!(matches!(
            machine_id_from_provider_id("invalid-format"),
            Err(ProviderIdError::NoProvider(_))
        ));
        assert!(matches!(
            machine_id_from_provider_id("aws:/x"),
            Err(ProviderIdError::NoProvider(_))
        ));
        assert!(matches!(
            machine_id_from_provider_id("aws:///zone/"),
            Err(ProviderIdError::NoInstance(_))
        ));
    }

    #[test]
    fn a_node_without_provider_id_is_identified_by_its_system_uuid() {
        let machine =
            machine_id(&node(None, Some("4C4C4544-0042-3510-8052-B4C04F4E3732"))).unwrap();
        assert_eq!(machine.value, "4c4c4544-0042-3510-8052-b4c04f4e3732");
        assert_eq!(machine.source, MachineIdSource::SystemUuid);
    }

    #[test]
    fn an_unparseable_provider_id_also_falls_back_to_the_system_uuid() {
        let machine = machine_id(&node(Some("baremetal"), Some("abc"))).unwrap();
        assert_eq!(
            (machine.value.as_str(), machine.source),
            ("abc", MachineIdSource::SystemUuid)
        );
    }

    #[test]
    fn the_provider_id_wins_over_the_system_uuid_when_both_exist() {
        let machine = machine_id(&node(Some("kind://docker/c/w1"), Some("abc"))).unwrap();
        assert_eq!(
            (machine.value.as_str(), machine.source),
            ("w1", MachineIdSource::ProviderId)
        );
    }

    #[test]
    fn a_node_with_neither_identity_is_an_error_that_names_the_node() {
        let error = machine_id(&node(None, Some(" "))).unwrap_err();
        assert_eq!(
            error.to_string(),
            "node gpu-node-1: cannot identify its machine (node providerID is empty) and it has no status.nodeInfo.systemUUID to fall back on"
        );
    }

    fn report(gpus: Vec<SmiGpu>) -> SmiReport {
        SmiReport {
            timestamp: None,
            driver_version: None,
            cuda_version: None,
            attached_gpus: None,
            dtd: None,
            gpus,
            warnings: Vec::new(),
        }
    }

    fn blank_gpu(index: u32) -> SmiGpu {
        SmiGpu {
            index,
            ..SmiGpu::default()
        }
    }

    #[test]
    fn records_carry_the_observation_context_and_schema_version() {
        let node = node(Some("aws:///az/i-1"), None);
        let mut gpu = blank_gpu(0);
        gpu.uuid = Some("GPU-1".into());
        let observation = Observation {
            cluster: "prod",
            node: &node,
            source_pod: "gpu-operator/nvidia-device-plugin-abc",
            observed_at: "2026-08-21T11:01:42Z".parse().unwrap(),
            collector_version: "0.1.0",
        };
        let records = records_from_report(&observation, &report(vec![gpu])).unwrap();
        assert_eq!(records.len(), 1);
        let record = &records[0];
        assert_eq!(record.schema_version, SCHEMA_VERSION);
        assert_eq!(
            (record.cluster.as_str(), record.node_name.as_str()),
            ("prod", "gpu-node-1")
        );
        assert_eq!(record.machine_id, "i-1");
        assert_eq!(record.source_pod, "gpu-operator/nvidia-device-plugin-abc");
        assert_eq!(record.gpu_key(), "GPU-1");
        let json = serde_json::to_value(record).unwrap();
        assert_eq!(
            json["uuid"], "GPU-1",
            "GPU fields are flattened into the record"
        );
        assert_eq!(json["observed_at"], "2026-08-21T11:01:42Z");
        let back: GpuRecord = serde_json::from_value(json).unwrap();
        assert_eq!(&back, record);
        let line = to_ndjson(&records);
        assert_eq!(line.lines().count(), 1);
        assert_eq!(
            serde_json::from_str::<GpuRecord>(line.trim_end()).unwrap(),
            *record
        );
    }

    #[test]
    fn records_require_cluster_node_and_source_with_upstream_messages() {
        let node_ok = node(Some("kind://d/c/w"), None);
        let mut node_unnamed = node_ok.clone();
        node_unnamed.name = String::new();
        let observation = |cluster, node, source_pod| Observation {
            cluster,
            node,
            source_pod,
            observed_at: Timestamp::UNIX_EPOCH,
            collector_version: "test",
        };
        let empty = report(Vec::new());
        let error = |o: Observation<'_>| records_from_report(&o, &empty).unwrap_err().to_string();
        assert_eq!(
            error(observation("", &node_ok, "ns/p")),
            "cluster name is required"
        );
        assert_eq!(
            error(observation("c", &node_unnamed, "ns/p")),
            "node name is required"
        );
        assert_eq!(
            error(observation("c", &node_ok, " ")),
            "source name is required"
        );
    }

    #[test]
    fn a_gpu_without_uuid_is_keyed_by_its_place_on_the_machine() {
        let node = node(Some("kind://d/c/w"), None);
        let mut with_pci = blank_gpu(1);
        with_pci.pci_bus_id = Some("00000000:0A:00.0".into());
        let records = records_from_report(
            &Observation {
                cluster: "c",
                node: &node,
                source_pod: "ns/p",
                observed_at: Timestamp::UNIX_EPOCH,
                collector_version: "test",
            },
            &report(vec![with_pci, blank_gpu(2)]),
        )
        .unwrap();
        assert_eq!(records[0].gpu_key(), "w/pci/00000000:0A:00.0");
        assert_eq!(records[1].gpu_key(), "w/index/2");
    }
}
