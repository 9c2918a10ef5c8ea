//! The all-reduce of a buffer of several chunks, pipelined: no barrier per chunk, but three
//! progress words per rank (the last chunk it copied in, folded, copied out), each stage
//! waiting only for what it reads.
//!
//! A rank works on whatever is ready, in this order: copies out the chunks every rank has
//! folded (others' parts from their slots into its buffer; the slots of that chunk are then
//! free for it), folds its own part of the chunks every rank has copied in (from every slot,
//! in the ring's order, into its buffer and its slot), and copies in one more chunk when its
//! set is free. A chunk's set is written again once every rank has copied out the chunk
//! [`SETS`] − 1 before it, so a rank runs up to [`SETS`] − 1 chunks ahead of the slowest:
//! a rank that the scheduler takes off its core for a while (more ranks than cores, other jobs)
//! finds several chunks ready when it comes back instead of stalling the others at every
//! chunk, and the set after the last chunk is unread when the collective returns (the next
//! collective writes it before its first barrier).
//!
//! Words are global chunk numbers (`phase`, wrapping u32, compared as barrier counters are);
//! a rank publishes one with a store and rings the segment's bell (a futex word that every
//! waiter sleeps on).

use super::wait::{futex_wait, futex_wake, reached};
use super::*;

/// A rank's progress words, at these offsets in its line.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stage {
    /// The last chunk it copied into its slot.
    Copied = 8,
    /// The last chunk whose own part it folded into its slot.
    Folded = 12,
    /// The last chunk it copied out (done with every slot of it).
    Done = 16,
}

impl Group {
    pub(super) fn progress(&self, i: usize, stage: Stage) -> &AtomicU32 {
        // SAFETY: rank i's line (i < n), 4-byte aligned, before the headers at 64.
        unsafe { &*(self.map.ptr.add(LINE * (i + 1) + stage as usize) as *const AtomicU32) }
    }

    /// Rung at every publish; waiters of the pipeline sleep on it.
    pub(super) fn bell(&self) -> &AtomicU32 {
        // SAFETY: line 0, after the abort word (0) and the sleepers (8).
        unsafe { &*(self.map.ptr.add(16) as *const AtomicU32) }
    }

    fn publish(&self, stage: Stage, chunk: u32) {
        self.progress(self.me, stage)
            .store(chunk, Ordering::Release);
        self.bell().fetch_add(1, Ordering::SeqCst);
        if self.sleepers().load(Ordering::SeqCst) > 0 {
            futex_wake(self.bell());
        }
    }

    /// The first rank whose `stage` has not reached `chunk`, if any.
    fn behind(&self, stage: Stage, chunk: u32) -> Option<usize> {
        (0..self.n()).find(|&j| !reached(self.progress(j, stage).load(Ordering::Acquire), chunk))
    }

    /// Chunks `base..base + chunks` of an all-reduce announced by every rank (see the module's
    /// overview); returns when this rank has copied out the last.
    pub(super) fn pipelined(
        &mut self,
        buf: &mut [u8],
        base: u64,
        chunks: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (es, n) = (dtype.size(), self.n());
        let count = buf.len() / es;
        let per = SLOT / es;
        let range = |c: usize| c * per..((c + 1) * per).min(count);
        let part = |c: usize, i: usize| {
            let r = range(c);
            r.start + r.len() * i / n..r.start + r.len() * (i + 1) / n
        };
        let number = |c: usize| (base + c as u64) as u32;
        let set = |c: usize| base + c as u64;
        let (mut copied, mut folded, mut done) = (0usize, 0usize, 0usize);
        let mut since = Instant::now();
        let mut last_check = since;
        let mut tries = 0u32;
        let last = number(chunks - 1);
        while done < chunks {
            let bell = self.bell().load(Ordering::SeqCst);
            let mut moved = false;
            let mut blocker = None;
            while done < folded {
                match self.behind(Stage::Folded, number(done)) {
                    Some(j) => {
                        blocker.get_or_insert(j);
                        break;
                    }
                    None => {
                        self.copy_out(buf, set(done), range(done).start, |j| part(done, j), es);
                        self.publish(Stage::Done, number(done));
                        done += 1;
                        moved = true;
                    }
                }
            }
            while folded < copied {
                match self.behind(Stage::Copied, number(folded)) {
                    Some(j) => {
                        blocker.get_or_insert(j);
                        break;
                    }
                    None => {
                        let own = part(folded, self.me);
                        self.reduce_range(set(folded), own, count, dtype, op, buf, true);
                        self.publish(Stage::Folded, number(folded));
                        folded += 1;
                        moved = true;
                    }
                }
            }
            if copied < chunks {
                // The chunk SETS − 1 before this one copied out by everyone: its set, and the
                // one after it, are read by nobody.
                let free = match copied.checked_sub(SETS - 1) {
                    Some(c) => self.behind(Stage::Done, number(c)),
                    None => None,
                };
                match free {
                    Some(j) => {
                        blocker.get_or_insert(j);
                    }
                    None => {
                        self.copy_in(buf, set(copied), range(copied), es);
                        self.publish(Stage::Copied, number(copied));
                        copied += 1;
                        moved = true;
                    }
                }
            }
            if moved {
                since = Instant::now();
                tries = 0;
                continue;
            }
            if let Some(e) = self.aborted(Kind::AllReduce) {
                return Err(e);
            }
            tries = tries.saturating_add(1);
            if tries <= SPINS {
                std::hint::spin_loop();
            } else if tries <= YIELDS {
                std::thread::yield_now();
            } else {
                self.sleepers().fetch_add(1, Ordering::SeqCst);
                if self.bell().load(Ordering::SeqCst) == bell
                    && self.abort_word().load(Ordering::SeqCst) == 0
                {
                    futex_wait(self.bell(), bell, Duration::from_millis(2));
                }
                self.sleepers().fetch_sub(1, Ordering::SeqCst);
            }
            if last_check.elapsed() >= CHECK_EVERY {
                last_check = Instant::now();
                let waiting_for = blocker.unwrap_or(0);
                // A rank that copied out the last chunk has done its part and may be gone.
                let did_part = |at: usize| {
                    reached(self.progress(at, Stage::Done).load(Ordering::SeqCst), last)
                };
                if let Err(e) = self.check(waiting_for, &did_part, since, Kind::AllReduce) {
                    if !matches!(e, Error::Interrupted(_)) {
                        self.abandon();
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Copies every other rank's part `part(j)` of a chunk (starting at element `start`) from
    /// its slot of `set` into `buf`.
    fn copy_out(
        &self,
        buf: &mut [u8],
        set: u64,
        start: usize,
        part: impl Fn(usize) -> Range<usize>,
        es: usize,
    ) {
        for j in (0..self.n()).filter(|&j| j != self.me) {
            let p = part(j);
            // SAFETY: rank j published its fold of this chunk (part j of its slot) before this
            // rank saw its word, and writes that slot again only after this rank publishes that
            // it copied the chunk out.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.slot(set, j).add((p.start - start) * es),
                    buf[p.start * es..].as_mut_ptr(),
                    p.len() * es,
                );
            }
        }
    }
}
