//! The shared-memory transport: ranks on one host all-reduce, broadcast and meet at barriers
//! through one memory segment instead of loopback TCP.
//!
//! The segment is a `memfd` made by the lowest rank on the host (the leader) and passed to the
//! others over an abstract Unix socket (`SCM_RIGHTS`): no file is left in `/dev/shm` by a killed
//! run, and only a process of the same user that knows the run's secret gets it (the socket's
//! peer credentials are checked). Its size is sealed, so nobody can shrink it under a reader.
//!
//! Layout: a control block (an abort word, the sleepers' count and the pipeline's bell, then one
//! line per rank: its barrier counter, its three pipeline progress words and its last two
//! collective headers), then [`SETS`] sets of one slot per rank ([`SLOT`] bytes each). A buffer
//! goes through in chunks of one slot, chunk c in set c mod [`SETS`]. All-reduce of a buffer
//! larger than [`WHOLE`] (reduce-scatter + all-gather over memory) is pipelined, after one
//! barrier that checks every rank's call ([`pipeline`]): for each chunk a rank
//!
//! 1. copies the chunk of its buffer into its slot, all but its own part (1/n of the chunk);
//! 2. once every rank has done 1, reduces its own part from every other slot and its buffer,
//!    into its buffer and its slot;
//! 3. once every rank has done 2, copies the other ranks' parts from their slots into its buffer.
//!
//! Each step waits for the progress words of the ranks it reads, not for a barrier, so a rank
//! runs up to [`SETS`] − 1 chunks ahead of the slowest. A buffer of up to [`WHOLE`] bytes is
//! reduced whole by every rank after one barrier (latency rules there, not bandwidth).
//! Broadcast and the hierarchical transport take one barrier per chunk, and write a set again
//! [`SETS`] chunks later (three would do), after every rank has passed the barrier that follows
//! its last reads.
//!
//! **The order of a sum is the TCP ring's** ([`crate::ring`]): element e of a buffer of `count`
//! elements belongs to ring segment k = the one with ⌊count·k/n⌋ ≤ e < ⌊count·(k+1)/n⌋, and its
//! reduction is op(x[k−1], … op(x[k+2], op(x[k+1], x[k]))) over the ranks k, k+1, … k−1 (mod
//! n). Both transports therefore give bit-identical results, for every dtype and op.
//!
//! Ranks on several hosts use one segment per host and a TCP ring between the hosts' leaders
//! (the lowest rank of each host), in the same order of sums: see [`Cross`].
//!
//! Waits spin briefly (not when the host's ranks outnumber its cores), then yield, then sleep on
//! a futex (the awaited rank's barrier counter, or the pipeline's bell; 2 ms at a time); every
//! 50 ms a wait checks the stop hook, the deadline and the Unix sockets (each rank holds one to
//! the leader, which holds one to each): a rank that dies is seen by the leader as a
//! closed socket, which it writes to the abort word for the others; a leader that dies is seen by
//! everyone.

mod cross;
mod join;
mod pipeline;
mod reduce;
mod segment;
mod shared;
#[cfg(test)]
mod tests;
mod wait;

use std::io::{self, Read, Write};
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::reduce::{DType, ReduceOp, combine, combine_rev, divide};
use crate::rendezvous::{InitMethod, Joined, Plan, Until};
use crate::ring::{Call, Kind, Ring};
use crate::store::Store;
use crate::{Error, Result};

use cross::Cross;
pub(crate) use join::setup;
use segment::{Mapping, control_len};

/// Bytes of one rank's slot in each of the sets: a chunk of a collective. Small enough that
/// a chunk's slots stay in cache between its copy-in and the others' reads, and that a
/// pipeline of a few MiB has many chunks; large enough that waits and barriers are few.
/// scripts/bench/all_reduce.py and all_reduce_hosts.py chose it over 64 KiB, 128 KiB and 1 MiB
/// (docs/benchmarks.md).
pub(crate) const SLOT: usize = 256 << 10;
/// The most ranks one segment serves.
pub(crate) const MAX_LOCAL: usize = 256;
const LINE: usize = 128;
/// Sets of slots: a chunk of a barrier-stepped collective is copied in, reduced and copied out
/// in three consecutive steps (three sets at least); a pipelined all-reduce runs up to SETS − 1
/// chunks ahead of its slowest rank.
pub(crate) const SETS: usize = 6;
const PAGE: usize = 4096;
/// How often a wait checks the stop hook, the deadline and the sockets.
const CHECK_EVERY: Duration = Duration::from_millis(50);
/// Buffers up to this size are reduced whole by every rank (one barrier instead of two).
const WHOLE: usize = 256 << 10;
// A whole buffer goes through one slot.
const _: () = assert!(WHOLE <= SLOT);
/// Bytes reduced per pass through the slots (fits L1 with the inputs streaming).
const BLOCK: usize = 16 << 10;
const SPINS: u32 = 200;

/// Spins before a wait of `n` ranks of a host yields: none when they outnumber the cores this
/// process may run on, where a spinning rank holds a core that the rank it waits for needs.
fn spins_for(n: usize) -> u32 {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    if n > cores { 0 } else { SPINS }
}
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
    /// Spins before a wait yields ([`spins_for`]).
    spins: u32,
    /// Ranks on several hosts (the hierarchical transport): where the hosts' ranks start, and
    /// on the host's leader the leaders' ring.
    cross: Option<Cross>,
    /// A fold's running result where two or more ranks come before this one in the ring's
    /// order ([`Group::reduce_block`]).
    scratch: Vec<u8>,
    /// Buffers shared with the host's other ranks ([`Group::share`]).
    shared: Vec<shared::Shared>,
    /// All-reduces done in place in them (tests check which path a call took).
    pub(crate) in_place: u64,
}

// SAFETY: the mapping is owned by the group (shared with other processes through the protocol,
// not with other threads of this one); the group moves between threads as a whole.
unsafe impl Send for Group {}

impl Group {
    fn new(
        me: usize,
        ranks: Vec<usize>,
        map: Mapping,
        links: Vec<(usize, UnixStream)>,
        timeout: Duration,
        stop: fn() -> bool,
    ) -> Group {
        let n = ranks.len();
        Group {
            me,
            ranks,
            map,
            links,
            timeout,
            stop,
            seq: 0,
            phase: 0,
            barriers: 0,
            spins: spins_for(n),
            cross: None,
            scratch: Vec::new(),
            shared: Vec::new(),
            in_place: 0,
        }
    }

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
}
