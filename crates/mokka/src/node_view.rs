//! What a node agent receives (upstream Mokka has no such answer: its
//! `ControlPlaneSource` is a stub; see docs/mokka-node-api.md): a Node's
//! assignments with identity, profile shape and every GPU with its
//! effective runtime; the ETag of that answer; and the validation of the
//! request. Pure: the controller's node API and `gpufleet mokka node-view`
//! build the same value from the read API.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::{
    GpuSpec, HostSpec, NodeTopology, RackGpu, RuntimeState, SGPURack, SGPURackProfile, SoftwareSpec,
};
use crate::selector::is_dns_subdomain;

/// The answer for one Node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeAssignments {
    pub node: ObjectIdentity,
    /// One entry per bound rack slot; empty when the Node is eligible but
    /// not (yet) assigned. More than one is a `DuplicateBinding` anomaly:
    /// an agent should refuse to pick one.
    pub assignments: Vec<AssignmentView>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ObjectIdentity {
    pub name: String,
    pub uid: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RackReference {
    pub name: String,
    pub uid: String,
    pub generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ProfileReference {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub revision: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SlotIdentity {
    pub rack_group: String,
    pub rack_index: i32,
    pub node_index: i32,
    #[serde(rename = "fabricUUID")]
    pub fabric_uuid: String,
    #[serde(rename = "cliqueID")]
    pub clique_id: i32,
}

/// The profile fields an agent needs to build its Node shape.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeShapeView {
    pub gpus: GpuSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<NodeTopology>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GpuView {
    pub index: i32,
    pub uuid: String,
    pub serial: String,
    pub minor_number: i32,
    pub pci_address: String,
    pub root_complex: String,
    pub numa_node: i32,
    pub host_processor_index: i32,
    pub runtime: RuntimeState,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentView {
    pub inventory: ObjectIdentity,
    pub rack: RackReference,
    pub profile: ProfileReference,
    pub identity: SlotIdentity,
    /// The rack is being deleted: the assignment ends soon.
    pub deleting: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software: Option<SoftwareSpec>,
    pub node: NodeShapeView,
    pub gpus: Vec<GpuView>,
}

/// The view of one bound slot: `rack` and its slot `node_index`, the
/// profile the rack was rendered from, and the effective runtime per GPU
/// index (a GPU without one gets the empty state).
pub fn assignment_view(
    rack: &SGPURack,
    node_index: i32,
    profile: &SGPURackProfile,
    runtime_of: impl Fn(i32) -> Option<RuntimeState>,
) -> Option<AssignmentView> {
    let slot = rack.spec.node_by_index(node_index)?;
    let gpu = |gpu: &RackGpu| GpuView {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        serial: gpu.serial.clone(),
        minor_number: gpu.minor_number,
        pci_address: gpu.pci_address.clone(),
        root_complex: gpu.root_complex.clone(),
        numa_node: gpu.numa_node,
        host_processor_index: gpu.host_processor_index,
        runtime: runtime_of(gpu.index).unwrap_or_default(),
    };
    Some(AssignmentView {
        inventory: ObjectIdentity {
            name: rack.spec.inventory_ref.name.clone(),
            uid: rack.spec.inventory_ref.uid.clone(),
        },
        rack: RackReference {
            name: rack.metadata.name.clone().unwrap_or_default(),
            uid: rack.metadata.uid.clone().unwrap_or_default(),
            generation: rack.metadata.generation,
        },
        profile: ProfileReference {
            name: rack.spec.profile_ref.name.clone(),
            uid: rack.spec.profile_ref.uid.clone(),
            generation: rack.spec.profile_ref.generation,
            revision: rack.spec.profile_ref.revision.clone(),
        },
        identity: SlotIdentity {
            rack_group: rack.spec.identity.rack_group.clone(),
            rack_index: rack.spec.identity.rack_index,
            node_index,
            fabric_uuid: rack.spec.identity.fabric_uuid.clone(),
            clique_id: rack.spec.identity.clique_id,
        },
        deleting: rack.metadata.deletion_timestamp.is_some(),
        software: profile.spec.software.clone(),
        node: NodeShapeView {
            gpus: profile.spec.node.gpus.clone(),
            host: profile.spec.node.host.clone(),
            topology: profile.spec.node.topology.clone(),
        },
        gpus: slot.gpus.iter().map(gpu).collect(),
    })
}

/// The body and entity tag of an answer. The tag is a digest of the body,
/// which holds every input revision (rack UID and generation, profile
/// generation and revision, inventory UID) and the effective runtime they
/// produce: replicas with the same caches give the same tag, and any
/// change an agent could act on gives a new one.
pub fn encode(view: &NodeAssignments) -> (Vec<u8>, String) {
    let body = serde_json::to_vec(view).unwrap_or_default();
    let digest = Sha256::digest(&body);
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    (body, format!("\"{hex}\""))
}

/// Whether an `If-None-Match` header value names `etag` (weak or strong
/// comparison, `*` matches anything).
pub fn if_none_match_names(header: &str, etag: &str) -> bool {
    header.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag
    })
}

/// The longest long-poll a caller may ask for.
pub const MAX_WATCH_TIMEOUT_SECONDS: u64 = 300;
/// The long-poll timeout when `watch=true` names none.
pub const DEFAULT_WATCH_TIMEOUT_SECONDS: u64 = 60;

/// A validated assignment request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssignmentQuery {
    pub uid: String,
    /// `Some(seconds)` for a long-poll.
    pub watch: Option<u64>,
}

/// Why a request is malformed (HTTP 400); the message says what to fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

/// Checks the Node name of the path.
pub fn validate_node_name(name: &str) -> Result<(), BadRequest> {
    if is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(BadRequest(format!(
            "Node name {name:?} is not a valid Kubernetes object name (a lowercase RFC 1123 subdomain of at most 253 characters)"
        )))
    }
}

/// Parses the query string of an assignment request: `uid` (required),
/// `watch` (`true`/`false`) and `timeoutSeconds` (1..=300, only with
/// `watch=true`). Unknown and repeated parameters are refused.
pub fn parse_query(query: &str) -> Result<AssignmentQuery, BadRequest> {
    let mut uid = None;
    let mut watch = None;
    let mut timeout = None;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let slot = match key.as_ref() {
            "uid" => &mut uid,
            "watch" => &mut watch,
            "timeoutSeconds" => &mut timeout,
            other => {
                return Err(BadRequest(format!(
                    "unknown query parameter {other:?}: only uid, watch and timeoutSeconds are accepted"
                )));
            }
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(BadRequest(format!(
                "query parameter {key:?} is given more than once"
            )));
        }
    }
    let uid = uid.ok_or_else(|| {
        BadRequest("the uid query parameter is required: the Node's metadata.uid".into())
    })?;
    let valid_uid = !uid.is_empty()
        && uid.len() <= 128
        && uid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !valid_uid {
        return Err(BadRequest(format!(
            "uid {uid:?} is not a Kubernetes UID (1 to 128 letters, digits, '-', '_' or '.')"
        )));
    }
    let watching = match watch.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(BadRequest(format!(
                "watch={other:?}: the value must be true or false"
            )));
        }
    };
    let timeout = match timeout {
        None => None,
        Some(text) => match text.parse::<u64>() {
            Ok(seconds) if (1..=MAX_WATCH_TIMEOUT_SECONDS).contains(&seconds) => Some(seconds),
            _ => {
                return Err(BadRequest(format!(
                    "timeoutSeconds={text:?}: the value must be a whole number of seconds from 1 to {MAX_WATCH_TIMEOUT_SECONDS}"
                )));
            }
        },
    };
    if timeout.is_some() && !watching {
        return Err(BadRequest(
            "timeoutSeconds applies only with watch=true".into(),
        ));
    }
    Ok(AssignmentQuery {
        uid,
        watch: watching.then(|| timeout.unwrap_or(DEFAULT_WATCH_TIMEOUT_SECONDS)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_needs_a_uid_and_accepts_a_bounded_long_poll() {
        assert_eq!(
            parse_query("uid=abc-1").unwrap(),
            AssignmentQuery {
                uid: "abc-1".into(),
                watch: None
            }
        );
        assert_eq!(
            parse_query("uid=u&watch=true&timeoutSeconds=5")
                .unwrap()
                .watch,
            Some(5)
        );
        assert_eq!(
            parse_query("uid=u&watch=true").unwrap().watch,
            Some(DEFAULT_WATCH_TIMEOUT_SECONDS)
        );
        for (query, message) in [
            (
                "",
                "the uid query parameter is required: the Node's metadata.uid",
            ),
            (
                "uid=",
                "uid \"\" is not a Kubernetes UID (1 to 128 letters, digits, '-', '_' or '.')",
            ),
            (
                "uid=a%20b",
                "uid \"a b\" is not a Kubernetes UID (1 to 128 letters, digits, '-', '_' or '.')",
            ),
            (
                "uid=u&uid=v",
                "query parameter \"uid\" is given more than once",
            ),
            (
                "uid=u&color=red",
                "unknown query parameter \"color\": only uid, watch and timeoutSeconds are accepted",
            ),
            (
                "uid=u&watch=yes",
                "watch=\"yes\": the value must be true or false",
            ),
            (
                "uid=u&watch=true&timeoutSeconds=0",
                "timeoutSeconds=\"0\": the value must be a whole number of seconds from 1 to 300",
            ),
            (
                "uid=u&watch=true&timeoutSeconds=-1",
                "timeoutSeconds=\"-1\": the value must be a whole number of seconds from 1 to 300",
            ),
            (
                "uid=u&timeoutSeconds=3",
                "timeoutSeconds applies only with watch=true",
            ),
        ] {
            assert_eq!(
                parse_query(query).unwrap_err().0,
                message,
                "query {query:?}"
            );
        }
        assert!(parse_query(&format!("uid={}", "a".repeat(129))).is_err());
    }

    #[test]
    fn node_names_are_dns_subdomains() {
        assert!(validate_node_name("gpu-node-1.example").is_ok());
        for bad in ["", "UPPER", "under_score", "a/b", &"a".repeat(254)] {
            assert!(validate_node_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn if_none_match_compares_weak_and_strong_tags_and_lists() {
        assert!(if_none_match_names("\"abc\"", "\"abc\""));
        assert!(if_none_match_names("W/\"abc\"", "\"abc\""));
        assert!(if_none_match_names("\"x\", \"abc\"", "\"abc\""));
        assert!(if_none_match_names("*", "\"abc\""));
        assert!(!if_none_match_names("\"abd\"", "\"abc\""));
    }

    #[test]
    fn the_entity_tag_follows_the_body() {
        let mut view = NodeAssignments {
            node: ObjectIdentity {
                name: "n".into(),
                uid: "u".into(),
            },
            assignments: Vec::new(),
        };
        let (_, first) = encode(&view);
        assert_eq!(encode(&view).1, first, "equal answers, equal tags");
        view.node.uid = "v".into();
        assert_ne!(encode(&view).1, first);
        assert!(first.starts_with('"') && first.ends_with('"') && first.len() == 34);
    }
}
