//! Object bodies and key pieces (pure).

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::inventory::ChangeEvent;
use crate::record::GpuRecord;

pub use crate::config::S3Format;

/// Upstream's columns, in upstream's order, then the identity upstream
/// discarded. `gpu` is the board serial, or the GPU key when the board has
/// none; `chassis` is empty when absent.
pub const RECORD_COLUMNS: &[&str] = &[
    "cluster",
    "node",
    "machine",
    "source",
    "chassis",
    "gpu",
    "time",
    "gpu_key",
    "uuid",
    "serial",
    "pci_bus_id",
    "product_name",
    "module_id",
    "slot_number",
    "tray_index",
    "host_id",
    "node_uid",
    "driver_version",
];

pub const EVENT_COLUMNS: &[&str] = &[
    "id",
    "kind",
    "cluster",
    "gpu_key",
    "observed_at",
    "changed_fields",
    "node_before",
    "node_after",
];

// The enum lives with the configuration (`S3_FORMAT`); how each format is
// written lives here, next to the keys.
impl S3Format {
    pub fn extension(self) -> &'static str {
        self.as_str()
    }

    pub fn content_type(self) -> &'static str {
        match self {
            S3Format::Csv => "text/csv",
            S3Format::Ndjson => "application/x-ndjson",
        }
    }

    pub fn records(self, records: &[GpuRecord]) -> String {
        match self {
            S3Format::Ndjson => crate::ndjson::to_ndjson(records),
            S3Format::Csv => {
                let rows = records.iter().map(|record| {
                    let opt = |value: &Option<String>| value.clone().unwrap_or_default();
                    let num = |value: Option<u32>| value.map(|n| n.to_string()).unwrap_or_default();
                    vec![
                        record.cluster.clone(),
                        record.node_name.clone(),
                        record.machine_id.clone(),
                        record.source_pod.clone(),
                        opt(&record.gpu.chassis_serial),
                        record
                            .gpu
                            .serial
                            .clone()
                            .unwrap_or_else(|| record.gpu_key()),
                        seconds(record.observed_at),
                        record.gpu_key(),
                        opt(&record.gpu.uuid),
                        opt(&record.gpu.serial),
                        opt(&record.gpu.pci_bus_id),
                        opt(&record.gpu.product_name),
                        num(record.gpu.module_id),
                        num(record.gpu.slot_number),
                        num(record.gpu.tray_index),
                        num(record.gpu.host_id),
                        record.node_uid.clone(),
                        opt(&record.gpu.driver_version),
                    ]
                });
                csv(RECORD_COLUMNS, rows)
            }
        }
    }

    pub fn events(self, events: &[ChangeEvent]) -> String {
        match self {
            S3Format::Ndjson => crate::ndjson::to_ndjson(events),
            S3Format::Csv => {
                let rows = events.iter().map(|event| {
                    let node = |record: &Option<GpuRecord>| {
                        record
                            .as_ref()
                            .map(|r| r.node_name.clone())
                            .unwrap_or_default()
                    };
                    vec![
                        event.id.to_string(),
                        event.kind.as_str().to_owned(),
                        event.cluster.clone(),
                        event.gpu_key.clone(),
                        seconds(event.observed_at),
                        event.changed_fields.join(";"),
                        node(&event.before),
                        node(&event.after),
                    ]
                });
                csv(EVENT_COLUMNS, rows)
            }
        }
    }
}

/// RFC 3339 in UTC with second precision, as upstream's CSV had.
fn seconds(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// RFC 4180 with LF line ends: a field is quoted when it holds a comma, a
/// quote or a line break, and quotes inside are doubled.
fn csv(header: &[&str], rows: impl Iterator<Item = Vec<String>>) -> String {
    let mut out = String::new();
    let mut line = |fields: &mut dyn Iterator<Item = &str>| {
        let mut first = true;
        for field in fields {
            if !first {
                out.push(',');
            }
            first = false;
            if field.contains([',', '"', '\n', '\r']) {
                out.push('"');
                out.push_str(&field.replace('"', "\"\""));
                out.push('"');
            } else {
                out.push_str(field);
            }
        }
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Upstream's placeholders `%Y %m %d %H`, in UTC; anything else is kept.
pub fn render_partition(pattern: &str, at: Timestamp) -> String {
    let civil = at.to_zoned(TimeZone::UTC).datetime();
    pattern
        .replace("%Y", &format!("{:04}", civil.year()))
        .replace("%m", &format!("{:02}", civil.month()))
        .replace("%d", &format!("{:02}", civil.day()))
        .replace("%H", &format!("{:02}", civil.hour()))
}

/// A replica name made safe for a key segment: letters, digits, `.`, `_`
/// and `-` kept, anything else becomes `_`.
pub(super) fn key_safe(name: &str) -> String {
    name.trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_substitute_the_four_placeholders_in_utc() {
        let at: Timestamp = "2026-06-07T10:30:45.123+02:00".parse().unwrap();
        assert_eq!(
            render_partition("year=%Y/month=%m/day=%d/hour=%H", at),
            "year=2026/month=06/day=07/hour=08"
        );
        assert_eq!(render_partition("static", at), "static");
    }

    #[test]
    fn csv_quotes_only_fields_that_need_it() {
        let text = csv(
            &["a", "b"],
            [vec![
                "plain".to_owned(),
                "with, comma \"q\"\nline".to_owned(),
            ]]
            .into_iter(),
        );
        assert_eq!(text, "a,b\nplain,\"with, comma \"\"q\"\"\nline\"\n");
    }

    #[test]
    fn replica_names_cannot_inject_key_segments() {
        assert_eq!(key_safe("gpuid-7d9f/../x y"), "gpuid-7d9f_.._x_y");
        assert_eq!(S3Format::parse("NDJSON"), Some(S3Format::Ndjson));
        assert_eq!(S3Format::parse("parquet"), None);
    }
}
