//! `gpufleet mokka render -f FILE…`: the SGPURacks the controller would
//! create for the profiles and inventories in some manifests, or the
//! validation errors it would report in status. For previewing a change
//! before applying it, and for checking identities from outside.
//!
//! Reading files and writing stdout/stderr happen in [`run`]; [`preview`] is
//! pure (documents in, racks and problems out).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use mokka::api::{API_VERSION, SGPUInventory, SGPURack, SGPURackProfile};
use mokka::identity::rack_name;
use mokka::inventory::validate_inventory;
use mokka::limits::{GroupShape, check_declared_racks, inventory_capacity};
use mokka::render::{RackCoordinate, ResolvedProfile, render_resolved_rack};
use serde_json::Value;

use crate::cli::mokka::{OutputFormat, RenderArgs};

/// Label naming the inventory of a rack (only when the name is a valid label value).
const LABEL_INVENTORY: &str = "mokka.nvidia.com/inventory";
/// Label naming the rack group of a rack.
const LABEL_RACK_GROUP: &str = "mokka.nvidia.com/rack-group";
/// Label holding the rack index.
const LABEL_RACK_INDEX: &str = "mokka.nvidia.com/rack-index";
/// Annotation holding the inventory UID.
const ANNOTATION_INVENTORY_UID: &str = "mokka.nvidia.com/inventory-uid";
/// Finalizer the controller puts on every rack.
const FINALIZER_RACK_CLEANUP: &str = "mokka.nvidia.com/rack-cleanup";

/// What rendering the manifests yields.
#[derive(Debug, Default)]
pub struct Preview {
    /// The racks, by inventory name, group order and rack index.
    pub racks: Vec<SGPURack>,
    /// What the controller would report instead of (some) racks.
    pub problems: Vec<String>,
    /// Assumptions the preview made (placeholder UIDs, ignored documents).
    pub notes: Vec<String>,
}

/// Reads the files, renders, prints racks on stdout and problems and notes
/// on stderr. Exit code 1 when any problem was found.
pub fn run(args: &RenderArgs) -> anyhow::Result<ExitCode> {
    let mut documents = Vec::new();
    for file in &args.files {
        let (source, text) = read_source(file)?;
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text)
            .map_err(|error| anyhow::anyhow!("{error}"))
            .with_context(|| format!("parsing YAML from {source}"))?;
        documents.extend(
            parsed
                .into_iter()
                .enumerate()
                .filter(|(_, document)| !document.is_null())
                .map(|(index, document)| (format!("{source} document {}", index + 1), document)),
        );
    }
    let preview = preview(documents)?;
    let mut stderr = std::io::stderr().lock();
    for note in &preview.notes {
        writeln!(stderr, "note: {note}").context("writing to stderr")?;
    }
    for problem in &preview.problems {
        writeln!(stderr, "{problem}").context("writing to stderr")?;
    }
    let output = match args.output {
        OutputFormat::Json => {
            let list = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": preview.racks,
            });
            let mut text =
                serde_json::to_string_pretty(&list).context("encoding the racks as JSON")?;
            text.push('\n');
            text
        }
        OutputFormat::Yaml => {
            let mut text = String::new();
            for rack in &preview.racks {
                text.push_str("---\n");
                text.push_str(
                    &serde_saphyr::to_string(rack)
                        .map_err(|error| anyhow::anyhow!("{error}"))
                        .context("encoding a rack as YAML")?,
                );
            }
            text
        }
    };
    std::io::stdout()
        .write_all(output.as_bytes())
        .context("writing to stdout")?;
    Ok(if preview.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn read_source(file: &Path) -> anyhow::Result<(String, String)> {
    if file == Path::new("-") {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading standard input")?;
        Ok(("standard input".to_string(), text))
    } else {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        Ok((file.display().to_string(), text))
    }
}

/// Renders every inventory against the profiles among `documents` (source
/// description, document), as the controller's full reconcile would, in its
/// order of checks: inventory validation, declared racks, profile
/// resolution, capacity, rendering. Documents of other kinds are ignored
/// with a note; a document that does not decode is an error naming it.
pub fn preview(documents: Vec<(String, Value)>) -> anyhow::Result<Preview> {
    let mut out = Preview::default();
    let mut profiles: BTreeMap<String, SGPURackProfile> = BTreeMap::new();
    let mut inventories: BTreeMap<String, SGPUInventory> = BTreeMap::new();
    for (source, document) in documents {
        let kind = document.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = document
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if api_version != API_VERSION || !matches!(kind, "SGPURackProfile" | "SGPUInventory") {
            out.notes.push(format!(
                "{source}: ignored {api_version} {kind} (only {API_VERSION} SGPURackProfile and SGPUInventory render)"
            ));
            continue;
        }
        if kind == "SGPURackProfile" {
            let profile: SGPURackProfile = serde_json::from_value(document)
                .with_context(|| format!("{source}: decoding the SGPURackProfile"))?;
            let name = profile.metadata.name.clone().unwrap_or_default();
            if profiles.insert(name.clone(), profile).is_some() {
                anyhow::bail!("{source}: SGPURackProfile {name:?} is given more than once");
            }
        } else {
            let inventory: SGPUInventory = serde_json::from_value(document)
                .with_context(|| format!("{source}: decoding the SGPUInventory"))?;
            let name = inventory.metadata.name.clone().unwrap_or_default();
            if inventories.insert(name.clone(), inventory).is_some() {
                anyhow::bail!("{source}: SGPUInventory {name:?} is given more than once");
            }
        }
    }

    // Manifests usually carry no UID or generation; the identities depend on
    // the inventory UID, so say which placeholder was used.
    for (name, profile) in &mut profiles {
        if profile.metadata.uid.as_deref().unwrap_or("").is_empty() {
            let uid = format!("preview-uid-{name}");
            out.notes.push(format!(
                "SGPURackProfile {name:?} has no metadata.uid; racks reference the placeholder {uid:?}"
            ));
            profile.metadata.uid = Some(uid);
        }
        if profile.metadata.generation.unwrap_or(0) < 1 {
            profile.metadata.generation = Some(1);
        }
    }
    for (name, inventory) in &mut inventories {
        if !name.is_empty() && inventory.metadata.uid.as_deref().unwrap_or("").is_empty() {
            let uid = format!("preview-uid-{name}");
            out.notes.push(format!(
                "SGPUInventory {name:?} has no metadata.uid; rack names and GPU identities use the \
                 placeholder {uid:?} (give the live object, e.g. `kubectl get -o yaml`, for the real ones)"
            ));
            inventory.metadata.uid = Some(uid);
        }
    }

    for (name, inventory) in &inventories {
        render_inventory(name, inventory, &profiles, &mut out);
    }
    Ok(out)
}

fn render_inventory(
    name: &str,
    inventory: &SGPUInventory,
    profiles: &BTreeMap<String, SGPURackProfile>,
    out: &mut Preview,
) {
    let subject = format!("SGPUInventory {name:?}");
    if let Err(error) = validate_inventory(inventory) {
        out.problems.push(format!(
            "{subject}: Accepted=False InvalidInventory: {error}"
        ));
        return;
    }
    if let Err(error) = check_declared_racks(inventory) {
        out.problems.push(format!(
            "{subject}: Accepted=False CapacityExceeded: {error}"
        ));
        return;
    }
    let uid = inventory.metadata.uid.clone().unwrap_or_default();
    let mut resolved = Vec::new();
    for group in &inventory.spec.rack_groups {
        let profile_name = &group.profile_ref.name;
        let Some(profile) = profiles.get(profile_name) else {
            out.problems.push(format!(
                "{subject} rack group {:?}: ResolvedRefs=False ProfileNotFound: SGPURackProfile {profile_name:?} is not among the inputs",
                group.id
            ));
            continue;
        };
        match ResolvedProfile::resolve(profile) {
            Ok(profile) => resolved.push((group, profile)),
            Err(error) => out.problems.push(format!(
                "{subject} rack group {:?}: ResolvedRefs=False InvalidProfile: {error}",
                group.id
            )),
        }
    }
    let shapes: Vec<GroupShape> = resolved
        .iter()
        .map(|(group, profile)| GroupShape {
            id: group.id.clone(),
            racks: i64::from(group.count),
            nodes_per_rack: i64::from(profile.nodes_per_rack()),
            gpus_per_node: i64::from(profile.gpus_per_node()),
        })
        .collect();
    if let Err(error) = inventory_capacity(&shapes) {
        out.problems.push(format!(
            "{subject}: Accepted=False CapacityExceeded: {error}"
        ));
        return;
    }
    for (group, profile) in resolved {
        for rack_index in 0..group.count {
            let coordinate = RackCoordinate {
                inventory_name: name,
                inventory_uid: &uid,
                group: &group.id,
                rack_index,
                rack_count: group.count,
            };
            match render_resolved_rack(coordinate, &profile) {
                Ok(spec) => out
                    .racks
                    .push(rack_object(name, &uid, &group.id, rack_index, spec)),
                Err(error) => {
                    // The controller records the first failure and stops the group.
                    out.problems.push(format!(
                        "{subject} rack group {:?}: ResolvedRefs=False InvalidProfile: {error}",
                        group.id
                    ));
                    break;
                }
            }
        }
    }
}

/// The rack object with the metadata the controller stamps on it.
fn rack_object(
    inventory_name: &str,
    inventory_uid: &str,
    group: &str,
    rack_index: i32,
    spec: mokka::api::SGPURackSpec,
) -> SGPURack {
    let index = u32::try_from(rack_index).unwrap_or_default();
    let mut labels = BTreeMap::new();
    if is_label_value(inventory_name) {
        labels.insert(LABEL_INVENTORY.to_string(), inventory_name.to_string());
    }
    labels.insert(LABEL_RACK_GROUP.to_string(), group.to_string());
    labels.insert(LABEL_RACK_INDEX.to_string(), rack_index.to_string());
    let mut rack = SGPURack::new(
        &rack_name(inventory_name, inventory_uid, group, index),
        spec,
    );
    rack.metadata = ObjectMeta {
        name: rack.metadata.name.take(),
        labels: Some(labels),
        annotations: Some(BTreeMap::from([(
            ANNOTATION_INVENTORY_UID.to_string(),
            inventory_uid.to_string(),
        )])),
        finalizers: Some(vec![FINALIZER_RACK_CLEANUP.to_string()]),
        owner_references: Some(vec![OwnerReference {
            api_version: API_VERSION.to_string(),
            kind: "SGPUInventory".to_string(),
            name: inventory_name.to_string(),
            uid: inventory_uid.to_string(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..ObjectMeta::default()
    };
    rack
}

/// A valid Kubernetes label value: at most 63 characters, alphanumerics at
/// both ends, `-`, `_` and `.` between.
fn is_label_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.len() <= 63
        && bytes.first().is_none_or(u8::is_ascii_alphanumeric)
        && bytes.last().is_none_or(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_follow_kubernetes_rules() {
        assert!(is_label_value("example"));
        assert!(is_label_value("a.b_c-d"));
        assert!(!is_label_value("-leading"));
        assert!(!is_label_value("has space"));
        assert!(!is_label_value(&"x".repeat(64)));
    }
}
