//! Outputs appear whole or not at all: written to a hidden temp file in the target's directory,
//! synced, then renamed over the target. A killed run leaves at most a `.<name>.*.partial` file
//! (removed on normal drop and on SIGINT/SIGTERM), never a truncated output.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Context;

/// Creates the parent directory, runs `write` on a temp file beside `target`, syncs it and
/// renames it to `target`.
pub fn write_atomic<T>(
    target: &Path,
    write: impl FnOnce(&mut BufWriter<&mut fs::File>) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut tmp = temp_beside(target)?;
    let value = {
        let mut w = BufWriter::with_capacity(1 << 16, tmp.as_file_mut());
        let value = write(&mut w).with_context(|| format!("writing {}", target.display()))?;
        w.flush().with_context(|| format!("writing {}", target.display()))?;
        value
    };
    persist(tmp, target)?;
    Ok(value)
}

/// A temp file in `target`'s directory (created if missing), deleted when dropped.
pub fn temp_beside(target: &Path) -> anyhow::Result<tempfile::NamedTempFile> {
    let dir = match target.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::create_dir_all(dir).with_context(|| format!("creating directory {}", dir.display()))?;
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".partial")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temp file in {}", dir.display()))
}

/// Syncs `tmp` and renames it to `target`.
pub fn persist(tmp: tempfile::NamedTempFile, target: &Path) -> anyhow::Result<()> {
    tmp.as_file().sync_all().with_context(|| format!("syncing {}", target.display()))?;
    tmp.persist(target).with_context(|| format!("renaming into {}", target.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_file_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/out.txt");
        write_atomic(&target, |w| Ok(w.write_all(b"hello")?)).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"hello");
        assert_eq!(fs::read_dir(dir.path().join("sub")).unwrap().count(), 1);
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.txt");
        let r: anyhow::Result<()> = write_atomic(&target, |w| {
            w.write_all(b"half")?;
            anyhow::bail!("boom")
        });
        assert!(r.is_err());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
