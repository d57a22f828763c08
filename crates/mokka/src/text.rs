//! Small text helpers shared by the messages of several modules.

use std::fmt::Write as _;

/// Quotes `raw` the way Go's `%q` does for the strings that occur in Mokka
/// messages (names, IDs, PCI addresses): double quotes, with `"` and `\`
/// backslash-escaped and control characters escaped. Upstream messages use
/// `%q`, and matching them keeps messages identical for the same input.
pub fn go_quote(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len() + 2);
    out.push('"');
    for ch in raw.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{07}' => out.push_str("\\a"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            '\u{0b}' => out.push_str("\\v"),
            ch if (ch as u32) < 0x20 || ch == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", ch as u32);
            }
            ch => out.push(ch),
        }
    }
    out.push('"');
    out
}

/// Joins quoted strings with ", " (`"a", "b"`).
pub fn quoted_list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    items
        .into_iter()
        .map(go_quote)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Formats integers as Go prints an `[]int32` with `%v`: `[1 2 3]`.
pub fn go_int_list(items: &[i32]) -> String {
    let body = items
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    format!("[{body}]")
}

/// Joins integers with "," (status summaries).
pub fn comma_joined(items: &[i32]) -> String {
    items
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_escapes_quotes_backslashes_and_controls() {
        assert_eq!(go_quote("0000:01:00.0"), "\"0000:01:00.0\"");
        assert_eq!(go_quote("a\"b\\c\n\u{01}"), "\"a\\\"b\\\\c\\n\\x01\"");
    }

    #[test]
    fn integer_lists_print_like_go() {
        assert_eq!(go_int_list(&[2, 5]), "[2 5]");
        assert_eq!(go_int_list(&[]), "[]");
        assert_eq!(comma_joined(&[0, 1, 10]), "0,1,10");
    }
}
