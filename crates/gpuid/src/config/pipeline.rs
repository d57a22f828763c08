//! The export pipeline's knobs (additions; upstream had a batch size and a
//! retry count that nothing read). Same strict parser as every other knob.

use std::time::Duration;

use super::exporters::to_duration;
use super::knobs::{self, Knob};
use super::source::Parser;
use super::values::{format_go_duration as go, parse_go_int};

const MILLISECOND: i128 = 1_000_000;
const SECOND: i128 = 1_000 * MILLISECOND;
const MAX_BATCH_SIZE: i64 = 10_000;
const MAX_QUEUE_CAPACITY: i64 = 100_000;
const MAX_BATCH_INTERVAL: i128 = 600 * SECOND;

/// Batching, retry and buffering of exports, validated. The exporter side
/// turns it into `export::PipelineConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportPipelineSettings {
    /// `EXPORT_BATCH_SIZE`: records plus events per batch.
    pub batch_size: usize,
    /// `EXPORT_BATCH_INTERVAL`: age at which a partial batch is sealed.
    pub batch_interval: Duration,
    /// `EXPORT_QUEUE_CAPACITY`: sealed batches held in memory.
    pub queue_capacity: usize,
    /// `EXPORT_MAX_ATTEMPTS`: `None` (0) retries without limit.
    pub max_attempts: Option<u32>,
    /// `EXPORT_BACKOFF_INITIAL`.
    pub backoff_initial: Duration,
    /// `EXPORT_BACKOFF_MAX`.
    pub backoff_max: Duration,
    /// `EXPORT_RETRY_AFTER_MAX`.
    pub retry_after_max: Duration,
    /// `EXPORT_UNHEALTHY_AFTER`: consecutive failed attempts.
    pub unhealthy_after: u32,
}

impl Default for ExportPipelineSettings {
    fn default() -> ExportPipelineSettings {
        ExportPipelineSettings {
            batch_size: 500,
            batch_interval: Duration::from_secs(1),
            queue_capacity: 256,
            max_attempts: None,
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(60),
            retry_after_max: Duration::from_secs(300),
            unhealthy_after: 3,
        }
    }
}

fn integer(parser: &mut Parser<'_>, knob: &Knob, default: i64) -> i64 {
    parser.typed(knob, "integer", "not an integer", parse_go_int, default)
}

/// An integer in `low..=high`, else a violation saying so.
fn bounded(parser: &mut Parser<'_>, knob: &Knob, default: i64, low: i64, high: i64) -> i64 {
    let value = integer(parser, knob, default);
    if !(low..=high).contains(&value) {
        parser.violation(
            knob,
            format!("must be between {low} and {high}: got {value}"),
        );
        return default;
    }
    value
}

/// A duration that must be positive (and at most `max` when given).
fn positive_duration(
    parser: &mut Parser<'_>,
    knob: &Knob,
    default: i128,
    max: Option<i128>,
) -> i128 {
    let value = parser.duration(knob, default);
    if value <= 0 {
        parser.violation(knob, format!("must be > 0: got {}", go(value)));
        return default;
    }
    if let Some(max) = max
        && value > max
    {
        parser.violation(
            knob,
            format!("must not exceed {}: got {}", go(max), go(value)),
        );
        return default;
    }
    value
}

pub(super) fn export_pipeline(parser: &mut Parser<'_>) -> ExportPipelineSettings {
    let defaults = ExportPipelineSettings::default();
    let batch_size = bounded(parser, &knobs::EXPORT_BATCH_SIZE, 500, 1, MAX_BATCH_SIZE);
    let batch_interval = positive_duration(
        parser,
        &knobs::EXPORT_BATCH_INTERVAL,
        SECOND,
        Some(MAX_BATCH_INTERVAL),
    );
    let queue_capacity = bounded(
        parser,
        &knobs::EXPORT_QUEUE_CAPACITY,
        256,
        1,
        MAX_QUEUE_CAPACITY,
    );
    let max_attempts = bounded(
        parser,
        &knobs::EXPORT_MAX_ATTEMPTS,
        0,
        0,
        i64::from(u32::MAX),
    );
    let backoff_initial = positive_duration(
        parser,
        &knobs::EXPORT_BACKOFF_INITIAL,
        200 * MILLISECOND,
        None,
    );
    let backoff_max = positive_duration(parser, &knobs::EXPORT_BACKOFF_MAX, 60 * SECOND, None);
    if backoff_max < backoff_initial {
        parser.violation(
            &knobs::EXPORT_BACKOFF_MAX,
            format!(
                "must be >= EXPORT_BACKOFF_INITIAL ({}): got {}",
                go(backoff_initial),
                go(backoff_max)
            ),
        );
    }
    let retry_after_max = parser.duration(&knobs::EXPORT_RETRY_AFTER_MAX, 300 * SECOND);
    if retry_after_max < 0 {
        parser.violation(
            &knobs::EXPORT_RETRY_AFTER_MAX,
            format!(
                "must be >= 0 (0 ignores Retry-After): got {}",
                go(retry_after_max)
            ),
        );
    }
    let unhealthy_after = bounded(parser, &knobs::EXPORT_UNHEALTHY_AFTER, 3, 1, 1_000_000);
    ExportPipelineSettings {
        batch_size: usize::try_from(batch_size).unwrap_or(defaults.batch_size),
        batch_interval: to_duration(batch_interval),
        queue_capacity: usize::try_from(queue_capacity).unwrap_or(defaults.queue_capacity),
        max_attempts: u32::try_from(max_attempts).ok().filter(|n| *n > 0),
        backoff_initial: to_duration(backoff_initial),
        backoff_max: to_duration(backoff_max.max(backoff_initial)),
        retry_after_max: to_duration(retry_after_max),
        unhealthy_after: u32::try_from(unhealthy_after).unwrap_or(defaults.unhealthy_after),
    }
}
