//! `gpufleet mokka node-view NODE`: what the node-agent API would answer
//! for one Node, for an operator. It runs the controller's caches (no
//! leader work, no writes), waits for them to sync and asks the same
//! function the HTTP API asks ([`node_assignments`]). Table by default,
//! `-o json` prints exactly the API's body.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use mokka::controller::MokkaController;
use mokka::controller::node_api::node_assignments;
use mokka::node_view::{NodeAssignments, validate_node_name};
use mokka::plan::options::Options;
use tokio_util::sync::CancellationToken;

use crate::cli::mokka::{NodeViewArgs, NodeViewFormat};

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {} (--kubeconfig)", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .with_context(|| format!("loading kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster configuration: set KUBECONFIG or pass --kubeconfig")?,
    };
    kube::Client::try_from(config).context("building the Kubernetes client")
}

/// Runs the command; a Node the read API cannot answer for is exit 1 with
/// the reason (as the API's 503 would give it).
pub async fn run(args: &NodeViewArgs) -> anyhow::Result<ExitCode> {
    if let Err(bad) = validate_node_name(&args.node) {
        anyhow::bail!("{bad}");
    }
    let client = client(args.kubeconfig.as_ref()).await?;
    let uid = match &args.uid {
        Some(uid) => uid.clone(),
        None => {
            let nodes: kube::Api<Node> = kube::Api::all(client.clone());
            nodes
                .get_opt(&args.node)
                .await
                .with_context(|| format!("reading Node {:?}", args.node))?
                .and_then(|node| node.metadata.uid)
                .with_context(|| {
                    format!(
                        "Node {:?} does not exist; pass --uid to ask for a Node that is gone",
                        args.node
                    )
                })?
        }
    };
    let controller = Arc::new(MokkaController::new(client, Options::default())?);
    let stop = CancellationToken::new();
    let caches = {
        let controller = Arc::clone(&controller);
        let stop = stop.clone();
        tokio::spawn(async move { controller.run_caches(stop).await })
    };
    let synced = tokio::time::timeout(args.sync_timeout, controller.caches_synced()).await;
    let view = synced
        .map_err(|_| {
            anyhow::anyhow!(
                "the caches did not sync within {:?} (--sync-timeout)",
                args.sync_timeout
            )
        })
        .and_then(|()| {
            node_assignments(&controller.read_api(), &args.node, &uid).map_err(anyhow::Error::from)
        });
    stop.cancel();
    let _ = caches.await;
    let view = view?;
    let text = match args.output {
        NodeViewFormat::Json => {
            serde_json::to_string_pretty(&view).context("encoding the answer")? + "\n"
        }
        NodeViewFormat::Table => table(&view),
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The operator's table: one block per assignment, one row per GPU.
pub fn table(view: &NodeAssignments) -> String {
    let mut out = format!("Node {} (uid {})\n", view.node.name, view.node.uid);
    if view.assignments.is_empty() {
        out.push_str("No assignment: the Node is not bound to any rack slot.\n");
        return out;
    }
    if view.assignments.len() > 1 {
        out.push_str(&format!(
            "DuplicateBinding: the Node is bound to {} rack slots; an agent refuses to pick one.\n",
            view.assignments.len()
        ));
    }
    for assignment in &view.assignments {
        out.push_str(&format!(
            "\nRack {} (inventory {}, group {}, rack {}, node {}){}\n",
            assignment.rack.name,
            assignment.inventory.name,
            assignment.identity.rack_group,
            assignment.identity.rack_index,
            assignment.identity.node_index,
            if assignment.deleting { " DELETING" } else { "" }
        ));
        out.push_str(&format!(
            "Fabric {} clique {}; profile {} generation {} revision {}\n",
            assignment.identity.fabric_uuid,
            assignment.identity.clique_id,
            assignment.profile.name,
            assignment.profile.generation,
            assignment.profile.revision
        ));
        let mut rows = vec![[
            "GPU".to_string(),
            "UUID".to_string(),
            "SERIAL".to_string(),
            "PCI".to_string(),
            "STATE".to_string(),
            "PSTATE".to_string(),
            "TEMP(C)".to_string(),
            "POWER(mW)".to_string(),
        ]];
        for gpu in &assignment.gpus {
            let telemetry = gpu.runtime.telemetry.as_ref();
            let shown = |value: Option<String>| value.unwrap_or_else(|| "-".to_string());
            rows.push([
                gpu.index.to_string(),
                gpu.uuid.clone(),
                gpu.serial.clone(),
                gpu.pci_address.clone(),
                shown(gpu.runtime.device_state.map(|s| format!("{s:?}"))),
                shown(telemetry.and_then(|t| t.performance_state.clone())),
                shown(
                    telemetry
                        .and_then(|t| t.temperature.as_ref())
                        .and_then(|t| t.gpu_celsius)
                        .map(|c| c.to_string()),
                ),
                shown(
                    telemetry
                        .and_then(|t| t.power.as_ref())
                        .and_then(|p| p.draw_milli_watts)
                        .map(|p| p.to_string()),
                ),
            ]);
        }
        let widths: Vec<usize> = (0..8)
            .map(|column| rows.iter().map(|row| row[column].len()).max().unwrap_or(0))
            .collect();
        for row in &rows {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mokka::node_view::ObjectIdentity;

    #[test]
    fn an_unassigned_node_says_so() {
        let view = NodeAssignments {
            node: ObjectIdentity {
                name: "gpu-1".into(),
                uid: "u".into(),
            },
            assignments: Vec::new(),
        };
        assert_eq!(
            table(&view),
            "Node gpu-1 (uid u)\nNo assignment: the Node is not bound to any rack slot.\n"
        );
    }
}
