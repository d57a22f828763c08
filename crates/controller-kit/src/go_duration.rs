//! Go's durations (`time.ParseDuration`, `time.Duration.String`): the one
//! parser and printer of the workspace, so a flag or variable copied from
//! an upstream manifest means the same to every controller. Nanoseconds as
//! `i128` so that every Go duration, negative ones and the i64 bounds
//! included, fits; callers turn them into what they need.

/// Largest duration Go can represent (`time.Duration` is an `i64` of ns).
const MAX_DURATION_NANOS: i128 = i64::MAX as i128;

const NANOS_PER_SECOND: u128 = 1_000_000_000;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;

/// Parses a Go duration (`30s`, `1m30s`, `1.5h`, `500ms`, `-2s`, `0`) into
/// signed nanoseconds. Surrounding whitespace is ignored.
pub fn parse(raw: &str) -> Option<i128> {
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
pub fn format(nanos: i128) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i128 = 1_000_000_000;

    #[test]
    fn go_durations_parse_with_every_unit_and_fractions() {
        assert_eq!(parse("30s"), Some(30 * SECOND));
        assert_eq!(parse("1m30s"), Some(90 * SECOND));
        assert_eq!(parse("1.5h"), Some(5400 * SECOND));
        assert_eq!(parse("500ms"), Some(SECOND / 2));
        assert_eq!(parse("2us"), Some(2_000));
        assert_eq!(parse("2µs"), Some(2_000));
        assert_eq!(parse("7ns"), Some(7));
        assert_eq!(parse(".5s"), Some(SECOND / 2));
        assert_eq!(parse("0"), Some(0));
        assert_eq!(parse("-5s"), Some(-5 * SECOND));
        assert_eq!(parse(" 10m "), Some(600 * SECOND));
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
            assert_eq!(parse(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn durations_print_like_go() {
        assert_eq!(format(0), "0s");
        assert_eq!(format(30 * SECOND), "30s");
        assert_eq!(format(600 * SECOND), "10m0s");
        assert_eq!(format(3600 * SECOND), "1h0m0s");
        assert_eq!(format(90 * SECOND + SECOND / 2), "1m30.5s");
        assert_eq!(format(SECOND / 2), "500ms");
        assert_eq!(format(1_500), "1.5µs");
        assert_eq!(format(-5 * SECOND), "-5s");
    }
}
