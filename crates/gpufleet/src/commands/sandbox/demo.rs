//! The scripted demo (`--exit-after-demo`, and the end-to-end test): five
//! steps, each acting through the API as a user would and then checking
//! what the controllers did, from the API (watch caches) and, with
//! `--postgres`, from the database. Every check prints what it saw.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use gpuid::collect::node_state::{NodeKeys, StoredState};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use mokka::api::{
    DeviceState, PolicyTargetRef, RuntimeState, SGPURuntimePolicy, SGPURuntimePolicySpec,
    TargetGroup, TargetKind,
};
use tfjob::api::object::TFJobObject;

use super::fleet;
use super::nvidia_smi;
use crate::fleet_view::state::{FleetState, current_assignment, is_assigned, owned_by_tfjob};

/// What the demo works with.
pub struct Context {
    pub client: kube::Client,
    /// A client over the loopback listener, for exec.
    pub exec_client: kube::Client,
    pub state: FleetState,
    pub keys: NodeKeys,
    pub postgres: Option<String>,
    pub postgres_table: String,
    pub cluster: String,
}

/// How long one check may take to come true.
const CHECK_TIMEOUT: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(250);

pub const TFJOB_NAME: &str = "demo-mnist";
pub const POLICY_NAME: &str = "demo-fail-one-gpu";

/// Runs every step; true when every check held.
pub async fn run(context: &Context) -> bool {
    let steps: [(&str, StepFuture<'_>); 5] = [
        (
            "racks render; every Node is bound and projected",
            Box::pin(racks_and_projection(context)),
        ),
        (
            "gpuid exports one record per GPU, equal to Mokka's rendering, and labels the Nodes",
            Box::pin(inventory_equals_rendering(context)),
        ),
        (
            "a TFJob (chief + 2 PS + 4 workers on nvidia.com/gpu) is scheduled on GPU Nodes, runs and succeeds",
            Box::pin(tfjob_succeeds(context)),
        ),
        (
            "a runtime policy fails one GPU; nvidia-smi reports it lost and gpuid reports the change",
            Box::pin(policy_fails_a_gpu(context)),
        ),
        (
            "a Node is deleted; Mokka releases its slot and binds a replacement Node to it",
            Box::pin(node_replaced(context)),
        ),
    ];
    let total = steps.len();
    let mut passed = 0;
    for (number, (title, step)) in steps.into_iter().enumerate() {
        eprintln!("demo [{}/{total}] {title}", number + 1);
        let started = Instant::now();
        match step.await {
            Ok(checks) => {
                for check in checks {
                    eprintln!("  ok  {check}");
                }
                eprintln!("  passed in {:.1} s", started.elapsed().as_secs_f64());
                passed += 1;
            }
            Err(failure) => {
                eprintln!("  FAILED {failure}");
                // Later steps build on earlier ones.
                break;
            }
        }
    }
    let all = passed == total;
    eprintln!(
        "demo: {passed}/{total} steps passed{}",
        if all { "" } else { " — FAILED" }
    );
    all
}

type StepFuture<'a> = std::pin::Pin<Box<dyn Future<Output = Result<Vec<String>, String>> + 'a>>;

/// Polls `probe` until it answers Ok or the timeout passes (then its
/// last complaint, prefixed with `what`, is the failure).
async fn eventually<T>(
    what: &str,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    eventually_async(|| std::future::ready(probe()))
        .await
        .map_err(|complaint| format!("{what}: {complaint}"))
}

fn labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

fn annotations(node: &Node) -> BTreeMap<String, String> {
    node.metadata.annotations.clone().unwrap_or_default()
}

/// Node name → (rack, slot index) of every bound slot.
fn bindings(state: &FleetState) -> BTreeMap<String, Vec<(String, i32, String)>> {
    let mut by_node: BTreeMap<String, Vec<(String, i32, String)>> = BTreeMap::new();
    for rack in state.racks.state() {
        let rack_name = rack.metadata.name.clone().unwrap_or_default();
        for slot in &rack.spec.nodes {
            if let Some(node_ref) = &slot.node_ref {
                by_node.entry(node_ref.name.clone()).or_default().push((
                    rack_name.clone(),
                    slot.index,
                    mokka::plan::projection::clique_value(
                        &rack.spec.identity.fabric_uuid,
                        rack.spec.identity.clique_id,
                    ),
                ));
            }
        }
    }
    by_node
}

async fn racks_and_projection(context: &Context) -> Result<Vec<String>, String> {
    let state = &context.state;
    let nodes = state.nodes.len();
    let expected_racks = usize::try_from(fleet::racks_for(nodes)).unwrap_or(usize::MAX);
    let checks = eventually("every Node bound once and projected", || {
        let racks = state.racks.state();
        if racks.len() != expected_racks {
            return Err(format!("{} racks, expected {expected_racks}", racks.len()));
        }
        let by_node = bindings(state);
        let mut projected = 0;
        for node in state.nodes.state() {
            let name = node.metadata.name.clone().unwrap_or_default();
            let slots = by_node.get(&name).map_or(&[][..], Vec::as_slice);
            let [(_, _, clique)] = slots else {
                return Err(format!("Node {name} is bound to {} slots, expected 1", slots.len()));
            };
            let labels = labels(&node);
            let assigned = labels.get(mokka::api::LABEL_SGPU_ASSIGNED).map(String::as_str);
            let node_clique = labels.get(mokka::api::LABEL_GPU_CLIQUE);
            if assigned != Some("true") || node_clique != Some(clique) {
                return Err(format!(
                    "Node {name}: assigned={assigned:?}, clique={node_clique:?}, expected true and {clique}"
                ));
            }
            if !annotations(&node).contains_key(mokka::api::ANNOTATION_SGPU_ASSIGNMENT) {
                return Err(format!("Node {name} has no {} annotation", mokka::api::ANNOTATION_SGPU_ASSIGNMENT));
            }
            projected += 1;
        }
        Ok(vec![
            format!("{} SGPURacks of {} Nodes x {} GPUs rendered from SGPUInventory {}", racks.len(), fleet::NODES_PER_RACK, fleet::GPUS_PER_NODE, fleet::INVENTORY_NAME),
            format!("{projected}/{nodes} Nodes bound to exactly one rack slot"),
            format!("{projected}/{nodes} Nodes carry {}=true, the rack's {} label and the assignment annotation", mokka::api::LABEL_SGPU_ASSIGNED, mokka::api::LABEL_GPU_CLIQUE),
        ])
    })
    .await?;
    Ok(checks)
}

/// The identity of one GPU, as Mokka rendered it and as gpuid exported it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct GpuIdentity {
    uuid: String,
    serial: String,
    chassis_serial: String,
    module_id: u32,
    clique_id: u32,
    cluster_uuid: String,
    pci_bus_id: String,
}

fn rendered_identities(state: &FleetState, node: &str) -> Result<Vec<GpuIdentity>, String> {
    let (assignment, _) =
        current_assignment(state, node)?.ok_or_else(|| format!("Node {node} has no assignment"))?;
    let mut gpus: Vec<GpuIdentity> = assignment
        .gpus
        .iter()
        .map(|gpu| GpuIdentity {
            uuid: gpu.uuid.clone(),
            serial: gpu.serial.clone(),
            chassis_serial: nvidia_smi::chassis_serial(&assignment.fabric_uuid),
            module_id: u32::try_from(nvidia_smi::module_id(gpu.index)).unwrap_or(0),
            clique_id: u32::try_from(assignment.clique_id).unwrap_or(0),
            cluster_uuid: assignment.fabric_uuid.clone(),
            pci_bus_id: nvidia_smi::smi_bus_id(&gpu.pci_address),
        })
        .collect();
    gpus.sort();
    Ok(gpus)
}

fn exported_records(context: &Context, node: &Node) -> StoredState {
    StoredState::from_annotations(&context.keys, &annotations(node))
}

fn exported_identities(stored: &StoredState) -> Vec<GpuIdentity> {
    let mut gpus: Vec<GpuIdentity> = stored
        .records
        .iter()
        .map(|record| {
            let gpu = &record.gpu;
            GpuIdentity {
                uuid: gpu.uuid.clone().unwrap_or_default(),
                serial: gpu.serial.clone().unwrap_or_default(),
                chassis_serial: gpu.chassis_serial.clone().unwrap_or_default(),
                module_id: gpu.module_id.unwrap_or(0),
                clique_id: gpu.fabric_clique_id.unwrap_or(u32::MAX),
                cluster_uuid: gpu.fabric_cluster_uuid.clone().unwrap_or_default(),
                pci_bus_id: gpu.pci_bus_id.clone().unwrap_or_default(),
            }
        })
        .collect();
    gpus.sort();
    gpus
}

async fn inventory_equals_rendering(context: &Context) -> Result<Vec<String>, String> {
    let state = &context.state;
    let gpu_count_label = format!("{}/gpu-count", context.keys_prefix());
    let (nodes, gpus) = eventually("gpuid's inventory equals Mokka's rendering", || {
        let mut gpus = 0;
        let nodes = state.nodes.state();
        for node in &nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let rendered = rendered_identities(state, &name)?;
            let exported = exported_identities(&exported_records(context, node));
            if rendered != exported {
                return Err(format!(
                    "Node {name}: gpuid exported {exported:?}, Mokka rendered {rendered:?}"
                ));
            }
            let count = labels(node).get(&gpu_count_label).cloned();
            if count.as_deref() != Some(&rendered.len().to_string()) {
                return Err(format!("Node {name}: {gpu_count_label}={count:?}"));
            }
            gpus += rendered.len();
        }
        Ok((nodes.len(), gpus))
    })
    .await?;
    let mut checks = vec![
        format!(
            "{gpus} GPUs on {nodes} Nodes: UUID, serial, chassis serial, module id, clique id, fabric UUID and PCI bus id exported exactly as Mokka rendered them"
        ),
        format!("every Node labelled {gpu_count_label} and module serials by gpuid"),
    ];
    match &context.postgres {
        Some(url) => {
            let rows = postgres_inventory(context, url).await?;
            let mut missing = 0;
            for node in state.nodes.state() {
                let name = node.metadata.name.clone().unwrap_or_default();
                for gpu in rendered_identities(state, &name)? {
                    if rows.get(&gpu.uuid) != Some(&(gpu.serial.clone(), name.clone())) {
                        missing += 1;
                    }
                }
            }
            if missing > 0 || rows.len() < gpus {
                return Err(format!(
                    "PostgreSQL has {} rows for cluster {}; {missing} rendered GPUs missing or wrong",
                    rows.len(),
                    context.cluster
                ));
            }
            checks.push(format!(
                "PostgreSQL {}_inventory holds one row per GPU ({gpus}) with its serial and Node",
                context.postgres_table
            ));
        }
        None => checks.push(format!(
            "{gpus} records written to stdout as NDJSON (kind \"gpu\"); the exported inventory is kept on each Node in {}",
            context.keys.state_annotation("inventory")
        )),
    }
    Ok(checks)
}

impl Context {
    fn keys_prefix(&self) -> String {
        // `<prefix>/<exporter>.inventory` → `<prefix>`.
        let annotation = self.keys.state_annotation("inventory");
        annotation
            .split_once('/')
            .map_or(annotation.clone(), |(prefix, _)| prefix.to_string())
    }
}

async fn postgres_client(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("connecting to PostgreSQL (--postgres): {e}"))?;
    tokio::spawn(connection);
    Ok(client)
}

/// UUID → (serial, node) of the cluster's rows.
async fn postgres_inventory(
    context: &Context,
    url: &str,
) -> Result<BTreeMap<String, (String, String)>, String> {
    let client = postgres_client(url).await?;
    let table = format!("\"{}_inventory\"", context.postgres_table.replace('"', ""));
    let rows = client
        .query(
            &format!("SELECT gpu_uuid, serial, node_name FROM {table} WHERE cluster = $1"),
            &[&context.cluster],
        )
        .await
        .map_err(|e| format!("reading {table}: {e}"))?;
    Ok(rows
        .iter()
        .map(|row| {
            let uuid: Option<String> = row.get(0);
            let serial: Option<String> = row.get(1);
            let node: String = row.get(2);
            (uuid.unwrap_or_default(), (serial.unwrap_or_default(), node))
        })
        .collect())
}

fn demo_tfjob() -> Result<TFJobObject, String> {
    let replica = |replicas: i32, run_seconds: Option<&str>| {
        let mut annotations = serde_json::Map::new();
        if let Some(seconds) = run_seconds {
            annotations.insert(kube_sim::kubelet::RUN_SECONDS.into(), seconds.into());
            annotations.insert(kube_sim::kubelet::EXIT_CODE.into(), "0".into());
        }
        serde_json::json!({
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"annotations": annotations},
                "spec": {"containers": [{
                    "name": "tensorflow",
                    "image": "tensorflow/tensorflow:2.17.0-gpu",
                    "command": ["python", "/opt/mnist.py"],
                    "resources": {"limits": {fleet::GPU_RESOURCE: "1"}},
                }]},
            },
        })
    };
    let value = serde_json::json!({
        "apiVersion": tfjob::api::API_VERSION,
        "kind": tfjob::api::KIND,
        "metadata": {"name": TFJOB_NAME, "namespace": "default"},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "None"},
            "tfReplicaSpecs": {
                // PS run until the job ends, as parameter servers do.
                "Chief": replica(1, Some("4")),
                "PS": replica(2, None),
                "Worker": replica(4, Some("3")),
            },
        },
    });
    serde_json::from_value(value).map_err(|e| format!("building the demo TFJob: {e}"))
}

fn job_condition(job: &TFJobObject, kind: &str) -> bool {
    job.status
        .get("conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|conditions| {
            conditions.iter().any(|condition| {
                condition.get("type").and_then(|t| t.as_str()) == Some(kind)
                    && condition.get("status").and_then(|s| s.as_str()) == Some("True")
            })
        })
}

fn job_pods(state: &FleetState) -> Vec<std::sync::Arc<Pod>> {
    state
        .pods
        .state()
        .into_iter()
        .filter(|pod| owned_by_tfjob(pod, TFJOB_NAME))
        .collect()
}

async fn tfjob_succeeds(context: &Context) -> Result<Vec<String>, String> {
    let state = &context.state;
    let api: Api<TFJobObject> = Api::namespaced(context.client.clone(), "default");
    api.create(&PostParams::default(), &demo_tfjob()?)
        .await
        .map_err(|e| format!("creating TFJob {TFJOB_NAME}: {e}"))?;
    let placement = eventually(
        "all 7 pods scheduled on assigned GPU Nodes and the job Running",
        || {
            let job = state
                .tfjobs
                .get_namespaced("default", TFJOB_NAME)
                .ok_or("the TFJob is not in the cache yet")?;
            let pods = job_pods(state);
            if pods.len() != 7 {
                return Err(format!("{} pods, expected 7", pods.len()));
            }
            let mut placement = BTreeMap::new();
            for pod in &pods {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.node_name.clone())
                    .ok_or(format!("pod {name} is not scheduled"))?;
                let on_gpu_node = state
                    .nodes
                    .get(&node)
                    .is_some_and(|node| is_assigned(&node));
                if !on_gpu_node {
                    return Err(format!(
                        "pod {name} runs on {node}, which is not an assigned GPU Node"
                    ));
                }
                placement.insert(name, node);
            }
            if !job_condition(&job, "Running") && !job_condition(&job, "Succeeded") {
                return Err("the job is not Running".into());
            }
            Ok(placement)
        },
    )
    .await?;
    eventually("the TFJob Succeeded", || {
        let job = state
            .tfjobs
            .get_namespaced("default", TFJOB_NAME)
            .ok_or("the TFJob is gone")?;
        job_condition(&job, "Succeeded")
            .then_some(())
            .ok_or("not Succeeded yet".to_string())
    })
    .await?;
    let nodes: BTreeSet<&String> = placement.values().collect();
    let listing: Vec<String> = placement
        .iter()
        .map(|(pod, node)| format!("{pod}@{node}"))
        .collect();
    Ok(vec![
        format!(
            "7 pods, each with a limit of 1 {}, scheduled on {} assigned GPU Nodes: {}",
            fleet::GPU_RESOURCE,
            nodes.len(),
            listing.join(", ")
        ),
        format!("TFJob {TFJOB_NAME} was Running, then Succeeded after its chief exited 0"),
    ])
}

/// The Node in rack `rack_index`, slot `slot`, and the slot's GPU UUIDs.
fn node_in_slot(
    state: &FleetState,
    rack_index: i32,
    slot: i32,
) -> Result<(String, Vec<String>), String> {
    let racks = state.racks.state();
    let rack = racks
        .iter()
        .find(|rack| rack.spec.identity.rack_index == rack_index)
        .ok_or(format!("no rack with index {rack_index}"))?;
    let slot = rack
        .spec
        .node_by_index(slot)
        .ok_or(format!("rack {rack_index} has no slot {slot}"))?;
    let node = slot.node_ref.as_ref().ok_or(format!(
        "slot {} of rack {rack_index} is not bound",
        slot.index
    ))?;
    Ok((
        node.name.clone(),
        slot.gpus.iter().map(|g| g.uuid.clone()).collect(),
    ))
}

async fn policy_fails_a_gpu(context: &Context) -> Result<Vec<String>, String> {
    let state = &context.state;
    let (node, uuids) = node_in_slot(state, 0, 0)?;
    let failed_uuid = uuids
        .get(1)
        .cloned()
        .ok_or("the slot has fewer than 2 GPUs")?;
    let policy = SGPURuntimePolicy::new(
        POLICY_NAME,
        SGPURuntimePolicySpec {
            target_ref: PolicyTargetRef {
                group: TargetGroup::Mokka,
                kind: TargetKind::SgpuInventory,
                name: fleet::INVENTORY_NAME.to_string(),
                rack_groups: Some(vec![fleet::RACK_GROUP.to_string()]),
                rack_indexes: Some(vec![0]),
                node_indexes: Some(vec![0]),
                gpu_indexes: Some(vec![1]),
            },
            runtime: Some(RuntimeState {
                device_state: Some(DeviceState::Failed),
                ..Default::default()
            }),
        },
    );
    Api::<SGPURuntimePolicy>::all(context.client.clone())
        .create(&PostParams::default(), &policy)
        .await
        .map_err(|e| format!("creating SGPURuntimePolicy {POLICY_NAME}: {e}"))?;
    let pod = super::device_plugin::pod_name(&node);
    eventually_async(|| nvidia_smi_reports_lost(context, &pod, &failed_uuid)).await?;
    eventually("gpuid exports the lost GPU", || {
        let node_object = state.nodes.get(&node).ok_or("Node gone")?;
        let stored = exported_records(context, &node_object);
        let record = stored
            .records
            .iter()
            .find(|record| record.gpu.uuid.as_deref() == Some(failed_uuid.as_str()))
            .ok_or("GPU not in gpuid's inventory")?;
        record
            .gpu
            .fb_memory_total_mib
            .is_none()
            .then_some(())
            .ok_or("gpuid still reads its memory".to_string())
    })
    .await?;
    let mut checks = vec![
        format!(
            "policy {POLICY_NAME} sets deviceState Failed on rack 0, Node slot 0, GPU 1 = {failed_uuid} on {node}"
        ),
        format!(
            "{node}'s nvidia-smi -q -x reports that GPU lost (\"{}\" for memory, temperature, power); its UUID and serial remain",
            nvidia_smi::LOST
        ),
        format!(
            "gpuid re-collected {node} and its exported record of {failed_uuid} has no framebuffer memory"
        ),
    ];
    if let Some(url) = &context.postgres {
        let client = postgres_client(url).await?;
        let table = format!("\"{}_events\"", context.postgres_table.replace('"', ""));
        let found = eventually_async(|| async {
            let rows = client
                .query(
                    &format!("SELECT kind, changed_fields FROM {table} WHERE cluster = $1 AND gpu_key = $2 AND kind = 'gpu_changed'"),
                    &[&context.cluster, &failed_uuid],
                )
                .await
                .map_err(|e| format!("reading {table}: {e}"))?;
            let fields: Vec<Vec<String>> = rows.iter().map(|row| row.get(1)).collect();
            fields
                .into_iter()
                .find(|fields| fields.iter().any(|f| f == "fb_memory_total_mib"))
                .ok_or("no gpu_changed event yet".to_string())
        })
        .await?;
        checks.push(format!(
            "PostgreSQL {}_events has a gpu_changed event for it (changed: {})",
            context.postgres_table,
            found.join(", ")
        ));
    } else {
        checks.push(format!(
            "stdout export: the gpu_changed event for {failed_uuid} is printed as an NDJSON line (not read back here; the end-to-end test reads it)"
        ));
    }
    let note = eventually_async(|| node_event_note(context, &node, "1 changed")).await?;
    checks.push(format!("Kubernetes Event on Node {node}: {note}"));
    Ok(checks)
}

/// The message of an Event gpuid wrote on `node` that contains `text`.
async fn node_event_note(context: &Context, node: &str, text: &str) -> Result<String, String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(context.client.clone());
    let selector = format!("involvedObject.kind=Node,involvedObject.name={node}");
    let list = events
        .list(&kube::api::ListParams::default().fields(&selector))
        .await
        .map_err(|e| format!("listing the Events of Node {node}: {e}"))?;
    list.items
        .iter()
        .rev()
        .filter_map(|event| event.message.clone())
        .find(|message| message.starts_with("GPU inventory changed") && message.contains(text))
        .ok_or(format!("no Event on Node {node} says {text:?}"))
}

/// Runs `nvidia-smi -q -x` in the device-plugin pod through the API's
/// exec, as gpuid does, and checks that the GPU reads as lost.
async fn nvidia_smi_reports_lost(context: &Context, pod: &str, uuid: &str) -> Result<(), String> {
    use tokio::io::AsyncReadExt;
    let pods: Api<Pod> =
        Api::namespaced(context.exec_client.clone(), fleet::DEVICE_PLUGIN_NAMESPACE);
    let params = kube::api::AttachParams::default()
        .container(super::device_plugin::CONTAINER)
        .stdout(true)
        .stderr(false);
    let mut process = pods
        .exec(pod, ["nvidia-smi", "-q", "-x"], &params)
        .await
        .map_err(|e| format!("exec in {pod}: {e}"))?;
    let mut output = Vec::new();
    if let Some(mut stdout) = process.stdout() {
        stdout
            .read_to_end(&mut output)
            .await
            .map_err(|e| format!("reading nvidia-smi's output: {e}"))?;
    }
    let _ = process.join().await;
    let report = gpuid::smi::parse(&output).map_err(|e| format!("nvidia-smi output: {e}"))?;
    let gpu = report
        .gpus
        .iter()
        .find(|gpu| gpu.uuid.as_deref() == Some(uuid))
        .ok_or(format!("nvidia-smi lists no GPU {uuid}"))?;
    let text = String::from_utf8_lossy(&output);
    let lost = gpu.fb_memory_total_mib.is_none() && text.contains(nvidia_smi::LOST);
    lost.then_some(())
        .ok_or("nvidia-smi still reports the GPU healthy".to_string())
}

async fn eventually_async<T, F, Fut>(mut probe: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + CHECK_TIMEOUT;
    loop {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(complaint) if Instant::now() >= deadline => {
                return Err(format!(
                    "not within {} s: {complaint}",
                    CHECK_TIMEOUT.as_secs()
                ));
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

async fn node_replaced(context: &Context) -> Result<Vec<String>, String> {
    let state = &context.state;
    let rack_index = fleet::racks_for(state.nodes.len()) - 1;
    let (old, uuids) = node_in_slot(state, rack_index, 3)?;
    let nodes: Api<Node> = Api::all(context.client.clone());
    nodes
        .delete(&old, &DeleteParams::default())
        .await
        .map_err(|e| format!("deleting Node {old}: {e}"))?;
    eventually("Mokka releases the slot", || {
        match node_in_slot(state, rack_index, 3) {
            Ok((bound, _)) if bound == old => Err(format!("slot still bound to {old}")),
            _ => Ok(()),
        }
    })
    .await?;
    let replacement = "gpu-node-replacement-0";
    nodes
        .create(&PostParams::default(), &fleet::gpu_node(replacement))
        .await
        .map_err(|e| format!("creating Node {replacement}: {e}"))?;
    eventually("the replacement is bound to the freed slot", || {
        let (bound, _) = node_in_slot(state, rack_index, 3)?;
        (bound == replacement)
            .then_some(())
            .ok_or(format!("slot bound to {bound}"))
    })
    .await?;
    eventually(
        "gpuid inventories the slot's GPUs on the replacement",
        || {
            let node = state
                .nodes
                .get(replacement)
                .ok_or("replacement not cached")?;
            let mut exported: Vec<String> = exported_records(context, &node)
                .records
                .iter()
                .filter_map(|record| record.gpu.uuid.clone())
                .collect();
            exported.sort();
            let mut expected = uuids.clone();
            expected.sort();
            (exported == expected)
                .then_some(())
                .ok_or(format!("gpuid has {exported:?}"))
        },
    )
    .await?;
    Ok(vec![
        format!("deleted Node {old}; Mokka released rack {rack_index} slot 3"),
        format!("new Node {replacement} bound to that slot and projected"),
        format!(
            "its device plugin reports the slot's {} GPUs and gpuid exported them under the new Node",
            uuids.len()
        ),
    ])
}
