//! Several outputs that stand or fall together (a training checkpoint's model and optimiser
//! halves): at every instant the targets hold one whole set, the previous one or the new one.
//!
//! [`write_set`] first writes every member under a staged name beside its target
//! (`.<name>.next`, whole or absent, as [`crate::write_atomic`] writes), and only once all are
//! written and synced renames them over their targets, the first target first, then syncs the
//! directory. A failure while staging (a full disk, say) removes the staged files and leaves the
//! targets as they were. A crash between the renames leaves staged files that
//! [`recover_set`] finishes: the first target's staged file still there means no rename
//! happened (the staged files are dropped: the previous set stands); gone means the renames had
//! begun (the remaining staged files are renamed: the new set stands).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::{Error, Result, Writer};

/// The name a member of a set is written under before the set is committed: `.<name>.next`
/// beside `target`.
pub fn staged(target: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(target.file_name().unwrap_or_default());
    name.push(".next");
    target.with_file_name(name)
}

/// Writes `targets` as one unit: `write(i, w)` writes the `i`-th. On error no target has
/// changed and no staged file is left. The first target is the set's commit point (see the
/// module's text); the sets written to one place must all have the same first target, and
/// [`recover_set`] must be given every target a set there may have.
pub fn write_set<E>(
    targets: &[&Path],
    mut write: impl FnMut(usize, &mut Writer<'_>) -> std::result::Result<(), E>,
) -> Result<()>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    // What an earlier crash left half-committed is finished first, so the set on disk is whole
    // whatever happens next.
    recover_set(targets).map_err(|source| Error::Rename {
        path: targets[0].to_path_buf(),
        source,
    })?;
    let staged: Vec<PathBuf> = targets.iter().map(|t| staged(t)).collect();
    let written = staged
        .iter()
        .enumerate()
        .try_for_each(|(i, s)| crate::write_atomic(s, |w| write(i, w)));
    if let Err(e) = written {
        for s in &staged {
            let _ = fs::remove_file(s);
        }
        // The error names the target, not its staged name.
        return Err(rename_path(e, &staged, targets));
    }
    for (s, t) in staged.iter().zip(targets) {
        fs::rename(s, t).map_err(|source| Error::Rename {
            path: t.to_path_buf(),
            source,
        })?;
    }
    sync_dirs(targets);
    Ok(())
}

/// What [`recover_set`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovered {
    /// No staged file: the set stands as the last [`write_set`] left it.
    Nothing,
    /// A set staged but never committed was removed: the previous set stands.
    Dropped,
    /// A set whose renames had begun was finished: the new set stands.
    Finished,
}

/// Finishes or drops what a crash in [`write_set`] left (see the module's text).
pub fn recover_set(targets: &[&Path]) -> io::Result<Recovered> {
    let staged: Vec<PathBuf> = targets.iter().map(|t| staged(t)).collect();
    let present: Vec<bool> = staged
        .iter()
        .map(|s| fs::symlink_metadata(s).is_ok())
        .collect();
    if !present.iter().any(|&p| p) {
        return Ok(Recovered::Nothing);
    }
    if present[0] {
        for s in &staged {
            match fs::remove_file(s) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        return Ok(Recovered::Dropped);
    }
    for ((s, t), p) in staged.iter().zip(targets).zip(present) {
        if p {
            fs::rename(s, t)?;
        }
    }
    sync_dirs(targets);
    Ok(Recovered::Finished)
}

/// The renames made durable: each target's directory synced (best effort: a directory that
/// cannot be opened or synced leaves the renames as durable as the file system makes them).
fn sync_dirs(targets: &[&Path]) {
    let mut done: Vec<&Path> = Vec::new();
    for t in targets {
        let dir = match t.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        if !done.contains(&dir) {
            if let Ok(f) = fs::File::open(dir) {
                let _ = f.sync_all();
            }
            done.push(dir);
        }
    }
}

/// `e` with the staged path it names replaced by its target.
fn rename_path(e: Error, staged: &[PathBuf], targets: &[&Path]) -> Error {
    let target = |p: PathBuf| {
        staged
            .iter()
            .position(|s| *s == p)
            .map_or(p, |i| targets[i].to_path_buf())
    };
    match e {
        Error::Write { path, source } => Error::Write {
            path: target(path),
            source,
        },
        Error::Sync { path, source } => Error::Sync {
            path: target(path),
            source,
        },
        Error::Rename { path, source } => Error::Rename {
            path: target(path),
            source,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn read(p: &Path) -> String {
        fs::read_to_string(p).unwrap_or_else(|_| "(none)".into())
    }

    #[test]
    fn a_set_replaces_every_target_and_leaves_nothing_staged() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        write_set(&[&a, &b], |i, w| w.write_all(format!("one {i}").as_bytes())).unwrap();
        write_set(&[&a, &b], |i, w| w.write_all(format!("two {i}").as_bytes())).unwrap();
        assert_eq!((read(&a), read(&b)), ("two 0".into(), "two 1".into()));
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_failed_member_leaves_the_previous_set_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        write_set(&[&a, &b], |i, w| w.write_all(format!("one {i}").as_bytes())).unwrap();
        // The second member fails after the first was written in full (a full disk).
        let e = write_set(&[&a, &b], |i, w| {
            w.write_all(format!("two {i}").as_bytes())?;
            if i == 1 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            Ok(())
        })
        .unwrap_err();
        assert!(
            e.describe()
                .starts_with(&format!("writing {}", b.display())),
            "{e:?}"
        );
        assert_eq!((read(&a), read(&b)), ("one 0".into(), "one 1".into()));
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            2,
            "nothing staged left"
        );
    }

    #[test]
    fn recovery_drops_an_uncommitted_set_and_finishes_a_committing_one() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        let set = [a.as_path(), b.as_path(), c.as_path()];
        write_set(&set, |i, w| w.write_all(format!("one {i}").as_bytes())).unwrap();
        // Killed after staging all three, before any rename: the old set stands.
        for (i, t) in set.iter().enumerate() {
            fs::write(staged(t), format!("two {i}")).unwrap();
        }
        assert_eq!(recover_set(&set).unwrap(), Recovered::Dropped);
        assert_eq!(read(&a) + &read(&b) + &read(&c), "one 0one 1one 2");
        // Killed after the first rename: the new set is finished.
        fs::write(&a, "two 0").unwrap();
        for (i, t) in set.iter().enumerate().skip(1) {
            fs::write(staged(t), format!("two {i}")).unwrap();
        }
        assert_eq!(recover_set(&set).unwrap(), Recovered::Finished);
        assert_eq!(read(&a) + &read(&b) + &read(&c), "two 0two 1two 2");
        assert_eq!(recover_set(&set).unwrap(), Recovered::Nothing);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 3);
        // A set written over a half-committed one finishes it first, whatever becomes of the
        // new one (here it fails).
        fs::write(staged(&b), "three 1").unwrap();
        write_set(&set[..2], |_, _| Err(io::Error::other("boom"))).unwrap_err();
        assert_eq!(read(&a) + &read(&b) + &read(&c), "two 0three 1two 2");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 3);
    }
}
