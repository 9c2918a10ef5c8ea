"""Optuna's own TPESampler (its defaults, a seed) driven through ask and tell, for the search
crate's tests: records every suggestion and every value, so that the Rust sampler can be fed the
same history and its suggestions compared.

  python optuna_tpe.py CASES.json

Each case: {"seed": N, "mode": "min"|"max", "space": [dim, ...], "ops": [op, ...],
"round": digits or null}. A dim is {"kind": "float", "low", "high", "log", "step"},
{"kind": "int", "low", "high"} or {"kind": "cat", "n"}; parameters are named p00, p01, ... (the
order Optuna sorts them in). An op is ["ask"], ["tell", k] (trial k finishes with the objective
of its parameters, rounded to "round" digits when given, so that values tie) or ["fail", k].
Prints per case {"asked": [[internal values...], ...], "values": [value per tell, in order]}.

The Parzen estimator's kernel widths depend on the order np.argsort gives equal observations
(a stepped or integer parameter tried twice): numpy's default sort is not stable and on x86 it
is a SIMD sorting network whose order for ties depends on the CPU. The estimator's argsort is
made stable here (equal values in trial order), the order the Rust sampler uses.
"""
import json
import math
import sys

import types

import numpy as np
import optuna
import optuna.samplers._tpe.parzen_estimator as parzen_estimator
from optuna.trial import TrialState

_np = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
_np.argsort = lambda a, *args, **kwargs: np.argsort(a, kind="stable")
parzen_estimator.np = _np

optuna.logging.set_verbosity(optuna.logging.ERROR)


def suggest(trial, i, d):
    name = "p%02d" % i
    if d["kind"] == "float":
        return trial.suggest_float(name, d["low"], d["high"], log=d["log"], step=d["step"])
    if d["kind"] == "int":
        return trial.suggest_int(name, d["low"], d["high"])
    return trial.suggest_categorical(name, list(range(d["n"])))


def objective(space, params):
    f = 0.0
    for i, (d, x) in enumerate(zip(space, params)):
        if d["kind"] == "cat":
            u = x / max(d["n"] - 1, 1)
        elif d.get("log"):
            u = (math.log(x) - math.log(d["low"])) / (math.log(d["high"]) - math.log(d["low"]))
        else:
            u = (x - d["low"]) / (d["high"] - d["low"])
        f += (i + 1) * (u - 0.3 - 0.1 * i) ** 2 + 0.05 * math.sin(17.0 * u)
    return f


def run(case):
    direction = "minimize" if case["mode"] == "min" else "maximize"
    study = optuna.create_study(direction=direction, sampler=optuna.samplers.TPESampler(seed=case["seed"]))
    space = case["space"]
    trials, asked, values = [], [], []
    for op in case["ops"]:
        if op[0] == "ask":
            t = study.ask()
            params = [suggest(t, i, d) for i, d in enumerate(space)]
            trials.append((t, params))
            asked.append([float(p) for p in params])
        elif op[0] == "tell":
            t, params = trials[op[1]]
            v = objective(space, params)
            if case.get("round") is not None:
                v = round(v, case["round"])
            study.tell(t, v)
            values.append(v)
        else:
            study.tell(trials[op[1]][0], state=TrialState.FAIL)
    return {"asked": asked, "values": values}


def main():
    cases = json.load(open(sys.argv[1]))
    json.dump([run(c) for c in cases], sys.stdout)


if __name__ == "__main__":
    main()
