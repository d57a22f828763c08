//! kube-controller-manager's token controller, for Secrets of type
//! `kubernetes.io/service-account-token` that name a ServiceAccount in the
//! annotation `kubernetes.io/service-account.name`: it fills `data.token`,
//! `data.namespace` and, with TLS, `data.ca.crt`, and records the account's
//! uid in `kubernetes.io/service-account.uid`. kube-sim authenticates such a
//! token (and a TokenReview of it) while the Secret exists and the account
//! still has that uid.
//!
//! The token is an opaque random string, not a JWT: nothing in kube-sim
//! reads it but kube-sim. A Secret naming an account that does not exist
//! waits, unfilled, until the account appears (upstream deletes it).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use base64::Engine;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::Store;
use rand::RngCore;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::kubelet::informer::{self, Subscriber};

pub(crate) const TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
pub(crate) const ACCOUNT_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
pub(crate) const ACCOUNT_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";

pub(crate) fn spawn(client: kube::Client, ca_pem: Option<String>, shutdown: CancellationToken) {
    let wake = Subscriber::new();
    let secrets = informer::start(
        Api::<Secret>::all(client.clone()),
        vec![wake.clone()],
        shutdown.clone(),
    );
    tokio::spawn(run(client, secrets, ca_pem, wake, shutdown));
}

/// A token Secret still to fill: (namespace, name, account name).
fn unfilled(secret: &Secret) -> Option<(String, String, String)> {
    if secret.type_.as_deref() != Some(TOKEN_SECRET_TYPE)
        || secret.metadata.deletion_timestamp.is_some()
        || secret
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("token"))
    {
        return None;
    }
    let account = secret
        .metadata
        .annotations
        .as_ref()?
        .get(ACCOUNT_NAME_ANNOTATION)?
        .clone();
    Some((
        secret.metadata.namespace.clone()?,
        secret.metadata.name.clone()?,
        account,
    ))
}

async fn run(
    client: kube::Client,
    secrets: Store<Secret>,
    ca_pem: Option<String>,
    wake: Arc<Subscriber>,
    shutdown: CancellationToken,
) {
    if !informer::ready(&secrets, &shutdown).await {
        return;
    }
    // Secrets (by uid) already filled, so a lagging cache does not fill one twice.
    let mut filled: HashSet<String> = HashSet::new();
    loop {
        for secret in secrets.state() {
            let Some(uid) = secret.metadata.uid.clone() else {
                continue;
            };
            if filled.contains(&uid) {
                continue;
            }
            let Some((namespace, name, account)) = unfilled(&secret) else {
                continue;
            };
            if fill(&client, &namespace, &name, &account, ca_pem.as_deref()).await {
                filled.insert(uid);
            }
        }
        if !super::next_round(&wake, &shutdown).await {
            return;
        }
    }
}

/// Writes the token into one Secret; false to try again next round.
async fn fill(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    account: &str,
    ca_pem: Option<&str>,
) -> bool {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let Ok(Some(sa)) = accounts.get_opt(account).await else {
        return false;
    };
    let Some(account_uid) = sa.metadata.uid else {
        return false;
    };
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token = format!(
        "kube-sim-sa.{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut data = BTreeMap::from([
        ("token".to_string(), b64(&token)),
        ("namespace".to_string(), b64(namespace)),
    ]);
    if let Some(ca) = ca_pem {
        data.insert("ca.crt".to_string(), b64(ca));
    }
    let patch = json!({
        "metadata": {"annotations": {ACCOUNT_UID_ANNOTATION: account_uid}},
        "data": data,
    });
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match secrets
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::debug!(error = %e, secret = %format!("{namespace}/{name}"), "token secret: the write failed; retrying");
            false
        }
    }
}
