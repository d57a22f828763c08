//! Hostile or odd input: every cap is enforced with a typed error, and
//! the XML features nvidia-smi never uses are still handled correctly.

use std::io::Read;

use gpuid::smi::{self, Limits, Location, ParseError};

fn doc(gpus: &str) -> Vec<u8> {
    format!(
        "<?xml version=\"1.0\" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v13.dtd\">\n<nvidia_smi_log><driver_version>580.1</driver_version>{gpus}</nvidia_smi_log>"
    )
    .into_bytes()
}

fn gpu(uuid: &str) -> String {
    format!("<gpu id=\"00000000:01:00.0\"><uuid>{uuid}</uuid></gpu>")
}

#[test]
fn input_over_four_mebibytes_is_rejected_before_parsing() {
    let mut xml = doc(&gpu("GPU-1"));
    xml.resize(Limits::DEFAULT.max_input_bytes + 1, b' ');
    assert_eq!(
        smi::parse(&xml),
        Err(ParseError::InputTooLarge {
            limit: 4 * 1024 * 1024
        })
    );
}

#[test]
fn an_endless_reader_is_cut_off_at_the_input_cap() {
    let endless = std::io::repeat(b' ');
    assert_eq!(
        smi::parse_reader(endless, Limits::DEFAULT),
        Err(ParseError::InputTooLarge {
            limit: Limits::DEFAULT.max_input_bytes
        })
    );
}

#[test]
fn more_gpus_than_the_cap_are_rejected() {
    let limits = Limits {
        max_gpus: 3,
        ..Limits::DEFAULT
    };
    let three = doc(&gpu("GPU-1").repeat(3));
    assert_eq!(
        smi::parse_with_limits(&three, limits).unwrap().gpus.len(),
        3
    );
    let four = doc(&gpu("GPU-1").repeat(4));
    assert_eq!(
        smi::parse_with_limits(&four, limits),
        Err(ParseError::TooManyGpus { limit: 3 })
    );
    let default_cap = doc(&"<gpu/>".repeat(1025));
    assert_eq!(
        smi::parse(&default_cap),
        Err(ParseError::TooManyGpus { limit: 1024 })
    );
}

#[test]
fn a_kept_field_longer_than_four_kibibytes_is_rejected_and_one_at_the_limit_is_kept() {
    let at_limit = doc(&format!("<gpu><serial>{}</serial></gpu>", "7".repeat(4096)));
    assert_eq!(
        smi::parse(&at_limit).unwrap().gpus[0]
            .serial
            .as_ref()
            .map(String::len),
        Some(4096)
    );
    let over = doc(&format!("<gpu><serial>{}</serial></gpu>", "7".repeat(4097)));
    assert_eq!(
        smi::parse(&over),
        Err(ParseError::FieldTooLong {
            element: "serial",
            location: Location::Gpu(0),
            limit: 4096
        })
    );
    let long_id = doc(&format!("<gpu id=\"{}\"></gpu>", "0".repeat(5000)));
    assert!(matches!(
        smi::parse(&long_id),
        Err(ParseError::FieldTooLong {
            element: "gpu id",
            ..
        })
    ));
}

#[test]
fn huge_text_in_an_element_we_do_not_keep_is_skipped_without_error() {
    let xml = doc(&format!(
        "<gpu><uuid>GPU-1</uuid><supported_clocks>{}</supported_clocks></gpu>",
        "x".repeat(1 << 20)
    ));
    assert_eq!(
        smi::parse(&xml).unwrap().gpus[0].uuid.as_deref(),
        Some("GPU-1")
    );
}

#[test]
fn nesting_deeper_than_the_cap_is_rejected() {
    let deep = doc(&format!(
        "<gpu>{}{}</gpu>",
        "<a>".repeat(70),
        "</a>".repeat(70)
    ));
    assert_eq!(smi::parse(&deep), Err(ParseError::TooDeep { limit: 64 }));
}

#[test]
fn a_truncated_document_is_an_error_not_a_partial_inventory() {
    let xml = doc(&gpu("GPU-1").repeat(2));
    let cut = &xml[..xml.len() - "</nvidia_smi_log>".len()];
    assert!(matches!(
        smi::parse(cut),
        Err(ParseError::Truncated { unclosed: 1 })
    ));
    let mid_gpu = &xml[..xml.len() - 40];
    assert!(smi::parse(mid_gpu).is_err());
}

#[test]
fn documents_that_are_not_nvidia_smi_output_are_rejected() {
    assert_eq!(smi::parse(b""), Err(ParseError::Empty));
    assert_eq!(smi::parse(b"   \n"), Err(ParseError::Empty));
    assert_eq!(
        smi::parse(b"<html><body>502</body></html>"),
        Err(ParseError::NotNvidiaSmi {
            found: "html".into()
        })
    );
    assert!(matches!(
        smi::parse(b"<!-- nothing -->\n"),
        Err(ParseError::Empty)
    ));
    let two_roots = [doc(""), doc("")].concat();
    assert!(matches!(
        smi::parse(&two_roots),
        Err(ParseError::Xml { .. } | ParseError::TrailingElement { .. })
    ));
}

#[test]
fn nvidia_smis_own_failure_text_is_quoted_instead_of_called_empty() {
    let driver = b"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n\n";
    let error = smi::parse(driver).unwrap_err();
    assert_eq!(
        error.to_string(),
        "nvidia-smi reported: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
    );
    let mismatch = smi::parse(b"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.86\n").unwrap_err();
    assert_eq!(
        mismatch,
        ParseError::SmiFailure {
            text: "Failed to initialize NVML: Driver/library version mismatch NVML library version: 570.86".into()
        }
    );
    let endless = "word ".repeat(10_000);
    let ParseError::SmiFailure { text } = smi::parse(endless.as_bytes()).unwrap_err() else {
        panic!("not quoted")
    };
    assert!(
        text.chars().count() <= smi::FAILURE_TEXT_LIMIT,
        "{}",
        text.len()
    );
    assert!(text.starts_with("word word"));
}

#[test]
fn a_nul_byte_or_invalid_utf8_anywhere_is_an_error_even_in_skipped_elements() {
    let clean = doc("<gpu><unknown_telemetry>x</unknown_telemetry><uuid>GPU-1</uuid></gpu>");
    assert!(smi::parse(&clean).is_ok());
    let at = |needle: &[u8]| {
        clean
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap()
    };
    let skipped = at(b">x<") + 1;
    let mut nul = clean.clone();
    nul[skipped] = 0;
    assert_eq!(
        smi::parse(&nul),
        Err(ParseError::ControlCharacter {
            position: skipped as u64,
            byte: 0
        })
    );
    let mut bell = clean.clone();
    bell[skipped] = 0x07;
    assert!(matches!(
        smi::parse(&bell),
        Err(ParseError::ControlCharacter { byte: 0x07, .. })
    ));
    let mut latin1 = clean.clone();
    latin1[skipped] = 0xe9;
    assert_eq!(
        smi::parse(&latin1),
        Err(ParseError::InvalidUtf8 {
            position: skipped as u64
        })
    );
    let mut in_comment = clean.clone();
    in_comment.splice(0..0, b"<!-- \xff -->".iter().copied());
    assert!(matches!(
        smi::parse(&in_comment),
        Err(ParseError::InvalidUtf8 { position: 5 })
    ));
    let with_tabs = doc("<gpu>\t\r\n<uuid>GPU-1</uuid></gpu>");
    assert!(smi::parse(&with_tabs).is_ok(), "tab, CR and LF are allowed");
}

#[test]
fn a_field_repeated_within_one_gpu_is_rejected_rather_than_guessed() {
    let xml = doc("<gpu><serial>1</serial><serial>2</serial></gpu>");
    assert_eq!(
        smi::parse(&xml),
        Err(ParseError::DuplicateElement {
            element: "serial",
            location: Location::Gpu(0)
        })
    );
}

#[test]
fn entities_character_references_and_cdata_in_kept_fields_are_decoded() {
    let xml = doc("<gpu><product_name>A &amp; B &#x43;<![CDATA[<D>]]></product_name></gpu>");
    assert_eq!(
        smi::parse(&xml).unwrap().gpus[0].product_name.as_deref(),
        Some("A & B C<D>")
    );
    let unknown = doc("<gpu><product_name>&bogus;</product_name></gpu>");
    assert!(matches!(
        smi::parse(&unknown),
        Err(ParseError::InvalidText {
            element: "product_name",
            ..
        })
    ));
}

#[test]
fn unparseable_numbers_become_warnings_that_keep_the_original_text() {
    let xml = doc("<gpu><platformInfo><module_id>seven</module_id></platformInfo></gpu>");
    let report = smi::parse(&xml).unwrap();
    assert_eq!(report.gpus[0].module_id, None);
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    let module = &report.warnings[0];
    assert_eq!(
        (module.gpu, module.element.as_str(), module.value.as_str()),
        (Some(0), "module_id", "seven")
    );
}

#[test]
fn fewer_gpus_than_attached_gpus_is_reported_as_a_warning() {
    let xml = br#"<nvidia_smi_log><attached_gpus>2</attached_gpus><gpu><uuid>GPU-1</uuid></gpu></nvidia_smi_log>"#;
    let report = smi::parse(xml).unwrap();
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(report.warnings[0].element, "attached_gpus");
}

#[test]
fn parse_to_ndjson_prints_one_line_per_gpu() {
    let xml = doc(&[gpu("GPU-1"), gpu("GPU-2")].concat());
    let ndjson = smi::parse_to_ndjson(xml.as_slice()).unwrap();
    let lines: Vec<serde_json::Value> = ndjson
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["uuid"], "GPU-2");
    assert_eq!(lines[1]["index"], 1);
    assert_eq!(lines[1]["driver_version"], "580.1");
    let mut failing = std::io::empty().chain(FailingReader);
    assert!(matches!(
        smi::parse_to_ndjson(&mut failing),
        Err(ParseError::Io { .. })
    ));
}

struct FailingReader;

impl Read for FailingReader {
    fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
        Err(std::io::Error::other("exec stream reset"))
    }
}

#[test]
fn a_byte_order_mark_or_a_warning_line_before_the_document_is_tolerated() {
    let with_bom = [b"\xEF\xBB\xBF".as_slice(), &doc(&gpu("GPU-1"))].concat();
    assert_eq!(smi::parse(&with_bom).unwrap().gpus.len(), 1);
    let with_warning = [
        b"WARNING: infoROM is corrupted at gpu 0000:01:00.0\n".as_slice(),
        &doc(&gpu("GPU-1")),
    ]
    .concat();
    assert_eq!(smi::parse(&with_warning).unwrap().gpus.len(), 1);
}

#[test]
fn a_document_without_gpus_parses_to_an_empty_inventory() {
    let report = smi::parse(&doc("")).unwrap();
    assert!(report.gpus.is_empty());
    assert_eq!(report.driver_version.as_deref(), Some("580.1"));
    assert_eq!(report.to_ndjson(), "");
}
