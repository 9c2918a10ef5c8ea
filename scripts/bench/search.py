#!/usr/bin/env python3
"""sweep's search algorithms on standard test functions against Optuna's, side by side: the best
value found after 10, 25, 50 and 100 trials (mean and median over the seeds) for random search
and TPE, ours (shared/search, through its tpe_bench example) and Optuna 5.0's (RandomSampler,
TPESampler with its defaults), and BOHB's model alone (every result at one budget: no
brackets), ours and HpBandSter's (what Ray's TuneBOHB runs; when installed: `scripts/setup
--bench`), on Branin (minimum 0.397887) and Hartmann-6 (minimum -3.32237); then the time of one
suggestion with 1,000 finished trials of history.

  .venv/bin/python scripts/bench/search.py [--trials 100] [--seeds 20] [--history 1000]

Ours draws from numpy's streams as Optuna does and decides as Optuna's TPE does for the same
history (shared/search/tests/tpe_optuna.rs), and our BOHB as HpBandSter's given the same seed
(shared/search/tests/bohb_hpbandster.rs), so with the same seed the columns are expected to be
equal trial for trial (the functions are the same float64 arithmetic on both sides); the
benchmark shows whether they are, and the cost of a suggestion.
"""
import json, math, os, subprocess, sys, time

import numpy as np
import optuna
from benchlib import flags

optuna.logging.set_verbosity(optuna.logging.ERROR)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def branin(x):
    a, b, c = 1.0, 5.1 / (4.0 * math.pi ** 2), 5.0 / math.pi
    r, s, t = 6.0, 10.0, 1.0 / (8.0 * math.pi)
    return a * (x[1] - b * x[0] * x[0] + c * x[0] - r) ** 2 + s * (1.0 - t) * math.cos(x[0]) + s


ALPHA = [1.0, 1.2, 3.0, 3.2]
A = [[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14], [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]]
P = [[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886], [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
     [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650], [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]]


def hartmann6(x):
    return -sum(ALPHA[i] * math.exp(-sum(A[i][j] * (x[j] - P[i][j]) ** 2 for j in range(6))) for i in range(4))


FUNCTIONS = {"branin": (branin, [(-5.0, 10.0), (0.0, 15.0)]), "hartmann6": (hartmann6, [(0.0, 1.0)] * 6)}


def optuna_run(name, sampler, trials):
    f, bounds = FUNCTIONS[name]
    study = optuna.create_study(sampler=sampler)
    best = []
    for _ in range(trials):
        t = study.ask()
        x = [t.suggest_float("x%d" % i, lo, hi) for i, (lo, hi) in enumerate(bounds)]
        v = f(x)
        study.tell(t, v)
        best.append(min(v, best[-1]) if best else v)
    return best


def hpbandster_run(name, seed, trials):
    """HpBandSter's BOHB config generator (as TuneBOHB seeds it), every result at budget 1."""
    import logging, warnings
    import ConfigSpace as CS
    from hpbandster.optimizers.config_generators.bohb import BOHB
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    f, bounds = FUNCTIONS[name]
    cs = CS.ConfigurationSpace()
    for i, (lo, hi) in enumerate(bounds):
        cs.add(CS.UniformFloatHyperparameter("x%d" % i, lower=lo, upper=hi))
    cs.seed(seed)
    np.random.seed(seed)
    bohb = BOHB(cs)

    class Job:
        def __init__(self, config, value):
            self.result, self.kwargs, self.exception = {"loss": value}, {"budget": 1.0, "config": config}, None
    best = []
    for _ in range(trials):
        config, _ = bohb.get_config(None)
        v = f([config["x%d" % i] for i in range(len(bounds))])
        bohb.new_result(Job(config, v))
        best.append(min(v, best[-1]) if best else v)
    return best


def optuna_suggest_ms(name, history):
    f, bounds = FUNCTIONS[name]
    dists = {"x%d" % i: optuna.distributions.FloatDistribution(lo, hi) for i, (lo, hi) in enumerate(bounds)}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0))
    rng = np.random.RandomState(0)
    for _ in range(history):
        x = [lo + rng.rand() * (hi - lo) for lo, hi in bounds]
        study.add_trial(optuna.trial.create_trial(params={"x%d" % i: v for i, v in enumerate(x)},
                                                  distributions=dists, value=f(x)))
    reps, t0 = 5, time.perf_counter()
    for _ in range(reps):
        t = study.ask()
        for i, (lo, hi) in enumerate(bounds):
            t.suggest_float("x%d" % i, lo, hi)
        study.tell(t, state=optuna.trial.TrialState.FAIL)  # keep the history at its size
    return (time.perf_counter() - t0) * 1000 / reps


def main():
    a = flags(trials=100, seeds=20, history=1000).parse_args()
    env = dict(os.environ)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "search", "--examples"], cwd=ROOT, check=True, env=env)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    out = subprocess.run([os.path.join(target, "release", "examples", "tpe_bench"), str(a.trials), str(a.seeds),
                          str(a.history)], check=True, capture_output=True, text=True).stdout
    curves, ours_ms, bohb_ms = {}, {}, {}
    for line in out.splitlines():
        r = json.loads(line)
        if "suggest_ms" in r:
            ours_ms[r["function"]] = r["suggest_ms"]
            bohb_ms[r["function"]] = r["bohb_suggest_ms"]
        else:
            curves.setdefault((r["function"], "ours " + r["method"]), []).append(r["best"])
    try:
        import hpbandster  # noqa: F401
        methods = ("ours random", "optuna random", "ours tpe", "optuna tpe", "ours bohb", "hpbandster bohb")
    except ImportError:
        print("# HpBandSter not installed (scripts/setup --bench): its BOHB column left out", file=sys.stderr)
        methods = ("ours random", "optuna random", "ours tpe", "optuna tpe", "ours bohb")
    for name in FUNCTIONS:
        for seed in range(a.seeds):
            curves.setdefault((name, "optuna random"), []).append(
                optuna_run(name, optuna.samplers.RandomSampler(seed=seed), a.trials))
            curves.setdefault((name, "optuna tpe"), []).append(
                optuna_run(name, optuna.samplers.TPESampler(seed=seed), a.trials))
            if "hpbandster bohb" in methods:
                curves.setdefault((name, "hpbandster bohb"), []).append(hpbandster_run(name, seed, a.trials))
    budgets = [b for b in (10, 25, 50, 100) if b <= a.trials]
    rows = []
    for name in FUNCTIONS:
        print(f"# {name}: best value after N trials, mean (median) over {a.seeds} seeds")
        print(f"{'method':<16}" + "".join(f"{'N=' + str(b):>20}" for b in budgets))
        for method in methods:
            c = np.array(curves[(name, method)])
            cells = [(float(c[:, b - 1].mean()), float(np.median(c[:, b - 1]))) for b in budgets]
            print(f"{method:<16}" + "".join(f"{m:>11.4f} ({md:>7.4f})" for m, md in cells))
            rows.append({"function": name, "method": method, "budgets": budgets, "mean": [m for m, _ in cells],
                         "median": [md for _, md in cells]})
        for ours, ref in (("ours tpe", "optuna tpe"), ("ours bohb", "hpbandster bohb")):
            if ref in methods:
                # Within 1e-9 relative: the suggestions may differ in the last bits (numpy's
                # vectorised exp), not more.
                same = sum(np.allclose(x, y, rtol=1e-9, atol=0)
                           for x, y in zip(curves[(name, ours)], curves[(name, ref)]))
                print(f"{ours} and {ref}: the same best-so-far curve in {same} of {a.seeds} seeds")
        theirs = optuna_suggest_ms(name, a.history)
        print(f"one suggestion with {a.history} finished trials: ours {ours_ms[name]:.2f} ms, Optuna {theirs:.1f} ms; "
              f"ours BOHB (from its model, the trials as results at one budget) {bohb_ms[name]:.2f} ms")
        rows.append({"function": name, "history": a.history, "ours_ms": ours_ms[name], "optuna_ms": theirs})
    print(json.dumps({"bench": "search", "seeds": a.seeds, "trials": a.trials, "rows": rows}))


if __name__ == "__main__":
    main()
