//! The segment: a sealed memfd, mapped, and passed to the host's other ranks over a Unix socket.

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::BorrowedFd;

use super::*;

/// A mapped segment.
#[derive(Debug)]
pub(super) struct Mapping {
    pub(super) ptr: *mut u8,
    pub(super) len: usize,
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub(super) fn control_len(n: usize) -> usize {
    (LINE * (n + 1)).div_ceil(PAGE) * PAGE
}

pub(super) fn segment_len(n: usize) -> usize {
    control_len(n) + SETS * n * SLOT
}

/// A sealed memfd of the segment's size, mapped.
pub(super) fn make_segment(n: usize) -> Result<(OwnedFd, Mapping)> {
    make_memfd(segment_len(n))
}

/// A memfd of `len` bytes (zeroes), its size sealed, mapped.
pub(super) fn make_memfd(len: usize) -> Result<(OwnedFd, Mapping)> {
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

/// The size of the file behind `fd`.
pub(super) fn fd_len(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: a plain C struct, all zeroes valid, filled by fstat on a valid descriptor.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_size as u64)
}

pub(super) fn map_fd(fd: RawFd, len: usize) -> Result<Mapping> {
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

pub(super) fn peer_uid(s: &UnixStream) -> io::Result<u32> {
    // Not rustix's socket_peercred: it refuses credentials whose process id is 0, which is what
    // the kernel reports for a peer in a PID namespace that this process cannot see (two
    // containers of one pod), though the user id is right.
    // SAFETY: a plain C struct, all zeroes valid.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket, and a buffer of `len` bytes for SO_PEERCRED's struct ucred.
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
pub(super) fn send_fd(s: &UnixStream, fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags, sendmsg};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    sendmsg(s, &[IoSlice::new(&[1])], &mut control, SendFlags::NOSIGNAL)?;
    Ok(())
}

/// Receives one byte and the descriptor attached to it.
pub(super) fn recv_fd(s: &UnixStream) -> io::Result<OwnedFd> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, recvmsg};
    let mut byte = [0u8];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = recvmsg(
        s,
        &mut [IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if got.bytes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the leader closed the socket",
        ));
    }
    control
        .drain()
        .find_map(|m| match m {
            RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
            _ => None,
        })
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "no descriptor came with the message",
            )
        })
}
