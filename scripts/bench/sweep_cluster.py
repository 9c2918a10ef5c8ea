#!/usr/bin/env python3
"""sweep --launcher slurm vs Ray Tune on two nodes: the same 16-trial ASHA search, side by side.

  scripts/slurm-check --up                    # as root: a two-node Slurm cluster left running
  export SLURM_CONF=/tmp/slurm-check.XXXXXX/slurm.conf
  .venv/bin/python scripts/bench/sweep_cluster.py [--sleep-ms 200] [--epochs 16]
  scripts/slurm-check --down /tmp/slurm-check.XXXXXX  # afterwards: stops all --up started

Both search learning rate x batch size (8 x 2 = 16 trials) with ASHA (max_t --epochs, grace 1,
reduction factor 4) over the curve of tools/sweep/examples/curve.rs, four trials at once over two
nodes of two CPUs:
- sweep: `salloc -N 2 --ntasks-per-node=2 sweep --launcher slurm`, each trial a job step running
  the compiled curve (one CPU each; the default slots, 2 nodes x 2 CPUs);
- Ray Tune: a two-node Ray cluster on this machine (ray.cluster_utils.Cluster: a head and a
  second node, two CPUs each, as `ray start --head` and `ray start --address` would make), a
  function trainable computing the same numbers, one CPU per trial.
Printed: wall time of each search, and the trials each stopped (with four at once the order of
results depends on timing, so a difference can be timing, not a different rule: the suite checks
the rule one slot at a time).
Needs target/release/sweep and target/release/examples/curve.
"""
import json
import logging
import math
import os
import sys
import tempfile
import time
from benchlib import flags, run_sweep_timed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "target/release")
CURVE = os.path.join(BIN, "examples/curve")
LRS = [1e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0]
BATCHES = [64, 512]


def run_sweep(a, out):
    space = os.path.join(out, "space.json")
    with open(space, "w") as f:
        json.dump({"lr": {"grid": LRS}, "batch_size": {"grid": BATCHES}}, f)
    cmd = ["salloc", "-N", "2", "--ntasks-per-node=2", os.path.join(BIN, "sweep"), "--launcher", "slurm",
           "--gpus-per-trial", "0", "--space", space, "--metric", "val_top1", "--mode", "max",
           "--time-attr", "epoch", "--max-t", str(a.epochs), "--grace-period", "1", "--reduction-factor", "4",
           "--out-dir", os.path.join(out, "run"), "-q", "--",
           CURVE, "--lr", "{lr}", "--batch-size", "{batch_size}", "--epochs", str(a.epochs),
           "--sleep-ms", str(a.sleep_ms)]
    return run_sweep_timed(cmd, lambda r: (r["config"]["lr"], r["config"]["batch_size"]))


def run_ray(a, out):
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    import ray
    from ray import tune
    from ray.cluster_utils import Cluster
    from ray.tune.schedulers import ASHAScheduler

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
    epochs, sleep = a.epochs, a.sleep_ms / 1000

    def trainable(config):
        q = math.exp(-((math.log10(config["lr"]) + 1.5) ** 2)) * (1 - config["batch_size"] / 1024)
        for e in range(1, epochs + 1):
            time.sleep(sleep)
            tune.report({"epoch": e, "val_top1": 100 * q * (1 - math.exp(-e / 3))})

    sched = ASHAScheduler(time_attr="epoch", metric="val_top1", mode="max", max_t=epochs, grace_period=1,
                          reduction_factor=4)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"lr": tune.grid_search(LRS), "batch_size": tune.grid_search(BATCHES)},
        tune_config=tune.TuneConfig(scheduler=sched, num_samples=1),
        run_config=tune.RunConfig(storage_path=out, verbose=0),
    )
    t = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - t
    stopped = {}
    for r in results:
        if r.metrics["epoch"] < epochs:
            stopped[(r.config["lr"], r.config["batch_size"])] = float(r.metrics["epoch"])
    ray.shutdown()
    cluster.shutdown()
    return wall, stopped


def main():
    a = flags(sleep_ms=200, epochs=16).parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit("SLURM_CONF is not set: start a cluster with scripts/slurm-check --up (as root) and export what it prints")
    with tempfile.TemporaryDirectory() as tmp:
        sw, ss = run_sweep(a, tempfile.mkdtemp(dir=tmp))
        print(f"sweep --launcher slurm: {sw:.2f} s", file=sys.stderr)
        rw, rs = run_ray(a, tempfile.mkdtemp(dir=tmp))
        print(f"Ray Tune, two nodes:    {rw:.2f} s", file=sys.stderr)
    print(f"\n16 trials, 4 at once over 2 nodes, ASHA max_t {a.epochs} grace 1 rf 4, {a.sleep_ms} ms/epoch")
    print(f"{'':<34}{'sweep (Slurm)':>15}{'Ray Tune':>12}{'ratio':>8}")
    print(f"{'search wall time (s)':<34}{sw:>15.2f}{rw:>12.2f}{rw / sw:>8.2f}")
    print(f"stopped: sweep {len(ss)}, Ray {len(rs)}, same trials and epochs: {ss == rs}")
    if ss != rs:
        print(f"  differing ((lr, batch), stopped_at): {sorted(set(ss.items()) ^ set(rs.items()))}")


if __name__ == "__main__":
    main()
