//! Parser for `nvidia-smi -q -x` output.
//!
//! The document is large (≈ 360 KB for 8 × B200) and almost all of it is
//! telemetry gpuid does not need, so the parser streams it with quick-xml and
//! keeps only the identity and location fields, by path. Unknown elements,
//! the DOCTYPE (DTD v12 or v13) and both PCI id spellings are accepted; every
//! placeholder spelling of "no value" becomes `None`.
//!
//! Input comes from another container over an exec stream, so it is treated
//! as hostile: size, GPU count, field length and nesting depth are capped and
//! exceeding a cap is an error, never an unbounded allocation.

mod absent;
mod check;
mod fields;
mod pci;
mod reader;

use std::io::Read;

use serde::{Deserialize, Serialize};

pub use absent::present;
pub use check::DocumentCheck;
pub use pci::canonical_bus_id;

/// Caps applied while parsing. [`Limits::DEFAULT`] fits every real capture
/// with a wide margin (the largest, 8 × B200, is 357 KB).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted document, in bytes.
    pub max_input_bytes: usize,
    /// Most `<gpu>` elements in one document.
    pub max_gpus: usize,
    /// Longest text of one captured field (or the `id` attribute), in bytes.
    pub max_field_bytes: usize,
    /// Deepest element nesting; nvidia-smi uses about six levels.
    pub max_depth: usize,
}

impl Limits {
    pub const DEFAULT: Limits = Limits {
        max_input_bytes: 4 * 1024 * 1024,
        max_gpus: 1024,
        max_field_bytes: 4 * 1024,
        max_depth: 64,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// MIG mode as nvidia-smi reports it for a GPU that supports MIG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MigMode {
    Enabled,
    Disabled,
}

/// One GPU of an `nvidia-smi -q -x` document. Absent values are `None`;
/// serials and other identifiers stay strings (some serials start with `0`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmiGpu {
    /// Position in the document. nvidia-smi lists GPUs in its own index order
    /// (the `-i` index), which is not the minor number and may change at boot.
    pub index: u32,
    /// Canonical PCI bus id (`00000000:29:00.0`), from the `id` attribute or,
    /// failing that, `<pci><pci_bus_id>`.
    pub pci_bus_id: Option<String>,
    pub uuid: Option<String>,
    /// Board/module serial. Shared by the two GPUs of a GB200/GB300 module.
    pub serial: Option<String>,
    /// Per-device identifier (DTD v13 and later).
    pub pdi: Option<String>,
    pub minor_number: Option<u32>,
    pub product_name: Option<String>,
    pub product_brand: Option<String>,
    pub architecture: Option<String>,
    pub board_part_number: Option<String>,
    pub gpu_part_number: Option<String>,
    pub board_id: Option<String>,
    pub vbios_version: Option<String>,
    pub inforom_image_version: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// NVML platform info: on NVL72 systems this is the rack-scale NVLink
    /// chassis shared by many nodes, not the node's own enclosure.
    pub chassis_serial: Option<String>,
    pub slot_number: Option<u32>,
    pub tray_index: Option<u32>,
    pub host_id: Option<u32>,
    pub peer_type: Option<String>,
    pub module_id: Option<u32>,
    pub gpu_fabric_guid: Option<String>,
    pub fabric_clique_id: Option<u32>,
    pub fabric_cluster_uuid: Option<String>,
    pub fabric_state: Option<String>,
    pub fabric_status: Option<String>,
    pub mig_mode: Option<MigMode>,
    pub mig_mode_pending: Option<MigMode>,
    pub fb_memory_total_mib: Option<u64>,
}

/// A value that was present but could not be interpreted (for example a
/// non-numeric `<module_id>`). The field is `None` in the record; the warning
/// keeps the original text so nothing is silently lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParseWarning {
    /// Document position of the GPU, or `None` for document-level fields.
    pub gpu: Option<u32>,
    pub element: String,
    pub value: String,
    pub problem: String,
}

impl std::fmt::Display for ParseWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let location = match self.gpu {
            Some(index) => Location::Gpu(index),
            None => Location::Document,
        };
        write!(
            f,
            "<{}> {location} is {:?}: {}",
            self.element, self.value, self.problem
        )
    }
}

/// The parsed document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SmiReport {
    /// nvidia-smi's own `<timestamp>`, verbatim (local time of the node, no
    /// zone), kept for provenance; records carry the collector's time.
    pub timestamp: Option<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
    /// `<attached_gpus>`: how many GPUs the driver saw. Fewer `<gpu>`
    /// elements than this points at truncated output (see warnings).
    pub attached_gpus: Option<u32>,
    /// The DTD named in the DOCTYPE, e.g. `nvsmi_device_v13.dtd`.
    pub dtd: Option<String>,
    pub gpus: Vec<SmiGpu>,
    pub warnings: Vec<ParseWarning>,
}

impl SmiReport {
    /// One JSON object per GPU, one per line, in document order.
    pub fn to_ndjson(&self) -> String {
        crate::ndjson::to_ndjson(&self.gpus)
    }
}

/// Why a document was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("nvidia-smi output is larger than the {limit}-byte limit")]
    InputTooLarge { limit: usize },
    #[error("nvidia-smi output is empty: no <nvidia_smi_log> element")]
    Empty,
    /// Text instead of XML: nvidia-smi's own failure message (for example
    /// `NVIDIA-SMI has failed because it couldn't communicate with the
    /// NVIDIA driver`), quoted, whitespace collapsed, at most
    /// [`FAILURE_TEXT_LIMIT`] characters.
    #[error("nvidia-smi reported: {text}")]
    SmiFailure { text: String },
    /// XML allows no NUL and no other C0 control character but tab, line
    /// feed and carriage return, anywhere in the document.
    #[error(
        "nvidia-smi output has a control character (byte 0x{byte:02x}) at byte {position}; XML does not allow it"
    )]
    ControlCharacter { position: u64, byte: u8 },
    #[error("nvidia-smi output is not valid UTF-8 at byte {position}")]
    InvalidUtf8 { position: u64 },
    #[error("malformed nvidia-smi XML at byte {position}: {message}")]
    Xml { position: u64, message: String },
    #[error(
        "not nvidia-smi -q -x output: the root element is <{found}>, expected <nvidia_smi_log>"
    )]
    NotNvidiaSmi { found: String },
    #[error("malformed nvidia-smi XML: a second root element <{found}> follows </nvidia_smi_log>")]
    TrailingElement { found: String },
    #[error(
        "nvidia-smi XML ends with {unclosed} unclosed element(s); the output was probably truncated"
    )]
    Truncated { unclosed: usize },
    #[error("nvidia-smi XML lists more than {limit} GPUs")]
    TooManyGpus { limit: usize },
    #[error("<{element}> {location} is longer than the {limit}-byte limit")]
    FieldTooLong {
        element: &'static str,
        location: Location,
        limit: usize,
    },
    #[error("nvidia-smi XML nests elements deeper than {limit} levels")]
    TooDeep { limit: usize },
    #[error("<{element}> appears more than once {location}")]
    DuplicateElement {
        element: &'static str,
        location: Location,
    },
    #[error("<{element}> {location} is not valid text: {message}")]
    InvalidText {
        element: &'static str,
        location: Location,
        message: String,
    },
    #[error("reading nvidia-smi output: {message}")]
    Io { message: String },
}

/// Longest quoted nvidia-smi failure text, in characters.
pub const FAILURE_TEXT_LIMIT: usize = 300;

/// Where in the document a problem was found, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    Document,
    Gpu(u32),
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Document => f.write_str("in the document header"),
            Location::Gpu(index) => write!(f, "in GPU #{index}"),
        }
    }
}

/// Parses a whole `nvidia-smi -q -x` document with [`Limits::DEFAULT`].
pub fn parse(xml: &[u8]) -> Result<SmiReport, ParseError> {
    parse_with_limits(xml, Limits::DEFAULT)
}

/// Parses a whole document with explicit caps.
pub fn parse_with_limits(xml: &[u8], limits: Limits) -> Result<SmiReport, ParseError> {
    // Size, control characters and UTF-8 of the whole document are checked
    // before parsing: the streaming parser decodes only the fields it
    // keeps, and a bad byte in a skipped element must not pass.
    let mut check = DocumentCheck::new(limits);
    check.accept(xml);
    check.finish()?;
    reader::parse_document(xml, limits)
}

/// Parses a document as it arrives from `input`, holding one XML event at a
/// time rather than the document. `input` must be fed through `check` too
/// (the caller owns both, so it can go on checking what is left after a
/// parse error, and stop feeding the parser at the first bad byte); the
/// result is `check.verdict(parse_async(..).await)`, which equals
/// [`parse_with_limits`] of the whole document.
pub async fn parse_async<R>(input: R, limits: Limits) -> Result<SmiReport, ParseError>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    reader::parse_document_async(input, limits).await
}

/// Reads at most [`Limits::DEFAULT`]`.max_input_bytes` from `input` (one byte
/// more is an error, so an endless stream cannot exhaust memory), parses it
/// and renders the GPUs as NDJSON. This is what `gpufleet gpuid parse` prints.
pub fn parse_to_ndjson(input: impl Read) -> Result<String, ParseError> {
    let report = parse_reader(input, Limits::DEFAULT)?;
    Ok(report.to_ndjson())
}

/// Reads a bounded document from `input` and parses it.
pub fn parse_reader(input: impl Read, limits: Limits) -> Result<SmiReport, ParseError> {
    let mut buffer = Vec::new();
    let cap = u64::try_from(limits.max_input_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    input
        .take(cap)
        .read_to_end(&mut buffer)
        .map_err(|err| ParseError::Io {
            message: err.to_string(),
        })?;
    parse_with_limits(&buffer, limits)
}
