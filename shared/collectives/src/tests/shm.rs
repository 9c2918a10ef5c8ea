//! Multi-rank tests of the shared-memory transport (one thread per rank): bit identity with the
//! TCP ring, ranks out of step, dying, stopped, and on several hosts.

use super::*;

/// Runs `f` on `world` ranks over shared memory, then over the TCP ring (store keys under
/// `name`-shm/ and `name`-tcp/; the transport checked by name), and asserts that every rank of a
/// run returns the same buffers and that both transports return the same bits, buffer by buffer.
fn same_bits_over_both_transports(
    name: &str,
    world: usize,
    timeout: Duration,
    f: impl Fn(usize, &mut Communicator) -> Vec<Vec<u8>> + Send + Sync + Clone + 'static,
) {
    let mut got: Vec<Vec<Vec<u8>>> = Vec::new();
    for transport in [Transport::Shm, Transport::Tcp] {
        let prefix: &'static str = Box::leak(format!("{name}-{transport}/").into_boxed_str());
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
                f(rank, &mut comm)
            },
        );
        for r in 1..world {
            let first = (0..res[0].len()).find(|&i| res[r].get(i) != res[0].get(i));
            assert!(
                first.is_none() && res[r].len() == res[0].len(),
                "{transport}: rank {r} differs from rank 0 (first at buffer {first:?})"
            );
        }
        got.push(res.into_iter().next().unwrap());
    }
    for (i, (a, b)) in got[0].iter().zip(&got[1]).enumerate() {
        assert!(
            a == b,
            "{name}, world {world}, buffer {i}: shared memory and the ring differ"
        );
    }
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

/// Max and min of zeros of both signs and NaNs of different payloads, where the result's bits
/// depend on which operand a step takes (max(+0, −0) is the second; a NaN wins, the first of
/// two): both transports fold in the same order with the same operands, so 2, 3 and 4 ranks
/// give the ring's bits over shared memory too, on a buffer reduced whole and on ones of one
/// and several chunks. (Not sums: which NaN's payload a sum of two NaNs keeps is the
/// compiler's choice, which Rust leaves unspecified.)
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

/// All-reduces done in place in shared buffers by this rank so far.
fn in_place_calls(comm: &Communicator) -> u64 {
    comm.joined.shm.as_ref().map_or(0, |g| g.in_place)
}

/// Buffers from `shared_zeros`, whole and as a range at the same place on every rank, are
/// reduced in place from the other ranks' memory with the TCP ring's bits (tolerance 0: the same
/// sums in the same order) for every float dtype, two integer ones and every op over 2, 3 and 4
/// ranks; a range at another place on one rank, and a private buffer on one rank, go through
/// the slots, with the same bits. Over TCP `shared_zeros` is plain zeros.
#[test]
fn shared_buffers_are_reduced_in_place_with_the_rings_bits() {
    let kinds = [
        Kind::Float,
        Kind::Double,
        Kind::BFloat16,
        Kind::Half,
        Kind::Int64,
        Kind::Int8,
    ];
    let ops = ReduceOp::ALL.len() as u64;
    // Over the whole-buffer threshold (one slot) for 1-byte types too, and odd.
    let n = 3 * crate::shm::SLOT / 2 + 4_321;
    let head = 1_000;
    for world in [2usize, 3, 4] {
        same_bits_over_both_transports(
            "shared",
            world,
            Duration::from_secs(60),
            move |rank, comm| {
                let mut out = Vec::new();
                let before = in_place_calls(comm);
                for kind in kinds {
                    let mut shared = comm.shared_zeros((head + n) as i64, kind).unwrap();
                    assert!(shared.equal(&Tensor::zeros([(head + n) as i64], (kind, Device::Cpu))));
                    for op in ReduceOp::ALL {
                        shared.copy_(&noise(rank, head + n, kind));
                        comm.all_reduce(&mut shared, op).unwrap();
                        out.push(bytes_of(&shared));
                        let before = noise(rank + 7, head + n, kind);
                        shared.copy_(&before);
                        let mut part = shared.narrow(0, head as i64, n as i64);
                        comm.all_reduce(&mut part, op).unwrap();
                        out.push(bytes_of(&part));
                        let (h, h0) = (head as i64, 0);
                        assert!(shared.narrow(0, h0, h).equal(&before.narrow(0, h0, h)));
                    }
                    let at = if rank == 1 { head - 1 } else { head };
                    let mut elsewhere = shared.narrow(0, at as i64, n as i64);
                    elsewhere.copy_(&noise(rank, n, kind));
                    comm.all_reduce(&mut elsewhere, ReduceOp::Sum).unwrap();
                    out.push(bytes_of(&elsewhere));
                }
                let mut shared = comm.shared_zeros(n as i64, Kind::Float).unwrap();
                let mut t = if rank == 0 {
                    noise(rank, n, Kind::Float)
                } else {
                    shared.copy_(&noise(rank, n, Kind::Float));
                    shared
                };
                comm.all_reduce(&mut t, ReduceOp::Sum).unwrap();
                out.push(bytes_of(&t));
                let in_place = in_place_calls(comm) - before;
                match comm.transport() {
                    "shm" => assert_eq!(in_place, kinds.len() as u64 * ops * 2),
                    _ => assert_eq!(in_place, 0),
                }
                out
            },
        );
    }
}

/// `shared_zeros` is a collective: a rank asking for another size fails every rank's call
/// naming both (not a hang, not a short buffer); a rank that dies after sharing fails the
/// others' in-place all-reduce naming it, the leader or not, long before the 600 s deadline.
#[test]
fn shared_buffers_of_other_sizes_refuse_and_a_rank_that_dies_is_named() {
    let res = ranks_over(
        "shared-sizes/",
        3,
        Duration::from_secs(600),
        Transport::Shm,
        never,
        |rank, comm| {
            let mut comm = comm.unwrap();
            let numel = if rank == 1 { 2_000 } else { 1_000 };
            comm.shared_zeros(numel, Kind::Float)
                .unwrap_err()
                .to_string()
        },
    );
    for (rank, e) in res.iter().enumerate() {
        assert!(
            e.contains("shared_zeros of 8000") && e.contains("shared_zeros of 4000"),
            "rank {rank}: {e}"
        );
    }
    // Reduced in place from the others' memory: the leader dies, then another rank.
    let shared = |c: &mut Communicator| c.shared_zeros(3_000_000, Kind::Float).unwrap();
    the_others_name_a_rank_that_dies("shared-dies0/", (3, 0), Transport::Shm, true, shared);
    the_others_name_a_rank_that_dies("shared-dies2/", (3, 2), Transport::Shm, true, shared);
}

/// A rank whose process ends mid-run (its communicator dropped: its sockets close and its
/// mapping goes) fails the others' shared-memory collective naming it, the leader or not, long
/// before the 600 s deadline.
#[test]
fn a_rank_that_dies_is_named_over_shared_memory() {
    let big = |_: &mut Communicator| Tensor::ones([3_000_000], (Kind::Float, Device::Cpu));
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
    assert_ended_within_120s(t0);
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
