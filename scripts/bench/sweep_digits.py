#!/usr/bin/env python3
"""A real sweep: ddp-train on the digits (scikit-learn's 8x8 digits as CIFAR-100 files, ResNet-18,
E epochs) over lr and weight decay, by sweep's random search, TPE, and ASHA over random search,
beside Optuna's TPESampler running the same command: the best val_top1 after each number of
trials, per method and seed.

  .venv/bin/python scripts/bench/sweep_digits.py [--trials 30] [--seeds 1] [--epochs 3]

Every trial runs `ddp-train --data cifar100:DIGITS --epochs E --lr {lr} --weight-decay
{weight_decay} --batch-size 64 --threads N -q` (the training seed fixed: a config's value does
not depend on the method that chose it; on the CPU ddp-train is deterministic), one trial at a
time. sweep's TPE decides as Optuna's does for the same history, so with the same seed and the
same values the two TPE columns are expected to pick the same configs. A run takes about
trials x methods x seeds x (E x 3.5 s) on this 2-core machine.
"""
import argparse, csv, json, os, subprocess, sys, tempfile

import optuna

optuna.logging.set_verbosity(optuna.logging.ERROR)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))
SPACE = {"lr": {"loguniform": [1e-3, 1.0]}, "weight_decay": {"loguniform": [1e-6, 1e-2]}}


def command(digits, epochs, threads):
    return [f"{BIN}/ddp-train", "--data", f"cifar100:{digits}", "--epochs", str(epochs), "--lr", "{lr}",
            "--weight-decay", "{weight_decay}", "--batch-size", "64", "--threads", str(threads), "-q"]


def best_so_far(values):
    out, best = [], float("-inf")
    for v in values:
        best = max(best, v)
        out.append(best)
    return out


def run_sweep(method, seed, a, digits, work):
    out = os.path.join(work, f"{method}-{seed}")
    space = os.path.join(work, "space.json")
    json.dump(SPACE, open(space, "w"))
    args = [f"{BIN}/sweep", "--space", space, "--samples", str(a.trials), "--seed", str(seed),
            "--metric", "val_top1", "--mode", "max", "--time-attr", "epoch", "--max-t", str(a.epochs),
            "--slots", "1", "--gpus-per-trial", "0", "--cpus-per-trial", "0", "--out-dir", out, "-q"]
    if method == "tpe":
        args += ["--search", "tpe", "--scheduler", "fifo"]
    elif method == "random":
        args += ["--scheduler", "fifo"]
    else:  # asha over random search
        args += ["--scheduler", "asha", "--grace-period", "1", "--reduction-factor", "3"]
    subprocess.run(args + ["--"] + command(digits, a.epochs, a.threads), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = sorted(csv.DictReader(open(os.path.join(out, "results.csv"))), key=lambda r: int(r["trial"]))
    # A trial ASHA stopped counts with its last value (what the sweep knew of it).
    return best_so_far([float(r["last_val_top1"]) for r in rows]), [
        (float(r["config/lr"]), float(r["config/weight_decay"])) for r in rows]


def run_optuna(seed, a, digits):
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    values, configs = [], []
    for _ in range(a.trials):
        t = study.ask()
        lr = t.suggest_float("lr", 1e-3, 1.0, log=True)  # in name order, as sweep suggests
        wd = t.suggest_float("weight_decay", 1e-6, 1e-2, log=True)
        cmd = [c.replace("{lr}", repr(lr)).replace("{weight_decay}", repr(wd))
               for c in command(digits, a.epochs, a.threads)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        v = [json.loads(l) for l in out.splitlines() if '"type":"epoch"' in l][-1]["val_top1"]
        study.tell(t, v)
        values.append(v)
        configs.append((lr, wd))
    return best_so_far(values), configs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "shardkit-bench-sweep"))
    a = ap.parse_args()
    digits = os.path.join(a.workdir, "digits")
    if not os.path.exists(os.path.join(digits, "train.bin")):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make-digits-cifar"), digits], check=True,
                       stdout=subprocess.DEVNULL)
    curves, picks = {}, {}
    for seed in range(a.seeds):
        work = os.path.join(a.workdir, f"seed{seed}")
        subprocess.run(["rm", "-rf", work], check=True)
        os.makedirs(work)
        for method in ("random", "tpe", "asha+random"):
            c, p = run_sweep(method, seed, a, digits, work)
            curves.setdefault(method, []).append(c)
            picks[(method, seed)] = p
        c, p = run_optuna(seed, a, digits)
        curves.setdefault("optuna tpe", []).append(c)
        picks[("optuna tpe", seed)] = p
    budgets = [b for b in (5, 10, 15, 20, 30, 50, 100) if b <= a.trials]
    print(f"# ddp-train on the digits, {a.epochs} epochs: best val_top1 after N trials, mean over {a.seeds} seed(s)")
    print(f"{'method':<14}" + "".join(f"{'N=' + str(b):>9}" for b in budgets))
    for m, cs in curves.items():
        print(f"{m:<14}" + "".join(f"{sum(c[b - 1] for c in cs) / len(cs):>9.2f}" for b in budgets))
    close = lambda p, q: all(abs(x - y) <= 1e-9 * abs(y) for u, v in zip(p, q) for x, y in zip(u, v))
    same = sum(close(picks[("tpe", s)], picks[("optuna tpe", s)]) for s in range(a.seeds))
    print(f"sweep's TPE and Optuna's picked the same {a.trials} configs in {same} of {a.seeds} seed(s)")
    print(json.dumps({"bench": "sweep-digits", "epochs": a.epochs, "trials": a.trials, "curves": curves}))


if __name__ == "__main__":
    main()
