//! The streaming state machine over quick-xml events.

use quick_xml::Reader;
use quick_xml::events::{BytesRef, BytesStart, Event};

use super::absent::present;
use super::fields::{Field, GpuChild, Section, gpu_child, header_field, section_field};
use super::pci::canonical_bus_id;
use super::{
    FAILURE_TEXT_LIMIT, Limits, Location, MigMode, ParseError, ParseWarning, SmiGpu, SmiReport,
};

const ROOT: &[u8] = b"nvidia_smi_log";

/// Where the reader currently is. Only the scopes that lead to a kept field
/// are distinguished; everything else is `Ignored`, so an unknown subtree of
/// any size costs one stack slot per level and no allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Log,
    Gpu,
    Section(Section),
    Field(Field),
    Ignored,
}

/// Raw text of every kept element, before normalisation.
struct Captures {
    values: [Option<String>; Field::COUNT],
}

impl Captures {
    fn new() -> Self {
        Captures {
            values: std::array::from_fn(|_| None),
        }
    }

    fn raw(&self, field: Field) -> Option<&str> {
        self.values[field.slot()].as_deref()
    }
}

struct GpuInProgress {
    index: u32,
    id_attribute: Option<String>,
    captures: Captures,
}

struct State {
    limits: Limits,
    stack: Vec<Scope>,
    root_seen: bool,
    root_closed: bool,
    dtd: Option<String>,
    header: Captures,
    gpu: Option<GpuInProgress>,
    gpus: Vec<SmiGpu>,
    warnings: Vec<ParseWarning>,
    text: String,
    /// Text outside any element before the root (nvidia-smi's failure
    /// message when it printed one instead of XML), bounded.
    stray_text: String,
}

pub(super) fn parse_document(xml: &[u8], limits: Limits) -> Result<SmiReport, ParseError> {
    let mut reader = Reader::from_reader(xml);
    let mut state = State::new(limits);
    loop {
        let event = reader
            .read_event()
            .map_err(|err| xml_error(reader.error_position(), &err))?;
        if state.on_event(event)? == Flow::End {
            return state.finish();
        }
    }
}

/// The same state machine over a document that arrives in pieces: memory
/// stays one event's bytes plus the reader's buffer, whatever the size of
/// the document. Events are identical to [`parse_document`]'s (quick-xml's
/// buffered and borrowed readers share their parser), and the whole-document
/// checks are the caller's ([`super::DocumentCheck`]).
pub(super) async fn parse_document_async<R>(
    input: R,
    limits: Limits,
) -> Result<SmiReport, ParseError>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    let mut reader = Reader::from_reader(input);
    let mut state = State::new(limits);
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        let event = reader
            .read_event_into_async(&mut buffer)
            .await
            .map_err(|err| xml_error(reader.error_position(), &err))?;
        if state.on_event(event)? == Flow::End {
            return state.finish();
        }
    }
}

fn xml_error(position: u64, err: &quick_xml::Error) -> ParseError {
    ParseError::Xml {
        position,
        message: bounded_message(&err.to_string()),
    }
}

/// Whether the document goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    More,
    End,
}

impl State {
    fn new(limits: Limits) -> Self {
        State {
            limits,
            stack: Vec::with_capacity(16),
            root_seen: false,
            root_closed: false,
            dtd: None,
            header: Captures::new(),
            gpu: None,
            gpus: Vec::new(),
            warnings: Vec::new(),
            text: String::new(),
            stray_text: String::new(),
        }
    }

    fn on_event(&mut self, event: Event<'_>) -> Result<Flow, ParseError> {
        match event {
            Event::Start(start) => self.open(&start)?,
            Event::Empty(start) => {
                self.open(&start)?;
                self.close()?;
            }
            Event::End(_) => self.close()?,
            Event::Text(text) => {
                if let Some(field) = self.capturing() {
                    let decoded = text.decode().map_err(|err| self.invalid_text(field, err))?;
                    self.append(field, &decoded)?;
                } else if !self.root_seen
                    && let Ok(decoded) = text.decode()
                {
                    self.keep_stray_text(&decoded);
                }
            }
            Event::GeneralRef(reference) if !self.root_seen => {
                if let Ok(resolved) = resolve_reference(&reference) {
                    self.keep_stray_text(&resolved);
                }
            }
            Event::CData(cdata) => {
                if let Some(field) = self.capturing() {
                    let decoded = cdata
                        .decode()
                        .map_err(|err| self.invalid_text(field, err))?;
                    self.append(field, &decoded)?;
                }
            }
            Event::GeneralRef(reference) => {
                if let Some(field) = self.capturing() {
                    let resolved = resolve_reference(&reference)
                        .map_err(|message| self.invalid_text(field, message))?;
                    self.append(field, &resolved)?;
                }
            }
            Event::DocType(doctype) => {
                // The DTD name is informational; an undecodable DOCTYPE is
                // not worth rejecting a document for.
                if let Ok(content) = doctype.decode() {
                    self.dtd = dtd_name(&content, self.limits.max_field_bytes);
                }
            }
            Event::Eof => return Ok(Flow::End),
            Event::Decl(_) | Event::PI(_) | Event::Comment(_) => {}
        }
        Ok(Flow::More)
    }
}

impl State {
    /// Collects text before the root, whitespace collapsed, up to
    /// [`FAILURE_TEXT_LIMIT`] characters (a huge text costs no more).
    fn keep_stray_text(&mut self, text: &str) {
        for word in text.split_whitespace() {
            let used = self.stray_text.chars().count();
            if used >= FAILURE_TEXT_LIMIT {
                return;
            }
            if used > 0 {
                self.stray_text.push(' ');
            }
            let room = FAILURE_TEXT_LIMIT.saturating_sub(used + usize::from(used > 0));
            self.stray_text.extend(word.chars().take(room));
        }
    }

    fn location(&self) -> Location {
        match &self.gpu {
            Some(gpu) => Location::Gpu(gpu.index),
            None => Location::Document,
        }
    }

    fn capturing(&self) -> Option<Field> {
        match self.stack.last() {
            Some(Scope::Field(field)) => Some(*field),
            _ => None,
        }
    }

    fn invalid_text(&self, field: Field, err: impl std::fmt::Display) -> ParseError {
        ParseError::InvalidText {
            element: field.element(),
            location: self.location(),
            message: err.to_string(),
        }
    }

    fn open(&mut self, start: &BytesStart<'_>) -> Result<(), ParseError> {
        if self.stack.len() >= self.limits.max_depth {
            return Err(ParseError::TooDeep {
                limit: self.limits.max_depth,
            });
        }
        let local_name = start.local_name();
        let name = local_name.as_ref();
        let scope = match self.stack.last().copied() {
            None => {
                if self.root_closed {
                    return Err(ParseError::TrailingElement {
                        found: printable_name(name),
                    });
                }
                if name != ROOT {
                    return Err(ParseError::NotNvidiaSmi {
                        found: printable_name(name),
                    });
                }
                self.root_seen = true;
                Scope::Log
            }
            Some(Scope::Log) if name == b"gpu" => {
                self.begin_gpu(start)?;
                Scope::Gpu
            }
            Some(Scope::Log) => header_field(name).map_or(Scope::Ignored, Scope::Field),
            Some(Scope::Gpu) => match gpu_child(name) {
                Some(GpuChild::Field(field)) => Scope::Field(field),
                Some(GpuChild::Section(section)) => Scope::Section(section),
                None => Scope::Ignored,
            },
            Some(Scope::Section(section)) => {
                section_field(section, name).map_or(Scope::Ignored, Scope::Field)
            }
            Some(Scope::Field(_) | Scope::Ignored) => Scope::Ignored,
        };
        if let Scope::Field(field) = scope {
            if self.captures().raw(field).is_some() {
                return Err(ParseError::DuplicateElement {
                    element: field.element(),
                    location: self.location(),
                });
            }
            self.text.clear();
        }
        self.stack.push(scope);
        Ok(())
    }

    fn captures(&mut self) -> &mut Captures {
        match &mut self.gpu {
            Some(gpu) => &mut gpu.captures,
            None => &mut self.header,
        }
    }

    fn begin_gpu(&mut self, start: &BytesStart<'_>) -> Result<(), ParseError> {
        if self.gpus.len() >= self.limits.max_gpus {
            return Err(ParseError::TooManyGpus {
                limit: self.limits.max_gpus,
            });
        }
        // Bounded by max_gpus, which is far below u32::MAX.
        let index = u32::try_from(self.gpus.len()).unwrap_or(u32::MAX);
        let location = Location::Gpu(index);
        let id_attribute = match start.try_get_attribute("id") {
            Ok(Some(attribute)) => {
                if attribute.value.len() > self.limits.max_field_bytes {
                    return Err(ParseError::FieldTooLong {
                        element: "gpu id",
                        location,
                        limit: self.limits.max_field_bytes,
                    });
                }
                let value = attribute
                    .unescape_value()
                    .map_err(|err| ParseError::InvalidText {
                        element: "gpu id",
                        location,
                        message: err.to_string(),
                    })?;
                Some(value.into_owned())
            }
            Ok(None) => None,
            Err(err) => {
                return Err(ParseError::InvalidText {
                    element: "gpu id",
                    location,
                    message: err.to_string(),
                });
            }
        };
        self.gpu = Some(GpuInProgress {
            index,
            id_attribute,
            captures: Captures::new(),
        });
        Ok(())
    }

    fn append(&mut self, field: Field, text: &str) -> Result<(), ParseError> {
        if self.text.len() + text.len() > self.limits.max_field_bytes {
            return Err(ParseError::FieldTooLong {
                element: field.element(),
                location: self.location(),
                limit: self.limits.max_field_bytes,
            });
        }
        self.text.push_str(text);
        Ok(())
    }

    fn close(&mut self) -> Result<(), ParseError> {
        // quick-xml already rejects an end tag that does not match the open
        // one, so the stack cannot be empty here; stay defensive anyway.
        let Some(scope) = self.stack.pop() else {
            return Err(ParseError::Xml {
                position: 0,
                message: "unexpected end tag".into(),
            });
        };
        match scope {
            Scope::Field(field) => {
                let text = std::mem::take(&mut self.text);
                self.captures().values[field.slot()] = Some(text);
            }
            Scope::Gpu => {
                if let Some(gpu) = self.gpu.take() {
                    let finished = finish_gpu(gpu, &mut self.warnings);
                    self.gpus.push(finished);
                }
            }
            Scope::Log => self.root_closed = true,
            Scope::Section(_) | Scope::Ignored => {}
        }
        Ok(())
    }

    fn finish(mut self) -> Result<SmiReport, ParseError> {
        if !self.root_seen {
            if !self.stray_text.is_empty() {
                return Err(ParseError::SmiFailure {
                    text: self.stray_text,
                });
            }
            return Err(ParseError::Empty);
        }
        if !self.stack.is_empty() {
            return Err(ParseError::Truncated {
                unclosed: self.stack.len(),
            });
        }
        let header = &self.header;
        let driver_version = text(header, Field::DriverVersion);
        let cuda_version = text(header, Field::CudaVersion);
        let attached_gpus = number::<u32>(header, Field::AttachedGpus, None, &mut self.warnings);
        for gpu in &mut self.gpus {
            gpu.driver_version.clone_from(&driver_version);
            gpu.cuda_version.clone_from(&cuda_version);
        }
        if let Some(attached) = attached_gpus
            && usize::try_from(attached).ok() != Some(self.gpus.len())
        {
            self.warnings.push(ParseWarning {
                gpu: None,
                element: Field::AttachedGpus.element().to_owned(),
                value: attached.to_string(),
                problem: format!("the document has {} <gpu> elements", self.gpus.len()),
            });
        }
        Ok(SmiReport {
            timestamp: text(&self.header, Field::Timestamp),
            driver_version,
            cuda_version,
            attached_gpus,
            dtd: self.dtd,
            gpus: self.gpus,
            warnings: self.warnings,
        })
    }
}

fn finish_gpu(gpu: GpuInProgress, warnings: &mut Vec<ParseWarning>) -> SmiGpu {
    let captures = &gpu.captures;
    let at = Some(gpu.index);
    SmiGpu {
        index: gpu.index,
        pci_bus_id: pci_bus_id(&gpu, warnings),
        uuid: text(captures, Field::Uuid),
        serial: text(captures, Field::Serial),
        pdi: text(captures, Field::Pdi),
        minor_number: number(captures, Field::MinorNumber, at, warnings),
        product_name: text(captures, Field::ProductName),
        product_brand: text(captures, Field::ProductBrand),
        architecture: text(captures, Field::ProductArchitecture),
        board_part_number: text(captures, Field::BoardPartNumber),
        gpu_part_number: text(captures, Field::GpuPartNumber),
        board_id: text(captures, Field::BoardId),
        vbios_version: text(captures, Field::VbiosVersion),
        inforom_image_version: text(captures, Field::InforomImage),
        driver_version: None,
        cuda_version: None,
        chassis_serial: text(captures, Field::ChassisSerialNumber),
        slot_number: number(captures, Field::SlotNumber, at, warnings),
        tray_index: number(captures, Field::TrayIndex, at, warnings),
        host_id: number(captures, Field::HostId, at, warnings),
        peer_type: text(captures, Field::PeerType),
        module_id: number(captures, Field::ModuleId, at, warnings),
        gpu_fabric_guid: text(captures, Field::GpuFabricGuid),
        fabric_clique_id: number(captures, Field::CliqueId, at, warnings),
        fabric_cluster_uuid: text(captures, Field::ClusterUuid),
        fabric_state: text(captures, Field::FabricState),
        fabric_status: text(captures, Field::FabricStatus),
        mig_mode: mig_mode(captures, Field::CurrentMig, at, warnings),
        mig_mode_pending: mig_mode(captures, Field::PendingMig, at, warnings),
        fb_memory_total_mib: mebibytes(captures, Field::FbMemoryTotal, at, warnings),
    }
}

fn text(captures: &Captures, field: Field) -> Option<String> {
    captures.raw(field).and_then(present).map(str::to_owned)
}

fn warn(
    warnings: &mut Vec<ParseWarning>,
    gpu: Option<u32>,
    element: &str,
    value: &str,
    problem: &str,
) {
    warnings.push(ParseWarning {
        gpu,
        element: element.to_owned(),
        value: value.to_owned(),
        problem: problem.to_owned(),
    });
}

fn number<T: std::str::FromStr>(
    captures: &Captures,
    field: Field,
    gpu: Option<u32>,
    warnings: &mut Vec<ParseWarning>,
) -> Option<T> {
    let value = captures.raw(field).and_then(present)?;
    match value.parse::<T>() {
        Ok(parsed) => Some(parsed),
        Err(_) => {
            warn(
                warnings,
                gpu,
                field.element(),
                value,
                "not a non-negative integer",
            );
            None
        }
    }
}

fn mig_mode(
    captures: &Captures,
    field: Field,
    gpu: Option<u32>,
    warnings: &mut Vec<ParseWarning>,
) -> Option<MigMode> {
    let value = captures.raw(field).and_then(present)?;
    if value.eq_ignore_ascii_case("enabled") {
        Some(MigMode::Enabled)
    } else if value.eq_ignore_ascii_case("disabled") {
        Some(MigMode::Disabled)
    } else {
        warn(
            warnings,
            gpu,
            field.element(),
            value,
            "expected Enabled or Disabled",
        );
        None
    }
}

/// `<total>196608 MiB</total>` → 196608.
fn mebibytes(
    captures: &Captures,
    field: Field,
    gpu: Option<u32>,
    warnings: &mut Vec<ParseWarning>,
) -> Option<u64> {
    let value = captures.raw(field).and_then(present)?;
    let parsed = value
        .strip_suffix("MiB")
        .map(str::trim_end)
        .and_then(|digits| digits.parse::<u64>().ok());
    if parsed.is_none() {
        warn(
            warnings,
            gpu,
            field.element(),
            value,
            "expected a size such as `81559 MiB`",
        );
    }
    parsed
}

/// The `id` attribute is the primary source; `<pci><pci_bus_id>` repeats it
/// and serves when the attribute is missing or unusable.
fn pci_bus_id(gpu: &GpuInProgress, warnings: &mut Vec<ParseWarning>) -> Option<String> {
    let candidates = [
        ("gpu id", gpu.id_attribute.as_deref()),
        (Field::PciBusId.element(), gpu.captures.raw(Field::PciBusId)),
    ];
    for (element, raw) in candidates {
        let Some(value) = raw.and_then(present) else {
            continue;
        };
        match canonical_bus_id(value) {
            Some(canonical) => return Some(canonical),
            None => warn(
                warnings,
                Some(gpu.index),
                element,
                value,
                "not a PCI bus id",
            ),
        }
    }
    None
}

fn resolve_reference(reference: &BytesRef<'_>) -> Result<String, String> {
    if let Some(ch) = reference
        .resolve_char_ref()
        .map_err(|err| err.to_string())?
    {
        return Ok(ch.to_string());
    }
    let name = reference.decode().map_err(|err| err.to_string())?;
    quick_xml::escape::resolve_predefined_entity(&name)
        .map(str::to_owned)
        .ok_or_else(|| format!("unknown entity &{name};"))
}

/// `nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd"` → `nvsmi_device_v13.dtd`.
fn dtd_name(doctype: &str, max_len: usize) -> Option<String> {
    let end = doctype.rfind('"')?;
    let start = doctype[..end].rfind('"')? + 1;
    let name = doctype[start..end].trim();
    (!name.is_empty() && name.len() <= max_len).then(|| name.to_owned())
}

/// quick-xml errors quote tag names, which a hostile document can make
/// arbitrarily long; keep error messages short enough for one log line.
fn bounded_message(message: &str) -> String {
    const MAX_CHARS: usize = 256;
    if message.chars().count() <= MAX_CHARS {
        return message.to_owned();
    }
    let mut short: String = message.chars().take(MAX_CHARS).collect();
    short.push('…');
    short
}

/// Element names in errors are truncated and made printable so a hostile
/// document cannot flood a log line.
fn printable_name(name: &[u8]) -> String {
    let text = String::from_utf8_lossy(&name[..name.len().min(64)]);
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}
