#!/usr/bin/env python3
"""all-reduce-check's CPU ring vs torch.distributed gloo, side by side on this machine.

  .venv/bin/python scripts/bench/all_reduce.py [--ranks 2 4] [--sizes-mib 1 8 64 256] [--iters 5]

For each world size, the same float32 sum all-reduce, in place, ranks on this host over
loopback TCP, one intra-op thread per rank (as torchrun's OMP_NUM_THREADS=1):
  gloo: torch.multiprocessing ranks, dist.init_process_group("gloo"), dist.all_reduce(t)
  ours: all-reduce-check --spawn N --device cpu --no-check (its in-place column)
Each figure is the mean time of --iters iterations after --warmup, averaged over ranks (as
all-reduce-check reports it); busbw = bytes / time x 2(n-1)/n (nccl-tests' definition).
"""
import argparse, json, os, socket, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))
MIB = 1 << 20


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gloo_worker(rank, world, port, sizes, warmup, iters, q):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out = {}
    for size in sizes:
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


def gloo(world, sizes, warmup, iters):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=gloo_worker, args=(r, world, port, sizes, warmup, iters, q)) for r in range(world)]
    for p in procs:
        p.start()
    res = q.get()
    for p in procs:
        p.join()
    return res


def ours(world, sizes, warmup, iters):
    res = {}
    for size in sizes:  # one size per call: -b = -e
        cmd = [f"{BIN}/all-reduce-check", "--spawn", str(world), "--device", "cpu", "--no-check", "-q",
               "-b", str(size), "-e", str(size), "-w", str(warmup), "-n", str(iters)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            r = json.loads(line)
            if r["type"] == "bandwidth":
                res[size] = r["in_place"]["time_us"] * 1e-6
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 8, 64, 256])
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="one JSON line per row instead of the table")
    a = ap.parse_args()
    sizes = [m * MIB for m in a.sizes_mib]
    print(f"# float32 sum all-reduce, in place, {os.cpu_count()} cores, busbw in GB/s (1e9 B/s)", file=sys.stderr)
    if not a.json:
        print(f"{'ranks':>5} {'MiB':>5} {'gloo ms':>9} {'gloo busbw':>10} {'ours ms':>9} {'ours busbw':>10} {'ratio':>6}")
    for world in a.ranks:
        g = gloo(world, sizes, a.warmup, a.iters)
        o = ours(world, sizes, a.warmup, a.iters)
        factor = 2 * (world - 1) / world
        for size in sizes:
            gb, ob = size / g[size] / 1e9 * factor, size / o[size] / 1e9 * factor
            row = dict(ranks=world, mib=size // MIB, gloo_ms=g[size] * 1e3, gloo_busbw=gb,
                       ours_ms=o[size] * 1e3, ours_busbw=ob, ratio=ob / gb)
            if a.json:
                print(json.dumps(row))
            else:
                print(f"{world:>5} {size // MIB:>5} {g[size] * 1e3:>9.2f} {gb:>10.2f} {o[size] * 1e3:>9.2f} {ob:>10.2f} {ob / gb:>5.2f}x")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
