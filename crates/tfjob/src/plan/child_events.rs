//! The Events of one pass's child writes and pod exits: one per reason,
//! naming every child.
//!
//! training-operator records an Event per child ("Created pod: job-ps-0"),
//! eleven pod and eleven Service Events for a 1 Chief + 2 PS + 8 Worker
//! job, about a third of its API writes. This operator keeps the reasons
//! and lists the children of a pass in one Event per reason ("Created pods:
//! job-chief-0, job-ps-0, …"), split over more Events only when the list
//! passes the 1 KiB note limit. A pass that touched one child of a kind
//! writes exactly upstream's note. The referee corpus compares the two by
//! expanding the lists back into one line per child. The same goes for
//! `ExitedWithCode`, which training-operator writes for each terminated
//! pod: the exits one pass sees are one Event.

use controller_kit::event_notes::listed_notes;

use super::PlannedEvent;

/// The reason of the Event reporting a tensorflow container's exit.
pub const EXITED_WITH_CODE: &str = "ExitedWithCode";

/// The `ExitedWithCode` Events of one pass as one Event (more when the
/// list passes the note limit): "Pods exited with codes: ns.a-worker-0
/// (0), ns.a-worker-1 (137)". A single exit keeps its own Event and
/// upstream's note. Other Events pass through in order, after the exits.
pub fn list_exits(events: Vec<PlannedEvent>) -> Vec<PlannedEvent> {
    let (exits, others): (Vec<PlannedEvent>, Vec<PlannedEvent>) = events
        .into_iter()
        .partition(|event| event.reason == EXITED_WITH_CODE && event.listed_as.is_some());
    let mut out = if exits.len() <= 1 {
        exits
    } else {
        let items = exits.iter().filter_map(|exit| exit.listed_as.as_deref());
        listed_notes(|_| "Pods exited with codes: ".to_string(), items)
            .into_iter()
            .map(|note| PlannedEvent::normal(EXITED_WITH_CODE, note))
            .collect()
    };
    out.extend(others);
    out
}

/// A kind of child, as Events name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Child {
    Pod,
    Service,
}

impl Child {
    /// `pod` in "Created pod: …".
    fn noun(self) -> &'static str {
        match self {
            Child::Pod => "pod",
            Child::Service => "service",
        }
    }

    /// `Pod` in `SuccessfulCreatePod`.
    fn title(self) -> &'static str {
        match self {
            Child::Pod => "Pod",
            Child::Service => "Service",
        }
    }
}

/// What a pass did to a child.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    Created,
    Deleted,
}

impl Change {
    fn past(self) -> &'static str {
        match self {
            Change::Created => "Created",
            Change::Deleted => "Deleted",
        }
    }

    /// `Create` in `SuccessfulCreatePod`.
    fn verb(self) -> &'static str {
        match self {
            Change::Created => "Create",
            Change::Deleted => "Delete",
        }
    }
}

/// The children one pass created and deleted, in any order.
#[derive(Debug, Default)]
pub struct ChildChanges {
    changes: Vec<(Change, Child, String)>,
}

impl ChildChanges {
    pub fn record(&mut self, change: Change, child: Child, name: impl Into<String>) {
        self.changes.push((change, child, name.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// `(reason, note)` of each Event: creates before deletes, pods before
    /// Services, children in name order with replica indexes compared as
    /// numbers (`worker-2` before `worker-10`).
    pub fn events(mut self) -> Vec<(String, String)> {
        self.changes.sort_by(|a, b| {
            (a.0, a.1)
                .cmp(&(b.0, b.1))
                .then_with(|| natural_key(&a.2).cmp(&natural_key(&b.2)))
        });
        self.changes.dedup();
        let mut events = Vec::new();
        let mut rest = self.changes.as_slice();
        while let Some((change, child, _)) = rest.first().cloned() {
            let same = rest
                .iter()
                .take_while(|(c, k, _)| (*c, *k) == (change, child))
                .count();
            let (group, after) = rest.split_at(same);
            let reason = format!("Successful{}{}", change.verb(), child.title());
            let head = |count: usize| {
                let plural = if count == 1 { "" } else { "s" };
                format!("{} {}{plural}: ", change.past(), child.noun())
            };
            for note in listed_notes(head, group.iter().map(|(_, _, name)| name)) {
                events.push((reason.clone(), note));
            }
            rest = after;
        }
        events
    }
}

/// A name split at its last `-` with a numeric tail compared as a number.
fn natural_key(name: &str) -> (&str, u64, &str) {
    match name.rsplit_once('-') {
        Some((stem, index)) => match index.parse::<u64>() {
            Ok(number) => (stem, number, ""),
            Err(_) => (name, 0, ""),
        },
        None => (name, 0, name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_jobs_pass_is_one_event_per_kind_naming_every_child_in_replica_order() {
        let mut changes = ChildChanges::default();
        for name in ["a-worker-10", "a-worker-2", "a-chief-0", "a-ps-1", "a-ps-0"] {
            changes.record(Change::Created, Child::Service, name);
            changes.record(Change::Created, Child::Pod, name);
        }
        assert_eq!(
            changes.events(),
            vec![
                (
                    "SuccessfulCreatePod".to_string(),
                    "Created pods: a-chief-0, a-ps-0, a-ps-1, a-worker-2, a-worker-10".to_string()
                ),
                (
                    "SuccessfulCreateService".to_string(),
                    "Created services: a-chief-0, a-ps-0, a-ps-1, a-worker-2, a-worker-10"
                        .to_string()
                ),
            ]
        );
    }

    #[test]
    fn one_child_of_a_kind_keeps_upstreams_exact_note() {
        let mut changes = ChildChanges::default();
        changes.record(Change::Deleted, Child::Service, "a-ps-0");
        changes.record(Change::Deleted, Child::Pod, "a-ps-0");
        changes.record(Change::Created, Child::Pod, "a-worker-3");
        assert_eq!(
            changes.events(),
            vec![
                (
                    "SuccessfulCreatePod".into(),
                    "Created pod: a-worker-3".into()
                ),
                ("SuccessfulDeletePod".into(), "Deleted pod: a-ps-0".into()),
                (
                    "SuccessfulDeleteService".into(),
                    "Deleted service: a-ps-0".into()
                ),
            ]
        );
    }

    #[test]
    fn a_list_longer_than_one_note_goes_on_in_more_events_of_the_same_reason() {
        let mut changes = ChildChanges::default();
        let names: Vec<String> = (0..100)
            .map(|i| format!("a-job-with-a-fairly-long-name-worker-{i}"))
            .collect();
        for name in &names {
            changes.record(Change::Created, Child::Pod, name.clone());
        }
        let events = changes.events();
        assert!(events.len() > 1);
        assert!(
            events
                .iter()
                .all(|(reason, _)| reason == "SuccessfulCreatePod")
        );
        let named: Vec<String> = events
            .iter()
            .flat_map(|(_, note)| {
                note.trim_start_matches("Created pods: ")
                    .trim_start_matches("Created pod: ")
                    .split(", ")
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(named, names);
    }

    fn exit(pod: &str, code: i32) -> PlannedEvent {
        PlannedEvent::normal(
            EXITED_WITH_CODE,
            format!("Pod: ns.{pod} exited with code {code}"),
        )
        .keyed(format!("uid/exit/{pod}/0"))
        .listed_as(format!("ns.{pod} ({code})"))
    }

    #[test]
    fn the_exits_one_pass_sees_are_one_event_and_one_exit_keeps_upstreams_note() {
        let succeeded = PlannedEvent::normal("TFJobSucceeded", "done".into());
        let listed = list_exits(vec![
            exit("a-chief-0", 0),
            succeeded.clone(),
            exit("a-worker-0", 137),
        ]);
        let notes: Vec<(&str, &str)> = listed
            .iter()
            .map(|e| (e.reason.as_str(), e.message.as_str()))
            .collect();
        assert_eq!(
            notes,
            [
                (
                    EXITED_WITH_CODE,
                    "Pods exited with codes: ns.a-chief-0 (0), ns.a-worker-0 (137)"
                ),
                ("TFJobSucceeded", "done"),
            ]
        );
        let one = list_exits(vec![exit("a-chief-0", 0)]);
        assert_eq!(one, vec![exit("a-chief-0", 0)]);
    }

    #[test]
    fn nothing_changed_is_no_event() {
        let changes = ChildChanges::default();
        assert!(changes.is_empty());
        assert!(changes.events().is_empty());
    }
}
