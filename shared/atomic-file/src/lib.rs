//! Outputs appear whole or not at all: written to a hidden temp file in the target's directory,
//! synced, then renamed over the target. A killed run leaves at most a `.shardkit-*.partial`
//! file (removed on normal drop, and by the tools on SIGINT/SIGTERM), never a truncated output.
//! The writer holds an exclusive `flock` on its temp file while it writes, and the kernel lets go
//! of it when the process ends however it ends; so the next run that writes into that directory
//! removes the temp files whose lock it can take (kill -9's leftovers, a zombie's), and never one
//! being written, whatever its pid. Temp names are short (28 bytes), so any target name the file
//! system allows can be written.
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

impl error_class::Classify for Error {}

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

/// The temp files' names: `.shardkit-<random>.partial` (28 bytes, whatever the target's name,
/// so a target of up to 255 bytes can be written); `.shardkit-<random>.new` for the instant
/// between its creation and its lock.
const TEMP_PREFIX: &str = ".shardkit-";
const TEMP_SUFFIX: &str = ".partial";
const NEW_SUFFIX: &str = ".new";

/// How old a `.new` file whose lock is free must be before a sweep removes it: its writer takes
/// the lock a few microseconds after creating it, so only one killed in between leaves one.
const NEW_FILE_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// A temp file in `target`'s directory (created if missing), deleted when dropped. Its name is
/// short and does not depend on `target`'s; the file is held under an exclusive `flock` for its
/// life (until it is persisted or dropped, or the process ends however it ends), which is how a
/// later run tells an abandoned temp file from one being written.
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
    // Created as any tool creates a file: 0666 less the umask (tempfile's default is 0600).
    let tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .suffix(NEW_SUFFIX)
        .rand_bytes(10)
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        .map_err(|source| Error::CreateTemp {
            path: dir.to_path_buf(),
            source,
        })?;
    // Locked, then given its `.partial` name: a sweep finds no `.partial` file unlocked but an
    // abandoned one. (A file system without flock leaves it unlocked: sweeps then keep it.)
    let _ = try_lock(tmp.as_file());
    let (file, path) = tmp.into_parts();
    let renamed = path.with_extension(&TEMP_SUFFIX[1..]);
    let path = match fs::rename(&path, &renamed) {
        Ok(()) => {
            // The old name is gone: only the new one is the temp file's now.
            let _ = path.keep();
            tempfile::TempPath::try_from_path(renamed).map_err(|source| Error::CreateTemp {
                path: dir.to_path_buf(),
                source,
            })?
        }
        Err(_) => path,
    };
    Ok(tempfile::NamedTempFile::from_parts(file, path))
}

/// Takes an exclusive `flock` on `file` without waiting: `Ok(true)` taken, `Ok(false)` held by
/// another open file (another process, or another writer in this one).
fn try_lock(file: &fs::File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    // SAFETY: flock on a descriptor the caller owns; it changes nothing in memory.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.kind() == io::ErrorKind::WouldBlock {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Removes, once per directory and process, the temp files that no writer holds any more: what
/// kill -9 (or a crash) left. A file is removed only if this process can take its lock, which
/// no live writer lets go of, whatever its pid (a zombie holds no files): `.shardkit-*.partial`
/// files, `.shardkit-*.new` ones older than a minute, and the older scheme's
/// `.<name>.<pid>.<random>.partial` whose process is gone or a zombie. A file that cannot be
/// opened, locked or removed is left as it is.
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
        let Some(name) = name.to_str() else {
            continue;
        };
        let kind = match temp_kind(name) {
            Some(Temp::Old(pid)) if pid == std::process::id() || process_alive(pid) => continue,
            Some(kind) => kind,
            None => continue,
        };
        remove_if_abandoned(&e.path(), kind);
    }
}

/// What a sweep makes of a name in a directory it sweeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Temp {
    /// `.shardkit-<random>.partial`.
    Partial,
    /// `.shardkit-<random>.new`: created, not yet locked.
    New,
    /// The older scheme's `.<name>.<pid>.<random>.partial`.
    Old(u32),
}

fn temp_kind(name: &str) -> Option<Temp> {
    let random_part =
        |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric());
    if let Some(rest) = name.strip_prefix(TEMP_PREFIX) {
        if rest.strip_suffix(TEMP_SUFFIX).is_some_and(random_part) {
            return Some(Temp::Partial);
        }
        if rest.strip_suffix(NEW_SUFFIX).is_some_and(random_part) {
            return Some(Temp::New);
        }
    }
    stale_pid(name).map(Temp::Old)
}

/// Whether process `pid` runs: its `/proc` entry exists and is not a zombie's (state `Z`, or
/// `X` for one being reaped). Without `/proc`, every process is taken as running.
fn process_alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        return true;
    }
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ...": the state follows the last ')' (comm may hold any bytes).
        Ok(stat) => !matches!(
            stat.rfind(')')
                .and_then(|i| stat[i + 1..].trim_start().chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => false,
    }
}

/// Removes the regular file `path` if its lock is free (and, for a `.new` file, it is older
/// than [`NEW_FILE_AGE`]), checking by device and inode that the name still is the file locked.
fn remove_if_abandoned(path: &Path, kind: Temp) {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let Ok(file) = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    else {
        return;
    };
    let Ok(meta) = file.metadata() else {
        return;
    };
    if !meta.is_file() {
        return;
    }
    if kind == Temp::New {
        let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
        if age.is_none_or(|a| a < NEW_FILE_AGE) {
            return;
        }
    }
    if !matches!(try_lock(&file), Ok(true)) {
        return;
    }
    match fs::symlink_metadata(path) {
        Ok(now) if now.dev() == meta.dev() && now.ino() == meta.ino() => {
            let _ = fs::remove_file(path);
        }
        _ => {}
    }
}

/// The pid in a temp file name of the older scheme: `.<name>.<pid>.<random>.partial`.
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
        let (dir, target) = testkit::temp_path("sub/out.txt");
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
    fn targets_named_up_to_the_255_byte_limit_are_written() {
        let dir = tempfile::tempdir().unwrap();
        for len in [234, 250, 255] {
            let target = dir.path().join("n".repeat(len));
            write_atomic(&target, |w| w.write_all(b"x")).unwrap_or_else(|e| {
                panic!("a {len}-byte name: {}", e.describe());
            });
            assert_eq!(fs::read(&target).unwrap(), b"x");
            write_new(&dir.path().join("m".repeat(len)), |w| w.write_all(b"y")).unwrap();
        }
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            6,
            "no temp file left"
        );
    }

    /// A file as another process's writer holds it: open, with its lock taken.
    fn held(path: &Path) -> fs::File {
        let f = fs::File::create(path).unwrap();
        assert!(try_lock(&f).unwrap());
        f
    }

    fn age(path: &Path, secs: u64) {
        let f = fs::File::options().write(true).open(path).unwrap();
        f.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(secs))
            .unwrap();
    }

    #[test]
    fn temp_files_are_removed_when_no_writer_holds_their_lock() {
        let dir = tempfile::tempdir().unwrap();
        let p = |name: &str| dir.path().join(name);
        let abandoned = p(".shardkit-AbCdE12345.partial");
        let writing = p(".shardkit-FgHiJ67890.partial");
        let old_new = p(".shardkit-KlMnO12345.new");
        let young_new = p(".shardkit-PqRsT67890.new");
        let others = [p(".shardkit-x.txt"), p("shardkit-AbCdE12345.partial")];
        fs::write(&abandoned, b"half").unwrap();
        let _writer = held(&writing);
        age(&writing, 3600);
        for f in [&old_new, &young_new].into_iter().chain(&others) {
            fs::write(f, b"").unwrap();
        }
        age(&old_new, 3600);
        write_atomic(&p("out.png"), |w| w.write_all(b"y")).unwrap();
        assert!(!abandoned.exists(), "an unlocked .partial is abandoned");
        assert!(!old_new.exists(), "an unlocked .new older than a minute");
        assert!(writing.exists(), "a locked one is being written");
        assert!(young_new.exists(), "a new one may not be locked yet");
        assert!(others.iter().all(|f| f.exists()));
        // The temp file is locked while it is written: another sweep keeps it.
        let target = p("sub/b.png");
        let tmp = temp_beside(&target).unwrap();
        let name = tmp
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(temp_kind(&name), Some(Temp::Partial), "{name}");
        assert_eq!(name.len(), 28, "{name}");
        let other = fs::File::open(tmp.path()).unwrap();
        assert!(!try_lock(&other).unwrap(), "held while it is written");
        persist(tmp, &target).unwrap();
        assert!(try_lock(&other).unwrap(), "let go once persisted");
    }

    #[test]
    fn a_zombies_temp_files_are_removed() {
        // A child not waited for is a zombie once it exits: its pid stays in /proc.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let state = || {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap()
        };
        while state() != 'Z' {
            assert!(
                std::time::Instant::now() < deadline,
                "pid {pid} never became a zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let (dir, zombies) =
            testkit::temp_file(format!(".out.npz.{pid}.AbC123.partial"), b"127 MB");
        write_atomic(&dir.path().join("out.npz"), |w| w.write_all(b"y")).unwrap();
        let removed = !zombies.exists();
        child.wait().unwrap();
        assert!(removed, "a zombie's temp file is removed");
        assert!(process_alive(std::process::id()));
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
