//! Value grammars shared by every knob. They follow Go's `strconv` and
//! `time.ParseDuration` so existing upstream manifests keep working, and
//! durations are printed the way Go prints them so messages match upstream.

/// Largest duration Go can represent (`time.Duration` is an `i64` of ns).
const MAX_DURATION_NANOS: i128 = i64::MAX as i128;

const NANOS_PER_SECOND: u128 = 1_000_000_000;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;

/// Parses a Go duration (`30s`, `1m30s`, `1.5h`, `500ms`, `-2s`, `0`) into
/// signed nanoseconds. Surrounding whitespace is ignored.
pub fn parse_go_duration(raw: &str) -> Option<i128> {
    let text = raw.trim();
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let integer_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (integer, after_integer) = rest.split_at(integer_len);
        let (fraction, after_number) = match after_integer.strip_prefix('.') {
            Some(after_dot) => {
                let fraction_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
                after_dot.split_at(fraction_len)
            }
            None => ("", after_integer),
        };
        if integer.is_empty() && fraction.is_empty() {
            return None;
        }
        let unit_len = after_number
            .bytes()
            .position(|b| b.is_ascii_digit() || b == b'.')
            .unwrap_or(after_number.len());
        let (unit, after_unit) = after_number.split_at(unit_len);
        let scale = unit_nanos(unit)?;
        total = total.checked_add(component_nanos(integer, fraction, scale)?)?;
        if total > MAX_DURATION_NANOS {
            return None;
        }
        rest = after_unit;
    }
    Some(if negative { -total } else { total })
}

fn unit_nanos(unit: &str) -> Option<i128> {
    Some(match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    })
}

fn component_nanos(integer: &str, fraction: &str, scale: i128) -> Option<i128> {
    // Digits beyond what an i64 of nanoseconds can hold only add noise, and
    // capping them keeps the arithmetic below far from i128 overflow.
    let integer_value: i128 = if integer.is_empty() {
        0
    } else if integer.len() > 20 {
        return None;
    } else {
        integer.parse().ok()?
    };
    let mut value = integer_value.checked_mul(scale)?;
    let mut divisor: i128 = 1;
    let mut fraction_value: i128 = 0;
    for digit in fraction.bytes().take(18) {
        fraction_value = fraction_value * 10 + i128::from(digit - b'0');
        divisor *= 10;
    }
    value = value.checked_add(fraction_value * scale / divisor)?;
    Some(value)
}

/// Prints signed nanoseconds the way Go's `time.Duration.String` does:
/// `0s`, `1.5µs`, `500ms`, `30s`, `15m0s`, `1h0m0s`.
pub fn format_go_duration(nanos: i128) -> String {
    if nanos == 0 {
        return "0s".to_owned();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.unsigned_abs();
    if magnitude < NANOS_PER_SECOND {
        let (unit, scale, width) = if magnitude < 1_000 {
            ("ns", 1, 0)
        } else if magnitude < 1_000_000 {
            ("µs", 1_000, 3)
        } else {
            ("ms", 1_000_000, 6)
        };
        return format!("{sign}{}{unit}", decimal(magnitude, scale, width));
    }
    let hours = magnitude / NANOS_PER_HOUR;
    let minutes = magnitude % NANOS_PER_HOUR / NANOS_PER_MINUTE;
    let seconds = decimal(magnitude % NANOS_PER_MINUTE, NANOS_PER_SECOND, 9);
    if hours > 0 {
        format!("{sign}{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{sign}{minutes}m{seconds}s")
    } else {
        format!("{sign}{seconds}s")
    }
}

fn decimal(value: u128, scale: u128, width: usize) -> String {
    let whole = value / scale;
    let fraction = value % scale;
    if fraction == 0 {
        whole.to_string()
    } else {
        let digits = format!("{fraction:0width$}");
        format!("{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// Go's `strconv.Atoi`: optional sign, decimal digits, fits in an i64.
pub fn parse_go_int(raw: &str) -> Option<i64> {
    let text = raw.trim();
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A decimal or exponent float (`50`, `12.5`, `1e2`); no `inf`/`nan`.
pub fn parse_float(raw: &str) -> Option<f32> {
    let text = raw.trim();
    let allowed = |b: u8| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-');
    if text.is_empty() || !text.bytes().all(allowed) {
        return None;
    }
    text.parse::<f32>().ok().filter(|value| value.is_finite())
}

/// Go's `strconv.ParseBool` spellings, compared case-insensitively (upstream
/// accepted any case of `true` for `POSTGRES_AUTO_MIGRATE`).
pub fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "t" | "true" => Some(true),
        "0" | "f" | "false" => Some(false),
        _ => None,
    }
}

/// An `http://` or `https://` URL with a non-empty host part.
pub fn is_http_url(raw: &str) -> bool {
    let rest = raw
        .strip_prefix("http://")
        .or_else(|| raw.strip_prefix("https://"));
    match rest {
        Some(rest) => {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            !authority.is_empty() && !raw.chars().any(|c| c.is_whitespace() || c.is_control())
        }
        None => false,
    }
}

/// A lowercase RFC 1123 label, the rule Kubernetes applies to namespace names.
pub fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i128 = 1_000_000_000;

    #[test]
    fn go_durations_parse_with_every_unit_and_fractions() {
        assert_eq!(parse_go_duration("30s"), Some(30 * SECOND));
        assert_eq!(parse_go_duration("1m30s"), Some(90 * SECOND));
        assert_eq!(parse_go_duration("1.5h"), Some(5400 * SECOND));
        assert_eq!(parse_go_duration("500ms"), Some(SECOND / 2));
        assert_eq!(parse_go_duration("2us"), Some(2_000));
        assert_eq!(parse_go_duration("2µs"), Some(2_000));
        assert_eq!(parse_go_duration("7ns"), Some(7));
        assert_eq!(parse_go_duration(".5s"), Some(SECOND / 2));
        assert_eq!(parse_go_duration("0"), Some(0));
        assert_eq!(parse_go_duration("-5s"), Some(-5 * SECOND));
        assert_eq!(parse_go_duration(" 10m "), Some(600 * SECOND));
    }

    #[test]
    fn durations_without_a_unit_or_with_junk_are_rejected() {
        for raw in [
            "",
            "abc",
            "30",
            "5 s",
            "1d",
            "s",
            ".s",
            "1..5s",
            "-",
            "1e3s",
            "9999999999999999999h",
        ] {
            assert_eq!(parse_go_duration(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(format_go_duration(0), "0s");
        assert_eq!(format_go_duration(30 * SECOND), "30s");
        assert_eq!(format_go_duration(600 * SECOND), "10m0s");
        assert_eq!(format_go_duration(3600 * SECOND), "1h0m0s");
        assert_eq!(format_go_duration(90 * SECOND + SECOND / 2), "1m30.5s");
        assert_eq!(format_go_duration(SECOND / 2), "500ms");
        assert_eq!(format_go_duration(1_500), "1.5µs");
        assert_eq!(format_go_duration(-5 * SECOND), "-5s");
    }

    #[test]
    fn printing_then_parsing_a_duration_is_lossless() {
        for nanos in [
            1,
            999,
            1_001,
            1_000_000,
            1_234_567_891,
            59 * SECOND,
            3_723 * SECOND + 7,
        ] {
            assert_eq!(parse_go_duration(&format_go_duration(nanos)), Some(nanos));
        }
    }

    #[test]
    fn integers_follow_atoi() {
        assert_eq!(parse_go_int("16"), Some(16));
        assert_eq!(parse_go_int("-3"), Some(-3));
        assert_eq!(parse_go_int("+7"), Some(7));
        for raw in [
            "",
            "abc",
            "1.5",
            "0x10",
            "1_000",
            "-",
            "99999999999999999999",
        ] {
            assert_eq!(parse_go_int(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn floats_must_be_finite_decimals() {
        assert_eq!(parse_float("50"), Some(50.0));
        assert_eq!(parse_float("12.5"), Some(12.5));
        assert_eq!(parse_float("1e2"), Some(100.0));
        for raw in ["", "inf", "NaN", "fast", "1e99"] {
            assert_eq!(parse_float(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn booleans_accept_go_spellings_in_any_case() {
        for raw in ["1", "t", "T", "true", "TRUE", "True", "tRuE"] {
            assert_eq!(parse_bool(raw), Some(true), "{raw:?}");
        }
        for raw in ["0", "f", "false", "FALSE"] {
            assert_eq!(parse_bool(raw), Some(false), "{raw:?}");
        }
        for raw in ["yes", "on", "", "2"] {
            assert_eq!(parse_bool(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn http_urls_need_a_scheme_and_a_host() {
        assert!(is_http_url("http://collector:8080/ingest"));
        assert!(is_http_url("https://example.com"));
        for raw in [
            "",
            "example.com",
            "ftp://x",
            "http://",
            "https:///path",
            "http://a b",
        ] {
            assert!(!is_http_url(raw), "{raw:?}");
        }
    }

    #[test]
    fn namespace_names_follow_rfc_1123_labels() {
        assert!(is_dns_label("gpu-operator"));
        assert!(is_dns_label("a"));
        for raw in ["", "GPU", "-a", "a-", "a_b", "a.b", &"a".repeat(64)] {
            assert!(!is_dns_label(raw), "{raw:?}");
        }
    }
}
