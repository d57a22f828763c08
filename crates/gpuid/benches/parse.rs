//! Parse throughput on the real 8 × B200 capture (357 KB), the largest one.
//!
//! Run: `cargo bench -p gpuid --bench parse`
//! Prints one row per measurement: median time per document over several
//! batches, documents/s, GPU records/s and input MB/s.

use std::hint::black_box;
use std::time::{Duration, Instant};

use gpuid::inventory::inventory_hash;
use gpuid::record::{NodeIdentity, Observation, records_from_report};
use gpuid::smi;

const BATCHES: usize = 15;
const BATCH_TIME: Duration = Duration::from_millis(200);

fn main() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/hardware/b200.xml"
    );
    let xml = match std::fs::read(path) {
        Ok(xml) => xml,
        Err(err) => {
            eprintln!("cannot read {path}: {err}");
            std::process::exit(1);
        }
    };
    let report = match smi::parse(&xml) {
        Ok(report) => report,
        Err(err) => {
            eprintln!("the B200 capture does not parse: {err}");
            std::process::exit(1);
        }
    };
    let gpus = report.gpus.len();
    let node = NodeIdentity {
        name: "b200-1".into(),
        uid: "uid".into(),
        provider_id: Some("aws:///us-east-1a/i-0b200".into()),
        system_uuid: None,
    };
    let observation = Observation {
        cluster: "bench",
        node: &node,
        source_pod: "gpu-operator/nvidia-device-plugin-b200",
        observed_at: jiff::Timestamp::UNIX_EPOCH,
        collector_version: env!("CARGO_PKG_VERSION"),
    };

    println!("| measurement | input | median per document | documents/s | GPU records/s | MB/s |");
    println!("|---|---|---|---|---|---|");
    // Baseline: quick-xml's tokenizer alone, to show what the capture
    // logic on top of it costs.
    row("quick-xml events only (baseline)", &xml, gpus, || {
        let mut reader = quick_xml::Reader::from_reader(black_box(xml.as_slice()));
        let mut events = 0usize;
        while let Ok(event) = reader.read_event() {
            if matches!(event, quick_xml::events::Event::Eof) {
                break;
            }
            events += 1;
        }
        black_box(events);
    });
    row("smi::parse", &xml, gpus, || {
        black_box(
            smi::parse(black_box(&xml))
                .map(|r| r.gpus.len())
                .unwrap_or(0),
        );
    });
    row("smi::parse_to_ndjson", &xml, gpus, || {
        black_box(
            smi::parse_to_ndjson(black_box(xml.as_slice()))
                .map(|s| s.len())
                .unwrap_or(0),
        );
    });
    row("parse + records + inventory_hash", &xml, gpus, || {
        let hash = smi::parse(black_box(&xml))
            .ok()
            .and_then(|report| records_from_report(&observation, &report).ok())
            .map(|records| inventory_hash(&records));
        black_box(hash);
    });
}

fn row(name: &str, xml: &[u8], gpus: usize, mut run: impl FnMut()) {
    for _ in 0..20 {
        run();
    }
    let mut per_document = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let start = Instant::now();
        let mut iterations = 0u32;
        while start.elapsed() < BATCH_TIME {
            run();
            iterations += 1;
        }
        per_document.push(start.elapsed() / iterations.max(1));
    }
    per_document.sort();
    let median = per_document[BATCHES / 2];
    let seconds = median.as_secs_f64();
    println!(
        "| {name} | 8 x B200, {} KB | {:.1} µs | {:.0} | {:.0} | {:.0} |",
        xml.len() / 1000,
        seconds * 1e6,
        1.0 / seconds,
        gpus as f64 / seconds,
        xml.len() as f64 / seconds / 1e6,
    );
}
