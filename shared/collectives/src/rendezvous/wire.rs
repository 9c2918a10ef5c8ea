//! Wiring the ring once the store is up: every rank publishes its ring address, connects to the
//! next rank and accepts the previous one, whose hello (the run's token, its rank and the world
//! size) tells it from strangers.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::{InitMethod, Plan, Until, random_u64, same_run, wait_for_ranks};
use crate::ring::Ring;
use crate::store::Store;
use crate::{Error, Result};

/// Publishes this rank's host identity and ring address, waits for everyone's, connects to the
/// next rank and accepts the previous one.
pub(super) fn wire(
    plan: &Plan,
    store: &mut Store,
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<(Ring, crate::host::Hosts)> {
    let (rank, world) = (plan.rank, plan.world_size);
    same_run(plan, store, method, timeout, until)?;
    // Two processes given the same rank would otherwise wire a ring that deadlocks. (So one
    // communicator per process and store: a second would claim its rank again.)
    if store.add(&format!("{}{rank}", crate::store::CLAIM), 1)? > 1 {
        return Err(Error::Rendezvous(format!(
            "another process already joined as rank {rank} ({method}): each rank must be given once"
        )));
    }
    if rank == 0 {
        store.set("world_size", world.to_string().as_bytes())?;
        store.set("ring_nonce", format!("{:016x}", random_u64()).as_bytes())?;
    }
    // Bound to the address this rank advertises (the one its store connection leaves from),
    // not to every interface: only the network the ranks share can reach the ring port.
    let (listener, me) = listen(store, "ring listener")?;
    crate::host::publish(store, rank)?;
    store.set(&format!("addr/{rank}"), me.as_bytes())?;

    let keys: Vec<(String, usize)> = (0..world).map(|r| (format!("addr/{r}"), r)).collect();
    wait_for_ranks(store, &keys, world, method, timeout, until)?;
    let theirs = String::from_utf8_lossy(&store.get("world_size")?).into_owned();
    if theirs != world.to_string() {
        return Err(Error::Mismatch(format!(
            "rank 0 runs a world of {theirs} ranks but rank {rank} was told {world}"
        )));
    }
    let nonce =
        u64::from_str_radix(&String::from_utf8_lossy(&store.get("ring_nonce")?), 16).unwrap_or(0);
    let hosts = crate::host::gather(store, world)?;

    let next = (rank + 1) % world;
    let prev = (rank + world - 1) % world;
    let next_addr = String::from_utf8_lossy(&store.get_now(&format!("addr/{next}"))?).into_owned();
    let prev_addr = String::from_utf8_lossy(&store.get_now(&format!("addr/{prev}"))?).into_owned();
    let (to_next, from_prev) = link(
        &listener,
        (nonce, rank, world),
        (&next_addr, prev, &prev_addr),
        "ring hello",
        until,
        |e| format!("cannot connect to rank {next} at {next_addr}: {e}"),
        |e| format!("rank {prev} (previous in the ring) never connected to rank {rank}: {e}"),
    )?;
    Ok((
        Ring::new(rank, world, to_next, from_prev, timeout, until.stop)?,
        hosts,
    ))
}

/// A listener on the address this rank's store connection leaves from (only the network the
/// ranks share reaches it), and that address.
fn listen(store: &Store, what: &'static str) -> Result<(TcpListener, String)> {
    let ip = store.local_ip();
    let listener = TcpListener::bind((ip, 0)).map_err(Error::io(what))?;
    let port = listener.local_addr().map_err(Error::io(what))?.port();
    Ok((listener, std::net::SocketAddr::new(ip, port).to_string()))
}

/// Member `at` of a ring of `count` connects to the next one (at `next_addr`) and says its
/// hello (`hello_what` names a failure to), then accepts the previous one's (member `prev`, at
/// `prev_addr`); a failure other than an interruption is a rendezvous error in the words of
/// `next_failed` or `prev_failed`.
#[allow(clippy::too_many_arguments)]
fn link(
    listener: &TcpListener,
    (nonce, at, count): (u64, usize, usize),
    (next_addr, prev, prev_addr): (&str, usize, &str),
    hello_what: &'static str,
    until: Until,
    next_failed: impl Fn(&Error) -> String,
    prev_failed: impl Fn(&Error) -> String,
) -> Result<(TcpStream, TcpStream)> {
    let named = |e: Error, says: &dyn Fn(&Error) -> String| match e {
        Error::Interrupted(_) => e,
        e => Error::Rendezvous(says(&e)),
    };
    let mut to_next = connect_retry(next_addr, until).map_err(|e| named(e, &next_failed))?;
    to_next
        .write_all(&hello(nonce, at, count))
        .map_err(Error::io(hello_what))?;
    let from_prev = accept_prev(listener, nonce, prev, prev_addr, count, until)
        .map_err(|e| named(e, &prev_failed))?;
    Ok((to_next, from_prev))
}

/// Wires the ring of the hosts' leaders (hierarchical transport, [`crate::shm`]): host
/// `host`'s leader (global rank `leaders[host]`) publishes an address of its own, connects to
/// host `host + 1`'s leader and accepts host `host − 1`'s, whose hello carries the run's token
/// (altered, so that no hello of the ranks' ring passes here), its host number and the number of
/// hosts. Messages name the leaders by their global ranks.
pub(crate) fn wire_leaders(
    store: &mut Store,
    host: usize,
    leaders: &[usize],
    world: usize,
    method: &InitMethod,
    timeout: Duration,
    until: Until,
) -> Result<Ring> {
    let hosts = leaders.len();
    let me = leaders[host];
    let (listener, addr) = listen(store, "leaders' ring listener")?;
    store.set(&format!("leader_addr/{host}"), addr.as_bytes())?;
    let keys: Vec<(String, usize)> = (0..hosts)
        .map(|g| (format!("leader_addr/{g}"), leaders[g]))
        .collect();
    wait_for_ranks(store, &keys, world, method, timeout, until)?;
    let nonce = u64::from_str_radix(&String::from_utf8_lossy(&store.get("ring_nonce")?), 16)
        .unwrap_or(0)
        ^ LEADERS;
    let (next, prev) = ((host + 1) % hosts, (host + hosts - 1) % hosts);
    let addr = |g: usize, store: &mut Store| -> Result<String> {
        Ok(String::from_utf8_lossy(&store.get_now(&format!("leader_addr/{g}"))?).into_owned())
    };
    let (next_addr, prev_addr) = (addr(next, store)?, addr(prev, store)?);
    let (next_rank, prev_rank) = (leaders[next], leaders[prev]);
    let (to_next, from_prev) = link(
        &listener,
        (nonce, host, hosts),
        (&next_addr, prev, &prev_addr),
        "leaders' ring hello",
        until,
        |e| {
            format!(
                "rank {me} cannot connect to rank {next_rank} (the next host's leader) at \
                 {next_addr}: {e}"
            )
        },
        |e| {
            format!(
                "rank {prev_rank} (the previous host's leader) never connected to rank {me}: {e}"
            )
        },
    )?;
    Ok(
        Ring::new(host, hosts, to_next, from_prev, timeout, until.stop)?
            .with_names(leaders.to_vec()),
    )
}

/// XORed into the run's token for the leaders' ring ("leaders" in ASCII).
const LEADERS: u64 = 0x006c_6561_6465_7273;

/// The rank field of a probe: a connection that only checks the port is open, dropped quietly.
const PROBE: usize = u32::MAX as usize;

fn hello(nonce: u64, rank: usize, world: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&nonce.to_le_bytes());
    h[8..12].copy_from_slice(&(rank as u32).to_le_bytes());
    h[12..].copy_from_slice(&(world as u32).to_le_bytes());
    h
}

/// Connects to the next rank's ring port. Its listener was bound before its address was
/// published, so a refused connection means the rank has gone: said at once, not at the deadline.
fn connect_retry(addr: &str, until: Until) -> Result<TcpStream> {
    loop {
        let sa = crate::store::resolve(addr)?;
        match TcpStream::connect_timeout(&sa[0], Duration::from_secs(5)) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Err(Error::Rendezvous(format!(
                    "it has gone: its ring port refuses connections ({e})"
                )));
            }
            Err(e) if until.passed() => return Err(Error::io("ring connection")(e)),
            Err(_) => {
                until.check(|| format!("connecting to the next rank at {addr}"))?;
                std::thread::sleep(Duration::from_millis(50))
            }
        }
    }
}

/// How long a connection to the ring port may take to say its 16-byte hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections waiting to say hello at once; past that the oldest is dropped.
const MAX_PENDING_HELLOS: usize = 64;

/// Accepts connections until one says hello as `prev` of this run (the run's token from the
/// store, the rank and the world size). Nothing blocks: connections are accepted and read
/// without waiting ([`Hellos`]), so a stranger's silent connections cost nothing, and the
/// deadline and the stop hook are seen every few milliseconds. The previous rank is alive while
/// its own ring port (bound before it published its address, closed only after it connected
/// here) accepts connections: probed every [`PROBE_EVERY`]; once refused, its hello has
/// [`HELLO_TIMEOUT`] to arrive before it is declared gone.
fn accept_prev(
    listener: &TcpListener,
    nonce: u64,
    prev: usize,
    prev_addr: &str,
    world: usize,
    until: Until,
) -> Result<TcpStream> {
    let io = &Error::io("ring listener");
    listener.set_nonblocking(true).map_err(io)?;
    let mut hellos = Hellos {
        want: hello(nonce, prev, world),
        probe: hello(nonce, PROBE, world),
        prev,
        pending: Vec::new(),
    };
    let mut probed = Instant::now();
    let mut gone_since: Option<Instant> = None;
    loop {
        let mut busy = false;
        match listener.accept() {
            Ok((stream, peer)) => {
                stream.set_nonblocking(true).map_err(io)?;
                hellos.add(stream, peer);
                busy = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(io(e)),
        }
        let (found, read) = hellos.read();
        if let Some(stream) = found {
            stream.set_nonblocking(false).map_err(io)?;
            return Ok(stream);
        }
        if gone_since.is_some_and(|t| t.elapsed() > HELLO_TIMEOUT) {
            return Err(Error::Rendezvous(format!(
                "it has gone: its ring port at {prev_addr} refuses connections"
            )));
        }
        if gone_since.is_none() && probed.elapsed() > PROBE_EVERY {
            probed = Instant::now();
            if probe_refused(prev_addr, &hellos.probe) {
                gone_since = Some(Instant::now());
            }
        }
        if until.passed() {
            return Err(Error::Rendezvous("timed out".into()));
        }
        until.check(|| format!("waiting for rank {prev} to connect"))?;
        if !(busy || read) {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Connections to the ring port that have not said all of their 16-byte hello yet.
struct Hellos {
    /// The previous rank's hello.
    want: [u8; 16],
    /// A probe's hello (dropped quietly).
    probe: [u8; 16],
    prev: usize,
    pending: Vec<Pending>,
}

struct Pending {
    stream: TcpStream,
    peer: std::net::SocketAddr,
    got: Vec<u8>,
    since: Instant,
}

impl Hellos {
    /// A new connection (non-blocking); past [`MAX_PENDING_HELLOS`] the oldest is dropped.
    fn add(&mut self, stream: TcpStream, peer: std::net::SocketAddr) {
        if self.pending.len() == MAX_PENDING_HELLOS {
            let oldest = self.pending.remove(0);
            log::warn!(
                "dropped a connection to the ring port from {} (too many unannounced ones)",
                oldest.peer
            );
        }
        self.pending.push(Pending {
            stream,
            peer,
            got: Vec::with_capacity(16),
            since: Instant::now(),
        });
    }

    /// Reads what each connection has sent: the previous rank's stream once its hello is whole,
    /// and whether anything arrived. A connection whose hello is not this run's is dropped and
    /// named in a warning, one that says nothing within [`HELLO_TIMEOUT`] too; a probe quietly.
    fn read(&mut self) -> (Option<TcpStream>, bool) {
        use std::io::Read;
        let mut read = false;
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            let mut buf = [0u8; 16];
            let left = self.want.len() - p.got.len();
            let verdict = match p.stream.read(&mut buf[..left]) {
                Ok(0) => Err("closed it before saying who it is"),
                Ok(n) => {
                    read = true;
                    p.got.extend_from_slice(&buf[..n]);
                    Ok(())
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if p.since.elapsed() > HELLO_TIMEOUT {
                        Err("said nothing within 2 s")
                    } else {
                        Ok(())
                    }
                }
                Err(_) => Err("failed"),
            };
            let whole = p.got.len() == self.want.len();
            match verdict {
                Ok(()) if whole && p.got == self.want => {
                    return (Some(self.pending.swap_remove(i).stream), read);
                }
                Ok(()) if whole && p.got == self.probe => {
                    self.pending.swap_remove(i);
                }
                Ok(()) if whole => self.drop_one(
                    i,
                    "presented a handshake that is not this run's rank, world size and token",
                ),
                Ok(()) => i += 1,
                Err(why) => self.drop_one(i, why),
            }
        }
        (None, read)
    }

    fn drop_one(&mut self, i: usize, why: &str) {
        let p = self.pending.swap_remove(i);
        log::warn!(
            "dropped a connection to the ring port from {}: it {why} (waiting for rank {})",
            p.peer,
            self.prev
        );
    }
}

/// How often a rank waiting for its previous rank checks that it is still there.
const PROBE_EVERY: Duration = Duration::from_millis(500);

/// Whether `addr` refuses a connection (its listener is gone); an open one gets `probe` (which
/// the listener drops quietly) and is closed.
fn probe_refused(addr: &str, probe: &[u8; 16]) -> bool {
    let Ok(sa) = crate::store::resolve(addr) else {
        return false;
    };
    match TcpStream::connect_timeout(&sa[0], Duration::from_secs(1)) {
        Ok(mut s) => {
            let _ = s.write_all(probe);
            false
        }
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionRefused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::never;

    #[test]
    fn strangers_on_the_ring_port_neither_delay_the_real_rank_nor_the_stop() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // The previous rank's own ring port, open all along (it is alive).
        let prev_port = TcpListener::bind("127.0.0.1:0").unwrap();
        let live = prev_port.local_addr().unwrap().to_string();
        // 60 silent connections and one with another run's hello, then the real previous rank.
        let silent: Vec<TcpStream> = (0..60).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut stranger = TcpStream::connect(addr).unwrap();
        stranger.write_all(&hello(7, 1, 3)).unwrap();
        let mut real = TcpStream::connect(addr).unwrap();
        real.write_all(&hello(42, 1, 3)).unwrap();
        let t0 = Instant::now();
        let until = Until::new(Duration::from_secs(600), never);
        let mut got = accept_prev(&listener, 42, 1, &live, 3, until).unwrap();
        // Each silent connection had a blocking 5 s read before: five minutes here.
        crate::tests::assert_ended_within_120s(t0);
        // The stream returned is the real rank's.
        real.write_all(b"r").unwrap();
        got.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut b = [0u8; 1];
        std::io::Read::read_exact(&mut got, &mut b).unwrap();
        assert_eq!(&b, b"r");
        drop(silent);

        // A stop request ends the wait within a second, whatever waits on the port.
        static STOP: AtomicBool = AtomicBool::new(false);
        let _more: Vec<TcpStream> = (0..12).map(|_| TcpStream::connect(addr).unwrap()).collect();
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            STOP.store(true, Ordering::SeqCst);
        });
        let t0 = Instant::now();
        let until = Until::new(Duration::from_secs(600), || STOP.load(Ordering::SeqCst));
        let e = accept_prev(&listener, 42, 1, &live, 3, until).unwrap_err();
        assert!(matches!(e, Error::Interrupted(_)), "{e}");
        crate::tests::assert_ended_within_120s(t0);
    }

    #[test]
    fn a_previous_or_next_rank_that_has_gone_is_named_at_once_not_at_the_deadline() {
        // A rank that died after publishing its ring address: its port refuses connections.
        let (_held, gone) = testkit::refusing_port();
        let gone = gone.to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let t0 = Instant::now();
        let e = accept_prev(
            &listener,
            42,
            1,
            &gone,
            3,
            Until::new(Duration::from_secs(600), never),
        )
        .unwrap_err()
        .to_string();
        // It waited for the whole --dist-timeout-secs before (the killed-rank test's flake).
        crate::tests::assert_ended_within_120s(t0);
        assert!(e.contains("has gone") && e.contains(&gone), "{e}");
        let t0 = Instant::now();
        let e = connect_retry(&gone, Until::new(Duration::from_secs(600), never))
            .unwrap_err()
            .to_string();
        crate::tests::assert_ended_within_120s(t0);
        assert!(e.contains("has gone"), "{e}");
        // A live previous rank that connects after being probed is accepted, the probes unseen.
        let prev_port = TcpListener::bind("127.0.0.1:0").unwrap();
        let live = prev_port.local_addr().unwrap().to_string();
        let addr = listener.local_addr().unwrap();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1500));
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&hello(42, 1, 3)).unwrap();
            s
        });
        accept_prev(
            &listener,
            42,
            1,
            &live,
            3,
            Until::new(Duration::from_secs(60), never),
        )
        .unwrap();
        drop(late.join().unwrap());
        drop(prev_port);
    }
}
