//! Direct reads: the ranks of a host read each other's buffers with `process_vm_readv` (Linux's
//! cross-memory attach), so a large all-reduce moves each byte once instead of through the
//! segment's slots.
//!
//! Rank i reduces ring segment i of the buffer (elements ⌊count·i/n⌋ .. ⌊count·(i+1)/n⌋) in its
//! own buffer, reading the other ranks' values of that segment from their buffers, in the ring's
//! order (its own values first, then ranks i+1, … i−1: the same sums as [`crate::ring`]'s and
//! the slots'), one step of a slot's size at a time, and says so in its `Folded` progress word.
//! Each rank copies every other rank's reduced steps from that rank's buffer into its own as
//! they are published. A rank writes another rank's segment of its buffer only after that rank
//! has reduced it (the only reader of those values), and returns only once every rank has
//! copied everything out (the only readers of its own segment).
//!
//! Whether the host's ranks can read each other is found at the first all-reduce of a size
//! that would ([`direct_size`]): each rank reads a random token of every other rank's (its
//! address and value in the segment) and says whether it could (and whether the host's ranks do
//! not outnumber the cores it may run on); the ranks use direct reads only if every rank could.
//! A process of another user, another PID namespace, a kernel or sandbox that refuses
//! cross-memory attach (Yama's `ptrace_scope` 1 or more, seccomp) or a process that is not
//! dumpable make it fail, and the ranks keep the slots.
//!
//! A rank that leaves an all-reduce after its part (a signal, the deadline) while others may
//! still read its buffer takes its `Done` word back first: the others then wait for its reason
//! (the abort word, its socket) instead of returning what they read from a buffer that went
//! back to its caller; a read that fails because that buffer is gone waits the same way. A
//! failed read names the cause the segment already holds (a rank seen killed), if any.

use super::pipeline::{Stage, Wait};
use super::wait::reached;
use super::*;

/// Offsets in a rank's line (the barrier counter is at 0, the progress words at 8..20, the
/// headers at 64..128).
const PID: usize = 20;
const VERDICT: usize = 24;
const TOKEN_AT: usize = 32;
const TOKEN: usize = 40;
const BUF_AT: usize = 48;

/// A rank's verdict on reading the others directly.
const CAN: u32 = 1;
const CANNOT: u32 = 2;

/// Bytes read from one other rank per call while reducing: fits the L2 cache with the
/// buffer's block streaming through.
const FETCH: usize = 256 << 10;

/// The all-reduces that read the others directly: from 1 MiB (below, the slots' single pass
/// is quicker than the reads' system calls) to 16 MiB (above, the kernel's copy, which pins
/// each page of the other process, is slower than copying through the slots). Measured with 2
/// ranks on a 2-core machine: 1.1–1.25× the slots from 1 to 8 MiB, even at 16 MiB, 0.93× at
/// 32 MiB, 0.8× at 512 KiB.
pub(super) fn direct_size(len: usize) -> bool {
    ((1 << 20)..=(16 << 20)).contains(&len)
}

impl Group {
    fn line_u32(&self, i: usize, off: usize) -> &AtomicU32 {
        // SAFETY: rank i's line (i < n), 4-byte aligned offsets below the headers.
        unsafe { &*(self.map.ptr.add(LINE * (i + 1) + off) as *const AtomicU32) }
    }

    fn line_u64(&self, i: usize, off: usize) -> &AtomicU64 {
        // SAFETY: rank i's line (i < n), 8-byte aligned offsets below the headers.
        unsafe { &*(self.map.ptr.add(LINE * (i + 1) + off) as *const AtomicU64) }
    }

    /// Writes this rank's process id and token into its line, for the others' probe (read
    /// after a barrier).
    pub(super) fn publish_identity(&self) {
        self.line_u32(self.me, PID)
            .store(std::process::id(), Ordering::Relaxed);
        self.line_u64(self.me, TOKEN_AT)
            .store(&*self.token as *const u64 as u64, Ordering::Relaxed);
        self.line_u64(self.me, TOKEN)
            .store(*self.token, Ordering::Relaxed);
    }

    /// Whether this all-reduce (announced, the barrier passed) reads the others directly:
    /// decided at the first one that may, the same way on every rank (one more barrier).
    pub(super) fn direct_reads(&mut self) -> Result<bool> {
        if let Some(d) = self.direct {
            return Ok(d);
        }
        // With more ranks than cores, a rank waits for others to be scheduled at every step of
        // the direct reads, where the slots let it run ahead (measured: 0.7× at 16 MiB with 4
        // ranks on 2 cores).
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let mut others = (0..self.n()).filter(|&j| j != self.me);
        let verdict = if self.n() <= cores && others.all(|j| self.probe(j)) {
            CAN
        } else {
            CANNOT
        };
        self.line_u32(self.me, VERDICT)
            .store(verdict, Ordering::Release);
        self.barrier_wait(Kind::AllReduce)?;
        let all = (0..self.n()).all(|j| self.line_u32(j, VERDICT).load(Ordering::Acquire) == CAN);
        self.direct = Some(all);
        Ok(all)
    }

    /// Whether rank `j`'s token reads back from its process as its line says.
    fn probe(&self, j: usize) -> bool {
        let token = self.line_u64(j, TOKEN).load(Ordering::Acquire);
        let at = self.line_u64(j, TOKEN_AT).load(Ordering::Acquire);
        let mut got = [0u8; 8];
        token != 0 && self.read_from(j, at, &mut got).is_ok() && u64::from_ne_bytes(got) == token
    }

    /// Reads `dst.len()` bytes at address `at` of local rank `j`'s process into `dst`.
    fn read_from(&self, j: usize, at: u64, dst: &mut [u8]) -> io::Result<()> {
        let pid = self.line_u32(j, PID).load(Ordering::Acquire) as libc::pid_t;
        let mut done = 0;
        while done < dst.len() {
            let local = libc::iovec {
                iov_base: dst[done..].as_mut_ptr().cast(),
                iov_len: dst.len() - done,
            };
            let remote = libc::iovec {
                iov_base: (at as usize).wrapping_add(done) as *mut libc::c_void,
                iov_len: dst.len() - done,
            };
            // SAFETY: one local iovec inside `dst` (ours, borrowed mutably); the remote one is
            // only read, by the kernel, which checks it against the other process's mappings.
            let r = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            } else if r == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "nothing could be read",
                ));
            } else {
                done += r as usize;
            }
        }
        Ok(())
    }

    /// Says where this rank's buffer of the coming all-reduce is (before its announcement).
    pub(super) fn publish_buffer(&self, buf: &[u8]) {
        self.line_u64(self.me, BUF_AT)
            .store(buf.as_ptr() as u64, Ordering::Release);
    }

    /// The all-reduce of `buf` (announced; direct reads agreed) by direct reads, its progress
    /// numbered `base..=last` (`last`: the number every rank's `Done` word reaches).
    pub(super) fn direct_all_reduce(
        &mut self,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
        base: u64,
        last: u32,
    ) -> Result<()> {
        let (es, n, me) = (dtype.size(), self.n(), self.me);
        let count = buf.len() / es;
        let segment = |k: usize| {
            let bound = |k: usize| ((count as u128 * k as u128) / n as u128) as usize;
            bound(k)..bound(k + 1)
        };
        let per = SLOT / es;
        let steps = |k: usize| segment(k).len().div_ceil(per);
        let step = |k: usize, s: usize| {
            let r = segment(k);
            r.start + s * per..(r.start + (s + 1) * per).min(r.end)
        };
        let number = |s: usize| (base + s as u64) as u32;
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.resize(FETCH, 0);
        // Steps folded (this rank's segment), and copied out (every other rank's).
        let mut folded = 0;
        let mut copied = vec![0usize; n];
        copied[me] = steps(me);
        let mut wait = Wait::new();
        let result = 'all: loop {
            let bell = self.bell().load(Ordering::SeqCst);
            let mut moved = false;
            let mut blocker = None;
            for j in (0..n).filter(|&j| j != me) {
                while copied[j] < steps(j) {
                    if !reached(
                        self.progress(j, Stage::Folded).load(Ordering::Acquire),
                        number(copied[j]),
                    ) {
                        blocker.get_or_insert(j);
                        break;
                    }
                    let r = step(j, copied[j]);
                    if let Err(e) =
                        self.copy_from(j, r.start * es, &mut buf[r.start * es..r.end * es], last)
                    {
                        break 'all Err(e);
                    }
                    copied[j] += 1;
                    moved = true;
                }
            }
            if folded < steps(me) {
                let r = step(me, folded);
                let out = &mut buf[r.start * es..r.end * es];
                if let Err(e) = self.fold(out, r.start * es, dtype, op, &mut scratch, last) {
                    break Err(e);
                }
                self.publish(Stage::Folded, number(folded));
                folded += 1;
                moved = true;
            }
            if folded == steps(me) && (0..n).all(|j| copied[j] == steps(j)) {
                break Ok(());
            }
            if moved {
                wait = Wait::new();
            } else if let Err(e) = self.idle(bell, &mut wait, blocker, last) {
                break Err(e);
            }
        };
        self.scratch = scratch;
        result?;
        self.publish(Stage::Done, last);
        self.until_read(last)
    }

    /// Every other rank reads this rank's segment: its buffer stays the all-reduce's until they
    /// all said they copied it out (their `Done` words at `last`).
    fn until_read(&self, last: u32) -> Result<()> {
        let mut wait = Wait::new();
        loop {
            let bell = self.bell().load(Ordering::SeqCst);
            // After this rank's reads: a rank that took its `Done` back (below) before this
            // load may have changed its buffer since, so this rank waits for why.
            std::sync::atomic::fence(Ordering::SeqCst);
            let Some(j) = self.behind(Stage::Done, last) else {
                return Ok(());
            };
            if let Err(e) = self.idle(bell, &mut wait, Some(j), last) {
                // Leaving (a signal, the deadline, another rank's failure) while others may
                // still read this rank's segment: its buffer goes back to the caller, who may
                // reuse it, so the others must not return what they read from it from now on.
                self.progress(self.me, Stage::Done)
                    .store(last.wrapping_sub(1), Ordering::SeqCst);
                std::sync::atomic::fence(Ordering::SeqCst);
                return Err(e);
            }
        }
    }

    /// Reduces this rank's elements `out` (at byte `off` of the buffer) with every other rank's,
    /// read from their buffers in the ring's order (this rank's segment: its own values first).
    fn fold(
        &self,
        out: &mut [u8],
        off: usize,
        dtype: DType,
        op: ReduceOp,
        scratch: &mut [u8],
        last: u32,
    ) -> Result<()> {
        let n = self.n();
        let mut at = 0;
        while at < out.len() {
            let b = (out.len() - at).min(FETCH);
            let acc = &mut out[at..at + b];
            for j in 1..n {
                let i = (self.me + j) % n;
                let theirs = &mut scratch[..b];
                self.copy_from(i, off + at, theirs, last)?;
                combine_rev(dtype, op, acc, theirs);
            }
            if op == ReduceOp::Avg {
                divide(dtype, acc, n);
            }
            at += b;
        }
        Ok(())
    }

    /// Copies bytes `off..off + dst.len()` of local rank `j`'s buffer into `dst` (`last`: the
    /// all-reduce's last progress number).
    fn copy_from(&self, j: usize, off: usize, dst: &mut [u8], last: u32) -> Result<()> {
        #[cfg(test)]
        BEFORE_READ.with(|h| {
            if let Some(f) = h.borrow_mut().as_mut() {
                f(self, j)
            }
        });
        let at = self
            .line_u64(j, BUF_AT)
            .load(Ordering::Acquire)
            .wrapping_add(off as u64);
        self.read_from(j, at, dst)
            .map_err(|e| self.unreadable(j, e, last))
    }

    /// The error of a read of local rank `j`'s buffer that failed with `e`.
    fn unreadable(&self, j: usize, e: io::Error, last: u32) -> Error {
        // A rank that failed or saw another killed said so first: its reason, not the rank
        // that exited after reading it.
        if let Some(why) = self.aborted(Kind::AllReduce) {
            return why;
        }
        let rank = self.ranks[j];
        match e.raw_os_error() {
            Some(libc::ESRCH) => {
                // Its process is gone: the others name it, as its closed socket would.
                self.abort(KILLED, rank);
                self.peer(
                    rank,
                    "exited or was killed (its process is gone)".into(),
                    Kind::AllReduce,
                )
            }
            Some(libc::EFAULT) => {
                // Its buffer is no longer mapped: it returned from this all-reduce (a signal,
                // a failure), and says why as it leaves (the abort word, its socket), or the
                // deadline names it.
                let mut wait = Wait::new();
                loop {
                    let bell = self.bell().load(Ordering::SeqCst);
                    if let Err(why) = self.idle(bell, &mut wait, Some(j), last) {
                        return why;
                    }
                }
            }
            _ => {
                self.abandon();
                self.peer(
                    rank,
                    format!(
                        "could not be read directly by rank {} any more ({e}): a sandbox \
                         (seccomp) or a change of credentials since the ranks found they \
                         could? (--transport tcp does without)",
                        self.ranks[self.me]
                    ),
                    Kind::AllReduce,
                )
            }
        }
    }

    /// Whether all-reduces read the others directly (`None`: not found out yet).
    #[cfg(test)]
    pub(crate) fn direct(&self) -> Option<bool> {
        self.direct
    }

    /// Makes this rank's token read back wrong, as from a process in another PID namespace.
    #[cfg(test)]
    pub(crate) fn spoil_token(&self) {
        self.line_u64(self.me, TOKEN)
            .store(*self.token ^ 1, Ordering::Relaxed);
    }

    /// Sets whether all-reduces read the others directly (`None`: probe at the next one).
    #[cfg(test)]
    pub(crate) fn set_direct(&mut self, direct: Option<bool>) {
        self.direct = direct;
    }

    /// Local rank `j`'s `Folded` and `Done` progress words.
    #[cfg(test)]
    pub(crate) fn folded_and_done(&self, j: usize) -> (u32, u32) {
        let word = |s: Stage| self.progress(j, s).load(Ordering::SeqCst);
        (word(Stage::Folded), word(Stage::Done))
    }

    /// Says in the segment that global rank `rank` was killed, as a rank that saw it go does.
    #[cfg(test)]
    pub(crate) fn say_killed(&self, rank: usize) {
        self.abort(KILLED, rank);
    }

    /// Makes local rank `j`'s process id (as the others read it) `pid`.
    #[cfg(test)]
    pub(crate) fn set_pid_of(&self, j: usize, pid: u32) {
        self.line_u32(j, PID).store(pid, Ordering::SeqCst);
    }

    /// Runs `f(group, j)` on this thread before each of its reads of local rank `j`'s buffer.
    #[cfg(test)]
    pub(crate) fn before_each_read(&self, f: impl FnMut(&Group, usize) + 'static) {
        BEFORE_READ.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    /// Makes local rank `j`'s buffer (as the others read it) start at `at`.
    #[cfg(test)]
    pub(crate) fn set_buffer_of(&self, j: usize, at: u64) {
        self.line_u64(j, BUF_AT).store(at, Ordering::SeqCst);
    }
}

/// Hooks for tests: `f(group, j)` runs on this thread before each read of local rank `j`'s buffer.
#[cfg(test)]
type BeforeRead = Box<dyn FnMut(&Group, usize)>;

#[cfg(test)]
thread_local! {
    static BEFORE_READ: std::cell::RefCell<Option<BeforeRead>> =
        const { std::cell::RefCell::new(None) };
}
