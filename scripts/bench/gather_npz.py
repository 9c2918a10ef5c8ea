#!/usr/bin/env python3
"""gather-npz vs the numpy loop it replaces, on the same files.

  .venv/bin/python scripts/bench/gather_npz.py [--n 20000] [--k 1] [--d 512]

Makes N files <i>.npz with w float32 [1,k,d] (np.savez, as seed 000 writes them), then times
  numpy:      ws = [np.load(p)['w'] for p in paths]; np.savez(out, w=np.concatenate(ws), names=...)
  gather-npz: gather-npz -o out.npz < list
each the best of --repeat warm-cache runs, and checks both outputs hold the same array.
"""
import json, os, subprocess, time

import numpy as np
from benchlib import flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))


def main():
    a = flags(n=20000, k=1, d=512, repeat=3, workdir="/tmp/shardkit-bench-gather").parse_args()
    d = f"{a.workdir}/lat_{a.n}_{a.k}_{a.d}"
    os.makedirs(d, exist_ok=True)
    paths = [f"{d}/{i:06d}.npz" for i in range(a.n)]
    rng = np.random.RandomState(0)
    for p in paths:
        if not os.path.exists(p):
            np.savez(p, w=rng.standard_normal((1, a.k, a.d)).astype(np.float32))
    listing = f"{a.workdir}/list.txt"
    with open(listing, "w") as f:
        f.write("\n".join(paths) + "\n")

    def numpy_loop():
        ws = [np.load(p)["w"] for p in paths]
        np.savez(f"{a.workdir}/numpy.npz", w=np.concatenate(ws), names=np.array(paths))

    def ours():
        with open(listing) as f:
            subprocess.run([f"{BIN}/gather-npz", "-q", "--overwrite", "-o", f"{a.workdir}/ours.npz"], stdin=f,
                           stdout=subprocess.DEVNULL, check=True)

    def best(fn):
        ts = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return min(ts)

    t_np, t_ours = best(numpy_loop), best(ours)
    same = np.array_equal(np.load(f"{a.workdir}/numpy.npz")["w"], np.load(f"{a.workdir}/ours.npz")["w"])
    res = {"bench": "gather-npz", "files": a.n, "shape": [1, a.k, a.d], "numpy_s": t_np, "gather_npz_s": t_ours,
           "speedup": t_np / t_ours, "identical": bool(same), "cores": os.cpu_count()}
    print(f"{a.n} files of [1,{a.k},{a.d}]: numpy loop {t_np:.3f} s, gather-npz {t_ours:.3f} s, {t_np / t_ours:.1f}x, identical={same}")
    print(json.dumps(res))


if __name__ == "__main__":
    main()
