//! The directory a pack goes to, replaced as a unit.
//!
//! [`OutDir::open`] takes the directory's lock (`atomic_file::DirLock`: one pack at a time
//! per directory), finishes or drops what a pack that was killed left, and makes an empty
//! staging directory, `DIR/.pack-staging`, where the new pack is written. Nothing of the
//! previous pack changes until the new one is whole there: [`OutDir::commit`] then writes a
//! commit mark listing the new files, renames them into `DIR`, removes the files of the
//! previous pack that the new one does not replace, and removes the staging directory. A run
//! killed before the mark leaves the previous pack as it was (the next pack drops the staging
//! directory); killed after it, the next pack finishes the renames.
//!
//! Only the files a pack wrote are ever replaced or removed: those named in the previous pack's
//! list (`DIR/.pack-files`, written at each commit), or, for a pack from before the list, the
//! names a pack writes ([`is_packed_file`]); every other file in `DIR` is left alone.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::classes::CLASSES_FILE;

/// The directory a pack is written in before it replaces the previous one.
pub const STAGING_DIR: &str = ".pack-staging";
/// In the staging directory once the new pack is whole: the names to move into place.
const COMMIT_MARK: &str = "commit";
/// The names of the files of the pack in a directory, one per line: what the next pack with
/// `--overwrite` replaces or removes (and no other file).
pub const MANIFEST: &str = ".pack-files";

/// The prefix a pack gives RecordIO in its directory (`DIR/data.rec`, `DIR/data.idx`, and the
/// list of the records' files, `DIR/data.lst`).
pub const RECORDIO_PREFIX: &str = "data";

/// The most shards a pack writes: their names have six digits.
pub const MAX_SHARDS: usize = 1_000_000;

/// Whether a file name is one a pack writes: a shard (`shard-` and exactly six digits, then
/// `.tar`), `data.rec`, `data.idx`, `data.lst` or `classes.txt`.
pub fn is_packed_file(name: &OsStr) -> bool {
    let b = name.as_bytes();
    let shard = b
        .strip_prefix(b"shard-")
        .and_then(|r| r.strip_suffix(b".tar"))
        .is_some_and(|d| d.len() == 6 && d.iter().all(u8::is_ascii_digit));
    shard
        || [
            &b"data.rec"[..],
            b"data.idx",
            b"data.lst",
            CLASSES_FILE.as_bytes(),
        ]
        .contains(&b)
}

/// What can go wrong with the output directory.
#[derive(Debug, thiserror::Error)]
pub enum OutError {
    #[error(transparent)]
    Lock(#[from] atomic_file::LockError),
    #[error(
        "{} holds files already ({}{}): --overwrite replaces what pack wrote there",
        .dir.display(), .first.display(), if *.more { ", ..." } else { "" }
    )]
    NotEmpty {
        dir: PathBuf,
        first: PathBuf,
        more: bool,
    },
    #[error("{what} {}", .path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{}: a file that pack did not write is in its staging directory; move it away",
        .0.display()
    )]
    Foreign(PathBuf),
    #[error(transparent)]
    Write(#[from] atomic_file::Error),
}

impl error_class::Classify for OutError {
    fn class(&self) -> error_class::Class {
        match self {
            OutError::NotEmpty { .. } => error_class::Class::Usage,
            _ => error_class::Class::Fatal,
        }
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> OutError + 'a {
    move |source| OutError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// An output directory, locked, with an empty staging directory to pack into.
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    staging: PathBuf,
    committed: bool,
    _lock: atomic_file::DirLock,
}

impl OutDir {
    /// Makes `dir` if needed and locks it; finishes or drops what a killed pack left there;
    /// without `overwrite`, refuses a directory that holds anything else but the lock; makes
    /// the staging directory.
    pub fn open(dir: &Path, overwrite: bool) -> Result<OutDir, OutError> {
        let lock = atomic_file::DirLock::acquire(dir)?;
        let staging = dir.join(STAGING_DIR);
        recover(dir, &staging)?;
        remove_stale_temps(dir);
        if !overwrite {
            let mut held = std::fs::read_dir(dir)
                .map_err(io("reading", dir))?
                .filter_map(|e| e.ok().map(|e| e.file_name()))
                .filter(|n| n != atomic_file::DirLock::FILE && n != MANIFEST);
            if let Some(first) = held.next() {
                return Err(OutError::NotEmpty {
                    dir: dir.to_path_buf(),
                    first: dir.join(first),
                    more: held.next().is_some(),
                });
            }
        }
        std::fs::create_dir(&staging).map_err(io("making", &staging))?;
        Ok(OutDir {
            dir: dir.to_path_buf(),
            staging,
            committed: false,
            _lock: lock,
        })
    }

    /// Where the new pack is written.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// The directory the pack goes to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Puts the files written in the staging directory (`names`, in the order they are moved:
    /// a RecordIO file before its index) in place of the previous pack, whose other files are
    /// removed. The new files' paths in the directory.
    pub fn commit(mut self, names: &[OsString]) -> Result<Vec<PathBuf>, OutError> {
        let mark = self.staging.join(COMMIT_MARK);
        atomic_file::write_atomic(&mark, |w| {
            names.iter().try_for_each(|n| {
                w.write_all(n.as_bytes())?;
                w.write_all(b"\n")
            })
        })?;
        sync_dir(&self.staging);
        self.committed = true;
        finish(&self.dir, &self.staging, names)?;
        Ok(names.iter().map(|n| self.dir.join(n)).collect())
    }
}

impl Drop for OutDir {
    /// A pack that did not commit (stopped, failed) leaves no staging directory.
    fn drop(&mut self) {
        if !self.committed {
            let _ = drop_staging(&self.staging);
        }
    }
}

/// What a pack killed before or during its commit left in `staging`: dropped (no commit mark:
/// the previous pack stands) or finished (the mark: the renames had begun).
fn recover(dir: &Path, staging: &Path) -> Result<(), OutError> {
    if std::fs::symlink_metadata(staging).is_err() {
        return Ok(());
    }
    let mark = staging.join(COMMIT_MARK);
    match std::fs::read(&mark) {
        Ok(text) => {
            let names: Vec<OsString> = (text.split(|&b| b == b'\n'))
                .filter(|l| !l.is_empty())
                .map(|l| OsString::from_vec(l.to_vec()))
                .filter(|n| is_packed_file(n))
                .collect();
            finish(dir, staging, &names)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => drop_staging(staging),
        Err(e) => Err(io("reading", &mark)(e)),
    }
}

/// The commit's renames (of those still staged), the previous pack's other files removed, the
/// list of the pack's files written, the staging directory removed.
fn finish(dir: &Path, staging: &Path, names: &[OsString]) -> Result<(), OutError> {
    // What the previous pack wrote: its list, or (a pack from before the list) every name a
    // pack writes.
    let manifest = dir.join(MANIFEST);
    let previous: Option<Vec<OsString>> = match std::fs::read(&manifest) {
        Ok(text) => Some(
            (text.split(|&b| b == b'\n'))
                .filter(|l| !l.is_empty())
                .map(|l| OsString::from_vec(l.to_vec()))
                .collect(),
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("reading", &manifest)(e)),
    };
    let was_ours = |n: &OsString| previous.as_ref().is_none_or(|p| p.contains(n));
    // A reader between the renames finds no index (nor list of files) rather than the
    // previous one beside the new records.
    if names.iter().any(|n| n == "data.rec") {
        for n in ["data.idx", "data.lst"].map(OsString::from) {
            if was_ours(&n) {
                remove_if_there(&dir.join(&n))?;
            }
        }
    }
    for n in names {
        let from = staging.join(n);
        if std::fs::symlink_metadata(&from).is_ok() {
            let to = dir.join(n);
            std::fs::rename(&from, &to).map_err(io("renaming into", &to))?;
        }
    }
    sync_dir(dir);
    let entries = std::fs::read_dir(dir).map_err(io("reading", dir))?;
    for e in entries.flatten() {
        let name = e.file_name();
        let is_file = e.file_type().is_ok_and(|t| t.is_file());
        if is_file && is_packed_file(&name) && !names.contains(&name) && was_ours(&name) {
            remove_if_there(&e.path())?;
        }
    }
    atomic_file::write_atomic(&manifest, |w| {
        names.iter().try_for_each(|n| {
            w.write_all(n.as_bytes())?;
            w.write_all(b"\n")
        })
    })?;
    sync_dir(dir);
    drop_staging(staging)
}

/// Removes the staging directory: the names a pack writes there, their temporary files, the
/// commit mark. Anything else there is not ours, and stops it.
fn drop_staging(staging: &Path) -> Result<(), OutError> {
    let entries = match std::fs::read_dir(staging) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io("reading", staging)(e)),
    };
    for e in entries.flatten() {
        let name = e.file_name();
        // atomic_file's temporary files: `.shardkit-*` and, before them, `.NAME.PID.*.partial`.
        let temp = name.as_bytes().starts_with(b".shardkit-") || temp_target(&name).is_some();
        let ours = is_packed_file(&name) || name == COMMIT_MARK || temp;
        if !ours || !e.file_type().is_ok_and(|t| t.is_file()) {
            return Err(OutError::Foreign(e.path()));
        }
        remove_if_there(&e.path())?;
    }
    match std::fs::remove_dir(staging) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", staging)(e)),
        _ => Ok(()),
    }
}

fn remove_if_there(path: &Path) -> Result<(), OutError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("removing", path)(e)),
        _ => Ok(()),
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

/// For a temporary file as `atomic_file` names them (`.<target>.<pid>.<random>.partial`): its
/// target's name and the pid.
fn temp_target(name: &OsStr) -> Option<(&[u8], u32)> {
    let stem = name
        .as_bytes()
        .strip_prefix(b".")?
        .strip_suffix(b".partial")?;
    let mut parts = stem.rsplitn(3, |&b| b == b'.');
    let (_random, pid, target) = (parts.next()?, parts.next()?, parts.next()?);
    let pid = std::str::from_utf8(pid).ok()?.parse().ok()?;
    Some((target, pid))
}

/// Whether process `pid` runs: it exists and is not a zombie (a process that ended and that no
/// one has reaped yet, as under an init that does not reap, still has its /proc entry).
pub fn is_running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) S ...`: the state follows the last `)` (comm may hold any byte).
    let state = stat
        .iter()
        .rposition(|&b| b == b')')
        .and_then(|i| stat.get(i + 2));
    !matches!(state, Some(b'Z' | b'X'))
}

/// Removes the temporary files of pack's names that an earlier pack, killed, left in `dir`
/// (packs that wrote there directly before the staging directory; their process is gone or a
/// zombie). Called with the directory's lock held.
fn remove_stale_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some((target, pid)) = temp_target(&name) else {
            continue;
        };
        if is_packed_file(OsStr::from_bytes(target))
            && pid != std::process::id()
            && !is_running(pid)
        {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_pack_writes_are_known_by_their_exact_names() {
        for name in [
            "shard-000012.tar",
            "data.rec",
            "data.idx",
            "data.lst",
            CLASSES_FILE,
        ] {
            assert!(is_packed_file(name.as_ref()), "{name}");
        }
        for name in [
            "photo.png",
            "data.txt",
            "shard-1.tgz",
            "shard-final.tar",
            "shard-00001.tar",
            "shard-0000001.tar",
            "shard-00000a.tar",
            "x-data.rec",
        ] {
            assert!(!is_packed_file(name.as_ref()), "{name}");
        }
        assert!(!is_packed_file(OsStr::from_bytes(b"shard-\xff.tar")));
    }

    #[test]
    fn a_zombie_is_not_running() {
        assert!(is_running(std::process::id()));
        assert!(!is_running(999_999_999));
        // A child that ended and was not waited for: a zombie until reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while is_running(pid) {
            assert!(std::time::Instant::now() < deadline, "never a zombie");
            std::thread::yield_now();
        }
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
        child.wait().unwrap();
    }

    #[test]
    fn an_uncommitted_staging_is_dropped_and_a_committing_one_finished() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("shard-000000.tar"), "old 0").unwrap();
        std::fs::write(d.join("shard-000001.tar"), "old 1").unwrap();
        std::fs::write(d.join("mine.txt"), "kept").unwrap();
        // Killed while packing: the previous pack stands.
        std::fs::create_dir(d.join(STAGING_DIR)).unwrap();
        std::fs::write(d.join(STAGING_DIR).join("shard-000000.tar"), "new 0").unwrap();
        std::fs::write(
            d.join(STAGING_DIR).join(".shard-000001.tar.1.x.partial"),
            "ne",
        )
        .unwrap();
        drop(OutDir::open(d, true).unwrap());
        assert_eq!(std::fs::read(d.join("shard-000000.tar")).unwrap(), b"old 0");
        assert!(!d.join(STAGING_DIR).exists());
        // Killed between the renames: the new pack is finished.
        std::fs::create_dir(d.join(STAGING_DIR)).unwrap();
        std::fs::write(d.join(STAGING_DIR).join(CLASSES_FILE), "a\n").unwrap();
        std::fs::write(d.join("shard-000000.tar"), "new 0").unwrap();
        std::fs::write(
            d.join(STAGING_DIR).join(COMMIT_MARK),
            "shard-000000.tar\nclasses.txt\n",
        )
        .unwrap();
        drop(OutDir::open(d, true).unwrap());
        let mut left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".lock",
                ".pack-files",
                "classes.txt",
                "mine.txt",
                "shard-000000.tar"
            ]
        );
        // A file named as a pack names its files, not on the list, is not the pack's.
        std::fs::write(d.join("data.rec"), "someone else's").unwrap();
        let out = OutDir::open(d, true).unwrap();
        std::fs::write(out.staging().join("shard-000000.tar"), "newer").unwrap();
        out.commit(&["shard-000000.tar".into()]).unwrap();
        assert_eq!(
            std::fs::read(d.join("data.rec")).unwrap(),
            b"someone else's"
        );
        assert!(!d.join(CLASSES_FILE).exists(), "the previous pack's");
    }
}
