//! Input files opened safely. A FIFO opened for reading blocks until a writer comes (for ever,
//! and deaf to SIGTERM while the thread sits in open(2)); a device or /dev/zero reads without
//! end; a directory fails late with a puzzling message. [`open`] opens without blocking, checks
//! that the file is regular, and only then hands it over; [`read`] reads one whole within a
//! bound stated by the caller.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let p = dir.path().join("a.txt");
//! std::fs::write(&p, b"hello").unwrap();
//! assert_eq!(input_file::read(&p, 1 << 20).unwrap(), b"hello");
//! let e = input_file::open(dir.path()).unwrap_err().to_string();
//! assert!(e.ends_with("is a directory, not a regular file"), "{e}");
//! ```

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a file that is not regular is, in words ("a FIFO"); `None` for a regular file.
pub fn not_regular(meta: &Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    Some(if t.is_file() {
        return None;
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a file"
    })
}

/// Opens `path` for reading if it is a regular file, with its length; never blocks (a FIFO is
/// opened non-blocking, then refused). The error says the path and what it is.
pub fn open(path: &Path) -> io::Result<(File, u64)> {
    let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(named)?;
    let meta = file.metadata().map_err(named)?;
    if let Some(kind) = not_regular(&meta) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is {kind}, not a regular file", path.display()),
        ));
    }
    // O_NONBLOCK means nothing to a regular file's reads; cleared all the same.
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
    Ok((file, meta.len()))
}

/// The whole of the regular file at `path`, refused when longer than `limit` bytes (before
/// anything is allocated for it) or when it grows past it while read.
pub fn read(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let (mut reader, len) = bounded(path, limit)?;
    let mut bytes = Vec::with_capacity(len as usize);
    within(
        path,
        limit,
        reader.read_to_end(&mut bytes).map(|n| n as u64),
    )?;
    Ok(bytes)
}

/// The regular file at `path` written into `sink` as it is read (a digest, say), with the
/// bounds of [`read`]; the bytes copied.
pub fn copy_to(path: &Path, limit: u64, sink: &mut impl io::Write) -> io::Result<u64> {
    let (mut reader, _) = bounded(path, limit)?;
    within(path, limit, io::copy(&mut reader, sink))
}

/// The file opened ([`open`]) and its length, refused when longer than `limit`; reads of it
/// stop one byte past `limit`.
fn bounded(path: &Path, limit: u64) -> io::Result<(io::Take<File>, u64)> {
    let (file, len) = open(path)?;
    if len > limit {
        return Err(too_long(path, limit));
    }
    Ok((file.take(limit + 1), len))
}

/// The count a bounded read gave, or its error named, or [`too_long`] past `limit`.
fn within(path: &Path, limit: u64, read: io::Result<u64>) -> io::Result<u64> {
    match read {
        Ok(n) if n > limit => Err(too_long(path, limit)),
        Ok(n) => Ok(n),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

fn too_long(path: &Path, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} is longer than {limit} bytes", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fifo_is_refused_at_once_without_a_writer() {
        let (_dir, fifo) = testkit::temp_path("f");
        testkit::mkfifo(&fifo);
        // Would block for ever in open(2) without O_NONBLOCK (no writer ever comes).
        let e = read(&fifo, 100).unwrap_err().to_string();
        assert!(e.ends_with("f is a FIFO, not a regular file"), "{e}");
        let e = open(Path::new("/dev/zero")).unwrap_err().to_string();
        assert!(e.contains("is a device"), "{e}");
    }

    #[test]
    fn reads_are_bounded_and_missing_files_named() {
        let (dir, p) = testkit::temp_file("a", vec![7u8; 100]);
        assert_eq!(read(&p, 100).unwrap().len(), 100);
        let e = read(&p, 99).unwrap_err().to_string();
        assert!(e.contains("longer than 99 bytes"), "{e}");
        let e = read(&dir.path().join("none"), 9).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("none"), "{e}");
    }
}
