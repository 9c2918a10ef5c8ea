//! Trial processes: each command runs in a process group of its own (so a stop reaches every
//! process a trial started, `torchrun` and its workers included), with stdout read line by line
//! on a thread that sends the lines and, after end of file, the exit status to the sweep's loop.

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::Sender;

/// What a trial's reader thread reports.
#[derive(Debug)]
pub enum Msg {
    Line {
        trial: usize,
        attempt: usize,
        line: Vec<u8>,
    },
    Exit {
        trial: usize,
        attempt: usize,
        status: std::io::Result<ExitStatus>,
    },
}

/// Starts `args` with `env` added, stdin closed, stderr into `stderr`; returns the pid (also the
/// process group id).
pub fn spawn(
    args: &[OsString],
    env: &[(&str, String)],
    stderr: File,
    trial: usize,
    attempt: usize,
    tx: Sender<Msg>,
) -> std::io::Result<i32> {
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: prctl, getppid and _exit are async-signal-safe; the closure only reads a copied
    // pid. A trial whose sweep dies (kill -9) gets SIGTERM instead of running on unattended.
    // If the sweep died before the prctl, getppid no longer names it: exit at once.
    let parent = std::process::id() as libc::pid_t;
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as i32;
    let stdout = child.stdout.take().expect("stdout is piped");
    std::thread::spawn(move || {
        let mut r = BufReader::with_capacity(1 << 16, stdout);
        loop {
            let mut line = Vec::new();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if tx
                        .send(Msg::Line {
                            trial,
                            attempt,
                            line,
                        })
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        drop(r);
        let status = child.wait();
        let _ = tx.send(Msg::Exit {
            trial,
            attempt,
            status,
        });
    });
    Ok(pid)
}

/// Sends `signal` to the process group `pid`.
pub fn signal_group(pid: i32, signal: i32) {
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is shared.
    unsafe {
        libc::kill(-pid, signal);
    }
}

/// "exit status 3" / "killed by signal 9".
pub fn describe(status: &std::io::Result<ExitStatus>) -> String {
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            _ => "ended".into(),
        },
        Err(e) => format!("could not be waited for: {e}"),
    }
}

/// The last non-empty line of a file (its last 4 KiB), for error messages.
pub fn last_line(path: &std::path::Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().chars().take(300).collect())
}
