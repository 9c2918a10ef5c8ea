//! Barriers and waits: spin, yield, then sleep on a futex; the abort word, the stop hook, the
//! deadline and the sockets checked every 50 ms.

use super::*;

impl Group {
    /// Marks the group dead for the others (first reason wins) and wakes them.
    pub(super) fn abort(&self, why: u64, rank: usize) {
        let _ = self.abort_word().compare_exchange(
            0,
            (why << 32) | (rank as u64 + 1),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        for i in 0..self.n() {
            futex_wake(self.counter(i));
        }
        futex_wake(self.bell());
    }

    /// This rank leaves: the others' waits end at once naming it.
    pub fn abandon(&self) {
        self.abort(LEFT, self.ranks[self.me]);
    }

    pub(super) fn peer(&self, rank: usize, what: String, kind: Kind) -> Error {
        Error::Peer {
            rank,
            what,
            during: format!("{} #{}", kind.name(), self.seq),
        }
    }

    pub(super) fn aborted(&self, kind: Kind) -> Option<Error> {
        let w = self.abort_word().load(Ordering::Acquire);
        if w == 0 {
            return None;
        }
        let rank = (w & 0xffff_ffff) as usize - 1;
        let what = match w >> 32 {
            KILLED => "exited or was killed (its connection to the host's shared memory closed)",
            LOST => "was lost on another host (this host's leader saw it fail)",
            _ => "left the collective (it failed or was stopped)",
        };
        Some(self.peer(rank, what.to_string(), kind))
    }

    /// Every 50 ms of a wait: the stop hook, the sockets, the deadline.
    /// `did_part(i)`: whether local rank i has done its part of what is waited for (reached
    /// the barrier, copied out the last chunk): a peer whose socket closed after that (the last
    /// collective before it exits) is not taken for dead.
    pub(super) fn check(
        &self,
        waiting_for: usize,
        did_part: &dyn Fn(usize) -> bool,
        since: Instant,
        kind: Kind,
    ) -> Result<()> {
        if (self.stop)() {
            return Err(Error::Interrupted(format!(
                "in {} #{}, waiting for rank {}",
                kind.name(),
                self.seq,
                self.ranks[waiting_for]
            )));
        }
        for (rank, s) in &self.links {
            let at = self.ranks.iter().position(|r| r == rank).unwrap_or(0);
            if hung_up(s) && !did_part(at) {
                // A rank that left after saying why (the abort word): its reason, not its exit.
                if let Some(e) = self.aborted(kind) {
                    return Err(e);
                }
                self.abort(KILLED, *rank);
                return Err(self.peer(
                    *rank,
                    "exited or was killed (its connection to the host's shared memory closed)"
                        .into(),
                    kind,
                ));
            }
        }
        if since.elapsed() >= self.timeout {
            let rank = self.ranks[waiting_for];
            return Err(self.peer(
                rank,
                format!(
                    "did not arrive for {:.0} s (hung, stopped, or still in an earlier step)",
                    self.timeout.as_secs_f64()
                ),
                kind,
            ));
        }
        Ok(())
    }

    /// Raises this rank's counter and waits until every other rank's has reached it.
    pub(super) fn barrier_wait(&mut self, kind: Kind) -> Result<()> {
        // Asked at every barrier, not only in a long wait: ranks in step never wait 50 ms, and
        // an interrupted one went on with every collective of a long loop.
        if (self.stop)() {
            return Err(Error::Interrupted(format!(
                "in {} #{}",
                kind.name(),
                self.seq
            )));
        }
        self.barriers = self.barriers.wrapping_add(1);
        let target = self.barriers;
        self.counter(self.me).store(target, Ordering::SeqCst);
        if self.sleepers().load(Ordering::SeqCst) > 0 {
            futex_wake(self.counter(self.me));
        }
        let since = Instant::now();
        let mut last_check = since;
        let mut tries = 0u32;
        for j in (0..self.n()).filter(|&j| j != self.me) {
            loop {
                let v = self.counter(j).load(Ordering::Acquire);
                if reached(v, target) {
                    break;
                }
                if let Some(e) = self.aborted(kind) {
                    return Err(e);
                }
                tries = tries.saturating_add(1);
                if tries <= self.spins {
                    std::hint::spin_loop();
                    continue;
                }
                if tries <= YIELDS {
                    std::thread::yield_now();
                } else {
                    self.sleepers().fetch_add(1, Ordering::SeqCst);
                    if self.counter(j).load(Ordering::SeqCst) == v
                        && self.abort_word().load(Ordering::SeqCst) == 0
                    {
                        futex_wait(self.counter(j), v, Duration::from_millis(2));
                    }
                    self.sleepers().fetch_sub(1, Ordering::SeqCst);
                }
                if last_check.elapsed() >= CHECK_EVERY {
                    last_check = Instant::now();
                    let did_part =
                        |at: usize| reached(self.counter(at).load(Ordering::SeqCst), target);
                    if let Err(e) = self.check(j, &did_part, since, kind) {
                        if !matches!(e, Error::Interrupted(_)) {
                            self.abandon();
                        }
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Announces `call` (header `seq`), after the caller's first copy-in; the first barrier;
    /// then checks every rank's header against this one's.
    pub(super) fn announce(&mut self, call: Call) -> Result<()> {
        let ours = call.encode(self.seq);
        // SAFETY: this rank's own header slot for this parity; the others read it only after
        // the barrier below, and the previous use of this parity was read before the previous
        // collective's barrier (so nobody reads it now).
        unsafe { self.header(self.me, self.seq).write_volatile(ours) };
        self.barrier_wait(call.kind)?;
        for j in (0..self.n()).filter(|&j| j != self.me) {
            // SAFETY: rank j wrote it before it reached the barrier just passed.
            let theirs = unsafe { self.header(j, self.seq).read_volatile() };
            if theirs != ours {
                self.abandon();
                let them = if Call::is_header(&theirs) {
                    Call::describe(&theirs)
                } else {
                    "bytes that are not a collective header".to_string()
                };
                return Err(Error::Mismatch(format!(
                    "rank {} called {them}, but rank {} called {}: every rank must make the same \
                     collective calls with the same sizes and types",
                    self.ranks[j],
                    self.ranks[self.me],
                    Call::describe(&ours)
                )));
            }
        }
        Ok(())
    }
}

/// Whether a barrier counter at `v` has reached barrier `target` (counters wrap).
pub(super) fn reached(v: u32, target: u32) -> bool {
    v.wrapping_sub(target) as i32 >= 0
}

/// Whether the peer closed its end (hung up, or readable with nothing to read: a message
/// waiting, such as a shared buffer's descriptor not yet received, is not a hang-up).
pub(super) fn hung_up(s: &UnixStream) -> bool {
    let mut fd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    if n <= 0 {
        return false;
    }
    if fd.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
        return true;
    }
    let mut byte = 0u8;
    // SAFETY: a one-byte buffer; MSG_PEEK leaves a waiting message where it is.
    let got = unsafe {
        libc::recv(
            s.as_raw_fd(),
            (&raw mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    fd.revents & libc::POLLIN != 0 && got == 0
}

pub(super) fn futex_wait(word: &AtomicU32, expected: u32, wait: Duration) {
    let ts = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a futex word in a shared mapping (hence not FUTEX_PRIVATE_FLAG) and a valid
    // relative timeout; a spurious or interrupted return is handled by the caller's loop.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0,
        )
    };
}

pub(super) fn futex_wake(word: &AtomicU32) {
    // SAFETY: a futex word in a shared mapping; wakes every waiter.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0,
        )
    };
}
