#!/usr/bin/env python3
"""crop-resize vs Pillow doing the same work on the same files (decode, convert('RGB'), centre
crop, LANCZOS resize, save PNG), side by side. Prints images/s and max/mean |delta|.

  .venv/bin/python scripts/bench/crop_resize.py [--n 120] [--workdir /tmp/shardkit-bench-crop]

Cases: JPEG 4:2:0 photos ~1024x768 down to 256 (seed 000 at 256) and to 1024 (mostly upscale of
the crop), PNG ~800x600 down to 256. Pillow runs in one process (what seed 000 does) and in a
multiprocessing pool of all cores; crop-resize with -j1 and with all cores. Each timing is the best
of --repeat runs with outputs removed between runs (so nothing is skipped).
"""
import json, os, subprocess, sys, time

import numpy as np
from PIL import Image
from benchlib import flags, fresh_runs, pillow_crop_resize, run_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))


def make_inputs(d, n):
    rng = np.random.RandomState(7)
    os.makedirs(d, exist_ok=True)
    paths = {"jpg": [], "png": []}
    for i in range(n):
        for ext, (w, h) in (("jpg", (1024, 768)), ("png", (800, 600))):
            p = f"{d}/{ext}{i:04d}.{ext}"
            paths[ext].append(p)
            if os.path.exists(p):
                continue
            w, h = w + int(rng.randint(-64, 64)), h + int(rng.randint(-64, 64))
            y, x = np.mgrid[0:h, 0:w] / 100.0
            img = np.stack([np.sin(x * (1 + k) + y * (2 - k) + i) * 80 + 128 for k in range(3)], -1)
            img += rng.normal(0, 10, img.shape)
            Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(p, **({"quality": 90} if ext == "jpg" else {}))
    return paths


def run_pillow(paths, out, r, procs):
    jobs = [(p, f"{out}/{os.path.splitext(os.path.basename(p))[0]}.png", r) for p in paths]
    t = time.perf_counter()
    run_jobs(pillow_crop_resize, jobs, procs, chunksize=4)
    return time.perf_counter() - t


def run_ours(paths, out, r, jobs):
    t = time.perf_counter()
    subprocess.run([f"{BIN}/crop-resize", "-q", "-r", str(r), "-o", out, "--base", os.path.dirname(paths[0]), "-j", str(jobs)],
                   input="\n".join(paths).encode(), stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def best(fn, out, repeat):
    return min(fresh_runs(fn, out, repeat))


def compare(a_dir, b_dir):
    mx, total, count = 0, 0.0, 0
    for name in sorted(os.listdir(a_dir)):
        a = np.asarray(Image.open(f"{a_dir}/{name}"), dtype=np.int16)
        b = np.asarray(Image.open(f"{b_dir}/{name}"), dtype=np.int16)
        d = np.abs(a - b)
        mx, total, count = max(mx, int(d.max())), total + float(d.sum()), count + d.size
    return mx, total / count


def main():
    a = flags(n=120, repeat=2, workdir="/tmp/shardkit-bench-crop").parse_args()
    cores = os.cpu_count()
    paths = make_inputs(f"{a.workdir}/in", a.n)
    rows = []
    for ext, r in (("jpg", 256), ("jpg", 1024), ("png", 256)):
        ps = paths[ext]
        po, oo = f"{a.workdir}/pil", f"{a.workdir}/ours"
        t_p1 = best(lambda o: run_pillow(ps, o, r, 1), po + "1", a.repeat)
        t_pn = best(lambda o: run_pillow(ps, o, r, cores), po, a.repeat)
        t_o1 = best(lambda o: run_ours(ps, o, r, 1), oo + "1", a.repeat)
        t_on = best(lambda o: run_ours(ps, o, r, cores), oo, a.repeat)
        mx, mean = compare(po, oo)
        n = len(ps)
        rows.append({"case": f"{ext}->{r}", "images": n, "pillow_1proc_img_s": n / t_p1, f"pillow_{cores}proc_img_s": n / t_pn,
                     "ours_j1_img_s": n / t_o1, f"ours_j{cores}_img_s": n / t_on,
                     "ratio_j1_vs_pillow_1proc": t_p1 / t_o1, f"ratio_j{cores}_vs_pillow_{cores}proc": t_pn / t_on,
                     "max_abs_diff": mx, "mean_abs_diff": mean})
    print(f"{'case':<10} {'n':>4} {'Pillow 1p':>10} {'Pillow %dp' % cores:>10} {'ours -j1':>9} {'ours -j%d' % cores:>9} {'x (1 core)':>10} {'x (all)':>8} {'max|d|':>6} {'mean|d|':>8}")
    for r in rows:
        v = list(r.values())
        print(f"{v[0]:<10} {v[1]:>4} {v[2]:>10.1f} {v[3]:>10.1f} {v[4]:>9.1f} {v[5]:>9.1f} {v[6]:>10.2f} {v[7]:>8.2f} {v[8]:>6} {v[9]:>8.4f}")
    print(json.dumps({"bench": "crop-resize", "cores": cores, "rows": rows}))


if __name__ == "__main__":
    main()
