//! The notes of the `NodeBound` / `NodeReleased` Events.
//!
//! One rack write binds or releases many Nodes at once (a new 100-Node rack
//! binds all 100). The controller publishes one Event per rack write and
//! decision, not one per Node: one API write per Node would be 100,000 of
//! them at the scale target. The note lists the Nodes instead, shortened to
//! fit the events.k8s.io limit on `note`. A later write about the same rack
//! with another note is an Event of its own (`publish_or_log_by_note`), so
//! each Event names the Nodes it is about; only identical notes fold into
//! a series.

/// kube-apiserver refuses an `events.k8s.io/v1` note longer than 1 KiB.
pub const NOTE_LIMIT: usize = 1024;

/// "Bound Node n to logical Node 3" for one binding; for several,
/// "Bound 100 Nodes to logical Nodes: n-a (0), n-b (1), ... and 80 more".
/// `bindings` are `(node name, logical node index)` in write order.
pub fn bound_note(bindings: &[(&str, i32)]) -> String {
    match bindings {
        [(name, index)] => format!("Bound Node {name} to logical Node {index}"),
        _ => listed(
            &format!("Bound {} Nodes to logical Nodes: ", bindings.len()),
            bindings
                .iter()
                .map(|(name, index)| format!("{name} ({index})")),
        ),
    }
}

/// "Released Node n from logical Node 3 (NodeGone)" for one release; for
/// several, "Released 10 Nodes from logical Nodes: n-a (0, NodeGone), ...".
/// `releases` are `(node name, logical node index, reason)`.
pub fn released_note(releases: &[(&str, i32, &str)]) -> String {
    match releases {
        [(name, index, reason)] => {
            format!("Released Node {name} from logical Node {index} ({reason})")
        }
        _ => listed(
            &format!("Released {} Nodes from logical Nodes: ", releases.len()),
            releases
                .iter()
                .map(|(name, index, reason)| format!("{name} ({index}, {reason})")),
        ),
    }
}

/// `head` followed by the items, comma separated, as many as fit within
/// [`NOTE_LIMIT`] together with an " and N more" tail.
fn listed(head: &str, items: impl ExactSizeIterator<Item = String>) -> String {
    let total = items.len();
    let mut note = head.to_string();
    for (shown, item) in items.enumerate() {
        let separator = if shown == 0 { "" } else { ", " };
        let left_after = total - shown - 1;
        // Room for this item and, if others follow, the longest tail they
        // could need.
        let tail = if left_after == 0 {
            0
        } else {
            format!(", ... and {total} more").len()
        };
        if note.len() + separator.len() + item.len() + tail > NOTE_LIMIT {
            note.push_str(&format!("{separator}... and {} more", total - shown));
            return note;
        }
        note.push_str(separator);
        note.push_str(&item);
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_binding_keeps_the_single_node_wording() {
        assert_eq!(
            bound_note(&[("node-7", 3)]),
            "Bound Node node-7 to logical Node 3"
        );
        assert_eq!(
            released_note(&[("node-7", 3, "NodeGone")]),
            "Released Node node-7 from logical Node 3 (NodeGone)"
        );
    }

    #[test]
    fn a_few_bindings_are_all_listed() {
        assert_eq!(
            bound_note(&[("a", 0), ("b", 1)]),
            "Bound 2 Nodes to logical Nodes: a (0), b (1)"
        );
        assert_eq!(
            released_note(&[("a", 0, "NodeGone"), ("b", 1, "CapacityRejected")]),
            "Released 2 Nodes from logical Nodes: a (0, NodeGone), b (1, CapacityRejected)"
        );
    }

    #[test]
    fn a_full_rack_is_shortened_to_the_limit_and_counts_the_rest() {
        let names: Vec<String> = (0..100).map(|i| format!("node-{i:06}")).collect();
        let bindings: Vec<(&str, i32)> = names
            .iter()
            .enumerate()
            .map(|(i, name)| (name.as_str(), i as i32))
            .collect();
        let note = bound_note(&bindings);
        assert!(note.len() <= NOTE_LIMIT, "{} bytes", note.len());
        assert!(note.starts_with("Bound 100 Nodes to logical Nodes: node-000000 (0), "));
        let shown = note.matches("node-").count();
        assert!(shown > 10 && shown < 100, "{shown} shown");
        assert!(
            note.ends_with(&format!(", ... and {} more", 100 - shown)),
            "{note}"
        );
    }

    #[test]
    fn an_item_longer_than_the_limit_still_gives_a_note_within_it() {
        let long = "n".repeat(2000);
        let note = bound_note(&[(long.as_str(), 0), ("b", 1)]);
        assert_eq!(note, "Bound 2 Nodes to logical Nodes: ... and 2 more");
        assert!(note.len() <= NOTE_LIMIT);
    }
}
