//! SIGINT/SIGTERM handling: the first signal sets a flag that work loops poll through
//! [`check`], so they stop between items, temp files are dropped (deleted) and the tool exits
//! 130. GNU parallel's `--termseq` gives a job about 0.4 s between TERM and KILL; a second signal
//! exits at once.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

/// Installs the handler (idempotent; [`crate::run_main`] calls it).
pub fn install() {
    INSTALL.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if INTERRUPTED.swap(true, Ordering::SeqCst) {
                std::process::exit(crate::EXIT_INTERRUPTED as i32);
            }
        });
    });
}

/// True once a signal has arrived.
pub fn requested() -> bool {
    INTERRUPTED.load(Ordering::Relaxed)
}

/// `Err(Interrupted)` once a signal has arrived.
pub fn check() -> anyhow::Result<()> {
    if requested() {
        Err(crate::Interrupted.into())
    } else {
        Ok(())
    }
}
