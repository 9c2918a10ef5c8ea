//! One live run per directory: [`DirLock`] holds an exclusive `flock` on `DIR/.lock` for the
//! run's life. The kernel releases it when the process ends, however it ends (kill -9 too), so
//! there is never a stale lock to clean; the file keeps the holder's pid for the message a second
//! run gets.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Why a directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another live process holds it.
    #[error(
        "{} is in use by another run (pid {}): one run at a time per directory; wait for it, stop it, or choose another directory",
        .dir.display(),
        .pid.map_or("unknown".to_string(), |p| p.to_string())
    )]
    Held { dir: PathBuf, pid: Option<u32> },
    #[error("locking {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl error_class::Classify for LockError {}

/// An exclusive lock on a directory, released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    path: PathBuf,
}

impl DirLock {
    /// The name of the lock file inside the directory.
    pub const FILE: &'static str = ".lock";

    /// Creates `dir` if needed and takes its lock without waiting: [`LockError::Held`] (naming
    /// the holder's pid) when another process has it.
    pub fn acquire(dir: &Path) -> Result<DirLock, LockError> {
        let path = dir.join(Self::FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        // SAFETY: flock on a descriptor this function owns; it changes nothing in memory.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(io(e));
            }
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            return Err(LockError::Held {
                dir: dir.to_path_buf(),
                pid: text.trim().parse().ok(),
            });
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DirLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let (_dir, d) = testkit::temp_path("runs/a");
        let first = DirLock::acquire(&d).unwrap();
        // flock locks belong to the open file: a second open in this process conflicts too.
        match DirLock::acquire(&d) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        let e = DirLock::acquire(&d).unwrap_err().to_string();
        assert!(e.contains("in use by another run (pid "), "{e}");
        drop(first);
        let again = DirLock::acquire(&d).unwrap();
        assert_eq!(
            std::fs::read_to_string(again.path()).unwrap().trim(),
            std::process::id().to_string()
        );
    }
}
