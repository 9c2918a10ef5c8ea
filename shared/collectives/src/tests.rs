//! Multi-rank tests with one thread per rank in this process, over real loopback sockets.

use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};

use super::*;
use crate::rendezvous::StoreAt;
use crate::store::StoreServer;

#[path = "../tests/support/values.rs"]
mod values;
use values::{bytes_of, noise};

/// Asserts that less than 120 s passed since `t0`: what the test waited for came at once or at
/// the short timeout it set, not at a 600 s deadline (nor hung); the time taken in the message.
#[track_caller]
pub(crate) fn assert_ended_within_120s(t0: Instant) {
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(120), "{took:?}");
}

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

/// `world` ranks over `transport` (store keys under `prefix`), of which rank `dead` drops its
/// communicator as a killed process would (its sockets close; over shared memory its mapping
/// goes), after a first barrier when `barrier` (mid-run), while the others all-reduce the
/// tensor `buffer` made (on every rank, first): each of them fails naming it, well within the
/// 600 s deadline (a closed socket is noticed at once).
fn the_others_name_a_rank_that_dies(
    prefix: &'static str,
    (world, dead): (usize, usize),
    transport: Transport,
    barrier: bool,
    buffer: fn(&mut Communicator) -> Tensor,
) {
    let t0 = Instant::now();
    let res = ranks_over(
        prefix,
        world,
        Duration::from_secs(600),
        transport,
        never,
        move |rank, comm| {
            let mut comm = comm.unwrap();
            assert_eq!(comm.transport(), transport.to_string());
            // Made by every rank (a shared buffer is a collective), the one that dies too.
            let mut t = buffer(&mut comm);
            if barrier {
                comm.barrier().unwrap();
            }
            if rank == dead {
                drop(comm);
                return Ok(());
            }
            comm.all_reduce(&mut t, ReduceOp::Sum)
                .map_err(|e| e.to_string())
        },
    );
    assert_ended_within_120s(t0);
    for (rank, r) in res.iter().enumerate().filter(|(r, _)| *r != dead) {
        let e = r.as_ref().unwrap_err();
        assert!(
            e.contains(&format!("rank {dead}")),
            "{transport}, dead {dead}, rank {rank}: {e}"
        );
    }
}

#[test]
fn a_rank_that_dies_fails_the_others_naming_it() {
    for (prefix, transport) in [("dies-shm/", Transport::Shm), ("dies-tcp/", Transport::Tcp)] {
        the_others_name_a_rank_that_dies(prefix, (3, 2), transport, false, |_| {
            Tensor::ones([100_000], (Kind::Float, Device::Cpu))
        });
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
    assert_ended_within_120s(t0);
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
    assert_ended_within_120s(t0);
}

#[test]
fn file_rendezvous_ignores_a_stale_file_and_cleans_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rdzv");
    // A file left by a dead run: nothing listens there.
    let (_held, dead) = testkit::refusing_port();
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
        assert_ended_within_120s(t0);
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

mod shm;
