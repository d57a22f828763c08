//! Export failures and whether a retry can help.

use std::time::Duration;

use jiff::Timestamp;

/// Upstream retried everything forever; here a failure is either worth
/// retrying (the backend may recover) or not (the same request will fail
/// the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// Connection errors, timeouts, 429, 5xx, a database that is down.
    /// `retry_after` is the server's own hint, when it gave one.
    Transient { retry_after: Option<Duration> },
    /// Other 4xx, a rejected statement, a missing table: dropped, counted
    /// and logged once.
    Permanent,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{exporter} export failed: {message}")]
pub struct ExportError {
    pub exporter: &'static str,
    pub class: FailureClass,
    pub message: String,
}

impl ExportError {
    pub fn transient(exporter: &'static str, message: impl Into<String>) -> ExportError {
        ExportError {
            exporter,
            class: FailureClass::Transient { retry_after: None },
            message: message.into(),
        }
    }

    pub fn permanent(exporter: &'static str, message: impl Into<String>) -> ExportError {
        ExportError {
            exporter,
            class: FailureClass::Permanent,
            message: message.into(),
        }
    }

    pub fn is_permanent(&self) -> bool {
        self.class == FailureClass::Permanent
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self.class {
            FailureClass::Transient { retry_after } => retry_after,
            FailureClass::Permanent => None,
        }
    }
}

/// How an HTTP status answers a write: `None` for success (2xx), else the
/// class. 408 (request timeout) and 429 are the 4xx worth retrying.
pub fn classify_status(status: u16, retry_after: Option<Duration>) -> Option<FailureClass> {
    match status {
        200..=299 => None,
        408 | 429 | 500..=599 => Some(FailureClass::Transient { retry_after }),
        _ => Some(FailureClass::Permanent),
    }
}

/// `Retry-After` as delay-seconds or an HTTP date (RFC 9110 §10.2.3), taken
/// relative to `now`. A date in the past means "now"; anything unreadable
/// is ignored (the caller's own backoff applies).
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let date = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = date.duration_since(now);
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_throttling_server_errors_and_client_errors_are_told_apart() {
        assert_eq!(classify_status(200, None), None);
        assert_eq!(classify_status(204, None), None);
        let hint = Some(Duration::from_secs(3));
        assert_eq!(
            classify_status(429, hint),
            Some(FailureClass::Transient { retry_after: hint })
        );
        for status in [408, 500, 502, 503, 504] {
            assert!(matches!(
                classify_status(status, None),
                Some(FailureClass::Transient { .. })
            ));
        }
        for status in [301, 400, 401, 403, 404, 409, 413, 422] {
            assert_eq!(
                classify_status(status, None),
                Some(FailureClass::Permanent),
                "{status}"
            );
        }
    }

    #[test]
    fn retry_after_accepts_seconds_and_http_dates() {
        let now: Timestamp = "2026-03-01T10:00:00Z".parse().unwrap();
        assert_eq!(
            parse_retry_after("120", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Sun, 01 Mar 2026 10:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 01 Mar 2026 09:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past means retry now"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }
}
