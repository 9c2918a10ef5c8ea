#!/usr/bin/env python3
"""all-reduce-check's CPU transports vs torch.distributed gloo and OpenMPI, side by side.

  .venv/bin/python scripts/bench/all_reduce.py [--ranks 2 4] [--rounds 3] [--sizes BYTES...] [--impls ...] [--base DIR] [--json]

Needs Debian's openmpi-bin and mpi4py in the venv (scripts/setup --bench installs both).
For each world size, the same float32 sum all-reduce, in place, ranks on this host, one
intra-op thread per rank (as torchrun's OMP_NUM_THREADS=1), sizes 4 KiB to 256 MiB (x4):
  gloo: torch.multiprocessing ranks, dist.init_process_group("gloo"), dist.all_reduce(t)
  mpi:  mpirun -np N (ob1 + vader: shared memory, single copy by CMA), comm.Allreduce(IN_PLACE)
  shm:  all-reduce-check --spawn N --transport shm (its in-place column)
  tcp:  all-reduce-check --spawn N --transport tcp (the TCP ring)
  shared: all-reduce-check --spawn N --transport shm -R 1: the buffer in memory the ranks share,
        reduced in place from each other's (what ddp-train does with its CPU gradients); its
        own columns: GB/s, % of copy, /gloo, /mpi, % of floor
  copy: N processes each copying its buffer once per call, all at once (numpy copyto): not an
        all-reduce but its floor here, as any in-place all-reduce must at least read each
        rank's input and write its result; column %floor = copy time / shm time
and the single-core copy bandwidth (numpy copyto of 256 MiB). Each round runs every
implementation once, in a rotated order; a figure is the median over --rounds rounds of the
mean time of the timed iterations (after warm-ups), averaged over ranks (as all-reduce-check
reports it). algbw = bytes / time (GB = 1e9 B).
"""
import argparse, json, os, socket, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))
KIB, MIB = 1 << 10, 1 << 20
SIZES = [4 * KIB * 4**i for i in range(9)]  # 4 KiB .. 256 MiB
SMALL = 1 * MIB  # sizes up to this get more iterations


def iters_for(size):
    """(warm-ups, timed iterations): many for small messages, where one call is microseconds."""
    return (20, 200) if size <= SMALL else (2, 8)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_worker(rank, world, port, sizes, q):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out = {}
    for size in sizes:
        warmup, iters = iters_for(size)
        t = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(t)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        dt = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
        dist.all_reduce(dt)
        out[size] = dt.item() / world
    if rank == 0:
        q.put(out)
    dist.destroy_process_group()


def gloo(world, sizes):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=gloo_worker, args=(r, world, port, sizes, q)) for r in range(world)]
    for p in procs:
        p.start()
    res = q.get()
    for p in procs:
        p.join()
    return res


def copy_worker(rank, sizes, barrier, q):
    import numpy as np

    out = {}
    for size in sizes:
        warmup, iters = iters_for(size)
        a = np.ones(size // 4, dtype=np.float32)
        b = np.empty_like(a)
        for _ in range(warmup):
            np.copyto(b, a)
        barrier.wait()
        t0 = time.perf_counter()
        for _ in range(iters):
            np.copyto(b, a)
        out[size] = time.perf_counter() - t0
        barrier.wait()
    q.put({s: t / iters_for(s)[1] for s, t in out.items()})


def copy(world, sizes):
    """Every rank copies its buffer once per call, all at once: the least memory traffic of an
    all-reduce that leaves the result in each rank's own buffer (it must read the input and
    write the result), so its time is a floor for any all-reduce of these ranks on this host."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    barrier, q = ctx.Barrier(world), ctx.Queue()
    procs = [ctx.Process(target=copy_worker, args=(r, sizes, barrier, q)) for r in range(world)]
    for p in procs:
        p.start()
    per_rank = [q.get() for _ in procs]
    for p in procs:
        p.join()
    return {s: statistics.mean(r[s] for r in per_rank) for s in sizes}


def mpi_worker(sizes):
    """Run under mpirun: one JSON line {size: seconds} from rank 0."""
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    out = {}
    for size in sizes:
        warmup, iters = iters_for(size)
        a = np.ones(size // 4, dtype=np.float32)
        for _ in range(warmup):
            comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        dt = (time.perf_counter() - t0) / iters
        out[size] = comm.allreduce(dt, op=MPI.SUM) / world
    if rank == 0:
        print(json.dumps(out))


def mpi(world, sizes):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(world),
           "--mca", "pml", "ob1", "--mca", "btl", "self,vader",
           sys.executable, os.path.abspath(__file__), "--mpi-worker", "--sizes", *map(str, sizes)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}


def ours(world, sizes, transport, bin_dir=None, register=False):
    res = {}
    groups = [[s for s in sizes if s <= SMALL], [s for s in sizes if s > SMALL]]
    for group in filter(None, groups):
        warmup, iters = iters_for(group[0])
        cmd = [f"{bin_dir or BIN}/all-reduce-check", "--spawn", str(world), "--device", "cpu", "--no-check", "-q",
               "--transport", transport, "-b", str(group[0]), "-e", str(group[-1]), "-f", "4",
               "-w", str(warmup), "-n", str(iters)] + (["-R", "1"] if register else [])
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            r = json.loads(line)
            if r["type"] == "bandwidth" and r["bytes"] in group:
                res[r["bytes"]] = r["in_place"]["time_us"] * 1e-6
    return res


def copy_bandwidth():
    """Single-core memcpy of 256 MiB (numpy copyto), GB/s, best of 5 after a warm-up."""
    import numpy as np

    a = np.ones(64 * MIB, dtype=np.float32)
    b = np.empty_like(a)
    np.copyto(b, a)
    best = 0.0
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = max(best, a.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def available():
    import importlib.util, shutil

    mpi_ok = shutil.which("mpirun") and importlib.util.find_spec("mpi4py") is not None
    return [i for i in IMPLS if i != "mpi" or mpi_ok]


IMPLS = {"gloo": lambda w, s: gloo(w, s), "mpi": lambda w, s: mpi(w, s),
         "shm": lambda w, s: ours(w, s, "shm"), "tcp": lambda w, s: ours(w, s, "tcp"),
         "shared": lambda w, s: ours(w, s, "shm", register=True),
         "copy": lambda w, s: copy(w, s)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=SIZES, help="bytes")
    ap.add_argument("--sizes-mib", type=int, nargs="+", help="sizes in MiB instead of --sizes")
    ap.add_argument("--impls", nargs="+", default=available(), choices=list(IMPLS),
                    help="default: all six (mpi only where mpirun and mpi4py are installed)")
    ap.add_argument("--json", action="store_true", help="one JSON line per row instead of the table")
    ap.add_argument("--base", metavar="DIR",
                    help="also time the shm transport of the all-reduce-check in DIR (another build, "
                         "say the commit before a change), as column base, in the same rounds")
    ap.add_argument("--mpi-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.sizes_mib:
        a.sizes = [m * MIB for m in a.sizes_mib]
    if a.mpi_worker:
        return mpi_worker(a.sizes)
    if a.base:
        IMPLS["base"] = lambda w, s: ours(w, s, "shm", a.base)
        a.impls = a.impls + ["base"]
    copies = []
    for world in a.ranks:
        times = {impl: {s: [] for s in a.sizes} for impl in a.impls}
        for rnd in range(a.rounds):
            order = a.impls[rnd % len(a.impls):] + a.impls[:rnd % len(a.impls)]
            copies.append(copy_bandwidth())
            for impl in order:
                for s, t in IMPLS[impl](world, a.sizes).items():
                    times[impl][s].append(t)
            print(f"# {world} ranks: round {rnd + 1} of {a.rounds} done", file=sys.stderr)
        med = {impl: {s: statistics.median(v) for s, v in d.items()} for impl, d in times.items()}
        copy = statistics.median(copies)
        print(f"# float32 sum all-reduce in place, {world} ranks, {os.cpu_count()} cores; "
              f"single-core copy {copy:.2f} GB/s (median of {len(copies)} rounds)", file=sys.stderr)
        if not a.json:
            cols = "".join(f"{i + ' ms':>11}" for i in a.impls)
            base = f" {'/base':>6}" if a.base else ""
            floor = f" {'%floor':>6}" if "copy" in a.impls else ""
            shared = (f" {'shared GB/s':>11} {'%copy':>6} {'/gloo':>6} {'/mpi':>6} {'/shm':>6}"
                      + floor) if "shared" in a.impls else ""
            print(f"{'ranks':>5} {'bytes':>10}{cols} {'shm GB/s':>9} {'%copy':>6} {'/gloo':>6} {'/mpi':>6} {'/tcp':>6}{base}{floor}{shared}")
        for s in a.sizes:
            row = dict(ranks=world, bytes=s, mib=s // MIB if s % MIB == 0 else s / MIB, copy_gbs=copy,
                       **{f"{i}_ms": med[i][s] * 1e3 for i in a.impls})
            # busbw (nccl-tests' definition), as scripts/bench/run_all.py reads it.
            factor = 2 * (world - 1) / world
            for i, key in (("shm", "ours_busbw"), ("gloo", "gloo_busbw")):
                if i in med:
                    row[key] = s / med[i][s] / 1e9 * factor
            # Ours, each against what it is compared with.
            for ours, others in (("shm", ("gloo", "mpi", "tcp", "base", "copy")),
                                 ("shared", ("gloo", "mpi", "shm", "copy"))):
                if ours in med:
                    t = med[ours][s]
                    row[f"{ours}_algbw_gbs"] = s / t / 1e9
                    row[f"{ours}_pct_copy"] = 100 * row[f"{ours}_algbw_gbs"] / copy
                    for other in others:
                        if other in med:
                            row[f"{ours}_vs_{other}"] = med[other][s] / t
            if a.json:
                print(json.dumps(row))
            else:
                cells = "".join(f"{med[i][s] * 1e3:>11.3f}" for i in a.impls)
                r = lambda k: f"{row[k]:>5.2f}x" if k in row else f"{'-':>6}"
                print(f"{world:>5} {s:>10}{cells} {row.get('shm_algbw_gbs', 0):>9.2f} "
                      f"{row.get('shm_pct_copy', 0):>5.0f}% {r('shm_vs_gloo')} {r('shm_vs_mpi')} {r('shm_vs_tcp')}"
                      + (f" {r('shm_vs_base')}" if a.base else "")
                      + (f" {100 * row['shm_vs_copy']:>5.0f}%" if "shm_vs_copy" in row else "")
                      + (f" {row['shared_algbw_gbs']:>11.2f} {row['shared_pct_copy']:>5.0f}% {r('shared_vs_gloo')}"
                         f" {r('shared_vs_mpi')} {r('shared_vs_shm')}"
                         + (f" {100 * row['shared_vs_copy']:>5.0f}%" if "shared_vs_copy" in row else "")
                         if "shared_algbw_gbs" in row else ""))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
