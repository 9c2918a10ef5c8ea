//! The hierarchical transport: one segment per host, a TCP ring between the hosts' leaders.

use super::reduce::ring_segment;
use super::*;

/// The hierarchical transport's share of a group: the ranks of each host are consecutive (host
/// g holds ranks `bounds[g]..bounds[g + 1]`), and the lowest rank of each host (its leader) is
/// on a TCP ring with the other hosts' leaders, host g's sending to host g + 1's.
///
/// All-reduce keeps the ring's order of sums ([`crate::ring`]): segment k of the buffer is
/// folded over ranks k, k+1, … k−1. The ranks of one host are consecutive in that order, so the
/// leader folds them from their slots, and the running partial crosses to the next host's
/// leader over TCP only where the fold passes to the next host: host h's leader starts the
/// segments of its ranks (k over k..its last rank) and sends them on; each leader folds every
/// rank of its host into the partials it receives and sends them on; after going round, a
/// segment comes back to its host's leader, which folds the host's ranks before k. Then the
/// leaders all-gather the hosts' segments and each host's ranks copy the result from their
/// leader's slot. A buffer goes through in chunks of one slot, each chunk a piece of every
/// host's segments in proportion, so that every link carries data at every step.
#[derive(Debug)]
pub(crate) struct Cross {
    pub(super) bounds: Vec<usize>,
    /// This rank's host.
    pub(super) host: usize,
    /// The leaders' ring: the leader's only.
    pub(super) ring: Option<Ring>,
}

impl Cross {
    pub(super) fn hosts(&self) -> usize {
        self.bounds.len() - 1
    }

    pub(super) fn world(&self) -> usize {
        self.bounds[self.hosts()]
    }

    pub(super) fn host_of(&self, rank: usize) -> usize {
        self.bounds.partition_point(|&b| b <= rank) - 1
    }
}

/// The most hosts the hierarchical transport takes (a chunk holds a piece of each host's).
pub(super) const MAX_HOSTS: usize = 4096;

/// The first rank of each host, then the world size, when each host's ranks are consecutive
/// (`of`: every rank's host, numbered in order of first appearance); `None` when interleaved.
pub(super) fn consecutive(of: &[usize]) -> Option<Vec<usize>> {
    let mut bounds = vec![0];
    for r in 1..of.len() {
        if of[r] != of[r - 1] {
            if of[r] != of[r - 1] + 1 {
                return None;
            }
            bounds.push(r);
        }
    }
    bounds.push(of.len());
    Some(bounds)
}

/// Where chunk `c` of `chunks` of a hierarchical all-reduce of `count` elements lies: one piece
/// of each host's elements (its ranks' ring segments), in proportion to them, as (elements of the
/// buffer, their offset in a slot in elements), hosts in order.
pub(super) fn pieces(
    bounds: &[usize],
    count: usize,
    c: usize,
    chunks: usize,
) -> Vec<(Range<usize>, usize)> {
    let world = bounds[bounds.len() - 1] as u128;
    let lo = |k: usize| (count as u128 * k as u128 / world) as usize;
    let mut off = 0;
    bounds
        .windows(2)
        .map(|w| {
            let (a, len) = (lo(w[0]), (lo(w[1]) - lo(w[0])) as u128);
            let start = a + (len * c as u128 / chunks as u128) as usize;
            let end = a + (len * (c as u128 + 1) / chunks as u128) as usize;
            let piece = (start..end, off);
            off += end - start;
            piece
        })
        .collect()
}

/// The hierarchical transport ([`Cross`]).
impl Group {
    /// Whether collectives cross hosts (the hierarchical transport).
    pub fn is_cross(&self) -> bool {
        self.cross.is_some()
    }

    /// Runs `f` with the group's [`Cross`] lent out (so that `f` borrows the group mutably
    /// too); a leader's failure on the leaders' ring ends the host's collective for its ranks
    /// at once (they would otherwise wait for it until the deadline).
    pub(super) fn with_cross(
        &mut self,
        f: impl FnOnce(&mut Group, &mut Cross) -> Result<()>,
    ) -> Result<()> {
        let mut cross = self.cross.take().expect("a group across hosts");
        let r = f(self, &mut cross);
        self.cross = Some(cross);
        match &r {
            Err(Error::Interrupted(_)) | Ok(()) => {}
            // A rank of another host lost: the host's ranks name it, not their leader (whose
            // exit they would otherwise report, the store that holds its notes gone with it).
            Err(Error::Peer { rank, .. }) if *rank != self.ranks[self.me] => {
                self.abort(LOST, *rank)
            }
            Err(_) => self.abandon(),
        }
        r
    }

    /// Element range `at..at + b` of local rank `j`'s slot of `set`, as bytes.
    pub(super) fn slot_elems(&self, set: u64, j: usize, at: usize, b: usize, es: usize) -> &[u8] {
        // SAFETY: inside rank j's slot (chunks never exceed a slot); the protocol orders its
        // writes (before a barrier) and these reads (after it, before the next but one).
        unsafe { std::slice::from_raw_parts(self.slot(set, j).add(at * es), b * es) }
    }

    /// Copies `pieces` of `buf` into this rank's slot of `set`, each at its offset.
    pub(super) fn pieces_in(
        &self,
        buf: &[u8],
        set: u64,
        pieces: &[(Range<usize>, usize)],
        es: usize,
    ) {
        for (r, off) in pieces {
            // SAFETY: this rank's own slot of this set, which nobody reads before the next
            // barrier, and whose last readers passed the barrier this rank passed last.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    buf[r.start * es..].as_ptr(),
                    self.slot(set, self.me).add(off * es),
                    r.len() * es,
                )
            };
        }
    }

    /// Copies `pieces` from the leader's slot of `set` into `buf`.
    pub(super) fn pieces_out(
        &self,
        buf: &mut [u8],
        set: u64,
        pieces: &[(Range<usize>, usize)],
        es: usize,
    ) {
        for (r, off) in pieces {
            let src = self.slot_elems(set, 0, *off, r.len(), es);
            buf[r.start * es..r.end * es].copy_from_slice(src);
        }
    }

    /// Folds elements `r` of this host's ring segments (at `off` in the slots of `set`; the
    /// host's first rank is global rank `first`). `head` false: each segment k starts at rank
    /// k's value and takes in the host's later ranks, into `buf`; true: `buf` holds segment k's
    /// fold over every other host, which takes in the host's ranks before k.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn fold_segments(
        &self,
        set: u64,
        (r, off): &(Range<usize>, usize),
        (count, world, first): (usize, usize, usize),
        dtype: DType,
        op: ReduceOp,
        buf: &mut [u8],
        head: bool,
    ) {
        let es = dtype.size();
        let mut e = r.start;
        while e < r.end {
            let k = ring_segment(count, world, e);
            let seg_end = ((count as u128 * (k as u128 + 1)) / world as u128) as usize;
            let end = r.end.min(seg_end);
            let ki = k - first;
            while e < end {
                let b = (end - e).min(BLOCK / es);
                let at = off + e - r.start;
                let out = &mut buf[e * es..(e + b) * es];
                let js = if head {
                    0..ki
                } else {
                    out.copy_from_slice(self.slot_elems(set, ki, at, b, es));
                    ki + 1..self.n()
                };
                for j in js {
                    combine_rev(dtype, op, out, self.slot_elems(set, j, at, b, es));
                }
                e += b;
            }
        }
    }

    /// The leader's share of one chunk of a hierarchical all-reduce (every local rank's copy of
    /// the chunk's `pieces` is in its slot of `set`): the fold across hosts, the leaders'
    /// all-gather, and the result into `buf` and this rank's slot for the others.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn lead_all_reduce(
        &mut self,
        cross: &mut Cross,
        buf: &mut [u8],
        set: u64,
        pieces: &[(Range<usize>, usize)],
        count: usize,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (es, hosts, host, world) = (dtype.size(), cross.hosts(), cross.host, cross.world());
        let first = cross.bounds[host];
        let ring = cross.ring.as_mut().expect("a leader on the leaders' ring");
        let bytes = |g: usize| pieces[g].0.start * es..pieces[g].0.end * es;
        let shape = (count, world, first);
        // This host's segments, each from its own rank to the host's last.
        self.fold_segments(set, &pieces[host], shape, dtype, op, buf, false);
        for s in 0..hosts - 1 {
            let (sent, got) = ((host + hosts - s) % hosts, (host + hosts - s - 1) % hosts);
            let (send, recv) = crate::ring::split(buf, bytes(sent), bytes(got));
            // `recv` holds this rank's own values there: op(own, partial) is its ring step.
            ring.exchange_into(send, recv, Some((dtype, op)), Kind::AllReduce)?;
            let (r, off) = &pieces[got];
            let mut e = 0;
            while e < r.len() {
                let b = (r.len() - e).min(BLOCK / es);
                let out = &mut buf[(r.start + e) * es..(r.start + e + b) * es];
                for j in 1..self.n() {
                    combine_rev(dtype, op, out, self.slot_elems(set, j, off + e, b, es));
                }
                e += b;
            }
        }
        // The next host's segments go home; this host's come back, to take in its ranks before
        // each segment's own.
        let next = (host + 1) % hosts;
        let (send, recv) = crate::ring::split(buf, bytes(next), bytes(host));
        ring.exchange_into(send, recv, None, Kind::AllReduce)?;
        self.fold_segments(set, &pieces[host], shape, dtype, op, buf, true);
        if op == ReduceOp::Avg {
            divide(dtype, &mut buf[bytes(host)], world);
        }
        ring.gather_phase(buf, |i| bytes(i % hosts), host, Kind::AllReduce)?;
        self.pieces_in(buf, set, pieces, es);
        Ok(())
    }

    pub(super) fn cross_all_reduce(
        &mut self,
        cross: &mut Cross,
        buf: &mut [u8],
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let es = dtype.size();
        let count = buf.len() / es;
        self.seq += 1;
        let call = Call::all_reduce(op, dtype, count as u64);
        // A chunk's pieces add up to at most one slot (each is at most its share + 1).
        let chunks = count.div_ceil(SLOT / es - cross.hosts()).max(1);
        let bounds = cross.bounds.clone();
        let layout = |c: usize| pieces(&bounds, count, c, chunks);
        let base = self.take_sets(chunks);
        let set = |c: usize| base + c as u64;
        let leader = self.me == 0;
        // Chunk c is copied in before barrier c, folded and gathered by the leader between
        // barriers c and c + 1, and copied out after barrier c + 1: a set is written again three
        // chunks on, after everyone passed the barrier that follows its last reads.
        let mut next = layout(0);
        self.pieces_in(buf, set(0), &next, es);
        self.announce(call)?;
        if leader {
            cross.ring.as_mut().expect("leader").announce(call)?;
        }
        let mut done: Option<Vec<(Range<usize>, usize)>> = None;
        for c in 0..chunks {
            let now = std::mem::take(&mut next);
            if leader {
                self.lead_all_reduce(cross, buf, set(c), &now, count, dtype, op)?;
            }
            if c + 1 < chunks {
                next = layout(c + 1);
                self.pieces_in(buf, set(c + 1), &next, es);
            }
            if let (false, Some(p)) = (leader, done.take()) {
                self.pieces_out(buf, set(c - 1), &p, es);
            }
            done = Some(now);
            self.barrier_wait(Kind::AllReduce)?;
        }
        if let (false, Some(p)) = (leader, done) {
            self.pieces_out(buf, set(chunks - 1), &p, es);
        }
        Ok(())
    }

    pub(super) fn cross_broadcast(
        &mut self,
        cross: &mut Cross,
        buf: &mut [u8],
        dtype: DType,
        root: usize,
    ) -> Result<()> {
        self.seq += 1;
        let call = Call::broadcast(dtype, root, (buf.len() / dtype.size()) as u64);
        let root_host = cross.host_of(root);
        // The root's place in this host's group, when it is on this host.
        let root_here = (root_host == cross.host).then(|| root - cross.bounds[cross.host]);
        let (leader, is_root) = (self.me == 0, root_here == Some(self.me));
        let len = buf.len();
        let chunks = len.div_ceil(SLOT).max(1);
        let range = |c: usize| c * SLOT..((c + 1) * SLOT).min(len);
        let base = self.take_sets(chunks);
        let set = |c: usize| base + c as u64;
        let copy_in = |g: &Group, buf: &[u8], c: usize| {
            let r = range(c);
            // SAFETY: this rank's own slot of the set, as in `pieces_in`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    buf[r.clone()].as_ptr(),
                    g.slot(set(c), g.me),
                    r.len(),
                )
            };
        };
        if is_root {
            copy_in(self, buf, 0);
        }
        self.announce(call)?;
        if leader {
            cross.ring.as_mut().expect("leader").announce(call)?;
        }
        for c in 0..chunks {
            let r = range(c);
            if leader {
                if let Some(at) = root_here.filter(|&at| at != 0) {
                    buf[r.clone()].copy_from_slice(self.slot_elems(set(c), at, 0, r.len(), 1));
                }
                let ring = cross.ring.as_mut().expect("leader");
                ring.relay_from(&mut buf[r.clone()], root_host)?;
                if !is_root {
                    copy_in(self, buf, c);
                }
            }
            if is_root && c + 1 < chunks {
                copy_in(self, buf, c + 1);
            }
            if !leader && !is_root && c > 0 {
                let p = range(c - 1);
                let src = self.slot_elems(set(c - 1), 0, 0, p.len(), 1);
                buf[p].copy_from_slice(src);
            }
            self.barrier_wait(Kind::Broadcast)?;
        }
        if !leader && !is_root {
            let p = range(chunks - 1);
            let src = self.slot_elems(set(chunks - 1), 0, 0, p.len(), 1);
            buf[p].copy_from_slice(src);
        }
        Ok(())
    }

    /// The host's ranks meet, the leaders meet over their ring, then the host's ranks again.
    pub(super) fn cross_barrier(&mut self, cross: &mut Cross) -> Result<()> {
        self.seq += 1;
        self.announce(Call::barrier(self.n() as u64))?;
        if let Some(ring) = cross.ring.as_mut() {
            ring.barrier()?;
        }
        self.barrier_wait(Kind::Barrier)
    }
}
