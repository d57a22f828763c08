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
static UUID3: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
        .unwrap_or_else(|_| unreachable_regex())
});
static UUID4: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
        .unwrap_or_else(|_| unreachable_regex())
});
static UUID5: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$")
        .unwrap_or_else(|_| unreachable_regex())
});
static SSN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$").unwrap_or_else(|_| unreachable_regex())
});
static RGB_COLOR: LazyLock<Regex> = LazyLock::new(|| {
    let channel = r"\s*(0|[1-9]\d?|1\d\d|2[0-4]\d|25[0-5])\s*";
    Regex::new(&format!(r"^rgb\({channel},{channel},{channel}\)$"))
        .unwrap_or_else(|_| unreachable_regex())
});
static CREDIT_CARD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})$")
        .unwrap_or_else(|_| unreachable_regex())
});
static URI_SCHEME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[a-zA-Z][a-zA-Z0-9+.-]*:").unwrap_or_else(|_| unreachable_regex())
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
    Regex::new(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$").unwrap_or_else(|_| unreachable_regex())
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

/// Whether `s` is valid for `format` (compared with dashes removed, as
/// go-openapi normalizes format names).
pub(super) fn is_valid(format: &str, s: &str) -> bool {
    match format.replace('-', "").as_str() {
        "datetime" => is_date_time(s),
        "date" => is_date(s),
        "byte" => is_base64(s),
        "uuid" => UUID.is_match(s),
        "uuid3" => UUID3.is_match(s),
        "uuid4" => UUID4.is_match(s),
        "uuid5" => UUID5.is_match(s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => MAC.is_match(s),
        "hostname" => s.len() <= 255 && HOSTNAME.is_match(s),
        "hexcolor" => HEX_COLOR.is_match(s),
        "rgbcolor" => RGB_COLOR.is_match(s),
        "bsonobjectid" => BSON_OBJECT_ID.is_match(s),
        "duration" => DURATION.is_match(s),
        "email" => is_email(s),
        "uri" => is_request_uri(s),
        "ssn" => SSN.is_match(s),
        "creditcard" => {
            let digits: String = s.chars().filter(char::is_ascii_digit).collect();
            CREDIT_CARD.is_match(&digits)
        }
        "isbn" => is_isbn10(s) || is_isbn13(s),
        "isbn10" => is_isbn10(s),
        "isbn13" => is_isbn13(s),
        _ => true,
    }
}

/// Like Go's `url.ParseRequestURI`: an absolute URI or an absolute path.
fn is_request_uri(s: &str) -> bool {
    !s.contains(char::is_whitespace) && (s.starts_with('/') || URI_SCHEME.is_match(s))
}

fn isbn_digits(s: &str) -> Vec<char> {
    s.chars().filter(|c| *c != '-' && *c != ' ').collect()
}

fn is_isbn10(s: &str) -> bool {
    let chars = isbn_digits(s);
    if chars.len() != 10 {
        return false;
    }
    let mut sum = 0u32;
    for (i, c) in chars.iter().enumerate() {
        let value = match (c, i) {
            ('X' | 'x', 9) => 10,
            (c, _) => match c.to_digit(10) {
                Some(d) => d,
                None => return false,
            },
        };
        sum += value * (10 - i as u32);
    }
    sum.is_multiple_of(11)
}

fn is_isbn13(s: &str) -> bool {
    let chars = isbn_digits(s);
    if chars.len() != 13 {
        return false;
    }
    let mut sum = 0u32;
    for (i, c) in chars.iter().enumerate() {
        let Some(d) = c.to_digit(10) else {
            return false;
        };
        sum += if i % 2 == 0 { d } else { 3 * d };
    }
    sum.is_multiple_of(10)
}

fn valid_calendar_date(year: &str, month: &str, day: &str) -> bool {
    let (Ok(y), Ok(m), Ok(d)) = (
        year.parse::<u32>(),
        month.parse::<u32>(),
        day.parse::<u32>(),
    ) else {
        return false;
    };
    crate::object::days_in_month(i64::from(y), i64::from(m))
        .is_some_and(|days| (1..=days).contains(&i64::from(d)))
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
        assert!(!is_valid("uuid4", "123e4567-e89b-42d3-c456-426614174000"));
    }

    #[test]
    fn other_registry_formats_are_checked() {
        assert!(is_valid("isbn10", "0321751043"));
        assert!(!is_valid("isbn10", "0321751044"));
        assert!(is_valid("isbn13", "978-0321751041"));
        assert!(is_valid("ssn", "123-45-6789"));
        assert!(!is_valid("ssn", "12-345-6789"));
        assert!(is_valid("rgbcolor", "rgb(255, 0, 10)"));
        assert!(!is_valid("rgbcolor", "rgb(256,0,0)"));
        assert!(is_valid("hexcolor", "FFF"));
        assert!(is_valid("creditcard", "4111 1111 1111 1111"));
        assert!(is_valid("uri", "https://example.com/x"));
        assert!(!is_valid("uri", "not a uri"));
        assert!(is_valid("duration", "1h30m"));
        assert!(!is_valid("duration", "soon"));
        assert!(
            is_valid("date-time", "2024-01-01T00:00:00Z")
                && is_valid("datetime", "2024-01-01T00:00:00Z")
        );
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
            &UUID3,
            &UUID4,
            &UUID5,
            &HOSTNAME,
            &MAC,
            &HEX_COLOR,
            &BSON_OBJECT_ID,
            &DURATION,
            &SSN,
            &RGB_COLOR,
            &CREDIT_CARD,
            &URI_SCHEME,
        ] {
            assert_ne!(re.as_str(), r"[^\s\S]", "a format regex failed to compile");
        }
    }
}
