//! The shared-memory transport: ranks on one host all-reduce, broadcast and meet at barriers
//! through one memory segment instead of loopback TCP.
//!
//! The segment is a `memfd` made by the lowest rank on the host (the leader) and passed to the
//! others over an abstract Unix socket (`SCM_RIGHTS`): no file is left in `/dev/shm` by a killed
//! run, and only a process of the same user that knows the run's secret gets it (the socket's
//! peer credentials are checked). Its size is sealed, so nobody can shrink it under a reader.
//!
//! Layout: a control block (an abort word, then one line per rank: its barrier counter and its
//! last two collective headers), then three sets of one slot per rank ([`SLOT`] bytes each). A
//! buffer goes through in chunks of one slot, chunk c in set c mod 3. All-reduce
//! (reduce-scatter + all-gather over memory) takes one barrier per chunk: between two barriers
//! a rank
//!
//! 1. copies the other ranks' parts of the previous chunk from their slots into its buffer;
//! 2. reduces its own part (1/n) of this chunk from every slot, into its buffer and its slot;
//! 3. copies the next chunk of its buffer into its slot of the next set.
//!
//! A set is written again three chunks later, after every rank has passed the barrier that
//! follows its last reads. A buffer of up to [`WHOLE`] bytes is reduced whole by every rank
//! after one barrier (latency rules there, not bandwidth).
//!
//! **The order of a sum is the TCP ring's** ([`crate::ring`]): element e of a buffer of `count`
//! elements belongs to ring segment k = the one with ⌊count·k/n⌋ ≤ e < ⌊count·(k+1)/n⌋, and its
//! reduction is op(x[k−1], … op(x[k+2], op(x[k+1], x[k]))) over the ranks k, k+1, … k−1 (mod
//! n). Both transports therefore give bit-identical results, for every dtype and op.
//!
//! Ranks on several hosts use one segment per host and a TCP ring between the hosts' leaders
//! (the lowest rank of each host), in the same order of sums: see [`Cross`].
//!
//! Waits spin briefly, then yield, then sleep on a futex of the awaited rank's counter (2 ms at
//! a time); every 50 ms a wait checks the stop hook, the deadline and the Unix sockets (each rank
//! holds one to the leader, which holds one to each): a rank that dies is seen by the leader as a
//! closed socket, which it writes to the abort word for the others; a leader that dies is seen by
//! everyone.

use std::io::{self, Read, Write};
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::reduce::{DType, ReduceOp, combine_rev, divide};
use crate::rendezvous::{InitMethod, Joined, Plan, Until};
use crate::ring::{Call, Kind, Ring};
use crate::store::Store;
use crate::{Error, Result};

/// Bytes of one rank's slot in each of the three sets: a chunk of a collective. Small enough that
/// a chunk's slots stay in cache between its copy-in and the others' reads (measured with
/// scripts/bench/all_reduce.py), large enough that barriers are few.
pub(crate) const SLOT: usize = 1 << 20;
/// The most ranks one segment serves.
pub(crate) const MAX_LOCAL: usize = 256;
const LINE: usize = 128;
/// Sets of slots: a chunk is copied in, reduced and copied out in three consecutive steps.
const SETS: usize = 3;
const PAGE: usize = 4096;
/// How often a wait checks the stop hook, the deadline and the sockets.
const CHECK_EVERY: Duration = Duration::from_millis(50);
/// Buffers up to this size are reduced whole by every rank (one barrier instead of two).
const WHOLE: usize = 256 << 10;
/// Bytes reduced per pass through the slots (fits L1 with the inputs streaming).
const BLOCK: usize = 16 << 10;
const SPINS: u32 = 200;
const YIELDS: u32 = 2000;

/// Which transport CPU collectives use between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Shared memory when every rank is on one host; over several hosts with two or more ranks
    /// on one, shared memory inside each host and TCP between hosts (`shm+tcp`); else the TCP
    /// ring.
    #[default]
    Auto,
    /// Shared memory inside each host, and TCP between hosts when there are several (`shm+tcp`,
    /// even with one rank per host).
    Shm,
    /// The TCP ring, even between ranks on one host.
    Tcp,
}

impl std::str::FromStr for Transport {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Transport::Auto),
            "shm" => Ok(Transport::Shm),
            "tcp" => Ok(Transport::Tcp),
            _ => Err(Error::Usage(format!(
                "unknown transport `{s}`: auto, shm or tcp"
            ))),
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Auto => "auto",
            Transport::Shm => "shm",
            Transport::Tcp => "tcp",
        })
    }
}

/// Why the abort word was set (its high half; the low half is the rank + 1).
const LEFT: u64 = 1;
const KILLED: u64 = 2;
/// A rank of another host, lost by this host's leader on the leaders' ring.
const LOST: u64 = 3;

/// A mapped segment.
#[derive(Debug)]
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn control_len(n: usize) -> usize {
    (LINE * (n + 1)).div_ceil(PAGE) * PAGE
}

fn segment_len(n: usize) -> usize {
    control_len(n) + SETS * n * SLOT
}

/// This rank's share of a host's segment.
#[derive(Debug)]
pub(crate) struct Group {
    /// This rank's index among `ranks`.
    me: usize,
    /// The global ranks of the group, ascending.
    ranks: Vec<usize>,
    map: Mapping,
    /// The leader's: one socket per other rank (`None` for itself); the others': the leader's.
    links: Vec<(usize, UnixStream)>,
    timeout: Duration,
    stop: fn() -> bool,
    seq: u64,
    /// Chunks moved so far (which set the next one uses).
    phase: u64,
    barriers: u32,
    /// Ranks on several hosts (the hierarchical transport): where the hosts' ranks start, and
    /// on the host's leader the leaders' ring.
    cross: Option<Cross>,
}

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
    bounds: Vec<usize>,
    /// This rank's host.
    host: usize,
    /// The leaders' ring: the leader's only.
    ring: Option<Ring>,
}

impl Cross {
    fn hosts(&self) -> usize {
        self.bounds.len() - 1
    }

    fn world(&self) -> usize {
        self.bounds[self.hosts()]
    }

    fn host_of(&self, rank: usize) -> usize {
        self.bounds.partition_point(|&b| b <= rank) - 1
    }
}

/// The most hosts the hierarchical transport takes (a chunk holds a piece of each host's).
const MAX_HOSTS: usize = 4096;

/// The first rank of each host, then the world size, when each host's ranks are consecutive
/// (`of`: every rank's host, numbered in order of first appearance); `None` when interleaved.
fn consecutive(of: &[usize]) -> Option<Vec<usize>> {
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
fn pieces(bounds: &[usize], count: usize, c: usize, chunks: usize) -> Vec<(Range<usize>, usize)> {
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

// SAFETY: the mapping is owned by the group (shared with other processes through the protocol,
// not with other threads of this one); the group moves between threads as a whole.
unsafe impl Send for Group {}

impl Group {
    fn n(&self) -> usize {
        self.ranks.len()
    }

    fn abort_word(&self) -> &AtomicU64 {
        // SAFETY: the control block's first line, 8-byte aligned in a page-aligned mapping.
        unsafe { &*(self.map.ptr as *const AtomicU64) }
    }

    fn sleepers(&self) -> &AtomicU32 {
        // SAFETY: as above, the next word of line 0.
        unsafe { &*(self.map.ptr.add(8) as *const AtomicU32) }
    }

    fn counter(&self, i: usize) -> &AtomicU32 {
        // SAFETY: rank i's line (i < n), 4-byte aligned.
        unsafe { &*(self.map.ptr.add(LINE * (i + 1)) as *const AtomicU32) }
    }

    fn header(&self, i: usize, seq: u64) -> *mut [u8; 32] {
        // SAFETY: rank i's line holds two headers at offsets 64 and 96.
        unsafe {
            self.map
                .ptr
                .add(LINE * (i + 1) + 64 + 32 * (seq % 2) as usize)
        }
        .cast()
    }

    fn slot(&self, set: u64, i: usize) -> *mut u8 {
        let off = control_len(self.n()) + ((set % SETS as u64) as usize * self.n() + i) * SLOT;
        // SAFETY: inside the mapping (segment_len).
        unsafe { self.map.ptr.add(off) }
    }

    /// Marks the group dead for the others (first reason wins) and wakes them.
    fn abort(&self, why: u64, rank: usize) {
        let _ = self.abort_word().compare_exchange(
            0,
            (why << 32) | (rank as u64 + 1),
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        for i in 0..self.n() {
            futex_wake(self.counter(i));
        }
    }

    /// This rank leaves: the others' waits end at once naming it.
    pub fn abandon(&self) {
        self.abort(LEFT, self.ranks[self.me]);
    }

    fn peer(&self, rank: usize, what: String, kind: Kind) -> Error {
        Error::Peer {
            rank,
            what,
            during: format!("{} #{}", kind.name(), self.seq),
        }
    }

    fn aborted(&self, kind: Kind) -> Option<Error> {
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
    /// `target`: the barrier waited for; a peer whose socket closed after it reached that
    /// barrier has done its part (the last barrier before it exits), and is not taken for dead.
    fn check(&self, waiting_for: usize, target: u32, since: Instant, kind: Kind) -> Result<()> {
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
            if hung_up(s) && !reached(self.counter(at).load(Ordering::SeqCst), target) {
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
    fn barrier_wait(&mut self, kind: Kind) -> Result<()> {
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
                if tries <= SPINS {
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
                    if let Err(e) = self.check(j, target, since, kind) {
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
    fn announce(&mut self, call: Call) -> Result<()> {
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

    fn next_set(&mut self) -> u64 {
        self.phase += 1;
        self.phase
    }

    /// In-place all-reduce of `buf` (whole elements of `dtype`), in the ring's order of sums.
    pub fn all_reduce(&mut self, buf: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        if self.cross.is_some() {
            return self.with_cross(|g, cross| g.cross_all_reduce(cross, buf, dtype, op));
        }
        let es = dtype.size();
        let count = buf.len() / es;
        let n = self.n();
        self.seq += 1;
        let call = Call::all_reduce(op, dtype, count as u64);
        let per = SLOT / es;
        let chunks = count.div_ceil(per).max(1);
        let range = |c: usize| c * per..((c + 1) * per).min(count);
        // The sets after the last one used (`phase`).
        let base = self.phase + 1;
        self.phase += chunks as u64;
        let set = |c: usize| base + c as u64;
        // One barrier per chunk: chunk c's copy-in, reduction and copy-out fall in three
        // consecutive iterations, each on its own set of slots (three sets).
        self.copy_in(buf, set(0), range(0), es);
        self.announce(call)?;
        if buf.len() <= WHOLE {
            // Small: every rank reduces the whole buffer from the slots (the same sums in the
            // same order on every rank), one barrier in all.
            self.reduce_range(set(0), 0..count, count, dtype, op, buf, false);
            return Ok(());
        }
        for c in 0..chunks {
            let r = range(c);
            let part = |i: usize| r.start + r.len() * i / n..r.start + r.len() * (i + 1) / n;
            let own = part(self.me);
            self.reduce_range(set(c), own, count, dtype, op, buf, true);
            if c + 1 < chunks {
                self.copy_in(buf, set(c + 1), range(c + 1), es);
            }
            self.barrier_wait(Kind::AllReduce)?;
            for j in (0..n).filter(|&j| j != self.me) {
                let p = part(j);
                let src = self.slot(set(c), j);
                // SAFETY: rank j wrote part j of its slot before the barrier just passed, and
                // writes that slot of this set again only after the barrier two chunks on,
                // which this rank reaches after this copy.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add((p.start - r.start) * es),
                        buf[p.start * es..].as_mut_ptr(),
                        p.len() * es,
                    );
                }
            }
        }
        Ok(())
    }

    /// Copies elements `r` of `buf` into this rank's slot of `set`.
    fn copy_in(&self, buf: &[u8], set: u64, r: std::ops::Range<usize>, es: usize) {
        // SAFETY: this rank's slot of this set, in the mapping. Its last readers (three chunks
        // ago) finished before the barrier this rank passed last; nobody reads it again before
        // the next barrier.
        unsafe {
            std::ptr::copy_nonoverlapping(
                buf[r.start * es..].as_ptr(),
                self.slot(set, self.me),
                r.len() * es,
            )
        };
    }

    /// Reduces elements `r` of the buffer (of `count`, in the chunk held by `set`, whose first
    /// element is `r.start` rounded down to a chunk) from every slot into `buf`, and into this
    /// rank's slot when `publish`.
    #[allow(clippy::too_many_arguments)]
    fn reduce_range(
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
        // Split where the ring's segments (of the whole buffer) change.
        let mut e = r.start;
        while e < r.end {
            let k = ring_segment(count, n, e);
            let seg_end = ((count as u128 * (k as u128 + 1)) / n as u128) as usize;
            let end = r.end.min(seg_end);
            while e < end {
                let b = (end - e).min(BLOCK / es);
                let out = &mut buf[e * es..(e + b) * es];
                self.reduce_block(set, k, e - chunk_start, b, dtype, op, out, publish);
                e += b;
            }
        }
    }

    /// Reduces elements `at..at + b` of this chunk (ring segment `k`) from every slot into
    /// `out`, and into this rank's slot when `publish`.
    #[allow(clippy::too_many_arguments)]
    fn reduce_block(
        &mut self,
        set: u64,
        k: usize,
        at: usize,
        b: usize,
        dtype: DType,
        op: ReduceOp,
        out: &mut [u8],
        publish: bool,
    ) {
        let (es, n) = (dtype.size(), self.n());
        let bytes = b * es;
        let slot = |i: usize| -> &[u8] {
            // SAFETY: elements at..at+b of rank i's slot, written before the last barrier and
            // not written again before two more (this rank's own part: only by this rank,
            // below, after reading it).
            unsafe { std::slice::from_raw_parts(self.slot(set, i).add(at * es), bytes) }
        };
        out.copy_from_slice(slot(k));
        for j in 1..n {
            combine_rev(dtype, op, out, slot((k + j) % n));
        }
        if op == ReduceOp::Avg {
            divide(dtype, out, n);
        }
        if !publish {
            return;
        }
        // SAFETY: this rank's own part of its own slot; the others read it after the next
        // barrier.
        unsafe {
            std::ptr::copy_nonoverlapping(out.as_ptr(), self.slot(set, self.me).add(at * es), bytes)
        };
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

/// The hierarchical transport ([`Cross`]).
impl Group {
    /// Whether collectives cross hosts (the hierarchical transport).
    pub fn is_cross(&self) -> bool {
        self.cross.is_some()
    }

    /// Runs `f` with the group's [`Cross`] lent out (so that `f` borrows the group mutably
    /// too); a leader's failure on the leaders' ring ends the host's collective for its ranks
    /// at once (they would otherwise wait for it until the deadline).
    fn with_cross(&mut self, f: impl FnOnce(&mut Group, &mut Cross) -> Result<()>) -> Result<()> {
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
    fn slot_elems(&self, set: u64, j: usize, at: usize, b: usize, es: usize) -> &[u8] {
        // SAFETY: inside rank j's slot (chunks never exceed a slot); the protocol orders its
        // writes (before a barrier) and these reads (after it, before the next but one).
        unsafe { std::slice::from_raw_parts(self.slot(set, j).add(at * es), b * es) }
    }

    /// Copies `pieces` of `buf` into this rank's slot of `set`, each at its offset.
    fn pieces_in(&self, buf: &[u8], set: u64, pieces: &[(Range<usize>, usize)], es: usize) {
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
    fn pieces_out(&self, buf: &mut [u8], set: u64, pieces: &[(Range<usize>, usize)], es: usize) {
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
    fn fold_segments(
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
    fn lead_all_reduce(
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

    fn cross_all_reduce(
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
        let base = self.phase + 1;
        self.phase += chunks as u64;
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

    fn cross_broadcast(
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
        let base = self.phase + 1;
        self.phase += chunks as u64;
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
    fn cross_barrier(&mut self, cross: &mut Cross) -> Result<()> {
        self.seq += 1;
        self.announce(Call::barrier(self.n() as u64))?;
        if let Some(ring) = cross.ring.as_mut() {
            ring.barrier()?;
        }
        self.barrier_wait(Kind::Barrier)
    }
}

/// The ring segment (of `n`) that element `e` of `count` falls in: the k with
/// ⌊count·k/n⌋ ≤ e < ⌊count·(k+1)/n⌋ ([`crate::ring`]'s `segment`).
fn ring_segment(count: usize, n: usize, e: usize) -> usize {
    let bound = |k: usize| ((count as u128 * k as u128) / n as u128) as usize;
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

/// Whether a barrier counter at `v` has reached barrier `target` (counters wrap).
fn reached(v: u32, target: u32) -> bool {
    v.wrapping_sub(target) as i32 >= 0
}

/// Whether the peer closed its end (readable with nothing to read, or hung up).
fn hung_up(s: &UnixStream) -> bool {
    let mut fd = libc::pollfd {
        fd: s.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut fd, 1, 0) };
    n > 0 && fd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

fn futex_wait(word: &AtomicU32, expected: u32, wait: Duration) {
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

fn futex_wake(word: &AtomicU32) {
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

// ---------------------------------------------------------------------------------------------
// Setting the segment up at the rendezvous.

/// Chooses the transport after the rendezvous (every rank the same: rank 0's choice is checked
/// by the others) and, for shared memory, maps the host's segment into `joined.shm`; across
/// hosts, the hosts' leaders wire their ring too.
pub(crate) fn setup(
    plan: &Plan,
    joined: &mut Joined,
    transport: Transport,
    method: &InitMethod,
    timeout: Duration,
    stop: fn() -> bool,
) -> Result<()> {
    let Some(store) = joined.store.as_mut() else {
        return Ok(());
    };
    let until = Until::new(timeout, stop);
    let of = joined.hosts.of_ranks();
    let hosts = joined.hosts.count();
    let crowded = (0..hosts).any(|h| of.iter().filter(|&&g| g == h).count() > 1);
    let bounds = consecutive(of).filter(|_| hosts <= MAX_HOSTS);
    // Across hosts, shared memory needs each host's ranks consecutive (as torchrun and Slurm
    // place them): else the ring, and the engine's name says why.
    let (shm, cross, interleaved) = match transport {
        Transport::Tcp => (false, None, false),
        _ if hosts == 1 => (true, None, false),
        Transport::Auto if !crowded => (false, None, false),
        _ => match bounds {
            Some(b) => (true, Some(b), false),
            None => (false, None, true),
        },
    };
    joined.interleaved = interleaved;
    let chosen = match (shm, &cross) {
        (true, Some(_)) => "shm+tcp",
        (true, None) => "shm",
        (false, _) => "tcp",
    };
    if plan.rank == 0 {
        store.set("transport", chosen.as_bytes())?;
    } else {
        crate::rendezvous::wait_for_ranks(
            store,
            &[("transport".to_string(), 0)],
            plan.world_size,
            method,
            timeout,
            until,
        )?;
        let theirs = String::from_utf8_lossy(&store.get_now("transport")?).into_owned();
        if theirs != chosen {
            let msg = format!(
                "rank 0 uses the {theirs} transport but rank {} the {chosen} one: give every rank \
                 the same --transport",
                plan.rank
            );
            let _ = store.set("rendezvous_failed", msg.as_bytes());
            return Err(Error::Usage(msg));
        }
    }
    if shm {
        let peers = joined.hosts.peers_of(plan.rank);
        let mut group = join(plan, store, &peers, method, timeout, until)?;
        if let Some(bounds) = cross {
            let host = of[plan.rank];
            let leaders = &bounds[..bounds.len() - 1];
            let ring = if plan.rank == leaders[host] {
                let wired = crate::rendezvous::wire_leaders(
                    store,
                    host,
                    leaders,
                    plan.world_size,
                    method,
                    timeout,
                    until,
                );
                match wired {
                    Ok(ring) => Some(ring),
                    Err(e) => {
                        if !matches!(e, Error::Interrupted(_)) {
                            let _ = store.set("rendezvous_failed", e.to_string().as_bytes());
                        }
                        group.abandon();
                        return Err(e);
                    }
                }
            } else {
                None
            };
            group.cross = Some(Cross { bounds, host, ring });
        }
        joined.shm = Some(group);
    }
    Ok(())
}

/// Bytes of a joining rank's hello: the run's secret (16) and its rank (4).
const HELLO: usize = 20;
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// Makes the group of `plan.rank`'s host (`peers`: its ranks), the leader serving the segment
/// to the others.
fn join(
    plan: &Plan,
    store: &mut Store,
    peers: &[usize],
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<Group> {
    let me = peers
        .iter()
        .position(|&r| r == plan.rank)
        .expect("rank among its host's");
    let n = peers.len();
    if n > MAX_LOCAL {
        return Err(Error::Unsupported(format!(
            "{n} ranks on one host: shared memory serves at most {MAX_LOCAL} (use --transport tcp)"
        )));
    }
    let leader = peers[0];
    let key = format!("shm/{leader}");
    let (map, links) = if me == 0 {
        let secret = format!(
            "{:016x}{:016x}",
            crate::rendezvous::random_u64(),
            crate::rendezvous::random_u64()
        );
        let name = format!("shardkit-{}", &secret[..16]);
        let made = make_segment(n).and_then(|(fd, map)| {
            let addr = UnixAddr::from_abstract_name(name.as_bytes())
                .map_err(Error::io("shared-memory socket"))?;
            let l = UnixListener::bind_addr(&addr).map_err(Error::io("shared-memory socket"))?;
            Ok((fd, map, l))
        });
        let (fd, map, listener) = match made {
            Ok(m) => m,
            Err(e) => {
                let msg = format!("rank {leader} cannot share memory on its host: {e}");
                let _ = store.set("rendezvous_failed", msg.as_bytes());
                return Err(Error::Rendezvous(msg));
            }
        };
        store.set(&key, format!("{name} {secret}").as_bytes())?;
        let links = serve(
            &listener,
            fd.as_raw_fd(),
            &secret.as_bytes()[16..],
            peers,
            store,
            until,
        )?;
        (map, links)
    } else {
        crate::rendezvous::wait_for_ranks(
            store,
            &[(key.clone(), leader)],
            plan.world_size,
            method,
            timeout,
            until,
        )?;
        let v = store.get_now(&key)?;
        let text = String::from_utf8_lossy(&v);
        let (name, secret) = text
            .split_once(' ')
            .filter(|(_, s)| s.len() == 32)
            .ok_or_else(|| Error::Rendezvous(format!("rank {leader} published no segment")))?;
        match fetch(name, &secret.as_bytes()[16..], plan.rank, n) {
            Ok((map, link)) => (map, vec![(leader, link)]),
            Err(e) => {
                let msg = format!(
                    "rank {} cannot map rank {leader}'s shared memory: {e} (use --transport tcp)",
                    plan.rank
                );
                let _ = store.set("rendezvous_failed", msg.as_bytes());
                return Err(Error::Rendezvous(msg));
            }
        }
    };
    Ok(Group {
        me,
        ranks: peers.to_vec(),
        map,
        links,
        timeout,
        stop: until.stop,
        seq: 0,
        phase: 0,
        barriers: 0,
        cross: None,
    })
}

/// A sealed memfd of the segment's size, mapped.
fn make_segment(n: usize) -> Result<(OwnedFd, Mapping)> {
    let len = segment_len(n);
    // SAFETY: a NUL-terminated name; the flags are memfd_create's.
    let fd = unsafe {
        libc::memfd_create(
            c"shardkit-collectives".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(Error::io("memfd_create")(io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just returned to us.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain calls on our descriptor.
    let ok = unsafe {
        libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) == 0
            && libc::fcntl(
                fd.as_raw_fd(),
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            ) == 0
    };
    if !ok {
        return Err(Error::io("sizing the shared memory")(
            io::Error::last_os_error(),
        ));
    }
    let map = map_fd(fd.as_raw_fd(), len)?;
    Ok((fd, map))
}

fn map_fd(fd: RawFd, len: usize) -> Result<Mapping> {
    // SAFETY: a shared read-write mapping of `len` bytes of a sealed memfd of that size.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(Error::io("mapping the shared memory")(
            io::Error::last_os_error(),
        ));
    }
    Ok(Mapping {
        ptr: ptr.cast(),
        len,
    })
}

/// The leader: accepts one connection per other rank of the host, each from a process of this
/// user that says the secret and a rank of the host not yet seen, and passes it the segment.
///
/// Nothing blocks on one connection: hellos are read as they arrive ([`Callers`]), so strangers
/// that connect and say nothing (the socket's name is listed in /proc/net/unix) cost nothing,
/// and the deadline, the stop hook and the others' verdicts are seen every few milliseconds.
fn serve(
    listener: &UnixListener,
    fd: RawFd,
    secret: &[u8],
    peers: &[usize],
    store: &mut Store,
    until: Until,
) -> Result<Vec<(usize, UnixStream)>> {
    listener
        .set_nonblocking(true)
        .map_err(Error::io("shared-memory socket"))?;
    let mut links: Vec<(usize, UnixStream)> = Vec::new();
    let mut callers = Callers::default();
    let mut checked = Instant::now();
    while links.len() + 1 < peers.len() {
        let mut busy = false;
        match listener.accept() {
            Ok((s, _)) => {
                busy = true;
                match same_user(&s).and_then(|()| {
                    s.set_nonblocking(true)
                        .map_err(|e| format!("it failed ({e})"))
                }) {
                    Ok(()) => callers.add(s),
                    Err(why) => {
                        log::warn!("dropped a connection to the shared-memory socket: {why}")
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(Error::io("shared-memory socket")(e)),
        }
        let (hellos, read) = callers.read();
        busy |= read;
        for (s, hello) in hellos {
            match check_hello(&hello, secret, peers, &links) {
                Ok(rank) => {
                    send_fd(&s, fd).map_err(Error::io("passing the shared memory"))?;
                    links.push((rank, s));
                }
                Err(why) => log::warn!("dropped a connection to the shared-memory socket: {why}"),
            }
        }
        if !busy {
            std::thread::sleep(Duration::from_millis(2));
        }
        until.check(|| "waiting for the host's ranks to map its shared memory".to_string())?;
        if checked.elapsed() > Duration::from_millis(200) {
            checked = Instant::now();
            if store.check(&["rendezvous_failed"])? {
                let why = store.get_now("rendezvous_failed")?;
                return Err(Error::Rendezvous(
                    String::from_utf8_lossy(&why).into_owned(),
                ));
            }
        }
        if until.passed() {
            let missing: Vec<String> = peers[1..]
                .iter()
                .filter(|r| !links.iter().any(|(l, _)| l == *r))
                .map(|r| r.to_string())
                .collect();
            return Err(Error::Rendezvous(format!(
                "rank(s) {} never mapped the host's shared memory",
                missing.join(", ")
            )));
        }
    }
    Ok(links)
}

/// Connections waiting to say their hello at once; past that the oldest is dropped.
const MAX_CALLERS: usize = MAX_LOCAL + 64;

/// Connections to the shared-memory socket (non-blocking) that have not said all of their hello.
#[derive(Default)]
struct Callers {
    pending: Vec<(UnixStream, Vec<u8>, Instant)>,
}

impl Callers {
    fn add(&mut self, s: UnixStream) {
        if self.pending.len() == MAX_CALLERS {
            self.pending.remove(0);
            log::warn!(
                "dropped a connection to the shared-memory socket: too many unannounced ones"
            );
        }
        self.pending
            .push((s, Vec::with_capacity(HELLO), Instant::now()));
    }

    /// Reads what each connection has sent: the connections whose hello is whole (with it), and
    /// whether anything arrived. One that closes, fails or says nothing for [`HELLO_TIMEOUT`]
    /// is dropped with a warning.
    fn read(&mut self) -> (Vec<(UnixStream, [u8; HELLO])>, bool) {
        let (mut whole, mut read) = (Vec::new(), false);
        let mut i = 0;
        while i < self.pending.len() {
            let (s, got, since) = &mut self.pending[i];
            let mut buf = [0u8; HELLO];
            let verdict = match (&*s).read(&mut buf[..HELLO - got.len()]) {
                Ok(0) => Err("it closed the connection before its hello".to_string()),
                Ok(k) => {
                    read = true;
                    got.extend_from_slice(&buf[..k]);
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if since.elapsed() > HELLO_TIMEOUT {
                        Err(format!(
                            "it said no hello within {} s",
                            HELLO_TIMEOUT.as_secs()
                        ))
                    } else {
                        Ok(())
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
                Err(e) => Err(format!("it failed ({e})")),
            };
            match verdict {
                Ok(()) if got.len() == HELLO => {
                    let (s, got, _) = self.pending.swap_remove(i);
                    whole.push((s, got.try_into().expect("a whole hello")));
                }
                Ok(()) => i += 1,
                Err(why) => {
                    self.pending.swap_remove(i);
                    log::warn!("dropped a connection to the shared-memory socket: {why}");
                }
            }
        }
        (whole, read)
    }
}

/// Whether the process at the other end is this user's.
fn same_user(s: &UnixStream) -> std::result::Result<(), String> {
    let uid = peer_uid(s).map_err(|e| format!("no peer credentials ({e})"))?;
    // SAFETY: no arguments.
    if uid != unsafe { libc::geteuid() } {
        return Err(format!("it is user {uid}'s"));
    }
    Ok(())
}

/// Checks a hello: the run's secret, a rank of the host not yet seen.
fn check_hello(
    hello: &[u8; HELLO],
    secret: &[u8],
    peers: &[usize],
    links: &[(usize, UnixStream)],
) -> std::result::Result<usize, String> {
    if &hello[..16] != secret {
        return Err("it does not know this run's secret".into());
    }
    let rank = u32::from_le_bytes(hello[16..].try_into().unwrap()) as usize;
    if !peers[1..].contains(&rank) || links.iter().any(|(r, _)| *r == rank) {
        return Err(format!(
            "rank {rank} is not a rank of this host still to come"
        ));
    }
    Ok(rank)
}

/// A rank other than the leader: connects, says hello, receives and maps the segment.
fn fetch(name: &str, secret: &[u8], rank: usize, n: usize) -> Result<(Mapping, UnixStream)> {
    let addr =
        UnixAddr::from_abstract_name(name.as_bytes()).map_err(Error::io("shared-memory socket"))?;
    let s = UnixStream::connect_addr(&addr).map_err(Error::io("shared-memory socket"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(Error::io("shared-memory socket"))?;
    let mut hello = [0u8; HELLO];
    hello[..16].copy_from_slice(secret);
    hello[16..].copy_from_slice(&(rank as u32).to_le_bytes());
    (&s).write_all(&hello)
        .map_err(Error::io("shared-memory hello"))?;
    let fd = recv_fd(&s).map_err(Error::io("receiving the shared memory"))?;
    // The size that n ranks need, sealed against shrinking: no SIGBUS while reading it.
    // SAFETY: a plain C struct, all zeroes valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and stat buffer.
    let seals = unsafe {
        libc::fstat(fd.as_raw_fd(), &mut st);
        libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS)
    };
    let len = segment_len(n);
    if st.st_size as usize != len || seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(Error::Rendezvous(format!(
            "the segment passed is not the sealed {len} bytes this host's {n} ranks need"
        )));
    }
    let map = map_fd(fd.as_raw_fd(), len)?;
    s.set_nonblocking(true)
        .map_err(Error::io("shared-memory socket"))?;
    Ok((map, s))
}

fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    // SAFETY: a plain C struct, all zeroes valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket and a ucred buffer of the given length.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Sends one byte with `fd` attached (SCM_RIGHTS).
fn send_fd(s: &UnixStream, fd: RawFd) -> io::Result<()> {
    let byte = [1u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: a zeroed msghdr is valid; the pointers set below outlive the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: the control buffer holds one header with room for one descriptor.
    let r = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd);
        libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if r != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one byte and the descriptor attached to it.
fn recv_fd(s: &UnixStream) -> io::Result<OwnedFd> {
    let mut byte = [0u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8)];
    // SAFETY: as in send_fd.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: valid buffers for one byte and one control message.
    let r = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the leader closed the socket",
        ));
    }
    // SAFETY: the kernel filled msg_control; walk its first header.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "no descriptor came with the message",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const RawFd);
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_segments_are_found_for_every_element() {
        for (count, n) in [(10usize, 3usize), (1, 4), (7, 7), (1000, 6), (5, 2)] {
            for e in 0..count {
                let k = ring_segment(count, n, e);
                let lo = count * k / n;
                let hi = count * (k + 1) / n;
                assert!(lo <= e && e < hi, "count {count} n {n} e {e} k {k}");
            }
        }
    }

    #[test]
    fn the_leader_admits_only_a_rank_of_its_host_that_knows_the_secret_once() {
        let secret = [7u8; 16];
        let peers = [0usize, 3, 5];
        let hello = |secret: &[u8], rank: u32| -> [u8; HELLO] {
            let mut h = secret.to_vec();
            h.extend_from_slice(&rank.to_le_bytes());
            h.try_into().unwrap()
        };
        assert_eq!(check_hello(&hello(&secret, 3), &secret, &peers, &[]), Ok(3));
        let links = vec![(3usize, UnixStream::pair().unwrap().0)];
        assert!(
            check_hello(&hello(&secret, 3), &secret, &peers, &links)
                .unwrap_err()
                .contains("rank 3")
        );
        assert!(
            check_hello(&hello(&secret, 4), &secret, &peers, &links).is_err(),
            "not a rank of the host"
        );
        assert!(
            check_hello(&hello(&secret, 0), &secret, &peers, &links).is_err(),
            "the leader itself"
        );
        assert!(
            check_hello(&hello(&[8u8; 16], 5), &secret, &peers, &links)
                .unwrap_err()
                .contains("secret")
        );
        // A process of this user passes the credentials check.
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(same_user(&a), Ok(()));
        // Silent, or closed half-way through its hello: dropped, the latter at once.
        let mut callers = Callers::default();
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(&secret[..5]).unwrap();
        drop(a);
        b.set_nonblocking(true).unwrap();
        callers.add(b);
        let (whole, read) = callers.read();
        assert!(whole.is_empty() && read);
        let (whole, _) = callers.read();
        assert!(whole.is_empty() && callers.pending.is_empty());
    }

    /// Strangers on the leader's abstract socket (its name is listed in /proc/net/unix): many
    /// that connect and say nothing, one that stops half-way through a hello, one that sends
    /// garbage and a rank of another run (another secret). The real rank, which comes last, is
    /// served within seconds, not after each stranger's hello deadline in turn, and gets the
    /// segment.
    #[test]
    fn strangers_on_the_shared_memory_socket_do_not_hold_up_the_hosts_ranks() {
        let server = crate::store::StoreServer::bind("127.0.0.1:0").unwrap();
        let mut store = Store::connect(
            &server.addr().to_string(),
            "strangers/",
            Duration::from_secs(10),
        )
        .unwrap();
        let name = format!("shardkit-test-{}-{}", std::process::id(), line!());
        let addr = UnixAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        let secret = [7u8; 16];
        let (fd, _map) = make_segment(2).unwrap();
        let connect = || UnixStream::connect_addr(&addr).unwrap();
        let mut strangers: Vec<UnixStream> = (0..30).map(|_| connect()).collect();
        let half = connect();
        (&half).write_all(&secret[..5]).unwrap();
        strangers.push(half);
        let garbage = connect();
        (&garbage).write_all(&[0xAB; HELLO]).unwrap();
        strangers.push(garbage);
        let other_run = connect();
        let mut hello = [9u8; HELLO];
        hello[16..].copy_from_slice(&3u32.to_le_bytes());
        (&other_run).write_all(&hello).unwrap();
        strangers.push(other_run);
        let real = std::thread::spawn(move || {
            let s = UnixStream::connect_addr(&addr).unwrap();
            let mut hello = secret.to_vec();
            hello.extend_from_slice(&3u32.to_le_bytes());
            (&s).write_all(&hello).unwrap();
            recv_fd(&s).map(|_| ())
        });
        let t0 = Instant::now();
        let until = Until::new(Duration::from_secs(600), crate::never);
        let links = serve(
            &listener,
            fd.as_raw_fd(),
            &secret,
            &[0, 3],
            &mut store,
            until,
        )
        .unwrap();
        // Each silent stranger held the leader for its 2 s hello deadline before: a minute here.
        assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
        assert_eq!(links.iter().map(|(r, _)| *r).collect::<Vec<_>>(), [3]);
        real.join().unwrap().unwrap();
        drop(strangers);
    }

    #[test]
    fn a_segment_passed_over_the_socket_is_sealed_and_shared() {
        let (fd, map) = make_segment(2).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        send_fd(&a, fd.as_raw_fd()).unwrap();
        let got = recv_fd(&b).unwrap();
        // SAFETY: plain calls on a descriptor we own.
        let seals = unsafe { libc::fcntl(got.as_raw_fd(), libc::F_GET_SEALS) };
        assert_ne!(seals & libc::F_SEAL_SHRINK, 0);
        // SAFETY: as above; shrinking a sealed memfd fails.
        assert_ne!(unsafe { libc::ftruncate(got.as_raw_fd(), 0) }, 0);
        let other = map_fd(got.as_raw_fd(), segment_len(2)).unwrap();
        // SAFETY: both mappings are segment_len(2) bytes of the same memfd.
        unsafe {
            *map.ptr.add(100) = 42;
            assert_eq!(*other.ptr.add(100), 42);
        }
        // No file anywhere: the descriptor is a memfd's.
        let link = std::fs::read_link(format!("/proc/self/fd/{}", got.as_raw_fd())).unwrap();
        assert!(link.to_string_lossy().starts_with("/memfd:"), "{link:?}");
    }

    /// The leader passes the last barrier and exits (its socket closes) while rank 2 still waits
    /// for rank 1, which arrives later: the barrier completes; the leader had done its part.
    #[test]
    fn a_peer_that_leaves_after_reaching_the_barrier_is_not_taken_for_dead() {
        let (fd, map) = make_segment(3).unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        b.set_nonblocking(true).unwrap();
        let mut g = Group {
            me: 2,
            ranks: vec![0, 1, 2],
            map,
            links: vec![(0, b)],
            timeout: Duration::from_secs(600),
            stop: crate::never,
            seq: 0,
            phase: 0,
            barriers: 0,
            cross: None,
        };
        // The leader arrived at barrier 1 and left.
        g.counter(0).store(1, Ordering::SeqCst);
        drop(a);
        // Rank 1 arrives 300 ms later, through its own mapping.
        let other = map_fd(fd.as_raw_fd(), segment_len(3)).unwrap();
        let addr = other.ptr as usize;
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            // SAFETY: rank 1's counter in a live mapping of the segment (`other`, kept alive
            // until the join below).
            let c = unsafe { &*((addr + LINE * 2) as *const AtomicU32) };
            c.store(1, Ordering::SeqCst);
            futex_wake(c);
        });
        let r = g.barrier_wait(Kind::Barrier);
        late.join().unwrap();
        drop(other);
        r.unwrap();
        assert_eq!(g.abort_word().load(Ordering::SeqCst), 0);
    }

    #[test]
    fn transports_parse() {
        assert_eq!("shm".parse::<Transport>().unwrap(), Transport::Shm);
        assert_eq!("auto".parse::<Transport>().unwrap(), Transport::Auto);
        assert_eq!("tcp".parse::<Transport>().unwrap(), Transport::Tcp);
        assert!("nccl".parse::<Transport>().is_err());
    }
}
