//! The segment: a sealed memfd, mapped, and passed to the host's other ranks over a Unix socket.

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
pub(super) fn send_fd(s: &UnixStream, fd: RawFd) -> io::Result<()> {
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
pub(super) fn recv_fd(s: &UnixStream) -> io::Result<OwnedFd> {
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
