//! `RuntimeState` layering: RFC 7386 merge-patch semantics on typed values,
//! and the dotted paths of the fields a state sets.
//!
//! Because every field is optional and omitted when unset, no `null` ever
//! appears in a serialized state, so a merge patch reduces to: a set group
//! merges field by field, a set leaf or value struct (`PercentRange`)
//! replaces. The typed merge below implements exactly that without a JSON
//! round trip; `merge_via_json` is the reference it is tested against.

use serde_json::Value;

use crate::MokkaError;
use crate::api::{
    ClockTelemetry, PowerTelemetry, RuntimeModes, RuntimeState, RuntimeTelemetry,
    TemperatureTelemetry, UtilizationPattern, UtilizationTelemetry,
};

/// Field-by-field merge of a group struct.
trait MergeGroup {
    fn merge_from(&mut self, patch: &Self);
}

/// A leaf or value field: a set patch replaces it whole.
fn replace<T: Clone>(target: &mut Option<T>, patch: &Option<T>) {
    if patch.is_some() {
        target.clone_from(patch);
    }
}

/// A group field: a set patch merges into it (or is taken whole when the
/// target has no such group yet).
fn merge_group<T: MergeGroup + Clone>(target: &mut Option<T>, patch: &Option<T>) {
    match (target.as_mut(), patch) {
        (_, None) => {}
        (Some(existing), Some(patch)) => existing.merge_from(patch),
        (None, Some(patch)) => *target = Some(patch.clone()),
    }
}

impl MergeGroup for RuntimeState {
    fn merge_from(&mut self, patch: &Self) {
        replace(&mut self.device_state, &patch.device_state);
        merge_group(&mut self.modes, &patch.modes);
        merge_group(&mut self.telemetry, &patch.telemetry);
    }
}

impl MergeGroup for RuntimeModes {
    fn merge_from(&mut self, patch: &Self) {
        replace(&mut self.persistence, &patch.persistence);
        replace(&mut self.compute, &patch.compute);
        replace(&mut self.mig, &patch.mig);
        replace(&mut self.ecc, &patch.ecc);
        replace(&mut self.accounting, &patch.accounting);
    }
}

impl MergeGroup for RuntimeTelemetry {
    fn merge_from(&mut self, patch: &Self) {
        replace(&mut self.performance_state, &patch.performance_state);
        merge_group(&mut self.utilization, &patch.utilization);
        merge_group(&mut self.power, &patch.power);
        merge_group(&mut self.temperature, &patch.temperature);
        merge_group(&mut self.clocks, &patch.clocks);
    }
}

impl MergeGroup for UtilizationTelemetry {
    fn merge_from(&mut self, patch: &Self) {
        replace(&mut self.mode, &patch.mode);
        merge_group(&mut self.pattern, &patch.pattern);
    }
}

impl MergeGroup for UtilizationPattern {
    fn merge_from(&mut self, patch: &Self) {
        replace(&mut self.pattern_type, &patch.pattern_type);
        // PercentRange is a value: it replaces the inherited range whole.
        replace(&mut self.gpu_percent, &patch.gpu_percent);
        replace(&mut self.memory_percent, &patch.memory_percent);
    }
}

impl MergeGroup for PowerTelemetry {
    fn merge_from(&mut self, patch: &Self) {
        replace(&mut self.mode, &patch.mode);
        replace(&mut self.draw_milli_watts, &patch.draw_milli_watts);
    }
}

impl MergeGroup for TemperatureTelemetry {
    fn merge_from(&mut self, patch: &Self) {
        replace(&mut self.mode, &patch.mode);
        replace(&mut self.gpu_celsius, &patch.gpu_celsius);
        replace(&mut self.memory_celsius, &patch.memory_celsius);
    }
}

impl MergeGroup for ClockTelemetry {
    fn merge_from(&mut self, patch: &Self) {
        replace(&mut self.graphics_mhz, &patch.graphics_mhz);
        replace(&mut self.sm_mhz, &patch.sm_mhz);
        replace(&mut self.memory_mhz, &patch.memory_mhz);
        replace(&mut self.video_mhz, &patch.video_mhz);
    }
}

impl RuntimeState {
    /// Applies `patch` in place as an RFC 7386 merge patch.
    pub fn apply_override(&mut self, patch: &RuntimeState) {
        self.merge_from(patch);
    }

    /// A new state: `base` (an absent base is the empty state) with each
    /// override applied in order, so later overrides win. Inputs are not
    /// changed; with no override the result is a copy of the base.
    pub fn with_override<'a>(
        base: Option<&RuntimeState>,
        overrides: impl IntoIterator<Item = &'a RuntimeState>,
    ) -> RuntimeState {
        let mut state = base.cloned().unwrap_or_default();
        for patch in overrides {
            state.merge_from(patch);
        }
        state
    }
}

/// The reference implementation: encode to JSON, apply each override with
/// `json_patch::merge` (RFC 7386), decode. Numbers stay exact.
pub fn merge_via_json<'a>(
    base: Option<&RuntimeState>,
    overrides: impl IntoIterator<Item = &'a RuntimeState>,
) -> Result<RuntimeState, MokkaError> {
    let encode = |state: &RuntimeState| {
        serde_json::to_value(state).map_err(|source| MokkaError::Json {
            what: "runtime state",
            source,
        })
    };
    let mut document = match base {
        Some(base) => encode(base)?,
        None => Value::Object(Default::default()),
    };
    for patch in overrides {
        json_patch::merge(&mut document, &encode(patch)?);
    }
    serde_json::from_value(document).map_err(|source| MokkaError::Json {
        what: "merged runtime state",
        source,
    })
}

/// Sorted dotted paths of every leaf value `state` sets, e.g.
/// `telemetry.temperature.gpuCelsius`. A percent range contributes its
/// `maximum` and `minimum`; an empty group contributes nothing.
pub fn field_paths(state: &RuntimeState) -> Result<Vec<String>, MokkaError> {
    let value = serde_json::to_value(state).map_err(|source| MokkaError::Json {
        what: "runtime state",
        source,
    })?;
    let mut paths = Vec::new();
    collect_leaf_paths(&value, &mut String::new(), &mut paths);
    paths.sort();
    Ok(paths)
}

fn collect_leaf_paths(value: &Value, prefix: &mut String, out: &mut Vec<String>) {
    match value {
        Value::Object(fields) => {
            for (key, child) in fields {
                let length = prefix.len();
                if !prefix.is_empty() {
                    prefix.push('.');
                }
                prefix.push_str(key);
                collect_leaf_paths(child, prefix, out);
                prefix.truncate(length);
            }
        }
        Value::Null => {}
        _ => out.push(prefix.clone()),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::api::*;

    fn hot() -> RuntimeState {
        RuntimeState {
            telemetry: Some(RuntimeTelemetry {
                temperature: Some(TemperatureTelemetry {
                    gpu_celsius: Some(90),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn base() -> RuntimeState {
        crate::fixtures::example_default_runtime()
    }

    #[test]
    fn a_set_field_replaces_its_value_and_siblings_inherit() {
        let merged = RuntimeState::with_override(Some(&base()), [&hot()]);
        let temperature = merged
            .telemetry
            .as_ref()
            .unwrap()
            .temperature
            .as_ref()
            .unwrap();
        assert_eq!(temperature.gpu_celsius, Some(90));
        assert_eq!(temperature.memory_celsius, Some(36));
        assert_eq!(temperature.mode, Some(ValueMode::Fixed));
        assert_eq!(merged.device_state, Some(DeviceState::Healthy));
        assert_eq!(merged.modes, base().modes);
    }

    #[test]
    fn an_explicit_zero_replaces_a_non_zero_value_and_survives_json() {
        let zero = RuntimeState {
            telemetry: Some(RuntimeTelemetry {
                power: Some(PowerTelemetry {
                    draw_milli_watts: Some(0),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let merged = RuntimeState::with_override(Some(&base()), [&zero]);
        assert_eq!(
            merged
                .telemetry
                .as_ref()
                .unwrap()
                .power
                .as_ref()
                .unwrap()
                .draw_milli_watts,
            Some(0)
        );
        let round_trip: RuntimeState =
            serde_json::from_str(&serde_json::to_string(&zero).unwrap()).unwrap();
        assert_eq!(round_trip, zero);
        assert!(
            serde_json::to_string(&zero)
                .unwrap()
                .contains("\"drawMilliWatts\":0")
        );
    }

    #[test]
    fn a_percent_range_replaces_the_inherited_range_whole() {
        let range = |minimum, maximum| RuntimeState {
            telemetry: Some(RuntimeTelemetry {
                utilization: Some(UtilizationTelemetry {
                    mode: None,
                    pattern: Some(UtilizationPattern {
                        pattern_type: Some(PatternType::Wave),
                        gpu_percent: Some(PercentRange { minimum, maximum }),
                        memory_percent: None,
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let merged = RuntimeState::with_override(Some(&range(10, 90)), [&range(0, 5)]);
        let pattern = merged
            .telemetry
            .unwrap()
            .utilization
            .unwrap()
            .pattern
            .unwrap();
        assert_eq!(
            pattern.gpu_percent,
            Some(PercentRange {
                minimum: 0,
                maximum: 5
            })
        );
    }

    #[test]
    fn a_group_missing_from_the_base_is_taken_from_the_override() {
        let merged = RuntimeState::with_override(Some(&RuntimeState::default()), [&hot()]);
        assert_eq!(merged, hot());
        let from_nothing = RuntimeState::with_override(None, [&hot()]);
        assert_eq!(from_nothing, hot());
    }

    #[test]
    fn among_several_overrides_the_later_one_wins() {
        let failed = RuntimeState {
            device_state: Some(DeviceState::Failed),
            ..Default::default()
        };
        let degraded = RuntimeState {
            device_state: Some(DeviceState::Degraded),
            ..Default::default()
        };
        assert_eq!(
            RuntimeState::with_override(Some(&base()), [&failed, &degraded]).device_state,
            Some(DeviceState::Degraded)
        );
        assert_eq!(
            RuntimeState::with_override(Some(&base()), [&degraded, &failed]).device_state,
            Some(DeviceState::Failed)
        );
    }

    #[test]
    fn no_override_returns_a_copy_of_the_base_and_inputs_are_untouched() {
        let original = base();
        let copy = RuntimeState::with_override(Some(&original), []);
        assert_eq!(copy, original);
        let patch = hot();
        let _ = RuntimeState::with_override(Some(&original), [&patch]);
        assert_eq!(original, base());
        assert_eq!(patch, hot());
        assert_eq!(
            RuntimeState::with_override(None, []),
            RuntimeState::default()
        );
    }

    #[test]
    fn int64_values_beyond_two_to_the_53_stay_exact() {
        let big = (1i64 << 53) + 1;
        let patch = RuntimeState {
            telemetry: Some(RuntimeTelemetry {
                power: Some(PowerTelemetry {
                    draw_milli_watts: Some(big),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        for merged in [
            RuntimeState::with_override(Some(&base()), [&patch]),
            merge_via_json(Some(&base()), [&patch]).unwrap(),
        ] {
            assert_eq!(
                merged.telemetry.unwrap().power.unwrap().draw_milli_watts,
                Some(big)
            );
        }
    }

    #[test]
    fn field_paths_lists_sorted_leaf_paths() {
        let mut state = hot();
        state.device_state = Some(DeviceState::Failed);
        state.modes = Some(RuntimeModes::default());
        state.telemetry.as_mut().unwrap().utilization = Some(UtilizationTelemetry {
            mode: None,
            pattern: Some(UtilizationPattern {
                pattern_type: None,
                gpu_percent: Some(PercentRange {
                    minimum: 1,
                    maximum: 2,
                }),
                memory_percent: None,
            }),
        });
        assert_eq!(
            field_paths(&state).unwrap(),
            vec![
                "deviceState",
                "telemetry.temperature.gpuCelsius",
                "telemetry.utilization.pattern.gpuPercent.maximum",
                "telemetry.utilization.pattern.gpuPercent.minimum",
            ]
        );
        assert!(field_paths(&RuntimeState::default()).unwrap().is_empty());
    }

    fn toggle() -> impl Strategy<Value = Option<Toggle>> {
        prop::option::of(prop_oneof![Just(Toggle::Enabled), Just(Toggle::Disabled)])
    }

    prop_compose! {
        fn arbitrary_state()(
            device in prop::option::of(prop_oneof![Just(DeviceState::Healthy), Just(DeviceState::Degraded), Just(DeviceState::Failed)]),
            modes in prop::option::of((toggle(), toggle(), toggle())),
            performance in prop::option::of("P[0-9]"),
            range in prop::option::of(prop::option::of((0..=100i32, 0..=100i32))),
            power in prop::option::of((prop::option::of(Just(ValueMode::Fixed)), prop::option::of(0..i64::MAX))),
            temperature in prop::option::of((prop::option::of(-5..120i32), prop::option::of(-5..120i32))),
            clocks in prop::option::of(prop::option::of(0..3000i32)),
        ) -> RuntimeState {
            let telemetry = if performance.is_none() && range.is_none() && power.is_none() && temperature.is_none() && clocks.is_none() {
                None
            } else {
                Some(RuntimeTelemetry {
                    performance_state: performance,
                    utilization: range.map(|range| UtilizationTelemetry {
                        mode: Some(UtilizationMode::Pattern),
                        pattern: Some(UtilizationPattern {
                            pattern_type: None,
                            gpu_percent: range.map(|(minimum, maximum)| PercentRange { minimum, maximum }),
                            memory_percent: None,
                        }),
                    }),
                    power: power.map(|(mode, draw)| PowerTelemetry { mode, draw_milli_watts: draw }),
                    temperature: temperature.map(|(gpu, memory)| TemperatureTelemetry { mode: None, gpu_celsius: gpu, memory_celsius: memory }),
                    clocks: clocks.map(|sm| ClockTelemetry { sm_mhz: sm, ..Default::default() }),
                })
            };
            RuntimeState {
                device_state: device,
                modes: modes.map(|(persistence, mig, ecc)| RuntimeModes { persistence, mig, ecc, ..Default::default() }),
                telemetry,
            }
        }
    }

    proptest! {
        #[test]
        fn typed_merge_equals_an_rfc_7386_merge_patch(
            base in prop::option::of(arbitrary_state()),
            overrides in prop::collection::vec(arbitrary_state(), 0..4),
        ) {
            let typed = RuntimeState::with_override(base.as_ref(), overrides.iter());
            let reference = merge_via_json(base.as_ref(), overrides.iter()).unwrap();
            prop_assert_eq!(typed, reference);
        }
    }
}
