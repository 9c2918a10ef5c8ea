//! Buffers shared between a host's ranks, and the all-reduce that reads them in place.
//!
//! [`Group::share`] (every rank of the host, the same size: a collective) has the leader make
//! one sealed memfd holding a region per rank and pass it over each rank's socket; every rank
//! maps it whole. A rank's buffer is its region. An all-reduce of a buffer that is, on every
//! rank, the same range of its region skips the slots: after the call's barrier each rank folds
//! its ring segment reading the others' values straight from their regions (in the ring's
//! order, so the bits are the slots' and the TCP ring's), a barrier, then copies the others'
//! folded segments from their regions into its own, and a last barrier, after which nobody
//! reads its region until the next collective. About 1.25 copies of the buffer per rank with 2
//! ranks (2 through the slots), 1.4 with 4 (2.25).
//!
//! The mappings are never unmapped: a tensor made on a region may outlive the group, so the
//! memory stays until the process exits. Allocate once (a run's gradients), not per call.

use std::os::fd::AsFd;

use super::segment::{fd_len, make_memfd, map_fd, recv_fd, send_fd};
use super::*;
use crate::ring::segment;

/// Regions of one [`Group::share`]: rank i's at `ptr + i * stride`, `len` bytes.
#[derive(Debug)]
pub(super) struct Shared {
    ptr: *mut u8,
    stride: usize,
    len: usize,
}

/// The words (by a call's parity) where a rank says which region and offset its buffer is.
const WHERE: [usize; 2] = [24, 32];

impl Group {
    /// Regions of `bytes` shared by the host's ranks (zeroes, their memory allocated: a size
    /// the host cannot hold fails here, not at a later write); returns this rank's. Every rank
    /// of the host calls it with the same size; it succeeds or fails on every rank.
    pub(crate) fn share(&mut self, bytes: usize) -> Result<*mut u8> {
        self.seq += 1;
        self.announce(Call::share(bytes as u64))?;
        // The same size on every rank (the announcement checked it), so the same verdict.
        let too_big = || {
            Error::Usage(format!(
                "{bytes} bytes cannot be shared by {} ranks",
                self.n()
            ))
        };
        let stride = bytes
            .max(1)
            .checked_next_multiple_of(PAGE)
            .ok_or_else(too_big)?;
        let total = stride.checked_mul(self.n()).ok_or_else(too_big)?;
        let map = if self.me == 0 {
            let (fd, map) = make_memfd(total).inspect_err(|_| self.abandon())?;
            // SAFETY: a valid descriptor of a memfd of `total` bytes.
            if unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, total as libc::off_t) } != 0 {
                let e = io::Error::last_os_error();
                self.abandon();
                return Err(Error::io("allocating the shared buffers")(e));
            }
            for (rank, s) in &self.links {
                if let Err(e) = send_fd(s, fd.as_fd()) {
                    self.abort(KILLED, *rank);
                    let why = format!("could not be sent shared memory ({e})");
                    return Err(self.peer(*rank, why, Kind::Share));
                }
            }
            map
        } else {
            let fd = self.receive_fd()?;
            let len = fd_len(fd.as_fd()).map_err(Error::io("shared memory"));
            // SAFETY: a valid descriptor.
            let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
            if len.as_ref().ok() != Some(&(total as u64))
                || seals < 0
                || seals & libc::F_SEAL_SHRINK == 0
            {
                self.abandon();
                return Err(Error::Rendezvous(format!(
                    "the shared memory passed is not the sealed {total} bytes asked for"
                )));
            }
            map_fd(fd.as_raw_fd(), total).inspect_err(|_| self.abandon())?
        };
        // Every rank mapped it (a rank that failed abandoned: this fails too, and `map` goes).
        self.barrier_wait(Kind::Share)?;
        // Never unmapped from here on (see the module's doc).
        let map = std::mem::ManuallyDrop::new(map);
        let shared = Shared {
            ptr: map.ptr,
            stride,
            len: bytes,
        };
        // SAFETY: region `me` of the mapping.
        let mine = unsafe { shared.ptr.add(self.me * stride) };
        self.shared.push(shared);
        Ok(mine)
    }

    /// The leader's descriptor, waited for as every wait here is ([`Group::check`]: the stop
    /// hook, the deadline, the leader's socket, which the message waiting on it does not make
    /// look closed).
    fn receive_fd(&self) -> Result<OwnedFd> {
        let (leader, s) = &self.links[0];
        let since = Instant::now();
        loop {
            let mut fd = libc::pollfd {
                fd: s.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut fd, 1, CHECK_EVERY.as_millis() as i32) } > 0 {
                return recv_fd(s).map_err(|e| {
                    self.peer(
                        *leader,
                        format!("sent no shared memory ({e}): it exited or was killed"),
                        Kind::Share,
                    )
                });
            }
            if let Some(e) = self.aborted(Kind::Share) {
                return Err(e);
            }
            self.check(0, &|_| false, since, Kind::Share)?;
        }
    }

    /// Which shared region holds `buf` whole, and where: `(region + 1) << 48 | offset`, or 0.
    fn place(&self, buf: &[u8]) -> u64 {
        let at = buf.as_ptr() as usize;
        for (i, s) in self.shared.iter().enumerate() {
            let start = s.ptr as usize + self.me * s.stride;
            if at >= start && at + buf.len() <= start + s.len && i < 0xffff {
                return ((i as u64 + 1) << 48) | (at - start) as u64;
            }
        }
        0
    }

    /// Says where `buf` is (before the call's announcement); after it, whether every rank's
    /// buffer is the same range of the same shared regions.
    pub(super) fn say_place(&self, buf: &[u8]) -> u64 {
        let place = self.place(buf);
        self.place_word(self.me).store(place, Ordering::Relaxed);
        place
    }

    fn place_word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: rank i's line, 8-byte aligned words before the headers at 64.
        unsafe {
            &*(self
                .map
                .ptr
                .add(LINE * (i + 1) + WHERE[(self.seq % 2) as usize])
                as *const AtomicU64)
        }
    }

    /// Read after the announcement's barrier (whose counter store orders the words' stores).
    pub(super) fn all_in_place(&self, place: u64) -> bool {
        place != 0 && (0..self.n()).all(|j| self.place_word(j).load(Ordering::Relaxed) == place)
    }

    /// The all-reduce of a buffer at `place` in every rank's region (see the module's doc),
    /// after the call's announcement.
    pub(super) fn all_reduce_in_place(
        &mut self,
        buf: &mut [u8],
        place: u64,
        dtype: DType,
        op: ReduceOp,
    ) -> Result<()> {
        let (es, n, me) = (dtype.size(), self.n(), self.me);
        let count = buf.len() / es;
        let s = &self.shared[(place >> 48) as usize - 1];
        let offset = (place & 0xffff_ffff_ffff) as usize;
        let (ptr, stride) = (s.ptr, s.stride);
        // Bytes of ring segment k (the TCP ring's split of the buffer).
        let seg = |k: usize| segment(count, n, k, es);
        // Bytes `r` of rank j's buffer.
        let theirs = |j: usize, r: Range<usize>| -> &[u8] {
            // SAFETY: inside rank j's region (the same range as `buf` in ours); between the
            // barriers around this step nobody writes these bytes: in the fold each rank
            // writes only its own segment of its own region, in the copy only the others'.
            unsafe { std::slice::from_raw_parts(ptr.add(j * stride + offset + r.start), r.len()) }
        };
        let mine = seg(me);
        // BLOCK is a whole number of elements of every type.
        for at in mine.clone().step_by(BLOCK) {
            let block = at..mine.end.min(at + BLOCK);
            let out = &mut buf[block.clone()];
            // The ring's order for segment `me`: x[me], then op(x[me+1], ·), … op(x[me−1], ·).
            for j in 1..n {
                combine_rev(dtype, op, out, theirs((me + j) % n, block.clone()));
            }
            if op == ReduceOp::Avg {
                divide(dtype, out, n);
            }
        }
        self.in_place += 1;
        self.barrier_wait(Kind::AllReduce)?;
        for j in (0..n).filter(|&j| j != me) {
            let r = seg(j);
            buf[r.clone()].copy_from_slice(theirs(j, r));
        }
        self.barrier_wait(Kind::AllReduce)
    }
}
