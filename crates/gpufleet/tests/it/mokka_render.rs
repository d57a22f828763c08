//! `gpufleet mokka render -f FILE…`, driven as an operator drives it.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use mokka::api::SGPURack;
use mokka::fixtures::EXAMPLE_PROFILE_YAML;

fn render(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpufleet"))
        .args(["mokka", "render"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gpufleet runs");
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

fn manifest_file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

const UPSTREAM_VECTOR_INVENTORY: &str = "
apiVersion: mokka.nvidia.com/v1alpha1
kind: SGPUInventory
metadata: {name: inventory-a, uid: inventory-uid-a}
spec:
  rackGroups:
    - {id: compute, count: 3, profileRef: {name: example-a100}}
";

#[test]
fn render_prints_the_racks_the_controller_would_create_with_upstream_identities() {
    // Upstream identity vectors: inventory-a / inventory-uid-a / compute,
    // rack 2 is inventory-a-compute-2-152f2cf61b78 with fabric 2c79cf0a-…,
    // GPU(0,0) GPU-e1fc2f7b-… and serial 01184543437958700640.
    let profiles = manifest_file(EXAMPLE_PROFILE_YAML);
    let inventories = manifest_file(UPSTREAM_VECTOR_INVENTORY);
    let out = render(
        &[
            "-f",
            profiles.path().to_str().unwrap(),
            inventories.path().to_str().unwrap(),
            "-o",
            "json",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["kind"], "List");
    let racks: Vec<SGPURack> = serde_json::from_value(list["items"].clone()).unwrap();
    assert_eq!(racks.len(), 3);
    let rack = &racks[2];
    assert_eq!(
        rack.metadata.name.as_deref(),
        Some("inventory-a-compute-2-152f2cf61b78")
    );
    assert_eq!(
        rack.spec.identity.fabric_uuid,
        "2c79cf0a-9456-5f4d-aef6-c9dba304466a"
    );
    let gpu = &rack.spec.nodes[0].gpus[0];
    assert_eq!(gpu.uuid, "GPU-e1fc2f7b-7e71-5cdd-addf-11103758e19f");
    assert_eq!(gpu.serial, "01184543437958700640");
    assert_eq!(gpu.numa_node, 0);
    let profile: mokka::api::SGPURackProfile =
        serde_saphyr::from_str(EXAMPLE_PROFILE_YAML).unwrap();
    assert_eq!(
        rack.spec.profile_ref.revision,
        mokka::profile::profile_revision(&profile.spec).unwrap()
    );
    let labels = rack.metadata.labels.clone().unwrap();
    assert_eq!(labels["mokka.nvidia.com/rack-index"], "2");
    assert_eq!(labels["mokka.nvidia.com/inventory"], "inventory-a");
    let owner = &rack.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("SGPUInventory", "inventory-uid-a")
    );
    assert_eq!(owner.controller, Some(true));
    // The profile had no UID: the preview says which placeholder it used.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SGPURackProfile \"example-a100\" has no metadata.uid"),
        "{stderr}"
    );
}

#[test]
fn render_reads_several_documents_from_stdin_and_prints_yaml() {
    let both = format!("{EXAMPLE_PROFILE_YAML}\n---\n{UPSTREAM_VECTOR_INVENTORY}");
    let out = render(&["-f", "-"], Some(&both));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let racks: Vec<SGPURack> = serde_saphyr::from_multiple(&text).unwrap();
    assert_eq!(racks.len(), 3);
    assert_eq!(
        racks[0].metadata.name.as_deref(),
        Some(mokka::identity::rack_name("inventory-a", "inventory-uid-a", "compute", 0).as_str())
    );
}

#[test]
fn render_reports_the_errors_upstreams_controller_puts_in_status_and_exits_non_zero() {
    let inputs = format!(
        "{EXAMPLE_PROFILE_YAML}
---
apiVersion: mokka.nvidia.com/v1alpha1
kind: SGPURackProfile
metadata: {{name: broken}}
spec:
  rack: {{nodesPerRack: 1}}
  node:
    gpus: {{count: 2, model: {{}}, memory: {{capacity: 1Gi}}, pci: {{}}}}
    topology:
      gpuSlots: [{{index: 0, pciAddress: \"0000:01:00.0\", rootComplex: \"pci0000:00\"}}]
---
apiVersion: mokka.nvidia.com/v1alpha1
kind: SGPUInventory
metadata: {{name: selector-bad, uid: u1}}
spec:
  rackGroups:
    - id: compute
      count: 1
      profileRef: {{name: example-a100}}
      placement: {{nodeSelector: {{matchLabels: {{mokka.nvidia.com/sgpu-assigned: \"true\"}}}}}}
---
apiVersion: mokka.nvidia.com/v1alpha1
kind: SGPUInventory
metadata: {{name: refs, uid: u2}}
spec:
  rackGroups:
    - {{id: good, count: 1, profileRef: {{name: example-a100}}}}
    - {{id: missing, count: 1, profileRef: {{name: nowhere}}}}
    - {{id: invalid, count: 1, profileRef: {{name: broken}}}}
---
apiVersion: mokka.nvidia.com/v1alpha1
kind: SGPURuntimePolicy
metadata: {{name: ignored}}
spec: {{targetRef: {{group: mokka.nvidia.com, kind: SGPUInventory, name: refs}}}}
"
    );
    let file = manifest_file(&inputs);
    let out = render(&["-f", file.path().to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Upstream Mokka's exact message when a rack group's selector names a
    // label the controller itself projects onto Nodes.
    assert!(
        stderr.contains(
            "SGPUInventory \"selector-bad\": Accepted=False InvalidInventory: rack group \"compute\" \
             selector: selector must not reference controller-owned label \"mokka.nvidia.com/sgpu-assigned\""
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "SGPUInventory \"refs\" rack group \"missing\": ResolvedRefs=False ProfileNotFound"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "SGPUInventory \"refs\" rack group \"invalid\": ResolvedRefs=False InvalidProfile: \
             validate profile: gpuSlots length 1 must equal gpus.count 2"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("ignored mokka.nvidia.com/v1alpha1 SGPURuntimePolicy"),
        "{stderr}"
    );
    // The resolved group still renders, as the controller keeps going.
    let racks: Vec<SGPURack> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    assert_eq!(racks.len(), 1);
    assert_eq!(racks[0].spec.identity.rack_group, "good");
}

#[test]
fn render_names_an_unreadable_file() {
    let out = render(&["-f", "/nonexistent/manifests.yaml"], None);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("reading /nonexistent/manifests.yaml"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
