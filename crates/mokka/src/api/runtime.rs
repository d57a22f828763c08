//! `RuntimeState`: the sparse runtime state of a GPU, shared by profile defaults
//! and runtime policies.
//!
//! Every field is optional so that "absent" (inherit) and an explicit zero (a
//! set value) stay distinct. A struct is either a *group* (all fields optional,
//! merged field by field) or a *value* (all fields required, replaced whole);
//! `PercentRange` is the only value struct.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Sparse runtime state of one GPU. Omitted fields inherit from broader layers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_state: Option<DeviceState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modes: Option<RuntimeModes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub telemetry: Option<RuntimeTelemetry>,
}

/// Health the simulated GPU reports.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum DeviceState {
    Healthy,
    Degraded,
    Failed,
}

/// An on/off device mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Toggle {
    Enabled,
    Disabled,
}

/// NVML compute mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ComputeMode {
    Default,
    Exclusive,
    Prohibited,
}

/// Device modes (group).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeModes {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<Toggle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<ComputeMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<Toggle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc: Option<Toggle>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounting: Option<Toggle>,
}

/// Telemetry the simulated GPU reports (group).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeTelemetry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^P[0-9]+$"))]
    pub performance_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<UtilizationTelemetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<PowerTelemetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<TemperatureTelemetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks: Option<ClockTelemetry>,
}

/// How utilization is produced.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum UtilizationMode {
    Pattern,
    Fixed,
}

/// Shape of a generated utilization pattern.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum PatternType {
    Steady,
    Bursty,
    Wave,
}

/// How a telemetry value (power, temperature) is produced.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ValueMode {
    Fixed,
    Pattern,
}

/// Utilization telemetry (group).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UtilizationTelemetry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<UtilizationMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<UtilizationPattern>,
}

/// Utilization pattern (group).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UtilizationPattern {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub pattern_type: Option<PatternType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_percent: Option<PercentRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_percent: Option<PercentRange>,
}

/// An inclusive percentage range (value: both bounds are always present, so an
/// override replaces the inherited range whole).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PercentRange {
    #[schemars(range(min = 0, max = 100))]
    pub minimum: i32,
    #[schemars(range(min = 0, max = 100))]
    pub maximum: i32,
}

/// Power telemetry (group).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PowerTelemetry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ValueMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub draw_milli_watts: Option<i64>,
}

/// Temperature telemetry (group).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemperatureTelemetry {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ValueMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_celsius: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_celsius: Option<i32>,
}

/// Current clocks (group).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClockTelemetry {
    #[serde(
        default,
        rename = "graphicsMHz",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 0))]
    pub graphics_mhz: Option<i32>,
    #[serde(default, rename = "smMHz", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub sm_mhz: Option<i32>,
    #[serde(default, rename = "memoryMHz", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub memory_mhz: Option<i32>,
    #[serde(default, rename = "videoMHz", skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub video_mhz: Option<i32>,
}
