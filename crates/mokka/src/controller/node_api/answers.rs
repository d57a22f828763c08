//! Encoded answers kept per Node for one revision of the read API's inputs.
//! Agents ask far more often than racks, inventories, profiles or policies
//! change, and building, encoding and digesting an answer was most of the
//! node API's own work per request. Any input change moves the revision
//! (the read API's change counter), which makes every kept answer stale at
//! once, so an answer is never older than the inputs it was built from.

use std::collections::HashMap;

use bytes::Bytes;
use parking_lot::Mutex;

/// Answers kept at most (one per Node asked during one revision): beyond
/// it answers are built per request, as without the cache.
const MAX_ANSWERS: usize = 65_536;

/// One encoded answer: the JSON body and its entity tag.
#[derive(Clone)]
pub(super) struct Encoded {
    pub body: Bytes,
    pub etag: String,
}

struct Kept {
    uid: String,
    answer: Encoded,
}

#[derive(Default)]
struct Inner {
    revision: u64,
    /// By Node name; the UID must match too (a replaced Node is a miss).
    answers: HashMap<String, Kept>,
}

#[derive(Default)]
pub(super) struct AnswerCache {
    inner: Mutex<Inner>,
}

impl AnswerCache {
    /// The answer kept for this Node at `revision`, if any.
    pub fn get(&self, revision: u64, name: &str, uid: &str) -> Option<Encoded> {
        let inner = self.inner.lock();
        if inner.revision != revision {
            return None;
        }
        inner
            .answers
            .get(name)
            .filter(|kept| kept.uid == uid)
            .map(|kept| kept.answer.clone())
    }

    /// Keeps an answer built from the inputs at `revision`. A newer
    /// revision drops every answer of the older one; an answer built from
    /// an older revision than the kept ones is not kept.
    pub fn put(&self, revision: u64, name: &str, uid: &str, answer: Encoded) {
        let mut inner = self.inner.lock();
        if revision < inner.revision {
            return;
        }
        if revision > inner.revision {
            inner.answers.clear();
            inner.revision = revision;
        }
        if inner.answers.len() >= MAX_ANSWERS && !inner.answers.contains_key(name) {
            return;
        }
        inner.answers.insert(
            name.to_string(),
            Kept {
                uid: uid.to_string(),
                answer,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> Encoded {
        Encoded {
            body: Bytes::from(text.to_string()),
            etag: format!("\"{text}\""),
        }
    }

    #[test]
    fn an_answer_is_reused_only_for_the_same_revision_and_node_identity() {
        let cache = AnswerCache::default();
        cache.put(3, "node-a", "uid-1", answer("a1"));
        assert_eq!(cache.get(3, "node-a", "uid-1").unwrap().body, "a1");
        assert!(cache.get(3, "node-a", "uid-2").is_none(), "a replaced Node");
        assert!(cache.get(3, "node-b", "uid-1").is_none());
        assert!(cache.get(4, "node-a", "uid-1").is_none(), "inputs changed");
    }

    #[test]
    fn a_newer_revision_drops_every_older_answer_and_an_older_one_is_not_kept() {
        let cache = AnswerCache::default();
        cache.put(3, "node-a", "uid-1", answer("a1"));
        cache.put(3, "node-b", "uid-2", answer("b1"));
        cache.put(4, "node-a", "uid-1", answer("a2"));
        assert!(cache.get(3, "node-b", "uid-2").is_none());
        assert!(cache.get(4, "node-b", "uid-2").is_none());
        // Built before the change but finished after it: stale, not kept.
        cache.put(3, "node-b", "uid-2", answer("b1"));
        assert!(cache.get(4, "node-b", "uid-2").is_none());
        assert_eq!(cache.get(4, "node-a", "uid-1").unwrap().body, "a2");
    }
}
