//! SIGINT/SIGTERM handling: the first signal sets a flag that work loops poll through
//! [`check`], so they stop between items, temp files are dropped (deleted) and the tool exits
//! 130. GNU parallel's `--termseq` gives a job about 0.4 s between TERM and KILL; a second signal
//! exits at once.
//!
//! A tool that can checkpoint also takes a warning signal (Slurm's `--signal=USR1@120` before a
//! time limit, `scancel --signal=USR1`): [`install_checkpoint_signal`] makes it raise the flag
//! [`checkpoint_requested`] reads instead of ending the process.

use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
/// The checkpoint signal when it is one of the signals [`install`] takes (SIGHUP), which then
/// asks for a checkpoint instead of interrupting; 0 when none.
static CHECKPOINT_SIGNAL: AtomicI32 = AtomicI32::new(0);
/// Raised by the checkpoint signal.
static CHECKPOINT: AtomicBool = AtomicBool::new(false);

/// Installs the handler of SIGINT, SIGTERM and SIGHUP (idempotent; [`crate::run_main`] calls
/// it). The handler itself raises the flag, so it is up once the signal has been delivered:
/// a process whose child dies of the same signal (its process group signalled) sees the flag
/// before it sees the child's end.
pub fn install() {
    INSTALL.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        for signal in [SIGINT, SIGTERM, SIGHUP] {
            // SAFETY: the action only reads and writes atomics and calls _exit, all
            // async-signal-safe.
            let _ = unsafe { signal_hook::low_level::register(signal, move || on_signal(signal)) };
        }
    });
}

/// What a signal [`install`] handles does (in the handler: atomics and `_exit` only).
fn on_signal(signal: i32) {
    if signal == CHECKPOINT_SIGNAL.load(Ordering::SeqCst) {
        CHECKPOINT.store(true, Ordering::SeqCst);
    } else if INTERRUPTED.swap(true, Ordering::SeqCst) {
        signal_hook::low_level::exit(crate::EXIT_INTERRUPTED as i32);
    }
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

/// The signals a checkpoint can be asked with, by name (`USR1` or `SIGUSR1`, any case): those
/// whose default action ends the process and that schedulers send as a warning.
pub fn checkpoint_signal_by_name(name: &str) -> Option<i32> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    Some(match bare {
        "USR1" => signal_hook::consts::SIGUSR1,
        "USR2" => signal_hook::consts::SIGUSR2,
        "HUP" => signal_hook::consts::SIGHUP,
        "ALRM" => signal_hook::consts::SIGALRM,
        _ => return None,
    })
}

/// The name [`checkpoint_signal_by_name`] takes for `signal` (`USR1`...), or its number for
/// another signal.
pub fn checkpoint_signal_name(signal: i32) -> String {
    use signal_hook::consts::{SIGALRM, SIGHUP, SIGUSR1, SIGUSR2};
    match signal {
        SIGUSR1 => "USR1".into(),
        SIGUSR2 => "USR2".into(),
        SIGHUP => "HUP".into(),
        SIGALRM => "ALRM".into(),
        n => n.to_string(),
    }
}

/// From now on `signal` raises the checkpoint flag instead of its default action (SIGHUP:
/// instead of interrupting).
pub fn install_checkpoint_signal(signal: i32) -> std::io::Result<()> {
    if signal == signal_hook::consts::SIGHUP {
        install();
        CHECKPOINT_SIGNAL.store(signal, Ordering::SeqCst);
        return Ok(());
    }
    // SAFETY: the action only stores an atomic, which is async-signal-safe.
    unsafe { signal_hook::low_level::register(signal, || CHECKPOINT.store(true, Ordering::SeqCst)) }
        .map(|_| ())
}

/// True once the checkpoint signal has arrived.
pub fn checkpoint_requested() -> bool {
    CHECKPOINT.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkpoint_signal_raises_the_flag_instead_of_ending_the_process() {
        assert_eq!(checkpoint_signal_by_name("sigusr2"), Some(libc::SIGUSR2));
        assert_eq!(checkpoint_signal_by_name("USR1"), Some(libc::SIGUSR1));
        assert_eq!(checkpoint_signal_by_name("KILL"), None);
        assert_eq!(checkpoint_signal_by_name("TERM"), None, "TERM interrupts");
        install_checkpoint_signal(libc::SIGUSR2).unwrap();
        assert!(!checkpoint_requested());
        // SAFETY: raising a signal this process now handles.
        assert_eq!(unsafe { libc::raise(libc::SIGUSR2) }, 0);
        assert!(checkpoint_requested());
    }
}
