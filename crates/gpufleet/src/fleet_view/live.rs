//! Keeps the fleet view's [`Model`] current: one task per server waits for
//! the watch caches to report a change, lets a burst settle, recomputes
//! only what changed ([`Model::update`]) and broadcasts the delta to every
//! open page. While nothing changes the task sleeps: an idle fleet costs
//! no CPU, however large.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::model::{Delta, Mode, Model};
use super::state::FleetState;

/// Changes closer together than this are sent as one delta.
const COALESCE: Duration = Duration::from_millis(250);
/// Deltas a slow page may fall behind by before it is told to refetch.
const BACKLOG: usize = 256;

/// One delta, with its JSON as sent, so it is serialised once for all pages.
pub struct Update {
    pub delta: Delta,
    pub json: String,
}

pub struct Live {
    mode: Mode,
    model: RwLock<Model>,
    updates: broadcast::Sender<Arc<Update>>,
}

impl Live {
    /// Builds the model from `state` and keeps it current until `stop`.
    pub fn start(state: FleetState, mode: Mode, stop: CancellationToken) -> Arc<Live> {
        let live = Arc::new(Live {
            mode,
            model: RwLock::new(Model::new(mode, state.workloads)),
            updates: broadcast::channel(BACKLOG).0,
        });
        // The first pass, so a page opened right away sees what is cached.
        live.refresh(&state);
        let task = live.clone();
        tokio::spawn(async move { task.run(state, stop).await });
        live
    }

    async fn run(&self, state: FleetState, stop: CancellationToken) {
        let mut changes = state.subscribe();
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                changed = changes.changed() => if changed.is_err() { return },
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(COALESCE) => {}
            }
            changes.mark_unchanged();
            self.refresh(&state);
        }
    }

    fn refresh(&self, state: &FleetState) {
        let dirty = state.take_dirty();
        if dirty.is_empty() {
            return;
        }
        let delta = self.model.write().update(state, dirty);
        if delta.is_empty() {
            return;
        }
        match serde_json::to_string(&delta) {
            // No page listening is not an error.
            Ok(json) => {
                let _ = self.updates.send(Arc::new(Update { delta, json }));
            }
            Err(error) => tracing::warn!(%error, "cannot serialise a fleet view delta"),
        }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The current counts.
    pub fn summary(&self) -> super::model::Summary {
        self.model.read().summary.clone()
    }

    /// The whole model as JSON.
    pub fn snapshot(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&*self.model.read())
    }

    /// Deltas from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Update>> {
        self.updates.subscribe()
    }
}
