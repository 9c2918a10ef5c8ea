//! Setting the segment up at the rendezvous: the transport's choice, the leader serving the
//! segment to its host's ranks, the others fetching it.

use super::cross::{Cross, MAX_HOSTS, consecutive};
use super::segment::{Mapping, make_segment, map_fd, peer_uid, recv_fd, segment_len, send_fd};
use super::*;

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
    let until = Until::new(timeout, stop);
    let (shm, cross) = choose(joined, transport);
    let Some(store) = joined.store.as_mut() else {
        return Ok(());
    };
    let chosen = match (shm, &cross) {
        (true, Some(_)) => "shm+tcp",
        (true, None) => "shm",
        (false, _) => "tcp",
    };
    agree(plan, store, chosen, method, timeout, until)?;
    if shm {
        let peers = joined.hosts.peers_of(plan.rank);
        let mut group = join(plan, store, &peers, method, timeout, until)?;
        if let Some(bounds) = cross {
            let host = joined.hosts.of_ranks()[plan.rank];
            let ring = wire_cross(
                plan, store, &mut group, &bounds, host, method, timeout, until,
            )?;
            group.cross = Some(Cross { bounds, host, ring });
        }
        joined.shm = Some(group);
    }
    Ok(())
}

/// Whether shared memory is used, and across hosts where each host's ranks start (setting
/// `joined.interleaved` when hosts' ranks interleave, which leaves the ring).
fn choose(joined: &mut Joined, transport: Transport) -> (bool, Option<Vec<usize>>) {
    if joined.store.is_none() {
        return (false, None);
    }
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
    (shm, cross)
}

/// Rank 0 publishes the transport it chose; the others check theirs against it.
fn agree(
    plan: &Plan,
    store: &mut Store,
    chosen: &str,
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<()> {
    if plan.rank == 0 {
        return store.set("transport", chosen.as_bytes());
    }
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
    Ok(())
}

/// A host's leader joins the leaders' ring (the others: `None`); on failure the host's group
/// is abandoned and, unless interrupted, the others told why.
#[allow(clippy::too_many_arguments)]
fn wire_cross(
    plan: &Plan,
    store: &mut Store,
    group: &mut Group,
    bounds: &[usize],
    host: usize,
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<Option<Ring>> {
    let leaders = &bounds[..bounds.len() - 1];
    if plan.rank != leaders[host] {
        return Ok(None);
    }
    let wired = crate::rendezvous::wire_leaders(
        store,
        host,
        leaders,
        plan.world_size,
        method,
        timeout,
        until,
    );
    wired.map(Some).map_err(|e| {
        if !matches!(e, Error::Interrupted(_)) {
            let _ = store.set("rendezvous_failed", e.to_string().as_bytes());
        }
        group.abandon();
        e
    })
}

/// Why the leader dropped a connection to its socket (logged as a warning; the rank it should
/// have been, if any, times out naming itself).
#[derive(Debug, thiserror::Error)]
pub(super) enum Refused {
    #[error("no peer credentials ({0})")]
    NoCredentials(#[source] io::Error),
    #[error("it is user {0}'s")]
    OtherUser(u32),
    #[error("it does not know this run's secret")]
    NoSecret,
    #[error("rank {0} is not a rank of this host still to come")]
    NotExpected(usize),
    #[error("it closed the connection before its hello")]
    Closed,
    #[error("it said no hello within {} s", HELLO_TIMEOUT.as_secs())]
    Silent,
    #[error("it failed ({0})")]
    Failed(#[source] io::Error),
}

/// Bytes of a joining rank's hello: the run's secret (16) and its rank (4).
pub(super) const HELLO: usize = 20;
pub(super) const HELLO_TIMEOUT: Duration = Duration::from_secs(2);

/// Makes the group of `plan.rank`'s host (`peers`: its ranks), the leader serving the segment
/// to the others.
pub(super) fn join(
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
    let (map, links) = if me == 0 {
        lead(store, peers, until)?
    } else {
        follow(plan, store, peers[0], n, method, timeout, until)?
    };
    Ok(Group::new(
        me,
        peers.to_vec(),
        map,
        links,
        timeout,
        until.stop,
    ))
}

/// The leader makes the segment and its socket, publishes their name and the run's secret under
/// `shm/LEADER`, and serves the segment to the host's other ranks.
fn lead(
    store: &mut Store,
    peers: &[usize],
    until: Until,
) -> Result<(Mapping, Vec<(usize, UnixStream)>)> {
    let leader = peers[0];
    let secret = format!(
        "{:016x}{:016x}",
        crate::rendezvous::random_u64(),
        crate::rendezvous::random_u64()
    );
    let name = format!("shardkit-{}", &secret[..16]);
    let made = make_segment(peers.len()).and_then(|(fd, map)| {
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
    store.set(
        &format!("shm/{leader}"),
        format!("{name} {secret}").as_bytes(),
    )?;
    let links = serve(
        &listener,
        fd.as_fd(),
        &secret.as_bytes()[16..],
        peers,
        store,
        until,
    )?;
    Ok((map, links))
}

/// A rank other than the leader waits for the leader's `shm/LEADER` and fetches the segment.
fn follow(
    plan: &Plan,
    store: &mut Store,
    leader: usize,
    n: usize,
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<(Mapping, Vec<(usize, UnixStream)>)> {
    let key = format!("shm/{leader}");
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
        Ok((map, link)) => Ok((map, vec![(leader, link)])),
        Err(e) => {
            let msg = format!(
                "rank {} cannot map rank {leader}'s shared memory: {e} (use --transport tcp)",
                plan.rank
            );
            let _ = store.set("rendezvous_failed", msg.as_bytes());
            Err(Error::Rendezvous(msg))
        }
    }
}

/// The leader: accepts one connection per other rank of the host, each from a process of this
/// user that says the secret and a rank of the host not yet seen, and passes it the segment.
///
/// Nothing blocks on one connection: hellos are read as they arrive ([`Callers`]), so strangers
/// that connect and say nothing (the socket's name is listed in /proc/net/unix) cost nothing,
/// and the deadline, the stop hook and the others' verdicts are seen every few milliseconds.
pub(super) fn serve(
    listener: &UnixListener,
    fd: BorrowedFd<'_>,
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
                match same_user(&s).and_then(|()| s.set_nonblocking(true).map_err(Refused::Failed))
                {
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
pub(super) const MAX_CALLERS: usize = MAX_LOCAL + 64;

/// Connections to the shared-memory socket (non-blocking) that have not said all of their hello.
#[derive(Default)]
pub(super) struct Callers {
    pub(super) pending: Vec<(UnixStream, Vec<u8>, Instant)>,
}

impl Callers {
    pub(super) fn add(&mut self, s: UnixStream) {
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
    pub(super) fn read(&mut self) -> (Vec<(UnixStream, [u8; HELLO])>, bool) {
        let (mut whole, mut read) = (Vec::new(), false);
        let mut i = 0;
        while i < self.pending.len() {
            let (s, got, since) = &mut self.pending[i];
            let mut buf = [0u8; HELLO];
            let verdict = match (&*s).read(&mut buf[..HELLO - got.len()]) {
                Ok(0) => Err(Refused::Closed),
                Ok(k) => {
                    read = true;
                    got.extend_from_slice(&buf[..k]);
                    Ok(())
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if since.elapsed() > HELLO_TIMEOUT {
                        Err(Refused::Silent)
                    } else {
                        Ok(())
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
                Err(e) => Err(Refused::Failed(e)),
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
pub(super) fn same_user(s: &UnixStream) -> std::result::Result<(), Refused> {
    let uid = peer_uid(s).map_err(Refused::NoCredentials)?;
    // SAFETY: no arguments.
    if uid != unsafe { libc::geteuid() } {
        return Err(Refused::OtherUser(uid));
    }
    Ok(())
}

/// Checks a hello: the run's secret, a rank of the host not yet seen.
pub(super) fn check_hello(
    hello: &[u8; HELLO],
    secret: &[u8],
    peers: &[usize],
    links: &[(usize, UnixStream)],
) -> std::result::Result<usize, Refused> {
    if &hello[..16] != secret {
        return Err(Refused::NoSecret);
    }
    let rank = u32::from_le_bytes(hello[16..].try_into().unwrap()) as usize;
    if !peers[1..].contains(&rank) || links.iter().any(|(r, _)| *r == rank) {
        return Err(Refused::NotExpected(rank));
    }
    Ok(rank)
}

/// A rank other than the leader: connects, says hello, receives and maps the segment.
pub(super) fn fetch(
    name: &str,
    secret: &[u8],
    rank: usize,
    n: usize,
) -> Result<(Mapping, UnixStream)> {
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
