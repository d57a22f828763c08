//! The batch statement and its column arrays (pure: no connection here).

use std::collections::BTreeMap;

use jiff::Timestamp;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::PostgresNames;
use crate::export::Batch;
use crate::inventory::ChangeEvent;
use crate::record::GpuRecord;

/// One statement per batch: both inserts in data-modifying CTEs, so the
/// batch is written atomically in one round trip with a constant number of
/// parameters whatever its size.
///
/// Records: an older observation never overwrites a newer one (retries and
/// replicas may deliver out of order); `first_seen` only moves back.
///
/// A GPU adopted from upstream gpuid's table (keyed by its board serial) is
/// replaced by the first record with that serial, which inherits its
/// `first_seen`, so the view never lists one GPU twice.
pub(super) fn batch_statement(names: &PostgresNames) -> String {
    format!(
        r#"WITH adopted AS (
    DELETE FROM {inventory} AS a
    USING UNNEST($1::text[], $4::text[]) AS n(cluster, serial)
    WHERE a.cluster = n.cluster AND a.gpu_key = '{adopted_prefix}' || n.serial
    RETURNING a.cluster, a.serial, a.first_seen
), upserted AS (
    INSERT INTO {inventory} AS t (cluster, gpu_key, gpu_uuid, serial, chassis_serial, node_name,
        node_uid, machine_id, source_pod, product_name, pci_bus_id, module_id, record,
        first_seen, last_seen)
    SELECT u.cluster, u.gpu_key, u.gpu_uuid, u.serial, u.chassis_serial, u.node_name,
        u.node_uid, u.machine_id, u.source_pod, u.product_name, u.pci_bus_id, u.module_id,
        u.record,
        LEAST(u.first_seen, (SELECT min(a.first_seen) FROM adopted AS a
            WHERE a.cluster = u.cluster AND a.serial = u.serial)),
        u.last_seen
    FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
        $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::int4[], $13::jsonb[],
        $14::timestamptz[], $15::timestamptz[])
        AS u(cluster, gpu_key, gpu_uuid, serial, chassis_serial, node_name, node_uid, machine_id,
             source_pod, product_name, pci_bus_id, module_id, record, first_seen, last_seen)
    ON CONFLICT (cluster, gpu_key) DO UPDATE SET
        gpu_uuid = EXCLUDED.gpu_uuid,
        serial = EXCLUDED.serial,
        chassis_serial = EXCLUDED.chassis_serial,
        node_name = EXCLUDED.node_name,
        node_uid = EXCLUDED.node_uid,
        machine_id = EXCLUDED.machine_id,
        source_pod = EXCLUDED.source_pod,
        product_name = EXCLUDED.product_name,
        pci_bus_id = EXCLUDED.pci_bus_id,
        module_id = EXCLUDED.module_id,
        record = EXCLUDED.record,
        first_seen = LEAST(t.first_seen, EXCLUDED.first_seen),
        last_seen = EXCLUDED.last_seen,
        updated_at = now()
    WHERE EXCLUDED.last_seen >= t.last_seen
    RETURNING 1
), inserted AS (
    INSERT INTO {events} (event_id, kind, cluster, gpu_key, observed_at, changed_fields, event)
    SELECT e.event_id, e.kind, e.cluster, e.gpu_key, e.observed_at,
        ARRAY(SELECT jsonb_array_elements_text(e.event -> 'changed_fields')), e.event
    FROM UNNEST($16::uuid[], $17::text[], $18::text[], $19::text[], $20::timestamptz[],
        $21::jsonb[]) AS e(event_id, kind, cluster, gpu_key, observed_at, event)
    ON CONFLICT (event_id) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM upserted) AS upserted, (SELECT count(*) FROM inserted) AS inserted"#,
        inventory = names.inventory,
        events = names.events,
        adopted_prefix = super::adopt::ADOPTED_KEY_PREFIX,
    )
}

/// The batch as parallel arrays, one per column.
#[derive(Debug, Default)]
pub(super) struct Columns {
    cluster: Vec<String>,
    gpu_key: Vec<String>,
    gpu_uuid: Vec<Option<String>>,
    serial: Vec<Option<String>>,
    chassis_serial: Vec<Option<String>>,
    node_name: Vec<String>,
    node_uid: Vec<String>,
    machine_id: Vec<String>,
    source_pod: Vec<String>,
    product_name: Vec<Option<String>>,
    pci_bus_id: Vec<Option<String>>,
    module_id: Vec<Option<i32>>,
    record: Vec<serde_json::Value>,
    first_seen: Vec<Timestamp>,
    last_seen: Vec<Timestamp>,
    event_id: Vec<Uuid>,
    event_kind: Vec<String>,
    event_cluster: Vec<String>,
    event_gpu_key: Vec<String>,
    event_observed_at: Vec<Timestamp>,
    event: Vec<serde_json::Value>,
}

impl Columns {
    pub(super) fn from_batch(batch: &Batch) -> Columns {
        let mut columns = Columns::default();
        for (record, first_seen) in latest_per_key(&batch.records) {
            columns.cluster.push(record.cluster.clone());
            columns.gpu_key.push(record.gpu_key());
            columns.gpu_uuid.push(record.gpu.uuid.clone());
            columns.serial.push(record.gpu.serial.clone());
            columns
                .chassis_serial
                .push(record.gpu.chassis_serial.clone());
            columns.node_name.push(record.node_name.clone());
            columns.node_uid.push(record.node_uid.clone());
            columns.machine_id.push(record.machine_id.clone());
            columns.source_pod.push(record.source_pod.clone());
            columns.product_name.push(record.gpu.product_name.clone());
            columns.pci_bus_id.push(record.gpu.pci_bus_id.clone());
            columns
                .module_id
                .push(record.gpu.module_id.and_then(|id| i32::try_from(id).ok()));
            columns
                .record
                .push(serde_json::to_value(record).unwrap_or(serde_json::Value::Null));
            columns.first_seen.push(first_seen);
            columns.last_seen.push(record.observed_at);
        }
        for event in unique_events(&batch.events) {
            columns.event_id.push(event.id);
            columns.event_kind.push(event.kind.as_str().to_owned());
            columns.event_cluster.push(event.cluster.clone());
            columns.event_gpu_key.push(event.gpu_key.clone());
            columns.event_observed_at.push(event.observed_at);
            columns
                .event
                .push(serde_json::to_value(event).unwrap_or(serde_json::Value::Null));
        }
        columns
    }

    pub(super) fn params(&self) -> [&(dyn ToSql + Sync); 21] {
        [
            &self.cluster,
            &self.gpu_key,
            &self.gpu_uuid,
            &self.serial,
            &self.chassis_serial,
            &self.node_name,
            &self.node_uid,
            &self.machine_id,
            &self.source_pod,
            &self.product_name,
            &self.pci_bus_id,
            &self.module_id,
            &self.record,
            &self.first_seen,
            &self.last_seen,
            &self.event_id,
            &self.event_kind,
            &self.event_cluster,
            &self.event_gpu_key,
            &self.event_observed_at,
            &self.event,
        ]
    }
}

/// PostgreSQL refuses an upsert that touches one row twice, so a batch
/// holding two observations of a GPU keeps the latest (ties: the last
/// given), with the earliest time as its first sighting.
pub(super) fn latest_per_key(records: &[GpuRecord]) -> Vec<(&GpuRecord, Timestamp)> {
    let mut by_key: BTreeMap<(String, String), (&GpuRecord, Timestamp)> = BTreeMap::new();
    for record in records {
        let key = (record.cluster.clone(), record.gpu_key());
        match by_key.get_mut(&key) {
            Some((kept, first_seen)) => {
                *first_seen = (*first_seen).min(record.observed_at);
                if record.observed_at >= kept.observed_at {
                    *kept = record;
                }
            }
            None => {
                by_key.insert(key, (record, record.observed_at));
            }
        }
    }
    by_key.into_values().collect()
}

fn unique_events(events: &[ChangeEvent]) -> Vec<&ChangeEvent> {
    let mut seen = std::collections::BTreeSet::new();
    events
        .iter()
        .filter(|event| seen.insert(event.id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::MachineIdSource;
    use crate::smi::SmiGpu;

    fn record(uuid: &str, node: &str, at: &str) -> GpuRecord {
        GpuRecord {
            schema_version: 1,
            cluster: "prod".into(),
            node_name: node.into(),
            node_uid: format!("uid-{node}"),
            provider_id: None,
            system_uuid: Some("sys".into()),
            machine_id: "sys".into(),
            machine_id_source: MachineIdSource::SystemUuid,
            source_pod: "ns/pod".into(),
            observed_at: at.parse().unwrap(),
            collector_version: "test".into(),
            gpu: SmiGpu {
                uuid: Some(uuid.into()),
                ..SmiGpu::default()
            },
        }
    }

    #[test]
    fn a_gpu_seen_twice_in_one_batch_keeps_the_latest_and_the_earliest_sighting() {
        let records = [
            record("GPU-1", "late", "2026-01-02T00:00:00Z"),
            record("GPU-2", "other", "2026-01-01T12:00:00Z"),
            record("GPU-1", "early", "2026-01-01T00:00:00Z"),
        ];
        let kept = latest_per_key(&records);
        assert_eq!(kept.len(), 2);
        let (gpu1, first_seen) = kept.iter().find(|(r, _)| r.gpu_key() == "GPU-1").unwrap();
        assert_eq!(gpu1.node_name, "late");
        assert_eq!(
            *first_seen,
            "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap()
        );
    }
}
