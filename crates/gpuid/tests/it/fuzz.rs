//! Property tests on mutated real captures: the parser never panics, and
//! whatever it accepts respects the caps.

use gpuid::smi::{self, Limits, SmiReport};
use proptest::prelude::*;

use crate::fixtures::capture;

/// Small captures keep each case fast; gb200 exercises the real layout.
const CAPTURES: &[&str] = &[
    "simulated/a100-healthy.xml",
    "simulated/gb200-lost.xml",
    "simulated/gb200-healthy.xml",
    "hardware/a100.xml",
    "hardware/l40s.xml",
];

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(prop::sample::Index),
    FlipBytes(Vec<(prop::sample::Index, u8)>),
    Duplicate {
        from: prop::sample::Index,
        len: usize,
        to: prop::sample::Index,
    },
    Delete {
        from: prop::sample::Index,
        len: usize,
    },
    HugeText {
        at: prop::sample::Index,
        len: usize,
        byte: u8,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16)
            .prop_map(Mutation::FlipBytes),
        (
            any::<prop::sample::Index>(),
            1usize..4096,
            any::<prop::sample::Index>()
        )
            .prop_map(|(from, len, to)| Mutation::Duplicate { from, len, to }),
        (any::<prop::sample::Index>(), 1usize..2048)
            .prop_map(|(from, len)| Mutation::Delete { from, len }),
        (
            any::<prop::sample::Index>(),
            1usize..200_000,
            prop::sample::select(vec![b'x', b'<', b'&', b'>', 0xff])
        )
            .prop_map(|(at, len, byte)| Mutation::HugeText { at, len, byte }),
    ]
}

fn apply(mut xml: Vec<u8>, mutation: &Mutation) -> Vec<u8> {
    // An earlier mutation may have emptied the document; proptest's `Index`
    // cannot pick a position in an empty buffer, and there is nothing to mutate.
    if xml.is_empty() {
        return xml;
    }
    match mutation {
        Mutation::Truncate(at) => {
            xml.truncate(at.index(xml.len()));
        }
        Mutation::FlipBytes(flips) => {
            for (at, byte) in flips {
                let at = at.index(xml.len());
                xml[at] = *byte;
            }
        }
        Mutation::Duplicate { from, len, to } => {
            let from = from.index(xml.len());
            let end = (from + len).min(xml.len());
            let copy = xml[from..end].to_vec();
            let to = to.index(xml.len());
            xml.splice(to..to, copy);
        }
        Mutation::Delete { from, len } => {
            let from = from.index(xml.len());
            let end = (from + len).min(xml.len());
            xml.drain(from..end);
        }
        Mutation::HugeText { at, len, byte } => {
            let at = at.index(xml.len());
            xml.splice(at..at, std::iter::repeat_n(*byte, *len));
        }
    }
    xml
}

fn respects_caps(report: &SmiReport, limits: Limits) {
    assert!(report.gpus.len() <= limits.max_gpus);
    for gpu in &report.gpus {
        let json = serde_json::to_value(gpu).unwrap();
        for (field, value) in json.as_object().unwrap() {
            if let Some(text) = value.as_str() {
                assert!(
                    text.len() <= limits.max_field_bytes,
                    "{field} has {} bytes",
                    text.len()
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn mutated_captures_never_panic_and_accepted_ones_respect_the_caps(
        which in prop::sample::select(CAPTURES),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut xml = capture(which);
        for mutation in &mutations {
            xml = apply(xml, mutation);
        }
        if let Ok(report) = smi::parse(&xml) {
            respects_caps(&report, Limits::DEFAULT);
            // Accepted output renders to NDJSON, one line per GPU.
            prop_assert_eq!(report.to_ndjson().lines().count(), report.gpus.len());
        }
    }

    #[test]
    fn tight_caps_are_never_exceeded_whatever_the_input(
        which in prop::sample::select(CAPTURES),
        mutation in mutation(),
        max_field_bytes in 1usize..64,
        max_gpus in 0usize..3,
    ) {
        let limits = Limits { max_field_bytes, max_gpus, ..Limits::DEFAULT };
        let xml = apply(capture(which), &mutation);
        if let Ok(report) = smi::parse_with_limits(&xml, limits) {
            respects_caps(&report, limits);
        }
    }

    #[test]
    fn every_strict_prefix_of_a_capture_is_rejected(
        which in prop::sample::select(CAPTURES),
        cut in any::<prop::sample::Index>(),
    ) {
        let xml = capture(which);
        let end = xml.windows(17).rposition(|w| w == b"</nvidia_smi_log>").unwrap();
        let cut = cut.index(end + 16);
        prop_assert!(smi::parse(&xml[..cut]).is_err(), "prefix of {} bytes was accepted", cut);
    }
}
