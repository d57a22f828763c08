//! A batch: the unit every exporter writes and the pipeline retries.

use jiff::Timestamp;
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::inventory::ChangeEvent;
use crate::record::GpuRecord;

/// Namespace of batch ids: UUIDv5 of the URL namespace and
/// `urn:gpufleet:gpuid:export-batch`.
const BATCH_ID_NAMESPACE: Uuid = Uuid::from_u128(0x5e81_6702_2e94_5945_ba4f_ef6d_81b4_bb04);

/// Current-state records and change events exported together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Batch {
    /// Derived from the content only, so the same batch always has the same
    /// id: it is the HTTP `Idempotency-Key` and part of the S3 object key,
    /// which makes a retried or re-submitted batch a no-op downstream.
    pub id: Uuid,
    /// When the batch was sealed; the S3 partition comes from it (not from
    /// the clock at upload), so a retry writes the same key.
    pub sealed_at: Timestamp,
    pub records: Vec<GpuRecord>,
    pub events: Vec<ChangeEvent>,
}

impl Batch {
    pub fn new(records: Vec<GpuRecord>, events: Vec<ChangeEvent>, sealed_at: Timestamp) -> Batch {
        Batch {
            id: content_id(&records, &events),
            sealed_at,
            records,
            events,
        }
    }

    /// Records plus events.
    pub fn len(&self) -> usize {
        self.records.len() + self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.events.is_empty()
    }
}

fn content_id(records: &[GpuRecord], events: &[ChangeEvent]) -> Uuid {
    let mut hasher = Sha256::new();
    hasher.update(b"gpuid-batch/v1\n");
    let mut feed = |tag: &[u8], json: Vec<u8>| {
        hasher.update(tag);
        hasher.update((json.len() as u64).to_be_bytes());
        hasher.update(&json);
    };
    // Records and events hold strings, numbers, enums and timestamps only;
    // serialising them cannot fail, and an empty vector would still hash.
    for record in records {
        feed(b"r", serde_json::to_vec(record).unwrap_or_default());
    }
    for event in events {
        feed(b"e", serde_json::to_vec(event).unwrap_or_default());
    }
    let digest = hasher.finalize();
    Uuid::new_v5(&BATCH_ID_NAMESPACE, &digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_namespace_is_derived_from_its_urn() {
        assert_eq!(
            BATCH_ID_NAMESPACE,
            Uuid::new_v5(&Uuid::NAMESPACE_URL, b"urn:gpufleet:gpuid:export-batch")
        );
    }

    #[test]
    fn batch_ids_depend_on_content_not_on_sealing_time() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let a = Batch::new(Vec::new(), Vec::new(), t0);
        let b = Batch::new(Vec::new(), Vec::new(), t1);
        assert_eq!(a.id, b.id);
        assert_eq!(a.id.get_version_num(), 5);
    }
}
