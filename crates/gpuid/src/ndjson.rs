//! Newline-delimited JSON, the output format of `gpuid parse` and of the
//! stdout exporter.

use serde::Serialize;

/// One compact JSON object per line, each line ending in `\n`.
pub(crate) fn to_ndjson<'a, T: Serialize + 'a>(items: impl IntoIterator<Item = &'a T>) -> String {
    let mut out = String::new();
    for item in items {
        // The types written here hold strings, integers, enums and
        // timestamps only; serialising them into a String cannot fail.
        if let Ok(line) = serde_json::to_string(item) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
