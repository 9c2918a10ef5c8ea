#!/usr/bin/env python3
"""sweep vs Ray Tune on the same search: 64 trials of a fast test program, 4 slots, ASHA.

  .venv/bin/python scripts/bench/sweep.py [--trials 64] [--slots 4] [--sleep-ms 20]

Both run the curve of tools/sweep/examples/curve.rs (val_top1 of lr and batch size, epoch by
epoch): sweep runs the compiled example as a process per trial, Ray Tune a function trainable
computing the same numbers (ray.init(num_cpus=SLOTS), each trial one CPU). The configs are the same
grid of learning rates for both (trial i gets the same lr in both).

Printed:
- wall time of the ASHA search with --sleep-ms per epoch, and the stopped sets side by side (with
  SLOTS trials at once the order of results depends on timing, so a difference can be timing; the
  one-slot run after it must agree exactly);
- scheduling overhead per trial start: FIFO, 1 result per trial, no sleep: wall × slots / trials;
- overhead per result: FIFO, 50 results per trial, no sleep: (wall50 − wall1) × slots / (trials · 49).
Needs target/release/sweep and target/release/examples/curve (cargo build --release -p sweep
--examples), or SHARDKIT_BIN / CURVE pointing at them.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
from benchlib import flags, run_sweep_timed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target/release"))
CURVE = os.environ.get("CURVE", os.path.join(ROOT, "target/release/examples/curve"))


def acc(lr, batch, e):
    q = math.exp(-((math.log10(lr) + 1.5) ** 2)) * (1 - batch / 1024)
    return 100 * q * (1 - math.exp(-e / 3))


def lrs(n):
    # A log grid from 1e-4 to 1, shuffled deterministically so good and poor trials interleave.
    g = [10 ** (-4 + 4 * i / (n - 1)) for i in range(n)]
    order = sorted(range(n), key=lambda i: (i * 37) % n)
    return [g[i] for i in order]


def run_sweep(a, scheduler, epochs, sleep_ms, slots, out):
    space = os.path.join(out, "space.json")
    with open(space, "w") as f:
        json.dump({"lr": {"grid": lrs(a.trials)}, "batch_size": 64}, f)
    cmd = [os.path.join(BIN, "sweep"), "--space", space, "--metric", "val_top1", "--mode", "max", "--time-attr", "epoch",
           "--max-t", str(epochs), "--grace-period", "1", "--reduction-factor", "4", "--scheduler", scheduler,
           "--slots", str(slots), "--gpus-per-trial", "0", "--out-dir", os.path.join(out, "run"), "-q", "--",
           CURVE, "--lr", "{lr}", "--batch-size", "{batch_size}", "--epochs", str(epochs), "--sleep-ms", str(sleep_ms)]
    return run_sweep_timed(cmd, lambda r: r["trial"])


RAY_RUN = r"""
import json, math, sys, time, os, logging
cfg = json.loads(sys.argv[1])
os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
import ray
from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
ray.init(num_cpus=cfg["slots"], include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
epochs, sleep = cfg["epochs"], cfg["sleep_ms"] / 1000

def trainable(config):
    q = math.exp(-((math.log10(config["lr"]) + 1.5) ** 2)) * (1 - config["batch_size"] / 1024)
    for e in range(1, epochs + 1):
        if sleep:
            time.sleep(sleep)
        tune.report({"epoch": e, "val_top1": 100 * q * (1 - math.exp(-e / 3))})

sched = (ASHAScheduler(time_attr="epoch", metric="val_top1", mode="max", max_t=epochs, grace_period=1, reduction_factor=4)
         if cfg["scheduler"] == "asha" else FIFOScheduler())
tuner = tune.Tuner(
    tune.with_resources(trainable, {"cpu": 1}),
    param_space={"lr": tune.grid_search(cfg["lrs"]), "batch_size": 64},
    tune_config=tune.TuneConfig(scheduler=sched, num_samples=1, max_concurrent_trials=cfg["slots"],
                                metric=None if cfg["scheduler"] == "asha" else "val_top1", mode=None if cfg["scheduler"] == "asha" else "max"),
    run_config=tune.RunConfig(storage_path=cfg["out"], verbose=0),
)
t = time.perf_counter()
results = tuner.fit()
wall = time.perf_counter() - t
stopped = {}
lr_index = {lr: i for i, lr in enumerate(cfg["lrs"])}
for r in results:
    last = r.metrics["epoch"]
    if last < epochs:
        stopped[lr_index[r.config["lr"]]] = last
print(json.dumps({"wall": wall, "stopped": stopped}))
"""


def run_ray(a, scheduler, epochs, sleep_ms, slots, out):
    cfg = {"lrs": lrs(a.trials), "scheduler": scheduler, "epochs": epochs, "sleep_ms": sleep_ms, "slots": slots, "out": out}
    p = subprocess.run([sys.executable, "-c", RAY_RUN, json.dumps(cfg)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"ray failed: {p.stderr[-3000:]}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return r["wall"], {int(k): v for k, v in r["stopped"].items()}


def main():
    a = flags(trials=64, slots=4, sleep_ms=20, epochs=16).parse_args()
    n, s = a.trials, a.slots
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        def both(name, scheduler, epochs, sleep_ms, slots):
            res = []
            for who, fn in (("sweep", run_sweep), ("ray", run_ray)):
                d = tempfile.mkdtemp(dir=tmp)
                res.append(fn(a, scheduler, epochs, sleep_ms, slots, d))
                print(f"{name:<36} {who:<6} {res[-1][0]:8.2f} s", file=sys.stderr)
            return res

        (sw, ss), (rw, rs) = both(f"ASHA, {s} slots, {a.sleep_ms} ms/epoch", "asha", a.epochs, a.sleep_ms, s)
        (sw1, ss1), (rw1, rs1) = both("ASHA, 1 slot, no sleep", "asha", a.epochs, 0, 1)
        (f1s, _), (f1r, _) = both("FIFO, 1 result/trial, no sleep", "fifo", 1, 0, s)
        (f50s, _), (f50r, _) = both("FIFO, 50 results/trial, no sleep", "fifo", 50, 0, s)
    start_s, start_r = f1s * s / n, f1r * s / n
    res_s, res_r = max(f50s - f1s, 0) * s / (n * 49), max(f50r - f1r, 0) * s / (n * 49)
    print(f"\n{n} trials, {s} slots, ASHA max_t {a.epochs} grace 1 rf 4")
    print(f"{'':<40}{'sweep':>12}{'Ray Tune':>12}{'ratio':>8}")
    print(f"{'ASHA search wall time (s)':<40}{sw:>12.2f}{rw:>12.2f}{rw / sw:>8.1f}")
    print(f"{'overhead per trial start (ms)':<40}{start_s * 1e3:>12.1f}{start_r * 1e3:>12.1f}{start_r / start_s:>8.1f}")
    print(f"{'overhead per result (ms)':<40}{res_s * 1e3:>12.3f}{res_r * 1e3:>12.3f}{(res_r / res_s) if res_s else float('inf'):>8.1f}")
    print(f"\nstopped, {s} slots:  sweep {len(ss)}, Ray {len(rs)}, same trials and epochs: {ss == rs}")
    if ss != rs:
        diff = sorted(set(ss.items()) ^ set(rs.items()))
        print(f"  differing (trial, stopped_at): {diff}")
    print(f"stopped, 1 slot:   sweep {len(ss1)}, Ray {len(rs1)}, identical: {ss1 == rs1}")
    print("sweep stopped (trial: epoch):", dict(sorted(ss.items())))
    print("Ray   stopped (trial: epoch):", dict(sorted(rs.items())))


if __name__ == "__main__":
    main()
