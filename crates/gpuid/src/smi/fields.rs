//! Which elements the parser keeps, addressed by their path in the document.
//!
//! Matching on the full path (not just the element name) matters: names such
//! as `<total>`, `<state>` or `<value>` occur in several sections with
//! unrelated meanings.

/// A section inside `<gpu>` that holds fields we keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    MigMode,
    PlatformInfo,
    InforomVersion,
    Pci,
    Fabric,
    FbMemoryUsage,
}

/// Every captured element. The discriminant indexes the capture table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    // Document header, children of <nvidia_smi_log>.
    Timestamp,
    DriverVersion,
    CudaVersion,
    AttachedGpus,
    // Direct children of <gpu>.
    ProductName,
    ProductBrand,
    ProductArchitecture,
    Serial,
    Uuid,
    Pdi,
    MinorNumber,
    VbiosVersion,
    BoardId,
    BoardPartNumber,
    GpuPartNumber,
    // <mig_mode>
    CurrentMig,
    PendingMig,
    // <platformInfo>
    ChassisSerialNumber,
    SlotNumber,
    TrayIndex,
    HostId,
    PeerType,
    ModuleId,
    GpuFabricGuid,
    // <inforom_version>
    InforomImage,
    // <pci>
    PciBusId,
    // <fabric>
    FabricState,
    FabricStatus,
    CliqueId,
    ClusterUuid,
    // <fb_memory_usage>
    FbMemoryTotal,
}

impl Field {
    pub(super) const COUNT: usize = Field::FbMemoryTotal as usize + 1;

    pub(super) fn slot(self) -> usize {
        self as usize
    }

    /// The element name, for error messages and warnings.
    pub(super) fn element(self) -> &'static str {
        match self {
            Field::Timestamp => "timestamp",
            Field::DriverVersion => "driver_version",
            Field::CudaVersion => "cuda_version",
            Field::AttachedGpus => "attached_gpus",
            Field::ProductName => "product_name",
            Field::ProductBrand => "product_brand",
            Field::ProductArchitecture => "product_architecture",
            Field::Serial => "serial",
            Field::Uuid => "uuid",
            Field::Pdi => "pdi",
            Field::MinorNumber => "minor_number",
            Field::VbiosVersion => "vbios_version",
            Field::BoardId => "board_id",
            Field::BoardPartNumber => "board_part_number",
            Field::GpuPartNumber => "gpu_part_number",
            Field::CurrentMig => "current_mig",
            Field::PendingMig => "pending_mig",
            Field::ChassisSerialNumber => "chassis_serial_number",
            Field::SlotNumber => "slot_number",
            Field::TrayIndex => "tray_index",
            Field::HostId => "host_id",
            Field::PeerType => "peer_type",
            Field::ModuleId => "module_id",
            Field::GpuFabricGuid => "gpu_fabric_guid",
            Field::InforomImage => "img_version",
            Field::PciBusId => "pci_bus_id",
            Field::FabricState => "state",
            Field::FabricStatus => "status",
            Field::CliqueId => "cliqueId",
            Field::ClusterUuid => "clusterUuid",
            Field::FbMemoryTotal => "total",
        }
    }
}

/// A child of `<gpu>` that matters to us.
pub(super) enum GpuChild {
    Field(Field),
    Section(Section),
}

pub(super) fn header_field(name: &[u8]) -> Option<Field> {
    Some(match name {
        b"timestamp" => Field::Timestamp,
        b"driver_version" => Field::DriverVersion,
        b"cuda_version" => Field::CudaVersion,
        b"attached_gpus" => Field::AttachedGpus,
        _ => return None,
    })
}

pub(super) fn gpu_child(name: &[u8]) -> Option<GpuChild> {
    let field = match name {
        b"product_name" => Field::ProductName,
        b"product_brand" => Field::ProductBrand,
        b"product_architecture" => Field::ProductArchitecture,
        b"serial" => Field::Serial,
        b"uuid" => Field::Uuid,
        b"pdi" => Field::Pdi,
        b"minor_number" => Field::MinorNumber,
        b"vbios_version" => Field::VbiosVersion,
        b"board_id" => Field::BoardId,
        b"board_part_number" => Field::BoardPartNumber,
        b"gpu_part_number" => Field::GpuPartNumber,
        b"mig_mode" => return Some(GpuChild::Section(Section::MigMode)),
        b"platformInfo" => return Some(GpuChild::Section(Section::PlatformInfo)),
        b"inforom_version" => return Some(GpuChild::Section(Section::InforomVersion)),
        b"pci" => return Some(GpuChild::Section(Section::Pci)),
        b"fabric" => return Some(GpuChild::Section(Section::Fabric)),
        b"fb_memory_usage" => return Some(GpuChild::Section(Section::FbMemoryUsage)),
        _ => return None,
    };
    Some(GpuChild::Field(field))
}

pub(super) fn section_field(section: Section, name: &[u8]) -> Option<Field> {
    Some(match (section, name) {
        (Section::MigMode, b"current_mig") => Field::CurrentMig,
        (Section::MigMode, b"pending_mig") => Field::PendingMig,
        (Section::PlatformInfo, b"chassis_serial_number") => Field::ChassisSerialNumber,
        (Section::PlatformInfo, b"slot_number") => Field::SlotNumber,
        (Section::PlatformInfo, b"tray_index") => Field::TrayIndex,
        (Section::PlatformInfo, b"host_id") => Field::HostId,
        (Section::PlatformInfo, b"peer_type") => Field::PeerType,
        (Section::PlatformInfo, b"module_id") => Field::ModuleId,
        (Section::PlatformInfo, b"gpu_fabric_guid") => Field::GpuFabricGuid,
        (Section::InforomVersion, b"img_version") => Field::InforomImage,
        (Section::Pci, b"pci_bus_id") => Field::PciBusId,
        (Section::Fabric, b"state") => Field::FabricState,
        (Section::Fabric, b"status") => Field::FabricStatus,
        (Section::Fabric, b"cliqueId") => Field::CliqueId,
        (Section::Fabric, b"clusterUuid") => Field::ClusterUuid,
        (Section::FbMemoryUsage, b"total") => Field::FbMemoryTotal,
        _ => return None,
    })
}
