//! What storing a CustomResourceDefinition does to the set of served kinds.

use serde_json::Value;

use super::{ChangeType, ResourceStore, State};
use crate::crd;
use crate::error::ApiError;
use crate::object::{StoredObject, now_rfc3339};
use crate::resources::GroupResource;

fn condition_states(status: Option<&Value>) -> Vec<(String, String)> {
    status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .map(|conds| {
            conds
                .iter()
                .map(|c| {
                    let text = |k: &str| {
                        c.get(k)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string()
                    };
                    (text("type"), text("status"))
                })
                .collect()
        })
        .unwrap_or_default()
}

impl State {
    /// Sets the CRD's status as the apiextensions controllers would: names
    /// accepted and Established, unless a built-in kind already owns the names.
    pub(super) fn prepare_crd(&self, value: &mut Value) -> Result<(), ApiError> {
        let rt = crd::resource_type(value);
        let conflict = self
            .registry
            .get(&rt.group_resource())
            .filter(|existing| !existing.custom)
            .map(|_| format!("\"{}\" is already in use by a built-in resource", rt.plural));
        let mut status = crd::status(value, conflict, &now_rfc3339());
        // Keep transition times when nothing changed, so rewriting an
        // unchanged CRD stays a no-op.
        if condition_states(Some(&status)) == condition_states(value.get("status"))
            && let Some(old) = value.pointer("/status/conditions").cloned()
        {
            status["conditions"] = old;
        }
        value["status"] = status;
        Ok(())
    }

    fn crd_accepted(value: &Value) -> bool {
        condition_states(value.get("status"))
            .iter()
            .any(|(t, s)| t == "Established" && s == "True")
    }

    /// Starts (or updates) serving the kind of an accepted CRD.
    pub(super) fn register_crd(&mut self, stored: &StoredObject) {
        let value = stored.value();
        if !Self::crd_accepted(&value) {
            return;
        }
        let rt = crd::resource_type(&value);
        let gr = rt.group_resource();
        self.registry.insert(rt);
        if !self.resources.contains_key(&gr) {
            let epoch = self.next_epoch;
            self.next_epoch += 1;
            self.resources.insert(gr, ResourceStore::new(epoch));
        }
    }

    /// Stops serving a deleted CRD's kind; its objects go with it (each
    /// watcher sees their DELETED events, then its stream ends).
    pub(super) fn unregister_crd(&mut self, removed: &StoredObject) {
        let value = removed.value();
        let rt = crd::resource_type(&value);
        let gr: GroupResource = rt.group_resource();
        let Some(served) = self.registry.get(&gr).cloned() else {
            return;
        };
        if !served.custom {
            return;
        }
        let objects: Vec<_> = self
            .resources
            .get(&gr)
            .map(|r| r.objects.values().cloned().collect())
            .unwrap_or_default();
        for obj in objects {
            let _ = self.commit(&served, obj.value(), ChangeType::Deleted, Some(obj));
        }
        self.registry.remove(&gr);
        // Watchers keep reading the retired store until they have seen
        // every DELETED event; it is dropped once none is left.
        self.retired
            .retain(|(_, store)| store.notify.receiver_count() > 0);
        if let Some(store) = self.resources.remove(&gr) {
            store
                .notify
                .send_replace(store.history.back().map_or(0, |c| c.rv));
            self.retired.push((gr, store));
        }
    }
}
