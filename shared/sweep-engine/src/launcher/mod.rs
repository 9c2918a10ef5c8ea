//! Trial launchers: the [`Launcher`] trait the engine starts and signals trials through, and
//! the process plumbing every launcher shares ([`spawn`]).
//!
//! Whatever runs a trial, the engine sees one local process: the trial's command itself
//! ([`Local`]), or the client that runs it elsewhere. That process runs in a process group of its
//! own (so a stop reaches every process it started, `torchrun` and its workers included), with
//! stdout going to a file in the trial's directory (`stdout.log`, appended), not a pipe: what a
//! trial wrote is kept if the sweep dies before reading it (kill -9), and `--resume` reads it
//! back. A thread reads the file line by line as it grows (woken by inotify as soon as it is
//! written, as a pipe's reader is) and sends the lines to the sweep's loop; a second thread
//! waits for the process. A trial ends when its process exits: what it
//! wrote by then is read (for at most [`EXIT_GRACE`]), then its process group is ended (what it
//! left running in the background would otherwise hold its slot, and its later lines would
//! count as results), and the exit status is sent.

mod local;
mod slurm;

pub use local::{Local, allowed_cpus, installed_gpus, slot_cpus, slot_gpus};
pub use slurm::{
    Allocation, Ask, ENVIRONMENT as SLURM_ENVIRONMENT, Slurm, fuzz_slurm_output, srun_args,
};

use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::time::Duration;

/// The longest a trial's stdout is still read after its process exited.
pub const EXIT_GRACE: Duration = Duration::from_secs(1);
/// The file in a trial's directory that holds its command's stdout, every attempt appended.
pub const STDOUT_LOG: &str = "stdout.log";
/// The longest wait between two looks at a trial's stdout file that had nothing new (for its
/// process's exit, or without inotify for a write).
const POLL_MAX: Duration = Duration::from_millis(10);
/// The longest stdout line of a trial that is read as a record; a longer one is skipped whole
/// (and reported), so a trial printing without newlines cannot take the sweep's memory.
pub const MAX_LINE: usize = 1 << 20;

/// What a trial's reader thread reports.
#[derive(Debug)]
pub enum Msg {
    Line {
        trial: usize,
        attempt: usize,
        line: Vec<u8>,
    },
    /// A line longer than [`MAX_LINE`] was skipped.
    LongLine { trial: usize, bytes: u64 },
    Exit {
        trial: usize,
        attempt: usize,
        status: std::io::Result<ExitStatus>,
    },
}

/// A trial's run, as the engine asks a launcher for it.
#[derive(Debug)]
pub struct Launch<'a> {
    pub trial: usize,
    pub attempt: usize,
    /// The slot it runs in (0 to the sweep's slots - 1).
    pub slot: usize,
    /// The command, its placeholders filled in.
    pub args: &'a [OsString],
    /// What the engine sets for every trial (SWEEP_TRIAL, SWEEP_TRIAL_DIR, SWEEP_SLOT); a
    /// launcher adds its own. OS strings: a directory's name is passed on as it is.
    pub env: Vec<(&'static str, OsString)>,
    /// The trial's directory.
    pub dir: &'a Path,
    /// The trial's stderr.log, opened for appending.
    pub stderr: File,
    /// The trial's stdout.log, and where this attempt's output starts in it.
    pub stdout: Stdout,
}

/// A trial's stdout: its file (opened for reading and appending) and the length it had when
/// this attempt started (where the attempt's lines start).
#[derive(Debug)]
pub struct Stdout {
    pub file: File,
    pub from: u64,
}

/// How a stop reaches a trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Asked to stop (SIGTERM): a trial checkpoints and exits.
    Stop,
    /// Ended (SIGKILL): the stop's grace period is over.
    Kill,
}

/// How a trial's process ended, as its launcher judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Its command finished on its own.
    Success,
    /// It failed (the message says why): retried under --max-failures, else an error.
    Failed(String),
    /// Whatever it did, the place it ran in is going away (a Slurm job Slurm is ending or
    /// requeueing): the trial is unfinished, as a stopped sweep's trials are, nothing is counted
    /// against it, and the sweep stops (the message says why).
    Lost(String),
}

/// Runs trials. The engine calls `start` for each attempt and `signal` to stop it; the lines
/// and the exit of what `start` began arrive as [`Msg`]s through the sender it was given.
pub trait Launcher: std::fmt::Debug {
    /// Starts the trial's command; returns the pid of the process the engine waits for (also
    /// its process group id).
    fn start(&mut self, launch: Launch<'_>, tx: Sender<Msg>) -> crate::Result<i32>;

    /// Sends `signal` to a trial started as `pid`.
    fn signal(&mut self, pid: i32, signal: Signal);

    /// Ends what an earlier run of trial `trial` (in `dir`) left running, such as a killed
    /// sweep's trial processes: called before the trial's stdout.log is read back at
    /// `--resume` and before each attempt starts, so that nothing they write can be taken as a
    /// later attempt's. `stdout`: the device and inode of the stdout.log its last attempt wrote
    /// to, where known. By default there is nothing to end.
    fn end_leftovers(&mut self, trial: usize, dir: &Path, stdout: Option<[u64; 2]>) {
        let _ = (trial, dir, stdout);
    }

    /// The trial started as `pid` ended with `status` (stopped or on its own): how. By default
    /// its exit status says.
    fn ended(&mut self, pid: i32, status: &std::io::Result<ExitStatus>) -> Ended {
        let _ = pid;
        match status {
            Ok(s) if s.success() => Ended::Success,
            _ => Ended::Failed(describe(status)),
        }
    }
}

/// Starts `args` with `env` added, on `cpus` (an affinity mask; `None`: the sweep's own), stdin
/// closed, stderr into `stderr`, stdout appended to `stdout`'s file (read from its `from` on);
/// returns the pid (also the process group id).
pub fn spawn(
    args: &[OsString],
    env: &[(&str, OsString)],
    cpus: Option<&[usize]>,
    stderr: File,
    stdout: Stdout,
    (trial, attempt): (usize, usize),
    tx: Sender<Msg>,
) -> std::io::Result<i32> {
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..])
        .stdin(Stdio::null())
        .stdout(blocking(stdout.file.try_clone()?)?)
        .stderr(stderr)
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mask = cpus.map(cpu_set);
    // A trial whose sweep dies (kill -9) gets SIGTERM instead of running on unattended. If the
    // sweep died before the prctl, getppid no longer names it: exit at once.
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: prctl, getppid, sched_setaffinity and _exit are async-signal-safe; the closure
    // only reads a copied pid and mask.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            if let Some(set) = &mask
                && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn()?;
    let pid = child.id() as i32;
    let exited = Arc::new(AtomicBool::new(false));
    let tail = Tail {
        watch: watch(&stdout.file),
        file: stdout.file,
        at: stdout.from,
        exited: exited.clone(),
        end: None,
        trial,
    };
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let lines = tx.clone();
    std::thread::spawn(move || forward_lines(tail, (trial, attempt), &lines, done_tx));
    std::thread::spawn(move || reap(child, (trial, attempt), &tx, &exited, &done_rx));
    Ok(pid)
}

/// `file` without O_NONBLOCK (opened with it so that a FIFO could not block the open; it is a
/// regular file, and the trial gets it as its stdout as a shell would).
fn blocking(file: File) -> std::io::Result<File> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor this function owns; no memory is passed.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if !ok {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// A trial's stdout file read as it grows, from where its attempt started, until its process
/// has exited and what it wrote by then is read (what it left behind writes later is not read).
struct Tail {
    file: File,
    /// Woken when the file is written to (None: inotify could not be had).
    watch: Option<std::os::fd::OwnedFd>,
    at: u64,
    exited: Arc<AtomicBool>,
    /// The file's length once the process has exited: where reading ends.
    end: Option<u64>,
    /// The trial it is the output of (for warnings).
    trial: usize,
}

impl std::io::Read for Tail {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut wait = Duration::from_millis(1);
        loop {
            if self.end.is_none() && self.exited.load(Ordering::Acquire) {
                self.end = Some(self.file.metadata()?.len());
            }
            let room = match self.end {
                Some(end) => buf.len().min(end.saturating_sub(self.at) as usize),
                None => buf.len(),
            };
            if room == 0 {
                if self.cut(self.end.unwrap_or(self.at)) {
                    continue;
                }
                return Ok(0);
            }
            let n = self.file.read_at(&mut buf[..room], self.at)?;
            if n > 0 {
                self.at += n as u64;
                return Ok(n);
            }
            if self.end.is_some() {
                return Ok(0); // cut shorter than it was: nothing more to read
            }
            if self.cut(self.file.metadata()?.len()) {
                continue;
            }
            match &self.watch {
                Some(w) => wait_for_change(w, POLL_MAX),
                None => std::thread::sleep(wait),
            }
            wait = (wait * 2).min(POLL_MAX);
        }
    }
}

impl Tail {
    /// Whether the file, `len` bytes long, was cut below where reading is (as logrotate's
    /// copytruncate does): then what it holds was written since, and is read from its start.
    fn cut(&mut self, len: u64) -> bool {
        if len >= self.at {
            return false;
        }
        log::warn!(
            "trial {}: its {STDOUT_LOG} was cut from {} to {len} bytes while it was read: read \
             again from its start",
            self.trial,
            self.at
        );
        self.at = 0;
        true
    }
}

/// An inotify instance watching `file` for writes (through /proc/self/fd, so no path is
/// needed); None where one cannot be had (the per-user limit on instances).
fn watch(file: &File) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // SAFETY: inotify_init1 takes flags only; a non-negative result is a descriptor we own.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just returned to us and is closed only by the OwnedFd.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    // SAFETY: a valid inotify descriptor and a NUL-terminated path that outlives the call.
    let wd = unsafe {
        libc::inotify_add_watch(
            fd.as_raw_fd(),
            path.as_ptr(),
            libc::IN_MODIFY | libc::IN_CLOSE_WRITE,
        )
    };
    (wd >= 0).then_some(fd)
}

/// Waits until `watch` reports a change, or `timeout`; then takes its events.
fn wait_for_change(watch: &std::os::fd::OwnedFd, timeout: Duration) {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd {
        fd: watch.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let mut events = [0u8; 4096];
    // SAFETY: poll on one pollfd we own; read into a buffer of the length given (the
    // descriptor does not block).
    unsafe {
        libc::poll(&mut pfd, 1, ms);
        while libc::read(watch.as_raw_fd(), events.as_mut_ptr().cast(), events.len()) > 0 {}
    }
}

/// Sends each line of a trial's stdout (an over-long one as its length), until it ends;
/// dropping `done` then says so.
fn forward_lines(
    stdout: Tail,
    (trial, attempt): (usize, usize),
    tx: &Sender<Msg>,
    done: std::sync::mpsc::Sender<()>,
) {
    let mut r = BufReader::with_capacity(1 << 16, stdout);
    loop {
        let msg = match read_line_capped(&mut r, MAX_LINE) {
            Ok(Read::End) | Err(_) => break,
            Ok(Read::Line(line)) => Msg::Line {
                trial,
                attempt,
                line,
            },
            Ok(Read::TooLong(bytes)) => Msg::LongLine { trial, bytes },
        };
        if tx.send(msg).is_err() {
            break;
        }
    }
    drop(done);
}

/// Waits for a trial to exit, then for its stdout to be read to where it was then, kills what
/// it left behind in its process group, and sends its exit status.
fn reap(
    mut child: std::process::Child,
    (trial, attempt): (usize, usize),
    tx: &Sender<Msg>,
    exited: &AtomicBool,
    stdout_done: &std::sync::mpsc::Receiver<()>,
) {
    let pid = child.id() as i32;
    let status = child.wait();
    exited.store(true, Ordering::Release);
    let _ = stdout_done.recv_timeout(EXIT_GRACE);
    signal_group(pid, libc::SIGKILL);
    let _ = tx.send(Msg::Exit {
        trial,
        attempt,
        status,
    });
}

/// `cpus` as an affinity mask (CPUs past the mask's size are left out).
fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is a plain bit array; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        if c < libc::CPU_SETSIZE as usize {
            // SAFETY: `c` is within the set's bits.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
    }
    set
}

/// One read of [`read_line_capped`].
#[derive(Debug, PartialEq)]
pub(crate) enum Read {
    Line(Vec<u8>),
    /// A line of this many bytes (newline included) was skipped.
    TooLong(u64),
    End,
}

/// The next line (with its newline, if any), holding at most `cap` bytes: a longer line is read
/// on to its end and dropped.
pub(crate) fn read_line_capped(r: &mut impl BufRead, cap: usize) -> std::io::Result<Read> {
    let mut line = Vec::new();
    let mut skipped: u64 = 0;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(match (skipped, line.is_empty()) {
                (0, true) => Read::End,
                (0, false) => Read::Line(line),
                _ => Read::TooLong(skipped),
            });
        }
        let (take, end) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if skipped == 0 && line.len() + take <= cap {
            line.extend_from_slice(&buf[..take]);
        } else {
            skipped += (line.len() + take) as u64;
            line = Vec::new();
        }
        r.consume(take);
        if end {
            return Ok(if skipped > 0 {
                Read::TooLong(skipped)
            } else {
                Read::Line(line)
            });
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_to_a_watched_stdout_file_is_reported_at_once() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let mut file = crate::files::open_regular(&dir.path().join(STDOUT_LOG), true).unwrap();
        let w = watch(&file).expect("inotify on a regular file");
        let ready = |w: &std::os::fd::OwnedFd| {
            let mut pfd = libc::pollfd {
                fd: w.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: poll on one pollfd we own, without waiting.
            unsafe { libc::poll(&mut pfd, 1, 0) }
        };
        assert_eq!(ready(&w), 0, "nothing written yet");
        file.write_all(b"{}\n").unwrap();
        assert_eq!(ready(&w), 1, "the write is an event");
        wait_for_change(&w, Duration::ZERO);
        assert_eq!(ready(&w), 0, "taken");
    }

    /// A stdout file cut while it is read (as logrotate's copytruncate does): what is written
    /// after the cut is read from the file's start, not skipped until the file grows back past
    /// where reading was.
    #[test]
    fn a_stdout_file_cut_while_read_is_read_again_from_its_start() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(STDOUT_LOG);
        let mut file = crate::files::open_regular(&path, true).unwrap();
        file.write_all(&[b'x'; 100]).unwrap();
        file.write_all(b"\n").unwrap();
        let exited = Arc::new(AtomicBool::new(false));
        let tail = Tail {
            watch: watch(&file),
            file: file.try_clone().unwrap(),
            at: 101,
            exited: exited.clone(),
            end: None,
            trial: 0,
        };
        file.set_len(0).unwrap();
        file.write_all(b"{\"epoch\": 2}\n").unwrap();
        exited.store(true, Ordering::Release);
        let mut r = BufReader::new(tail);
        assert_eq!(
            read_line_capped(&mut r, MAX_LINE).unwrap(),
            Read::Line(b"{\"epoch\": 2}\n".to_vec())
        );
        assert_eq!(read_line_capped(&mut r, MAX_LINE).unwrap(), Read::End);
    }

    #[test]
    fn lines_longer_than_the_cap_are_skipped_whole_and_counted() {
        let text = [
            b"short\n".as_slice(),
            &[b'x'; 25],
            b"\n",
            b"ok\n",
            &[b'y'; 30],
        ]
        .concat();
        let mut r = BufReader::with_capacity(4, &text[..]);
        let reads: Vec<Read> = std::iter::from_fn(|| match read_line_capped(&mut r, 10).unwrap() {
            Read::End => None,
            other => Some(other),
        })
        .collect();
        assert_eq!(
            reads,
            [
                Read::Line(b"short\n".to_vec()),
                Read::TooLong(26),
                Read::Line(b"ok\n".to_vec()),
                Read::TooLong(30),
            ]
        );
    }
}
