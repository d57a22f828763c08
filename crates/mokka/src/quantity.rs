//! The canonical form Kubernetes gives a resource quantity when it encodes
//! one (`resource.Quantity.String()` in apimachinery): the value is kept,
//! the suffix family (binary `Ki`..`Ei`, decimal SI `n`..`E`, or an `e`
//! exponent) is kept, and the suffix is made as large as the value allows
//! without a fraction. `1024Mi` is `1Gi`, `0.5Gi` is `512Mi`, `1.5G` is
//! `1500M`, `0.1` is `100m`, `1000` is `1k`, `1.5e3` is `1500`. Profile
//! revisions hash Quantities in this form, as upstream's Go encoder does.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Binary,
    DecimalSi,
    Exponent,
}

const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// The canonical form of `raw`, or `None` when it is not a quantity this
/// function can represent exactly (not a quantity at all, or a mantissa
/// beyond 38 digits); callers then keep the text as written.
pub fn canonical(raw: &str) -> Option<String> {
    let text = raw.trim();
    let (negative, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let number_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let mut mantissa: u128 = 0;
    for digit in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(u128::from(digit - b'0'))?;
    }
    let mut exponent = -i32::try_from(fraction.len()).ok()?;
    let family = match suffix {
        "" => Family::DecimalSi,
        "n" => decimal(&mut exponent, -9),
        "u" => decimal(&mut exponent, -6),
        "m" => decimal(&mut exponent, -3),
        "k" => decimal(&mut exponent, 3),
        "M" => decimal(&mut exponent, 6),
        "G" => decimal(&mut exponent, 9),
        "T" => decimal(&mut exponent, 12),
        "P" => decimal(&mut exponent, 15),
        "E" => decimal(&mut exponent, 18),
        _ => {
            if let Some(power) = BINARY_SUFFIXES.iter().position(|s| *s == suffix) {
                for _ in 0..power {
                    mantissa = mantissa.checked_mul(1024)?;
                }
                Family::Binary
            } else {
                let digits = suffix.strip_prefix(['e', 'E'])?;
                let (sign, digits) = match digits.as_bytes().first()? {
                    b'-' => (-1, &digits[1..]),
                    b'+' => (1, &digits[1..]),
                    _ => (1, digits),
                };
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                exponent = exponent.checked_add(sign * digits.parse::<i32>().ok()?)?;
                Family::Exponent
            }
        }
    };
    let sign = if negative && mantissa != 0 { "-" } else { "" };

    if family == Family::Binary {
        // Binary output only for whole values of at least 1024; anything
        // else is shown in decimal SI so no precision is lost.
        let whole_value = integer_value(mantissa, exponent);
        if let Some(mut value) = whole_value.filter(|value| *value >= 1024) {
            let mut power = 0;
            while power < BINARY_SUFFIXES.len() - 1 && value.is_multiple_of(1024) {
                value /= 1024;
                power += 1;
            }
            return Some(format!("{sign}{value}{}", BINARY_SUFFIXES[power]));
        }
    }
    if mantissa == 0 {
        return Some("0".to_string());
    }
    while mantissa.is_multiple_of(10) {
        mantissa /= 10;
        exponent = exponent.checked_add(1)?;
    }
    let shift = exponent.rem_euclid(3);
    for _ in 0..shift {
        mantissa = mantissa.checked_mul(10)?;
    }
    exponent -= shift;
    let suffix = match (family, exponent) {
        (_, 0) => String::new(),
        (Family::Exponent, _) => format!("e{exponent}"),
        (_, -9) => "n".into(),
        (_, -6) => "u".into(),
        (_, -3) => "m".into(),
        (_, 3) => "k".into(),
        (_, 6) => "M".into(),
        (_, 9) => "G".into(),
        (_, 12) => "T".into(),
        (_, 15) => "P".into(),
        (_, 18) => "E".into(),
        _ => format!("e{exponent}"),
    };
    Some(format!("{sign}{mantissa}{suffix}"))
}

fn decimal(exponent: &mut i32, by: i32) -> Family {
    *exponent += by;
    Family::DecimalSi
}

/// `mantissa * 10^exponent` when it is a whole number that fits.
fn integer_value(mantissa: u128, exponent: i32) -> Option<u128> {
    if exponent >= 0 {
        let mut value = mantissa;
        for _ in 0..exponent {
            value = value.checked_mul(10)?;
        }
        Some(value)
    } else {
        let divisor = 10u128.checked_pow(exponent.unsigned_abs())?;
        mantissa
            .is_multiple_of(divisor)
            .then_some(mantissa / divisor)
    }
}

#[cfg(test)]
mod tests {
    use super::canonical;

    #[test]
    fn quantities_take_apimachinerys_canonical_form() {
        // Vectors of resource.Quantity.String() for the parsed input.
        for (raw, expected) in [
            ("40Gi", "40Gi"),
            ("1Mi", "1Mi"),
            ("32Gi", "32Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1Ki", "1Ki"),
            ("0.5Ki", "512"),
            ("1.5G", "1500M"),
            ("1000", "1k"),
            ("1000000", "1M"),
            ("0.1", "100m"),
            ("100m", "100m"),
            ("1500m", "1500m"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("1E6", "1e6"),
            ("0", "0"),
            ("0Gi", "0"),
            ("-1Gi", "-1Gi"),
            ("+2k", "2k"),
            ("12", "12"),
            ("1200", "1200"),
            ("1.0", "1"),
        ] {
            assert_eq!(canonical(raw).as_deref(), Some(expected), "{raw}");
        }
        for invalid in ["", "Gi", "40 GB", "1.2.3", "1e", "abc", "1Zi"] {
            assert_eq!(canonical(invalid), None, "{invalid}");
        }
    }
}
