//! Multi-rank tests with one thread per rank in this process, over real loopback sockets.

use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};

use super::*;
use crate::rendezvous::StoreAt;
use crate::store::StoreServer;

#[path = "../tests/support/values.rs"]
mod values;
use values::{bytes_of, noise};

/// Runs `f(rank, comm)` on `world` ranks joined through a store served by the test (as
/// torchrun's agent would), returning each rank's result in rank order.
fn ranks<T: Send + 'static>(
    prefix: &'static str,
    world: usize,
    timeout: Duration,
    f: impl Fn(usize, Result<Communicator>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    ranks_over(prefix, world, timeout, Transport::Auto, never, f)
}

/// The plan of `rank` of `world` whose store (served elsewhere) is at 127.0.0.1:`port`.
fn test_plan(
    rank: usize,
    world: usize,
    local_rank: Option<usize>,
    port: u16,
    prefix: &str,
) -> Plan {
    Plan {
        rank,
        world_size: world,
        local_rank,
        store: StoreAt::Tcp {
            host: "127.0.0.1".into(),
            port,
            serve: false,
            port_from: "test",
        },
        prefix: prefix.into(),
        launcher: "test",
        run_id: None,
    }
}

/// [`ranks`] over `transport`, with `stop` as every rank's stop hook.
fn ranks_over<T: Send + 'static>(
    prefix: &'static str,
    world: usize,
    timeout: Duration,
    transport: Transport,
    stop: fn() -> bool,
    f: impl Fn(usize, Result<Communicator>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    ranks_placed(prefix, world, None, timeout, transport, stop, f)
}

/// [`ranks_over`] with rank r pretending to be on host `hosts[r]` (a name per rank) when given.
fn ranks_placed<T: Send + 'static>(
    prefix: &'static str,
    world: usize,
    hosts: Option<&'static [&'static str]>,
    timeout: Duration,
    transport: Transport,
    stop: fn() -> bool,
    f: impl Fn(usize, Result<Communicator>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let server = StoreServer::bind("127.0.0.1:0").unwrap();
    let port = server.addr().port();
    let f = std::sync::Arc::new(f);
    let handles: Vec<_> = (0..world)
        .map(|rank| {
            let f = f.clone();
            std::thread::spawn(move || {
                if let Some(hosts) = hosts {
                    crate::host::TEST_HOST.with(|h| *h.borrow_mut() = Some(hosts[rank].into()));
                }
                let plan = test_plan(rank, world, Some(rank), port, prefix);
                let opts = Options {
                    timeout,
                    transport,
                    should_stop: stop,
                    ..Options::default()
                };
                let comm = Communicator::from_plan(plan, &opts, Backend::Cpu);
                f(rank, comm)
            })
        })
        .collect();
    let out = handles.into_iter().map(|h| h.join().unwrap()).collect();
    drop(server);
    out
}

/// Small integers, different per rank and element: sums, maxima and products are exact in
/// every dtype, so results compare with 0 tolerance (avg: see `expected`).
fn values(rank: usize, n: i64) -> Tensor {
    (Tensor::arange(n, (Kind::Double, Device::Cpu)) * 5.0 + (rank as f64) * 3.0).remainder(7.0)
        - 3.0
}

fn expected(world: usize, n: i64, op: ReduceOp) -> Tensor {
    let all: Vec<Tensor> = (0..world).map(|r| values(r, n)).collect();
    let s = Tensor::stack(&all, 0);
    match op {
        ReduceOp::Sum => s.sum_dim_intlist([0i64].as_slice(), false, Kind::Double),
        ReduceOp::Avg => s.sum_dim_intlist([0i64].as_slice(), false, Kind::Double) / world as f64,
        ReduceOp::Prod => s.prod_dim_int(0, false, Kind::Double),
        ReduceOp::Max => s.amax([0i64].as_slice(), false),
        ReduceOp::Min => s.amin([0i64].as_slice(), false),
    }
}

/// Max |a − b| after casting `a` to f64.
fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    if a.numel() == 0 {
        return 0.0;
    }
    (a.to_kind(Kind::Double) - b).abs().max().double_value(&[])
}

#[test]
fn all_reduce_is_exact_for_every_world_dtype_and_op() {
    for (world, transport) in [2, 3, 4]
        .into_iter()
        .flat_map(|w| [(w, Transport::Shm), (w, Transport::Tcp)])
    {
        let res = ranks_over(
            "all/",
            world,
            Duration::from_secs(20),
            transport,
            never,
            move |rank, comm| {
                let mut comm = comm.unwrap();
                let mut worst: Vec<String> = Vec::new();
                for dtype in [
                    DType::F32,
                    DType::F64,
                    DType::F16,
                    DType::BF16,
                    DType::I32,
                    DType::I64,
                    DType::I8,
                ] {
                    for op in ReduceOp::ALL {
                        // Sizes around the segment split: fewer elements than ranks, odd counts,
                        // and more than one receive chunk.
                        for n in [0i64, 1, 3, 1001, 300_007] {
                            if dtype == DType::I8 && op == ReduceOp::Prod {
                                continue; // products of 4 values up to 3 overflow i8's 127
                            }
                            let mut t = values(rank, n).to_kind(dtype.kind());
                            comm.all_reduce(&mut t, op).unwrap();
                            let want = expected(world, n, op);
                            // avg: the f64 quotient rounded to the dtype (half types keep 8/11
                            // significant bits; integers truncate toward zero).
                            let want = match (op, dtype.is_float()) {
                                (ReduceOp::Avg, false) => want.trunc(),
                                _ => want.to_kind(dtype.kind()).to_kind(Kind::Double),
                            };
                            let tol = if op == ReduceOp::Avg
                                && matches!(dtype, DType::F16 | DType::BF16)
                            {
                                // one rounding of the sum's quotient in f32 vs in f64: ≤ 1 ulp (|x| ≤ 3)
                                if dtype == DType::BF16 {
                                    3.0 / 128.0
                                } else {
                                    3.0 / 1024.0
                                }
                            } else {
                                0.0
                            };
                            let d = max_diff(&t, &want);
                            if d > tol {
                                worst.push(format!("{dtype:?} {op:?} n={n}: {d}"));
                            }
                        }
                    }
                }
                worst
            },
        );
        for (rank, w) in res.iter().enumerate() {
            assert!(w.is_empty(), "world {world} {transport} rank {rank}: {w:?}");
        }
    }
}

#[test]
fn out_of_place_broadcast_gather_scatter_and_barrier() {
    let world = 3;
    for transport in [Transport::Shm, Transport::Tcp] {
        ranks_over(
            "misc/",
            world,
            Duration::from_secs(20),
            transport,
            never,
            move |rank, comm| {
                let mut comm = comm.unwrap();
                let n = 1003i64;
                // all_reduce_into leaves the input alone.
                let input = values(rank, n).to_kind(Kind::Float);
                let before = input.copy();
                let mut out = Tensor::zeros([n], (Kind::Float, Device::Cpu));
                comm.all_reduce_into(&input, &mut out, ReduceOp::Max)
                    .unwrap();
                assert_eq!(max_diff(&out, &expected(world, n, ReduceOp::Max)), 0.0);
                assert_eq!(max_diff(&input, &before.to_kind(Kind::Double)), 0.0);

                for root in 0..world {
                    let mut t = if rank == root {
                        values(root, n)
                    } else {
                        Tensor::full([n], -9.0, (Kind::Double, Device::Cpu))
                    };
                    comm.broadcast(&mut t, root).unwrap();
                    assert_eq!(max_diff(&t, &values(root, n)), 0.0, "broadcast from {root}");
                }

                // all_gather into a [world, n] tensor.
                let mine = values(rank, n).to_kind(Kind::Int);
                let mut all = Tensor::zeros([world as i64, n], (Kind::Int, Device::Cpu));
                comm.all_gather(&mine, &mut all).unwrap();
                for r in 0..world {
                    assert_eq!(max_diff(&all.get(r as i64), &values(r, n)), 0.0, "slot {r}");
                }

                // reduce_scatter: rank r gets the sum over ranks of slot r.
                let big = values(rank, n * world as i64).to_kind(Kind::Float);
                let mut mine = Tensor::zeros([n], (Kind::Float, Device::Cpu));
                comm.reduce_scatter(&big, &mut mine, ReduceOp::Sum).unwrap();
                let want =
                    expected(world, n * world as i64, ReduceOp::Sum).narrow(0, rank as i64 * n, n);
                assert_eq!(max_diff(&mine, &want), 0.0);

                // Non-contiguous outputs of all_gather / reduce_scatter are filled through copies.
                let mut all_t = Tensor::zeros([n, world as i64], (Kind::Int, Device::Cpu)).tr();
                comm.all_gather(&values(rank, n).to_kind(Kind::Int), &mut all_t)
                    .unwrap();
                for r in 0..world {
                    assert_eq!(
                        max_diff(&all_t.get(r as i64), &values(r, n)),
                        0.0,
                        "non-contiguous slot {r}"
                    );
                }
                let holder = Tensor::zeros([n, 2], (Kind::Float, Device::Cpu));
                let mut mine_t = holder.select(1, 0); // stride 2
                assert!(!mine_t.is_contiguous());
                comm.reduce_scatter(&big, &mut mine_t, ReduceOp::Sum)
                    .unwrap();
                assert_eq!(max_diff(&holder.select(1, 0), &want), 0.0);

                // A non-contiguous tensor goes through a copy and comes back in place.
                let mut tr = Tensor::ones([4, 6], (Kind::Float, Device::Cpu)).tr();
                comm.all_reduce(&mut tr, ReduceOp::Sum).unwrap();
                assert_eq!(tr.min().double_value(&[]), world as f64);

                comm.barrier().unwrap();
            },
        );
    }
}

#[test]
fn ranks_calling_different_sizes_fail_with_both_calls_named() {
    for transport in [Transport::Shm, Transport::Tcp] {
        let res = ranks_over(
            "mismatch/",
            2,
            Duration::from_secs(10),
            transport,
            never,
            |rank, comm| {
                let mut comm = comm.unwrap();
                let mut t = Tensor::ones([10 + rank as i64], (Kind::Float, Device::Cpu));
                comm.all_reduce(&mut t, ReduceOp::Sum)
                    .map_err(|e| e.to_string())
            },
        );
        let errs: Vec<String> = res.into_iter().map(|r| r.unwrap_err()).collect();
        assert!(
            errs.iter()
                .any(|e| e.contains("of 10 × f32") && e.contains("of 11 × f32")),
            "{errs:?}"
        );
    }
}

#[test]
fn a_rank_that_dies_fails_the_others_naming_it() {
    for transport in [Transport::Shm, Transport::Tcp] {
        let t0 = Instant::now();
        let res = ranks_over(
            "dies/",
            3,
            Duration::from_secs(600),
            transport,
            never,
            |rank, comm| {
                let mut comm = comm.unwrap();
                if rank == 2 {
                    drop(comm); // as a killed process: its sockets close
                    return Ok(());
                }
                let mut t = Tensor::ones([100_000], (Kind::Float, Device::Cpu));
                comm.all_reduce(&mut t, ReduceOp::Sum)
                    .map_err(|e| e.to_string())
            },
        );
        // Well within the 600 s timeout: a closed socket is noticed at once.
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{:?}",
            t0.elapsed()
        );
        for (rank, r) in res.iter().enumerate().take(2) {
            let e = r.as_ref().unwrap_err();
            assert!(e.contains("rank 2"), "rank {rank}: {e}");
        }
    }
}

/// Ranks 0 and 1 of a world of 3 joining the store on `port` under `prefix`, each in a thread
/// that gives the error its rendezvous ends with.
fn two_of_three_failing(
    port: u16,
    prefix: &'static str,
    timeout: Duration,
) -> Vec<std::thread::JoinHandle<String>> {
    (0..2)
        .map(|rank| {
            std::thread::spawn(move || {
                let plan = test_plan(rank, 3, None, port, prefix);
                let opts = Options {
                    timeout,
                    ..Options::default()
                };
                Communicator::from_plan(plan, &opts, Backend::Cpu)
                    .unwrap_err()
                    .to_string()
            })
        })
        .collect()
}

#[test]
fn a_rank_that_leaves_before_the_rendezvous_completes_is_named_at_once() {
    // Rank 2 joins the store and claims its place, then its process dies before it publishes
    // its ring address: the others name it within a second or so, not at the 600 s deadline.
    let server = StoreServer::bind("127.0.0.1:0").unwrap();
    let port = server.addr().port();
    let t0 = Instant::now();
    let hs = two_of_three_failing(port, "gone/", Duration::from_secs(600));
    {
        let addr = format!("127.0.0.1:{port}");
        let mut rank2 =
            crate::store::Store::connect(&addr, "gone/", Duration::from_secs(5)).unwrap();
        assert_eq!(rank2.add("claim/2", 1).unwrap(), 1);
    } // its connection closes here
    for h in hs {
        let e = h.join().unwrap();
        assert!(
            e.contains("rank(s) 2 of 3 left before the rendezvous"),
            "{e}"
        );
    }
    assert!(
        t0.elapsed() < Duration::from_secs(120),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn a_rank_that_never_arrives_is_named_after_the_timeout() {
    let server = StoreServer::bind("127.0.0.1:0").unwrap();
    let port = server.addr().port();
    let t0 = Instant::now();
    let hs = two_of_three_failing(port, "absent/", Duration::from_millis(800));
    for h in hs {
        let e = h.join().unwrap();
        assert!(e.contains("rank(s) 2 of 3 never arrived"), "{e}");
    }
    // At the 0.8 s timeout, not a hang.
    assert!(t0.elapsed() < Duration::from_secs(120));
}

#[test]
fn file_rendezvous_ignores_a_stale_file_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rdzv");
    // A file left by a dead run: nothing listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    std::fs::write(&path, format!("{dead} 0123456789abcdef\n")).unwrap();
    let p = path.clone();
    let hs: Vec<_> = (0..3)
        .map(|rank| {
            let p = p.clone();
            std::thread::spawn(move || {
                if rank == 0 {
                    std::thread::sleep(Duration::from_millis(300)); // the others see the stale file first
                }
                let opts = Options {
                    init_method: InitMethod::File(p.clone()),
                    rank: Some(rank),
                    world_size: Some(3),
                    timeout: Duration::from_secs(20),
                    ..Options::default()
                };
                let plan = opts.plan_with(&|_| None).unwrap();
                let mut comm = Communicator::from_plan(plan, &opts, Backend::Cpu).unwrap();
                let mut t = Tensor::full([5], rank as f64, (Kind::Float, Device::Cpu));
                comm.all_reduce(&mut t, ReduceOp::Sum).unwrap();
                comm.barrier().unwrap();
                t.double_value(&[0])
            })
        })
        .collect();
    for h in hs {
        assert_eq!(h.join().unwrap(), 3.0);
    }
    assert!(!path.exists(), "rank 0 removes its rendezvous file");
}

#[test]
fn rank_zero_serves_the_store_and_a_taken_port_names_the_flag() {
    let taken = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let opts = Options {
        rank: Some(0),
        world_size: Some(2),
        master_port: Some(port),
        ..Options::default()
    };
    let e = Communicator::connect_with(&opts, Backend::Cpu)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("port {port}")) && e.contains("--master-port"),
        "{e}"
    );
    drop(taken);

    // With the port free, rank 0 serves and rank 1 joins.
    let res = ranks_at_port(port, 2, Duration::from_secs(20), |rank, mut comm| {
        let mut t = Tensor::full([3], 1.0 + rank as f64, (Kind::Float, Device::Cpu));
        comm.all_reduce(&mut t, ReduceOp::Avg).unwrap();
        comm.barrier().unwrap();
        t.double_value(&[2])
    });
    assert_eq!(res, [1.5, 1.5]);
}

/// `world` ranks (threads) that meet at 127.0.0.1:`port` as torchrun's variables say (rank 0
/// serves the store), each running `f` with its communicator; their results in rank order.
fn ranks_at_port<T: Send + 'static>(
    port: u16,
    world: usize,
    timeout: Duration,
    f: impl Fn(usize, Communicator) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let f = std::sync::Arc::new(f);
    let hs: Vec<_> = (0..world)
        .map(|rank| {
            let f = f.clone();
            std::thread::spawn(move || {
                let opts = Options {
                    rank: Some(rank),
                    world_size: Some(world),
                    master_addr: Some("127.0.0.1".into()),
                    master_port: Some(port),
                    timeout,
                    ..Options::default()
                };
                let plan = opts.plan_with(&|_| None).unwrap();
                f(
                    rank,
                    Communicator::from_plan(plan, &opts, Backend::Cpu).unwrap(),
                )
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn one_rank_needs_no_store_and_reduces_to_itself() {
    let mut comm = Communicator::connect_with(
        &Options {
            world_size: Some(1),
            ..Options::default()
        },
        Backend::Cpu,
    )
    .unwrap();
    let mut t = Tensor::from_slice(&[1.0f32, 2.0]);
    comm.all_reduce(&mut t, ReduceOp::Avg).unwrap();
    comm.barrier().unwrap();
    assert_eq!(Vec::<f32>::try_from(&t).unwrap(), [1.0, 2.0]);
}

/// A rank that leaves because it was stopped is named by the others, whichever rank serves the
/// store: their collective fails with PeerStopped, not a lost connection.
#[test]
fn a_rank_that_leaves_is_named_by_the_others() {
    for leaver in [0usize, 2] {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t0 = Instant::now();
        let res = ranks_at_port(port, 3, Duration::from_secs(600), move |rank, mut comm| {
            comm.barrier().unwrap();
            if rank == leaver {
                std::thread::sleep(Duration::from_millis(200));
                comm.leave("interrupted (test)");
                return None;
            }
            let mut t = Tensor::full([4], 1.0, (Kind::Float, Device::Cpu));
            Some(comm.all_reduce(&mut t, ReduceOp::Sum).unwrap_err())
        });
        for (rank, r) in res.into_iter().enumerate() {
            match r {
                None => assert_eq!(rank, leaver),
                Some(Error::PeerStopped { rank: r, why }) => {
                    assert_eq!((r, why.as_str()), (leaver, "interrupted (test)"))
                }
                Some(other) => panic!("leaver {leaver}, rank {rank}: {other}"),
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(120));
    }
}

#[test]
fn ranks_of_one_process_find_they_share_a_host() {
    let res = ranks("hosts/", 3, Duration::from_secs(20), |_, comm| {
        let comm = comm.unwrap();
        (
            comm.host_peers(),
            comm.host_rank(),
            comm.host_size(),
            comm.hosts().count(),
        )
    });
    for (rank, (peers, host_rank, size, hosts)) in res.into_iter().enumerate() {
        assert_eq!(peers, [0, 1, 2]);
        assert_eq!((host_rank, size, hosts), (rank, 3, 1));
    }
}

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
    for dead in [0usize, 2] {
        let t0 = Instant::now();
        let prefix: &'static str = if dead == 0 {
            "shm-dies0/"
        } else {
            "shm-dies2/"
        };
        let res = ranks_over(
            prefix,
            3,
            Duration::from_secs(600),
            Transport::Shm,
            never,
            move |rank, comm| {
                let mut comm = comm.unwrap();
                assert_eq!(comm.transport(), "shm");
                comm.barrier().unwrap();
                if rank == dead {
                    drop(comm);
                    return Ok(());
                }
                let mut t = Tensor::ones([3_000_000], (Kind::Float, Device::Cpu));
                comm.all_reduce(&mut t, ReduceOp::Sum)
                    .map_err(|e| e.to_string())
            },
        );
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "{:?}",
            t0.elapsed()
        );
        for (rank, r) in res.iter().enumerate().filter(|(r, _)| *r != dead) {
            let e = r.as_ref().unwrap_err();
            assert!(
                e.contains(&format!("rank {dead}")),
                "dead {dead}, rank {rank}: {e}"
            );
        }
    }
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
