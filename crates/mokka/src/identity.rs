//! Deterministic names and identities of racks and GPUs.
//!
//! Everything here depends only on the inventory UID, the rack group and the
//! coordinate, so retries, restarts and leader changes reproduce the same
//! values, while a replaced inventory (new UID) gets fresh ones. The byte
//! layouts reproduce upstream exactly (see the vectors in the tests).

use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Namespace of every Mokka UUIDv5 identity.
pub const IDENTITY_NAMESPACE: Uuid = Uuid::from_u128(0xd954d617_e81d_58d0_8f22_f45afda62260);

/// Prefix of the UUIDv5 name; versions the layout that follows it.
const IDENTITY_NAME_PREFIX: &[u8] = b"mokka-identity-v1";

/// Kubernetes object names are at most 63 characters here (DNS label).
const MAX_NAME_LENGTH: usize = 63;
/// Hex characters of the SHA-256 suffix that keeps truncated names unique.
const NAME_SUFFIX_LENGTH: usize = 12;
/// Room left for the readable prefix: 63 - '-' - 12.
const MAX_NAME_PREFIX_LENGTH: usize = MAX_NAME_LENGTH - 1 - NAME_SUFFIX_LENGTH;

/// Appends `bytes` preceded by its length as a 4-byte big-endian integer, so
/// that distinct (uid, group) pairs never produce the same byte stream.
fn push_length_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    // Inputs are Kubernetes names and UIDs (far below 4 GiB); saturating keeps
    // the function total without changing any realistic encoding.
    let length = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Lowercases and turns every run of characters other than `[a-z0-9]` into
/// one `-`, then trims `-` from both ends. Unlike upstream (which keeps any
/// Unicode lowercase letter) only ASCII survives, so the result is always a
/// valid DNS label body.
pub fn dns_label_prefix(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut pending_dash = false;
    for ch in raw.chars() {
        let ch = ch.to_ascii_lowercase();
        if ch.is_ascii_lowercase() || ch.is_ascii_digit() {
            if pending_dash && !out.is_empty() {
                out.push('-');
            }
            pending_dash = false;
            out.push(ch);
        } else {
            pending_dash = true;
        }
    }
    out
}

/// The deterministic name of rack `rack_index` of `group` in an inventory:
/// a readable DNS-label prefix (at most 50 characters) plus 12 hex characters
/// of SHA-256 over the length-prefixed inventory UID and group and the
/// big-endian rack index.
pub fn rack_name(
    inventory_name: &str,
    inventory_uid: &str,
    group: &str,
    rack_index: u32,
) -> String {
    let mut prefix = dns_label_prefix(&format!("{inventory_name}-{group}-{rack_index}"));
    if prefix.len() > MAX_NAME_PREFIX_LENGTH {
        // The prefix is ASCII, so byte truncation is character truncation.
        prefix.truncate(MAX_NAME_PREFIX_LENGTH);
        let trimmed_len = prefix.trim_end_matches('-').len();
        prefix.truncate(trimmed_len);
    }

    let mut hashed = Vec::with_capacity(inventory_uid.len() + group.len() + 12);
    push_length_prefixed(&mut hashed, inventory_uid.as_bytes());
    push_length_prefixed(&mut hashed, group.as_bytes());
    hashed.extend_from_slice(&rack_index.to_be_bytes());
    let digest = Sha256::digest(&hashed);
    let suffix = hex(&digest[..NAME_SUFFIX_LENGTH / 2]);

    // The index always leaves a digit in the prefix; the empty case is kept
    // for parity with upstream's general name helper.
    if prefix.is_empty() {
        suffix
    } else {
        prefix.push('-');
        prefix.push_str(&suffix);
        prefix
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// What an identity names; part of the hashed name so kinds never collide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IdentityKind {
    Fabric,
    Gpu,
    Serial,
}

impl IdentityKind {
    fn as_str(self) -> &'static str {
        match self {
            IdentityKind::Fabric => "fabric",
            IdentityKind::Gpu => "gpu",
            IdentityKind::Serial => "serial",
        }
    }
}

fn identity_uuid(
    kind: IdentityKind,
    inventory_uid: &str,
    group: &str,
    coordinates: &[i32],
) -> Uuid {
    let mut name = Vec::with_capacity(
        IDENTITY_NAME_PREFIX.len()
            + 12
            + inventory_uid.len()
            + group.len()
            + 4 * coordinates.len()
            + 8,
    );
    name.extend_from_slice(IDENTITY_NAME_PREFIX);
    push_length_prefixed(&mut name, kind.as_str().as_bytes());
    push_length_prefixed(&mut name, inventory_uid.as_bytes());
    push_length_prefixed(&mut name, group.as_bytes());
    for coordinate in coordinates {
        name.extend_from_slice(&coordinate.to_be_bytes());
    }
    Uuid::new_v5(&IDENTITY_NAMESPACE, &name)
}

/// The rack's NVLink fabric (cluster) UUID, e.g. `2c79cf0a-9456-5f4d-…`.
pub fn fabric_uuid(inventory_uid: &str, group: &str, rack_index: i32) -> String {
    identity_uuid(IdentityKind::Fabric, inventory_uid, group, &[rack_index])
        .hyphenated()
        .to_string()
}

/// A GPU's UUID as NVML prints it: `GPU-` followed by a UUIDv5.
pub fn gpu_uuid(
    inventory_uid: &str,
    group: &str,
    rack_index: i32,
    node_index: i32,
    gpu_index: i32,
) -> String {
    let uuid = identity_uuid(
        IdentityKind::Gpu,
        inventory_uid,
        group,
        &[rack_index, node_index, gpu_index],
    );
    format!("GPU-{}", uuid.hyphenated())
}

/// A GPU's board serial: the first 8 bytes of a UUIDv5 as a big-endian
/// unsigned integer, printed as 20 zero-padded decimal digits.
pub fn gpu_serial(
    inventory_uid: &str,
    group: &str,
    rack_index: i32,
    node_index: i32,
    gpu_index: i32,
) -> String {
    let uuid = identity_uuid(
        IdentityKind::Serial,
        inventory_uid,
        group,
        &[rack_index, node_index, gpu_index],
    );
    let bytes = uuid.as_bytes();
    let mut high = [0u8; 8];
    high.copy_from_slice(&bytes[..8]);
    format!("{:020}", u64::from_be_bytes(high))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rack_name_matches_the_upstream_vector() {
        assert_eq!(
            rack_name("inventory-a", "inventory-uid-a", "compute", 2),
            "inventory-a-compute-2-152f2cf61b78"
        );
    }

    #[test]
    fn long_rack_names_truncate_the_prefix_to_fifty_characters_and_trim_dashes() {
        let name = rack_name(
            &"very-long-inventory-".repeat(8),
            "inventory-uid-a",
            &"group".repeat(20),
            12345,
        );
        assert_eq!(
            name,
            "very-long-inventory-very-long-inventory-very-long-60142d58c4a7"
        );
        assert!(name.len() <= 63);
    }

    #[test]
    fn fabric_gpu_and_serial_identities_match_the_upstream_vectors() {
        assert_eq!(
            fabric_uuid("inventory-uid-a", "compute", 2),
            "2c79cf0a-9456-5f4d-aef6-c9dba304466a"
        );
        assert_eq!(
            gpu_uuid("inventory-uid-a", "compute", 2, 0, 0),
            "GPU-e1fc2f7b-7e71-5cdd-addf-11103758e19f"
        );
        assert_eq!(
            gpu_serial("inventory-uid-a", "compute", 2, 0, 0),
            "01184543437958700640"
        );
    }

    #[test]
    fn identities_change_with_the_inventory_uid_and_every_coordinate() {
        let base = gpu_uuid("uid", "g", 1, 2, 3);
        assert_ne!(base, gpu_uuid("uid-2", "g", 1, 2, 3));
        assert_ne!(base, gpu_uuid("uid", "h", 1, 2, 3));
        assert_ne!(base, gpu_uuid("uid", "g", 0, 2, 3));
        assert_ne!(base, gpu_uuid("uid", "g", 1, 0, 3));
        assert_ne!(base, gpu_uuid("uid", "g", 1, 2, 0));
        assert_eq!(base, gpu_uuid("uid", "g", 1, 2, 3));
    }

    #[test]
    fn length_prefixes_keep_uid_and_group_boundaries_apart() {
        assert_ne!(rack_name("i", "ab", "c", 0), rack_name("i", "a", "bc", 0));
        assert_ne!(fabric_uuid("ab", "c", 0), fabric_uuid("a", "bc", 0));
    }

    #[test]
    fn unreadable_name_parts_collapse_into_the_index() {
        let name = rack_name("__", "uid", "!!", 7);
        assert!(name.starts_with("7-"), "{name}");
        assert_eq!(name.len(), 2 + 12);
        assert_eq!(dns_label_prefix("__!!__"), "");
    }

    #[test]
    fn dns_label_prefix_lowercases_and_collapses_invalid_runs() {
        assert_eq!(dns_label_prefix("--Inv_A..B--"), "inv-a-b");
        assert_eq!(dns_label_prefix("Ünïcode"), "n-code");
    }

    #[test]
    fn serials_are_twenty_digits() {
        for rack in 0..20 {
            let serial = gpu_serial("u", "g", rack, 1, 1);
            assert_eq!(serial.len(), 20);
            assert!(serial.bytes().all(|b| b.is_ascii_digit()));
        }
    }
}
