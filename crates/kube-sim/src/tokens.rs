//! Bearer tokens kube-sim can vouch for in a `TokenReview`: ServiceAccount
//! tokens it issued through `TokenRequest`, and static tokens configured
//! like kube-apiserver's `--token-auth-file`.
//!
//! kube-sim does not authenticate its own requests with them (every client
//! is still cluster-admin); the tokens exist so a component that checks its
//! callers with a TokenReview — Mokka's node-agent API — can be tested
//! against kube-sim as against a real API server.

use std::collections::HashMap;

use parking_lot::Mutex;
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

/// A ServiceAccount token kube-sim issued.
#[derive(Debug, Clone)]
struct Issued {
    namespace: String,
    name: String,
    /// The ServiceAccount's UID at issue: a re-created account does not
    /// inherit the old one's tokens.
    uid: String,
    audiences: Vec<String>,
    expires: jiff::Timestamp,
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

/// Static and issued tokens of one kube-sim instance.
#[derive(Debug, Default)]
pub struct Tokens {
    static_tokens: HashMap<String, TokenUser>,
    issued: Mutex<HashMap<String, Issued>>,
}

impl Tokens {
    pub fn new(static_tokens: Vec<StaticToken>) -> Self {
        Self {
            static_tokens: static_tokens
                .into_iter()
                .map(|t| (t.token, t.user))
                .collect(),
            issued: Mutex::default(),
        }
    }

    /// Issues an opaque random token for ServiceAccount `namespace/name`.
    pub fn issue(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audiences: Vec<String>,
        expires: jiff::Timestamp,
    ) -> String {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let token = format!(
            "kube-sim.{}",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        self.issued.lock().insert(
            token.clone(),
            Issued {
                namespace: namespace.to_string(),
                name: name.to_string(),
                uid: uid.to_string(),
                audiences,
                expires,
            },
        );
        token
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
        let Some(issued) = self.issued.lock().get(token).cloned() else {
            return Review::Rejected("invalid bearer token".into());
        };
        if now >= issued.expires {
            return Review::Rejected("invalid bearer token, token has expired".into());
        }
        let matched: Vec<String> = wanted
            .into_iter()
            .filter(|audience| issued.audiences.contains(audience))
            .collect();
        if matched.is_empty() {
            return Review::Rejected("invalid bearer token, token audiences is invalid".into());
        }
        match account_uid(&issued.namespace, &issued.name) {
            Some(uid) if uid == issued.uid => Review::Authenticated {
                user: TokenUser {
                    username: format!("system:serviceaccount:{}:{}", issued.namespace, issued.name),
                    uid: issued.uid.clone(),
                    groups: vec![
                        "system:serviceaccounts".into(),
                        format!("system:serviceaccounts:{}", issued.namespace),
                    ],
                },
                audiences: matched,
            },
            _ => Review::Rejected(format!(
                "invalid bearer token, service account {}/{} has been deleted",
                issued.namespace, issued.name
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
        let tokens = Tokens::new(vec![StaticToken::new("s", "bob", "7", &["g"])]);
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
}
