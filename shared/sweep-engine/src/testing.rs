//! What the unit tests share: a call that must end within a deadline.

use std::time::Duration;

/// What `f` returns, run on a thread of its own; the test fails if it has not ended within two
/// minutes (it waits for ever on what it was given, a FIFO).
pub(crate) fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{what} within 120 s: {e}"))
}
