use super::join::{Callers, HELLO, Refused, check_hello, same_user, serve};
use super::reduce::ring_segment;
use super::segment::{make_segment, map_fd, recv_fd, segment_len, send_fd};
use super::wait::{futex_wake, hung_up};
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
    let check = |hello, links: &[(usize, UnixStream)]| check_hello(&hello, &secret, &peers, links);
    assert!(matches!(check(hello(&secret, 3), &[]), Ok(3)));
    let links = vec![(3usize, UnixStream::pair().unwrap().0)];
    let refused = |hello| check(hello, &links).unwrap_err();
    // Each refusal by its kind, and its words as the leader's warning says them.
    let twice = refused(hello(&secret, 3));
    assert!(matches!(twice, Refused::NotExpected(3)), "{twice:?}");
    assert!(twice.to_string().contains("rank 3"), "{twice}");
    let stranger = refused(hello(&secret, 4));
    assert!(
        matches!(stranger, Refused::NotExpected(4)),
        "not a rank of the host: {stranger:?}"
    );
    let leader = refused(hello(&secret, 0));
    assert!(
        matches!(leader, Refused::NotExpected(0)),
        "the leader itself: {leader:?}"
    );
    let other_run = refused(hello(&[8u8; 16], 5));
    assert!(matches!(other_run, Refused::NoSecret), "{other_run:?}");
    assert!(other_run.to_string().contains("secret"), "{other_run}");
    // A process of this user passes the credentials check.
    let (a, _b) = UnixStream::pair().unwrap();
    assert!(matches!(same_user(&a), Ok(())));
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
    let links = serve(&listener, fd.as_fd(), &secret, &[0, 3], &mut store, until).unwrap();
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
    send_fd(&a, fd.as_fd()).unwrap();
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
    let mut g = Group::new(
        2,
        vec![0, 1, 2],
        map,
        vec![(0, b)],
        Duration::from_secs(600),
        crate::never,
    );
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

/// A message waiting on a rank's socket (a shared buffer's descriptor it has not received yet)
/// is not its peer hanging up; a closed peer is, with or without a message left unread.
#[test]
fn a_waiting_message_is_not_a_hang_up_and_a_closed_peer_is() {
    let (a, b) = UnixStream::pair().unwrap();
    assert!(!hung_up(&b));
    let file = tempfile::tempfile().unwrap();
    send_fd(&a, file.as_fd()).unwrap();
    assert!(!hung_up(&b), "a message waiting");
    drop(a);
    assert!(hung_up(&b), "closed, the message still there");
    let (a, b) = UnixStream::pair().unwrap();
    drop(a);
    assert!(hung_up(&b), "closed");
}
