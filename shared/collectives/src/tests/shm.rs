//! Multi-rank tests of the shared-memory transport (one thread per rank): bit identity with the
//! TCP ring over the slots and the direct reads, the direct reads' verdict and failures, ranks
//! out of step, dying, stopped, and on several hosts.

use super::*;

/// Runs `f` on `world` ranks over shared memory reading the others' buffers directly (even
/// where the ranks outnumber the cores and would not), then through the segment's slots, then
/// over the TCP ring (store keys under `name`-direct/, `name`-slots/ and `name`-tcp/; the
/// transport checked by name), and asserts that every rank of a run returns the same buffers and that the
/// three return the same bits, buffer by buffer.
fn same_bits_over_both_transports(
    name: &str,
    world: usize,
    timeout: Duration,
    f: impl Fn(usize, &mut Communicator) -> Vec<Vec<u8>> + Send + Sync + Clone + 'static,
) {
    let mut got: Vec<Vec<Vec<u8>>> = Vec::new();
    let ways = [
        ("direct", Transport::Shm, Some(true)),
        ("slots", Transport::Shm, Some(false)),
        ("tcp", Transport::Tcp, None),
    ];
    for (way, transport, direct) in ways {
        let prefix: &'static str = Box::leak(format!("{name}-{way}/").into_boxed_str());
        let f = f.clone();
        let res = ranks_over(
            prefix,
            world,
            timeout,
            transport,
            never,
            move |rank, comm| {
                let mut comm = comm.unwrap();
                assert_eq!(comm.transport(), transport.to_string());
                if let Some(g) = comm.joined.shm.as_mut() {
                    g.set_direct(direct);
                }
                f(rank, &mut comm)
            },
        );
        for r in 1..world {
            assert!(res[r] == res[0], "{way}: rank {r} differs from rank 0");
        }
        got.push(res.into_iter().next().unwrap());
    }
    for (way, other) in [("slots", &got[1]), ("tcp", &got[2])] {
        for (i, (a, b)) in got[0].iter().zip(other).enumerate() {
            assert!(
                a == b,
                "{name}, world {world}, buffer {i}: direct reads and {way} differ"
            );
        }
    }
}

/// Two ranks (threads of one process) over shared memory: each runs `prepare`, then sums
/// `values` of `n` doubles; returns per rank whether it read the other directly before and
/// after the sum ([`crate::shm`]'s verdict) and the sum's largest error.
fn two_ranks_direct(
    prefix: &'static str,
    n: i64,
    prepare: fn(usize, &mut Communicator),
) -> Vec<(Option<bool>, Option<bool>, f64)> {
    ranks_over(
        prefix,
        2,
        Duration::from_secs(60),
        Transport::Shm,
        never,
        move |rank, comm| {
            let mut comm = comm.unwrap();
            prepare(rank, &mut comm);
            let verdict = |c: &Communicator| c.joined.shm.as_ref().unwrap().direct();
            let before = verdict(&comm);
            let mut t = values(rank, n);
            comm.all_reduce(&mut t, ReduceOp::Sum).unwrap();
            let diff = max_diff(&t, &expected(2, n, ReduceOp::Sum));
            (before, verdict(&comm), diff)
        },
    )
}

/// Two ranks find at their first all-reduce of a few MiB that they can read each other's
/// memory, both the same, where the cores are as many as the ranks (else both keep the slots),
/// and reduce exactly; a smaller all-reduce before it does not ask.
#[test]
fn ranks_that_can_read_each_other_do_so_where_they_have_a_core_each() {
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let res = two_ranks_direct(
        "direct/",
        (3 * crate::shm::SLOT / 8) as i64,
        |rank, comm| {
            let mut small = values(rank, 1000);
            comm.all_reduce(&mut small, ReduceOp::Max).unwrap();
        },
    );
    for (rank, (before, after, diff)) in res.iter().enumerate() {
        assert_eq!(*before, None, "rank {rank}");
        assert_eq!(*after, Some(cores >= 2), "rank {rank}");
        assert_eq!(*diff, 0.0, "rank {rank}");
    }
}

/// Ranks that cannot read each other's memory (here one rank's token reads back wrong, as
/// from a process in another PID namespace would) agree at their first all-reduce of a few MiB
/// to keep the segment's slots, both the same, and reduce exactly.
#[test]
fn ranks_that_cannot_read_each_other_keep_the_slots() {
    let n = (2 * crate::shm::SLOT / 8 + 77) as i64;
    let res = two_ranks_direct("no-direct/", n, |rank, comm| {
        if rank == 1 {
            comm.joined.shm.as_ref().unwrap().spoil_token();
        }
    });
    for (rank, (_, after, diff)) in res.iter().enumerate() {
        assert_eq!(*after, Some(false), "rank {rank}");
        assert_eq!(*diff, 0.0, "rank {rank}");
    }
}

/// Polls `cond` every millisecond for up to a minute (then fails naming `what`).
fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "waited a minute for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Direct reads over 3 ranks: rank 0, about to read rank 1's buffer, finds in the segment that
/// rank 2 was killed (as a rank that saw it go writes), and rank 1's process gone (it exited on
/// that news). Every rank names rank 2, the cause, not rank 1.
#[test]
fn direct_reads_name_the_rank_that_was_killed_not_one_that_left_after_it() {
    let n = (3 * crate::shm::SLOT / 4) as i64;
    let res = ranks_over(
        "direct-blame/",
        3,
        Duration::from_secs(600),
        Transport::Shm,
        never,
        move |rank, comm| {
            let mut comm = comm.unwrap();
            let g = comm.joined.shm.as_mut().unwrap();
            g.set_direct(Some(true));
            if rank == 0 {
                g.before_each_read(|g, j| {
                    if j == 1 {
                        g.say_killed(2);
                        // No process has this id (above any pid_max): ESRCH.
                        g.set_pid_of(1, 0x7fff_fff0);
                    }
                });
            }
            let mut t = values(rank, n);
            comm.all_reduce(&mut t, ReduceOp::Sum).unwrap_err()
        },
    );
    for (rank, e) in res.iter().enumerate() {
        assert!(matches!(e, Error::Peer { rank: 2, .. }), "rank {rank}: {e}");
    }
}

/// Direct reads over 2 ranks: rank 0 is stopped (SIGINT in the tools) in its last wait, its
/// part done, while rank 1 has yet to copy rank 0's reduced segment out of rank 0's buffer;
/// rank 0's caller then reuses that buffer (`reused`), or it is unmapped, and leaves. Rank 1
/// returns no values read after that: it fails with rank 0's stop, as over the slots.
#[test]
fn a_rank_stopped_in_its_last_wait_is_not_read_after_it_returns() {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    static STOP: AtomicBool = AtomicBool::new(false);
    static RETURNED: AtomicBool = AtomicBool::new(false);
    static ONE_RETURNED: AtomicBool = AtomicBool::new(false);
    thread_local!(static RANK0: Cell<bool> = const { Cell::new(false) });
    fn stop() -> bool {
        RANK0.with(|r| r.get()) && STOP.load(SeqCst)
    }
    // Doubles: one step of the ring's segment per rank.
    let n = (2 * crate::shm::SLOT / 8) as i64;
    for reused in [false, true] {
        STOP.store(false, SeqCst);
        RETURNED.store(false, SeqCst);
        ONE_RETURNED.store(false, SeqCst);
        let prefix = if reused {
            "direct-left-reused/"
        } else {
            "direct-left-unmapped/"
        };
        let res = ranks_over(
            prefix,
            2,
            Duration::from_secs(600),
            Transport::Shm,
            stop,
            move |rank, comm| {
                let mut comm = comm.unwrap();
                let g = comm.joined.shm.as_mut().unwrap();
                g.set_direct(Some(true));
                if rank == 0 {
                    RANK0.with(|r| r.set(true));
                    // Folds only once rank 1 has folded: rank 1 then waits for its fold.
                    g.before_each_read(|g, _| {
                        wait_until("rank 1's fold", || g.folded_and_done(1).0 != 0)
                    });
                } else {
                    g.before_each_read(|g, _| {
                        // Its own fold done, this is the copy out of rank 0's segment: once
                        // rank 0 has done its part, it is stopped and returns.
                        if g.folded_and_done(1).0 != 0 && !STOP.load(SeqCst) {
                            wait_until("rank 0's part", || g.folded_and_done(0).1 != 0);
                            STOP.store(true, SeqCst);
                            wait_until("rank 0 to return", || RETURNED.load(SeqCst));
                        }
                    });
                }
                let mut t = values(rank, n);
                let r = comm.all_reduce(&mut t, ReduceOp::Sum);
                if rank == 1 {
                    ONE_RETURNED.store(true, SeqCst);
                    return r.map(|()| max_diff(&t, &expected(2, n, ReduceOp::Sum)));
                }
                let e = r.unwrap_err();
                assert!(matches!(e, Error::Interrupted(_)), "rank 0: {e}");
                if reused {
                    let _ = t.fill_(1e6);
                } else {
                    // As if unmapped: nothing is mapped at the first page.
                    comm.joined.shm.as_ref().unwrap().set_buffer_of(0, 8);
                }
                RETURNED.store(true, SeqCst);
                if !reused {
                    // A caller slow to leave: rank 1 waits for its reason (given up after 2 s,
                    // which only makes a rank 1 that does not wait harder to catch).
                    let t0 = Instant::now();
                    while !ONE_RETURNED.load(SeqCst) && t0.elapsed() < Duration::from_secs(2) {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                comm.leave("interrupted (test)");
                Err(e)
            },
        );
        match &res[1] {
            Err(Error::PeerStopped { rank: 0, why }) => assert_eq!(why, "interrupted (test)"),
            other => panic!("reused {reused}: rank 1 returned {other:?}"),
        }
    }
}

/// Makes this thread's `process_vm_readv` fail with EPERM (a seccomp filter, as a sandbox
/// that refuses cross-memory attach installs; it applies to this thread only).
fn refuse_cross_memory_attach() {
    let code = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let mut filter = [
        // Load the system call's number (seccomp_data.nr, at 0).
        code((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_process_vm_readv as u32,
        },
        code(
            (libc::BPF_RET | libc::BPF_K) as u16,
            libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        ),
        code(
            (libc::BPF_RET | libc::BPF_K) as u16,
            libc::SECCOMP_RET_ALLOW,
        ),
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: prctl with a valid filter program, for this thread.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "seccomp: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// A rank whose sandbox refuses `process_vm_readv` (seccomp) before the first all-reduce of a
/// few MiB: both ranks keep the slots and reduce exactly. Refused only after the ranks agreed
/// on direct reads (a sandbox entered mid-run): both fail at once naming a rank, no hang.
#[test]
fn a_sandbox_that_refuses_cross_memory_attach_keeps_the_slots_or_fails_at_once() {
    let n = (2 * crate::shm::SLOT / 8 + 77) as i64;
    let res = two_ranks_direct("seccomp/", n, |rank, _| {
        if rank == 1 {
            refuse_cross_memory_attach();
        }
    });
    for (rank, (_, after, diff)) in res.iter().enumerate() {
        assert_eq!(*after, Some(false), "rank {rank}");
        assert_eq!(*diff, 0.0, "rank {rank}");
    }
    let t0 = Instant::now();
    let res = ranks_over(
        "seccomp-late/",
        2,
        Duration::from_secs(600),
        Transport::Shm,
        never,
        move |rank, comm| {
            let mut comm = comm.unwrap();
            comm.joined.shm.as_mut().unwrap().set_direct(Some(true));
            let mut t = values(rank, n);
            comm.all_reduce(&mut t, ReduceOp::Sum).unwrap();
            if rank == 1 {
                refuse_cross_memory_attach();
            }
            comm.all_reduce(&mut t, ReduceOp::Sum).unwrap_err()
        },
    );
    assert!(
        t0.elapsed() < Duration::from_secs(120),
        "{:?}",
        t0.elapsed()
    );
    for (rank, e) in res.iter().enumerate() {
        assert!(matches!(e, Error::Peer { .. }), "rank {rank}: {e}");
    }
    // The refused rank says that it could not read the other, and that this changed.
    let refused = res[1].to_string();
    assert!(
        refused.contains("could not be read directly by rank 1 any more (Operation not permitted")
            && refused.contains("since"),
        "{refused}"
    );
}

/// Every float dtype and op over 3 and 4 ranks, through shared memory and through the TCP
/// ring, on a small buffer and one of two chunks, both of odd length: the same bits (tolerance 0: both sum in
/// the ring's order, documented in shm.rs).
#[test]
fn shared_memory_and_the_tcp_ring_give_bit_identical_results() {
    let kinds = [Kind::Float, Kind::Double, Kind::BFloat16, Kind::Half];
    let n = (crate::shm::SLOT / 2 + 12_345) as i64; // > one slot even for 2-byte types
    for world in [3usize, 4] {
        same_bits_over_both_transports(
            "bits",
            world,
            Duration::from_secs(60),
            move |rank, comm| {
                let mut out = Vec::new();
                // Reduced whole by every rank, and in chunks split among the ranks.
                for len in [1001, n as usize] {
                    for kind in kinds {
                        for op in ReduceOp::ALL {
                            let mut t = noise(rank, len, kind);
                            comm.all_reduce(&mut t, op).unwrap();
                            out.push(bytes_of(&t));
                        }
                    }
                }
                let mut b = if rank == 1 {
                    noise(9, n as usize, Kind::Float)
                } else {
                    Tensor::zeros([n], (Kind::Float, Device::Cpu))
                };
                comm.broadcast(&mut b, 1).unwrap();
                out.push(bytes_of(&b));
                out
            },
        );
    }
}

/// One group through buffers on both sides of the sizes that read the others directly (1 to 16
/// MiB): exactly 1 MiB and 16 MiB, 4 bytes under and over them, odd element counts, half
/// floats, 64-bit integers and doubles, every op, in an order that goes from direct reads to
/// the slots and back (the progress words and sets reused across both): the same bits as
/// the slots alone and the TCP ring (tolerance 0: the same sums in the same order).
#[test]
fn sizes_around_the_direct_reads_window_keep_the_rings_bits() {
    const MIB: usize = 1 << 20;
    // (bytes, kind): element counts are bytes / the kind's size.
    let sizes: [(usize, Kind); 9] = [
        (MIB, Kind::Float),
        (16 * MIB + 4, Kind::Float),
        (MIB - 2, Kind::Half),
        (16 * MIB, Kind::Int64),
        (MIB + 6, Kind::Half),
        (300 << 10, Kind::Double),
        (3 * MIB + 8 * 7, Kind::Double),
        (1000, Kind::Float),
        (MIB, Kind::Int64),
    ];
    same_bits_over_both_transports("window", 3, Duration::from_secs(120), move |rank, comm| {
        let mut out = Vec::new();
        for (i, (bytes, kind)) in sizes.into_iter().enumerate() {
            let len = bytes / kind.elt_size_in_bytes();
            // Every op on the smaller buffers; sum and max where they are 16 MiB.
            let ops: &[ReduceOp] = if bytes > 8 * MIB {
                &[ReduceOp::Sum, ReduceOp::Max]
            } else {
                &ReduceOp::ALL
            };
            for &op in ops {
                let mut t = noise(rank * 100 + i, len, kind);
                if kind == Kind::Int64 {
                    t = noise(rank * 100 + i, len, Kind::Double) * 1e6;
                    t = t.to_kind(Kind::Int64);
                }
                comm.all_reduce(&mut t, op).unwrap();
                out.push(bytes_of(&t));
            }
        }
        out
    });
}

/// Max and min of zeros of both signs and NaNs of different payloads, where the result's bits
/// depend on which operand a step takes (max(+0, −0) is the second; a NaN wins, the first of
/// two): every transport folds in the same order with the same operands, so 2, 3 and 4 ranks
/// give the ring's bits over the slots and the direct reads too, on a buffer reduced whole, one
/// of several chunks, and one in the direct reads' sizes. (Not sums: which NaN's payload a sum
/// of two NaNs keeps is the compiler's choice, which Rust leaves unspecified.)
#[test]
fn signed_zeros_and_nan_payloads_keep_the_rings_bits() {
    fn tricky(rank: usize, len: usize) -> Tensor {
        let v: Vec<f32> = (0..len)
            .map(|e| match (e + rank * 3) % 5 {
                0 => 0.0,
                1 => -0.0,
                2 => f32::from_bits(0x7fc0_0000 | (rank as u32 + 1)),
                3 => f32::from_bits(0xffc0_0100 | (e as u32 & 0xff)),
                _ => (e % 7) as f32 - 3.0,
            })
            .collect();
        Tensor::from_slice(&v)
    }
    let lens = [
        999,
        crate::shm::SLOT / 4 + 1_234,
        5 * crate::shm::SLOT / 4 + 77,
    ];
    for world in [2usize, 3, 4] {
        same_bits_over_both_transports(
            "zeros",
            world,
            Duration::from_secs(60),
            move |rank, comm| {
                let mut out = Vec::new();
                for len in lens {
                    for op in [ReduceOp::Max, ReduceOp::Min] {
                        let mut t = tricky(rank, len);
                        comm.all_reduce(&mut t, op).unwrap();
                        out.push(bytes_of(&t));
                    }
                }
                out
            },
        );
    }
}

/// Many chunks in a row through shared memory, the ranks out of step (each pauses before some
/// of its calls, for a time of its own), with small all-reduces and broadcasts between the large
/// ones: every result holds the TCP ring's bits (tolerance 0: the
/// same sums in the same order), and no chunk is overwritten while a slower rank still reads it.
#[test]
fn ranks_out_of_step_through_many_chunks_keep_the_rings_bits() {
    // Twice as many chunks as the segment has sets, plus an odd tail.
    let big = 2 * crate::shm::SETS * crate::shm::SLOT / 4 + 4_321;
    let world = 3;
    same_bits_over_both_transports(
        "steps",
        world,
        Duration::from_secs(120),
        move |rank, comm| {
            let mut out = Vec::new();
            for round in 0..4usize {
                if (rank + round) % 3 == 0 {
                    std::thread::sleep(Duration::from_millis(20 * (rank as u64 + 1)));
                }
                let mut t = noise(rank * 10 + round, big, Kind::Float);
                comm.all_reduce(&mut t, ReduceOp::Sum).unwrap();
                out.push(bytes_of(&t));
                let mut s = noise(rank * 10 + round, 999, Kind::Float);
                comm.all_reduce(&mut s, ReduceOp::Avg).unwrap();
                out.push(bytes_of(&s));
                let mut b = noise(round, big / 3, Kind::Float);
                comm.broadcast(&mut b, round % world).unwrap();
                out.push(bytes_of(&b));
            }
            out
        },
    );
}

/// A rank whose process ends mid-run (its communicator dropped: its sockets close and its
/// mapping goes) fails the others' shared-memory collective naming it, the leader or not, long
/// before the 600 s deadline.
#[test]
fn a_rank_that_dies_is_named_over_shared_memory() {
    let big = 3_000_000;
    the_others_name_a_rank_that_dies("shm-dies0/", (3, 0), Transport::Shm, true, big);
    the_others_name_a_rank_that_dies("shm-dies2/", (3, 2), Transport::Shm, true, big);
}

/// The stop hook (SIGINT/SIGTERM in the tools) ends a shared-memory wait at once.
#[test]
fn a_stop_request_ends_a_shared_memory_wait() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static STOP: AtomicBool = AtomicBool::new(false);
    let t0 = Instant::now();
    let res = ranks_over(
        "shm-stop/",
        2,
        Duration::from_secs(600),
        Transport::Shm,
        || STOP.load(Ordering::SeqCst),
        |rank, comm| {
            let mut comm = comm.unwrap();
            comm.barrier().unwrap();
            if rank == 0 {
                // Never joins the collective; asks the other to stop once it waits.
                std::thread::sleep(Duration::from_millis(300));
                STOP.store(true, Ordering::SeqCst);
                return None;
            }
            let mut t = Tensor::ones([10], (Kind::Float, Device::Cpu));
            Some(comm.all_reduce(&mut t, ReduceOp::Sum).unwrap_err())
        },
    );
    assert!(
        matches!(res[1], Some(Error::Interrupted(_))),
        "{:?}",
        res[1]
    );
    assert!(t0.elapsed() < Duration::from_secs(120));
}

/// Ranks given different transports refuse at the rendezvous instead of waiting on each other.
#[test]
fn ranks_given_different_transports_refuse_naming_the_flag() {
    let server = StoreServer::bind("127.0.0.1:0").unwrap();
    let port = server.addr().port();
    let hs: Vec<_> = [Transport::Tcp, Transport::Shm]
        .into_iter()
        .enumerate()
        .map(|(rank, transport)| {
            std::thread::spawn(move || {
                let plan = test_plan(rank, 2, None, port, "mixed2/");
                let opts = Options {
                    timeout: Duration::from_secs(60),
                    transport,
                    ..Options::default()
                };
                Communicator::from_plan(plan, &opts, Backend::Cpu)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    let res: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let e = res[1].as_ref().unwrap_err();
    assert!(e.contains("--transport"), "{e}");
}

/// Ranks on several hosts (threads that each name their host) through shared memory inside
/// each host and the TCP ring between hosts' leaders: for hosts of 2+2 and 3+1 ranks, the same
/// bits as the TCP ring for every dtype and op (tolerance 0: both fold each ring segment over the
/// ranks in ring order, shm.rs), on buffers of 0 to several chunks; broadcast from every root and
/// barriers too. Three hosts of 2+1+2 ranks, and of one rank each under `--transport shm`
/// (auto keeps the ring there), take the same path. Ranks interleaved across hosts (0 and 2 on
/// one, 1 and 3 on the other) fall back to the TCP ring and say so.
#[test]
fn ranks_on_several_hosts_reduce_through_memory_and_tcp_to_the_rings_bits() {
    const PLACEMENTS: [&[&str]; 5] = [
        &["a", "a", "b", "b"],
        &["a", "a", "a", "b"],
        &["a", "b", "a", "b"],
        &["a", "a", "b", "c", "c"],
        &["a", "b", "c"],
    ];
    const PREFIXES: [[&str; 2]; 5] = [
        ["hier22-auto/", "hier22-tcp/"],
        ["hier31-auto/", "hier31-tcp/"],
        ["hier-mixed-auto/", "hier-mixed-tcp/"],
        ["hier212-auto/", "hier212-tcp/"],
        ["hier111-shm/", "hier111-tcp/"],
    ];
    let large = 300_007usize; // two or more chunks of the slots for 4- and 8-byte types
    for (p, hosts) in PLACEMENTS.into_iter().enumerate() {
        let world = hosts.len();
        let mut got: Vec<Vec<Vec<u8>>> = Vec::new();
        let first = if p == 4 {
            Transport::Shm
        } else {
            Transport::Auto
        };
        for (t, transport) in [first, Transport::Tcp].into_iter().enumerate() {
            let res = ranks_placed(
                PREFIXES[p][t],
                world,
                Some(hosts),
                Duration::from_secs(120),
                transport,
                never,
                move |rank, comm| {
                    let mut comm = comm.unwrap();
                    let (want, engine) = match (transport, p) {
                        (Transport::Tcp, _) => ("tcp", "cpu-ring"),
                        (_, 2) => ("tcp", "cpu-ring-interleaved"),
                        _ => ("shm+tcp", "cpu-shm+tcp"),
                    };
                    assert_eq!(comm.transport(), want, "{hosts:?}");
                    assert_eq!(comm.engine(Device::Cpu), engine, "{hosts:?}");
                    let mut out = Vec::new();
                    for dtype in DType::ALL {
                        let sizes: &[usize] = if dtype.is_float() || dtype == DType::I64 {
                            &[0, 1, 3, 1001, large]
                        } else {
                            &[0, 1, 3, 1001]
                        };
                        for &len in sizes {
                            for op in ReduceOp::ALL {
                                let mut t = noise(rank, len, dtype.kind());
                                comm.all_reduce(&mut t, op).unwrap();
                                out.push(bytes_of(&t));
                            }
                        }
                    }
                    comm.barrier().unwrap();
                    for root in 0..world {
                        let mut b = if rank == root {
                            noise(9 + root, large, Kind::Float)
                        } else {
                            Tensor::zeros([large as i64], (Kind::Float, Device::Cpu))
                        };
                        comm.broadcast(&mut b, root).unwrap();
                        out.push(bytes_of(&b));
                    }
                    comm.barrier().unwrap();
                    out
                },
            );
            for r in 1..world {
                assert!(
                    res[r] == res[0],
                    "{hosts:?} {transport}: rank {r} differs from rank 0"
                );
            }
            got.push(res.into_iter().next().unwrap());
        }
        for (i, (a, b)) in got[0].iter().zip(&got[1]).enumerate() {
            assert!(
                a == b,
                "{hosts:?}, case {i}: memory+tcp and the ring differ"
            );
        }
    }
}
