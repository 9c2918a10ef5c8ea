#!/usr/bin/env python3
"""A real sweep: ddp-train on the digits (scikit-learn's 8x8 digits as CIFAR-100 files, ResNet-18,
at most E epochs) over learning rate and weight decay, by sweep's random search, TPE, ASHA over
random search and BOHB, beside Optuna's TPESampler and Ray Tune (a Tuner running the same
command: random search, ASHA over random search, BOHB) on the same objective and the same
number of trials: the best val_top1 after each number of trials, and the epochs spent, per
method and seed.

  .venv/bin/python scripts/bench/sweep_digits.py [--trials 18] [--seeds 1] [--first-seed 0]
      [--epochs 9] [--max-steps 8] [--stem imagenet] [--methods ...] [--json RUNS.jsonl]
  .venv/bin/python scripts/bench/sweep_digits.py --report RUNS.jsonl   # the table of saved runs

Every trial runs `ddp-train --data cifar100:DIGITS --epochs E --max-steps S --lr {lr}
--weight-decay {weight_decay} --batch-size 64 --stem STEM --threads N --checkpoint-dir DIR
--resume -q` (the training seed fixed: a config's value does not depend on the method that chose
it; on the CPU ddp-train is deterministic, and a resumed run equals an uninterrupted one), one
trial at a time. ResNet-18's ImageNet stem (a 7x7/2 convolution and a max-pool) makes the 32x32
digits an 8x8 map, and S steps of 64 images an epoch (of 1,437) make each epoch see a part of the
set: harder than full epochs through the CIFAR stem, where every method reaches 98.6 %, and about
20x cheaper (about 2 s an epoch on this 2-core machine). Runs of seeds can be split over
machines or sessions with --first-seed and --json, and reported together with --report.

- sweep: `--slots 1`; ASHA `--grace-period 1 --reduction-factor 3`; BOHB `--search bohb
  --reduction-factor 3` (HyperBand brackets over max_t = E).
- Optuna: its TPESampler(seed) with ask/tell, each trial run to the end. A config that sweep's
  random search or TPE already ran to the end for this seed (the same floats: sweep's TPE
  suggests what Optuna does) takes that run's value instead of training again (counted).
- Ray Tune 2.60: a Tuner over a function trainable that runs the same command and reports each
  epoch record (for BOHB with the checkpoint directory, which a paused trial resumes from), one trial
  at a time (ray.init(num_cpus=1)); random search = BasicVariantGenerator(random_state=seed);
  ASHA = AsyncHyperBandScheduler(grace_period=1, reduction_factor=3); BOHB = TuneBOHB(seed=seed)
  with HyperBandForBOHB(reduction_factor=3) (needs HpBandSter: `scripts/setup --bench`). While
  Ray decides on a result the command is stopped (SIGSTOP), as a function trainable waits in
  `tune.report`; it dies with the trial's actor.

A trial stopped early counts with its last value (what the search knew of it). With the same
seed, sweep's TPE and Optuna's decide alike, and so do sweep's BOHB and Ray's: the script counts
the seeds where they picked the same configs.
"""
import csv, glob, json, os, shutil, subprocess, sys, tempfile, time
from benchlib import flags

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("SHARDKIT_BIN", os.path.join(ROOT, "target", "release"))
SPACE = {"lr": {"loguniform": [1e-3, 1.0]}, "weight_decay": {"loguniform": [1e-6, 1e-2]}}
# "ray random" (Ray's BasicVariantGenerator: the same distribution as sweep's random search from
# another generator) runs when named.
METHODS = ["random", "tpe", "asha+random", "bohb", "optuna tpe", "ray asha+random", "ray bohb"]


def command(a, digits, lr="{lr}", wd="{weight_decay}", ck="{trial_dir}/ck"):
    return [f"{BIN}/ddp-train", "--data", f"cifar100:{digits}", "--epochs", str(a.epochs),
            "--max-steps", str(a.max_steps), "--lr", lr,
            "--weight-decay", wd, "--batch-size", "64", "--stem", a.stem, "--threads", str(a.threads),
            "--checkpoint-dir", ck, "--resume", "-q"]


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
    args += {
        "random": ["--scheduler", "fifo"],
        "tpe": ["--search", "tpe", "--scheduler", "fifo"],
        "asha+random": ["--scheduler", "asha", "--grace-period", "1", "--reduction-factor", "3"],
        "bohb": ["--search", "bohb", "--reduction-factor", "3"],
    }[method]
    subprocess.run(args + ["--"] + command(a, digits), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    rows = sorted(csv.DictReader(open(os.path.join(out, "results.csv"))), key=lambda r: int(r["trial"]))
    epochs = sum(1 for line in open(os.path.join(out, "journal.jsonl"))
                 if json.loads(line)["event"] == "result")
    return ([float(r["last_val_top1"]) for r in rows],
            [(float(r["config/lr"]), float(r["config/weight_decay"])) for r in rows], epochs)


def run_optuna(seed, a, digits, work, known):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    values, configs, reused = [], [], 0
    for i in range(a.trials):
        t = study.ask()
        lr = t.suggest_float("lr", 1e-3, 1.0, log=True)  # in name order, as sweep suggests
        wd = t.suggest_float("weight_decay", 1e-6, 1e-2, log=True)
        if (lr, wd) in known:
            v = known[(lr, wd)]
            reused += 1
        else:
            ck = os.path.join(work, f"optuna-{seed}", f"trial-{i:04d}", "ck")
            out = subprocess.run(command(a, digits, repr(lr), repr(wd), ck), check=True,
                                 capture_output=True, text=True).stdout
            v = [json.loads(l) for l in out.splitlines() if '"type":"epoch"' in l][-1]["val_top1"]
        study.tell(t, v)
        values.append(v)
        configs.append((lr, wd))
    print(f"# optuna seed {seed}: {reused} of {a.trials} configs already run by sweep", file=sys.stderr)
    return values, configs, a.trials * a.epochs


def ray_trainable(template, checkpoints):
    """A function trainable running ddp-train and reporting its epoch records (with the
    checkpoint directory when a trial may be paused and resumed)."""
    def trainable(config):
        import ctypes, signal, subprocess, json, os, shutil
        from ray import tune
        ctx = tune.get_context()
        ck = os.path.join(ctx.get_trial_dir(), "ck")
        shutil.rmtree(ck, ignore_errors=True)
        restored = tune.get_checkpoint()
        if restored is not None:
            restored.to_directory(ck)
        cmd = [c.replace("{lr}", repr(config["lr"])).replace("{weight_decay}", repr(config["weight_decay"]))
               .replace("{trial_dir}/ck", ck) for c in template]
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        # The command dies with the thread that started it (the trial's actor stopping).
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))
        for line in proc.stdout:
            rec = json.loads(line)
            if rec.get("type") != "epoch":
                continue
            proc.send_signal(signal.SIGSTOP)  # waits while Ray decides, as a function trainable does
            tune.report({"epoch": rec["epoch"], "val_top1": rec["val_top1"]},
                        checkpoint=tune.Checkpoint.from_directory(ck) if checkpoints else None)
            proc.send_signal(signal.SIGCONT)
        if proc.wait() != 0:
            raise RuntimeError(f"ddp-train exited with {proc.returncode}")
    return trainable


def ray_tmp_dir(a):
    """Ray's session files, under the work directory."""
    return os.path.join(a.workdir, "ray-tmp")


def run_ray(method, seed, a, digits, work):
    import numpy as np
    from ray import tune
    from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, HyperBandForBOHB
    from ray.tune.search import BasicVariantGenerator
    space = {"lr": tune.loguniform(1e-3, 1.0), "weight_decay": tune.loguniform(1e-6, 1e-2)}
    np.random.seed(seed)
    if method == "ray bohb":
        from ray.tune.search.bohb import TuneBOHB
        search, sched = TuneBOHB(seed=seed), HyperBandForBOHB(time_attr="epoch", max_t=a.epochs,
                                                             reduction_factor=3)
    else:
        search = BasicVariantGenerator(random_state=seed)
        sched = (AsyncHyperBandScheduler(time_attr="epoch", max_t=a.epochs, grace_period=1,
                                         reduction_factor=3)
                 if method == "ray asha+random" else FIFOScheduler())
    tuner = tune.Tuner(
        ray_trainable(command(a, digits), method == "ray bohb"), param_space=space,
        tune_config=tune.TuneConfig(metric="val_top1", mode="max", num_samples=a.trials,
                                    search_alg=search, scheduler=sched, reuse_actors=False),
        run_config=tune.RunConfig(
            name=f"{method.replace(' ', '-')}-{seed}", storage_path=os.path.join(work, "ray"),
            verbose=0, checkpoint_config=tune.CheckpointConfig(num_to_keep=1)))
    grid = tuner.fit()
    # The grid lists the trials in the order they were made.
    rows = [r for r in grid if r.metrics and "val_top1" in r.metrics]
    if len(rows) != a.trials:
        raise RuntimeError(f"{method}: {len(rows)} of {a.trials} trials reported "
                           f"({[str(r.error) for r in grid if r.error][:1]})")
    result = ([r.metrics["val_top1"] for r in rows],
              [(r.config["lr"], r.config["weight_decay"]) for r in rows],
              sum(r.metrics["training_iteration"] for r in rows))
    # The trials' working folders in Ray's session (their checkpoints: over 2 GB a run) are not
    # needed once the results are read.
    for d in glob.glob(os.path.join(ray_tmp_dir(a), "session_latest", "artifacts", "*")):
        shutil.rmtree(d, ignore_errors=True)
    return result


def main():
    a = flags(
        trials=18, seeds=1, first_seed=0, epochs=9, max_steps=8, stem="imagenet", threads=os.cpu_count(),
        methods=",".join(METHODS), workdir=os.path.join(tempfile.gettempdir(), "shardkit-bench-sweep"),
        json=(None, "append each run's values, configs and epochs here (JSON lines); runs already there are not "
                    "run again"),
        report=(None, "print the table of the runs saved in this file, and exit"),
    ).parse_args()
    if a.report:
        runs, methods = {}, []
        for r in saved(a.report):
            a.epochs, a.max_steps, a.stem, a.trials = r["epochs_max"], r["max_steps"], r["stem"], len(r["values"])
            runs[(r["method"], r["seed"])] = (r["values"], r["configs"], r["epochs"])
            methods += [r["method"]] if r["method"] not in methods else []
        seeds = sorted({s for _, s in runs})
        # Only seeds every method finished.
        seeds = [s for s in seeds if all((m, s) in runs for m in methods)]
        report({k: v for k, v in runs.items() if k[1] in seeds}, methods, a)
        return
    methods = a.methods.split(",")
    digits = os.path.join(a.workdir, "digits")
    if not os.path.exists(os.path.join(digits, "train.bin")):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make-digits-cifar"), digits], check=True,
                       stdout=subprocess.DEVNULL)
    if any(m.startswith("ray") for m in methods):
        import logging, warnings
        import ray
        warnings.simplefilter("ignore")
        os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
        # Ray's session files under the work directory, removed at the end (each run's trial
        # folders as soon as the run is read).
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                 _temp_dir=ray_tmp_dir(a))
    seeds = range(a.first_seed, a.first_seed + a.seeds)
    # Runs already saved in --json (an interrupted benchmark run again) are not run again.
    runs = {(r["method"], r["seed"]): (r["values"], r["configs"], r["epochs"])
            for r in (saved(a.json) if a.json and os.path.exists(a.json) else [])
            if r["method"] in methods and r["seed"] in seeds}
    for seed in seeds:
        work = os.path.join(a.workdir, f"seed{seed}")
        subprocess.run(["rm", "-rf", work], check=True)
        os.makedirs(work)
        known = {}  # (lr, wd) → value of a trial run to the end by sweep's random search or TPE
        for m in methods:
            r = runs.get((m, seed))
            if r is None:
                r = run_method(m, seed, a, digits, work, known, runs)
            else:
                print(f"# seed {seed} {m}: saved in {a.json} already", file=sys.stderr, flush=True)
            if m in ("random", "tpe"):
                known.update({tuple(c): v for c, v in zip(r[1], r[0])})
        subprocess.run(["rm", "-rf", work], check=True)
    if any(m.startswith("ray") for m in methods):
        ray.shutdown()
        subprocess.run(["rm", "-rf", ray_tmp_dir(a)], check=True)
    report(runs, methods, a)


def saved(path):
    """The runs saved in a --json file."""
    return [json.loads(line) for line in open(path)]


def run_method(m, seed, a, digits, work, known, runs):
    """Runs method m for seed into runs (and --json), its trial directories removed after."""
    t0 = time.time()
    if m == "optuna tpe":
        r = run_optuna(seed, a, digits, work, known)
    elif m.startswith("ray "):
        r = run_ray(m, seed, a, digits, work)
    else:
        r = run_sweep(m, seed, a, digits, work)
    runs[(m, seed)] = r
    print(f"# seed {seed} {m}: best {max(r[0]):.2f}, {r[2]} epochs, {time.time() - t0:.0f} s",
          file=sys.stderr, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps({"method": m, "seed": seed, "epochs_max": a.epochs, "max_steps": a.max_steps, "stem": a.stem,
                                "values": r[0], "configs": r[1], "epochs": r[2]}) + "\n")
    # The method's trial directories (checkpoints: about 2 GB a method) are no longer needed: its
    # values are in `runs`.
    for entry in os.listdir(work):
        if entry != "space.json":
            subprocess.run(["rm", "-rf", os.path.join(work, entry)], check=True)
    return r


def report(runs, methods, a):
    seeds = sorted({s for _, s in runs})
    budgets = sorted({b for b in (3, 6, 9, 12, 15, 20, 30, 50, 100) if b <= a.trials} | {a.trials})
    print(f"# ddp-train on the digits, ResNet-18 ({a.stem} stem), at most {a.epochs} epochs of "
          f"{a.max_steps} steps: best val_top1 after N trials, mean over {len(seeds)} seed(s); "
          f"epochs spent")
    print(f"{'method':<16}" + "".join(f"{'N=' + str(b):>8}" for b in budgets) + f"{'epochs':>8}")
    for m in methods:
        cs = [best_so_far(runs[(m, s)][0]) for s in seeds]
        ep = sum(runs[(m, s)][2] for s in seeds) / len(seeds)
        print(f"{m:<16}" + "".join(f"{sum(c[b - 1] for c in cs) / len(cs):>8.2f}" for b in budgets)
              + f"{ep:>8.0f}")

    def close(p, q):
        return len(p) == len(q) and all(abs(x - y) <= 1e-9 * abs(y) for u, v in zip(p, q) for x, y in zip(u, v))
    for ours, theirs in (("tpe", "optuna tpe"), ("bohb", "ray bohb")):
        if ours in methods and theirs in methods:
            same = sum(close(runs[(ours, s)][1], runs[(theirs, s)][1]) for s in seeds)
            print(f"sweep's {ours} and {theirs} picked the same {a.trials} configs in {same} of "
                  f"{len(seeds)} seed(s)")


if __name__ == "__main__":
    main()
