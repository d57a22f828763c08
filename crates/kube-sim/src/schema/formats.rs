//! String formats the apiserver checks on custom resources (its strfmt
//! registry). Formats are checked only on string values; a format this
//! module does not know is accepted, as the apiserver strips unknown
//! formats from CRD schemas before validating.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use regex::Regex;

static DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    // RFC 3339, as strfmt's date-time parser accepts it (a space may stand
    // for the T, fractional seconds optional, Z or an offset).
    Regex::new(
        r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$",
    )
    .unwrap_or_else(|_| unreachable_regex())
});
static DATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\d{4})-(\d{2})-(\d{2})$").unwrap_or_else(|_| unreachable_regex())
});
static UUID: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
        .unwrap_or_else(|_| unreachable_regex())
});
static UUID_VERSIONED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?([345])[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
        .unwrap_or_else(|_| unreachable_regex())
});
static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)(\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*\.?$")
        .unwrap_or_else(|_| unreachable_regex())
});
static MAC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$")
        .unwrap_or_else(|_| unreachable_regex())
});
static HEX_COLOR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$").unwrap_or_else(|_| unreachable_regex())
});
static BSON_OBJECT_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[0-9a-fA-F]{24}$").unwrap_or_else(|_| unreachable_regex()));
static DURATION: LazyLock<Regex> = LazyLock::new(|| {
    // Go durations ("1h30m", "-1.5s") and strfmt's long forms ("3 days").
    Regex::new(
        r"^[-+]?(((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+|0|\d+\s*(ns|us|ms|s|m|h|d|w|seconds?|minutes?|hours?|days?|weeks?))$",
    )
    .unwrap_or_else(|_| unreachable_regex())
});

/// The patterns above are literals checked by the tests; a failure to
/// compile one is a bug, and an empty-language regex is the safe stand-in.
fn unreachable_regex() -> Regex {
    Regex::new(r"[^\s\S]").unwrap_or_else(|_| unreachable!("a constant regex compiles"))
}

/// Whether `s` is valid for `format`.
pub(super) fn is_valid(format: &str, s: &str) -> bool {
    match format {
        "date-time" | "datetime" => is_date_time(s),
        "date" => is_date(s),
        "byte" => is_base64(s),
        "uuid" => UUID.is_match(s),
        "uuid3" | "uuid4" | "uuid5" => UUID_VERSIONED
            .captures(s)
            .and_then(|c| c.get(1))
            .is_some_and(|v| v.as_str() == &format[4..]),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => MAC.is_match(s),
        "hostname" => s.len() <= 255 && HOSTNAME.is_match(s),
        "hexcolor" => HEX_COLOR.is_match(s),
        "bsonobjectid" => BSON_OBJECT_ID.is_match(s),
        "duration" => DURATION.is_match(s),
        "email" => is_email(s),
        _ => true,
    }
}

fn valid_calendar_date(year: &str, month: &str, day: &str) -> bool {
    let (Ok(y), Ok(m), Ok(d)) = (
        year.parse::<u32>(),
        month.parse::<u32>(),
        day.parse::<u32>(),
    ) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

fn is_date(s: &str) -> bool {
    DATE.captures(s)
        .is_some_and(|c| valid_calendar_date(&c[1], &c[2], &c[3]))
}

fn is_date_time(s: &str) -> bool {
    let Some(c) = DATE_TIME.captures(s) else {
        return false;
    };
    let in_range = |i: usize, max: u32| c[i].parse::<u32>().is_ok_and(|v| v <= max);
    valid_calendar_date(&c[1], &c[2], &c[3])
        && in_range(4, 23)
        && in_range(5, 59)
        && in_range(6, 60)
}

fn is_base64(s: &str) -> bool {
    // Standard alphabet with padding, as Go's base64.StdEncoding decodes.
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return false;
    }
    let padding = bytes.iter().rev().take_while(|b| **b == b'=').count();
    if padding > 2 {
        return false;
    }
    bytes[..bytes.len() - padding]
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
}

fn is_cidr(s: &str) -> bool {
    let Some((addr, prefix)) = s.split_once('/') else {
        return false;
    };
    let Ok(prefix) = prefix.parse::<u8>() else {
        return false;
    };
    match addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => prefix <= 32,
        Ok(IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

fn is_email(s: &str) -> bool {
    // A deliberately loose check: one @ with something on each side.
    match s.rsplit_once('@') {
        Some((local, domain)) => !local.is_empty() && !domain.is_empty() && !domain.contains(' '),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_time_accepts_rfc3339_and_rejects_impossible_dates() {
        assert!(is_valid("date-time", "2024-02-29T12:00:00Z"));
        assert!(is_valid("date-time", "2024-01-01T00:00:00.123+02:00"));
        assert!(!is_valid("date-time", "2023-02-29T12:00:00Z"));
        assert!(!is_valid("date-time", "2024-01-01"));
        assert!(!is_valid("date-time", "yesterday"));
    }

    #[test]
    fn date_accepts_full_dates_only() {
        assert!(is_valid("date", "2024-12-31"));
        assert!(!is_valid("date", "2024-13-01"));
        assert!(!is_valid("date", "2024-12-31T00:00:00Z"));
    }

    #[test]
    fn byte_requires_padded_standard_base64() {
        assert!(is_valid("byte", "aGVsbG8="));
        assert!(is_valid("byte", ""));
        assert!(!is_valid("byte", "aGVsbG8"));
        assert!(!is_valid("byte", "a$==="));
    }

    #[test]
    fn network_formats_parse_addresses() {
        assert!(is_valid("ipv4", "10.0.0.1"));
        assert!(!is_valid("ipv4", "10.0.0.256"));
        assert!(is_valid("ipv6", "::1"));
        assert!(is_valid("cidr", "10.0.0.0/8"));
        assert!(!is_valid("cidr", "10.0.0.0/33"));
        assert!(is_valid("mac", "00:1a:2b:3c:4d:5e"));
        assert!(is_valid("hostname", "node-1.example.com"));
        assert!(!is_valid("hostname", "-bad-.example"));
    }

    #[test]
    fn uuid_versions_are_checked() {
        assert!(is_valid("uuid", "123e4567-e89b-12d3-a456-426614174000"));
        assert!(is_valid("uuid4", "123e4567-e89b-42d3-a456-426614174000"));
        assert!(!is_valid("uuid4", "123e4567-e89b-12d3-a456-426614174000"));
    }

    #[test]
    fn unknown_formats_accept_anything() {
        assert!(is_valid("password", "anything"));
        assert!(is_valid("no-such-format", "anything"));
    }

    #[test]
    fn every_constant_regex_compiles() {
        for re in [
            &DATE_TIME,
            &DATE,
            &UUID,
            &UUID_VERSIONED,
            &HOSTNAME,
            &MAC,
            &HEX_COLOR,
            &BSON_OBJECT_ID,
            &DURATION,
        ] {
            assert_ne!(re.as_str(), r"[^\s\S]", "a format regex failed to compile");
        }
    }
}
