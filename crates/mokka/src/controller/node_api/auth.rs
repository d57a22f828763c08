//! Who may read a Node's assignment: the Node itself (`system:node:<name>`
//! in `system:nodes`, as its kubelet credentials say; a Node never reads
//! another Node's), or any other authenticated user the cluster allows to
//! `get` `sgpuracks`, whether a ServiceAccount or a person with their own
//! kubeconfig's token (as kube-rbac-proxy authorizes). The bearer token is
//! checked with a TokenReview and the right with a SubjectAccessReview for
//! the user, uid and groups the review returned, both against the API
//! server; answers are cached briefly (by a digest of the token, never the
//! token itself; rights by the whole identity) so agents polling often cost
//! the API server little.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// How long a review's answer is reused.
pub const REVIEW_TTL: Duration = Duration::from_secs(10);
/// Cached answers kept at most; expired ones are dropped beyond it.
const MAX_CACHED: usize = 50_000;

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// Why a request is not served.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// 401: no usable bearer token, or the API server did not accept it.
    #[error("{0}")]
    Unauthenticated(String),
    /// 403: authenticated, but not allowed to read this Node's assignment.
    #[error("{0}")]
    Forbidden(String),
    /// 503: the API server could not be asked.
    #[error("{0}")]
    Unavailable(String),
}

type Digest32 = [u8; 32];

struct Cached<T> {
    at: Instant,
    value: T,
}

/// Checks bearer tokens and ServiceAccount rights against the API server.
pub struct Authenticator {
    client: kube::Client,
    ttl: Duration,
    tokens: Mutex<HashMap<Digest32, Cached<Result<Caller, String>>>>,
    rights: Mutex<HashMap<String, Cached<bool>>>,
    token_reviews: Flights<Digest32>,
    access_reviews: Flights<String>,
}

/// One review in flight per key: when a cached answer expires, every
/// request of that caller arriving meanwhile waits for the one review
/// instead of sending its own (an agent fleet sharing a token would
/// otherwise send one review per waiting request at every expiry).
struct Flights<K> {
    gates: Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>,
}

impl<K: std::hash::Hash + Eq + Clone> Flights<K> {
    fn new() -> Self {
        Self {
            gates: Mutex::default(),
        }
    }

    /// The cached answer, else `review`'s; concurrent callers with the
    /// same key wait for the first one's review and take its answer.
    async fn once<T, Fut>(
        &self,
        key: &K,
        cached: impl Fn() -> Option<T>,
        review: impl FnOnce() -> Fut,
    ) -> Result<T, AuthError>
    where
        Fut: std::future::Future<Output = Result<T, AuthError>>,
    {
        if let Some(answer) = cached() {
            return Ok(answer);
        }
        let gate = Arc::clone(self.gates.lock().entry(key.clone()).or_default());
        let answer = {
            let _one_review = gate.lock().await;
            match cached() {
                Some(answer) => Ok(answer),
                None => review().await,
            }
        };
        let mut gates = self.gates.lock();
        // The map's handle and ours: nobody else waits, forget the gate.
        if Arc::strong_count(&gate) <= 2 {
            gates.remove(key);
        }
        answer
    }
}

/// A cached answer younger than `ttl`.
fn fresh<K: std::hash::Hash + Eq + ?Sized, Q, T: Clone>(
    map: &Mutex<HashMap<Q, Cached<T>>>,
    key: &K,
    ttl: Duration,
) -> Option<T>
where
    Q: std::borrow::Borrow<K> + std::hash::Hash + Eq,
{
    map.lock()
        .get(key)
        .filter(|cached| cached.at.elapsed() < ttl)
        .map(|cached| cached.value.clone())
}

fn remember<K: std::hash::Hash + Eq, T>(
    map: &mut HashMap<K, Cached<T>>,
    key: K,
    value: T,
    ttl: Duration,
) {
    if map.len() >= MAX_CACHED {
        map.retain(|_, cached| cached.at.elapsed() < ttl);
    }
    if map.len() < MAX_CACHED {
        map.insert(
            key,
            Cached {
                at: Instant::now(),
                value,
            },
        );
    }
}

impl Authenticator {
    pub fn new(client: kube::Client) -> Self {
        Self::with_ttl(client, REVIEW_TTL)
    }

    pub fn with_ttl(client: kube::Client, ttl: Duration) -> Self {
        Self {
            client,
            ttl,
            tokens: Mutex::default(),
            rights: Mutex::default(),
            token_reviews: Flights::new(),
            access_reviews: Flights::new(),
        }
    }

    /// The token of an `Authorization: Bearer …` header value.
    pub fn bearer(header: Option<&str>) -> Result<&str, AuthError> {
        let header = header.ok_or_else(|| {
            AuthError::Unauthenticated(
                "a bearer token is required (Authorization: Bearer <token>)".into(),
            )
        })?;
        let (scheme, token) = header.split_once(' ').unwrap_or((header, ""));
        let token = token.trim();
        if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() {
            return Err(AuthError::Unauthenticated(
                "the Authorization header must be \"Bearer <token>\"".into(),
            ));
        }
        Ok(token)
    }

    /// Who `token` speaks for, by TokenReview.
    pub async fn authenticate(&self, token: &str) -> Result<Caller, AuthError> {
        let digest: Digest32 = Sha256::digest(token.as_bytes()).into();
        self.token_reviews
            .once(
                &digest,
                || fresh(&self.tokens, &digest, self.ttl),
                || self.review_token(token, digest),
            )
            .await?
            .map_err(AuthError::Unauthenticated)
    }

    /// The TokenReview itself; its answer (either way) is remembered.
    async fn review_token(
        &self,
        token: &str,
        digest: Digest32,
    ) -> Result<Result<Caller, String>, AuthError> {
        let reviews: Api<TokenReview> = Api::all(self.client.clone());
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|error| {
                AuthError::Unavailable(format!("the token could not be reviewed: {error}"))
            })?;
        let status = answer.status.unwrap_or_default();
        let result = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => Ok(Caller {
                username: user.username.unwrap_or_default(),
                uid: user.uid.unwrap_or_default(),
                groups: user.groups.unwrap_or_default(),
            }),
            _ => Err(format!(
                "the API server did not authenticate the token{}",
                status
                    .error
                    .map(|error| format!(": {error}"))
                    .unwrap_or_default()
            )),
        };
        remember(&mut self.tokens.lock(), digest, result.clone(), self.ttl);
        Ok(result)
    }

    /// Whether `caller` may read the assignment of Node `node`.
    pub async fn authorize(&self, caller: &Caller, node: &str) -> Result<(), AuthError> {
        if let Some(asker) = caller.username.strip_prefix("system:node:") {
            let is_node = caller.groups.iter().any(|g| g == "system:nodes");
            if asker == node && is_node {
                return Ok(());
            }
            return Err(AuthError::Forbidden(format!(
                "{} may read only its own Node's assignment, not {node:?}",
                caller.username
            )));
        }
        // The right depends on the groups as much as on the name (an admin
        // is often an admin through system:masters), so the cached answer
        // is kept per whole identity.
        let identity = identity_key(caller);
        let allowed = self
            .access_reviews
            .once(
                &identity,
                || fresh(&self.rights, identity.as_str(), self.ttl),
                || self.review_access(caller, identity.clone()),
            )
            .await?;
        self.verdict(caller, allowed)
    }

    /// The SubjectAccessReview itself; its answer is remembered.
    async fn review_access(&self, caller: &Caller, identity: String) -> Result<bool, AuthError> {
        let reviews: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(caller.username.clone()),
                uid: (!caller.uid.is_empty()).then(|| caller.uid.clone()),
                groups: Some(caller.groups.clone()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("mokka.nvidia.com".into()),
                    resource: Some("sgpuracks".into()),
                    verb: Some("get".into()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|error| {
                AuthError::Unavailable(format!("the access could not be reviewed: {error}"))
            })?;
        let allowed = answer.status.is_some_and(|status| status.allowed);
        remember(&mut self.rights.lock(), identity, allowed, self.ttl);
        Ok(allowed)
    }

    fn verdict(&self, caller: &Caller, allowed: bool) -> Result<(), AuthError> {
        if allowed {
            Ok(())
        } else {
            Err(AuthError::Forbidden(format!(
                "{} may not get sgpuracks.mokka.nvidia.com",
                caller.username
            )))
        }
    }
}

/// A caller's user, uid and sorted groups, NUL-separated (no Kubernetes
/// name holds a NUL), as the key of its cached right.
fn identity_key(caller: &Caller) -> String {
    let mut groups = caller.groups.clone();
    groups.sort_unstable();
    groups.dedup();
    let mut key = format!("{}\0{}", caller.username, caller.uid);
    for group in groups {
        key.push('\0');
        key.push_str(&group);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_authorization_carries_a_token() {
        assert_eq!(Authenticator::bearer(Some("Bearer abc")).unwrap(), "abc");
        assert_eq!(Authenticator::bearer(Some("bearer  abc ")).unwrap(), "abc");
        for bad in [None, Some("Basic abc"), Some("Bearer"), Some("Bearer   ")] {
            assert!(matches!(
                Authenticator::bearer(bad),
                Err(AuthError::Unauthenticated(_))
            ));
        }
    }

    #[test]
    fn a_right_is_cached_per_user_uid_and_groups() {
        let caller = |groups: &[&str]| Caller {
            username: "alice".into(),
            uid: "u1".into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
        };
        assert_eq!(
            identity_key(&caller(&["b", "a"])),
            identity_key(&caller(&["a", "b", "a"]))
        );
        assert_ne!(
            identity_key(&caller(&["system:masters"])),
            identity_key(&caller(&[]))
        );
    }
}
