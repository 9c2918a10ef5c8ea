#!/usr/bin/env python3
"""all-reduce-check across two hosts: shared memory inside each host and TCP between them
(--transport auto: engine cpu-shm+tcp) against the flat TCP ring (--transport tcp).

  sudo .venv/bin/python scripts/bench/all_reduce_hosts.py [--rounds 3] [--sizes BYTES...] [--json]

Root only: the two hosts are two network namespaces of this machine joined by a veth pair
(iproute2's `ip netns`, which scripts/setup installs), two ranks in each (ranks 0-1 and 2-3, as
torchrun and Slurm place them), meeting at rank 0's store on the first namespace's veth address.
The same float32 sum all-reduce, in place, one intra-op thread per rank; each round runs both
transports once, in a rotated order; a figure is the median over --rounds rounds of the mean
time of the timed iterations (after warm-ups), averaged over ranks (as all-reduce-check reports
it). algbw = bytes / time (GB = 1e9 B); busbw = algbw x 2(n-1)/n (n = 4). The namespaces are
deleted at the end, also on failure.
"""
import json, os, statistics, subprocess, sys
from benchlib import flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))
MIB = 1 << 20
ADDRS = ["10.231.8.1", "10.231.8.2"]
TRANSPORTS = ["auto", "tcp"]  # auto = shared memory in each host + TCP between hosts


def iters_for(size):
    """(warm-ups, timed iterations)."""
    return (5, 50) if size <= MIB else (2, 8)


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True)


class TwoHosts:
    def __init__(self):
        tag = f"skb{os.getpid()}"
        self.names = [tag + "a", tag + "b"]

    def __enter__(self):
        a, b = self.names
        try:
            ip("netns", "add", a)
            ip("netns", "add", b)
            ip("link", "add", "skveth0", "netns", a, "type", "veth", "peer", "name", "skveth1", "netns", b)
            for ns, dev, addr in [(a, "skveth0", ADDRS[0]), (b, "skveth1", ADDRS[1])]:
                ip("-n", ns, "addr", "add", addr + "/24", "dev", dev)
                ip("-n", ns, "link", "set", "lo", "up")
                ip("-n", ns, "link", "set", dev, "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for n in self.names:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def run(hosts, transport, sizes, port):
    """{size: seconds} of one run of 4 ranks over `transport`."""
    res = {}
    for size in sizes:
        warmup, iters = iters_for(size)
        procs = []
        for rank in range(4):
            env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
            env.update(RANK=str(rank), WORLD_SIZE="4", MASTER_ADDR=ADDRS[0], MASTER_PORT=str(port),
                       OMP_NUM_THREADS="1")
            cmd = ["ip", "netns", "exec", hosts.names[rank // 2], f"{BIN}/all-reduce-check", "--device", "cpu",
                   "--no-check", "-q", "--transport", transport, "-b", str(size), "-e", str(size),
                   "-w", str(warmup), "-n", str(iters), "--dist-timeout-secs", "120"]
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs = [p.communicate() for p in procs]
        for rank, (p, (_, err)) in enumerate(zip(procs, outs)):
            if p.returncode != 0:
                sys.exit(f"rank {rank} over {transport} exited {p.returncode}: {err}")
        for line in outs[0][0].splitlines():
            r = json.loads(line)
            if r["type"] == "bandwidth":
                want = "cpu-shm+tcp" if transport == "auto" else "cpu-ring"
                if r["engine"] != want:
                    sys.exit(f"--transport {transport} ran on {r['engine']}, not {want}")
                res[r["bytes"]] = r["in_place"]["time_us"] * 1e-6
    return res


def main():
    ap = flags(rounds=3, json=False)
    ap.add_argument("--sizes", type=int, nargs="+", default=[MIB, 64 * MIB])
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("all_reduce_hosts.py makes network namespaces: run it as root")
    times = {t: {s: [] for s in a.sizes} for t in TRANSPORTS}
    with TwoHosts() as hosts:
        port = 29600
        for rnd in range(a.rounds):
            order = TRANSPORTS[rnd % 2:] + TRANSPORTS[:rnd % 2]
            for t in order:
                port += 1
                for s, sec in run(hosts, t, a.sizes, port).items():
                    times[t][s].append(sec)
    med = {t: {s: statistics.median(v) for s, v in d.items()} for t, d in times.items()}
    if a.json:
        print(json.dumps(med))
        return
    print("| size | shm+tcp ms | tcp ring ms | shm+tcp busbw GB/s | tcp busbw GB/s | tcp / shm+tcp |")
    print("|---|---|---|---|---|---|")
    for s in a.sizes:
        h, t = med["auto"][s], med["tcp"][s]
        bus = lambda sec: s / sec / 1e9 * 2 * 3 / 4
        label = f"{s // MIB} MiB" if s >= MIB else f"{s // 1024} KiB"
        print(f"| {label} | {h * 1e3:.3f} | {t * 1e3:.3f} | {bus(h):.2f} | {bus(t):.2f} | {t / h:.2f} |")


if __name__ == "__main__":
    main()
