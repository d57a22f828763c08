//! What a kube-sim with `--data-dir` keeps beside its store so that a
//! restart strands nobody: the CA and serving certificate (clients keep
//! trusting the server), the admin token it generated (kubeconfigs keep
//! working), and the key ServiceAccount tokens are signed with (issued
//! tokens stay valid). kube-apiserver gets the same from its flags
//! (`--tls-cert-file`, `--token-auth-file`, `--service-account-key-file`),
//! which a cluster keeps across restarts; kube-sim keeps them itself.
//!
//! One JSON file, `credentials.json`, mode 0600 like the database (it holds
//! a private key and a token), written whole to a temporary file and
//! renamed, so a crash leaves the old file or the new one, never half of
//! one. Without a data directory everything is made fresh at each start,
//! as before.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tls::{ServingCertificates, StoredCertificates};
use crate::tokens::{SIGNING_KEY_LEN, Tokens};

/// The file inside the data directory.
pub const CREDENTIALS_FILE: &str = "credentials.json";
const FORMAT: &str = "gpufleet-kube-sim-credentials/1";

/// Certificates closer to their end than this are made anew at start (and
/// the CA with them: clients then need the new kubeconfig, as they would
/// after any CA rotation).
const RENEW_BEFORE: jiff::SignedDuration = jiff::SignedDuration::from_hours(24 * 30);

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("--data-dir {dir}: cannot read or write {CREDENTIALS_FILE}: {source}")]
    Io {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "--data-dir {dir}: {CREDENTIALS_FILE} is not kube-sim's ({detail}); move it away to \
         start with a new CA, admin token and ServiceAccount key"
    )]
    Unreadable { dir: PathBuf, detail: String },
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct OnDisk {
    format: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    admin_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tls: Option<StoredCertificates>,
    /// Hex of the ServiceAccount token signing key.
    service_account_key: String,
}

/// What this start asks for.
#[derive(Debug, Clone, Copy)]
pub struct Wanted {
    /// A generated admin token (none when the caller set its own).
    pub admin_token: bool,
    pub tls: bool,
}

/// The credentials of one start.
pub struct Credentials {
    pub admin_token: Option<String>,
    pub certificates: Option<ServingCertificates>,
    pub service_account_key: [u8; SIGNING_KEY_LEN],
}

impl Credentials {
    /// Made fresh, kept nowhere: a server without a data directory.
    pub fn fresh(wanted: Wanted) -> Result<Self, CredentialsError> {
        Ok(Self {
            admin_token: wanted.admin_token.then(crate::security::generate_token),
            certificates: if wanted.tls {
                Some(ServingCertificates::generate()?)
            } else {
                None
            },
            service_account_key: Tokens::random_key(),
        })
    }

    /// The ones `dir` keeps, with what this start wants and the directory
    /// lacks made and added to it. Whatever the file holds but this start
    /// does not want (a token when the caller brings its own) is kept for
    /// a later start.
    pub fn load_or_create(dir: &Path, wanted: Wanted) -> Result<Self, CredentialsError> {
        let path = dir.join(CREDENTIALS_FILE);
        let io_error = |source| CredentialsError::Io {
            dir: dir.to_path_buf(),
            source,
        };
        let unreadable = |detail: String| CredentialsError::Unreadable {
            dir: dir.to_path_buf(),
            detail,
        };
        let mut stored = match std::fs::read(&path) {
            Ok(bytes) => {
                narrow_to_owner(&path).map_err(io_error)?;
                let stored: OnDisk =
                    serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))?;
                if stored.format != FORMAT {
                    return Err(unreadable(format!("format {:?}", stored.format)));
                }
                stored
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => OnDisk {
                format: FORMAT.to_string(),
                ..OnDisk::default()
            },
            Err(e) => return Err(io_error(e)),
        };
        let mut changed = false;
        let service_account_key = match decode_key(&stored.service_account_key) {
            Some(key) => key,
            None if stored.service_account_key.is_empty() => {
                let key = Tokens::random_key();
                stored.service_account_key = hex(&key);
                changed = true;
                key
            }
            None => {
                return Err(unreadable(
                    "service_account_key is not 32 bytes of hex".into(),
                ));
            }
        };
        if wanted.admin_token && stored.admin_token.is_none() {
            stored.admin_token = Some(crate::security::generate_token());
            changed = true;
        }
        let mut certificates = None;
        if wanted.tls {
            let kept = match &stored.tls {
                Some(kept) => Some(
                    ServingCertificates::from_stored(kept)
                        .ok_or_else(|| unreadable("tls does not decode".into()))?,
                ),
                None => None,
            };
            let current = match kept {
                Some(kept) if kept.valid_for(RENEW_BEFORE) => kept,
                expiring => {
                    if expiring.is_some() {
                        tracing::warn!(
                            dir = %dir.display(),
                            "--data-dir: the kept CA expires within 30 days; made a new one (clients need the new kubeconfig)"
                        );
                    }
                    let made = ServingCertificates::generate()?;
                    stored.tls = Some(made.to_stored());
                    changed = true;
                    made
                }
            };
            certificates = Some(current);
        }
        if changed {
            write_private(&path, &stored).map_err(io_error)?;
        }
        Ok(Self {
            admin_token: if wanted.admin_token {
                stored.admin_token
            } else {
                None
            },
            certificates,
            service_account_key,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_key(text: &str) -> Option<[u8; SIGNING_KEY_LEN]> {
    if text.len() != SIGNING_KEY_LEN * 2 || !text.is_ascii() {
        return None;
    }
    let mut key = [0u8; SIGNING_KEY_LEN];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[i * 2..i * 2 + 2], 16).ok()?;
    }
    Some(key)
}

/// Narrows a kept file another user could read to 0600, with a warning,
/// as the store does with its own files.
fn narrow_to_owner(path: &Path) -> std::io::Result<()> {
    let found = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if found & !0o600 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        tracing::warn!(
            path = %path.display(),
            found = format_args!("{found:04o}"),
            "--data-dir: narrowed permissions that let other users read the credentials"
        );
    }
    Ok(())
}

/// Writes `stored` to `path` through a temporary file created 0600 and
/// renamed over it.
fn write_private(path: &Path, stored: &OnDisk) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(stored).map_err(std::io::Error::other)?;
    let temporary = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    const ALL: Wanted = Wanted {
        admin_token: true,
        tls: true,
    };

    #[test]
    fn a_second_start_gets_the_first_starts_ca_token_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let first = Credentials::load_or_create(dir.path(), ALL).unwrap();
        let file = dir.path().join(CREDENTIALS_FILE);
        assert_eq!(mode(&file), 0o600);
        let second = Credentials::load_or_create(dir.path(), ALL).unwrap();
        assert_eq!(first.admin_token, second.admin_token);
        assert!(first.admin_token.is_some());
        assert_eq!(first.service_account_key, second.service_account_key);
        let (a, b) = (first.certificates.unwrap(), second.certificates.unwrap());
        assert_eq!(a.ca_pem, b.ca_pem);
        assert_eq!(a.ca_der, b.ca_der);
    }

    #[test]
    fn what_a_start_does_not_want_is_kept_for_a_later_one() {
        let dir = tempfile::tempdir().unwrap();
        let first = Credentials::load_or_create(dir.path(), ALL).unwrap();
        let plain = Credentials::load_or_create(
            dir.path(),
            Wanted {
                admin_token: false,
                tls: false,
            },
        )
        .unwrap();
        assert!(plain.admin_token.is_none());
        assert!(plain.certificates.is_none());
        let third = Credentials::load_or_create(dir.path(), ALL).unwrap();
        assert_eq!(first.admin_token, third.admin_token);
        assert_eq!(
            first.certificates.unwrap().ca_pem,
            third.certificates.unwrap().ca_pem
        );
    }

    #[test]
    fn a_file_that_is_not_ours_is_refused_by_name_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(CREDENTIALS_FILE);
        std::fs::write(
            &file,
            "{\"format\": \"something-else\", \"service_account_key\": \"\"}",
        )
        .unwrap();
        let error = Credentials::load_or_create(dir.path(), ALL)
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("credentials.json is not kube-sim's"),
            "{error}"
        );
        assert!(error.contains(&dir.path().display().to_string()), "{error}");
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains("something-else")
        );
    }

    #[test]
    fn a_kept_file_readable_by_others_is_narrowed() {
        let dir = tempfile::tempdir().unwrap();
        Credentials::load_or_create(dir.path(), ALL).unwrap();
        let file = dir.path().join(CREDENTIALS_FILE);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        Credentials::load_or_create(dir.path(), ALL).unwrap();
        assert_eq!(mode(&file), 0o600);
    }
}
