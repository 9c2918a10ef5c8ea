//! The in-host collectives: all-reduce in the ring's order of sums, broadcast, barrier.

use super::*;
use crate::ring::segment;

impl Group {
    pub(super) fn next_set(&mut self) -> u64 {
        self.take_sets(1)
    }

    /// The sets of the next `chunks` chunks (the sets after the last one used): the first's
    /// number, the others following it.
    pub(super) fn take_sets(&mut self, chunks: usize) -> u64 {
        let first = self.phase + 1;
        self.phase += chunks as u64;
        first
    }

    /// In-place all-reduce of `buf` (whole elements of `dtype`), in the ring's order of sums.
    pub fn all_reduce(&mut self, buf: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        if self.cross.is_some() {
            return self.with_cross(|g, cross| g.cross_all_reduce(cross, buf, dtype, op));
        }
        let es = dtype.size();
        let count = buf.len() / es;
        self.seq += 1;
        let call = Call::all_reduce(op, dtype, count as u64);
        let per = SLOT / es;
        let chunks = count.div_ceil(per).max(1);
        let range = |c: usize| c * per..((c + 1) * per).min(count);
        let base = self.take_sets(chunks);
        let set = |c: usize| base + c as u64;
        if buf.len() <= WHOLE {
            // Small: every rank reduces the whole buffer from the slots (the same sums in the
            // same order on every rank), one barrier in all. The set written before the
            // announcement is free: a large all-reduce leaves the set after its last one unread
            // (see `pipelined`).
            self.copy_in(buf, set(0), range(0), 0, es);
            self.announce(call)?;
            self.reduce_range(set(0), 0..count, count, dtype, op, buf, false);
            return Ok(());
        }
        let place = self.say_place(buf);
        self.announce(call)?;
        if self.all_in_place(place) {
            return self.all_reduce_in_place(buf, place, dtype, op);
        }
        self.pipelined(buf, base, chunks, dtype, op)
    }

    /// Copies elements `r` of `buf` into this rank's slot of `set`, at the slot's element
    /// `r.start - start` (`start`: the chunk's first element).
    pub(super) fn copy_in(
        &self,
        buf: &[u8],
        set: u64,
        r: std::ops::Range<usize>,
        start: usize,
        es: usize,
    ) {
        // SAFETY: this rank's slot of this set, in the mapping. Its last readers are done with
        // it: they passed the barrier that followed their reads, or (pipelined) their progress
        // words say so; nobody reads it again before this rank says it is written.
        unsafe {
            std::ptr::copy_nonoverlapping(
                buf[r.start * es..].as_ptr(),
                self.slot(set, self.me).add((r.start - start) * es),
                r.len() * es,
            )
        };
    }

    /// Reduces elements `r` of the buffer (of `count`, in the chunk held by `set`, whose first
    /// element is `r.start` rounded down to a chunk) from every other slot and this rank's values
    /// in `buf`, into `buf`. When `publish` (this rank's own part of a pipelined chunk, which it
    /// did not copy into its slot), the result goes into its slot too, for the others.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce_range(
        &mut self,
        set: u64,
        r: std::ops::Range<usize>,
        count: usize,
        dtype: DType,
        op: ReduceOp,
        buf: &mut [u8],
        publish: bool,
    ) {
        let (es, n) = (dtype.size(), self.n());
        let chunk_start = r.start - r.start % (SLOT / es);
        let mut partial = std::mem::take(&mut self.scratch);
        partial.resize(BLOCK, 0);
        // Split where the ring's segments (of the whole buffer) change.
        let mut e = r.start;
        while e < r.end {
            let k = ring_segment(count, n, e);
            let end = r.end.min(segment(count, n, k, 1).end);
            while e < end {
                let b = (end - e).min(BLOCK / es);
                let out = &mut buf[e * es..(e + b) * es];
                let at = e - chunk_start;
                self.reduce_block(set, k, at, (dtype, op), out, &mut partial[..b * es]);
                if publish {
                    // SAFETY: this rank's own part of its own slot, which nobody reads before
                    // this rank publishes its fold.
                    let mine = unsafe {
                        std::slice::from_raw_parts_mut(self.slot(set, self.me).add(at * es), b * es)
                    };
                    mine.copy_from_slice(out);
                }
                e += b;
            }
        }
        self.scratch = partial;
    }

    /// Reduces elements `at..at + b` of this chunk (ring segment `k`) in place in `out`, which
    /// holds this rank's values, with every other rank's from its slot, in the ring's order
    /// (ranks k, k+1, … k−1; see the module's overview). The ranks before this one in that order
    /// are folded first, in `partial` (`b` elements) unless only one, read from its slot.
    pub(super) fn reduce_block(
        &self,
        set: u64,
        k: usize,
        at: usize,
        (dtype, op): (DType, ReduceOp),
        out: &mut [u8],
        partial: &mut [u8],
    ) {
        let (es, n, me, bytes) = (dtype.size(), self.n(), self.me, out.len());
        let slot = |i: usize| -> &[u8] {
            // SAFETY: elements at..at+b of rank i's slot, written before its progress word (or
            // the last barrier) said so, and not written again before this rank says it is done
            // with them.
            unsafe { std::slice::from_raw_parts(self.slot(set, i).add(at * es), bytes) }
        };
        // This rank's place in the order: ranks k … k+p−1 come before it.
        let p = (me + n - k) % n;
        if p > 0 {
            let before: &[u8] = if p == 1 {
                slot(k)
            } else {
                partial.copy_from_slice(slot(k));
                for j in 1..p {
                    combine_rev(dtype, op, partial, slot((k + j) % n));
                }
                partial
            };
            // op(own, partial), as the chain's step at this rank: combine_rev(partial, own).
            combine(dtype, op, out, before);
        }
        for j in p + 1..n {
            combine_rev(dtype, op, out, slot((k + j) % n));
        }
        if op == ReduceOp::Avg {
            divide(dtype, out, n);
        }
    }

    /// Copies `root`'s (global rank) `buf` into every rank's.
    pub fn broadcast(&mut self, buf: &mut [u8], dtype: DType, root: usize) -> Result<()> {
        if self.cross.is_some() {
            return self.with_cross(|g, cross| g.cross_broadcast(cross, buf, dtype, root));
        }
        let root_at = self
            .ranks
            .iter()
            .position(|&r| r == root)
            .expect("broadcast root in the group");
        self.seq += 1;
        let call = Call::broadcast(dtype, root, (buf.len() / dtype.size()) as u64);
        let chunks = buf.len().div_ceil(SLOT).max(1);
        for c in 0..chunks {
            let range = c * SLOT..((c + 1) * SLOT).min(buf.len());
            let set = self.next_set();
            let src = self.slot(set, root_at);
            if self.me == root_at {
                // SAFETY: the root's slot of this set, read by the others after the barrier
                // below and before they reach the next chunk's.
                unsafe {
                    std::ptr::copy_nonoverlapping(buf[range.clone()].as_ptr(), src, range.len())
                };
            }
            if c == 0 {
                self.announce(call)?;
            } else {
                self.barrier_wait(Kind::Broadcast)?;
            }
            if self.me != root_at {
                // SAFETY: written by the root before the barrier just passed.
                unsafe {
                    std::ptr::copy_nonoverlapping(src, buf[range.clone()].as_mut_ptr(), range.len())
                };
            }
        }
        Ok(())
    }

    /// Returns once every rank of the group (of the world, across hosts) has entered it.
    pub fn barrier(&mut self) -> Result<()> {
        if self.cross.is_some() {
            return self.with_cross(|g, cross| g.cross_barrier(cross));
        }
        self.seq += 1;
        self.announce(Call::barrier(self.n() as u64))
    }
}

/// The ring segment (of `n`) that element `e` of `count` falls in: the k with
/// ⌊count·k/n⌋ ≤ e < ⌊count·(k+1)/n⌋ ([`crate::ring`]'s `segment`).
pub(super) fn ring_segment(count: usize, n: usize, e: usize) -> usize {
    let bound = |k: usize| segment(count, n, k, 1).start;
    // The first guess is within one of the answer.
    let mut k = ((e as u128 * n as u128) / count as u128) as usize;
    while k + 1 < n && bound(k + 1) <= e {
        k += 1;
    }
    while k > 0 && bound(k) > e {
        k -= 1;
    }
    k
}
