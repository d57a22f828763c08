//! Event notes that name every object one write was about.
//!
//! A controller pass that creates eleven pods, or a rack write that binds a
//! hundred Nodes, publishes one Event for the lot rather than one per
//! object: an Event is an API write, and one per object is most of a
//! controller's writes. The note lists the objects instead. When the list
//! does not fit the events.k8s.io limit on `note`, it goes on in further
//! notes (further Events) rather than ending in "... and N more": a reader
//! searching the Events for one pod must find it.

/// kube-apiserver refuses an `events.k8s.io/v1` note longer than 1 KiB.
pub const NOTE_LIMIT: usize = 1024;

/// Notes of the form `head(n)` followed by `n` items, comma separated, each
/// note within [`NOTE_LIMIT`] bytes and every item in exactly one note, in
/// the order given. `head` gets the number of items of its own note, so it
/// can say "pod" for one and "pods" for several. An item too long for a
/// note on its own (never a Kubernetes name, which is at most 253 bytes) is
/// cut at a character boundary.
pub fn listed_notes<I, S>(head: impl Fn(usize) -> String, items: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let items: Vec<S> = items.into_iter().collect();
    if items.is_empty() {
        return Vec::new();
    }
    // Pack against the longest head any note could get (a note holds at
    // most all the items), then write each note with its own count.
    let widest_head = head(items.len()).len();
    let room = NOTE_LIMIT.saturating_sub(widest_head);
    let mut chunks: Vec<Vec<&str>> = Vec::new();
    let mut used = 0;
    for item in &items {
        let item = cut_to(item.as_ref(), room);
        let separator = if used == 0 { 0 } else { ", ".len() };
        match chunks.last_mut() {
            Some(chunk) if used + separator + item.len() <= room => {
                chunk.push(item);
                used += separator + item.len();
            }
            _ => {
                chunks.push(vec![item]);
                used = item.len();
            }
        }
    }
    chunks
        .into_iter()
        .map(|chunk| {
            let mut note = head(chunk.len());
            note.push_str(&chunk.join(", "));
            note
        })
        .collect()
}

/// `text` shortened to at most `limit` bytes, on a character boundary.
fn cut_to(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pods(count: usize) -> String {
        if count == 1 {
            "Created pod: ".into()
        } else {
            "Created pods: ".into()
        }
    }

    #[test]
    fn one_item_gets_the_singular_head_and_several_share_one_note() {
        assert_eq!(listed_notes(pods, ["a-0"]), vec!["Created pod: a-0"]);
        assert_eq!(
            listed_notes(pods, ["a-chief-0", "a-ps-0", "a-worker-0"]),
            vec!["Created pods: a-chief-0, a-ps-0, a-worker-0"]
        );
        assert!(listed_notes(pods, Vec::<String>::new()).is_empty());
    }

    #[test]
    fn a_long_list_goes_on_in_further_notes_each_within_the_limit_and_names_every_item() {
        let names: Vec<String> = (0..200)
            .map(|i| format!("a-rather-long-job-name-worker-{i}"))
            .collect();
        let notes = listed_notes(pods, &names);
        assert!(notes.len() > 1, "{} notes", notes.len());
        for note in &notes {
            assert!(note.len() <= NOTE_LIMIT, "{} bytes: {note}", note.len());
        }
        let named: Vec<&str> = notes
            .iter()
            .flat_map(|note| {
                note.trim_start_matches("Created pods: ")
                    .trim_start_matches("Created pod: ")
                    .split(", ")
            })
            .collect();
        let expected: Vec<&str> = names.iter().map(String::as_str).collect();
        assert_eq!(named, expected);
    }

    #[test]
    fn the_head_counts_the_items_of_its_own_note() {
        let names: Vec<String> = (0..100)
            .map(|i| format!("node-{i:04}-xxxxxxxxxxxxxxx"))
            .collect();
        let notes = listed_notes(|n| format!("Bound {n} Nodes: "), &names);
        let counted: usize = notes
            .iter()
            .map(|note| {
                let count: usize = note["Bound ".len()..]
                    .split(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                assert_eq!(count, note.split(", ").count(), "{note}");
                count
            })
            .sum();
        assert_eq!(counted, 100);
    }

    #[test]
    fn an_item_longer_than_a_note_is_cut_on_a_character_boundary() {
        let long = "é".repeat(NOTE_LIMIT);
        let notes = listed_notes(pods, [long.as_str(), "b"]);
        assert_eq!(notes.len(), 2);
        assert!(notes.iter().all(|note| note.len() <= NOTE_LIMIT));
        assert_eq!(notes[1], "Created pod: b");
    }
}
