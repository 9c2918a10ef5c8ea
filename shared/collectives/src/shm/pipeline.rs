//! The all-reduce of a buffer of several chunks, pipelined: no barrier per chunk, but three
//! progress words per rank (the last chunk it copied in, folded, copied out), each stage
//! waiting only for what it reads.
//!
//! A rank works on whatever is ready, in this order: copies out the chunks every rank has
//! folded (others' parts from their slots into its buffer; the slots of that chunk are then
//! free for it), folds its own part of the chunks every rank has copied in (from every other
//! slot and its buffer, in the ring's order, into its buffer and its slot), and copies in one
//! more chunk (all of it but its own part) when its set is free. A chunk's set is written again
//! once every rank has copied out the chunk
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

/// An all-reduce's chunks: chunk c holds elements `range(c)` of the buffer, in the slots of set
/// `set(c)`, numbered `number(c)` in the progress words.
struct Job {
    base: u64,
    chunks: usize,
    count: usize,
    n: usize,
    dtype: DType,
    op: ReduceOp,
}

impl Job {
    fn range(&self, c: usize) -> Range<usize> {
        let per = SLOT / self.dtype.size();
        c * per..((c + 1) * per).min(self.count)
    }

    /// Rank i's part of chunk c (the elements it folds).
    fn part(&self, c: usize, i: usize) -> Range<usize> {
        let r = self.range(c);
        r.start + r.len() * i / self.n..r.start + r.len() * (i + 1) / self.n
    }

    fn set(&self, c: usize) -> u64 {
        self.base + c as u64
    }

    fn number(&self, c: usize) -> u32 {
        self.set(c) as u32
    }
}

/// This rank's progress through a job: the chunks it copied in, folded, copied out.
#[derive(Default)]
struct Cursors {
    copied: usize,
    folded: usize,
    done: usize,
}

/// A wait since the last step that moved.
struct Wait {
    since: Instant,
    last_check: Instant,
    tries: u32,
}

impl Wait {
    fn new() -> Wait {
        let now = Instant::now();
        Wait {
            since: now,
            last_check: now,
            tries: 0,
        }
    }
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
        let job = Job {
            base,
            chunks,
            count: buf.len() / dtype.size(),
            n: self.n(),
            dtype,
            op,
        };
        let mut at = Cursors::default();
        let mut wait = Wait::new();
        while at.done < chunks {
            let bell = self.bell().load(Ordering::SeqCst);
            let (moved, blocker) = self.advance(buf, &job, &mut at);
            if moved {
                wait = Wait::new();
            } else {
                self.idle(bell, &mut wait, blocker, job.number(chunks - 1))?;
            }
        }
        Ok(())
    }

    /// Does every step that is ready: copies out the chunks every rank has folded, folds the
    /// chunks every rank has copied in, and copies in one more chunk if its set is free.
    /// Returns whether anything moved, and the first rank a step waited for.
    fn advance(&mut self, buf: &mut [u8], job: &Job, at: &mut Cursors) -> (bool, Option<usize>) {
        let es = job.dtype.size();
        let (mut moved, mut blocker) = (false, None);
        while at.done < at.folded {
            if let Some(j) = self.behind(Stage::Folded, job.number(at.done)) {
                blocker.get_or_insert(j);
                break;
            }
            let c = at.done;
            self.copy_out(buf, job.set(c), job.range(c).start, |j| job.part(c, j), es);
            self.publish(Stage::Done, job.number(c));
            at.done += 1;
            moved = true;
        }
        while at.folded < at.copied {
            if let Some(j) = self.behind(Stage::Copied, job.number(at.folded)) {
                blocker.get_or_insert(j);
                break;
            }
            let c = at.folded;
            let own = job.part(c, self.me);
            self.reduce_range(job.set(c), own, job.count, job.dtype, job.op, buf, true);
            self.publish(Stage::Folded, job.number(c));
            at.folded += 1;
            moved = true;
        }
        if at.copied < job.chunks {
            // The chunk SETS − 1 before this one copied out by everyone: its set, and the one
            // after it, are read by nobody.
            let c = at.copied;
            let busy = c
                .checked_sub(SETS - 1)
                .and_then(|old| self.behind(Stage::Done, job.number(old)));
            match busy {
                Some(j) => {
                    blocker.get_or_insert(j);
                }
                None => {
                    // Every part but this rank's own, which its fold reads from `buf`.
                    let (all, own) = (job.range(c), job.part(c, self.me));
                    self.copy_in(buf, job.set(c), all.start..own.start, all.start, es);
                    self.copy_in(buf, job.set(c), own.end..all.end, all.start, es);
                    self.publish(Stage::Copied, job.number(c));
                    at.copied += 1;
                    moved = true;
                }
            }
        }
        (moved, blocker)
    }

    /// Nothing was ready: spins, yields, then sleeps on the bell (rung since `bell` was read:
    /// no sleep); every 50 ms checks the stop hook, the deadline and the sockets (`blocker`: the
    /// rank waited for; `last`: the collective's last chunk, which a rank that may leave has
    /// copied out).
    fn idle(&self, bell: u32, wait: &mut Wait, blocker: Option<usize>, last: u32) -> Result<()> {
        if let Some(e) = self.aborted(Kind::AllReduce) {
            return Err(e);
        }
        wait.tries = wait.tries.saturating_add(1);
        if wait.tries <= self.spins {
            std::hint::spin_loop();
        } else if wait.tries <= YIELDS {
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
        if wait.last_check.elapsed() < CHECK_EVERY {
            return Ok(());
        }
        wait.last_check = Instant::now();
        let did_part =
            |at: usize| reached(self.progress(at, Stage::Done).load(Ordering::SeqCst), last);
        let r = self.check(blocker.unwrap_or(0), &did_part, wait.since, Kind::AllReduce);
        if let Err(e) = &r
            && !matches!(e, Error::Interrupted(_))
        {
            self.abandon();
        }
        r
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
