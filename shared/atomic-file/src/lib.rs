//! Outputs appear whole or not at all: written to a hidden temp file in the target's directory,
//! synced, then renamed over the target. A killed run leaves at most a `.<name>.<pid>.*.partial`
//! file (removed on normal drop, and by the tools on SIGINT/SIGTERM), never a truncated output;
//! the next run that writes into that directory removes the temp files whose process is gone
//! (kill -9).
//!
//! The tools reach it as `cli_common::atomic`; libraries that write files (checkpoints, the
//! rendezvous file) use it directly, without the CLI layer.
//!
//! ```
//! use std::io::Write;
//! let dir = tempfile::tempdir().unwrap();
//! let target = dir.path().join("out/hello.txt");
//! atomic_file::write_atomic(&target, |w| w.write_all(b"hello")).unwrap();
//! assert_eq!(std::fs::read(&target).unwrap(), b"hello");
//! ```

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

mod lock;
mod set;
pub use lock::{DirLock, LockError};
pub use set::{Recovered, recover_set, staged, write_set};

/// What can go wrong writing one output; each names the path.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("creating directory {}", .path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("creating a temp file in {}", .path.display())]
    CreateTemp {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The caller's writer failed (its error is the source), or flushing it did.
    #[error("writing {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("syncing {}", .path.display())]
    Sync {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("renaming into {}", .path.display())]
    Rename {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// [`write_new`] lost the race for its target.
    #[error(
        "{} exists (written by another run meanwhile?); pass --overwrite to replace it",
        .path.display()
    )]
    Exists { path: PathBuf },
}

impl Error {
    /// The message and its causes on one line, as anyhow's `{:#}` prints a chain.
    pub fn describe(&self) -> String {
        error_class::chain_text(self)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl error_class::Classify for Error {
    fn class(&self) -> error_class::Class {
        error_class::Class::Fatal
    }
}

/// The writer the callbacks get: a buffered temp file.
pub type Writer<'a> = BufWriter<&'a mut fs::File>;

/// Creates the parent directory, runs `write` on a temp file beside `target`, syncs it and
/// renames it to `target` (replacing what is there).
pub fn write_atomic<T, E>(
    target: &Path,
    write: impl FnOnce(&mut Writer<'_>) -> std::result::Result<T, E>,
) -> Result<T>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (tmp, value) = write_temp(target, write)?;
    persist(tmp, target)?;
    Ok(value)
}

/// As [`write_atomic`], but `target` must not exist, checked atomically at the rename (a
/// concurrent run that got there first wins; this one fails and leaves its file unwritten).
pub fn write_new<T, E>(
    target: &Path,
    write: impl FnOnce(&mut Writer<'_>) -> std::result::Result<T, E>,
) -> Result<T>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (tmp, value) = write_temp(target, write)?;
    persist_new(tmp, target)?;
    Ok(value)
}

fn write_temp<T, E>(
    target: &Path,
    write: impl FnOnce(&mut Writer<'_>) -> std::result::Result<T, E>,
) -> Result<(tempfile::NamedTempFile, T)>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut tmp = temp_beside(target)?;
    let failed = |source| Error::Write {
        path: target.to_path_buf(),
        source,
    };
    let value = {
        let mut w = BufWriter::with_capacity(1 << 16, tmp.as_file_mut());
        let value = write(&mut w).map_err(|e| failed(e.into()))?;
        w.flush().map_err(|e| failed(e.into()))?;
        value
    };
    Ok((tmp, value))
}

/// A temp file in `target`'s directory (created if missing), deleted when dropped.
pub fn temp_beside(target: &Path) -> Result<tempfile::NamedTempFile> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    remove_stale_once(dir);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Created as any tool creates a file: 0666 less the umask (tempfile's default is 0600).
    tempfile::Builder::new()
        .prefix(&format!(".{name}.{}.", std::process::id()))
        .suffix(".partial")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|source| Error::CreateTemp {
            path: dir.to_path_buf(),
            source,
        })
}

/// Removes, once per directory and process, the temp files of this naming scheme
/// (`.<name>.<pid>.<random>.partial`) whose process no longer runs on this machine: what kill -9
/// left. A live run's files are never touched (its pid is alive); a file that cannot be removed
/// is left as it is.
fn remove_stale_once(dir: &Path) {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static SWEPT: OnceLock<Mutex<HashSet<std::path::PathBuf>>> = OnceLock::new();
    let key = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if !SWEPT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key)
    {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(stale_pid) else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// The pid in a temp file name of this scheme: `.<name>.<pid>.<random>.partial`.
fn stale_pid(name: &str) -> Option<u32> {
    let stem = name.strip_prefix('.')?.strip_suffix(".partial")?;
    let mut parts = stem.rsplitn(3, '.');
    let (_random, pid, target) = (parts.next()?, parts.next()?, parts.next()?);
    (!target.is_empty()).then_some(())?;
    pid.parse().ok()
}

/// Syncs `tmp` and renames it to `target`.
pub fn persist(tmp: tempfile::NamedTempFile, target: &Path) -> Result<()> {
    sync(&tmp, target)?;
    tmp.persist(target).map_err(|e| Error::Rename {
        path: target.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

/// Syncs `tmp` and moves it to `target` only if nothing is there: link(2) then unlink, so of two
/// runs racing for one output exactly one succeeds. The loser's error says to pass --overwrite.
pub fn persist_new(tmp: tempfile::NamedTempFile, target: &Path) -> Result<()> {
    sync(&tmp, target)?;
    match tmp.persist_noclobber(target) {
        Ok(_) => Ok(()),
        Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => Err(Error::Exists {
            path: target.to_path_buf(),
        }),
        Err(e) => Err(Error::Rename {
            path: target.to_path_buf(),
            source: e.error,
        }),
    }
}

fn sync(tmp: &tempfile::NamedTempFile, target: &Path) -> Result<()> {
    tmp.as_file().sync_all().map_err(|source| Error::Sync {
        path: target.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/out.txt");
        write_atomic(&target, |w| w.write_all(b"hello")).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"hello");
        assert_eq!(fs::read_dir(dir.path().join("sub")).unwrap().count(), 1);
    }

    #[test]
    fn outputs_get_0666_less_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: umask(2) only swaps the process's mask; restored below.
        let old = unsafe { libc::umask(0o027) };
        let target = dir.path().join("out.txt");
        let r = write_atomic(&target, |w| w.write_all(b"x"));
        // SAFETY: puts the process's mask back.
        unsafe { libc::umask(old) };
        r.unwrap();
        assert_eq!(
            fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o640
        );
    }

    #[test]
    fn write_new_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.txt");
        write_new(&target, |w| w.write_all(b"first")).unwrap();
        let e = write_new(&target, |w| w.write_all(b"second")).unwrap_err();
        assert!(matches!(e, Error::Exists { .. }), "{e}");
        assert!(e.to_string().contains("--overwrite"), "{e}");
        assert_eq!(fs::read(&target).unwrap(), b"first");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "the loser's temp file is gone"
        );
    }

    #[test]
    fn temp_files_of_dead_runs_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        // pid_max is at most 2^22: this pid never runs.
        let dead = dir.path().join(".out.png.999999999.AbC123.partial");
        let live = dir
            .path()
            .join(format!(".out.png.{}.XyZ789.partial", std::process::id()));
        let parent = dir.path().join(".out.png.1.Qq1234.partial"); // pid 1 always runs
        let other = dir.path().join(".notes.txt");
        for f in [&dead, &live, &parent, &other] {
            fs::write(f, b"x").unwrap();
        }
        write_atomic(&dir.path().join("new.png"), |w| w.write_all(b"y")).unwrap();
        assert!(!dead.exists());
        assert!(live.exists() && parent.exists() && other.exists());
        assert_eq!(stale_pid(".a.b.npz.123.xyz.partial"), Some(123));
        assert_eq!(
            stale_pid(".a.npz.xyz.partial"),
            None,
            "the old scheme had no pid"
        );
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.txt");
        let r: Result<()> = write_atomic(&target, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("boom"))
        });
        let e = r.unwrap_err();
        assert_eq!(e.describe(), format!("writing {}: boom", target.display()));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
