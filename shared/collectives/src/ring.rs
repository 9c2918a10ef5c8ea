//! The CPU backend: a ring of TCP connections (each rank sends to `rank+1` and receives from
//! `rank−1`) and the bandwidth-optimal ring algorithms over it.
//!
//! - all-reduce = reduce-scatter + all-gather, each n−1 steps over n segments: every rank sends
//!   and receives 2(n−1)/n of the buffer, the lower bound that `busbw` is defined against;
//! - all-gather, reduce-scatter: one of those phases; broadcast: a chunked relay from the root;
//! - barrier: an all-gather of one byte (after n−1 hops every rank has heard from every other).
//!
//! Each step sends and receives at once from one thread: both sockets are non-blocking and a
//! `poll(2)` loop writes what the kernel takes while it reads and reduces what has arrived, in
//! slices of [`CHUNK`] bytes, so receiving, reducing and sending overlap without extra threads.
//! Every collective starts with a 32-byte header (sequence number, collective, op, dtype, root,
//! element count) that each rank checks against its predecessor's: ranks that disagree fail
//! with both calls named, instead of reading each other's bytes as data.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use crate::reduce::{DType, ReduceOp, combine, divide};
use crate::{Error, Result};

/// Bytes read per `read(2)` (and reduced per pass) while receiving.
const CHUNK: usize = 1 << 20;
const MAGIC: u32 = 0x534B_434C; // "SKCL"
/// SO_SNDBUF/SO_RCVBUF asked for (Linux doubles it). Fixed buffers beat autotuning here: with
/// 4 ranks on 2 cores, 256 MiB all-reduce ran at busbw 1.1–1.3 GB/s autotuned and 1.2–1.6 GB/s
/// with 1 MiB (scripts/bench/all_reduce.py); the figures were noisy, the direction was not.
const SOCKET_BUFFER: libc::c_int = 1 << 20;

/// Which collective a header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    AllReduce = 1,
    Broadcast = 2,
    AllGather = 3,
    ReduceScatter = 4,
    Barrier = 5,
    /// Memory shared between a host's ranks ([`crate::Communicator::shared_zeros`]).
    Share = 6,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::Broadcast => "broadcast",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Barrier => "barrier",
            Kind::Share => "shared_zeros",
        }
    }
}

/// The call a rank announces before a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Call {
    pub kind: Kind,
    pub op: Option<ReduceOp>,
    pub dtype: Option<DType>,
    pub root: Option<usize>,
    pub count: u64,
}

impl Call {
    pub(crate) fn all_reduce(op: ReduceOp, dtype: DType, count: u64) -> Call {
        Call {
            kind: Kind::AllReduce,
            op: Some(op),
            dtype: Some(dtype),
            root: None,
            count,
        }
    }

    pub(crate) fn all_gather(dtype: DType, count: u64) -> Call {
        Call {
            kind: Kind::AllGather,
            op: None,
            dtype: Some(dtype),
            root: None,
            count,
        }
    }

    pub(crate) fn reduce_scatter(op: ReduceOp, dtype: DType, count: u64) -> Call {
        Call {
            kind: Kind::ReduceScatter,
            op: Some(op),
            dtype: Some(dtype),
            root: None,
            count,
        }
    }

    pub(crate) fn broadcast(dtype: DType, root: usize, count: u64) -> Call {
        Call {
            kind: Kind::Broadcast,
            op: None,
            dtype: Some(dtype),
            root: Some(root),
            count,
        }
    }

    /// A barrier of `ranks` ranks (announced as that many bytes).
    pub(crate) fn barrier(ranks: u64) -> Call {
        Call {
            kind: Kind::Barrier,
            op: None,
            dtype: Some(DType::U8),
            root: None,
            count: ranks,
        }
    }

    /// Shared memory of `bytes` per rank (announced as that many bytes).
    pub(crate) fn share(bytes: u64) -> Call {
        Call {
            kind: Kind::Share,
            op: None,
            dtype: Some(DType::U8),
            root: None,
            count: bytes,
        }
    }

    pub(crate) fn encode(&self, seq: u64) -> [u8; 32] {
        let mut h = [0u8; 32];
        h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        h[4] = self.kind as u8;
        h[5] = self.op.map_or(255, ReduceOp::code);
        h[6] = self.dtype.map_or(255, DType::code);
        h[8..12].copy_from_slice(&self.root.map_or(u32::MAX, |r| r as u32).to_le_bytes());
        h[12..20].copy_from_slice(&seq.to_le_bytes());
        h[20..28].copy_from_slice(&self.count.to_le_bytes());
        h
    }

    /// Whether `h` starts as a header does.
    pub(crate) fn is_header(h: &[u8; 32]) -> bool {
        u32::from_le_bytes(h[0..4].try_into().unwrap()) == MAGIC
    }

    pub(crate) fn describe(h: &[u8; 32]) -> String {
        let kind = match h[4] {
            1 => "all_reduce",
            2 => "broadcast",
            3 => "all_gather",
            4 => "reduce_scatter",
            5 => "barrier",
            6 => "shared_zeros",
            _ => "?",
        };
        let op = ReduceOp::ALL
            .into_iter()
            .find(|o| o.code() == h[5])
            .map(|o| format!("({})", o.name()));
        let dtype = DType::ALL
            .into_iter()
            .find(|d| d.code() == h[6])
            .map_or("", DType::name);
        let root = u32::from_le_bytes(h[8..12].try_into().unwrap());
        let seq = u64::from_le_bytes(h[12..20].try_into().unwrap());
        let count = u64::from_le_bytes(h[20..28].try_into().unwrap());
        let root = if root == u32::MAX {
            String::new()
        } else {
            format!(" from root {root}")
        };
        format!(
            "collective #{seq}: {kind}{} of {count} × {dtype}{root}",
            op.unwrap_or_default()
        )
    }
}

/// A connected ring. `world == 1` has no sockets and every collective is the identity.
#[derive(Debug)]
pub(crate) struct Ring {
    pub rank: usize,
    pub world: usize,
    links: Option<Links>,
    timeout: Duration,
    /// Asked while a collective waits on a peer (every 100 ms poll without progress).
    stop: fn() -> bool,
    seq: u64,
    scratch: Vec<u64>,
    /// The rank each ring position is known as in messages (the leaders' ring of the
    /// hierarchical transport: host g's leader); empty: the position itself.
    names: Vec<usize>,
}

#[derive(Debug)]
struct Links {
    next: TcpStream,
    prev: TcpStream,
}

/// What to do with received bytes.
enum Sink<'a> {
    /// Store them in this slice.
    Copy(&'a mut [u8]),
    /// `op` them into this slice, element by element.
    Reduce(&'a mut [u8], DType, ReduceOp),
}

impl Ring {
    pub fn single() -> Ring {
        Ring {
            rank: 0,
            world: 1,
            links: None,
            timeout: Duration::from_secs(1),
            stop: crate::never,
            seq: 0,
            scratch: Vec::new(),
            names: Vec::new(),
        }
    }

    pub fn new(
        rank: usize,
        world: usize,
        next: TcpStream,
        prev: TcpStream,
        timeout: Duration,
        stop: fn() -> bool,
    ) -> Result<Ring> {
        for s in [&next, &prev] {
            set_buffers(s, SOCKET_BUFFER);
            s.set_nodelay(true).map_err(Error::io("ring socket"))?;
            s.set_nonblocking(true).map_err(Error::io("ring socket"))?;
        }
        Ok(Ring {
            rank,
            world,
            links: Some(Links { next, prev }),
            timeout,
            stop,
            seq: 0,
            scratch: Vec::new(),
            names: Vec::new(),
        })
    }

    /// Names position i of the ring `names[i]` in messages (a ring of the hosts' leaders).
    pub fn with_names(mut self, names: Vec<usize>) -> Ring {
        self.names = names;
        self
    }

    /// The rank position `i` is known as.
    fn name(&self, i: usize) -> usize {
        self.names.get(i).copied().unwrap_or(i)
    }

    fn next_rank(&self) -> usize {
        (self.rank + 1) % self.world
    }

    fn prev_rank(&self) -> usize {
        (self.rank + self.world - 1) % self.world
    }

    /// Sends our header and checks the predecessor's; returns the collective's number.
    pub(crate) fn announce(&mut self, call: Call) -> Result<u64> {
        self.seq += 1;
        let seq = self.seq;
        let ours = call.encode(seq);
        let mut theirs = [0u8; 32];
        self.exchange(&ours, Sink::Copy(&mut theirs), call.kind)?;
        if theirs != ours {
            let prev = self.name(self.prev_rank());
            let them = if Call::is_header(&theirs) {
                Call::describe(&theirs)
            } else {
                "bytes that are not a collective header".to_string()
            };
            return Err(Error::Mismatch(format!(
                "rank {prev} called {them}, but rank {} called {}: every rank must make the same collective calls \
                 with the same sizes and types",
                self.name(self.rank),
                Call::describe(&ours)
            )));
        }
        Ok(seq)
    }

    /// In-place all-reduce of `buf` (whole elements of `dtype`).
    pub fn all_reduce(&mut self, buf: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        let count = (buf.len() / dtype.size()) as u64;
        if self.world == 1 {
            return Ok(());
        }
        self.announce(Call::all_reduce(op, dtype, count))?;
        let n = self.world;
        let seg = |i: usize| segment(count as usize, n, i % n, dtype.size());
        // Reduce-scatter: after step s rank r holds the sum over r−s−1..r of segment r−s−1.
        let r = self.rank + n; // keeps the subtractions below non-negative
        for s in 0..n - 1 {
            let (send, recv) = split(buf, seg(r - s), seg(r - s - 1));
            self.exchange(send, Sink::Reduce(recv, dtype, op), Kind::AllReduce)?;
        }
        // Rank r now owns the fully reduced segment r+1.
        if op == ReduceOp::Avg {
            divide(dtype, &mut buf[seg(r + 1)], n);
        }
        self.gather_phase(buf, seg, r + 1, Kind::AllReduce)
    }

    /// n−1 steps that spread each rank's finished segment: rank r starts by sending segment
    /// `own` (which it holds complete) and ends holding every segment.
    pub(crate) fn gather_phase(
        &mut self,
        buf: &mut [u8],
        seg: impl Fn(usize) -> Range<usize>,
        own: usize,
        kind: Kind,
    ) -> Result<()> {
        for s in 0..self.world - 1 {
            let (send, recv) = split(
                buf,
                seg(own + self.world - s),
                seg(own + self.world - s - 1),
            );
            self.exchange(send, Sink::Copy(recv), kind)?;
        }
        Ok(())
    }

    /// `out` holds `world` equal slots; slot `rank` must already hold this rank's part.
    pub fn all_gather(&mut self, out: &mut [u8], dtype: DType) -> Result<()> {
        let slot = out.len() / self.world;
        if self.world == 1 {
            return Ok(());
        }
        let count = (slot / dtype.size()) as u64;
        self.announce(Call::all_gather(dtype, count))?;
        let n = self.world;
        self.gather_phase(
            out,
            |i| (i % n) * slot..(i % n + 1) * slot,
            self.rank,
            Kind::AllGather,
        )
    }

    /// Reduces `buf` (`world` equal slots, used as scratch) so that slot `rank` holds the
    /// reduction of every rank's slot `rank`.
    pub fn reduce_scatter(&mut self, buf: &mut [u8], dtype: DType, op: ReduceOp) -> Result<()> {
        let n = self.world;
        let slot = buf.len() / n;
        if n == 1 {
            return Ok(());
        }
        let count = (slot / dtype.size()) as u64;
        self.announce(Call::reduce_scatter(op, dtype, count))?;
        let seg = |i: usize| (i % n) * slot..(i % n + 1) * slot;
        // As all_reduce's first phase, shifted by one so that rank r ends owning slot r.
        let r = self.rank + 2 * n - 1;
        for s in 0..n - 1 {
            let (send, recv) = split(buf, seg(r - s), seg(r - s - 1));
            self.exchange(send, Sink::Reduce(recv, dtype, op), Kind::ReduceScatter)?;
        }
        if op == ReduceOp::Avg {
            divide(dtype, &mut buf[seg(self.rank)], n);
        }
        Ok(())
    }

    /// Copies the root's `buf` into every rank's: a pipelined relay along the ring.
    pub fn broadcast(&mut self, buf: &mut [u8], dtype: DType, root: usize) -> Result<()> {
        if self.world == 1 {
            return Ok(());
        }
        let count = (buf.len() / dtype.size()) as u64;
        self.announce(Call::broadcast(dtype, root, count))?;
        let receive = self.rank != root;
        let forward = self.next_rank() != root;
        self.relay(buf, receive, forward)
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&mut self) -> Result<()> {
        if self.world == 1 {
            return Ok(());
        }
        let n = self.world as u64;
        self.announce(Call::barrier(n))?;
        let mut token = vec![0u8; self.world];
        let w = self.world;
        self.gather_phase(&mut token, |i| i % w..i % w + 1, self.rank, Kind::Barrier)
    }

    /// Sends `send` to the next rank while combining as many bytes from the previous one into
    /// `dst` (`op(dst, received)`, element by element; `None`: stored as they are).
    pub(crate) fn exchange_into(
        &mut self,
        send: &[u8],
        dst: &mut [u8],
        reduce: Option<(DType, ReduceOp)>,
        kind: Kind,
    ) -> Result<()> {
        let sink = match reduce {
            Some((dtype, op)) => Sink::Reduce(dst, dtype, op),
            None => Sink::Copy(dst),
        };
        self.exchange(send, sink, kind)
    }

    /// Broadcast's relay without a header (the caller announced the collective): `buf` comes
    /// from position `root` along the ring.
    pub(crate) fn relay_from(&mut self, buf: &mut [u8], root: usize) -> Result<()> {
        let receive = self.rank != root;
        let forward = self.next_rank() != root;
        self.relay(buf, receive, forward)
    }

    /// Sends `send` to the next rank while receiving `sink`'s length from the previous one.
    fn exchange(&mut self, send: &[u8], sink: Sink<'_>, kind: Kind) -> Result<()> {
        let (dst, reduce) = match sink {
            Sink::Copy(d) => (d, None),
            Sink::Reduce(d, dtype, op) => (d, Some((dtype, op))),
        };
        self.transfer(Some(send), dst, reduce, 0, 0, kind)
    }

    /// Broadcast relay: receives `buf` from the previous rank (unless root) while forwarding what
    /// has arrived to the next one (unless it is the root).
    fn relay(&mut self, buf: &mut [u8], receive: bool, forward: bool) -> Result<()> {
        let got = if receive { 0 } else { buf.len() };
        let sent = if forward { 0 } else { buf.len() };
        self.transfer(None, buf, None, got, sent, Kind::Broadcast)
    }

    /// The one send-and-receive loop of the ring: receives into `dst` from the previous rank
    /// (from byte `got` on; `reduce`: combining it into what `dst` holds) while sending to the
    /// next rank `send`, or (`None`, a relay) the bytes of `dst` received so far, from byte `sent`
    /// on.
    ///
    /// Kept in one piece: one non-blocking loop whose deadline, peer-loss and stop checks share
    /// its state (offsets, partial elements, buffers).
    fn transfer(
        &mut self,
        send: Option<&[u8]>,
        dst: &mut [u8],
        reduce: Option<(DType, ReduceOp)>,
        mut got: usize,
        mut sent: usize,
        kind: Kind,
    ) -> Result<()> {
        let (next_rank, prev_rank, timeout, seq, stop) = (
            self.name(self.next_rank()),
            self.name(self.prev_rank()),
            self.timeout,
            self.seq,
            self.stop,
        );
        let links = self.links.as_mut().expect("a transfer on a ring of one");
        if reduce.is_some() && self.scratch.is_empty() {
            self.scratch = vec![0u64; CHUNK / 8];
        }
        let scratch: &mut [u8] = bytemuck::cast_slice_mut(&mut self.scratch);
        let peer = |rank: usize, what: String| Error::Peer {
            rank,
            what,
            during: format!("{} #{seq}", kind.name()),
        };
        let send_len = send.map_or(dst.len(), <[u8]>::len);
        // For reductions: `got` counts bytes reduced into dst, `fill` bytes waiting in scratch.
        let mut fill = 0usize;
        let mut last_progress = Instant::now();
        while sent < send_len || got < dst.len() {
            // A relay forwards only what has arrived.
            let ready = if send.is_some() { send_len } else { got };
            let want_write = sent < ready;
            let want_read = got < dst.len();
            let (readable, writable) = poll2(
                &links.prev,
                want_read,
                &links.next,
                want_write,
                Duration::from_millis(100),
            )
            .map_err(Error::io("poll"))?;
            let mut progressed = false;
            if writable {
                let data = match send {
                    Some(s) => &s[sent..ready],
                    None => &dst[sent..ready],
                };
                match links.next.write(data) {
                    Ok(k) => {
                        sent += k;
                        progressed |= k > 0;
                    }
                    Err(e) if retry(&e) => {}
                    Err(e) => {
                        return Err(peer(
                            next_rank,
                            format!("stopped receiving ({e}): it exited or was killed"),
                        ));
                    }
                }
            }
            if readable {
                let r = match reduce {
                    None => links.prev.read(&mut dst[got..]),
                    Some(_) => {
                        let want = (dst.len() - got - fill).min(scratch.len() - fill);
                        links.prev.read(&mut scratch[fill..fill + want])
                    }
                };
                match r {
                    Ok(0) => {
                        return Err(peer(
                            prev_rank,
                            "closed its connection: it exited or was killed".to_string(),
                        ));
                    }
                    Ok(k) => {
                        progressed = true;
                        match reduce {
                            None => got += k,
                            Some((dtype, op)) => {
                                fill += k;
                                let whole = fill - fill % dtype.size();
                                combine(dtype, op, &mut dst[got..got + whole], &scratch[..whole]);
                                scratch.copy_within(whole..fill, 0);
                                got += whole;
                                fill -= whole;
                            }
                        }
                    }
                    Err(e) if retry(&e) => {}
                    Err(e) => {
                        return Err(peer(
                            prev_rank,
                            format!("connection failed ({e}): it exited or was killed"),
                        ));
                    }
                }
            }
            if progressed {
                last_progress = Instant::now();
            } else if stop() {
                return Err(Error::Interrupted(format!(
                    "in {} #{seq}, waiting for rank {}",
                    kind.name(),
                    if want_read { prev_rank } else { next_rank }
                )));
            } else if last_progress.elapsed() >= timeout {
                let secs = timeout.as_secs_f64();
                return Err(if want_read {
                    peer(
                        prev_rank,
                        format!(
                            "sent nothing for {secs:.0} s (hung, stopped, or still in an earlier step)"
                        ),
                    )
                } else {
                    peer(
                        next_rank,
                        format!("took nothing for {secs:.0} s (hung or stopped)"),
                    )
                });
            }
        }
        Ok(())
    }
}

/// Best effort: a refused size leaves the kernel's default.
fn set_buffers(s: &TcpStream, bytes: libc::c_int) {
    for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
        // SAFETY: a valid socket and a pointer to a c_int of the given length.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
    }
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// Byte range of segment `i` of `count` elements split `n` ways (sizes differ by at most one).
pub(crate) fn segment(count: usize, n: usize, i: usize, esize: usize) -> Range<usize> {
    let bound = |k: usize| ((count as u128 * k as u128) / n as u128) as usize * esize;
    bound(i)..bound(i + 1)
}

/// `(&buf[a], &mut buf[b])` for disjoint ranges.
pub(crate) fn split(buf: &mut [u8], a: Range<usize>, b: Range<usize>) -> (&[u8], &mut [u8]) {
    assert!(
        a.end <= b.start || b.end <= a.start,
        "overlapping ring segments {a:?} {b:?}"
    );
    if a.end <= b.start {
        let (lo, hi) = buf.split_at_mut(b.start);
        (&lo[a], &mut hi[..b.end - b.start])
    } else {
        let (lo, hi) = buf.split_at_mut(a.start);
        (&hi[..a.end - a.start], &mut lo[b])
    }
}

/// `poll(2)` on a reader and a writer; `(readable, writable)`. Hang-ups count as readable (the
/// read then reports EOF) and as writable (the write then reports the error).
fn poll2(
    r: &TcpStream,
    want_read: bool,
    w: &TcpStream,
    want_write: bool,
    wait: Duration,
) -> io::Result<(bool, bool)> {
    let mut fds = [
        libc::pollfd {
            fd: r.as_raw_fd(),
            events: if want_read { libc::POLLIN } else { 0 },
            revents: 0,
        },
        libc::pollfd {
            fd: w.as_raw_fd(),
            events: if want_write { libc::POLLOUT } else { 0 },
            revents: 0,
        },
    ];
    // SAFETY: two valid pollfd structs for the duration of the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, wait.as_millis() as libc::c_int) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok((false, false))
        } else {
            Err(e)
        };
    }
    let bad = libc::POLLHUP | libc::POLLERR;
    Ok((
        want_read && fds[0].revents & (libc::POLLIN | bad) != 0,
        want_write && fds[1].revents & (libc::POLLOUT | bad) != 0,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_tile_the_buffer() {
        for (count, n) in [(10, 3), (1, 4), (0, 2), (1 << 20, 7)] {
            let mut end = 0;
            for i in 0..n {
                let s = segment(count, n, i, 4);
                assert_eq!(s.start, end);
                assert!(s.len() / 4 <= count / n + 1);
                end = s.end;
            }
            assert_eq!(end, count * 4);
        }
    }

    #[test]
    fn split_gives_disjoint_views_in_either_order() {
        let mut b: Vec<u8> = (0..10).collect();
        let (s, r) = split(&mut b, 6..8, 1..3);
        assert_eq!(s, [6, 7]);
        r.copy_from_slice(&[9, 9]);
        let (s, r) = split(&mut b, 0..2, 8..10);
        assert_eq!(s, [0, 9]);
        assert_eq!(r.len(), 2);
        // Empty segments (fewer elements than ranks) may start where the other does.
        let (s, r) = split(&mut b, 0..0, 0..4);
        assert_eq!((s.len(), r.len()), (0, 4));
        let (s, r) = split(&mut b, 0..4, 4..4);
        assert_eq!((s.len(), r.len()), (4, 0));
    }
}
