//! The on-disk copy of the store behind `--data-dir`: one SQLite database
//! holding every object's stored JSON and the global resourceVersion.
//!
//! Why SQLite (through rusqlite, compiled in): it is the most exercised
//! embedded database there is, its write-ahead log with `synchronous=NORMAL`
//! puts each committed transaction into the operating system's hands before
//! the call returns (so a `kill -9` of kube-sim loses nothing it
//! acknowledged) without an fsync per write, and it detects a file that is
//! not a database. The price is a C library compiled at build time.
//!
//! Only the latest state of each object is kept, not the event history: a
//! restarted server has an empty watch history, so a watch that resumes
//! from before the restart gets 410 Expired and relists, as after an etcd
//! compaction.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension, params};

use crate::object::StoredObject;
use crate::resources::GroupResource;

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "kube-sim.db";
/// Written once into a new database; a database without it is refused.
const FORMAT: &str = "gpufleet-kube-sim-store/1";

/// Files SQLite keeps next to the database (the write-ahead log and its
/// index), which hold the same data.
const COMPANION_SUFFIXES: [&str; 2] = ["-wal", "-shm"];

/// Makes the data directory 0700 and its files 0600: they hold every
/// Secret in clear, and another local user must not read them. A new
/// database file is created empty with mode 0600 before SQLite opens it
/// (an empty file is an empty database), and SQLite gives its WAL the
/// database file's mode. A directory or file found looser, from an older
/// kube-sim or a hand-made directory, is narrowed with a warning rather
/// than refused: the fix is safe and always the one the user wants.
fn make_private(dir: &Path, existed: bool) -> Result<(), DataDirError> {
    let dir_error = |source| DataDirError::Directory {
        dir: dir.to_path_buf(),
        source,
    };
    narrow(dir, 0o700).map_err(dir_error)?;
    let database = dir.join(DATABASE_FILE);
    if !existed {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&database)
            .map_err(dir_error)?;
    }
    narrow(&database, 0o600).map_err(dir_error)?;
    for suffix in COMPANION_SUFFIXES {
        let companion = dir.join(format!("{DATABASE_FILE}{suffix}"));
        match narrow(&companion, 0o600) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            other => other.map_err(dir_error)?,
        }
    }
    Ok(())
}

/// Sets `path`'s permission bits to `mode` if it allows anyone but its
/// owner more, and says so: the user may have meant the directory to be
/// shared, and should learn it no longer is.
fn narrow(path: &Path, mode: u32) -> std::io::Result<()> {
    let found = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if found & !mode == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    tracing::warn!(
        path = %path.display(),
        found = format_args!("{found:04o}"),
        now = format_args!("{mode:04o}"),
        "--data-dir: narrowed permissions that let other users read the store"
    );
    Ok(())
}

/// Why a data directory cannot be used. Every message names the directory.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("--data-dir {dir}: cannot create or read the directory: {source}")]
    Directory {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "--data-dir {dir}: the directory holds files but no {DATABASE_FILE} (found {found}); \
         it is not a kube-sim data directory: choose an empty or new directory"
    )]
    Foreign { dir: PathBuf, found: String },
    #[error("--data-dir {dir}: {DATABASE_FILE} is not a kube-sim store: {detail}")]
    NotOurs { dir: PathBuf, detail: String },
    #[error("--data-dir {dir}: {DATABASE_FILE} is corrupt: {detail}")]
    Corrupt { dir: PathBuf, detail: String },
    #[error("--data-dir {dir}: {DATABASE_FILE} is in use by another kube-sim process")]
    InUse { dir: PathBuf },
}

/// One stored object as read back at start.
#[derive(Debug)]
pub struct RestoredRow {
    pub resource: GroupResource,
    pub json: Vec<u8>,
}

/// What a data directory held when it was opened.
#[derive(Debug, Default)]
pub struct Restored {
    /// The resourceVersion of the last committed change (0 for a new store).
    pub rv: u64,
    pub rows: Vec<RestoredRow>,
}

/// The open database; every committed change goes through it before the
/// in-memory store changes.
pub struct Journal {
    conn: Connection,
    dir: PathBuf,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("dir", &self.dir).finish()
    }
}

impl Journal {
    /// Opens (or creates) the store in `dir` and reads everything back.
    pub fn open(dir: &Path) -> Result<(Journal, Restored), DataDirError> {
        let dir_error = |source| DataDirError::Directory {
            dir: dir.to_path_buf(),
            source,
        };
        // The database holds every Secret in clear: the directory is made
        // owner-only as it is created, never widened and narrowed later.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(dir_error)?;
        let database = dir.join(DATABASE_FILE);
        let existed = database.exists();
        if !existed {
            let mut others = Vec::new();
            for entry in std::fs::read_dir(dir).map_err(dir_error)? {
                let entry = entry.map_err(dir_error)?;
                others.push(entry.file_name().to_string_lossy().into_owned());
            }
            if !others.is_empty() {
                others.sort();
                let mut found = others.into_iter().take(3).collect::<Vec<_>>().join(", ");
                found.push_str(", …");
                return Err(DataDirError::Foreign {
                    dir: dir.to_path_buf(),
                    found,
                });
            }
        }
        make_private(dir, existed)?;
        let conn = Connection::open(&database).map_err(|e| classify(dir, e))?;
        // One process owns the directory: a second fails at once, not after
        // SQLite's default wait.
        conn.busy_timeout(std::time::Duration::ZERO)
            .map_err(|e| classify(dir, e))?;
        let journal = Journal {
            conn,
            dir: dir.to_path_buf(),
        };
        journal.prepare(existed)?;
        let restored = journal.read_back()?;
        Ok((journal, restored))
    }

    /// Write-ahead log and one writer (the exclusive lock makes a second
    /// process fail fast instead of interleaving). A new database gets the
    /// schema and the format marker; an existing one is only read until its
    /// marker has been checked, so a foreign database is never written to.
    fn prepare(&self, existed: bool) -> Result<(), DataDirError> {
        let dir = &self.dir;
        self.conn
            .execute_batch(
                "PRAGMA locking_mode = EXCLUSIVE;
                 PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = NORMAL;",
            )
            .map_err(|e| classify(dir, e))?;
        if !existed {
            self.conn
                .execute_batch(
                    "BEGIN EXCLUSIVE;
                     CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
                     CREATE TABLE objects (
                         grp TEXT NOT NULL, resource TEXT NOT NULL,
                         namespace TEXT NOT NULL, name TEXT NOT NULL,
                         json BLOB NOT NULL,
                         PRIMARY KEY (grp, resource, namespace, name)) WITHOUT ROWID;",
                )
                .map_err(|e| classify(dir, e))?;
            self.conn
                .execute(
                    "INSERT INTO meta (key, value) VALUES ('format', ?1)",
                    params![FORMAT],
                )
                .map_err(|e| classify(dir, e))?;
            self.conn
                .execute_batch("COMMIT;")
                .map_err(|e| classify(dir, e))?;
            return Ok(());
        }
        let format: Result<Option<String>, rusqlite::Error> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'format'", [], |row| {
                row.get(0)
            })
            .optional();
        match format {
            Ok(Some(found)) if found == FORMAT => Ok(()),
            Ok(Some(other)) => Err(DataDirError::NotOurs {
                dir: dir.clone(),
                detail: format!("its format is {other:?}, this kube-sim reads {FORMAT:?}"),
            }),
            Ok(None) => Err(DataDirError::NotOurs {
                dir: dir.clone(),
                detail: "it has no kube-sim format marker".into(),
            }),
            // A database without our tables (or not a database at all).
            Err(error) => match classify(dir, error) {
                DataDirError::Corrupt { detail, .. } if detail.contains("no such") => {
                    Err(DataDirError::NotOurs {
                        dir: dir.clone(),
                        detail: "it has no kube-sim format marker".into(),
                    })
                }
                other => Err(other),
            },
        }
    }

    fn read_back(&self) -> Result<Restored, DataDirError> {
        let dir = &self.dir;
        let rv: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'rv'", [], |row| {
                row.get(0)
            })
            .optional()
            .map_err(|e| classify(dir, e))?;
        let rv = match rv {
            None => 0,
            Some(text) => text.parse().map_err(|_| DataDirError::Corrupt {
                dir: dir.clone(),
                detail: format!("the stored resourceVersion {text:?} is not a number"),
            })?,
        };
        let mut statement = self
            .conn
            .prepare("SELECT grp, resource, json FROM objects")
            .map_err(|e| classify(dir, e))?;
        let rows = statement
            .query_map([], |row| {
                Ok(RestoredRow {
                    resource: GroupResource {
                        group: row.get(0)?,
                        resource: row.get(1)?,
                    },
                    json: row.get(2)?,
                })
            })
            .map_err(|e| classify(dir, e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| classify(dir, e))?;
        Ok(Restored { rv, rows })
    }

    /// Stores an object's new state (or its removal) and the resourceVersion
    /// it was committed at, in one transaction.
    pub fn write(
        &mut self,
        resource: &GroupResource,
        object: &StoredObject,
        removed: bool,
    ) -> Result<(), rusqlite::Error> {
        let tx = self.conn.transaction()?;
        if removed {
            tx.prepare_cached(
                "DELETE FROM objects WHERE grp = ?1 AND resource = ?2 AND namespace = ?3 AND name = ?4",
            )?
            .execute(params![
                resource.group,
                resource.resource,
                object.namespace,
                object.name
            ])?;
        } else {
            tx.prepare_cached(
                "INSERT OR REPLACE INTO objects (grp, resource, namespace, name, json) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                resource.group,
                resource.resource,
                object.namespace,
                object.name,
                object.json.as_ref()
            ])?;
        }
        tx.prepare_cached("INSERT OR REPLACE INTO meta (key, value) VALUES ('rv', ?1)")?
            .execute(params![object.rv.to_string()])?;
        tx.commit()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// SQLite's answer, in the words of the rule the directory broke.
fn classify(dir: &Path, error: rusqlite::Error) -> DataDirError {
    use rusqlite::ErrorCode;
    let dir = dir.to_path_buf();
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => DataDirError::InUse { dir },
        Some(ErrorCode::NotADatabase) => DataDirError::NotOurs {
            dir,
            detail: "the file is not an SQLite database".into(),
        },
        _ => DataDirError::Corrupt {
            dir,
            detail: error.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_with_other_files_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
        let error = Journal::open(dir.path()).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, DataDirError::Foreign { .. }), "{message}");
        assert!(message.contains("notes.txt"), "{message}");
        assert!(!dir.path().join(DATABASE_FILE).exists());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn a_file_that_is_not_a_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DATABASE_FILE), vec![0x5au8; 8192]).unwrap();
        let error = Journal::open(dir.path()).unwrap_err();
        assert!(matches!(error, DataDirError::NotOurs { .. }), "{error}");
        assert!(
            error.to_string().contains("not an SQLite database"),
            "{error}"
        );
    }

    #[test]
    fn an_sqlite_database_of_someone_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let other = Connection::open(dir.path().join(DATABASE_FILE)).unwrap();
        other
            .execute_batch("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES ('owner', 'someone');")
            .unwrap();
        drop(other);
        let error = Journal::open(dir.path()).unwrap_err();
        assert!(
            error.to_string().contains("no kube-sim format marker"),
            "{error}"
        );
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_data_directory_and_its_files_are_readable_by_their_owner_only() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("data");
        let (journal, _) = Journal::open(&dir).unwrap();
        let wal = dir.join(format!("{DATABASE_FILE}-wal"));
        assert!(wal.exists(), "the schema write made the WAL");
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join(DATABASE_FILE)), 0o600);
        assert_eq!(mode(&wal), 0o600);
        drop(journal);
    }

    #[test]
    fn a_data_directory_left_readable_by_others_is_narrowed_when_opened() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("data");
        drop(Journal::open(&dir).unwrap());
        let database = dir.join(DATABASE_FILE);
        let wal = dir.join(format!("{DATABASE_FILE}-wal"));
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&database, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();

        let (_journal, _) = Journal::open(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&database), 0o600);
        assert_eq!(mode(&wal), 0o600);
    }

    #[test]
    fn a_second_process_on_the_same_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (_first, _) = Journal::open(dir.path()).unwrap();
        let error = Journal::open(dir.path()).unwrap_err();
        assert!(matches!(error, DataDirError::InUse { .. }), "{error}");
    }
}
