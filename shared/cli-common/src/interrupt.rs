//! SIGINT/SIGTERM handling: the first signal sets a flag that work loops poll through
//! [`check`], so they stop between items, temp files are dropped (deleted) and the tool exits
//! 130. GNU parallel's `--termseq` gives a job about 0.4 s between TERM and KILL; a second signal
//! exits at once.
//!
//! A tool that can checkpoint also takes a warning signal (Slurm's `--signal=USR1@120` before a
//! time limit, `scancel --signal=USR1`): [`install_checkpoint_signal`] makes it raise the flag
//! [`checkpoint_requested`] reads instead of ending the process.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Once, OnceLock};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();
/// The checkpoint signal when it is one of the signals [`install`] takes (SIGHUP), which then
/// asks for a checkpoint instead of interrupting; 0 when none.
static CHECKPOINT_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Installs the handler of SIGINT, SIGTERM and SIGHUP (idempotent; [`crate::run_main`] calls
/// it): a thread of its own takes the signals as they come, so it can tell them apart.
pub fn install() {
    INSTALL.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) else {
            return;
        };
        let _ = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    if signal == CHECKPOINT_SIGNAL.load(Ordering::SeqCst) {
                        checkpoint_flag().store(true, Ordering::SeqCst);
                    } else if INTERRUPTED.swap(true, Ordering::SeqCst) {
                        std::process::exit(crate::EXIT_INTERRUPTED as i32);
                    }
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

static CHECKPOINT: OnceLock<Arc<AtomicBool>> = OnceLock::new();

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
    let flag = checkpoint_flag().clone();
    if signal == signal_hook::consts::SIGHUP {
        install();
        CHECKPOINT_SIGNAL.store(signal, Ordering::SeqCst);
        return Ok(());
    }
    signal_hook::flag::register(signal, flag).map(|_| ())
}

fn checkpoint_flag() -> &'static Arc<AtomicBool> {
    CHECKPOINT.get_or_init(Default::default)
}

/// True once the checkpoint signal has arrived.
pub fn checkpoint_requested() -> bool {
    CHECKPOINT.get().is_some_and(|f| f.load(Ordering::Relaxed))
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
