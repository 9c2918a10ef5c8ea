//! What the unit tests share: a FIFO made, and a call that must end within a deadline.

use std::path::Path;
use std::time::Duration;

/// A FIFO at `path`, made with mkfifo(3): no child is forked while another test holds a lock.
pub(crate) fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo reads a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "{path:?}");
}

/// What `f` returns, run on a thread of its own; the test fails if it has not ended within two
/// minutes (it waits for ever on what it was given, a FIFO).
pub(crate) fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{what} within 120 s: {e}"))
}
