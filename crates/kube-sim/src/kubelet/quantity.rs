//! Kubernetes resource quantities (`500m`, `2`, `256Gi`, `1e3`) as integer
//! milli-units, rounded up like `Quantity.MilliValue`.

/// A quantity that is not in the Kubernetes syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$', got {0:?}"
)]
pub struct InvalidQuantity(pub String);

/// Parses a quantity into thousandths of its unit (millicores for cpu,
/// millibytes for memory), so sums and comparisons are exact.
pub fn parse_milli(text: &str) -> Result<i128, InvalidQuantity> {
    let invalid = || InvalidQuantity(text.to_string());
    let s = text.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let (negative, digits) = match number.as_bytes().first() {
        Some(b'-') => (true, &number[1..]),
        Some(b'+') => (false, &number[1..]),
        _ => (false, number),
    };
    if digits.is_empty() || digits.matches('.').count() > 1 || digits == "." {
        return Err(invalid());
    }
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if !whole
        .chars()
        .chain(fraction.chars())
        .all(|c| c.is_ascii_digit())
    {
        return Err(invalid());
    }
    // value = mantissa * 10^(exp10) * 2^(exp2)
    let mantissa: i128 = format!("{whole}{fraction}")
        .parse()
        .map_err(|_| invalid())?;
    let mut exp10: i32 = -(fraction.len() as i32) + 3; // milli
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        other => {
            let exponent = other
                .strip_prefix('e')
                .or_else(|| other.strip_prefix('E'))
                .ok_or_else(invalid)?;
            exp10 += exponent.parse::<i32>().map_err(|_| invalid())?;
        }
    }
    let mut value = mantissa.checked_mul(1i128 << exp2).ok_or_else(invalid)?;
    if exp10 >= 0 {
        value = value
            .checked_mul(10i128.checked_pow(exp10 as u32).ok_or_else(invalid)?)
            .ok_or_else(invalid)?;
    } else {
        let divisor = 10i128
            .checked_pow(exp10.unsigned_abs())
            .ok_or_else(invalid)?;
        // Round away from zero, as MilliValue does for positive values.
        value = (value + divisor - 1) / divisor;
    }
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_forms_parse_to_milli_units() {
        assert_eq!(parse_milli("500m"), Ok(500));
        assert_eq!(parse_milli("2"), Ok(2000));
        assert_eq!(parse_milli("0.5"), Ok(500));
        assert_eq!(parse_milli("1Ki"), Ok(1024 * 1000));
        assert_eq!(parse_milli("256Gi"), Ok(256 * (1i128 << 30) * 1000));
        assert_eq!(parse_milli("1k"), Ok(1_000_000));
        assert_eq!(parse_milli("1e3"), Ok(1_000_000));
        assert_eq!(parse_milli("110"), Ok(110_000));
    }

    #[test]
    fn sub_milli_values_round_up() {
        assert_eq!(parse_milli("1n"), Ok(1));
        assert_eq!(parse_milli("0.0001"), Ok(1));
    }

    #[test]
    fn malformed_quantities_are_errors() {
        for bad in ["", "abc", "1.2.3", "5XB", "1e", "."] {
            assert!(parse_milli(bad).is_err(), "{bad}");
        }
    }
}
