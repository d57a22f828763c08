//! Bearer tokens kube-sim can vouch for in a `TokenReview`: ServiceAccount
//! tokens it issued through `TokenRequest` (signed JWTs, so they outlive a
//! restart that keeps the signing key), and static tokens configured like
//! kube-apiserver's `--token-auth-file`.
//!
//! kube-sim does not authenticate its own requests with them (every client
//! is still cluster-admin); the tokens exist so a component that checks its
//! callers with a TokenReview — Mokka's node-agent API — can be tested
//! against kube-sim as against a real API server.

use std::collections::HashMap;

use rand::RngCore;

/// The audience tokens are issued for when a TokenRequest names none, and
/// the one a TokenReview without audiences checks against (kube-apiserver
/// uses its `--api-audiences`, by default the service-account issuer).
pub const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc";

/// The shortest validity a TokenRequest may ask for (kube-apiserver's rule).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The validity of a TokenRequest that names none.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// Who a token speaks for, as a TokenReview reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenUser {
    pub username: String,
    pub uid: String,
    /// Without `system:authenticated`, which every review adds.
    pub groups: Vec<String>,
}

/// One line of a token file: `token,user,uid[,"group1,group2"]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticToken {
    pub token: String,
    pub user: TokenUser,
}

/// A token file line kube-apiserver would refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token file line {line}: {problem}")]
pub struct TokenFileError {
    pub line: usize,
    pub problem: String,
}

impl StaticToken {
    /// A static token for `username` with `uid` and `groups`.
    pub fn new(token: &str, username: &str, uid: &str, groups: &[&str]) -> Self {
        Self {
            token: token.to_string(),
            user: TokenUser {
                username: username.to_string(),
                uid: uid.to_string(),
                groups: groups.iter().map(|g| g.to_string()).collect(),
            },
        }
    }

    /// Parses a `--token-auth-file`: CSV lines `token,user,uid` with an
    /// optional fourth column of groups (quoted when it has commas); blank
    /// lines and lines starting with `#` are skipped.
    pub fn parse_file(text: &str) -> Result<Vec<StaticToken>, TokenFileError> {
        let mut tokens = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |problem: &str| TokenFileError {
                line: number + 1,
                problem: problem.to_string(),
            };
            let fields = split_csv(line).ok_or_else(|| error("unterminated quote"))?;
            if fields.len() < 3 {
                return Err(error("needs at least three columns: token, user name, uid"));
            }
            if fields[0].is_empty() || fields[1].is_empty() {
                return Err(error("the token and the user name must not be empty"));
            }
            let groups = fields
                .get(3)
                .map(|groups| {
                    groups
                        .split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            tokens.push(StaticToken {
                token: fields[0].clone(),
                user: TokenUser {
                    username: fields[1].clone(),
                    uid: fields[2].clone(),
                    groups,
                },
            });
        }
        Ok(tokens)
    }
}

/// Splits one CSV line; `None` for an unterminated quote.
fn split_csv(line: &str) -> Option<Vec<String>> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                current.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut current)),
            (c, _) => current.push(c),
        }
    }
    if quoted {
        return None;
    }
    fields.push(current);
    Some(fields)
}

/// What a TokenReview found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    Authenticated {
        user: TokenUser,
        /// The requested audiences the token is valid for (the default
        /// audience when the review named none).
        audiences: Vec<String>,
    },
    Rejected(String),
}

/// The length of the key ServiceAccount tokens are signed with.
pub const SIGNING_KEY_LEN: usize = 32;

/// The issuer written into ServiceAccount tokens (kube-apiserver's default
/// `--service-account-issuer` on most installers).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Static tokens, and the key that signs and checks issued ones.
///
/// An issued token is a JWT (HS256) carrying who it is for, its audiences
/// and expiry, like kube-apiserver's (which signs RS256 with its
/// service-account key): nothing about it is kept in memory, so it stays
/// valid across a restart that keeps the key (`--data-dir` does,
/// credentials.rs), and any number can be issued without the server
/// growing.
pub struct Tokens {
    static_tokens: HashMap<String, TokenUser>,
    signing: ring::hmac::Key,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the tokens or the key.
        f.debug_struct("Tokens")
            .field("static_tokens", &self.static_tokens.len())
            .finish_non_exhaustive()
    }
}

/// The claims of an issued token, named as kube-apiserver names them.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: Vec<String>,
    exp: i64,
    iat: i64,
    nbf: i64,
    jti: String,
    #[serde(rename = "kubernetes.io")]
    kubernetes: KubernetesClaims,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct KubernetesClaims {
    namespace: String,
    serviceaccount: AccountRef,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct AccountRef {
    name: String,
    uid: String,
}

fn b64url(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn from_b64url(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()
}

impl Tokens {
    /// `static_tokens`, and issued tokens signed with `signing_key`.
    pub fn new(static_tokens: Vec<StaticToken>, signing_key: &[u8; SIGNING_KEY_LEN]) -> Self {
        Self {
            static_tokens: static_tokens
                .into_iter()
                .map(|t| (t.token, t.user))
                .collect(),
            signing: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, signing_key),
        }
    }

    /// A fresh random signing key, for a server that keeps none.
    pub fn random_key() -> [u8; SIGNING_KEY_LEN] {
        let mut key = [0u8; SIGNING_KEY_LEN];
        rand::rng().fill_bytes(&mut key);
        key
    }

    /// Issues a signed token for ServiceAccount `namespace/name` (`uid`),
    /// valid for `audiences` until `expires`.
    pub fn issue(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audiences: Vec<String>,
        expires: jiff::Timestamp,
    ) -> String {
        let now = jiff::Timestamp::now().as_second();
        let claims = Claims {
            iss: ISSUER.to_string(),
            sub: format!("system:serviceaccount:{namespace}:{name}"),
            aud: audiences,
            exp: expires.as_second(),
            iat: now,
            nbf: now,
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes: KubernetesClaims {
                namespace: namespace.to_string(),
                serviceaccount: AccountRef {
                    name: name.to_string(),
                    uid: uid.to_string(),
                },
            },
        };
        // Serializing these plain strings and numbers cannot fail.
        let payload = serde_json::to_vec(&claims).unwrap_or_default();
        let signed = format!(
            "{}.{}",
            b64url(br#"{"alg":"HS256","typ":"JWT"}"#),
            b64url(&payload)
        );
        let tag = ring::hmac::sign(&self.signing, signed.as_bytes());
        format!("{signed}.{}", b64url(tag.as_ref()))
    }

    /// The claims of `token` if this server signed it (expiry unchecked).
    fn verified_claims(&self, token: &str) -> Option<Claims> {
        let (signed, tag) = token.rsplit_once('.')?;
        let (_header, payload) = signed.split_once('.')?;
        let tag = from_b64url(tag)?;
        ring::hmac::verify(&self.signing, signed.as_bytes(), &tag).ok()?;
        serde_json::from_slice(&from_b64url(payload)?).ok()
    }

    /// Reviews `token` for `audiences` at `now`. `account_uid` answers the
    /// current UID of a ServiceAccount, `None` when it no longer exists.
    pub fn review(
        &self,
        token: &str,
        audiences: &[String],
        now: jiff::Timestamp,
        account_uid: impl Fn(&str, &str) -> Option<String>,
    ) -> Review {
        let wanted: Vec<String> = if audiences.is_empty() {
            vec![DEFAULT_AUDIENCE.to_string()]
        } else {
            audiences.to_vec()
        };
        // kube-apiserver reports a static token valid for whatever was asked
        // (its own audiences when nothing was).
        if let Some(user) = self.static_tokens.get(token) {
            return Review::Authenticated {
                user: user.clone(),
                audiences: wanted,
            };
        }
        let Some(claims) = self.verified_claims(token) else {
            return Review::Rejected("invalid bearer token".into());
        };
        if now.as_second() >= claims.exp {
            return Review::Rejected("invalid bearer token, token has expired".into());
        }
        let matched: Vec<String> = wanted
            .into_iter()
            .filter(|audience| claims.aud.contains(audience))
            .collect();
        if matched.is_empty() {
            return Review::Rejected("invalid bearer token, token audiences is invalid".into());
        }
        let namespace = &claims.kubernetes.namespace;
        let account = &claims.kubernetes.serviceaccount;
        match account_uid(namespace, &account.name) {
            Some(uid) if uid == account.uid => Review::Authenticated {
                user: TokenUser {
                    username: claims.sub.clone(),
                    uid: account.uid.clone(),
                    groups: vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{namespace}"),
                    ],
                },
                audiences: matched,
            },
            _ => Review::Rejected(format!(
                "invalid bearer token, service account {namespace}/{} has been deleted",
                account.name
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn a_token_file_has_token_user_uid_and_quoted_groups() {
        let tokens = StaticToken::parse_file(
            "# comment\n\nabc,system:node:n1,uid-1,\"system:nodes,extra\"\nxyz,alice,2\n",
        )
        .unwrap();
        assert_eq!(
            tokens,
            vec![
                StaticToken::new("abc", "system:node:n1", "uid-1", &["system:nodes", "extra"]),
                StaticToken::new("xyz", "alice", "2", &[]),
            ]
        );
        assert_eq!(
            StaticToken::parse_file("abc,alice")
                .unwrap_err()
                .to_string(),
            "token file line 1: needs at least three columns: token, user name, uid"
        );
        assert!(StaticToken::parse_file("abc,alice,1,\"open").is_err());
    }

    #[test]
    fn issued_tokens_expire_need_their_audience_and_die_with_their_account() {
        let tokens = Tokens::new(
            vec![StaticToken::new("s", "bob", "7", &["g"])],
            &Tokens::random_key(),
        );
        let token = tokens.issue("ns", "sa", "uid-sa", vec![DEFAULT_AUDIENCE.into()], at(100));
        let alive = |_: &str, _: &str| Some("uid-sa".to_string());
        assert!(matches!(
            tokens.review(&token, &[], at(50), alive),
            Review::Authenticated { ref user, .. } if user.username == "system:serviceaccount:ns:sa"
        ));
        assert!(matches!(
            tokens.review(&token, &[], at(100), alive),
            Review::Rejected(_)
        ));
        assert!(matches!(
            tokens.review(&token, &["other".into()], at(50), alive),
            Review::Rejected(_)
        ));
        assert!(matches!(
            tokens.review(&token, &[], at(50), |_, _| Some("new-uid".into())),
            Review::Rejected(_)
        ));
        assert!(matches!(
            tokens.review("nope", &[], at(50), alive),
            Review::Rejected(_)
        ));
        assert!(matches!(
            tokens.review("s", &[], at(50), alive),
            Review::Authenticated { ref user, .. } if user.username == "bob" && user.groups == ["g"]
        ));
    }

    #[test]
    fn an_issued_token_is_valid_wherever_its_key_is_and_nowhere_else() {
        let key = Tokens::random_key();
        let first = Tokens::new(Vec::new(), &key);
        let token = first.issue("ns", "sa", "uid-sa", vec![DEFAULT_AUDIENCE.into()], at(100));
        let alive = |_: &str, _: &str| Some("uid-sa".to_string());
        // A restarted server with the same key.
        let restarted = Tokens::new(Vec::new(), &key);
        assert!(matches!(
            restarted.review(&token, &[], at(50), alive),
            Review::Authenticated { ref user, .. } if user.username == "system:serviceaccount:ns:sa"
        ));
        let other = Tokens::new(Vec::new(), &Tokens::random_key());
        assert_eq!(
            other.review(&token, &[], at(50), alive),
            Review::Rejected("invalid bearer token".into())
        );
        // A token whose claims were edited no longer matches its signature.
        let parts: Vec<&str> = token.split('.').collect();
        let forged_claims = String::from_utf8(from_b64url(parts[1]).unwrap())
            .unwrap()
            .replace("\"sa\"", "\"admin\"");
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            b64url(forged_claims.as_bytes()),
            parts[2]
        );
        assert_eq!(
            restarted.review(&forged, &[], at(50), alive),
            Review::Rejected("invalid bearer token".into())
        );
    }
}
