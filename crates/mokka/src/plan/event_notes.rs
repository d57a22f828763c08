//! The notes of the `NodeBound` / `NodeReleased` Events.
//!
//! One rack write binds or releases many Nodes at once (a new 100-Node rack
//! binds all 100). The controller publishes one Event per rack write and
//! decision, not one per Node: one API write per Node would be 100,000 of
//! them at the scale target. The notes list the Nodes instead, in as many
//! notes as the events.k8s.io limit on `note` needs, so every Node bound or
//! released is named by some Event (`controller_kit::event_notes`). A later
//! write about the same rack with another note is an Event of its own
//! (`publish_or_log_by_note`); only identical notes fold into a series.

use controller_kit::event_notes::listed_notes;

/// "Bound Node n to logical Node 3" for one binding; for several,
/// "Bound 2 Nodes to logical Nodes: n-a (0), n-b (1)", continued in further
/// notes when the list is longer than a note holds. `bindings` are
/// `(node name, logical node index)` in write order.
pub fn bound_notes(bindings: &[(&str, i32)]) -> Vec<String> {
    match bindings {
        [(name, index)] => vec![format!("Bound Node {name} to logical Node {index}")],
        _ => listed_notes(
            |count| format!("Bound {count} Nodes to logical Nodes: "),
            bindings
                .iter()
                .map(|(name, index)| format!("{name} ({index})")),
        ),
    }
}

/// "Released Node n from logical Node 3 (NodeGone)" for one release; for
/// several, "Released 2 Nodes from logical Nodes: n-a (0, NodeGone), ...",
/// continued like [`bound_notes`]. `releases` are `(node name, logical
/// node index, reason)`.
pub fn released_notes(releases: &[(&str, i32, &str)]) -> Vec<String> {
    match releases {
        [(name, index, reason)] => {
            vec![format!(
                "Released Node {name} from logical Node {index} ({reason})"
            )]
        }
        _ => listed_notes(
            |count| format!("Released {count} Nodes from logical Nodes: "),
            releases
                .iter()
                .map(|(name, index, reason)| format!("{name} ({index}, {reason})")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use controller_kit::event_notes::NOTE_LIMIT;

    use super::*;

    #[test]
    fn one_binding_keeps_the_single_node_wording() {
        assert_eq!(
            bound_notes(&[("node-7", 3)]),
            vec!["Bound Node node-7 to logical Node 3"]
        );
        assert_eq!(
            released_notes(&[("node-7", 3, "NodeGone")]),
            vec!["Released Node node-7 from logical Node 3 (NodeGone)"]
        );
    }

    #[test]
    fn a_few_bindings_are_all_listed() {
        assert_eq!(
            bound_notes(&[("a", 0), ("b", 1)]),
            vec!["Bound 2 Nodes to logical Nodes: a (0), b (1)"]
        );
        assert_eq!(
            released_notes(&[("a", 0, "NodeGone"), ("b", 1, "CapacityRejected")]),
            vec!["Released 2 Nodes from logical Nodes: a (0, NodeGone), b (1, CapacityRejected)"]
        );
    }

    #[test]
    fn a_full_rack_goes_on_in_further_notes_that_name_every_node() {
        let names: Vec<String> = (0..100).map(|i| format!("node-{i:06}")).collect();
        let bindings: Vec<(&str, i32)> = names
            .iter()
            .enumerate()
            .map(|(i, name)| (name.as_str(), i as i32))
            .collect();
        let notes = bound_notes(&bindings);
        assert!(notes.len() > 1, "{notes:?}");
        assert!(notes.iter().all(|note| note.len() <= NOTE_LIMIT));
        assert!(notes[0].starts_with("Bound "), "{}", notes[0]);
        for (i, name) in names.iter().enumerate() {
            let item = format!("{name} ({i})");
            assert_eq!(
                notes.iter().filter(|note| note.contains(&item)).count(),
                1,
                "{item}"
            );
        }
    }
}
