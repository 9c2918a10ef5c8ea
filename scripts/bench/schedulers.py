#!/usr/bin/env python3
"""sweep's schedulers against Ray Tune's on a noisy learning-curve model, side by side: for each
scheduler (fifo = random search alone, ASHA, HyperBand, the median rule, population-based
training, BOHB) and each seed, how good the trial each one picks is, and the epochs it spent.

  .venv/bin/python scripts/bench/schedulers.py [--seeds 20] [--trials 27] [--epochs 27]
                                               [--noise 3] [--slots 4] [--epoch-ms 10]

The model is sweep's `curve` stand-in with validation noise: val_top1(e) = 100·q·(1 − e^(−e/3))
+ noise·z(trial, e), q = exp(−(log10 lr + 1.5)²)·(1 − batch/1024), over lr ~ loguniform(1e-4, 1)
and batch ∈ {16, 32, ..., 512}. A scheduler's pick is the trial with the best last val_top1
(sweep's best.json, Ray's get_best_result(scope="last")); its quality is the noise-free value of
its final config at the last epoch (what the pick is worth), out of at most 100·(1 − e^−9).

Ours: the sweep CLI running the curve program (release build, each epoch --epoch-ms long so that
a pause or stop lands before the next), --slots trials at a time; epochs spent are the results
it judged.
Ray's: Ray Tune 2.60's own scheduler objects (AsyncHyperBandScheduler, HyperBandScheduler,
MedianStoppingRule, PopulationBasedTraining, HyperBandForBOHB with the TuneBOHB searcher) driven
by a stand-in controller with the same number of trials running at once, configs drawn by Ray's
own samplers from numpy seeded with the seed (BOHB's by TuneBOHB(seed=seed), one trial made at a
time as Ray's controller makes a searcher's), and the same model (computed here in Python, bit
for bit as the curve program does) — Ray's decisions without Ray's actors, so it runs in
seconds. A trial's result at the last epoch goes to the scheduler (and searcher), then the trial
completes, as with a Tuner given no stop condition and as in sweep. Both sides draw different
configs except BOHB's (sweep's space draws are not numpy's), and which trial reports first
differs: the comparison is of distributions over the seeds. Ray's BOHB needs HpBandSter
(`scripts/setup --bench`); without it that cell says n/a.
"""
import json, math, os, random, statistics, subprocess, sys, tempfile, time

import numpy as np
from benchlib import flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
M = (1 << 64) - 1
BATCHES = [16, 32, 64, 128, 256, 512]
# NAME or NAME:TRIALS (that many trials instead of --trials: 49 fill one HyperBand round of
# η 3 and 27 epochs — 27 + 12 + 6 + 4 — where 27 trials all land in its most aggressive bracket).
METHODS = ["fifo", "asha", "hyperband", "median", "pbt", "bohb", "bohb:49"]


def normal(seed, epoch):
    """The curve program's noise: splitmix64 of (seed, epoch), then Box–Muller."""
    x = seed ^ ((epoch * 0x9E3779B97F4A7C15) & M)
    out = []
    for _ in range(2):
        x = (x + 0x9E3779B97F4A7C15) & M
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        out.append(z ^ (z >> 31))
    u1 = ((out[0] >> 11) + 0.5) / 2 ** 53
    u2 = (out[1] >> 11) / 2 ** 53
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


def quality(config):
    return math.exp(-(math.log10(config["lr"]) + 1.5) ** 2) * (1 - config["batch_size"] / 1024)


def val(config, epoch, trial, noise):
    return 100 * quality(config) * (1 - math.exp(-epoch / 3)) + noise * normal(trial, epoch)


def worth(config, epochs):
    """What a picked config is worth: its noise-free value at the last epoch."""
    return 100 * quality(config) * (1 - math.exp(-epochs / 3))


def sweep_args(method, a):
    common = ["--max-t", str(a.epochs)]
    return common + {
        "fifo": ["--scheduler", "fifo"],
        "asha": ["--scheduler", "asha", "--grace-period", "1", "--reduction-factor", "3"],
        "hyperband": ["--scheduler", "hyperband", "--reduction-factor", "3"],
        "median": ["--scheduler", "median", "--grace-period", "3"],
        "pbt": ["--scheduler", "pbt", "--perturbation-interval", "3"],
        "bohb": ["--search", "bohb", "--reduction-factor", "3"],
    }[method]


def ours(name, seed, a, work):
    method, trials = split(name, a)
    out = os.path.join(work, f"{method}-{trials}-{seed}")
    space = os.path.join(work, "space.json")
    with open(space, "w") as f:
        json.dump({"lr": {"loguniform": [1e-4, 1.0]}, "batch_size": {"choice": BATCHES}}, f)
    curve = os.path.join(ROOT, "target/release/examples/curve")
    cmd = [os.path.join(ROOT, "target/release/sweep"), "--space", space, "--samples", str(trials),
           "--seed", str(seed), "--metric", "val_top1", "--mode", "max", "--time-attr", "epoch",
           "--slots", str(a.slots), "--gpus-per-trial", "0", "--cpus-per-trial", "0", "-q",
           "--out-dir", out] + sweep_args(method, a) + [
        "--", curve, "--lr", "{lr}", "--batch-size", "{batch_size}", "--epochs", str(a.epochs),
        "--noise", str(a.noise), "--noise-seed", "{trial}", "--state", "{trial_dir}/state",
        "--sleep-ms", str(a.epoch_ms)]
    t0 = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.time() - t0
    best = json.load(open(os.path.join(out, "best.json")))
    epochs = sum(1 for line in open(os.path.join(out, "journal.jsonl"))
                 if json.loads(line)["event"] == "result")
    return worth(best["config"], a.epochs), epochs, wall


class Trial:
    def __init__(self, i, config):
        from ray.tune.experiment import Trial as RayTrial
        self.S = RayTrial
        self.trial_id, self.index, self.config = str(i), i, dict(config)
        self.status = RayTrial.PENDING
        self.is_saving = False
        self.last_result, self.evaluated_params, self.experiment_tag = {}, {}, str(i)
        self.epoch = 0
        self.history = []

        class Stub:
            pass
        self.run_metadata = Stub()
        self.run_metadata.checkpoint_manager = Stub()
        self.run_metadata.checkpoint_manager.checkpoint_config = Stub()
        self.run_metadata.checkpoint_manager.checkpoint_config.num_to_keep = None

    def is_finished(self):
        return self.status in (self.S.TERMINATED, self.S.ERROR)

    def set_experiment_tag(self, tag):
        self.experiment_tag = tag

    def set_config(self, config):
        self.config = config


class Controller:
    """What Ray's schedulers ask of the TuneController."""
    def __init__(self, scheduler, trials, searcher=None):
        self.scheduler, self.trials = scheduler, trials

        class SearchAlg:
            pass
        self.search_alg = SearchAlg()
        self.search_alg.searcher = searcher

    def get_trials(self):
        return self.trials

    def get_live_trials(self):
        return [t for t in self.trials if not t.is_finished()]

    def _schedule_trial_save(self, trial, result=None):
        return ("checkpoint", trial.index, trial.epoch)

    def pause_trial(self, trial, should_checkpoint=True):
        trial.status = trial.S.PAUSED

    def stop_trial(self, t):
        if t.is_finished():
            return
        if t.status in (t.S.PENDING, t.S.PAUSED):
            self.scheduler.on_trial_remove(self, t)
            if self.search_alg.searcher:
                self.search_alg.searcher.on_trial_complete(t.trial_id)
        else:
            self.scheduler.on_trial_complete(self, t, t.last_result)
            if self.search_alg.searcher:
                self.search_alg.searcher.on_trial_complete(t.trial_id, result=t.last_result)
        t.status = t.S.TERMINATED


def ray_scheduler(method, a):
    from ray import tune
    from ray.tune.schedulers import (AsyncHyperBandScheduler, FIFOScheduler, HyperBandForBOHB,
                                     HyperBandScheduler, MedianStoppingRule, PopulationBasedTraining)
    kw = dict(time_attr="epoch", metric="val_top1", mode="max")
    return {
        "fifo": lambda: FIFOScheduler(),
        "asha": lambda: AsyncHyperBandScheduler(max_t=a.epochs, grace_period=1, reduction_factor=3, **kw),
        "hyperband": lambda: HyperBandScheduler(max_t=a.epochs, reduction_factor=3, **kw),
        "bohb": lambda: HyperBandForBOHB(max_t=a.epochs, reduction_factor=3, **kw),
        "median": lambda: MedianStoppingRule(grace_period=3, hard_stop=True, **kw),
        "pbt": lambda: PopulationBasedTraining(
            perturbation_interval=3, log_config=False,
            hyperparam_mutations={"lr": tune.loguniform(1e-4, 1.0), "batch_size": BATCHES}, **kw),
    }[method]()


def split(name, a):
    method, _, trials = name.partition(":")
    return method, int(trials) if trials else a.trials


def ray(name, seed, a):
    method, n = split(name, a)
    from ray import tune
    from ray.tune.experiment import Trial as RayTrial
    np.random.seed(seed)
    random.seed(seed)
    space = {"lr": tune.loguniform(1e-4, 1.0), "batch_size": tune.choice(BATCHES)}
    sched = ray_scheduler(method, a)
    S = RayTrial
    if method == "bohb":
        from ray.tune.search.bohb import TuneBOHB
        searcher = TuneBOHB(space=space, metric="val_top1", mode="max", seed=seed)
        trials = []
    else:
        searcher = None
        configs = [{k: d.sample() for k, d in space.items()} for _ in range(n)]
        trials = [Trial(i, c) for i, c in enumerate(configs)]
    ctl = Controller(sched, trials, searcher)
    for t in trials:
        sched.on_trial_add(ctl, t)

    def make_pending():
        # A searcher's trials are made one at a time: the next when none made is pending.
        if searcher and len(trials) < n and not any(t.status == S.PENDING for t in trials):
            t = Trial(len(trials), searcher.suggest(str(len(trials))))
            trials.append(t)
            sched.on_trial_add(ctl, t)

    pick = random.Random(seed)
    epochs_used = 0
    # A copy (PBT) takes the copied trial's checkpoint: its epoch then.
    for _ in range(100000):
        make_pending()
        while sum(t.status == S.RUNNING for t in trials) < a.slots:
            t = sched.choose_trial_to_run(ctl) if hasattr(sched, "choose_trial_to_run") else None
            t = t or next((t for t in trials if t.status == S.PENDING), None)
            if t is None:
                break
            ck = getattr(t.run_metadata.checkpoint_manager, "_latest_checkpoint_result", None)
            if ck is not None and ck.checkpoint:
                t.epoch = ck.checkpoint[2]
                t.run_metadata.checkpoint_manager._latest_checkpoint_result = None
            t.status = S.RUNNING
            if t.epoch >= a.epochs:  # resumed after its last epoch: it ends at once
                ctl.stop_trial(t)
            make_pending()
        running = [t for t in trials if t.status == S.RUNNING]
        if not running:
            break
        t = pick.choice(running)
        t.epoch += 1
        epochs_used += 1
        result = {"epoch": t.epoch, "val_top1": val(t.config, t.epoch, t.index, a.noise),
                  "training_iteration": len(t.history) + 1}
        t.history.append(result["val_top1"])
        action = sched.on_trial_result(ctl, t, result)
        if action != "STOP" and searcher:
            searcher.on_trial_result(t.trial_id, result)
        t.last_result = result
        if action == "STOP":
            ctl.stop_trial(t)
        elif action == "PAUSE":
            t.status = S.PAUSED
        elif t.epoch >= a.epochs:  # the command ends after its last epoch
            ctl.stop_trial(t)
    best = max((t for t in trials if t.history and math.isfinite(t.history[-1])),
               key=lambda t: t.history[-1])
    return worth(best.config, a.epochs), epochs_used


def main():
    # An epoch must take long enough (--epoch-ms) for a pause or stop to land before the next
    # one: a command that runs ahead of the scheduler does work nobody asked for.
    a = flags(seeds=20, trials=27, epochs=27, noise=3.0, slots=4, epoch_ms=10,
              methods=",".join(METHODS)).parse_args()
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "sweep", "--bins", "--examples"],
                   cwd=ROOT, check=True)
    import logging, warnings
    logging.disable(logging.WARNING)
    # statsmodels' notices and numpy's divide warnings under HpBandSter's model
    warnings.simplefilter("ignore", FutureWarning)
    warnings.simplefilter("ignore", RuntimeWarning)
    best_possible = worth({"lr": 10 ** -1.5, "batch_size": 16}, a.epochs)
    print(f"{a.trials} trials, {a.epochs} epochs each at most, noise {a.noise}, {a.slots} at once, "
          f"{a.seeds} seeds; worth of the picked config (best possible {best_possible:.2f}), "
          f"epochs spent")
    print(f"{'scheduler':<10} {'sweep worth':>16} {'Ray worth':>16} {'sweep epochs':>13} "
          f"{'Ray epochs':>11} {'sweep s/run':>12}")
    with tempfile.TemporaryDirectory() as work:
        for method in a.methods.split(","):
            o = [ours(method, s, a, work) for s in range(a.seeds)]
            try:
                r = [ray(method, s, a) for s in range(a.seeds)]
            except ImportError as e:  # Ray's BOHB without HpBandSter (scripts/setup --bench)
                print(f"# Ray's {method}: {e}", file=sys.stderr)
                r = None

            def ms(v):
                return f"{statistics.mean(v):6.2f} ± {statistics.stdev(v) if len(v) > 1 else 0:4.2f}"
            rw = ms([x[0] for x in r]) if r else "n/a"
            re = f"{statistics.mean(x[1] for x in r):.0f}" if r else "n/a"
            print(f"{method:<10} {ms([x[0] for x in o]):>16} {rw:>16} "
                  f"{statistics.mean(x[1] for x in o):>13.0f} {re:>11} "
                  f"{statistics.mean(x[2] for x in o):>12.2f}", flush=True)


if __name__ == "__main__":
    main()
