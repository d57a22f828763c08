//! Sets of replica indices written as ranges (`"0-2,5"`), the form of
//! `replicaStatuses[T].succeededIndexes` (the notation batch/v1 Jobs use
//! for `completedIndexes`), so a status stays small however many replicas
//! a job has.

use std::collections::BTreeSet;

/// Reads a range string; parts that are not `N` or `N-M` with `N <= M`
/// are skipped (the operator wrote the field, so only a hand edit can
/// break it, and a lost index is merely run again).
pub fn parse(text: &str) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (low, high) = match part.split_once('-') {
            Some((low, high)) => (low.trim().parse::<i32>(), high.trim().parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        if let (Ok(low), Ok(high)) = (low, high)
            && 0 <= low
            && low <= high
        {
            out.extend(low..=high);
        }
    }
    out
}

/// Writes a set as ranges, lowest first; `None` for the empty set, so the
/// field stays absent until something succeeded.
pub fn format(indexes: &BTreeSet<i32>) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut iter = indexes.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_sets_round_trip_through_the_range_notation() {
        let set: BTreeSet<i32> = [0, 1, 2, 5, 7, 8].into();
        assert_eq!(format(&set).as_deref(), Some("0-2,5,7-8"));
        assert_eq!(parse("0-2,5,7-8"), set);
        assert_eq!(format(&BTreeSet::new()), None);
        assert_eq!(parse(""), BTreeSet::new());
    }

    #[test]
    fn malformed_parts_of_an_index_set_are_skipped() {
        assert_eq!(parse("1, x, 3-2, -4, 6-7"), [1, 6, 7].into());
    }
}
