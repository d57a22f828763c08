//! The many ways nvidia-smi says "there is no value here".
//!
//! nvidia-smi never omits an element it knows about; instead it prints a
//! placeholder whose spelling depends on the driver, the field and the reason
//! (unsupported, lost GPU, deprecated query, NVML error). Downstream consumers
//! should not have to know those spellings, so every one of them becomes `None`
//! at the parser boundary and nothing past it ever sees `N/A` as data.

/// Placeholders compared case-insensitively after trimming. The bracketed
/// forms are what newer drivers print for the same conditions.
const ABSENT_SPELLINGS: &[&str] = &[
    "n/a",
    "[n/a]",
    "not supported",
    "[not supported]",
    "unknown error",
    "[unknown error]",
    "gpu is lost",
    "[gpu is lost]",
    "requested functionality has been deprecated",
    "[requested functionality has been deprecated]",
    "insufficient permissions",
    "[insufficient permissions]",
];

/// Trims `raw` and returns it, or `None` when it is empty or one of the
/// placeholders nvidia-smi prints instead of a value.
pub fn present(raw: &str) -> Option<&str> {
    let trimmed = raw.trim();
    if trimmed.is_empty() || is_absent_spelling(trimmed) {
        None
    } else {
        Some(trimmed)
    }
}

fn is_absent_spelling(trimmed: &str) -> bool {
    // Every placeholder is ASCII, so a cheap length check avoids comparing
    // the (frequent) real values against the whole list.
    trimmed.len() <= 46
        && ABSENT_SPELLINGS
            .iter()
            .any(|spelling| spelling.eq_ignore_ascii_case(trimmed))
}

#[cfg(test)]
mod tests {
    use super::present;

    #[test]
    fn every_documented_absent_spelling_is_no_value() {
        for spelling in [
            "",
            "   ",
            "N/A",
            "[N/A]",
            "Not Supported",
            "[Not Supported]",
            "[Unknown Error]",
            "GPU is lost",
            "Requested functionality has been deprecated",
            "\n\t\tN/A\n",
        ] {
            assert_eq!(present(spelling), None, "{spelling:?} should be absent");
        }
    }

    #[test]
    fn real_values_are_trimmed_and_kept_verbatim() {
        assert_eq!(present("  1650000000001\n"), Some("1650000000001"));
        assert_eq!(
            present("0123"),
            Some("0123"),
            "leading zeros of serials survive"
        );
        assert_eq!(present("Switch Connected"), Some("Switch Connected"));
    }

    #[test]
    fn a_value_that_merely_contains_a_placeholder_is_kept() {
        assert_eq!(present("N/A-1234"), Some("N/A-1234"));
        assert_eq!(present("GPU is lost soon"), Some("GPU is lost soon"));
    }
}
