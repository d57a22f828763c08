//! Value grammars shared by every knob. They follow Go's `strconv` and
//! `time.ParseDuration` so existing upstream manifests keep working, and
//! durations are printed the way Go prints them so messages match upstream
//! (the duration grammar is controller-kit's, shared with every command).

pub use controller_kit::go_duration::{format as format_go_duration, parse as parse_go_duration};

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
